/*
 * dist_hop_bw.c — hop_bw across processes (dist_sync.h): backup ranks, the
 * Hop-BW baseline of gba-global-batch-aggregation.txt (§2: "ignores the
 * gradients from the stragglers"; §5.1). A rank's workers step together,
 * so the units are ranks: each local step is summed as the single-process
 * policies sum it, and worker 0 sends the rank's dense gradient of the
 * step whose parameters it read to rank 0, which closes a step once all
 * but b of the active ranks have sent theirs (ops/algo/hopclock.h,
 * ops/dist/hop.c) and drops the late ones; a kept rank's row sums then go
 * to their owners as a step of the K kept ranks.
 *
 * Threads: hooks on the N local worker threads with barriers A-C; worker 0
 * alone makes the network calls of a step.
 */
#include "ops/sync/dist_sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/owner.h"
#include "ops/dist/dist.h"
#include "runtime/err.h"

typedef struct {
	st_sync_env_t env;
	int N;
	uint32_t b;
	pthread_barrier_t bar;
	int *owner;                    /* [ntensors] local worker reducing tensor i */
	st_sync_grads_t **g;           /* [N] */
	st_sync_rowpush_t *rows;
	float *rep;                    /* [nparams] the parameters the workers read:
					* rank 0's env->params change under its
					* service thread when other ranks close steps */
	uint64_t token;                /* the step of the replica's parameters */
	int err;                       /* first error of a step (relaxed atomic) */
	st_sync_stats_t st;
} dbw_t;

static void dbw_destroy(void *self)
{
	dbw_t *s = self;
	if (!s)
		return;
	pthread_barrier_destroy(&s->bar);
	st_sync_rowpush_destroy(s->rows);
	free(s->owner);
	free(s->g);
	free(s->rep);
	free(s);
}

static int dbw_create(void **self, const st_sync_env_t *env)
{
	if (!env->dist)
		return ST_EINVAL;
	const int P = st_dist_size(env->dist);
	const double b = st_sync_cfg_num(env->cfg, "b", -1);
	if (!(b >= 0) || b >= P || b != (double)(uint32_t)b) {
		st_error("sync policy hop_bw across processes drops the b slowest ranks of each "
			 "step: b must be an integer >= 0 and below the number of ranks (%d); "
			 "got %g", P, b);
		return ST_EJOB;
	}
	dbw_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->b = (uint32_t)b;
	pthread_barrier_init(&s->bar, NULL, (unsigned)s->N);
	s->owner = st_algo_owner_tensors(env->model, env->n_workers);
	s->g = calloc((size_t)s->N, sizeof *s->g);
	s->rows = st_sync_rowpush_create(s->N);
	s->rep = malloc(sizeof(float) * (env->nparams ? env->nparams : 1));
	if (!s->owner || !s->g || !s->rows || !s->rep) {
		dbw_destroy(s);
		return ST_ENOMEM;
	}
	/* Join rank 0's steps now (so this rank counts in their quorum from
	 * the start) with its current parameters and step. */
	uint64_t tok;
	uint32_t K;
	int late;
	int rc = st_dist_dense_bw(env->dist, s->b, NULL, 0, s->rep, &tok, &K, &late);
	if (rc < 0) {
		dbw_destroy(s);
		return rc;
	}
	s->token = tok;
	*self = s;
	return ST_OK;
}

static const float *dbw_begin_step(void *self, int w, uint64_t step)
{
	return ((dbw_t *)self)->rep;
}

/* Worker 0: this rank's step to rank 0; the rows to their owners if the
 * step kept it. */
static int dbw_exchange(dbw_t *s, float *dense, uint32_t n_examples)
{
	const st_sync_env_t *env = &s->env;
	if (!n_examples)
		return ST_OK;   /* no minibatch in this local step: nothing to send */
	uint64_t next, bytes = 2 * sizeof(float) * (uint64_t)env->nparams;
	uint32_t K;
	int late;
	int rc = st_dist_dense_bw(env->dist, s->b, dense, s->token, s->rep, &next, &K, &late);
	if (rc >= 0 && !late)
		rc = st__rowpush_send_quorum(s->rows, env, s->token, s->token + 1, K, &bytes);
	if (rc < 0)
		return rc;
	st_sync_stat_add(&s->st.bytes, bytes);
	st_sync_stat_add(late ? &s->st.dropped : &s->st.updates, 1);
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(late ? next - s->token : 0)], 1);
	__atomic_store_n(&s->st.steps, next, __ATOMIC_RELAXED);
	s->token = next;
	return ST_OK;
}

static int dbw_apply(void *self, int w, st_sync_grads_t *g)
{
	dbw_t *s = self;
	const st_sync_env_t *env = &s->env;
	s->g[w] = g;
	pthread_barrier_wait(&s->bar);                          /* A */
	/* This rank's step, summed as the single-process policies sum it. */
	st_sync_reduce_dense(env, s->g, s->owner, w, NULL, 0);
	int rc = st_sync_rowpush_sum(s->rows, env, s->g, w);
	if (rc < 0)
		__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	pthread_barrier_wait(&s->bar);                          /* B */
	if (w == 0 && !__atomic_load_n(&s->err, __ATOMIC_RELAXED)) {
		uint32_t n = 0;
		for (int v = 0; v < s->N; v++)
			n += s->g[v]->n_examples;
		/* Rank 0's parameters come back into the replica while the
		 * other workers wait at C (the eval and the end read rank 0's
		 * own, fetched by st_trainer_dist_finish on the other ranks). */
		if ((rc = dbw_exchange(s, s->g[0]->dense, n)) < 0)
			__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	}
	pthread_barrier_wait(&s->bar);                          /* C */
	return __atomic_load_n(&s->err, __ATOMIC_RELAXED);
}

static int dbw_finish(void *self)
{
	/* This rank has no more steps: the others' close without it. */
	return st_dist_idle(((dbw_t *)self)->env.dist, 0);
}

static void dbw_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((dbw_t *)self)->st, out);
}

const st_sync_ops_t st_sync_dist_hop_bw_ops = {
	.name = "hop_bw",
	.schedule = ST_SYNC_LOCKSTEP,
	.flags = ST_SYNC_RANK_LOCAL | ST_SYNC_FRESH_ROWS,
	.create = dbw_create,
	.destroy = dbw_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dbw_begin_step,
	.apply = dbw_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dbw_report,
	.finish = dbw_finish,
};
