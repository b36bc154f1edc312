/* test_sync_baselines.c — the GBA paper's baselines (ops/sync/hop_bs.c,
 * bsp.c, hop_bw.c): hop_bs keeps the fastest worker at most b steps ahead
 * and lets it finish once the slow one ends its batch; bsp applies exactly
 * one optimizer step per b gradients (and flushes the rest at the end of a
 * batch); hop_bw keeps the first N - b gradients of a step and drops the
 * late ones, whose workers go on from the new parameters; each policy
 * learns through the trainer on generated data.
 *
 * Schedules are scripted with semaphores; a worker blocked inside a policy
 * is observed through st__hop_bs_waiting, never through time. The only
 * clock is a 60 s deadlock guard that turns a hang into a failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/gen/gen.h"
#include "ops/sync/sync.h"
#include "ops/sync/registry.h"
#include "ops/train/trainer.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "sync_policy_util.h"

int st__hop_bs_waiting(void *self);

/* ---- a policy on a tiny model, driven by hand ---------------------------- */

typedef struct {
	st_model_t *model;
	st_optim_t dopt, sopt;
	char *keys[1];
	double vals[1];
	st_sync_cfg_t cfg;
	st_sync_env_t env;
	const st_sync_ops_t *ops;
	void *pol;
	size_t np;
	int dim;              /* row floats (the model's max row dim) */
	float row[8];         /* the one shared sparse row (SGD: no state) */
} mock_t;

#define LR 0.5f

static void mock_init(mock_t *m, const char *policy, int b, int n_workers)
{
	memset(m, 0, sizeof *m);
	st_model_cfg_t mc = { .type = (char *)"lr", .emb_dim = 1 };
	assert_int_equal(st_model_create(&m->model, &mc, 3, 1, 1), ST_OK);
	m->np = st_model_nparams(m->model);
	m->dim = st_model_max_row_dim(m->model);
	assert_true(m->np >= 2 && m->np <= 64 && m->dim >= 1 && m->dim <= 8);
	m->dopt = (st_optim_t){ .kind = ST_OPT_SGD, .lr = LR };
	m->sopt = (st_optim_t){ .kind = ST_OPT_SGD, .lr = LR };
	m->keys[0] = (char *)"b";
	m->vals[0] = b;
	m->cfg = (st_sync_cfg_t){ .name = (char *)policy, .n_params = 1, .keys = m->keys,
				  .vals = m->vals };
	float *p = st_model_params(m->model);
	for (size_t i = 0; i < m->np; i++)
		p[i] = 0.1f * (float)(i + 1);
	for (int j = 0; j < m->dim; j++)
		m->row[j] = -0.2f * (float)(j + 1);
	m->env = (st_sync_env_t){ .n_workers = n_workers, .cfg = &m->cfg, .model = m->model,
				  .params = p, .nparams = m->np, .dense_opt = &m->dopt,
				  .sparse_opt = &m->sopt };
	m->ops = st_sync_find(policy);
	assert_non_null(m->ops);
	assert_int_equal(m->ops->create(&m->pol, &m->env), ST_OK);
	assert_int_equal(m->ops->begin_batch(m->pol, 1), ST_OK);
}

static void mock_fini(mock_t *m)
{
	m->ops->destroy(m->pol);
	st_model_destroy(m->model);
}

/* One worker's gradient: dense and one row (unique key 0). */
typedef struct {
	float dense[64];
	float grad[8];
	uint32_t uidx[1];
	float *rows[1];
	uint16_t rdim[1];
	uint32_t mark[1];
	st_sync_grads_t g;
} mgrad_t;

