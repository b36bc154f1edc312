/*
 * store.c — the trainer's parameter store: the local row source
 * (ops/rowsrc/local.c: one table per distinct row width, RAM and SSD tiers)
 * made from the job, the keys that changed since the last serving export
 * (delta tracking), and the exports themselves.
 *
 * Rows reach the step through the row source (tr->rows.src: the local
 * store, or in a multi-process job the remote shards over it); exports,
 * delta tracking and checkpoints work on the local tables directly
 * (st_rowsrc_local_table).
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ops/rowsrc/local.h"
#include "ops/train/trainer_internal.h"
#include "ops/train/view.h"
#include "ops/view/export.h"
#include "runtime/err.h"

static void on_evict(void *arg, int k, uint64_t key);

int st__trainer_store_create(st_trainer_t *tr, const st_job_t *job)
{
	const st_model_cfg_t *mc = &job->model;
	const char *type = mc->type ? mc->type : "lr";
	int rc;
	/* One table per distinct row width. New rows: uniform(-s, s) from
	 * (seed, key). The neural presets need nonzero embeddings to break
	 * symmetry; a job that leaves init_scale at 0 gets 0.05 there. */
	float scale = (float)mc->init_scale;
	if (!(scale > 0) && tr->mean_loss)
		scale = 0.05f;
	if (!strcmp(type, "lr") || tr->sopt.kind == ST_OPT_FTRL)
		scale = 0.0f;   /* FTRL's closed form assumes rows start at w = 0 */
	int *tdim = tr->rows.tdim, nslots[MAX_TABLES] = { 0 }, nkeys[MAX_TABLES] = { 0 };
	st_table_opts_t base[MAX_TABLES];
	tr->rows.slot_table = calloc((size_t)tr->n_slots, sizeof(int));
	if (!tr->rows.slot_table)
		return ST_ENOMEM;
	tr->rows.prec = job->row_prec;
	for (int s = 0; s < tr->n_slots; s++) {
		int rd = st_model_row_dim(tr->model, s), t;
		for (t = 0; t < tr->rows.n_tables && tdim[t] != rd; t++)
			;
		if (t == tr->rows.n_tables) {
			if (t == MAX_TABLES) {
				st_error("model %s: at most %d distinct slot dims", type, MAX_TABLES);
				return ST_EJOB;
			}
			base[t] = (st_table_opts_t){
				.dim = (uint32_t)rd,
				.state_dim = (uint32_t)st_optim_state_floats(&tr->sopt, (size_t)rd),
				.seed = job->seed + (uint64_t)t,
				.row_prec = job->row_prec,
				.init_scale = scale,
				.state_init = (tr->sopt.kind == ST_OPT_ADAGRAD ||
					       tr->sopt.kind == ST_OPT_ADAGRAD_ROW) ? tr->sopt.init_accum
										 : 0.0f,
				.n_shards = 64,
				.admit_min_count = (uint32_t)(mc->admit_min_count > 0
							      ? mc->admit_min_count : 0),
				.admit_prob = mc->admit_prob,
			};
			tdim[t] = rd;
			tr->rows.tstate[t] = (int)base[t].state_dim;
			tr->rows.n_tables++;
		}
		tr->rows.slot_table[s] = t;
		nslots[t]++;
		/* a list field with max_len brings up to max_len keys a row */
		const st_slot_opt_t *so = job->train.slot_opt && s < job->train.n_slots
			? &job->train.slot_opt[s] : NULL;
		nkeys[t] += so && so->list_sep && so->max_len > 1 ? (int)so->max_len : 1;
	}

	/* TTL (model.ttl) counts batches: the store's clock is the batch
	 * sequence number that pull stamps on every row it resolves. Rows of
	 * batches still in flight were stamped with a later or nearly equal
	 * number, so a TTL larger than the batches that can be in flight at once
	 * never evicts a row a batch still uses (push runs the sweep, in batch
	 * order). Sweeps scan every row, so they run every ttl/8 batches: a row
	 * goes between ttl and ttl + ttl/8 batches after its last use. */
	uint32_t ttl32 = 0;
	if (mc->ttl_steps > 0) {
		uint64_t inflight = 8;
		const st_stage_cfg_t *sc[] = { &job->read, &job->pull, &job->train_stage,
					       &job->push, &job->dump };
		for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++)
			inflight += (uint64_t)(sc[i]->queue > 0 ? sc[i]->queue : 0) +
				    (uint64_t)(sc[i]->threads > 0 ? sc[i]->threads : 0);
		uint64_t ttl = mc->ttl_steps;
		if (ttl < inflight) {
			st_warn("model.ttl = %llu batches is shorter than the %llu batches that can "
				"be in flight; using %llu", (unsigned long long)ttl,
				(unsigned long long)inflight, (unsigned long long)inflight);
			ttl = inflight;
		}
		ttl32 = ttl > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)ttl;
	}
	st_rowsrc_local_cfg_t lc = {
		.n_tables = tr->rows.n_tables, .tables = base, .slots = nslots, .keys = nkeys,
		.ttl = ttl32,
		.mem_bytes = job->mem_bytes, .batch_size = job->batch_size,
		.ssd_path = job->ssd_path, .ssd_bytes = job->ssd_bytes,
		.ssd_file_bytes = job->ssd_file_bytes, .ssd_queue_depth = job->ssd_queue_depth,
		.ssd_read = job->ssd_read, .ssd_lru = job->ssd_lru,
		.on_evict = on_evict, .evict_arg = tr,
	};
	if ((rc = st_rowsrc_local_create(&tr->rows.local, &lc)) < 0)
		return rc;
	tr->rows.src = tr->rows.local;
	return ST_OK;
}

