/*
 * checkpoint.c — the trainer's checkpoints and resume (DESIGN.md,
 * "Checkpoints, export, online learning"; formats in docs/formats.md).
 *
 * Consistency. A checkpoint holds the state after batch k and nothing of
 * batch k+1: pull-sparse decides, when it pulls batch k, that k ends a
 * checkpoint interval (every N batches or T seconds), marks the batch and
 * closes a gate that holds the pull of every later batch. When batch k
 * reaches the dump stage every earlier batch has been trained and pushed
 * and no later one has been pulled (so no row is being created, loaded or
 * updated): dump copies the state (st_trainer_snapshot), opens the gate —
 * training resumes — and writes the copy while training runs. The stall is
 * the pipeline draining plus the copy, not the write.
 *
 * Memory. The copy is as large as the tables. Where the job sets no memory
 * bound and has no SSD tier, the trainer keeps the copy's memory after the
 * write (tr->snap_spare) and the next checkpoint copies into it: the pages
 * are mapped already, where a fresh copy faulted in and zeroed every page
 * inside the stall. After the write the kept copy also makes room for as
 * many new rows as the tables grew in the last interval, while training
 * runs. The kept copy goes at st_trainer_cancel / st_trainer_destroy.
 *
 * Threads: the dump stage's thread copies and writes (rows.c adds a writer
 * thread for the duration of a file); resume restores each table from the
 * calling thread and one st-resume-1 helper (load_rows).
 *
 * Contents. dense.safetensors: every model tensor under its PyTorch name,
 * plus "optim.dense_state" (the dense optimizer's moments, flat); one
 * table-<k>.rows per table with every row of both tiers (RAM and SSD) with
 * its optimizer state, last step and use count; manifest.yaml: job name and
 * hash, the model description, step (batches done), the data position
 * (file cursor and records into that file, exact with one read thread),
 * the policy and its counters (dense optimizer steps, global steps,
 * examples), and the seed.
 *
 * Not in a checkpoint: admission candidates (keys counted towards
 * min_count but not admitted yet; they start counting again), the
 * progressive AUC, and the private replicas of kstep and shadow (they
 * restart from the shared parameters; the other policies have no state
 * across batch boundaries beyond the shared dense state).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ops/dump/ckpt.h"
#include "ops/train/checkpoint.h"
#include "ops/train/trainer_internal.h"
#include "runtime/err.h"

struct st_trainer_snap {
	int64_t step;
	uint64_t src_file, src_rec, examples;
	int64_t phase;               /* -1: the job has no phases */
	uint64_t pass_batches, pass_examples; /* of the current pass (phase) */
	int pass_done;
	float *params;
	size_t nparams;
	float *dstate;
	size_t ndstate;
	uint64_t dt, gstep;
	int n_tables;
	st_rows_writer_t *rows[MAX_TABLES];
	/* Rows of each table in the copy this snapshot's memory held before
	 * (NO_PREV: none), to guess how much the next copy grows. */
	size_t prev_rows[MAX_TABLES];
};

#define NO_PREV SIZE_MAX

/* ---- the job's identity ------------------------------------------------ */

static void put(char **s, size_t *len, size_t *cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void put(char **s, size_t *len, size_t *cap, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(*s + *len, *cap - *len, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < *cap - *len) {
			*len += (size_t)n;
			return;
		}
		*cap = *cap * 2 + (size_t)(n > 0 ? n : 64);
		char *ns = realloc(*s, *cap);
		if (!ns)
			st_die("out of memory describing the model");
		*s = ns;
	}
}

char *st_trainer_model_desc(const st_job_t *job)
{
	const st_model_cfg_t *m = &job->model;
	size_t len = 0, cap = 256;
	char *s = st_xmalloc(cap);
	s[0] = 0;
	put(&s, &len, &cap, "type=%s emb_dim=%d dense=%d slots=%d", m->type ? m->type : "lr",
	    m->emb_dim, job->train.n_dense, job->train.n_slots);
	if (m->n_slot_dims) {
		put(&s, &len, &cap, " slot_dims=");
		for (int i = 0; i < m->n_slot_dims; i++)
			put(&s, &len, &cap, "%s%d", i ? "," : "", m->slot_dims[i]);
	}
	put(&s, &len, &cap, " hidden=");
	for (int i = 0; i < m->n_hidden; i++)
		put(&s, &len, &cap, "%s%d", i ? "," : "", m->hidden[i]);
	if (m->n_bottom) {
		put(&s, &len, &cap, " bottom=");
		for (int i = 0; i < m->n_bottom; i++)
			put(&s, &len, &cap, "%s%d", i ? "," : "", m->bottom[i]);
	}
	put(&s, &len, &cap, " activation=%s pooling=%s dense_transform=%s sparse_opt=%s dense_opt=%s",
	    m->activation ? m->activation : "relu", m->pooling ? m->pooling : "sum",
	    m->dense_transform ? m->dense_transform : "log1p",
	    m->sparse_opt.name ? m->sparse_opt.name : "-",
	    m->dense_opt.name ? m->dense_opt.name : "-");
	return s;
}

