/* test_sync_hybrid.c — PERSIA hybrid (ops/sync/hybrid.c): under a scripted
 * schedule (the embedding worker held at a hook) workers run exactly
 * `staleness` steps ahead of the oldest un-applied embedding update and no
 * further; with staleness 0 every read sees all earlier updates; the dense
 * parameters follow allreduce bit for bit; it learns like allreduce. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <semaphore.h>

#include "sync_policy_util.h"

extern void (*st__sync_hybrid_apply_hook)(void *arg, int w, uint64_t step);
extern void (*st__sync_hybrid_block_hook)(void *arg, int w, uint64_t step);
extern void *st__sync_hybrid_hook_arg;

enum { STEPS = 6 };

static sem_t go, blocked;
static uint64_t blocked_at[2];     /* atomic: step a worker blocked at */
static int steps_done[2];          /* atomic: applies completed */
static float seen[2][STEPS];       /* row value read at begin_step */
static float row[1];               /* the one shared row (SGD: no state) */

static void apply_hook(void *arg, int w, uint64_t step)
{
	(void)arg;
	(void)w;
	(void)step;
	while (sem_wait(&go) != 0)
		;
}

static void block_hook(void *arg, int w, uint64_t step)
{
	(void)arg;
	__atomic_store_n(&blocked_at[w], step, __ATOMIC_RELAXED);
	sem_post(&blocked);
}

typedef struct {
	util_pol_t *p;
	int w;
} hdrv_t;

/* Each step every worker sends gradient 1 for the row (lr 1: -1 each). */
static void *hdrive(void *arg)
{
	hdrv_t *d = arg;
	size_t n = d->p->env.nparams;
	float *g = calloc(n, sizeof(float));
	float *rows[1] = { row };
	uint32_t uidx[1] = { 0 }, mark[1] = { 0 };
	uint16_t dim[1] = { 1 };
	for (int s = 0; s < STEPS; s++) {
		(void)d->p->ops->begin_step(d->p->self, d->w, (uint64_t)s);
		__atomic_load(&row[0], &seen[d->w][s], __ATOMIC_RELAXED);
		float gr[1] = { 1.0f };
		mark[0] = (uint32_t)s + 1;
		st_sync_grads_t gg = { .n_examples = 1, .dense = g, .n_rows = 1, .uidx = uidx,
				       .rows = rows, .row_dim = dim, .grad = gr, .gstride = 1,
				       .mark = mark, .stamp = (uint32_t)s + 1 };
		assert_int_equal(d->p->ops->apply(d->p->self, d->w, &gg), ST_OK);
		__atomic_add_fetch(&steps_done[d->w], 1, __ATOMIC_RELAXED);
	}
	d->p->ops->end_batch(d->p->self, d->w);
	free(g);
	return NULL;
}

static void start(util_pol_t *p, uint64_t tau, pthread_t th[2], hdrv_t d[2])
{
	char *keys[] = { (char *)"staleness" };
	double vals[] = { (double)tau };
	row[0] = 0;
	memset(steps_done, 0, sizeof steps_done);
	assert_int_equal(util_pol_create(p, "hybrid", 2, "sgd", "sgd", 1, keys, vals, NULL),
			 ST_OK);
	for (int w = 0; w < 2; w++) {
		d[w] = (hdrv_t){ p, w };
		assert_int_equal(pthread_create(&th[w], NULL, hdrive, &d[w]), 0);
	}
}

static void test_sync_hybrid_staleness_bound_scripted(void **state)
{
	(void)state;
	const uint64_t tau = 2;
	sem_init(&go, 0, 0);
	sem_init(&blocked, 0, 0);
	st__sync_hybrid_apply_hook = apply_hook;
	st__sync_hybrid_block_hook = block_hook;
	util_pol_t p;
	pthread_t th[2];
	hdrv_t d[2];
	start(&p, tau, th, d);
	/* Nothing applied: both run steps 0..tau and block at tau + 1. */
	for (int i = 0; i < 2; i++)
		while (sem_wait(&blocked) != 0)
			;
	for (int w = 0; w < 2; w++) {
		assert_int_equal(__atomic_load_n(&blocked_at[w], __ATOMIC_RELAXED), tau + 1);
		assert_int_equal(__atomic_load_n(&steps_done[w], __ATOMIC_RELAXED), tau + 1);
		for (uint64_t s = 0; s <= tau; s++)
			assert_true(seen[w][s] == 0.0f);   /* asynchronous: no update yet */
	}
	/* Apply step 0's two updates: both may run one more step, no further. */
	sem_post(&go);
	sem_post(&go);
	for (int i = 0; i < 2; i++)
		while (sem_wait(&blocked) != 0)
			;
	for (int w = 0; w < 2; w++) {
		assert_int_equal(__atomic_load_n(&blocked_at[w], __ATOMIC_RELAXED), tau + 2);
		assert_int_equal(__atomic_load_n(&steps_done[w], __ATOMIC_RELAXED), tau + 2);
		assert_true(seen[w][tau + 1] == -2.0f);
	}
	for (int i = 0; i < 2 * STEPS; i++)
		sem_post(&go);
	for (int w = 0; w < 2; w++)
		pthread_join(th[w], NULL);
	/* Every read of step s saw at least the 2 (s - tau) updates of steps
	 * < s - tau; end_batch drained them all. */
	for (int w = 0; w < 2; w++)
		for (int s = 0; s < STEPS; s++)
			assert_true(-seen[w][s] >= 2.0f * (float)((int)s - (int)tau));
	assert_true(row[0] == -2.0f * STEPS);
	st_sync_stats_t ss;
	p.ops->report(p.self, &ss);
	uint64_t n = 0, maxb = 0;
	for (int b = 0; b < ST_SYNC_HIST; b++)
		if (ss.staleness[b]) {
			n += ss.staleness[b];
			maxb = (uint64_t)b;
		}
	assert_int_equal(n, 2 * STEPS);
	assert_int_equal(maxb, (uint64_t)st_sync_hist_bucket(tau));
	util_pol_destroy(&p);
	st__sync_hybrid_apply_hook = NULL;
	st__sync_hybrid_block_hook = NULL;
	sem_destroy(&go);
	sem_destroy(&blocked);
}

