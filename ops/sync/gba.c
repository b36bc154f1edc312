/*
 * gba.c — Global Batch gradients Aggregation ("gba{global_batch, tolerance}",
 * gba-global-batch-aggregation.txt §4.1, Fig. 5, Appendix B Algorithms 1-2),
 * in one process: the "PS" is this object, the workers are the trainer's N
 * threads on the FREE schedule (no worker waits for another). The gradient
 * buffers, the tokens, Eq. 1 and the per-ID tags are ops/algo/gba.h, the
 * core the ranks transport (ops/dist/psbuf.c) runs too; this file is the
 * threads transport: snapshots, the lock, the end of a batch, statistics.
 *
 * Tokens. A worker that starts a minibatch (begin_step, the paper's "pull
 * the parameters and fetch a token from PS") gets the token tau = k, the
 * global steps done, and a snapshot of the dense parameters after step
 * k - 1; in one process that step is known exactly, so k - tau is exactly
 * the paper's data staleness.
 *
 * Buffer. M = global_batch / local_batch contributions per global step
 * (local batch = env->minibatch, or the first gradient's n_examples while
 * the trainer leaves that 0; global_batch must be a multiple, else
 * ST_EJOB). apply adds its gradient to the dense buffer and each admitted
 * row's gradient to the rows' buffer (one buffer of both, as one PS holds
 * every partition here; rows are keyed by their shared address), deciding
 * Eq. 1 on arrival (the core says why that is the paper's rule); the apply
 * that brings the buffers to M performs global step k holding the lock:
 * the dense mean over the M contributions, one dense optimizer step t, and
 * for every ID with a kept gradient its mean over its touchers and one
 * sparse step with the same t (the dense step count, which the trainer
 * keeps across policy switches). Gradients from the trainer are those of
 * their minibatch's loss, so the dense average over M full minibatches is
 * the gradient of the global batch's loss: the update allreduce makes with
 * the same global batch when no gradient is stale (§4.1, G_a = G_s).
 *
 * Partial buffer: at the end of every train batch, the last worker to call
 * end_batch applies what the buffers hold as a partial global step. Never
 * carried over: the seam has no end-of-data hook, buffered rows belong to
 * the batch's pull, and a checkpoint, an export, an eval or a policy switch
 * after a batch must see every gradient of it. This is the paper's last
 * step of an epoch too (the last of ceil(Q / M) updates aggregates Q mod M
 * gradients). The ranks transport carries a partial buffer across read
 * batches instead (docs/design-notes.md, "One core per algorithm").
 *
 * Reads: begin_step copies the dense parameters under the lock (a step is
 * applied under the same lock), so a worker's snapshot is exactly the
 * parameters after its token's step. Embedding rows are written by the step
 * with relaxed atomics and read by the trainer with relaxed atomics
 * (ST_SYNC_RELAXED_READS) when it computes; a row can thus be newer than
 * the token (never older), so an ID's staleness is an upper bound for it.
 *
 * Tags: the core may forget, at a step, the tags no gradient to come can be
 * decided by: those at or below the oldest token a worker still computes
 * with (or k when none does). That bound is exact, so no gradient is ever
 * dropped for want of a tag.
 *
 * Bytes (what a PS run would send, per gradient, counted at apply, dropped
 * gradients included since they were sent):
 *   pull = 8 (token) + 4 nparams + sum_rows (8 key + 4 dim)
 *   push = 8 (token) + 4 nparams + sum_rows (8 key + 4 dim).
 *
 * Threads: hooks on the N worker threads. One mutex `mu` guards the
 * buffers, the tokens, the dense parameters and optimizer state; the
 * statistics are relaxed atomics (report may read them while workers run).
 * Lock order: mu only (the rows take no lock).
 */
#include "ops/sync/sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/gba.h"
#include "runtime/err.h"

typedef struct {
	st_sync_env_t env;
	int N;
	int ready;               /* M known and the buffers made (atomic acquire) */
	uint64_t global_batch;
	uint32_t tol;            /* iota; ST_ALGO_GBA_NO_TOL: none */
	pthread_mutex_t mu;
	/* ---- under mu ---- */
	st_sync_dense_t dense;
	st_algo_gba_dense_t dbuf;  /* its k is the global step (rbuf.k alike) */
	st_algo_gba_rows_t rbuf;   /* keyed by shared row address */
	uint64_t *token;         /* [N] token of worker w's current minibatch */
	uint8_t *inflight;       /* [N] between begin_step and apply */
	float **snap;            /* [N] dense snapshot [nparams] */
	int ended;               /* end_batch calls this batch */
	int err;                 /* failure of a step run by end_batch */
	uint64_t t;              /* the step's optimizer step number */
	float *trow;             /* row + state, relaxed update */
	/* ---- relaxed atomics ---- */
	st_sync_stats_t st;
} gba_t;

static const double *cfg_param(const st_sync_cfg_t *c, const char *key)
{
	for (int i = 0; c && i < c->n_params; i++)
		if (c->keys[i] && !strcmp(c->keys[i], key))
			return &c->vals[i];
	return NULL;
}

