/*
 * hop_bw.c — backup workers ("hop_bw{b}"): the Hop-BW baseline of the GBA
 * paper (gba-global-batch-aggregation.txt, Section 2 "Related Work": Hop-BW
 * "ignores the gradients from the stragglers with the well-shuffled and
 * redundancy data"; Section 5.1: "Backup worker (Hop-BW) ignores the
 * pre-set number b3 of gradients from the slowest workers during each
 * gradient aggregation"; Luo et al., Hop, ref. [22]; Chen et al. 2016,
 * "Revisiting distributed synchronous SGD").
 *
 * Schedule LOCKSTEP: step s gives minibatch s·N + w to worker w. Step `cur`
 * collects gradients; the first N - b workers whose gradients arrive for it
 * (the quorum) are reduced and applied as one optimizer step, which closes
 * the step; a gradient that arrives for a step already closed (the b late
 * workers) is dropped and counted in `dropped`. The quorum rule is the core
 * ops/algo/hopclock.h (Hop-BW), which the ranks transport (ops/dist/hop.c)
 * runs too with ranks as the units; here the units are the N workers of a
 * lockstep step, all of them active. Late workers do not wait:
 * apply returns at once, and their next begin_step copies the parameters
 * of the closed steps — they start the next step from the new parameters.
 * A worker can be late for several steps in a row (a persistent straggler
 * loses all its minibatches, the data loss the paper blames for Hop-BW's
 * accuracy), but never early: a worker returns from apply(s) only once
 * step s is closed.
 *
 * Scale: the trainer scales LOCKSTEP gradients so that the N workers' sum
 * is the gradient of the step's loss. The quorum's sum is multiplied by
 * (N - e) / K, K the gradients kept and e the workers seen with an empty
 * minibatch in this step, so the update is the mean of the kept workers'
 * gradients at the scale of a full step (for mean-loss models: the mean
 * loss over the kept examples, exactly when the minibatches are equal, as
 * in Chen et al.; across processes each rank's gradient is already its own
 * examples' mean, so the ranks take 1 / K). An empty minibatch (the end of a
 * batch) never counts toward the quorum; a step also closes when all N
 * workers have arrived, so a step where fewer than N - b workers have data
 * still closes. (Whether a worker has data is known only when it arrives,
 * so all N count as active; docs/design-notes.md, "One core per
 * algorithm".)
 *
 * Staleness of a kept gradient = steps closed between its read and its
 * step (always 0 here: a kept worker read the parameters of its own step).
 * Bytes (what a parameter-server run would send per contribution, kept or
 * dropped: the late gradient is sent before the server drops it): dense
 * 4·nparams plus, per touched row, an 8-byte key and 4·dim floats.
 * Parameter pulls are not counted (as async.c and allreduce.c).
 *
 * Threads: hooks on the N worker threads. One mutex `mu` guards the step
 * state, the reduction buffers, the dense parameters and optimizer state:
 * contributions are summed under it (in arrival order), the closing worker
 * runs the optimizer step under it, begin_step copies the dense parameters
 * under it. Sparse rows are read by the trainer without our lock (a late
 * worker computes while others close steps), so they are written with
 * relaxed atomics (flag ST_SYNC_RELAXED_READS). Waiting workers sleep on
 * `cv`, broadcast at each close. One lock only: no lock order.
 */
#include "ops/sync/sync.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/hopclock.h"
#include "runtime/err.h"

typedef struct {
	st_sync_env_t env;
	int N;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* ---- under mu ---- */
	st_sync_dense_t dense; /* t: optimizer steps applied (Adam's step number) */
	st_algo_hopbw_t q;     /* q.k: the step collecting gradients = steps closed */
	int empty;             /* workers of step q.k without a minibatch */
	st_sync_gradbuf_t buf; /* the kept gradients of the open step */
	uint64_t *wstep;       /* [N] step of worker w's next apply */
	uint64_t *v0;          /* [N] cur at worker w's begin_step */
	float **snap;          /* [N][nparams] */
	st_sync_stats_t st;    /* relaxed atomics */
} hopbw_t;

static void bw_destroy(void *self)
{
	hopbw_t *s = self;
	if (!s)
		return;
	st_sync_snaps_destroy(s->snap, s->N);
	free(s->v0);
	free(s->wstep);
	st_sync_dense_fini(&s->dense);
	st_sync_gradbuf_fini(&s->buf);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}

