/*
 * bsp.c — "bsp{b}": the BSP baseline of the GBA paper
 * (gba-global-batch-aggregation.txt, Section 5.1: "Bulk synchronous parallel
 * (BSP) aggregates a pre-set number b2 of gradients when applying gradients
 * to the parameters, regardless of the gradient version"; Section 3, Fig. 4
 * "BSP-1K ... BSP-6K" names the aggregation size). It is the parameter-
 * server form of TensorFlow's SyncReplicasOptimizer with
 * replicas_to_aggregate = b and no version check.
 *
 * Schedule FREE: workers take minibatches from the trainer's shared counter
 * and never wait for one another. Each arriving gradient (dense vector and
 * per-row sparse gradients) is added into one shared buffer; the b-th
 * arrival applies the buffer, averaged over b (dense and every row alike:
 * the mean of b minibatch gradients, i.e. one step of a b-times larger
 * global batch), as ONE optimizer step, and empties it. The buffer is GBA's
 * without token control (ops/algo/gba.h: M = b, no tolerance, no tags),
 * the core the ranks transport runs too (ops/dist/psbuf.c); rows are keyed
 * by their shared address. b is at most ST_ALGO_GBA_MAX_M, as across
 * processes.
 *
 * End of batch: buffered rows belong to the batch's pull (the shared rows
 * are pinned for the batch), so the buffer cannot be carried into the next
 * batch. The last worker to reach end_batch flushes a partial buffer of
 * n < b gradients as one step averaged over n (the same per-example scale
 * as a full one). The trainer's end-of-batch barrier then orders that step
 * before the next batch.
 *
 * Staleness of a gradient = optimizer steps applied between the worker's
 * begin_step (its read of the parameters) and the step the gradient goes
 * into: steps done when it arrives minus steps done when it read.
 * Bytes (what a parameter-server run would send per contribution): the
 * dense gradient 4·nparams plus, per touched row, an 8-byte key and 4·dim
 * floats. Parameter pulls are not counted (as async.c and allreduce.c).
 *
 * Threads: hooks on the N worker threads. One mutex `mu` guards the buffer,
 * the dense parameters and optimizer state, and the step counter: apply
 * adds under it, the b-th apply runs the optimizer step under it, and
 * begin_step copies the dense parameters into the worker's snapshot under
 * it (so a snapshot is always one consistent version). Sparse rows are read
 * by the trainer without our lock, so they are written with relaxed atomics
 * (flag ST_SYNC_RELAXED_READS). Statistics are relaxed atomics. One lock
 * only: no lock order.
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
	pthread_mutex_t mu;
	/* ---- under mu ---- */
	st_sync_dense_t dense; /* t: optimizer steps applied (Adam's step number) */
	st_algo_gba_dense_t dbuf;  /* its k: optimizer steps applied (the version) */
	st_algo_gba_rows_t rbuf;   /* keyed by shared row address */
	int ended;             /* workers past end_batch in this batch */
	uint64_t t;            /* the step's optimizer step number */
	float *trow;           /* one row + state while updating */
	/* ---- per worker ---- */
	float **snap;          /* [N][nparams] parameters read at begin_step */
	uint64_t *v0;          /* [N] version at begin_step */
	st_sync_stats_t st;    /* relaxed atomics */
} bsp_t;