static void test_sync_hybrid_staleness_zero_is_synchronous(void **state)
{
	(void)state;
	util_pol_t p;
	pthread_t th[2];
	hdrv_t d[2];
	start(&p, 0, th, d);
	for (int w = 0; w < 2; w++)
		pthread_join(th[w], NULL);
	for (int w = 0; w < 2; w++)
		for (int s = 0; s < STEPS; s++)
			assert_true(seen[w][s] == -2.0f * (float)s);
	util_pol_destroy(&p);
}

/* Dense: same gradients to allreduce and hybrid give bit-identical params
 * after every step, and both workers read the one shared array. */
typedef struct {
	util_pol_t *p;
	int w, steps;
	pthread_barrier_t *bar;
	const float **read;
} ddrv_t;

static void *ddrive(void *arg)
{
	ddrv_t *d = arg;
	size_t n = d->p->env.nparams;
	float *g = malloc(sizeof(float) * n);
	for (int s = 0; s < d->steps; s++) {
		d->read[d->w] = d->p->ops->begin_step(d->p->self, d->w, (uint64_t)s);
		util_grad(g, n, d->w, (uint64_t)s, 1e-2f);
		st_sync_grads_t gr = { .n_examples = 1, .dense = g, .gstride = 1 };
		assert_int_equal(d->p->ops->apply(d->p->self, d->w, &gr), ST_OK);
		pthread_barrier_wait(d->bar);
		pthread_barrier_wait(d->bar);
	}
	d->p->ops->end_batch(d->p->self, d->w);
	free(g);
	return NULL;
}

static float *dense_trace(const char *name, int steps)
{
	char *keys[] = { (char *)"staleness" };
	double vals[] = { 1 };
	util_pol_t p;
	assert_int_equal(util_pol_create(&p, name, 2, "adam", "sgd", 1, keys, vals, NULL), ST_OK);
	size_t n = p.env.nparams;
	float *trace = malloc(sizeof(float) * n * (size_t)steps);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, 3);
	const float *read[2];
	pthread_t th[2];
	ddrv_t d[2];
	for (int w = 0; w < 2; w++) {
		d[w] = (ddrv_t){ &p, w, steps, &bar, read };
		assert_int_equal(pthread_create(&th[w], NULL, ddrive, &d[w]), 0);
	}
	for (int s = 0; s < steps; s++) {
		pthread_barrier_wait(&bar);
		assert_ptr_equal(read[0], read[1]);
		memcpy(trace + (size_t)s * n, p.env.params, sizeof(float) * n);
		pthread_barrier_wait(&bar);
	}
	for (int w = 0; w < 2; w++)
		pthread_join(th[w], NULL);
	pthread_barrier_destroy(&bar);
	util_pol_destroy(&p);
	return trace;
}

static void test_sync_hybrid_dense_is_allreduce(void **state)
{
	(void)state;
	enum { S = 8 };
	float *a = dense_trace("allreduce", S), *h = dense_trace("hybrid", S);
	st_job_t job;
	st_model_t *m;
	util_make_job(&job, "hybrid", NULL);
	assert_int_equal(st_model_create(&m, &job.model, ST_GEN_N_DENSE, ST_GEN_N_CAT, 1), ST_OK);
	size_t n = st_model_nparams(m);
	for (int s = 0; s < S; s++) {
		assert_memory_equal(a + (size_t)s * n, h + (size_t)s * n, sizeof(float) * n);
		if (s)
			assert_memory_not_equal(h + (size_t)s * n, h + (size_t)(s - 1) * n,
						sizeof(float) * n);
	}
	st_model_destroy(m);
	free(a);
	free(h);
}

#define LEARN_ROWS (32 * 4096)

static void test_sync_hybrid_learns_like_allreduce(void **state)
{
	(void)state;
	st_sync_cfg_t ar = { .name = (char *)"allreduce" };
	char *keys[] = { (char *)"staleness" };
	double vals[] = { 4 };
	st_sync_cfg_t hy = { .name = (char *)"hybrid", .n_params = 1, .keys = keys, .vals = vals };
	st_sync_stats_t s0, s1;
	double e0, e1;
	double a0 = util_learn(&ar, 2, LEARN_ROWS, &e0, &s0);
	double a1 = util_learn(&hy, 2, LEARN_ROWS, &e1, &s1);
	assert_true(a1 > 0.7);
	assert_true(fabs(a1 - a0) < 0.01);
	assert_true(fabs(e1 - e0) < 0.01);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sync_hybrid_staleness_bound_scripted),
		cmocka_unit_test(test_sync_hybrid_staleness_zero_is_synchronous),
		cmocka_unit_test(test_sync_hybrid_dense_is_allreduce),
		cmocka_unit_test(test_sync_hybrid_learns_like_allreduce),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
