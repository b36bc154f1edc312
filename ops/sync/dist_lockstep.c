/*
 * dist_lockstep.c — allreduce and hybrid across processes (dist_sync.h):
 * lockstep across every worker of every rank. Per step the local workers'
 * gradients are summed as the single-process allreduce sums them (dense by
 * tensor owner, rows by first toucher, in worker order; ops/algo/owner.h),
 * the dense sums are allreduced across ranks in rank order
 * (st_net_allreduce_f32), and each rank's row sums go to the rows' owners,
 * which sum them in rank order and apply one step (a synchronous PUSH).
 * Every rank then takes the same dense optimizer step on its replica. With
 * one worker per rank this is bit for bit the single-process run of P
 * workers on the same global batch (gba-global-batch-aggregation.txt §2,
 * the synchronous baseline; tests/e2e/dist.sh checks it).
 *
 * hybrid is PERSIA's hybrid (persia-hybrid-training.md Section 4.1): the
 * dense part as allreduce, synchronously; the rows asynchronously with
 * bounded staleness — a step's row sums are applied as in allreduce, but a
 * pull only waits until the step `staleness` steps back is applied (the
 * trainer's dist_lag), so rows may be up to `staleness` steps old. Its ops
 * are allreduce's.
 *
 * Threads: hooks on the N local worker threads with barriers A-D; between
 * barriers each float is written by one worker; worker 0 alone makes the
 * network calls of a step.
 */
#include "ops/sync/dist_sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/owner.h"
#include "ops/dist/dist.h"
#include "runtime/err.h"
#include "runtime/net/net.h"
#include "runtime/trace.h"

typedef struct {
	st_sync_env_t env;
	int N;
	pthread_barrier_t bar;
	st_sync_dense_t dense;         /* state and step (the trainer's) */
	uint64_t step;                 /* sync steps done by this policy (worker 0) */
	int *owner;                    /* [ntensors] local worker reducing tensor i */
	st_sync_grads_t **g;           /* [N] */
	st_sync_rowpush_t *rows;
	int err;                       /* first error of a step (relaxed atomic) */
	st_sync_stats_t st;
} dar_t;

static void dar_destroy(void *self)
{
	dar_t *s = self;
	if (!s)
		return;
	pthread_barrier_destroy(&s->bar);
	st_sync_rowpush_destroy(s->rows);
	free(s->owner);
	free(s->g);
	st_sync_dense_fini(&s->dense);
	free(s);
}

static int dar_create(void **self, const st_sync_env_t *env)
{
	if (!env->dist)
		return ST_EINVAL;
	dar_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->step = env->dist_step0;
	pthread_barrier_init(&s->bar, NULL, (unsigned)s->N);
	s->owner = st_algo_owner_tensors(env->model, env->n_workers);
	s->g = calloc((size_t)s->N, sizeof *s->g);
	s->rows = st_sync_rowpush_create(s->N);
	if (st_sync_dense_init(&s->dense, env) < 0 || !s->owner || !s->g || !s->rows) {
		dar_destroy(s);
		return ST_ENOMEM;
	}
	*self = s;
	return ST_OK;
}

static const float *dar_begin_step(void *self, int w, uint64_t step)
{
	dar_t *s = self;
	return s->env.params;
}

/* Worker 0: this rank's row sums to their owners, then the dense sum across
 * ranks. */
static int exchange(dar_t *s, float *acc, uint64_t t)
{
	const st_sync_env_t *env = &s->env;
	uint64_t bytes = sizeof(float) * (uint64_t)env->nparams;
	const uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
	int rc = st_sync_rowpush_send(s->rows, env, s->step, t, &bytes);
	const uint64_t t1 = t0 ? st_trace_now() : 0;
	if (rc >= 0)
		rc = st_net_allreduce_f32(st_dist_net(env->dist), acc, env->nparams);
	if (t0) {
		st_trace_span("work", "row push", NULL, t0, t1, -1);
		st_trace_span("work", "dense allreduce", NULL, t1, st_trace_now(), -1);
	}
	st_sync_stat_add(&s->st.bytes, bytes);
	return rc;
}

static int dar_apply(void *self, int w, st_sync_grads_t *g)
{
	dar_t *s = self;
	const st_sync_env_t *env = &s->env;
	s->g[w] = g;
	pthread_barrier_wait(&s->bar);                          /* A */
	const uint64_t t = *s->dense.t + 1;
	/* This rank's sums, as the single-process allreduce makes them: dense
	 * by tensor owner into worker 0's buffer, rows into their first
	 * toucher's, in worker order. */
	st_sync_reduce_dense(env, s->g, s->owner, w, NULL, 0);
	int rc = st_sync_rowpush_sum(s->rows, env, s->g, w);
	if (rc < 0)
		__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	pthread_barrier_wait(&s->bar);                          /* B */
	float *acc = s->g[0]->dense;
	if (w == 0 && !__atomic_load_n(&s->err, __ATOMIC_RELAXED)) {
		rc = exchange(s, acc, t);
		if (rc < 0)
			__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	}
	pthread_barrier_wait(&s->bar);                          /* C */
	rc = __atomic_load_n(&s->err, __ATOMIC_RELAXED);
	if (rc >= 0) {
		/* The same optimizer step on every rank's replica. */
		for (int i = 0; i < st_model_ntensors(env->model); i++)
			if (s->owner[i] == w)
				st_sync_dense_update_tensor(env, env->params, s->dense.state, acc, i, t);
		if (g->n_examples) {
			st_sync_stat_add(&s->st.updates, 1);
			st_sync_stat_add(&s->st.staleness[0], 1);
		}
	}
	pthread_barrier_wait(&s->bar);                          /* D */
	if (w == 0 && rc >= 0) {
		*s->dense.t = t;
		s->step++;
		st_sync_stat_add(&s->st.steps, 1);
	}
	return rc;
}

static void dar_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((dar_t *)self)->st, out);
}

const st_sync_ops_t st_sync_dist_allreduce_ops = {
	.name = "allreduce",
	.schedule = ST_SYNC_LOCKSTEP,
	.create = dar_create,
	.destroy = dar_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dar_begin_step,
	.apply = dar_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dar_report,
};

const st_sync_ops_t st_sync_dist_hybrid_ops = {
	.name = "hybrid",
	.schedule = ST_SYNC_LOCKSTEP,
	.create = dar_create,   /* the pulls' staleness bound is the trainer's */
	.destroy = dar_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dar_begin_step,
	.apply = dar_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dar_report,
};
