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
	st_sync_env_t env;
	int N;
	st_sync_dense_t dense; /* shared, relaxed atomics (t: step numbers handed out) */
	uint64_t version;     /* updates applied (atomic) */
	st_sync_hogwild_t *w;  /* [N] */
	st_sync_stats_t st;   /* relaxed atomics */
} async_t;

static void as_destroy(void *self)
{
	async_t *s = self;
	if (!s)
		return;
	for (int i = 0; s->w && i < s->N; i++)
		st_sync_hogwild_fini(&s->w[i]);
	free(s->w);
	st_sync_dense_fini(&s->dense);
	free(s);
}

static int as_create(void **self, const st_sync_env_t *env)
{
	async_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->w = calloc((size_t)s->N, sizeof *s->w);
	int ok = st_sync_dense_init(&s->dense, env) == ST_OK && s->w;
	for (int i = 0; ok && i < s->N; i++)
		ok = st_sync_hogwild_init(&s->w[i], env) == ST_OK;
	if (!ok) {
		as_destroy(s);
		return ST_ENOMEM;
	}
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
	return st_sync_hogwild_read(&s->w[w], &s->env, &s->version);
}

static int as_apply(void *self, int w, st_sync_grads_t *g)
{
	async_t *s = self;
	if (g->n_examples)
		st_sync_apply_hogwild(&s->env, &s->dense, &s->version, &s->w[w], g, &s->st);
	return ST_OK;
}

static void as_end_batch(void *self, int w)
{
}

static void as_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((async_t *)self)->st, out);
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