static int bw_create(void **self, const st_sync_env_t *env)
{
	double b = st_sync_cfg_num(env->cfg, "b", -1);
	if (!(b >= 0) || b >= env->n_workers) {
		st_error("sync policy hop_bw: parameter b (backup workers whose gradients "
			 "each step drops) must be >= 0 and below the number of train "
			 "workers (%d); got %g", env->n_workers, b);
		return ST_EJOB;
	}
	hopbw_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->q.b = (uint32_t)b;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->snap = st_sync_snaps_create(env);
	s->v0 = calloc((size_t)s->N, sizeof *s->v0);
	s->wstep = calloc((size_t)s->N, sizeof *s->wstep);
	int ok = st_sync_gradbuf_init(&s->buf, env) == ST_OK &&
		 st_sync_dense_init(&s->dense, env) == ST_OK && s->snap && s->v0 && s->wstep;
	if (!ok) {
		bw_destroy(s);
		return ST_ENOMEM;
	}
	*self = s;
	return ST_OK;
}

static int bw_begin_batch(void *self, uint32_t n_uniq)
{
	hopbw_t *s = self;
	/* No worker runs; every step of the last batch is closed, so the
	 * buffers are empty. */
	return st_sync_gradbuf_reserve(&s->buf, n_uniq);
}

static const float *bw_begin_step(void *self, int w, uint64_t step)
{
	hopbw_t *s = self;
	(void)step;
	pthread_mutex_lock(&s->mu);
	s->v0[w] = s->q.k;
	memcpy(s->snap[w], s->env.params, sizeof(float) * s->env.nparams);
	pthread_mutex_unlock(&s->mu);
	return s->snap[w];
}

/* Closes step q.k: applies the kept gradients (if any) and wakes the
 * waiters. Under mu. */
static void close_step(hopbw_t *s)
{
	const st_sync_env_t *env = &s->env;
	const uint32_t K = st_algo_hopbw_close(&s->q);
	if (K) {
		/* The kept gradients' mean at a full step's scale (file comment). */
		const float f = (float)(s->N - s->empty) / (float)K;
		st_sync_gradbuf_apply(&s->buf, env, s->dense.state, f, ++*s->dense.t);
		st_sync_stat_add(&s->st.steps, 1);
	}
	s->empty = 0;
	pthread_cond_broadcast(&s->cv);
}

static int bw_apply(void *self, int w, st_sync_grads_t *g)
{
	hopbw_t *s = self;
	pthread_mutex_lock(&s->mu);
	const uint64_t sw = s->wstep[w]++;
	const uint64_t cur = s->q.k;
	const int in = st_algo_hopbw_arrive(&s->q, sw, g->n_examples > 0);
	assert(in >= 0);   /* a worker leaves apply(s) only once s closed */
	if (in == ST_ALGO_BW_LATE) {
		/* Late: the step closed without us. */
		pthread_mutex_unlock(&s->mu);
		if (g->n_examples) {
			st_sync_stat_add(&s->st.dropped, 1);
			st_sync_stat_add(&s->st.bytes, st_sync_grad_bytes(&s->env, g));
		}
		return ST_OK;
	}
	if (in == ST_ALGO_BW_KEPT) {
		st_sync_gradbuf_add(&s->buf, &s->env, g);
		st_sync_stat_add(&s->st.updates, 1);
		st_sync_stat_add(&s->st.bytes, st_sync_grad_bytes(&s->env, g));
		st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(cur - s->v0[w])], 1);
	} else {
		s->empty++;
	}
	if (st_algo_hopbw_closes(&s->q, (uint32_t)s->N))
		close_step(s);
	while (s->q.k == sw)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return ST_OK;
}

static void bw_end_batch(void *self, int w)
{
	(void)self;
	(void)w;
}

static void bw_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((hopbw_t *)self)->st, out);
}

const st_sync_ops_t st_sync_hop_bw_ops = {
	.name = "hop_bw",
	.schedule = ST_SYNC_LOCKSTEP,
	.flags = ST_SYNC_RELAXED_READS,
	.create = bw_create,
	.destroy = bw_destroy,
	.begin_batch = bw_begin_batch,
	.begin_step = bw_begin_step,
	.apply = bw_apply,
	.end_batch = bw_end_batch,
	.report = bw_report,
};
