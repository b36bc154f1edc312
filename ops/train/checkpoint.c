/*
 * checkpoint.c — the trainer's checkpoints (DESIGN.md, "Checkpoints,
 * export, online learning"; formats in docs/formats.md). Loading one back
 * is ops/train/resume.c.
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
 * write (tr->ckpt.snap_spare) and the next checkpoint copies into it: the pages
 * are mapped already, where a fresh copy faulted in and zeroed every page
 * inside the stall. After the write the kept copy also makes room for as
 * many new rows as the tables grew in the last interval, while training
 * runs. The kept copy goes at st_trainer_cancel / st_trainer_destroy.
 *
 * Threads: the dump stage's thread copies and writes (rows.c adds a writer
 * thread for the duration of a file).
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
 * Multi-process jobs: ops/train/dist_ckpt.c (every rank its shard of the
 * rows, table-<k>.rank-<r>-of-<P>.rows; rank 0 the rest), with the helpers
 * of this file (st__trainer_snap_dense, _rows, _commit).
 *
 * Not in a checkpoint: admission candidates (keys counted towards
 * min_count but not admitted yet; they start counting again), the
 * progressive AUC, and the private replicas of kstep and shadow (they
 * restart from the shared parameters; the other policies have no state
 * across batch boundaries beyond the shared dense state).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ops/dist/dist.h"
#include "ops/dump/ckpt.h"
#include "ops/rowsrc/local.h"
#include "ops/train/checkpoint.h"
#include "ops/train/trainer_internal.h"
#include "ops/view/export.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"

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
	if (m->n_slot_pooling) {
		put(&s, &len, &cap, " slot_pooling=");
		for (int i = 0; i < m->n_slot_pooling; i++)
			put(&s, &len, &cap, "%s%d", i ? "," : "", m->slot_pooling[i]);
	}
	put(&s, &len, &cap, " hidden=");
	for (int i = 0; i < m->n_hidden; i++)
		put(&s, &len, &cap, "%s%d", i ? "," : "", m->hidden[i]);
	if (m->n_bottom) {
		put(&s, &len, &cap, " bottom=");
		for (int i = 0; i < m->n_bottom; i++)
			put(&s, &len, &cap, "%s%d", i ? "," : "", m->bottom[i]);
	}
	/* Only dcnv2 has cross layers; other presets' strings (and hashes) stay
	 * what they were. */
	if (m->n_cross || m->cross_rank)
		put(&s, &len, &cap, " cross=%d rank=%d", m->n_cross, m->cross_rank);
	/* A graph's layers (none for the presets, whose strings stay as they
	 * were): kind, name, inputs, sizes and the two ints of lang/job.h. */
	for (int i = 0; i < m->n_nodes; i++) {
		const st_model_node_t *nd = &m->nodes[i];
		put(&s, &len, &cap, " node%d=%d:%s:", i, nd->kind, nd->name);
		for (int k = 0; k < nd->n_in; k++)
			put(&s, &len, &cap, "%s%d", k ? "," : "", nd->in[k]);
		put(&s, &len, &cap, ":");
		for (int k = 0; k < nd->n_sizes; k++)
			put(&s, &len, &cap, "%s%d", k ? "," : "", nd->sizes[k]);
		put(&s, &len, &cap, ":%d:%d", nd->a, nd->b);
	}
	if (m->n_nodes)
		put(&s, &len, &cap, " output=%d", m->node_out);
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
	if (b->eval || (!tr->ckpt.every && !(tr->ckpt.secs > 0)))
		return;
	pthread_mutex_lock(&tr->ckpt.gate_mu);
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
	while (tr->ckpt.snap_copying ||
	       (tr->ckpt.gate >= 0 && (int64_t)b->seq > tr->ckpt.gate && !tr->ckpt.gate_cancel &&
		!(g && st_graph_canceled(g)))) {
		waited = 1;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&tr->ckpt.gate_cv, &tr->ckpt.gate_mu, &ts);
	}
	if (tr->ckpt.gate >= 0 && (int64_t)b->seq > tr->ckpt.gate)
		tr->ckpt.gate_broken = 1;
	double now = mono();
	if (waited && tr->metrics)
		st_metrics_add(tr->metrics, "ckpt.gate_wait_s", now - t0);
	if (tr->ckpt.last == 0)
		tr->ckpt.last = now;
	/* One process counts read batches. A rank of a multi-process job
	 * counts the job's steps (its k-th batch is the job's step k, on every
	 * rank), so that all ranks choose the same step whatever the batch
	 * numbers a resume started them at; seconds would differ per rank (the
	 * runner refuses them across processes). */
	const uint64_t n = tr->dist.d ? tr->ckpt.pulled++ : b->seq;
	int due = (tr->ckpt.every && (n + 1) % tr->ckpt.every == 0) ||
		  (!tr->dist.d && tr->ckpt.secs > 0 && now - tr->ckpt.last >= tr->ckpt.secs);
	/* Across processes rank 0's clock picks a step a little ahead and
	 * names it to the others (dist_ckpt.c). */
	if (tr->dist.d && tr->ckpt.secs > 0 && !tr->ckpt.gate_cancel)
		due |= st__trainer_dist_ckpt_timed(tr, n + 1, now);
	if (due && !tr->ckpt.gate_cancel) {
		b->ckpt = 1;
		tr->ckpt.gate = (int64_t)b->seq;
		tr->ckpt.last = now;
	}
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
}