void st_trainer_job_hash(const st_job_t *job, char out[17])
{
	char *d = st_trainer_model_desc(job);
	XXH64_hash_t h = XXH3_64bits_withSeed(d, strlen(d), job->seed);
	snprintf(out, 17, "%016" PRIx64, (uint64_t)h);
	free(d);
}

/* ---- gate (pull side) -------------------------------------------------- */

static double mono(void);

void st__trainer_ckpt_gate(st_trainer_t *tr, st_batch_t *b, st_graph_t *g)
{
	if (b->eval || (!tr->ckpt_every && !(tr->ckpt_secs > 0)))
		return;
	pthread_mutex_lock(&tr->gate_mu);
	double t0 = mono();
	int waited = 0;
	/* Timed waits: a graph cancelled while this pull waits (^C, a failed
	 * stage) may never deliver the batch that opens the gate, so a cancel
	 * lets the pull go on, except while dump is copying the state: the
	 * copy always ends (and then opens the gate), and a pull that went on
	 * during it would create and count its rows in the middle of the copy,
	 * a checkpoint that looks whole but holds part of the next batch. A
	 * pull let through before the copy began breaks the gate: dump then
	 * skips that checkpoint (st__trainer_checkpoint_after). */
	while (tr->snap_copying ||
	       (tr->gate >= 0 && (int64_t)b->seq > tr->gate && !tr->gate_cancel &&
		!(g && st_graph_canceled(g)))) {
		waited = 1;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&tr->gate_cv, &tr->gate_mu, &ts);
	}
	if (tr->gate >= 0 && (int64_t)b->seq > tr->gate)
		tr->gate_broken = 1;
	double now = mono();
	if (waited && tr->metrics)
		st_metrics_add(tr->metrics, "ckpt.gate_wait_s", now - t0);
	if (tr->ckpt_last == 0)
		tr->ckpt_last = now;
	int due = (tr->ckpt_every && (b->seq + 1) % tr->ckpt_every == 0) ||
		  (tr->ckpt_secs > 0 && now - tr->ckpt_last >= tr->ckpt_secs);
	if (due && !tr->gate_cancel) {
		b->ckpt = 1;
		tr->gate = (int64_t)b->seq;
		tr->ckpt_last = now;
	}
	pthread_mutex_unlock(&tr->gate_mu);
}

/* Cancelling (shutdown, ^C; st_trainer_destroy comes through here) also
 * frees the snapshot kept for the next checkpoint: no interval checkpoint
 * follows, and a snapshot still being written is freed by its release. It
 * leaves `gate` as it is: a pull that passes it now breaks it (see
 * st__trainer_ckpt_gate). */
void st__trainer_ckpt_open_gate(st_trainer_t *tr, int cancel)
{
	st_trainer_snap_t *spare = NULL;
	pthread_mutex_lock(&tr->gate_mu);
	if (cancel) {
		tr->gate_cancel = 1;
		spare = tr->snap_spare;
		tr->snap_spare = NULL;
	} else {
		tr->gate = -1;
	}
	pthread_cond_broadcast(&tr->gate_cv);
	pthread_mutex_unlock(&tr->gate_mu);
	st_trainer_snap_destroy(spare);
}

void st_trainer_set_checkpoint(st_trainer_t *tr, const st_trainer_ckpt_cfg_t *cfg,
			       uint64_t every_batches, double every_secs)
{
	tr->ckpt_cfg = cfg;
	tr->ckpt_every = cfg ? every_batches : 0;
	tr->ckpt_secs = cfg ? every_secs : 0;
	tr->gate_cancel = 0;
	tr->gate_broken = 0;
	tr->gate = -1;
	tr->ckpt_last = 0;
}

void st_trainer_begin_pass(st_trainer_t *tr, int64_t phase, uint64_t batches_before,
			   uint64_t examples_before)
{
	tr->phase = phase;
	tr->pass_batches0 = tr->batches - batches_before;
	tr->pass_examples0 = tr->examples_done - examples_before;
	tr->pass_done = 0;
}

void st_trainer_end_pass(st_trainer_t *tr)
{
	tr->pass_done = 1;
}