/* Gradient number k (values differ per k and per float). */
static void mgrad_make(mgrad_t *x, mock_t *m, int k, uint32_t n_examples)
{
	memset(x, 0, sizeof *x);
	for (size_t i = 0; i < m->np; i++)
		x->dense[i] = 0.01f * (float)(k + 1) * (float)(i % 5 + 1) - 0.02f * (float)k;
	for (int j = 0; j < m->dim; j++)
		x->grad[j] = 0.03f * (float)(k + 2) + 0.01f * (float)j;
	x->rows[0] = m->row;
	x->rdim[0] = (uint16_t)m->dim;
	x->mark[0] = 1;
	x->g = (st_sync_grads_t){ .n_examples = n_examples, .dense = x->dense,
				  .n_rows = n_examples ? 1 : 0, .uidx = x->uidx,
				  .rows = x->rows, .row_dim = x->rdim, .grad = x->grad,
				  .gstride = m->dim, .mark = x->mark, .stamp = 1 };
}

/* SGD reference: w -= LR * scale * sum of the listed gradients. Tolerance:
 * a handful of float adds and one multiply of values ~0.1: 1e-6. */
static void expect_step(const mock_t *m, const float *p0, const float *r0,
			const mgrad_t *const *gs, int n, double scale)
{
	const float *p = m->env.params;
	for (size_t i = 0; i < m->np; i++) {
		double sum = 0;
		for (int k = 0; k < n; k++)
			sum += gs[k]->dense[i];
		assert_float_equal(p[i], p0[i] - LR * scale * sum, 1e-6);
	}
	for (int j = 0; j < m->dim; j++) {
		double sum = 0;
		for (int k = 0; k < n; k++)
			sum += gs[k]->grad[j];
		assert_float_equal(m->row[j], r0[j] - LR * scale * sum, 1e-6);
	}
}

static void snapshot(const mock_t *m, float *p, float *r)
{
	memcpy(p, m->env.params, sizeof(float) * m->np);
	memcpy(r, m->row, sizeof(float) * (size_t)m->dim);
}

static void deadline_check(const struct timespec *t0, const char *what)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	if (t.tv_sec - t0->tv_sec > 60)
		fail_msg("deadlock guard: %s did not happen", what);
}

/* sem_wait with the deadlock guard. */
static void swait(sem_t *s, const char *what)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += 60;
	if (sem_timedwait(s, &t) != 0)
		fail_msg("deadlock guard: %s did not happen", what);
}

/* ---- bsp --------------------------------------------------------------- */

/* b = 3, two workers, single thread (bsp never blocks): nothing moves for
 * two gradients, the third applies their mean once; staleness counts the
 * steps between a read and the step a gradient goes into; the end of the
 * batch flushes a partial buffer averaged over what it holds. */