static void bsp_destroy(void *self)
{
	bsp_t *s = self;
	if (!s)
		return;
	st_sync_snaps_destroy(s->snap, s->N);
	free(s->v0);
	st_sync_dense_fini(&s->dense);
	st_algo_gba_dense_fini(&s->dbuf);
	st_algo_gba_rows_fini(&s->rbuf);
	free(s->trow);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

static int bsp_create(void **self, const st_sync_env_t *env)
{
	double b = st_sync_cfg_num(env->cfg, "b", -1);
	if (!(b >= 1) || b > ST_ALGO_GBA_MAX_M) {
		st_error("sync policy bsp: parameter b (gradients per update, 1 .. %u) is "
			 "missing or out of range", ST_ALGO_GBA_MAX_M);
		return ST_EJOB;
	}
	bsp_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	pthread_mutex_init(&s->mu, NULL);
	s->snap = st_sync_snaps_create(env);
	s->v0 = calloc((size_t)s->N, sizeof *s->v0);
	const int md = st_model_max_row_dim(env->model);
	s->trow = malloc(sizeof(float) *
			 ((size_t)md + st_optim_state_floats(env->sparse_opt, (size_t)md) + 1));
	int ok = st_algo_gba_dense_init(&s->dbuf, (uint32_t)b, ST_ALGO_GBA_NO_TOL,
					env->nparams) == ST_OK &&
		 st_algo_gba_rows_init(&s->rbuf, (uint32_t)b, ST_ALGO_GBA_NO_TOL, 0,
				       (uint32_t)md) == ST_OK &&
		 st_sync_dense_init(&s->dense, env) == ST_OK && s->snap && s->v0 && s->trow;
	if (!ok) {
		bsp_destroy(s);
		return ST_ENOMEM;
	}
	*self = s;
	return ST_OK;
}

static int bsp_begin_batch(void *self, uint32_t n_uniq)
{
	bsp_t *s = self;
	/* No worker runs and the buffer is empty (flushed at end of batch). */
	s->ended = 0;
	/* Room for every row of the batch now, so that no apply fails for it. */
	return st_algo_gba_rows_begin(&s->rbuf, s->dbuf.k, n_uniq);
}

static const float *bsp_begin_step(void *self, int w, uint64_t step)
{
	bsp_t *s = self;
	(void)step;
	pthread_mutex_lock(&s->mu);
	s->v0[w] = s->dbuf.k;
	memcpy(s->snap[w], s->env.params, sizeof(float) * s->env.nparams);
	pthread_mutex_unlock(&s->mu);
	return s->snap[w];
}

/* The core's update of one row: the shared row at that address. */
static int update_row(void *arg, uint64_t key, uint8_t tab, float *g, uint32_t dim)
{
	bsp_t *s = arg;
	(void)tab;
	st_sync_row_update_relaxed(&s->env, (float *)(uintptr_t)key, g, (int)dim, s->t, s->trow);
	return ST_OK;
}

/* One optimizer step with the buffer's gradients averaged; empties the
 * buffer. Under mu. Cannot fail: BSP keeps no tags (the core's only
 * allocation in a step) and update_row never fails. */
static void flush(bsp_t *s)
{
	const st_sync_env_t *env = &s->env;
	s->t = *s->dense.t + 1;
	(void)st_algo_gba_rows_step(&s->rbuf, 0, update_row, s);
	const float *g = st_algo_gba_dense_mean(&s->dbuf);   /* every one is kept */
	st_sync_dense_update(env, env->params, s->dense.state, g, s->t);
	st_algo_gba_dense_done(&s->dbuf);
	*s->dense.t = s->t;
	st_sync_stat_add(&s->st.steps, 1);
}

static int bsp_apply(void *self, int w, st_sync_grads_t *g)
{
	bsp_t *s = self;
	const st_sync_env_t *env = &s->env;
	if (!g->n_examples)
		return ST_OK;
	pthread_mutex_lock(&s->mu);
	/* Room for every row of the batch was made at begin_batch. */
	int rc = st_algo_gba_rows_begin(&s->rbuf, s->dbuf.k, g->n_rows);
	if (rc < 0) {
		pthread_mutex_unlock(&s->mu);
		return rc;
	}
	uint64_t age;
	int dropped;
	st_algo_gba_dense_add(&s->dbuf, s->v0[w], g->dense, &age, &dropped);
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(age)], 1);
	for (uint32_t k = 0; k < g->n_rows; k++) {
		uint32_t u = g->uidx[k];
		if (g->rows[u])   /* not admitted: no row, no update */
			st_algo_gba_rows_add(&s->rbuf, s->v0[w], (uint64_t)(uintptr_t)g->rows[u], 0,
					     g->grad + (size_t)u * g->gstride, g->row_dim[u]);
	}
	if (st_algo_gba_rows_end(&s->rbuf))
		flush(s);
	pthread_mutex_unlock(&s->mu);
	st_sync_stat_add(&s->st.updates, 1);
	st_sync_stat_add(&s->st.bytes, st_sync_grad_bytes(env, g));
	return rc;
}

static void bsp_end_batch(void *self, int w)
{
	bsp_t *s = self;
	(void)w;
	pthread_mutex_lock(&s->mu);
	/* The last worker out: every gradient of the batch is in the buffer. */
	if (++s->ended == s->N && s->dbuf.count)
		flush(s);
	pthread_mutex_unlock(&s->mu);
}

static void bsp_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((bsp_t *)self)->st, out);
}

const st_sync_ops_t st_sync_bsp_ops = {
	.name = "bsp",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_RELAXED_READS,
	.create = bsp_create,
	.destroy = bsp_destroy,
	.begin_batch = bsp_begin_batch,
	.begin_step = bsp_begin_step,
	.apply = bsp_apply,
	.end_batch = bsp_end_batch,
	.report = bsp_report,
};
