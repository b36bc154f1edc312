/*
 * hop_bs.c — bounded staleness ("hop_bs{b}"): the Hop-BS baseline of the
 * GBA paper (gba-global-batch-aggregation.txt, Section 2 "Related Work" and
 * Section 5.1: "Bounded staleness (Hop-BS) restricts the maximal differences
 * of gradient version between the fastest and the slowest workers,
 * controlled by b1"; Luo et al., Hop, ref. [22]; the stale-synchronous
 * parallel rule of Ho et al. 2013).
 *
 * Schedule FREE: workers take minibatches from the trainer's shared counter
 * and apply their gradients as they come, Hogwild-style, exactly like
 * async.c (relaxed-atomic reads of the shared parameters into a per-worker
 * snapshot, relaxed-atomic read-modify-write of one tensor / one row at a
 * time). The only difference from async is the clock rule:
 *
 *   clock[w] = gradients worker w has applied in this batch.
 *   begin_step(w) returns only when clock[w] - min(clock[v] : v active) <= b,
 *   i.e. a worker may start its step number k only when the slowest active
 *   worker has finished step k - b. With b = 0 that is BSP (nobody starts
 *   step k + 1 before everyone finished step k); a worker is thus never more
 *   than b steps ahead of the slowest one while that one works on a step.
 *
 * End of batch: a worker that found no more minibatches calls end_batch,
 * which marks it inactive; inactive workers no longer count as the slowest,
 * so the others can always finish the batch. begin_batch (no worker
 * running) makes everyone active with clock 0 again: the trainer's
 * end-of-batch barrier already brings the workers together.
 * Progress: the slowest active worker never waits (its own gap is 0), so
 * some worker always advances; a waiting worker is woken by each apply and
 * end_batch.
 *
 * Staleness of an update = updates applied by anyone between the worker's
 * begin_step (its read) and its apply (as async.c).
 * Bytes (what a parameter-server run would send per contribution): the
 * dense gradient 4·nparams plus, per touched row, an 8-byte key and 4·dim
 * floats. Parameter pulls are not counted (as in async.c and allreduce.c,
 * so the policies compare on gradient traffic).
 *
 * Threads: hooks on the N worker threads. One mutex `mu` guards the clocks
 * and `active`; it is never held while touching parameters. Parameters and
 * optimizer state are relaxed atomics (no C11 data race; concurrent updates
 * of one tensor may overwrite each other, as Hogwild accepts). Statistics
 * are relaxed atomics. One lock only: no lock order.
 */
#include "ops/sync/sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

typedef struct {
	st_sync_env_t env;
	int N;
	uint64_t b;           /* the staleness bound */
	st_sync_dense_t dense; /* shared, relaxed atomics (t: step numbers handed out) */
	uint64_t version;     /* updates applied (atomic) */
	st_sync_hogwild_t *w; /* [N] */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t *clock;      /* [N] under mu */
	int *active;          /* [N] under mu */
	int waiting;          /* workers blocked in begin_step, under mu */
	st_sync_stats_t st;   /* relaxed atomics */
} hopbs_t;

static void hb_destroy(void *self)
{
	hopbs_t *s = self;
	if (!s)
		return;
	for (int i = 0; s->w && i < s->N; i++)
		st_sync_hogwild_fini(&s->w[i]);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s->w);
	free(s->clock);
	free(s->active);
	st_sync_dense_fini(&s->dense);
	free(s);
}

static int hb_create(void **self, const st_sync_env_t *env)
{
	double b = st_sync_cfg_num(env->cfg, "b", -1);
	if (!(b >= 0)) {
		st_error("sync policy hop_bs: parameter b (the staleness bound, >= 0) is "
			 "missing or negative");
		return ST_EJOB;
	}
	hopbs_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->b = (uint64_t)b;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->w = calloc((size_t)s->N, sizeof *s->w);
	s->clock = calloc((size_t)s->N, sizeof *s->clock);
	s->active = calloc((size_t)s->N, sizeof *s->active);
	int ok = st_sync_dense_init(&s->dense, env) == ST_OK && s->w && s->clock && s->active;
	for (int i = 0; ok && i < s->N; i++) {
		ok = st_sync_hogwild_init(&s->w[i], env) == ST_OK;
		s->active[i] = 1;
	}
	if (!ok) {
		hb_destroy(s);
		return ST_ENOMEM;
	}
	*self = s;
	return ST_OK;
}

/* Workers blocked in begin_step now: lets tests see a worker blocked
 * without timing (tests/unit/test_sync_baselines.c). Thread-safe. */
int st__hop_bs_waiting(void *self);
int st__hop_bs_waiting(void *self)
{
	hopbs_t *s = self;
	pthread_mutex_lock(&s->mu);
	int n = s->waiting;
	pthread_mutex_unlock(&s->mu);
	return n;
}

static int hb_begin_batch(void *self, uint32_t n_uniq)
{
	hopbs_t *s = self;
	(void)n_uniq;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->N; i++) {
		s->clock[i] = 0;
		s->active[i] = 1;
	}
	pthread_mutex_unlock(&s->mu);
	return ST_OK;
}

/* Slowest active clock; under mu. With no active worker (cannot happen for
 * a caller that is itself active) the caller's own clock. */
static uint64_t min_clock(const hopbs_t *s, uint64_t self_clock)
{
	uint64_t m = self_clock;
	for (int v = 0; v < s->N; v++)
		if (s->active[v] && s->clock[v] < m)
			m = s->clock[v];
	return m;
}

static const float *hb_begin_step(void *self, int w, uint64_t step)
{
	hopbs_t *s = self;
	(void)step;
	pthread_mutex_lock(&s->mu);
	while (s->clock[w] - min_clock(s, s->clock[w]) > s->b) {
		s->waiting++;
		pthread_cond_wait(&s->cv, &s->mu);
		s->waiting--;
	}
	pthread_mutex_unlock(&s->mu);
	return st_sync_hogwild_read(&s->w[w], &s->env, &s->version);
}

static int hb_apply(void *self, int w, st_sync_grads_t *g)
{
	hopbs_t *s = self;
	if (g->n_examples)   /* Hogwild, as async.c */
		st_sync_apply_hogwild(&s->env, &s->dense, &s->version, &s->w[w], g, &s->st);
	pthread_mutex_lock(&s->mu);
	s->clock[w]++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return ST_OK;
}

static void hb_end_batch(void *self, int w)
{
	hopbs_t *s = self;
	pthread_mutex_lock(&s->mu);
	s->active[w] = 0;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void hb_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((hopbs_t *)self)->st, out);
}

const st_sync_ops_t st_sync_hop_bs_ops = {
	.name = "hop_bs",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_RELAXED_READS,
	.create = hb_create,
	.destroy = hb_destroy,
	.begin_batch = hb_begin_batch,
	.begin_step = hb_begin_step,
	.apply = hb_apply,
	.end_batch = hb_end_batch,
	.report = hb_report,
};