/* Cancelling (shutdown, ^C; st_trainer_destroy comes through here) also
 * frees the snapshot kept for the next checkpoint: no interval checkpoint
 * follows, and a snapshot still being written is freed by its release. It
 * leaves `gate` as it is: a pull that passes it now breaks it (see
 * st__trainer_ckpt_gate). */
void st__trainer_ckpt_open_gate(st_trainer_t *tr, int cancel)
{
	st_trainer_snap_t *spare = NULL;
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	if (cancel) {
		tr->ckpt.gate_cancel = 1;
		spare = tr->ckpt.snap_spare;
		tr->ckpt.snap_spare = NULL;
	} else {
		tr->ckpt.gate = -1;
	}
	pthread_cond_broadcast(&tr->ckpt.gate_cv);
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	st_trainer_snap_destroy(spare);
}

void st_trainer_set_checkpoint(st_trainer_t *tr, const st_trainer_ckpt_cfg_t *cfg,
			       uint64_t every_batches, double every_secs)
{
	tr->ckpt.cfg = cfg;
	tr->ckpt.every = cfg ? every_batches : 0;
	tr->ckpt.secs = cfg ? every_secs : 0;
	tr->ckpt.gate_cancel = 0;
	tr->ckpt.gate_broken = 0;
	tr->ckpt.gate = -1;
	tr->ckpt.last = 0;
}

void st_trainer_begin_pass(st_trainer_t *tr, int64_t phase, uint64_t batches_before,
			   uint64_t examples_before)
{
	tr->ckpt.phase = phase;
	tr->ckpt.pass_seq = batches_before;
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	tr->ckpt.npass++;
	tr->ckpt.at = 0;   /* a timed step named in an earlier pass is void */
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	/* Across processes rank 0 carries the job's examples from before a
	 * resume; the others count their own from 0 (st_trainer_resume), and a
	 * checkpoint sums them. */
	if (tr->dist.d && st_dist_rank(tr->dist.d) != 0)
		examples_before = 0;
	tr->ckpt.pass_batches0 = tr->batches - batches_before;
	tr->ckpt.pass_examples0 = tr->examples_done - examples_before;
	tr->ckpt.pass_done = 0;
}

void st_trainer_end_pass(st_trainer_t *tr)
{
	tr->ckpt.pass_done = 1;
}

void st_trainer_set_position(st_trainer_t *tr, uint64_t file, uint64_t records)
{
	tr->ckpt.pos_file = file;
	tr->ckpt.pos_rec = records;
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
int st__trainer_snap_copying(st_trainer_t *tr)
{
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	int c = tr->ckpt.snap_copying;
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	return c;
}

int st__trainer_checkpoint_after(st_trainer_t *tr, const st_batch_t *b)
{
	if (tr->dist.d)
		return st__trainer_dist_checkpoint_after(tr, b);
	double t0 = mono();
	st_trainer_snap_t *s = NULL;
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	int broken = tr->ckpt.gate_broken;
	tr->ckpt.snap_copying = !broken;
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	if (broken) {
		/* The run is stopping and a later batch was pulled already: the
		 * state is no longer the one after b. */
		st__trainer_ckpt_open_gate(tr, 0);
		st_info("checkpoint after batch %llu skipped: the run is stopping; the newest "
			"checkpoint in %s stays the last one", (unsigned long long)b->seq,
			tr->ckpt.cfg->dir);
		return ST_OK;
	}
	int rc = st_trainer_snapshot(tr, b, &s);
	double t1 = mono();
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	tr->ckpt.snap_copying = 0;
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	st__trainer_ckpt_open_gate(tr, 0);   /* wakes the pull */
	if (rc < 0) {
		st_error("checkpoint after batch %llu: cannot copy the state: %s",
			 (unsigned long long)b->seq, st_strerror(rc));
		return rc;
	}
	char err[1024] = "";
	rc = st_trainer_snap_write(tr, s, tr->ckpt.cfg, err, sizeof err);
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
			 (unsigned long long)b->seq, err, tr->ckpt.cfg->dir);
		tr->ckpt.errors++;
		return ST_OK;
	}
	return ST_OK;
}