void st_trainer_set_position(st_trainer_t *tr, uint64_t file, uint64_t records)
{
	tr->pos_file = file;
	tr->pos_rec = records;
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The dump stage, on a batch that ends a checkpoint interval: copy the
 * state while nothing trains, let training go on, write the copy. A failed
 * write is reported and training continues: its state is intact and the
 * previous checkpoint is still there. The copy's memory goes back to the
 * trainer for the next checkpoint (st_trainer_snap_release). */
int st__trainer_checkpoint_after(st_trainer_t *tr, const st_batch_t *b)
{
	double t0 = mono();
	st_trainer_snap_t *s = NULL;
	pthread_mutex_lock(&tr->gate_mu);
	int broken = tr->gate_broken;
	tr->snap_copying = !broken;
	pthread_mutex_unlock(&tr->gate_mu);
	if (broken) {
		/* The run is stopping and a later batch was pulled already: the
		 * state is no longer the one after b. */
		st__trainer_ckpt_open_gate(tr, 0);
		st_info("checkpoint after batch %llu skipped: the run is stopping; the newest "
			"checkpoint in %s stays the last one", (unsigned long long)b->seq,
			tr->ckpt_cfg->dir);
		return ST_OK;
	}
	int rc = st_trainer_snapshot(tr, b, &s);
	double t1 = mono();
	pthread_mutex_lock(&tr->gate_mu);
	tr->snap_copying = 0;
	pthread_mutex_unlock(&tr->gate_mu);
	st__trainer_ckpt_open_gate(tr, 0);   /* wakes the pull */
	if (rc < 0) {
		st_error("checkpoint after batch %llu: cannot copy the state: %s",
			 (unsigned long long)b->seq, st_strerror(rc));
		return rc;
	}
	char err[1024] = "";
	rc = st_trainer_snap_write(tr, s, tr->ckpt_cfg, err, sizeof err);
	double t2 = mono();
	st_trainer_snap_release(tr, s);
	if (tr->metrics) {
		st_metrics_add(tr->metrics, "ckpt.stall_s", t1 - t0);
		st_metrics_add(tr->metrics, "ckpt.write_s", t2 - t1);
		st_metrics_add(tr->metrics, rc < 0 ? "ckpt.failed" : "ckpt.written", 1);
	}
	if (rc < 0) {
		st_error("checkpoint after batch %llu not written (%s); training goes on, the "
			 "previous checkpoint in %s is intact",
			 (unsigned long long)b->seq, err, tr->ckpt_cfg->dir);
		tr->ckpt_errors++;
		return ST_OK;
	}
	return ST_OK;
}

/* ---- snapshot ---------------------------------------------------------- */

typedef struct {
	st_rows_writer_t *w;
	const st_table_t *t;
	int err;
} add_t;

static void add_row(uint64_t key, float *row, void *arg)
{
	add_t *a = arg;
	if (a->err)
		return;
	const st_table_meta_t *m = st_table_meta(a->t, row);
	int rc = st_rows_writer_add(a->w, key, m->last_step, m->freq, row);
	if (rc < 0)
		a->err = rc;
}

void st_trainer_snap_destroy(st_trainer_snap_t *s)
{
	if (!s)
		return;
	free(s->params);
	free(s->dstate);
	for (int k = 0; k < s->n_tables; k++)
		st_rows_writer_destroy(s->rows[k]);
	free(s);
}

/* Whether the trainer keeps a written snapshot's memory for the next one.
 * Not when the job bounds memory (storage.mem) or keeps rows on SSD: the
 * copy holds every row of every tier, and keeping it between checkpoints
 * would hold a second copy of the model in RAM for the whole run. */
static int keeps_spare(const st_trainer_t *tr)
{
	if (tr->mem_budget || tr->store_root[0])
		return 0;
	for (int k = 0; k < tr->n_tables; k++)
		if (st_table_ssd(tr->tables[k]))
			return 0;
	return 1;
}

/* Makes room in a kept snapshot for the rows the next copy will likely
 * add: as many as the tables grew since the copy before (at most half of
 * them again). Pages first written inside the stall cost a fault and a
 * zeroing each; here training runs meanwhile. 0, or ST_ENOMEM. */
static int reserve_growth(st_trainer_snap_t *s)
{
	for (int k = 0; k < s->n_tables; k++) {
		size_t n = st_rows_writer_count(s->rows[k]), prev = s->prev_rows[k];
		if (prev == NO_PREV || n <= prev)
			continue;
		size_t grow = n - prev < n / 2 ? n - prev : n / 2;
		if (st_rows_writer_reserve(s->rows[k], n + grow) < 0)
			return ST_ENOMEM;
	}
	return ST_OK;
}

void st_trainer_snap_release(st_trainer_t *tr, st_trainer_snap_t *s)
{
	if (!s)
		return;
	if (keeps_spare(tr) && reserve_growth(s) == ST_OK) {
		pthread_mutex_lock(&tr->gate_mu);
		if (!tr->gate_cancel && !tr->snap_spare) {
			tr->snap_spare = s;
			s = NULL;
		}
		pthread_mutex_unlock(&tr->gate_mu);
	}
	st_trainer_snap_destroy(s);
}

/* A snapshot to fill: the kept one (its arrays resized, its builders reset
 * or, where a table's shape changed, made anew) or a new one. */
static int snap_get(st_trainer_t *tr, st_trainer_snap_t **out)
{
	pthread_mutex_lock(&tr->gate_mu);
	st_trainer_snap_t *s = tr->snap_spare;
	tr->snap_spare = NULL;
	pthread_mutex_unlock(&tr->gate_mu);
	size_t np = st_model_nparams(tr->model), nd = st_sync_dense_state_floats(&tr->env);
	if (s && (s->nparams != np || s->ndstate != nd)) {
		st_trainer_snap_destroy(s);
		s = NULL;
	}
	if (!s) {
		s = calloc(1, sizeof *s);
		if (!s)
			return ST_ENOMEM;
		s->nparams = np;
		s->ndstate = nd;
		s->params = malloc(sizeof(float) * (np ? np : 1));
		s->dstate = malloc(sizeof(float) * (nd ? nd : 1));
		if (!s->params || !s->dstate) {
			st_trainer_snap_destroy(s);
			return ST_ENOMEM;
		}
	}
	for (int k = tr->n_tables; k < s->n_tables; k++)
		st_rows_writer_destroy(s->rows[k]);
	if (s->n_tables > tr->n_tables)
		s->n_tables = tr->n_tables;
	for (int k = 0; k < s->n_tables; k++) {
		const st_rows_info_t *i = st_rows_writer_info(s->rows[k]);
		if (i->dim == (uint32_t)tr->tdim[k] && i->state_dim == (uint32_t)tr->tstate[k]) {
			s->prev_rows[k] = st_rows_writer_count(s->rows[k]);
			st_rows_writer_reset(s->rows[k]);
			continue;
		}
		/* another shape: this and the later builders are made anew */
		for (int j = k; j < s->n_tables; j++)
			st_rows_writer_destroy(s->rows[j]);
		s->n_tables = k;
	}
	*out = s;
	return ST_OK;
}

int st_trainer_snapshot(st_trainer_t *tr, const st_batch_t *last, st_trainer_snap_t **out)
{
	st_trainer_snap_t *s;
	int rc = snap_get(tr, &s);
	if (rc < 0)
		return rc;
	/* Batches trained so far: with the gate closed, exactly those up to
	 * `last`. A pass (phase) numbers its batches from 0. */
	s->step = (int64_t)tr->batches;
	s->phase = tr->phase;
	s->pass_batches = tr->batches - tr->pass_batches0;
	s->pass_examples = tr->examples_done - tr->pass_examples0;
	s->pass_done = last ? 0 : tr->pass_done;
	s->src_file = last ? last->src_file : tr->pos_file;
	s->src_rec = last ? last->src_rec : tr->pos_rec;
	s->examples = tr->examples_done;
	memcpy(s->params, st_model_params(tr->model), sizeof(float) * s->nparams);
	memcpy(s->dstate, tr->dstate, sizeof(float) * s->ndstate);
	s->dt = tr->dt;
	s->gstep = tr->gstep;
	for (int k = 0; k < tr->n_tables && rc >= 0; k++) {
		if (k >= s->n_tables) {
			st_rows_info_t info = { .table_id = (uint64_t)k, .dim = (uint32_t)tr->tdim[k],
						.state_dim = (uint32_t)tr->tstate[k] };
			if ((rc = st_rows_writer_create(&s->rows[k], &info)) < 0)
				break;
			s->prev_rows[k] = NO_PREV;
			s->n_tables = k + 1;
		}
		add_t a = { s->rows[k], tr->tables[k], 0 };
		rc = st_table_foreach_all(tr->tables[k], add_row, &a);
		if (rc >= 0)
			rc = a.err;
	}
	if (rc < 0) {
		st_trainer_snap_destroy(s);
		return rc;
	}
	*out = s;
	return ST_OK;
}

int st_trainer_checkpoint_current(const st_trainer_t *tr)
{
	return tr->ckpt_step >= 0 && (uint64_t)tr->ckpt_step == tr->batches;
}

int64_t st_trainer_snap_step(const st_trainer_snap_t *s)
{
	return s->step;
}

int st_trainer_snap_write(st_trainer_t *tr, const st_trainer_snap_t *s,
			  const st_trainer_ckpt_cfg_t *cfg, char *err, size_t errlen)
{
	st_ckpt_writer_t *w = NULL;
	int rc = st_ckpt_begin(cfg->dir, s->step, &w, err, errlen);
	if (rc < 0)
		return rc;
	int nt = st_model_ntensors(tr->model);
	st_safetensors_tensor_t *t = calloc((size_t)nt + 1, sizeof *t);
	if (!t) {
		st_ckpt_writer_destroy(w);
		snprintf(err, errlen, "out of memory");
		return ST_ENOMEM;
	}
	for (int i = 0; i < nt; i++) {
		const st_tensor_info_t *ti = st_model_tensor(tr->model, i);
		t[i].name = ti->name;
		t[i].ndim = ti->ndim;
		for (int d = 0; d < ti->ndim; d++)
			t[i].shape[d] = ti->shape[d];
		t[i].f32 = s->params + ti->offset;
	}
	t[nt].name = "optim.dense_state";
	t[nt].ndim = 1;
	t[nt].shape[0] = (int64_t)s->ndstate;
	t[nt].f32 = s->dstate;
	st_kv_t meta[] = { { "strata.format", "1" }, { "strata.kind", "checkpoint" } };
	rc = st_ckpt_write_dense(w, "dense.safetensors", t, nt + 1, meta, 2);
	free(t);
	for (int k = 0; k < s->n_tables && rc >= 0; k++) {
		char name[32];
		snprintf(name, sizeof name, "table-%d.rows", k);
		rc = st_ckpt_write_rows_from(w, name, s->rows[k]);
	}
	if (rc >= 0) {
		char dt[32], gs[32], ex[32], ph[32], pb[32], pe[32], pd[8];
		snprintf(dt, sizeof dt, "%" PRIu64, s->dt);
		snprintf(gs, sizeof gs, "%" PRIu64, s->gstep);
		snprintf(ex, sizeof ex, "%" PRIu64, s->examples);
		snprintf(ph, sizeof ph, "%" PRId64, s->phase);
		snprintf(pb, sizeof pb, "%" PRIu64, s->pass_batches);
		snprintf(pe, sizeof pe, "%" PRIu64, s->pass_examples);
		snprintf(pd, sizeof pd, "%d", s->pass_done);
		st_manifest_kv_t kv[] = { { (char *)"dense_steps", dt }, { (char *)"global_steps", gs },
					  { (char *)"examples", ex }, { (char *)"phase", ph },
					  { (char *)"pass_batches", pb }, { (char *)"pass_examples", pe },
					  { (char *)"pass_done", pd } };
		const char *file = cfg->n_paths ? cfg->paths[s->src_file % (uint64_t)cfg->n_paths] : "-";
		st_manifest_shard_t sh = { .shard = 0, .file = (char *)file,
					   .offset = s->src_file, .records = s->src_rec };
		uint64_t rng[1] = { cfg->seed };
		/* The lineage of the run's exports, so that --resume carries it
		 * (set only by exports and resume, never while training runs). */
		st_manifest_t m = {
			.job_name = (char *)cfg->job_name, .job_hash = (char *)cfg->job_hash,
			.model = (char *)cfg->model,
			.lineage = tr->lineage[0] ? tr->lineage : NULL,
			.step = s->step, .shards = &sh, .n_shards = 1,
			.sync_policy = (char *)st_trainer_policy_name(tr), .sync_state = kv,
			.n_sync_state = sizeof kv / sizeof kv[0], .rng = rng, .n_rng = 1,
		};
		rc = st_ckpt_commit(w, &m, cfg->keep, NULL, NULL);
		if (rc >= 0)
			tr->ckpt_step = s->step;
	}
	if (rc < 0)
		snprintf(err, errlen, "%s", st_ckpt_error(w));
	st_ckpt_writer_destroy(w);
	return rc;
}

/* ---- resume ------------------------------------------------------------ */

static int parse_u64(const st_manifest_t *m, const char *key, uint64_t *v)
{
	const char *s = st_manifest_sync_get(m, key);
	if (!s)
		return ST_EFORMAT;
	char *end;
	*v = strtoull(s, &end, 10);
	return *end ? ST_EFORMAT : ST_OK;
}

/*
 * Restoring a table: rows go in a batch at a time, one st_table_resolve per
 * batch (each shard's lock taken once, the index prefetched) where a lookup
 * per row paid a lock and a cache miss each; and, for a table in RAM, from
 * LOAD_THREADS threads at once (the calling one and st-resume-<n> helpers):
 * each takes the next batch from the reader under the loader's lock, copies
 * it out (the reader's rows are valid only until its next call) and inserts
 * it while the next thread reads. Nothing else runs during resume, and the
 * rows of a checkpoint have distinct keys, so the order in which batches
 * land does not matter: values and metadata are the file's either way.
 *
 * A table with an SSD tier restores a row at a time from one thread, as
 * before: the rows resolve returns stay pinned until copied, and a batch
 * could pin more rows than the RAM tier holds.
 */
enum { LOAD_THREADS = 2, LOAD_BATCH_BYTES = 4 << 20 };

typedef struct loader {
	st_table_t *t;
	st_rows_reader_t *r;
	const char *path;
	size_t nf;                 /* floats a row */
	size_t max;                /* rows a batch */
	pthread_mutex_t mu;        /* the reader, rc and err */
	int rc;                    /* first error (< 0), else 0 */
	char *err;
	size_t errlen;
} loader_t;

/* One thread's copy of a batch. */
typedef struct load_buf {
	st_rows_row_t *rows;
	uint64_t *keys;
	uint32_t *last_step, *freq;
	float *vals;               /* [max * nf] */
	float **dst;
} load_buf_t;

static void load_fail(loader_t *L, int rc, const char *msg)
{
	pthread_mutex_lock(&L->mu);
	if (L->rc == 0) {
		L->rc = rc;
		snprintf(L->err, L->errlen, "%s", msg);
	}
	pthread_mutex_unlock(&L->mu);
}

/* Takes the next batch into b: its row count, 0 at the end, or < 0 after
 * any thread's failure. */
static int load_take(loader_t *L, load_buf_t *b)
{
	pthread_mutex_lock(&L->mu);
	int n = L->rc < 0 ? L->rc : st_rows_reader_next_batch(L->r, b->rows, L->max);
	if (n < 0 && L->rc == 0) {
		L->rc = n;
		snprintf(L->err, L->errlen, "%s", st_rows_reader_error(L->r));
	}
	for (int i = 0; i < n; i++) {
		b->keys[i] = b->rows[i].key;
		b->last_step[i] = b->rows[i].last_step;
		b->freq[i] = b->rows[i].freq;
		memcpy(b->vals + (size_t)i * L->nf, b->rows[i].vals, sizeof(float) * L->nf);
	}
	pthread_mutex_unlock(&L->mu);
	return n;
}

static void load_run(loader_t *L)
{
	load_buf_t b = { 0 };
	size_t m = L->max;
	b.rows = malloc(m * sizeof *b.rows);
	b.keys = malloc(m * sizeof *b.keys);
	b.last_step = malloc(m * sizeof *b.last_step);
	b.freq = malloc(m * sizeof *b.freq);
	b.vals = malloc(m * L->nf * sizeof *b.vals);
	b.dst = malloc(m * sizeof *b.dst);
	char msg[1024];
	int n = 0;
	if (!b.rows || !b.keys || !b.last_step || !b.freq || !b.vals || !b.dst) {
		snprintf(msg, sizeof msg, "%s: out of memory", L->path);
		load_fail(L, ST_ENOMEM, msg);
	} else {
		n = load_take(L, &b);
	}
	for (; n > 0; n = load_take(L, &b)) {
		/* The step only touches the metadata, which is overwritten below.
		 * A failed resolve may leave rows unset: NULL ones are not unpinned. */
		memset(b.dst, 0, (size_t)n * sizeof *b.dst);
		int rc = st_table_resolve(L->t, b.keys, (uint32_t)n, b.last_step[0], 1, b.dst);
		if (rc < 0) {
			st_table_unpin(L->t, b.dst, (uint32_t)n);
			snprintf(msg, sizeof msg, "%s: restoring rows: %s", L->path, st_strerror(rc));
			load_fail(L, rc, msg);
			break;
		}
		for (int i = 0; i < n && rc >= 0; i++) {
			if (!b.dst[i]) {
				/* Admission does not apply to restored rows: the row
				 * was admitted before. */
				snprintf(msg, sizeof msg, "%s: key %" PRIx64 " refused by admission while "
					 "restoring", L->path, b.keys[i]);
				load_fail(L, ST_EINVAL, msg);
				rc = ST_EINVAL;
				break;
			}
			memcpy(b.dst[i], b.vals + (size_t)i * L->nf, sizeof(float) * L->nf);
			st_table_meta_t *meta = st_table_meta(L->t, b.dst[i]);
			meta->last_step = b.last_step[i];
			meta->freq = b.freq[i];
		}
		st_table_unpin(L->t, b.dst, (uint32_t)n);
		if (rc < 0)
			break;
	}
	free(b.rows);
	free(b.keys);
	free(b.last_step);
	free(b.freq);
	free(b.vals);
	free(b.dst);
}

static void *load_main(void *arg)
{
	load_run(arg);
	return NULL;
}

static int load_rows(st_trainer_t *tr, int k, const char *path, char *err, size_t errlen)
{
	st_rows_reader_t *r;
	int rc = st_rows_reader_open(path, &r, err, errlen);
	if (rc < 0)
		return rc;
	const st_rows_info_t *info = st_rows_reader_info(r);
	if (info->dim != (uint32_t)tr->tdim[k] || info->state_dim != (uint32_t)tr->tstate[k]) {
		snprintf(err, errlen, "%s: rows of %u + %u floats, the job's table %d has %d + %d",
			 path, info->dim, info->state_dim, k, tr->tdim[k], tr->tstate[k]);
		st_rows_reader_close(r);
		return ST_EINVAL;
	}
	int ram = !st_table_ssd(tr->tables[k]);
	size_t nf = (size_t)info->dim + info->state_dim;
	/* A batch of up to ST_ROWS_BATCH_MAX rows, at most LOAD_BATCH_BYTES of
	 * floats per thread however wide the rows. */
	size_t max = LOAD_BATCH_BYTES / (sizeof(float) * nf);
	max = max < 1 ? 1 : max > ST_ROWS_BATCH_MAX ? ST_ROWS_BATCH_MAX : max;
	loader_t L = { .t = tr->tables[k], .r = r, .path = path, .nf = nf,
		       .max = ram ? max : 1, .err = err, .errlen = errlen };
	pthread_mutex_init(&L.mu, NULL);
	pthread_t tid[LOAD_THREADS];
	int started = 0;
	for (int i = 1; ram && i < LOAD_THREADS; i++) {
		if (pthread_create(&tid[started], NULL, load_main, &L) != 0)
			break;   /* fewer threads: the same work, slower */
		char name[16];
		snprintf(name, sizeof name, "st-resume-%d", i);
		pthread_setname_np(tid[started], name);
		started++;
	}
	load_run(&L);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&L.mu);
	st_rows_reader_close(r);
	return L.rc < 0 ? L.rc : ST_OK;
}

