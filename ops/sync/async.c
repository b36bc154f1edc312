/*
 * async.c — Hogwild / ASP ("async"): each worker takes the next minibatch
 * from a shared counter, reads the parameters without locks and applies its
 * gradients as soon as they are computed (Recht et al. 2011; the "ASP"
 * baseline of gba-global-batch-aggregation.txt §2 and the Hogwild worker
 * threads of shadowsync-background-sync.md).
 *
 * Reads: begin_step copies the shared dense parameters into the worker's
 * snapshot with relaxed atomic loads (the trainer does the same for the
 * minibatch's embedding rows: flag ST_SYNC_RELAXED_READS), so layers and
 * BLAS run on private memory. Writes: one tensor (dense) or one row
 * (sparse) at a time is copied in with relaxed loads, stepped by the
 * optimizer, and stored back with relaxed stores. Concurrent updates of
 * the same tensor or row may overwrite each other — the lost updates that
 * Hogwild accepts — but no value tears and there is no data race in the
 * C11 sense (TSan-clean).
 *
 * Staleness of an update = updates applied by anyone between the worker's
 * begin_step (its read) and its apply.
 *
 * Threads: hooks on the N worker threads; per-worker buffers are touched
 * only by their worker; shared counters are atomics. No locks.
 */
#include "ops/sync/sync.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

typedef struct {
	float *snap;          /* [nparams] dense params read at begin_step */
	float *tw, *ts;       /* one tensor and its state, while updating */
	float *trow;          /* one row and its state, while updating */
	uint64_t v0;          /* version at begin_step */
} aworker_t;

typedef struct {
	st_sync_env_t env;
	int N;
	float *state;         /* dense optimizer state (shared, relaxed; env's or own) */
	float *own_state;     /* allocated here when env has none */
	uint64_t version;     /* updates applied (atomic) */
	uint64_t *t;          /* optimizer step numbers handed out (atomic) */
	uint64_t own_t;
	aworker_t *w;
	st_sync_stats_t st;   /* relaxed atomics */
} async_t;

static void as_destroy(void *self)
{
	async_t *s = self;
	if (!s)
		return;
	for (int i = 0; s->w && i < s->N; i++) {
		free(s->w[i].snap);
		free(s->w[i].tw);
		free(s->w[i].ts);
		free(s->w[i].trow);
	}
	free(s->w);
	free(s->own_state);
	free(s);
}

static int as_create(void **self, const st_sync_env_t *env)
{
	async_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	size_t nst = st_sync_dense_state_floats(env);
	size_t maxt = 1, maxs = 1;
	for (int i = 0; i < st_model_ntensors(env->model); i++) {
		const st_tensor_info_t *ti = st_model_tensor(env->model, i);
		size_t len = (size_t)ti->shape[0] * (size_t)(ti->ndim == 2 ? ti->shape[1] : 1);
		size_t sl = st_sync_dense_state_offset(env, i + 1) - st_sync_dense_state_offset(env, i);
		maxt = len > maxt ? len : maxt;
		maxs = sl > maxs ? sl : maxs;
	}
	int rd = st_model_max_row_dim(env->model);
	size_t rowf = (size_t)rd + st_optim_state_floats(env->sparse_opt, (size_t)rd) + 1;
	s->state = env->dense_state;
	if (!s->state)
		s->state = s->own_state = malloc(sizeof(float) * (nst ? nst : 1));
	s->t = env->dense_t ? env->dense_t : &s->own_t;
	s->w = calloc((size_t)s->N, sizeof *s->w);
	int ok = s->state && s->w;
	for (int i = 0; ok && i < s->N; i++) {
		aworker_t *a = &s->w[i];
		a->snap = malloc(sizeof(float) * (env->nparams ? env->nparams : 1));
		a->tw = malloc(sizeof(float) * maxt);
		a->ts = malloc(sizeof(float) * maxs);
		a->trow = malloc(sizeof(float) * rowf);
		ok = a->snap && a->tw && a->ts && a->trow;
	}
	if (!ok) {
		as_destroy(s);
		return ST_ENOMEM;
	}
	if (s->own_state)
		st_sync_dense_state_init(env, s->state);
	*self = s;
	return ST_OK;
}

static int as_begin_batch(void *self, uint32_t n_uniq)
{
	return ST_OK;
}

static const float *as_begin_step(void *self, int w, uint64_t step)
{
	async_t *s = self;
	aworker_t *a = &s->w[w];
	a->v0 = __atomic_load_n(&s->version, __ATOMIC_RELAXED);
	st_sync_load_relaxed(a->snap, s->env.params, s->env.nparams);
	return a->snap;
}

static int as_apply(void *self, int w, st_sync_grads_t *g)
{
	async_t *s = self;
	aworker_t *a = &s->w[w];
	const st_sync_env_t *env = &s->env;
	if (!g->n_examples)
		return ST_OK;
	st_sync_apply_hogwild(env, s->state, s->t, &s->version, a->v0, g, a->tw, a->ts,
			      a->trow, &s->st);
	return ST_OK;
}

static void as_end_batch(void *self, int w)
{
}

static void as_report(void *self, st_sync_stats_t *out)
{
	async_t *s = self;
	uint64_t *src = (uint64_t *)&s->st, *dst = (uint64_t *)out;
	for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

const st_sync_ops_t st_sync_async_ops = {
	.name = "async",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_RELAXED_READS,
	.create = as_create,
	.destroy = as_destroy,
	.begin_batch = as_begin_batch,
	.begin_step = as_begin_step,
	.apply = as_apply,
	.end_batch = as_end_batch,
	.report = as_report,
};