/* ---- snapshot ---------------------------------------------------------- */

typedef struct {
	st_rows_writer_t *w;
	const st_table_t *t;
	int err;
	int prec;          /* the table's row precision */
	int dim, state;    /* emb (+ wide) and state floats of a row */
	float *buf;        /* [dim + state]: a compact row decoded */
} add_t;

static void add_row(uint64_t key, float *row, void *arg)
{
	add_t *a = arg;
	if (a->err)
		return;
	const st_table_meta_t *m = st_table_meta(a->t, row);
	const float *vals = row;
	if (a->prec != ST_ROW_FP32) {
		/* Row files stay fp32 (docs/storage.md): a compact row is
		 * decoded, exactly, and its state copied after it. */
		const uint32_t ew = st_rowfmt_words(a->prec, (uint32_t)a->dim);
		st_rowfmt_decode(a->prec, row, a->buf, (size_t)a->dim);
		memcpy(a->buf + a->dim, row + ew, sizeof(float) * (size_t)a->state);
		vals = a->buf;
	}
	int rc = st_rows_writer_add(a->w, key, m->last_step, m->freq, vals);
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
	if (st_rowsrc_local_bounded(tr->rows.local))
		return 0;
	for (int k = 0; k < tr->rows.n_tables; k++)
		if (st_table_ssd(st__trainer_table(tr, k)))
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
		pthread_mutex_lock(&tr->ckpt.gate_mu);
		if (!tr->ckpt.gate_cancel && !tr->ckpt.snap_spare) {
			tr->ckpt.snap_spare = s;
			s = NULL;
		}
		pthread_mutex_unlock(&tr->ckpt.gate_mu);
	}
	st_trainer_snap_destroy(s);
}

/* A snapshot to fill: the kept one (its arrays resized, its builders reset
 * or, where a table's shape changed, made anew) or a new one. */