/*
 * Damaged checkpoints. st_ckpt_find_latest reports each checkpoint that
 * fails verification and falls back to the next older one; when none is
 * left it returns ST_ENOENT, as it does for an empty directory. Resume must
 * tell the two apart: starting from the beginning over damaged checkpoints
 * would hide the damage, and retention (newest step numbers first) would
 * then delete the new run's checkpoints in favour of the damaged ones. So
 * the reports are kept, the directory is searched for ckpt-<step>
 * directories that st_ckpt_list never lists (no manifest.yaml), and
 * "checkpoints, none usable" is an error of its own (ST_ECORRUPT).
 */
typedef struct damage {
	int n;                  /* checkpoints that failed verification */
	char what[2048];        /* "ckpt-X: why; ckpt-Y: why" (cut short if long) */
	size_t len;
} damage_t;

static void damage_add(damage_t *d, const char *name, const char *why, size_t why_len)
{
	d->n++;
	if (d->len >= sizeof d->what - 1)
		return;
	int w = snprintf(d->what + d->len, sizeof d->what - d->len, "%s%s: %.*s",
			 d->len ? "; " : "", name, (int)why_len, why);
	d->len = w < 0 ? d->len : d->len + (size_t)w;
	if (d->len >= sizeof d->what)
		d->len = sizeof d->what - 1;
}