st_table_t *st__trainer_table(const st_trainer_t *tr, int k)
{
	return tr->rows.local ? st_rowsrc_local_table(tr->rows.local, k) : NULL;
}


/* ---- delta tracking ------------------------------------------------------ */

/* Delta tracking must never lose a key quietly: a key missing from the sets
 * is a row missing from the next delta export, and a predictor applying the
 * deltas would serve a stale row forever. So a key that cannot be recorded
 * (out of memory) fails the batch that brought it, sets track_err, and from
 * then on every delta is refused until a full export (which needs no key
 * list) starts over. The export copies the sets and empties them only once
 * the export is published, so a failed export keeps them for the next. */

long st__trainer_keyset_fail_after = -1;

/* The one allocator of the key sets' memory, with the test hook of
 * trainer_internal.h. */
static void *keyset_alloc(size_t n, size_t size)
{
	long v = __atomic_load_n(&st__trainer_keyset_fail_after, __ATOMIC_RELAXED);
	while (v > 0 && !__atomic_compare_exchange_n(&st__trainer_keyset_fail_after, &v, v - 1, 0,
						     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	if (v == 0)
		return NULL;
	return calloc(n, size);
}

/* Adds key. ST_OK, or ST_ENOMEM with the set unchanged. */
static int keyset_add(st_keyset_t *s, uint64_t key)
{
	if (key == 0) {
		s->n += !s->has_zero;
		s->has_zero = 1;
		return ST_OK;
	}
	if ((s->n + 1) * 2 > s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 1024;
		uint64_t *nk = keyset_alloc(nc, sizeof *nk);
		if (!nk)
			return ST_ENOMEM;
		for (size_t i = 0; i < s->cap; i++)
			if (s->k[i]) {
				size_t j = mix64(s->k[i]) & (nc - 1);
				while (nk[j])
					j = (j + 1) & (nc - 1);
				nk[j] = s->k[i];
			}
		free(s->k);
		s->k = nk;
		s->cap = nc;
	}
	size_t j = mix64(key) & (s->cap - 1);
	while (s->k[j] && s->k[j] != key)
		j = (j + 1) & (s->cap - 1);
	if (!s->k[j]) {
		s->k[j] = key;
		s->n++;
	}
	return ST_OK;
}

/* Copies the set's s->n keys into out. */
static void keyset_copy(const st_keyset_t *s, uint64_t *out)
{
	size_t m = 0;
	if (s->has_zero)
		out[m++] = 0;
	for (size_t i = 0; i < s->cap; i++)
		if (s->k[i])
			out[m++] = s->k[i];
	assert(m == s->n);
}

static void keyset_clear(st_keyset_t *s)
{
	free(s->k);
	memset(s, 0, sizeof *s);
}

int st__trainer_track_batch(st_trainer_t *tr, const st_batch_t *b, const uint8_t *utable)
{
	if (b->eval || !__atomic_load_n(&tr->track.on, __ATOMIC_ACQUIRE))
		return ST_OK;
	float *const *rows = b->rows;
	pthread_mutex_lock(&tr->track.mu);
	int rc = tr->track.err;
	for (uint32_t u = 0; u < b->n_uniq && rc >= 0; u++)
		if (rows[u])
			rc = keyset_add(&tr->track.touched[utable[u]], b->uniq[u]);
	if (rc < 0)
		tr->track.err = rc;
	pthread_mutex_unlock(&tr->track.mu);
	return rc;
}

int st__trainer_track_error(st_trainer_t *tr)
{
	pthread_mutex_lock(&tr->track.mu);
	int rc = tr->track.err;
	pthread_mutex_unlock(&tr->track.mu);
	return rc;
}

/* The local store's on_evict hook (TTL sweeps): under the table's shard
 * lock; takes only track.mu, which is never held while calling into a
 * table. It cannot fail the sweep, so a key it cannot record sets
 * track.err, which push reports right after the sweep
 * (st__trainer_track_error). */
static void on_evict(void *arg, int k, uint64_t key)
{
	st_trainer_t *tr = arg;
	pthread_mutex_lock(&tr->track.mu);
	if (tr->track.on && tr->track.err >= 0) {
		int rc = keyset_add(&tr->track.evicted[k], key);
		if (rc < 0)
			tr->track.err = rc;
	}
	pthread_mutex_unlock(&tr->track.mu);
}

size_t st__trainer_delta_keys(st_trainer_t *tr, int k)
{
	pthread_mutex_lock(&tr->track.mu);
	size_t n = k >= 0 && k < MAX_TABLES ? tr->track.touched[k].n : 0;
	pthread_mutex_unlock(&tr->track.mu);
	return n;
}

void st__trainer_track_free(st_trainer_t *tr)
{
	for (int k = 0; k < MAX_TABLES; k++) {
		free(tr->track.touched[k].k);
		free(tr->track.evicted[k].k);
	}
}

const char *st_trainer_lineage(const st_trainer_t *tr)
{
	return tr->track.lineage;
}

void st_trainer_set_lineage(st_trainer_t *tr, const char *id)
{
	snprintf(tr->track.lineage, sizeof tr->track.lineage, "%s", id ? id : "");
}

void st_trainer_new_lineage(st_trainer_t *tr)
{
	/* 64 random bits: two runs that share an export directory must not
	 * draw the same id. The kernel's generator; if it is unavailable, the
	 * clock, the pid and the trainer's address mixed, which still differ
	 * between runs. */
	uint64_t r = 0;
	if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		r = mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
		    mix64((uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)tr);
	}
	snprintf(tr->track.lineage, sizeof tr->track.lineage, "%016" PRIx64, r);
}

int st__trainer_track_take(st_trainer_t *tr, int delta, int *as_delta, st_export_keys_t *keys,
			   uint64_t **arr, char *err, size_t errlen)
{
	pthread_mutex_lock(&tr->track.mu);
	const int was = tr->track.on;
	const int lost = tr->track.err;
	/* From the first export on, every change is tracked. */
	__atomic_store_n(&tr->track.on, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&tr->track.mu);
	*as_delta = delta && was;
	for (int k = 0; k < 2 * tr->rows.n_tables; k++)
		arr[k] = NULL;
	if (*as_delta && lost < 0) {
		snprintf(err, errlen, "a key changed since the last export could not be recorded "
			 "(%s): a delta would miss its row; only a full export can follow",
			 st_strerror(lost));
		return lost;
	}
	int rc = ST_OK;
	pthread_mutex_lock(&tr->track.mu);
	for (int k = 0; *as_delta && k < tr->rows.n_tables; k++) {
		keys[k].n_touched = tr->track.touched[k].n;
		keys[k].n_deleted = tr->track.evicted[k].n;
		arr[2 * k] = keyset_alloc(keys[k].n_touched + 1, sizeof(uint64_t));
		arr[2 * k + 1] = keyset_alloc(keys[k].n_deleted + 1, sizeof(uint64_t));
		if (!arr[2 * k] || !arr[2 * k + 1]) {
			snprintf(err, errlen, "out of memory listing the %zu keys of table %d changed "
				 "since the last export (they are kept for the next export)",
				 keys[k].n_touched + keys[k].n_deleted, k);
			rc = ST_ENOMEM;
			break;
		}
		keyset_copy(&tr->track.touched[k], arr[2 * k]);
		keyset_copy(&tr->track.evicted[k], arr[2 * k + 1]);
		keys[k].touched = arr[2 * k];
		keys[k].deleted = arr[2 * k + 1];
	}
	pthread_mutex_unlock(&tr->track.mu);
	return rc;
}

void st__trainer_track_reset(st_trainer_t *tr)
{
	pthread_mutex_lock(&tr->track.mu);
	for (int k = 0; k < tr->rows.n_tables; k++) {
		keyset_clear(&tr->track.touched[k]);
		keyset_clear(&tr->track.evicted[k]);
	}
	tr->track.err = ST_OK;
	pthread_mutex_unlock(&tr->track.mu);
}

int st_trainer_export(st_trainer_t *tr, const st_job_t *job, const char *root, uint64_t seq,
		      int delta, int keep, char *err, size_t errlen)
{
	st_export_keys_t keys[MAX_TABLES];
	uint64_t *arr[2 * MAX_TABLES];
	int as_delta;
	int rc = st__trainer_track_take(tr, delta, &as_delta, keys, arr, err, errlen);
	if (rc >= 0) {
		st_export_delta_t d = { .n_tables = tr->rows.n_tables, .tables = keys };
		st_view_t v;
		if ((rc = st_trainer_view(tr, job, &v)) < 0)
			snprintf(err, errlen, "export %llu: the job's shape is not the trainer's",
				 (unsigned long long)seq);
		else
			rc = st_export_write(&v, root, seq, (int64_t)tr->batches,
					     as_delta ? &d : NULL, keep, err, errlen);
	}
	/* Written: the next delta starts from here (after a full export, also
	 * when keys were lost before it). Not written: the changes still belong
	 * to the next export. */
	if (rc >= 0)
		st__trainer_track_reset(tr);
	for (int k = 0; k < 2 * tr->rows.n_tables; k++)
		free(arr[k]);
	return rc;
}