static int snap_get(st_trainer_t *tr, st_trainer_snap_t **out)
{
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	st_trainer_snap_t *s = tr->ckpt.snap_spare;
	tr->ckpt.snap_spare = NULL;
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	size_t np = st_model_nparams(tr->model), nd = st_sync_dense_state_floats(&tr->pol.env);
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
	for (int k = tr->rows.n_tables; k < s->n_tables; k++)
		st_rows_writer_destroy(s->rows[k]);
	if (s->n_tables > tr->rows.n_tables)
		s->n_tables = tr->rows.n_tables;
	for (int k = 0; k < s->n_tables; k++) {
		const st_rows_info_t *i = st_rows_writer_info(s->rows[k]);
		if (i->dim == (uint32_t)tr->rows.tdim[k] && i->state_dim == (uint32_t)tr->rows.tstate[k]) {
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
	s->phase = tr->ckpt.phase;
	s->pass_batches = tr->batches - tr->ckpt.pass_batches0;
	s->pass_examples = tr->examples_done - tr->ckpt.pass_examples0;
	s->pass_done = last ? 0 : tr->ckpt.pass_done;
	s->pass_seq = last ? last->seq + 1 : tr->ckpt.pass_seq;
	s->src_file = last ? last->src_file : tr->ckpt.pos_file;
	s->src_rec = last ? last->src_rec : tr->ckpt.pos_rec;
	s->examples = tr->examples_done;
	/* Relaxed loads: shadow's background thread may be blending the
	 * replica meanwhile (a Hogwild read, as a worker's). */
	st_sync_load_relaxed(s->params, st_model_params(tr->model), s->nparams);
	memcpy(s->dstate, tr->pol.dstate, sizeof(float) * s->ndstate);
	s->dt = tr->pol.dt;
	s->gstep = tr->step.gstep;
	for (int k = 0; k < tr->rows.n_tables && rc >= 0; k++) {
		if (k >= s->n_tables) {
			st_rows_info_t info = { .table_id = (uint64_t)k, .dim = (uint32_t)tr->rows.tdim[k],
						.state_dim = (uint32_t)tr->rows.tstate[k] };
			if ((rc = st_rows_writer_create(&s->rows[k], &info)) < 0)
				break;
			s->prev_rows[k] = NO_PREV;
			s->n_tables = k + 1;
		}
		st_table_t *t = st__trainer_table(tr, k);
		add_t a = { s->rows[k], t, 0, tr->rows.prec, tr->rows.tdim[k], tr->rows.tstate[k],
			    NULL };
		if (a.prec != ST_ROW_FP32 &&
		    !(a.buf = malloc(sizeof(float) * (size_t)(a.dim + a.state)))) {
			rc = ST_ENOMEM;
			break;
		}
		rc = st_table_foreach_all(t, add_row, &a);
		free(a.buf);
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
	return tr->ckpt.step >= 0 && (uint64_t)tr->ckpt.step == tr->batches;
}

int64_t st_trainer_snap_step(const st_trainer_snap_t *s)
{
	return s->step;
}

int st__trainer_snap_dense(st_trainer_t *tr, const st_trainer_snap_t *s, st_ckpt_writer_t *w)
{
	int nt = st_model_ntensors(tr->model);
	st_safetensors_tensor_t *t = calloc((size_t)nt + 1, sizeof *t);
	if (!t)
		return ST_ENOMEM;
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
	int rc = st_ckpt_write_dense(w, "dense.safetensors", t, nt + 1, meta, 2);
	free(t);
	return rc;
}

int st__trainer_snap_rows(const st_trainer_snap_t *s, st_ckpt_writer_t *w, int rank, int world)
{
	int rc = ST_OK;
	for (int k = 0; k < s->n_tables && rc >= 0; k++) {
		char name[64];
		st_export_rows_name(name, sizeof name, k, rank, world);
		rc = st_ckpt_write_rows_from(w, name, s->rows[k]);
	}
	return rc;
}

int st__trainer_snap_commit(st_trainer_t *tr, const st_trainer_snap_t *s,
			    const st_trainer_ckpt_cfg_t *cfg, st_ckpt_writer_t *w,
			    const st_manifest_t *world)
{
	char dt[32], gs[32], ex[32], ph[32], pb[32], pe[32], pd[8], bs[32];
	snprintf(dt, sizeof dt, "%" PRIu64, s->dt);
	snprintf(gs, sizeof gs, "%" PRIu64, s->gstep);
	snprintf(ex, sizeof ex, "%" PRIu64, s->examples);
	snprintf(ph, sizeof ph, "%" PRId64, s->phase);
	snprintf(pb, sizeof pb, "%" PRIu64, s->pass_batches);
	snprintf(pe, sizeof pe, "%" PRIu64, s->pass_examples);
	snprintf(pd, sizeof pd, "%d", s->pass_done);
	snprintf(bs, sizeof bs, "%d", cfg->batch_size);
	/* batch_size: pass_batches counts batches of that size; a loader with
	 * another batch size converts (resume.c). */
	st_manifest_kv_t kv[] = { { (char *)"dense_steps", dt }, { (char *)"global_steps", gs },
				  { (char *)"examples", ex }, { (char *)"phase", ph },
				  { (char *)"pass_batches", pb }, { (char *)"pass_examples", pe },
				  { (char *)"pass_done", pd }, { (char *)"batch_size", bs } };
	const char *file = cfg->n_paths ? cfg->paths[s->src_file % (uint64_t)cfg->n_paths] : "-";
	st_manifest_shard_t sh = { .shard = 0, .file = (char *)file,
				   .offset = s->src_file, .records = s->src_rec };
	uint64_t rng[1] = { cfg->seed };
	/* The lineage of the run's exports, so that --resume carries it
	 * (set only by exports and resume, never while training runs). */
	st_manifest_t m = {
		.job_name = (char *)cfg->job_name, .job_hash = (char *)cfg->job_hash,
		.model = (char *)cfg->model,
		.lineage = tr->track.lineage[0] ? tr->track.lineage : NULL,
		.step = s->step, .shards = &sh, .n_shards = 1,
		.sync_policy = (char *)st_trainer_policy_name(tr), .sync_state = kv,
		.n_sync_state = sizeof kv / sizeof kv[0] - (cfg->batch_size > 0 ? 0 : 1),
		.rng = rng, .n_rng = 1,
	};
	if (world) {
		m.world_size = world->world_size;
		m.owners = world->owners;
		m.owner_salt = world->owner_salt;
		m.parts = world->parts;
		m.n_parts = world->n_parts;
	}
	int rc = st_ckpt_commit(w, &m, cfg->keep, NULL, NULL);
	if (rc >= 0)
		tr->ckpt.step = s->step;
	return rc;
}

int st_trainer_snap_write(st_trainer_t *tr, const st_trainer_snap_t *s,
			  const st_trainer_ckpt_cfg_t *cfg, char *err, size_t errlen)
{
	st_ckpt_writer_t *w = NULL;
	int rc = st_ckpt_begin(cfg->dir, s->step, &w, err, errlen);
	if (rc < 0)
		return rc;
	rc = st__trainer_snap_dense(tr, s, w);
	if (rc >= 0)
		rc = st__trainer_snap_rows(s, w, 0, 0);
	if (rc >= 0)
		rc = st__trainer_snap_commit(tr, s, cfg, w, NULL);
	if (rc < 0)
		snprintf(err, errlen, "%s", rc == ST_ENOMEM && !st_ckpt_error(w)[0] ? "out of memory"
						: st_ckpt_error(w));
	st_ckpt_writer_destroy(w);
	return rc;
}
