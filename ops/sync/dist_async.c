/*
 * dist_async.c — async and hop_bs across processes (dist_sync.h): the
 * dense parameters live on rank 0 (st_dist_dense): each worker sends its
 * gradient and trains on the parameters that come back (a parameter
 * server); rows go to their owners and are applied on arrival. A worker
 * rank that dies does not stop the others. Each worker step reads its
 * minibatch's rows from the owners right before computing
 * (ST_SYNC_STEP_ROWS), as one process's Hogwild workers read the shared
 * table.
 *
 * hop_bs (bounded staleness, gba-global-batch-aggregation.txt §5.1) is the
 * same with rank 0's clock rule (ops/algo/hopclock.h, ops/dist/hop.c): the
 * reply to a worker's gradient waits until it is at most b gradients ahead
 * of the slowest active worker of any rank; a worker with no minibatch
 * left tells rank 0 it idles. The two differ in their create function
 * only (hop: the rule and its b).
 *
 * Threads: hooks on the N local worker threads; each worker its own reply
 * channel and parameter copy; row pushes take turns (rowsend_t).
 */
#include "ops/sync/dist_sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dist/dist.h"
#include "runtime/err.h"

typedef struct {
	st_sync_env_t env;
	int N;
	int hop;                       /* hop_bs: rank 0's clock rule (ops/dist/hop.c) */
	uint32_t b;
	float **params;                /* [N] each worker's copy */
	uint64_t *version;             /* [N] rank 0's update count at the copy */
	uint8_t *idle;                 /* [N] hop_bs: idled since the copy */
	rowsend_t send;                /* row pushes */
	st_sync_stats_t st;
} das_t;

static void das_destroy(void *self)
{
	das_t *s = self;
	if (!s)
		return;
	st_sync_snaps_destroy(s->params, s->N);
	free(s->version);
	free(s->idle);
	st__rowsend_fini(&s->send);
	free(s);
}

/* hop: hop_bs's clock rule with bound b (async: none). */
static int das_create_with(void **self, const st_sync_env_t *env, int hop, uint32_t b)
{
	if (!env->dist)
		return ST_EINVAL;
	das_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->hop = hop;
	s->b = b;
	st__rowsend_init(&s->send);
	s->params = st__sync_worker_copies(env);
	s->version = calloc((size_t)s->N, sizeof(uint64_t));
	s->idle = calloc((size_t)s->N, 1);
	if (!s->params || !s->version || !s->idle) {
		das_destroy(s);
		return ST_ENOMEM;
	}
	*self = s;
	return ST_OK;
}

static int das_create(void **self, const st_sync_env_t *env)
{
	return das_create_with(self, env, 0, 0);
}

static int dhop_create(void **self, const st_sync_env_t *env)
{
	const double b = st_sync_cfg_num(env->cfg, "b", -1);
	if (!(b >= 0) || b != (double)(uint32_t)b) {
		st_error("sync policy hop_bs: parameter b (how many steps the fastest worker "
			 "may run ahead of the slowest, an integer >= 0) is missing or invalid");
		return ST_EJOB;
	}
	return das_create_with(self, env, 1, (uint32_t)b);
}

static const float *das_begin_step(void *self, int w, uint64_t step)
{
	das_t *s = self;
	if (step == 0 || s->idle[w]) {
		/* The first step of the policy, or (hop_bs) the first after
		 * idling: rank 0's current parameters (and, for hop_bs, the
		 * worker rejoins the clocks). */
		s->idle[w] = 0;
		uint64_t v;
		int rc = s->hop ? st_dist_dense_hop(s->env.dist, w, s->b, NULL, s->params[w], &v)
				: st_dist_dense(s->env.dist, w, NULL, s->params[w], &v);
		if (rc >= 0)
			s->version[w] = v;
	}
	return s->params[w];
}

static int das_apply(void *self, int w, st_sync_grads_t *g)
{
	das_t *s = self;
	const st_sync_env_t *env = &s->env;
	if (!g->n_examples)
		return ST_OK;
	uint64_t v0 = s->version[w], v;
	if (s->hop) {
		/* hop_bs: the rows first, since the dense reply may be held
		 * back by the clock rule (ops/dist/hop.c). */
		uint64_t bytes = sizeof(float) * (uint64_t)env->nparams * 2;
		int rc = st__rowsend_push(env, &s->send, g, v0 + 1, NULL, &bytes);
		st_sync_stat_add(&s->st.bytes, bytes);
		if (rc >= 0)
			rc = st_dist_dense_hop(env->dist, w, s->b, g->dense, s->params[w], &v);
		if (rc < 0)
			return rc;
		s->version[w] = v;
		uint64_t stale = v > v0 + 1 ? v - v0 - 1 : 0;
		st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(stale)], 1);
		st_sync_stat_add(&s->st.updates, 1);
		st_sync_stat_add(&s->st.steps, 1);
		return ST_OK;
	}
	int rc = st_dist_dense(env->dist, w, g->dense, s->params[w], &v);
	if (rc < 0)
		return rc;
	s->version[w] = v;
	uint64_t stale = v > v0 + 1 ? v - v0 - 1 : 0;
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(stale)], 1);
	st_sync_stat_add(&s->st.updates, 1);
	st_sync_stat_add(&s->st.steps, 1);
	/* Rows: this worker's gradients to their owners, applied on arrival
	 * (a batch's rows are private copies, so keys go once per worker). */
	uint64_t bytes = sizeof(float) * (uint64_t)env->nparams * 2;
	rc = st__rowsend_push(env, &s->send, g, v, NULL, &bytes);
	st_sync_stat_add(&s->st.bytes, bytes);
	return rc;
}

/* hop_bs: this worker has no minibatch left in the batch. */
static void das_end_batch(void *self, int w)
{
	das_t *s = self;
	if (!s->hop)
		return;
	s->idle[w] = 1;
	if (st_dist_idle(s->env.dist, w) < 0)
		st_warn("hop_bs: worker %d could not tell rank 0 it is idle", w);
}

static void das_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((das_t *)self)->st, out);
}

const st_sync_ops_t st_sync_dist_async_ops = {
	.name = "async",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_STEP_ROWS,
	.create = das_create,
	.destroy = das_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = das_begin_step,
	.apply = das_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = das_report,
};

const st_sync_ops_t st_sync_dist_hop_bs_ops = {
	.name = "hop_bs",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_STEP_ROWS | ST_SYNC_BOUNDED_STALENESS,
	.create = dhop_create,
	.destroy = das_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = das_begin_step,
	.apply = das_apply,
	.end_batch = das_end_batch,
	.report = das_report,
};
