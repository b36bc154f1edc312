/*
 * allreduce.c — synchronous data parallelism ("allreduce", the BSP baseline
 * of the GBA paper, gba-global-batch-aggregation.txt §2): N workers in
 * lockstep, every worker computes its minibatch's gradients with the same
 * parameters, the gradients are summed, and one optimizer step is applied.
 *
 * Per step (every worker calls apply, also with an empty minibatch):
 *   1. worker w publishes its gradients; barrier A.
 *   2. reduce + apply, split among workers:
 *      dense — tensors are assigned to workers once (greedy by size,
 *        st_algo_owner_tensors); the owner of tensor i sums its slice over
 *        workers 0..N-1 in that order into worker 0's buffer and runs one
 *        optimizer step on it;
 *      sparse — unique key u belongs to worker u mod N (st_algo_owner_row);
 *        the owner sums the row's gradient over the workers that touched
 *        it, in worker order, into the first toucher's buffer, and runs
 *        one optimizer step.
 *   3. barrier B publishes the new parameters; worker 0 advances t.
 * Every sum runs in worker order whatever the split, so a run depends only
 * on the seed, the data order and N — never on thread timing.
 *
 * Threads: hooks run on the N worker threads. Between A and B each float of
 * the parameters, the optimizer state and the gradient buffers is written by
 * exactly one worker (its owner) and read by no other; outside A..B no one
 * writes parameters, so plain loads and stores are race-free (the barriers
 * order them). Statistics are relaxed atomics (report may read them while
 * workers run). No locks.
 */
#include "ops/sync/sync.h"
#include "ops/algo/owner.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

typedef struct {
	st_sync_env_t env;
	int N;
	pthread_barrier_t bar;
	st_sync_dense_t dense;         /* t: optimizer steps done (worker 0 advances) */
	int *owner;                    /* [ntensors] worker that reduces tensor i */
	st_sync_grads_t **g;           /* [N] this step's gradients */
	st_sync_stats_t st;            /* relaxed atomics */
} allreduce_t;

static void ar_destroy(void *self)
{
	allreduce_t *s = self;
	if (!s)
		return;
	pthread_barrier_destroy(&s->bar);
	free(s->owner);
	free(s->g);
	st_sync_dense_fini(&s->dense);
	free(s);
}

static int ar_create(void **self, const st_sync_env_t *env)
{
	allreduce_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	pthread_barrier_init(&s->bar, NULL, (unsigned)s->N);
	s->owner = st_algo_owner_tensors(env->model, s->N);
	s->g = calloc((size_t)s->N, sizeof *s->g);
	if (st_sync_dense_init(&s->dense, env) < 0 || !s->owner || !s->g) {
		ar_destroy(s);
		return ST_ENOMEM;
	}
	*self = s;
	return ST_OK;
}

static int ar_begin_batch(void *self, uint32_t n_uniq)
{
	return ST_OK;
}

static const float *ar_begin_step(void *self, int w, uint64_t step)
{
	allreduce_t *s = self;
	return s->env.params;
}

static int ar_apply(void *self, int w, st_sync_grads_t *g)
{
	allreduce_t *s = self;
	s->g[w] = g;
	pthread_barrier_wait(&s->bar);                          /* A */
	const uint64_t t = *s->dense.t + 1;
	const st_sync_env_t *env = &s->env;
	/* Dense: worker 0's buffer receives the sum of the tensors w owns.
	 * Sparse: rows u with u mod N == w; the first toucher holds the sum. */
	st_sync_reduce_dense(env, s->g, s->owner, w, s->dense.state, t);
	st_sync_reduce_rows(env, s->g, w, t);
	/* What a distributed run would send: this worker's dense gradient and
	 * its rows (key + floats). */
	if (g->n_examples) {
		st_sync_stat_add(&s->st.bytes, st_sync_grad_bytes(env, g));
		st_sync_stat_add(&s->st.updates, 1);
		st_sync_stat_add(&s->st.staleness[0], 1);
	}
	pthread_barrier_wait(&s->bar);                          /* B */
	if (w == 0) {
		/* Read by the others only after the next barrier A. */
		*s->dense.t = t;
		st_sync_stat_add(&s->st.steps, 1);
	}
	return ST_OK;
}

static void ar_end_batch(void *self, int w)
{
}

static void ar_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((allreduce_t *)self)->st, out);
}

const st_sync_ops_t st_sync_allreduce_ops = {
	.name = "allreduce",
	.schedule = ST_SYNC_LOCKSTEP,
	.flags = 0,
	.create = ar_create,
	.destroy = ar_destroy,
	.begin_batch = ar_begin_batch,
	.begin_step = ar_begin_step,
	.apply = ar_apply,
	.end_batch = ar_end_batch,
	.report = ar_report,
};