/* ---- setup ---------------------------------------------------------------- */

static void gba_destroy(void *self)
{
	gba_t *s = self;
	if (!s)
		return;
	st_algo_gba_dense_fini(&s->dbuf);
	st_algo_gba_rows_fini(&s->rbuf);
	free(s->token);
	free(s->inflight);
	st_sync_snaps_destroy(s->snap, s->N);
	free(s->trow);
	st_sync_dense_fini(&s->dense);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

/* Sets M from the local batch and makes the buffers. Under mu (or in
 * create). ST_OK, ST_EJOB (logged), ST_ENOMEM. */
static int setup(gba_t *s, uint64_t local)
{
	if (s->dbuf.sum)
		return ST_ENOMEM;   /* an earlier attempt failed half way */
	if (!local || s->global_batch % local) {
		st_error("sync gba: global_batch = %llu must be a multiple of the local batch "
			 "(the job's minibatch, %llu examples per worker step); use e.g. "
			 "global_batch = %llu", (unsigned long long)s->global_batch,
			 (unsigned long long)local,
			 (unsigned long long)(local ? local * (uint64_t)s->N : 0));
		return ST_EJOB;
	}
	uint64_t M = s->global_batch / local;
	if (M > ST_ALGO_GBA_MAX_M) {
		st_error("sync gba: global_batch / minibatch = %llu gradients per global step "
			 "is too many (at most %u)", (unsigned long long)M, ST_ALGO_GBA_MAX_M);
		return ST_EJOB;
	}
	if ((int)M != s->N)
		st_info("sync gba: %d workers aggregate M = %llu gradients per global step "
			"(the paper uses as many workers as M)", s->N, (unsigned long long)M);
	int rc = st_algo_gba_dense_init(&s->dbuf, (uint32_t)M, s->tol, s->env.nparams);
	if (rc >= 0)
		rc = st_algo_gba_rows_init(&s->rbuf, (uint32_t)M, s->tol, 1,
					   (uint32_t)st_model_max_row_dim(s->env.model));
	if (rc < 0)
		return rc;
	__atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
	return ST_OK;
}

static int gba_create(void **self, const st_sync_env_t *env)
{
	const double *gb = cfg_param(env->cfg, "global_batch");
	const double *tol = cfg_param(env->cfg, "tolerance");
	if (!gb || !(*gb >= 1) || *gb != (double)(uint64_t)*gb) {
		st_error("sync gba: global_batch (examples per global step, an integer >= 1) "
			 "is required, e.g. st.sync.gba{global_batch = 4 * minibatch}");
		return ST_EJOB;
	}
	if (tol && (!(*tol >= 0) || *tol != (double)(uint64_t)*tol)) {
		st_error("sync gba: tolerance must be an integer >= 0 (got %g)", *tol);
		return ST_EJOB;
	}
	gba_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	pthread_mutex_init(&s->mu, NULL);
	s->env = *env;
	s->N = env->n_workers;
	s->global_batch = (uint64_t)*gb;
	/* A tolerance beyond 2^32 - 2 steps drops nothing: no tolerance. */
	s->tol = !tol ? 1 : *tol >= (double)ST_ALGO_GBA_NO_TOL ? ST_ALGO_GBA_NO_TOL
							       : (uint32_t)*tol;
	const int gs = st_model_max_row_dim(env->model);
	s->token = calloc((size_t)s->N, sizeof *s->token);
	s->inflight = calloc((size_t)s->N, 1);
	s->snap = st_sync_snaps_create(env);
	s->trow = malloc(sizeof(float) * ((size_t)gs + 1 +
		st_optim_state_floats(env->sparse_opt, (size_t)gs)));
	int rc = st_sync_dense_init(&s->dense, env) == ST_OK && s->token && s->inflight &&
		 s->snap && s->trow ? ST_OK : ST_ENOMEM;
	if (rc >= 0 && env->minibatch)
		rc = setup(s, env->minibatch);
	if (rc < 0) {
		gba_destroy(s);
		return rc;
	}
	*self = s;
	return ST_OK;
}

static int gba_begin_batch(void *self, uint32_t n_uniq)
{
	(void)self;
	(void)n_uniq;
	return ST_OK;
}

static const float *gba_begin_step(void *self, int w, uint64_t step)
{
	gba_t *s = self;
	(void)step;   /* the token is the global step, not the worker's count */
	pthread_mutex_lock(&s->mu);
	s->token[w] = s->dbuf.k;
	s->inflight[w] = 1;
	memcpy(s->snap[w], s->env.params, sizeof(float) * s->env.nparams);
	pthread_mutex_unlock(&s->mu);
	return s->snap[w];
}

/* ---- the global step -------------------------------------------------------- */

/* The core's update of one ID: the shared row at that address. */
static int update_row(void *arg, uint64_t key, uint8_t tab, float *g, uint32_t dim)
{
	gba_t *s = arg;
	(void)tab;
	st_sync_row_update_relaxed(&s->env, (float *)(uintptr_t)key, g, (int)dim, s->t, s->trow);
	return ST_OK;
}

/* Global step k over the contributions in the buffers. Under mu. ST_OK or
 * ST_ENOMEM (nothing applied, buffers kept). */
static int global_step(gba_t *s)
{
	const st_sync_env_t *env = &s->env;
	/* Tags at or below the oldest token in flight decide nothing to come. */
	uint64_t lo = s->dbuf.k;
	for (int w = 0; w < s->N; w++)
		if (s->inflight[w] && s->token[w] < lo)
			lo = s->token[w];
	s->t = *s->dense.t + 1;
	int rc = st_algo_gba_rows_step(&s->rbuf, lo, update_row, s);
	if (rc < 0)
		return rc;
	const float *g = st_algo_gba_dense_mean(&s->dbuf);
	if (g)
		st_sync_dense_update(env, env->params, s->dense.state, g, s->t);
	st_sync_stat_add(&s->st.updates, s->dbuf.kept);
	st_algo_gba_dense_done(&s->dbuf);
	*s->dense.t = s->t;
	st_sync_stat_add(&s->st.steps, 1);
	return ST_OK;
}

/* Worker w's gradient into the buffers (under mu). ST_OK or ST_ENOMEM
 * (nothing added). */
static int contribute(gba_t *s, int w, const st_sync_grads_t *g)
{
	const uint64_t token = s->token[w];
	int rc = st_algo_gba_rows_begin(&s->rbuf, token, g->n_rows);
	if (rc < 0)
		return rc;
	uint64_t age;
	int dropped;
	if ((rc = st_algo_gba_dense_add(&s->dbuf, token, g->dense, &age, &dropped)) < 0)
		return rc;
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(age)], 1);
	if (dropped)
		st_sync_stat_add(&s->st.dropped, 1);
	for (uint32_t e = 0; e < g->n_rows; e++) {
		uint32_t u = g->uidx[e];
		if (g->rows[u])   /* not admitted: no row, no update */
			st_algo_gba_rows_add(&s->rbuf, token, (uint64_t)(uintptr_t)g->rows[u], 0,
					     g->grad + (size_t)u * g->gstride, g->row_dim[u]);
	}
	st_algo_gba_rows_end(&s->rbuf);
	return ST_OK;
}