/* st_ckpt_msg_fn: logs the report as st_ckpt_find_latest would, and keeps
 * "ckpt-X: why" without its "— falling back ..." tail. */
static void note_damage(void *arg, const char *msg)
{
	st_warn("%s", msg);
	const char *p = msg, *name, *why, *end = NULL;
	if (strncmp(p, "checkpoint ", 11))
		return;
	name = p + 11;
	why = strstr(name, ": ");
	if (!why)
		return;
	for (const char *q = strstr(why, " \xe2\x80\x94 "); q; q = strstr(q + 1, " \xe2\x80\x94 "))
		end = q;   /* the last dash: the reason may hold one */
	char nm[128];
	snprintf(nm, sizeof nm, "%.*s", (int)(why - name), name);
	why += 2;
	damage_add(arg, nm, why, end ? (size_t)(end - why) : strlen(why));
}

/* 1 if name is ckpt-<digits> with nothing after (a final name). */
static int final_ckpt_name(const char *name)
{
	if (strncmp(name, "ckpt-", 5))
		return 0;
	const char *p = name + 5;
	if (!*p)
		return 0;
	for (; *p; p++)
		if (*p < '0' || *p > '9')
			return 0;
	return 1;
}

static int is_dir(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Adds the checkpoints under root that have a final name but no manifest
 * (st_ckpt_list leaves them out: the writer renames a directory into place
 * only after its manifest, so one without is damaged). */
static void note_bare(const char *root, damage_t *d)
{
	DIR *dd = opendir(root);
	if (!dd)
		return;
	struct dirent *de;
	char path[4200];
	while ((de = readdir(dd))) {
		if (!final_ckpt_name(de->d_name))
			continue;
		snprintf(path, sizeof path, "%s/%s", root, de->d_name);
		if (!is_dir(path))
			continue;
		snprintf(path, sizeof path, "%s/%s/%s", root, de->d_name, ST_MANIFEST_NAME);
		struct stat sb;
		if (stat(path, &sb) == 0)
			continue;
		static const char why[] = "manifest.yaml is missing";
		st_warn("checkpoint %s: %s", de->d_name, why);
		damage_add(d, de->d_name, why, sizeof why - 1);
	}
	closedir(dd);
}

int st_trainer_set_aside_damaged(const st_trainer_ckpt_cfg_t *cfg, char *err, size_t errlen)
{
	err[0] = 0;
	DIR *dd = opendir(cfg->dir);
	if (!dd) {
		int e = errno;
		snprintf(err, errlen, "%s: cannot list: %s", cfg->dir, strerror(e));
		return -e;
	}
	int rc = ST_OK, moved = 0;
	struct dirent *de;
	char from[4200], to[4300];
	while ((de = readdir(dd)) && rc >= 0) {
		if (!final_ckpt_name(de->d_name))
			continue;
		snprintf(from, sizeof from, "%s/%s", cfg->dir, de->d_name);
		if (!is_dir(from))
			continue;
		/* ckpt-X.damaged, or .damaged-2, -3 ... when an earlier one is there */
		int i;
		for (i = 1; i < 100; i++) {
			if (i == 1)
				snprintf(to, sizeof to, "%s.damaged", from);
			else
				snprintf(to, sizeof to, "%s.damaged-%d", from, i);
			struct stat sb;
			if (lstat(to, &sb) < 0 && errno == ENOENT)
				break;
		}
		if (i == 100 || rename(from, to) < 0) {
			rc = i == 100 ? ST_EIO : -errno;
			snprintf(err, errlen, "%s: cannot move it aside: %s", from,
				 i == 100 ? "too many .damaged copies" : strerror(errno));
			break;
		}
		st_warn("damaged checkpoint %s moved aside to %s", from, to);
		moved++;
	}
	closedir(dd);
	return rc < 0 ? rc : moved;
}

int st_trainer_resume(st_trainer_t *tr, const st_trainer_ckpt_cfg_t *cfg,
		      st_trainer_resume_t *out, char *err, size_t errlen)
{
	char *dir = NULL;
	st_manifest_t *m = NULL;
	err[0] = 0;
	out->none_verifies = 0;
	damage_t *dmg = calloc(1, sizeof *dmg);
	if (!dmg) {
		snprintf(err, errlen, "out of memory");
		return ST_ENOMEM;
	}
	int rc = st_ckpt_find_latest(cfg->dir, &dir, &m, note_damage, dmg, err, errlen);
	if (rc == ST_ENOENT) {
		note_bare(cfg->dir, dmg);
		if (dmg->n) {
			snprintf(err, errlen, "%s: %d checkpoint%s, none usable: %s", cfg->dir, dmg->n,
				 dmg->n == 1 ? "" : "s", dmg->what);
			out->none_verifies = 1;
			rc = ST_ECORRUPT;
		}
	}
	free(dmg);
	if (rc < 0)
		return rc;
	rc = st_ckpt_check_compat(m, cfg->job_hash, cfg->model, err, errlen);
	st_safetensors_t *f = NULL;
	char path[4200];
	if (rc >= 0) {
		snprintf(path, sizeof path, "%s/dense.safetensors", dir);
		rc = st_safetensors_read(path, &f, err, errlen);
	}
	float *params = st_model_params(tr->model);
	int nt = st_model_ntensors(tr->model);
	for (int i = 0; i < nt && rc >= 0; i++) {
		const st_tensor_info_t *ti = st_model_tensor(tr->model, i);
		size_t numel = 1;
		for (int d = 0; d < ti->ndim; d++)
			numel *= (size_t)ti->shape[d];
		int j;
		for (j = 0; j < f->n_tensors && strcmp(f->tensors[j].name, ti->name); j++)
			;
		if (j == f->n_tensors || !f->tensors[j].f32 || f->tensors[j].numel != numel) {
			snprintf(err, errlen, "%s: tensor %s %s", path, ti->name,
				 j == f->n_tensors ? "is missing" : "has another shape or type");
			rc = ST_EINVAL;
			break;
		}
		memcpy(params + ti->offset, f->tensors[j].f32, sizeof(float) * numel);
	}
	size_t nds = st_sync_dense_state_floats(&tr->env);
	if (rc >= 0) {
		int j;
		for (j = 0; j < f->n_tensors && strcmp(f->tensors[j].name, "optim.dense_state"); j++)
			;
		if (j == f->n_tensors || !f->tensors[j].f32 || f->tensors[j].numel != nds) {
			snprintf(err, errlen, "%s: optim.dense_state is missing or of another size", path);
			rc = ST_EINVAL;
		} else {
			memcpy(tr->dstate, f->tensors[j].f32, sizeof(float) * nds);
		}
	}
	uint64_t dt = 0, gs = 0, ex = 0, pb = 0, pe = 0, pd = 0;
	const char *phs = st_manifest_sync_get(m, "phase");
	if (rc >= 0 && (parse_u64(m, "dense_steps", &dt) < 0 || parse_u64(m, "global_steps", &gs) < 0 ||
			parse_u64(m, "examples", &ex) < 0 || parse_u64(m, "pass_batches", &pb) < 0 ||
			parse_u64(m, "pass_examples", &pe) < 0 || parse_u64(m, "pass_done", &pd) < 0 ||
			!phs || m->n_shards < 1)) {
		snprintf(err, errlen, "%s: manifest lacks the trainer's counters or data position", dir);
		rc = ST_EFORMAT;
	}
	for (int k = 0; k < tr->n_tables && rc >= 0; k++) {
		snprintf(path, sizeof path, "%s/table-%d.rows", dir, k);
		rc = load_rows(tr, k, path, err, errlen);
	}
	if (rc >= 0) {
		tr->dt = dt;
		tr->gstep = gs;
		tr->batches = (uint64_t)m->step;
		tr->examples_done = ex;
		tr->ckpt_step = m->step;
		if (m->lineage)
			st_trainer_set_lineage(tr, m->lineage);
		tr->pos_file = m->shards[0].offset;
		tr->pos_rec = m->shards[0].records;
		out->step = (uint64_t)m->step;
		out->file = m->shards[0].offset;
		out->records = m->shards[0].records;
		out->examples = ex;
		out->phase = strtoll(phs, NULL, 10);
		out->pass_batches = pb;
		out->pass_examples = pe;
		out->pass_done = (int)pd;
		snprintf(out->dir, sizeof out->dir, "%s", dir);
	}
	st_safetensors_free(f);
	st_manifest_free(m);
	free(dir);
	return rc;
}