static void test_sync_baselines_bsp_one_step_per_b(void **state)
{
	(void)state;
	mock_t m;
	mock_init(&m, "bsp", 3, 2);
	const st_sync_ops_t *o = m.ops;
	mgrad_t g[8];
	for (int k = 0; k < 8; k++)
		mgrad_make(&g[k], &m, k, 10);
	float p0[64], r0[8];
	snapshot(&m, p0, r0);
	st_sync_stats_t st;

	o->begin_step(m.pol, 0, 0);
	o->begin_step(m.pol, 1, 0);
	assert_int_equal(o->apply(m.pol, 0, &g[0].g), ST_OK);
	assert_int_equal(o->apply(m.pol, 1, &g[1].g), ST_OK);
	assert_memory_equal(m.env.params, p0, sizeof(float) * m.np);
	assert_memory_equal(m.row, r0, sizeof(float) * (size_t)m.dim);
	o->report(m.pol, &st);
	assert_int_equal(st.steps, 0);
	o->begin_step(m.pol, 1, 1);
	assert_int_equal(o->apply(m.pol, 1, &g[2].g), ST_OK);
	const mgrad_t *s1[] = { &g[0], &g[1], &g[2] };
	expect_step(&m, p0, r0, s1, 3, 1.0 / 3);
	o->report(m.pol, &st);
	assert_int_equal(st.steps, 1);
	assert_int_equal(st.updates, 3);

	/* Worker 0 reads at step 1; worker 1 then fills a buffer (step 2);
	 * worker 0's gradient goes into step 3: staleness 1. */
	float p1[64], r1[8];
	snapshot(&m, p1, r1);
	const float *seen = o->begin_step(m.pol, 0, 1);
	assert_memory_equal(seen, p1, sizeof(float) * m.np);
	for (int k = 3; k < 6; k++) {
		o->begin_step(m.pol, 1, (uint64_t)k);
		assert_int_equal(o->apply(m.pol, 1, &g[k].g), ST_OK);
	}
	const mgrad_t *s2[] = { &g[3], &g[4], &g[5] };
	expect_step(&m, p1, r1, s2, 3, 1.0 / 3);
	float p2[64], r2[8];
	snapshot(&m, p2, r2);
	assert_int_equal(o->apply(m.pol, 0, &g[6].g), ST_OK);
	assert_memory_equal(m.env.params, p2, sizeof(float) * m.np);
	o->report(m.pol, &st);
	assert_int_equal(st.steps, 2);
	assert_int_equal(st.staleness[0], 6);
	assert_int_equal(st.staleness[st_sync_hist_bucket(1)], 1);

	/* End of batch: the last worker out flushes the one gradient left. */
	o->end_batch(m.pol, 0);
	assert_memory_equal(m.env.params, p2, sizeof(float) * m.np);
	o->end_batch(m.pol, 1);
	const mgrad_t *s3[] = { &g[6] };
	expect_step(&m, p2, r2, s3, 1, 1.0);
	o->report(m.pol, &st);
	assert_int_equal(st.steps, 3);
	assert_int_equal(st.updates, 7);
	assert_int_equal(st.dropped, 0);
	/* 7 contributions × (dense + one row with its key). */
	assert_int_equal(st.bytes, 7 * (4 * m.np + 8 + 4 * (uint64_t)m.dim));
	mock_fini(&m);
}

/* ---- hop_bw ------------------------------------------------------------ */

enum { BW_N = 3, BW_STEPS = 2 };

typedef struct {
	mock_t *m;
	int w;
	mgrad_t g[BW_STEPS];
	float seen[BW_STEPS][64];  /* the params begin_step gave */
	sem_t go, done;
} bw_worker_t;

static void *bw_main(void *arg)
{
	bw_worker_t *x = arg;
	for (int s = 0; s < BW_STEPS; s++) {
		const float *p = x->m->ops->begin_step(x->m->pol, x->w, (uint64_t)s);
		memcpy(x->seen[s], p, sizeof(float) * x->m->np);
		/* Posted once this worker has read its parameters for step s
		 * (for s >= 1: its step s - 1 is done), so the script knows
		 * which parameters it saw. */
		sem_post(&x->done);
		sem_wait(&x->go);
		x->m->ops->apply(x->m->pol, x->w, &x->g[s].g);
	}
	sem_post(&x->done);
	x->m->ops->end_batch(x->m->pol, x->w);
	return NULL;
}

/* Starts the BW_N workers on gradients s * BW_N + w (only worker 0 with
 * examples when w0_only) and waits until each has read step 0's
 * parameters. */
static void bw_start(mock_t *m, bw_worker_t *x, pthread_t *tid, int w0_only)
{
	for (int w = 0; w < BW_N; w++) {
		x[w].m = m;
		x[w].w = w;
		for (int s = 0; s < BW_STEPS; s++)
			mgrad_make(&x[w].g[s], m, s * BW_N + w, !w0_only || w == 0 ? 10 : 0);
		sem_init(&x[w].go, 0, 0);
		sem_init(&x[w].done, 0, 0);
	}
	for (int w = 0; w < BW_N; w++)
		assert_int_equal(pthread_create(&tid[w], NULL, bw_main, &x[w]), 0);
	for (int w = 0; w < BW_N; w++)
		swait(&x[w].done, "a worker reading step 0's parameters");
}

static void bw_fini(bw_worker_t *x)
{
	for (int w = 0; w < BW_N; w++) {
		sem_destroy(&x[w].go);
		sem_destroy(&x[w].done);
	}
}