static int gba_apply(void *self, int w, st_sync_grads_t *g)
{
	gba_t *s = self;
	int rc = ST_OK;
	if (!g->n_examples) {
		pthread_mutex_lock(&s->mu);
		s->inflight[w] = 0;
		pthread_mutex_unlock(&s->mu);
		return ST_OK;
	}
	if (!__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE)) {
		/* No local batch in the env: the first gradient's is the job's
		 * minibatch (a batch's only short minibatch is its last). */
		pthread_mutex_lock(&s->mu);
		if (!s->ready)
			rc = setup(s, g->n_examples);
		pthread_mutex_unlock(&s->mu);
		if (rc < 0)
			return rc;
	}
	uint64_t b = 8 + sizeof(float) * (uint64_t)s->env.nparams;
	for (uint32_t e = 0; e < g->n_rows; e++)
		b += 8 + sizeof(float) * (uint64_t)g->row_dim[g->uidx[e]];
	st_sync_stat_add(&s->st.bytes, 2 * b);   /* pull and push (file comment) */
	pthread_mutex_lock(&s->mu);
	s->inflight[w] = 0;
	if (s->err < 0) {
		rc = s->err;
		s->err = 0;
	}
	if (st_algo_gba_dense_full(&s->dbuf) && (rc = global_step(s)) < 0) {
		/* An earlier step failed for memory and still holds the buffer. */
		pthread_mutex_unlock(&s->mu);
		return rc;
	}
	int r2 = contribute(s, w, g);
	if (r2 >= 0 && st_algo_gba_dense_full(&s->dbuf))
		r2 = global_step(s);
	if (r2 < 0)
		rc = r2;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static void gba_end_batch(void *self, int w)
{
	gba_t *s = self;
	(void)w;
	pthread_mutex_lock(&s->mu);
	if (++s->ended == s->N) {
		/* Last worker of the batch: nobody is computing; flush. */
		s->ended = 0;
		if (s->dbuf.count) {
			int rc = global_step(s);
			if (rc < 0) {
				st_error("sync gba: out of memory applying the last %u gradients "
					 "of a batch (kept for the next step)", s->dbuf.count);
				s->err = rc;
			}
		}
	}
	pthread_mutex_unlock(&s->mu);
}

static void gba_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((gba_t *)self)->st, out);
}

const st_sync_ops_t st_sync_gba_ops = {
	.name = "gba",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_RELAXED_READS,
	.create = gba_create,
	.destroy = gba_destroy,
	.begin_batch = gba_begin_batch,
	.begin_step = gba_begin_step,
	.apply = gba_apply,
	.end_batch = gba_end_batch,
	.report = gba_report,
};
