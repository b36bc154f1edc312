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
 * time). The only difference from async is the clock rule, the core
 * ops/algo/hopclock.h that the ranks transport (ops/dist/hop.c) runs too:
 *
 *   clock[w] = gradients worker w has applied in this batch.
 *   begin_step(w) returns only when clock[w] - min(clock[v] : v active) <= b,
 *   i.e. a worker may start its step number k only when the slowest active
 *   worker has finished step k - b. With b = 0 that is BSP (nobody starts
 *   step k + 1 before everyone finished step k); a worker is thus never more
 *   than b steps ahead of the slowest one while that one works on a step.
 *
 * Membership: begin_batch (no worker running) makes every worker active
 * with clock 0: the trainer's end-of-batch barrier brings the workers
 * together, so each batch is a common start (across processes there is
 * none, and a worker joins at its first step instead). A worker that found
 * no more minibatches calls end_batch, which makes it idle; idle workers no
 * longer count as the slowest, so the others can always finish the batch.
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
 * (their states too); it is never held while touching parameters. Parameters and
 * optimizer state are relaxed atomics (no C11 data race; concurrent updates
 * of one tensor may overwrite each other, as Hogwild accepts). Statistics
 * are relaxed atomics. One lock only: no lock order.
 */
#include "ops/sync/sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/hopclock.h"
#include "runtime/err.h"

typedef struct {
	st_sync_env_t env;
	int N;
	st_sync_dense_t dense; /* shared, relaxed atomics (t: step numbers handed out) */
	uint64_t version;     /* updates applied (atomic) */
	st_sync_hogwild_t *w; /* [N] */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	st_algo_hopclock_t clk; /* [N] workers, bound b; under mu */
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
	st_algo_hopclock_fini(&s->clk);
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
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->w = calloc((size_t)s->N, sizeof *s->w);
	int ok = st_sync_dense_init(&s->dense, env) == ST_OK && s->w &&
		 st_algo_hopclock_init(&s->clk, (size_t)s->N, (uint64_t)b) == ST_OK;
	if (ok)
		st_algo_hopclock_reset(&s->clk, 1);
	for (int i = 0; ok && i < s->N; i++)
		ok = st_sync_hogwild_init(&s->w[i], env) == ST_OK;
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
	st_algo_hopclock_reset(&s->clk, 1);   /* a common start (file comment) */
	pthread_mutex_unlock(&s->mu);
	return ST_OK;
}

static const float *hb_begin_step(void *self, int w, uint64_t step)
{
	hopbs_t *s = self;
	(void)step;
	pthread_mutex_lock(&s->mu);
	st_algo_hopclock_join(&s->clk, (size_t)w);   /* active already within a batch */
	while (!st_algo_hopclock_ready(&s->clk, (size_t)w)) {
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
	st_algo_hopclock_tick(&s->clk, (size_t)w);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return ST_OK;
}

static void hb_end_batch(void *self, int w)
{
	hopbs_t *s = self;
	pthread_mutex_lock(&s->mu);
	st_algo_hopclock_idle(&s->clk, (size_t)w);
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