/* N = 3, b = 1. Step 0 arrives in the order 0, 1, 2 and step 1 in the
 * order 2, 0, 1: each step applies the mean of its first two gradients
 * (trainer scale: each is its minibatch's gradient / N), the third is
 * dropped, its worker is not held, and every worker starts step 1 from the
 * parameters after step 0 — the late worker 2 included. */
static void test_sync_baselines_hop_bw_drops_slowest(void **state)
{
	(void)state;
	mock_t m;
	mock_init(&m, "hop_bw", 1, BW_N);
	float p0[64], r0[8], p1[64], r1[8];
	snapshot(&m, p0, r0);
	bw_worker_t x[BW_N];
	pthread_t tid[BW_N];
	bw_start(&m, x, tid, 0);
	st_sync_stats_t st;

	/* Step 0: workers 0 and 1 form the quorum. */
	sem_post(&x[0].go);
	sem_post(&x[1].go);
	swait(&x[0].done, "worker 0's step 0");
	swait(&x[1].done, "worker 1's step 0");
	const mgrad_t *k0[] = { &x[0].g[0], &x[1].g[0] };
	expect_step(&m, p0, r0, k0, 2, (double)BW_N / 2);   /* mean of (N g) */
	snapshot(&m, p1, r1);
	m.ops->report(m.pol, &st);
	assert_int_equal(st.steps, 1);
	assert_int_equal(st.dropped, 0);
	/* Worker 2 arrives late: dropped, returns at once. */
	sem_post(&x[2].go);
	swait(&x[2].done, "late worker 2 returning");
	assert_memory_equal(m.env.params, p1, sizeof(float) * m.np);
	assert_memory_equal(m.row, r1, sizeof(float) * (size_t)m.dim);
	m.ops->report(m.pol, &st);
	assert_int_equal(st.dropped, 1);

	/* Step 1: workers 2 and 0 first; worker 1 is dropped. */
	sem_post(&x[2].go);
	sem_post(&x[0].go);
	swait(&x[2].done, "worker 2's step 1");
	swait(&x[0].done, "worker 0's step 1");
	const mgrad_t *k1[] = { &x[2].g[1], &x[0].g[1] };
	expect_step(&m, p1, r1, k1, 2, (double)BW_N / 2);
	sem_post(&x[1].go);
	swait(&x[1].done, "late worker 1 returning");
	for (int w = 0; w < BW_N; w++)
		assert_int_equal(pthread_join(tid[w], NULL), 0);
	/* Everyone, the late worker 2 too, read the parameters of step 0. */
	for (int w = 0; w < BW_N; w++) {
		assert_memory_equal(x[w].seen[0], p0, sizeof(float) * m.np);
		if (memcmp(x[w].seen[1], p1, sizeof(float) * m.np))
			fail_msg("worker %d did not start step 1 from the params of step 0", w);
	}
	m.ops->report(m.pol, &st);
	assert_int_equal(st.steps, 2);
	assert_int_equal(st.updates, 4);
	assert_int_equal(st.dropped, 2);
	assert_int_equal(st.staleness[0], 4);
	assert_int_equal(st.bytes, 6 * (4 * m.np + 8 + 4 * (uint64_t)m.dim));
	bw_fini(x);
	mock_fini(&m);
}

/* The last step of a batch where only worker 0 has a minibatch: fewer
 * gradients than the quorum, so the step closes when all N have arrived and
 * applies worker 0's gradient at full scale. */
