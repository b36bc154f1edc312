/*
 * store.c — the trainer's parameter store: one host table per distinct row
 * width, and, when the job has storage.ssd, the RAM tier of each table as a
 * cache over its own SSD tier (runtime/store/cache.c, ssd.c;
 * hierarchical-gpu-parameter-server.md Sections 5-6).
 *
 * Budget. storage.mem is split over the tables in proportion to the bytes
 * their slots' rows take (row bytes x slots), and turned into a row count
 * per table from the RAM bytes of a cached row (floats, metadata, cache
 * words, index). The SSD tier's own index (the cold map, about 28 bytes per
 * row on SSD) is not part of the budget; it is reported as ssd.index_mb.
 *
 * Files. Each table's SSD tier lives in <ssd.path>/strata-store/t<k>/,
 * started fresh for every run (the store is the run's working memory, not a
 * checkpoint; checkpoints are the dump stage's) and removed at the end by
 * the tier itself (remove_on_close), while it still holds the directory's
 * lock. The lock (runtime/store/ssd.h) makes a second job on the same
 * ssd.path fail at its first table with ST_EBUSY before it wipes anything;
 * so only a table this trainer opened is ever removed, never a directory
 * another job is using.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ops/train/trainer_internal.h"
#include "ops/train/view.h"
#include "ops/view/export.h"
#include "runtime/err.h"

static void on_evict(void *arg, uint64_t key);

/* RAM bytes of one cached row besides its floats: metadata 16, cache words
 * 16, index about 7. */
#define ROW_OVERHEAD 39

static int read_mode(const char *s)
{
	if (s && !strcmp(s, "block"))
		return ST_SSD_READ_BLOCK;
	if (s && !strcmp(s, "file"))
		return ST_SSD_READ_FILE;
	return ST_SSD_READ_AUTO;
}

/* Creates <path>/strata-store; refuses a path that is missing, not a
 * directory or not writable, naming it. */
