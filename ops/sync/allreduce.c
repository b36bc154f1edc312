/*
 * allreduce.c — synchronous data parallelism ("allreduce", the BSP baseline
 * of the GBA paper, gba-global-batch-aggregation.txt §2): N workers in
 * lockstep, every worker computes its minibatch's gradients with the same
 * parameters, the gradients are summed, and one optimizer step is applied.
 *
 * Per step (every worker calls apply, also with an empty minibatch):
 *   1. worker w publishes its gradients; barrier A.
 *   2. reduce + apply, split among workers:
 *      dense — tensors are assigned to workers once (greedy by size); the
 *        owner of tensor i sums its slice over workers 0..N-1 in that order
 *        into worker 0's buffer and runs one optimizer step on it;
 *      sparse — unique key u belongs to worker u mod N; the owner sums the
 *        row's gradient over the workers that touched it, in worker order,
 *        into the first toucher's buffer, and runs one optimizer step.
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

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

typedef struct {
	st_sync_env_t env;
	int N;
	pthread_barrier_t bar;
	float *state;                  /* dense optimizer state (env's or own) */
	float *own_state;              /* allocated here when env has none */
	uint64_t *t;                   /* optimizer steps done (worker 0 advances) */
	uint64_t own_t;
	int *owner;                    /* [ntensors] worker that reduces tensor i */
	st_sync_grads_t **g;           /* [N] this step's gradients */
	st_sync_stats_t st;            /* relaxed atomics */
} allreduce_t;

static size_t tensor_len(const st_model_t *m, int i)
{
	const st_tensor_info_t *ti = st_model_tensor(m, i);
	return (size_t)ti->shape[0] * (size_t)(ti->ndim == 2 ? ti->shape[1] : 1);
}

static int ar_create(void **self, const st_sync_env_t *env)
{
	allreduce_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	int nt = st_model_ntensors(env->model);
	s->owner = calloc((size_t)nt + 1, sizeof(int));
	s->g = calloc((size_t)s->N, sizeof *s->g);
	size_t nst = st_sync_dense_state_floats(env);
	s->state = env->dense_state;
	if (!s->state)
		s->state = s->own_state = malloc(sizeof(float) * (nst ? nst : 1));
	s->t = env->dense_t ? env->dense_t : &s->own_t;
	size_t *load = calloc((size_t)s->N, sizeof(size_t));
	if (!s->owner || !s->g || !s->state || !load) {
		free(load);
		free(s->owner);
		free(s->g);
		free(s->own_state);
		free(s);
		return ST_ENOMEM;
	}
	if (s->own_state)
		st_sync_dense_state_init(env, s->state);
	/* Greedy: each tensor, largest first, to the least-loaded worker. The
	 * split only balances work; results do not depend on it. */
	int *order = calloc((size_t)nt + 1, sizeof(int));
	if (!order) {
		free(load);
		free(s->owner);
		free(s->g);
		free(s->own_state);
		free(s);
		return ST_ENOMEM;
	}
	for (int i = 0; i < nt; i++)
		order[i] = i;
	for (int i = 1; i < nt; i++)
		for (int j = i; j > 0 && tensor_len(env->model, order[j]) >
					 tensor_len(env->model, order[j - 1]); j--) {
			int x = order[j];
			order[j] = order[j - 1];
			order[j - 1] = x;
		}
	for (int k = 0; k < nt; k++) {
		size_t sz = tensor_len(env->model, order[k]);
		int best = 0;
		for (int w = 1; w < s->N; w++)
			if (load[w] < load[best])
				best = w;
		s->owner[order[k]] = best;
		load[best] += sz + 64;   /* + a fixed cost per tensor */
	}
	free(order);
	free(load);
	pthread_barrier_init(&s->bar, NULL, (unsigned)s->N);
	*self = s;
	return ST_OK;
}

static void ar_destroy(void *self)
{
	allreduce_t *s = self;
	if (!s)
		return;
	pthread_barrier_destroy(&s->bar);
	free(s->owner);
	free(s->g);
	free(s->own_state);
	free(s);
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

static inline int touched(const st_sync_grads_t *g, uint32_t u)
{
	return g->n_examples && g->mark[u] == g->stamp;
}

static int ar_apply(void *self, int w, st_sync_grads_t *g)
{
	allreduce_t *s = self;
	const int N = s->N;
	s->g[w] = g;
	pthread_barrier_wait(&s->bar);                          /* A */
	const uint64_t t = *s->t + 1;
	const st_sync_env_t *env = &s->env;

	/* Dense: worker 0's buffer receives the sum of the tensors w owns. */
	float *acc = s->g[0]->dense;
	for (int i = 0; i < st_model_ntensors(env->model); i++) {
		if (s->owner[i] != w)
			continue;
		const st_tensor_info_t *ti = st_model_tensor(env->model, i);
		size_t len = tensor_len(env->model, i);
		for (int v = 1; v < N; v++) {
			if (!s->g[v]->n_examples)
				continue;
			const float *gv = s->g[v]->dense + ti->offset;
			float *a = acc + ti->offset;
			for (size_t j = 0; j < len; j++)
				a[j] += gv[j];
		}
		st_sync_dense_update_tensor(env, env->params, s->state, acc, i, t);
	}

	/* Sparse: rows u with u mod N == w; the first toucher v (lowest worker
	 * index) holds the sum. */
	uint64_t nrows = 0;
	for (int v = 0; v < N; v++) {
		const st_sync_grads_t *gv = s->g[v];
		if (!gv->n_examples)
			continue;
		for (uint32_t k = 0; k < gv->n_rows; k++) {
			uint32_t u = gv->uidx[k];
			if ((int)(u % (uint32_t)N) != w)
				continue;
			int first = 1;
			for (int p = 0; p < v && first; p++)
				first = !touched(s->g[p], u);
			if (!first)
				continue;
			float *sum = gv->grad + (size_t)u * gv->gstride;
			const int dim = gv->row_dim[u];
			for (int q = v + 1; q < N; q++) {
				if (!touched(s->g[q], u))
					continue;
				const float *gq = s->g[q]->grad + (size_t)u * s->g[q]->gstride;
				for (int j = 0; j < dim; j++)
					sum[j] += gq[j];
			}
			if (gv->rows[u]) {
				st_sync_row_update(env, gv->rows[u], sum, dim, t);
				nrows++;
			}
		}
	}
	/* What a distributed run would send: this worker's dense gradient and
	 * its rows (key + floats). */
	uint64_t bytes = 0;
	if (g->n_examples) {
		bytes = sizeof(float) * (uint64_t)env->nparams;
		for (uint32_t k = 0; k < g->n_rows; k++)
			bytes += 8 + sizeof(float) * (uint64_t)g->row_dim[g->uidx[k]];
		st_sync_stat_add(&s->st.updates, 1);
		st_sync_stat_add(&s->st.staleness[0], 1);
	}
	st_sync_stat_add(&s->st.bytes, bytes);
	pthread_barrier_wait(&s->bar);                          /* B */
	if (w == 0) {
		/* Read by the others only after the next barrier A. */
		*s->t = t;
		st_sync_stat_add(&s->st.steps, 1);
	}
	return ST_OK;
}

static void ar_end_batch(void *self, int w)
{
}

static void ar_report(void *self, st_sync_stats_t *out)
{
	allreduce_t *s = self;
	uint64_t *src = (uint64_t *)&s->st, *dst = (uint64_t *)out;
	for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
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