static void test_sync_baselines_hop_bw_short_step_closes(void **state)
{
	(void)state;
	mock_t m;
	mock_init(&m, "hop_bw", 1, BW_N);
	float p0[64], r0[8];
	snapshot(&m, p0, r0);
	bw_worker_t x[BW_N];
	pthread_t tid[BW_N];
	bw_start(&m, x, tid, 1);
	for (int s = 0; s < BW_STEPS; s++) {
		for (int w = 0; w < BW_N; w++)
			sem_post(&x[w].go);
		for (int w = 0; w < BW_N; w++)
			swait(&x[w].done, "a short step closing");
	}
	for (int w = 0; w < BW_N; w++)
		assert_int_equal(pthread_join(tid[w], NULL), 0);
	/* Two steps of worker 0's gradient alone: the trainer scaled it by
	 * 1 / (its own examples), so the factor is 1. */
	const mgrad_t *k[] = { &x[0].g[0], &x[0].g[1] };
	expect_step(&m, p0, r0, k, 2, 1.0);
	st_sync_stats_t st;
	m.ops->report(m.pol, &st);
	assert_int_equal(st.steps, 2);
	assert_int_equal(st.dropped, 0);
	bw_fini(x);
	mock_fini(&m);
}

/* ---- hop_bs ------------------------------------------------------------ */

enum { BS_B = 2, BS_FAST_STEPS = BS_B + 6 };

typedef struct {
	mock_t *m;
	mgrad_t g;
	int fast_begun;        /* begin_step returns of worker 0 (atomic) */
	int slow_applying;     /* applies worker 1 has started (atomic) */
	int slow_ended;        /* worker 1 is past its steps (atomic) */
	int max_gap;           /* worker 0: step index - slow_applying, max,
				  while worker 1 is still in the batch */
	sem_t slow_go, slow_done;
} bs_t;

static void *bs_fast(void *arg)
{
	bs_t *x = arg;
	for (int i = 0; i < BS_FAST_STEPS; i++) {
		x->m->ops->begin_step(x->m->pol, 0, (uint64_t)i);
		/* slow_applying is raised before the slow worker's apply, so it
		 * never lags the policy's clock: the gap measured here is at most
		 * the true one. */
		int gap = i - __atomic_load_n(&x->slow_applying, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&x->slow_ended, __ATOMIC_SEQ_CST) && gap > x->max_gap)
			x->max_gap = gap;
		__atomic_store_n(&x->fast_begun, i + 1, __ATOMIC_SEQ_CST);
		x->m->ops->apply(x->m->pol, 0, &x->g.g);
	}
	x->m->ops->end_batch(x->m->pol, 0);
	return NULL;
}

/* The slow worker does one step per slow_go, then, at the post with no step
 * left, ends its batch (it found no more minibatches). */
static void *bs_slow(void *arg)
{
	bs_t *x = arg;
	for (int i = 0;; i++) {
		sem_wait(&x->slow_go);
		if (i == 1)
			break;
		x->m->ops->begin_step(x->m->pol, 1, (uint64_t)i);
		__atomic_store_n(&x->slow_applying, i + 1, __ATOMIC_SEQ_CST);
		x->m->ops->apply(x->m->pol, 1, &x->g.g);
		sem_post(&x->slow_done);
	}
	__atomic_store_n(&x->slow_ended, 1, __ATOMIC_SEQ_CST);
	x->m->ops->end_batch(x->m->pol, 1);
	return NULL;
}

/* Waits until worker 0 is blocked inside begin_step, then checks that it
 * had begun exactly `begun` steps. */
static void bs_expect_blocked(bs_t *x, int begun)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* First the steps, then the block: a waiter counted before its last
	 * wake-up is still counted until it runs again. */
	while (__atomic_load_n(&x->fast_begun, __ATOMIC_SEQ_CST) < begun) {
		deadline_check(&t0, "the fast worker's steps");
		sched_yield();
	}
	while (st__hop_bs_waiting(x->m->pol) != 1) {
		deadline_check(&t0, "the fast worker blocking");
		sched_yield();
	}
	assert_int_equal(__atomic_load_n(&x->fast_begun, __ATOMIC_SEQ_CST), begun);
}

/* b = 2: with worker 1 held before its first step, worker 0 runs steps
 * 0..b and blocks when it would start step b + 1; one step of worker 1
 * lets it start exactly one more; worker 1 ending its batch lets it finish.
 * Over the run, the gap never exceeds b and reaches it. */