static int store_root(const st_job_t *job, char *root, size_t n)
{
	struct stat sb;
	if (stat(job->ssd_path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		st_error("storage.ssd.path %s: %s", job->ssd_path,
			 stat(job->ssd_path, &sb) != 0 ? strerror(errno) : "not a directory");
		return ST_EJOB;
	}
	if (access(job->ssd_path, W_OK | X_OK) != 0) {
		st_error("storage.ssd.path %s: not writable (%s)", job->ssd_path, strerror(errno));
		return ST_EJOB;
	}
	snprintf(root, n, "%s/strata-store", job->ssd_path);
	if (mkdir(root, 0755) != 0 && errno != EEXIST) {
		st_error("storage.ssd.path: cannot create %s: %s", root, strerror(errno));
		return ST_EJOB;
	}
	return ST_OK;
}

int st__trainer_tables_create(st_trainer_t *tr, const st_job_t *job, const int *tdim,
			      const st_table_opts_t *base)
{
	int nslots[MAX_TABLES] = { 0 };
	for (int s = 0; s < tr->n_slots; s++)
		nslots[tr->slot_table[s]]++;
	uint64_t total_w = 0, row_b[MAX_TABLES];
	for (int t = 0; t < tr->n_tables; t++) {
		size_t floats = (size_t)base[t].dim + base[t].state_dim;
		row_b[t] = floats * sizeof(float) + ROW_OVERHEAD;
		total_w += row_b[t] * (uint64_t)nslots[t];
	}
	const int cached = job->ssd_path != NULL;
	uint64_t cache_rows[MAX_TABLES] = { 0 };
	if (cached && !job->mem_bytes) {
		st_error("storage.ssd needs storage.mem: the RAM budget decides which rows go "
			 "to SSD");
		return ST_EJOB;
	}
	for (int t = 0; cached && t < tr->n_tables; t++) {
		double share = (double)row_b[t] * nslots[t] / (double)total_w;
		cache_rows[t] = (uint64_t)((double)job->mem_bytes * share) / row_b[t];
		/* One batch may touch batch_size rows of each of the table's
		 * slots; fewer rows than that cannot hold the working set (the
		 * paper's pinned working parameters, Appendix D). */
		uint64_t need = (uint64_t)job->batch_size * (uint64_t)nslots[t];
		if (cache_rows[t] < need) {
			st_error("storage.mem = %.1f MiB holds %llu rows of table %d (%llu bytes each), "
				 "fewer than one batch can use (batch_size %d x %d slots = %llu rows): "
				 "raise storage.mem to at least %.1f MiB or lower "
				 "stages.read.batch_size",
				 (double)job->mem_bytes / 1048576.0,
				 (unsigned long long)cache_rows[t], t, (unsigned long long)row_b[t],
				 job->batch_size, nslots[t], (unsigned long long)need,
				 (double)need * (double)total_w / nslots[t] / 1048576.0);
			return ST_EJOB;
		}
	}
	char root[4096];
	if (cached) {
		int rc = store_root(job, root, sizeof root);
		if (rc < 0)
			return rc;
		snprintf(tr->store_root, sizeof tr->store_root, "%s", root);
	}
	for (int t = 0; t < tr->n_tables; t++) {
		st_table_opts_t to = base[t];
		tr->tdim[t] = (int)base[t].dim;
		tr->evict_ctx[t] = (st_evict_ctx_t){ tr, t };
		to.on_evict = on_evict;
		to.evict_arg = &tr->evict_ctx[t];
		tr->tstate[t] = (int)base[t].state_dim;
		st_ssd_opts_t so;
		char dir[4200];
		if (cached) {
			to.cache_rows = cache_rows[t];
			/* Shards of at least ~256 rows, so that each shard's LRU and
			 * LFU segments are long enough to mean something. */
			uint32_t ns = 64;
			while (ns > 1 && to.cache_rows / ns < 256)
				ns /= 2;
			to.n_shards = ns;
			to.lru_frac = job->ssd_lru;
			snprintf(dir, sizeof dir, "%s/t%d", root, t);
			so = (st_ssd_opts_t){
				.dir = dir,
				.payload_bytes = (uint32_t)((to.dim + to.state_dim + 2) * sizeof(float)),
				.file_bytes = job->ssd_file_bytes,
				.queue_depth = (uint32_t)job->ssd_queue_depth,
				.budget_bytes = job->ssd_bytes / (uint64_t)tr->n_tables,
				.read_mode = read_mode(job->ssd_read),
				.fresh = 1,
				.remove_on_close = 1,
			};
			to.ssd = &so;
		}
		int rc = st_table_create(&tr->tables[t], &to);
		if (rc < 0) {
			if (rc == ST_EINVAL)
				st_error("table %d (dim %d): invalid settings", t, tdim[t]);
			if (rc == ST_EBUSY)
				st_error("storage.ssd.path %s is in use by another strata job "
					 "(see above): two jobs on one path would overwrite each "
					 "other's rows. Give each job (and each process of a "
					 "multi-process job) its own storage.ssd.path; nothing was "
					 "trained", job->ssd_path);
			return rc;
		}
	}
	return ST_OK;
}

void st__trainer_tables_destroy(st_trainer_t *tr)
{
	/* A table's SSD tier removes its own directory on close. The root
	 * stays while another job's tiers are in it (rmdir fails). */
	for (int i = 0; i < tr->n_tables; i++) {
		st_table_destroy(tr->tables[i]);
		tr->tables[i] = NULL;
	}
	if (tr->store_root[0])
		rmdir(tr->store_root);
}

void st__trainer_store_metrics(st_trainer_t *tr)
{
	uint64_t rows = 0, rejected = 0;
	st_table_stats_t sum = { 0 };
	st_ssd_stats_t ss = { 0 };
	uint64_t live_bytes = 0;
	for (int i = 0; i < tr->n_tables; i++) {
		st_table_stats_t ts;
		st_table_stats(tr->tables[i], &ts);
		rows += ts.rows + ts.cold_rows;
		rejected += ts.rejected;
		sum.hits_lru += ts.hits_lru;
		sum.hits_lfu += ts.hits_lfu;
		sum.loads += ts.loads;
		sum.misses += ts.misses;
		sum.spilled += ts.spilled;
		sum.cold_rows += ts.cold_rows;
		sum.rows += ts.rows;
		sum.over_budget += ts.over_budget;
		st_ssd_t *ssd = st_table_ssd(tr->tables[i]);
		if (ssd) {
			st_ssd_stats_t x;
			st_ssd_stats(ssd, &x);
			ss.disk_bytes += x.disk_bytes;
			ss.live_records += x.live_records;
			ss.bytes_read += x.bytes_read;
			ss.read_ios += x.read_ios;
			ss.read_records += x.read_records;
			ss.bytes_written += x.bytes_written;
			ss.compact_seconds += x.compact_seconds;
			ss.record_bytes = x.record_bytes;
			ss.stale_records += x.stale_records;
			live_bytes += x.live_records * x.record_bytes;
		}
	}
	st_metrics_t *m = tr->metrics;
	st_metrics_set(m, "rows", (double)rows);
	if (rejected)
		st_metrics_set(m, "not_admitted", (double)rejected);
	if (!tr->store_root[0])
		return;
	double look = (double)(sum.hits_lru + sum.hits_lfu + sum.loads + sum.misses);
	st_metrics_set(m, "cache.rows_ram", (double)sum.rows);
	st_metrics_set(m, "cache.rows_ssd", (double)sum.cold_rows);
	if (look > 0) {
		st_metrics_set(m, "cache.hit", (double)(sum.hits_lru + sum.hits_lfu) / look);
		st_metrics_set(m, "cache.hit_lru", (double)sum.hits_lru / look);
		st_metrics_set(m, "cache.hit_lfu", (double)sum.hits_lfu / look);
		st_metrics_set(m, "cache.ssd_load", (double)sum.loads / look);
	}
	st_metrics_set(m, "ssd.rows_read", (double)sum.loads);
	st_metrics_set(m, "ssd.rows_written", (double)sum.spilled);
	st_metrics_set(m, "ssd.read_mb", (double)ss.bytes_read / 1e6);
	st_metrics_set(m, "ssd.read_ios", (double)ss.read_ios);
	st_metrics_set(m, "ssd.write_mb", (double)ss.bytes_written / 1e6);
	if (ss.read_records)
		st_metrics_set(m, "ssd.read_amp", (double)ss.bytes_read /
				   ((double)ss.read_records * ss.record_bytes));
	st_metrics_set(m, "ssd.disk_mb", (double)ss.disk_bytes / 1e6);
	st_metrics_set(m, "ssd.live_mb", (double)live_bytes / 1e6);
	st_metrics_set(m, "ssd.index_mb", (double)sum.cold_rows * 28.0 / 1e6);
	st_metrics_set(m, "ssd.compact_s", ss.compact_seconds);
	if (sum.over_budget && !tr->over_warned) {
		st_warn("the RAM tier went over storage.mem: every row it could evict was pinned by "
			"batches in flight (lower stages.*.queue or raise storage.mem)");
		tr->over_warned = 1;
	}
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

int st__trainer_track_batch(st_trainer_t *tr, const st_batch_t *b, const uint16_t *uslot)
{
	if (b->eval || !__atomic_load_n(&tr->track, __ATOMIC_ACQUIRE))
		return ST_OK;
	float *const *rows = b->rows;
	pthread_mutex_lock(&tr->track_mu);
	int rc = tr->track_err;
	for (uint32_t u = 0; u < b->n_uniq && rc >= 0; u++)
		if (rows[u])
			rc = keyset_add(&tr->touched[tr->n_tables == 1 ? 0 : tr->slot_table[uslot[u]]],
					b->uniq[u]);
	if (rc < 0)
		tr->track_err = rc;
	pthread_mutex_unlock(&tr->track_mu);
	return rc;
}

int st__trainer_track_error(st_trainer_t *tr)
{
	pthread_mutex_lock(&tr->track_mu);
	int rc = tr->track_err;
	pthread_mutex_unlock(&tr->track_mu);
	return rc;
}

/* A table's on_evict hook (TTL): under the table's shard lock; takes only
 * track_mu, which is never held while calling into a table. It cannot fail
 * the sweep, so a key it cannot record sets track_err, which push reports
 * right after the sweep (st__trainer_track_error). */
static void on_evict(void *arg, uint64_t key)
{
	st_trainer_t *tr = ((st_evict_ctx_t *)arg)->tr;
	int k = ((st_evict_ctx_t *)arg)->k;
	pthread_mutex_lock(&tr->track_mu);
	if (tr->track && tr->track_err >= 0) {
		int rc = keyset_add(&tr->evicted[k], key);
		if (rc < 0)
			tr->track_err = rc;
	}
	pthread_mutex_unlock(&tr->track_mu);
}

void st__trainer_track_free(st_trainer_t *tr)
{
	for (int k = 0; k < MAX_TABLES; k++) {
		free(tr->touched[k].k);
		free(tr->evicted[k].k);
	}
}

const char *st_trainer_lineage(const st_trainer_t *tr)
{
	return tr->lineage;
}

void st_trainer_set_lineage(st_trainer_t *tr, const char *id)
{
	snprintf(tr->lineage, sizeof tr->lineage, "%s", id ? id : "");
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
	snprintf(tr->lineage, sizeof tr->lineage, "%016" PRIx64, r);
}

int st_trainer_export(st_trainer_t *tr, const st_job_t *job, const char *root, uint64_t seq,
		      int delta, int keep, char *err, size_t errlen)
{
	pthread_mutex_lock(&tr->track_mu);
	const int was = tr->track;
	const int lost = tr->track_err;
	/* From the first export on, every change is tracked. */
	__atomic_store_n(&tr->track, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&tr->track_mu);
	const int as_delta = delta && was;
	if (as_delta && lost < 0) {
		snprintf(err, errlen, "a key changed since the last export could not be recorded "
			 "(%s): a delta would miss its row; only a full export can follow",
			 st_strerror(lost));
		return lost;
	}
	st_export_keys_t keys[MAX_TABLES];
	uint64_t *arr[2 * MAX_TABLES] = { 0 };
	int rc = ST_OK;
	pthread_mutex_lock(&tr->track_mu);
	for (int k = 0; as_delta && k < tr->n_tables; k++) {
		keys[k].n_touched = tr->touched[k].n;
		keys[k].n_deleted = tr->evicted[k].n;
		arr[2 * k] = keyset_alloc(keys[k].n_touched + 1, sizeof(uint64_t));
		arr[2 * k + 1] = keyset_alloc(keys[k].n_deleted + 1, sizeof(uint64_t));
		if (!arr[2 * k] || !arr[2 * k + 1]) {
			snprintf(err, errlen, "out of memory listing the %zu keys of table %d changed "
				 "since the last export (they are kept for the next export)",
				 keys[k].n_touched + keys[k].n_deleted, k);
			rc = ST_ENOMEM;
			break;
		}
		keyset_copy(&tr->touched[k], arr[2 * k]);
		keyset_copy(&tr->evicted[k], arr[2 * k + 1]);
		keys[k].touched = arr[2 * k];
		keys[k].deleted = arr[2 * k + 1];
	}
	pthread_mutex_unlock(&tr->track_mu);
	if (rc >= 0) {
		st_export_delta_t d = { .n_tables = tr->n_tables, .tables = keys };
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
	if (rc >= 0) {
		pthread_mutex_lock(&tr->track_mu);
		for (int k = 0; k < tr->n_tables; k++) {
			keyset_clear(&tr->touched[k]);
			keyset_clear(&tr->evicted[k]);
		}
		tr->track_err = ST_OK;
		pthread_mutex_unlock(&tr->track_mu);
	}
	for (int k = 0; k < 2 * tr->n_tables; k++)
		free(arr[k]);
	return rc;
}