static void test_sync_baselines_hop_bs_bounded_gap(void **state)
{
	(void)state;
	mock_t m;
	mock_init(&m, "hop_bs", BS_B, 2);
	bs_t x;
	memset(&x, 0, sizeof x);
	x.m = &m;
	x.max_gap = -1;
	mgrad_make(&x.g, &m, 0, 10);
	sem_init(&x.slow_go, 0, 0);
	sem_init(&x.slow_done, 0, 0);
	pthread_t tf, ts;
	assert_int_equal(pthread_create(&ts, NULL, bs_slow, &x), 0);
	assert_int_equal(pthread_create(&tf, NULL, bs_fast, &x), 0);

	bs_expect_blocked(&x, BS_B + 1);
	sem_post(&x.slow_go);                    /* worker 1: one step */
	swait(&x.slow_done, "the slow worker's step");
	bs_expect_blocked(&x, BS_B + 2);
	sem_post(&x.slow_go);                    /* worker 1: end of batch */
	assert_int_equal(pthread_join(tf, NULL), 0);
	assert_int_equal(pthread_join(ts, NULL), 0);
	assert_int_equal(x.fast_begun, BS_FAST_STEPS);
	/* After worker 1 left, worker 0 ran on alone (gap no longer counted
	 * against it); before, the gap was at most b and reached b. */
	print_message("hop_bs b=%d: max gap while both active %d\n", BS_B, x.max_gap);
	assert_int_equal(x.max_gap, BS_B);
	st_sync_stats_t st;
	m.ops->report(m.pol, &st);
	assert_int_equal(st.updates, BS_FAST_STEPS + 1);
	assert_int_equal(st.steps, BS_FAST_STEPS + 1);
	sem_destroy(&x.slow_go);
	sem_destroy(&x.slow_done);
	mock_fini(&m);
}

/* ---- learning through the trainer ---------------------------------------- */

/* ~200k rows: on this generator dnn reaches progressive AUC ~0.74 with
 * async over 200k rows (test_trainer.c) and an untrained model 0.5; 0.70
 * fails a model that learns only biases or the dense features (~0.60). */
#define LEARN_ROWS (49 * 4096)

static double learn(const char *policy, int b, int workers, st_sync_stats_t *ss)
{
	char *keys[1] = { (char *)"b" };
	double vals[1] = { b };
	st_sync_cfg_t cfg = { .name = (char *)policy, .n_params = 1, .keys = keys, .vals = vals };
	double eval_auc;
	return util_learn(&cfg, workers, LEARN_ROWS, &eval_auc, ss);
}

static void test_sync_baselines_hop_bs_learns(void **state)
{
	(void)state;
	st_sync_stats_t ss;
	assert_true(learn("hop_bs", 2, 2, &ss) > 0.70);
	assert_int_equal(ss.updates, LEARN_ROWS / 256);
}

static void test_sync_baselines_bsp_learns(void **state)
{
	(void)state;
	st_sync_stats_t ss;
	assert_true(learn("bsp", 2, 2, &ss) > 0.70);
	/* 16 minibatches per batch, b = 2: 8 steps per batch, no partial. */
	assert_int_equal(ss.updates, LEARN_ROWS / 256);
	assert_int_equal(ss.steps, LEARN_ROWS / 512);
}

static void test_sync_baselines_hop_bw_learns(void **state)
{
	(void)state;
	st_sync_stats_t ss;
	assert_true(learn("hop_bw", 1, 3, &ss) > 0.70);
	assert_int_equal(ss.updates + ss.dropped, LEARN_ROWS / 256);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sync_baselines_bsp_one_step_per_b),
		cmocka_unit_test(test_sync_baselines_hop_bw_drops_slowest),
		cmocka_unit_test(test_sync_baselines_hop_bw_short_step_closes),
		cmocka_unit_test(test_sync_baselines_hop_bs_bounded_gap),
		cmocka_unit_test(test_sync_baselines_hop_bs_learns),
		cmocka_unit_test(test_sync_baselines_bsp_learns),
		cmocka_unit_test(test_sync_baselines_hop_bw_learns),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
