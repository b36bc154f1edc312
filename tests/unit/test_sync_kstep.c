/* test_sync_kstep.c — k-step Adam (ops/sync/kstep.c): replicas differ
 * between merges and are bit-identical (params and v) right after each
 * merge; one worker equals ops/optim's Adam; the dense traffic falls as
 * 1/k; non-Adam dense optimizers are refused; it learns like allreduce. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sync_policy_util.h"

const float *st__sync_kstep_replica(void *self, int w, const float **v);
uint64_t st__sync_kstep_merges(void *self);

typedef struct {
	util_pol_t *p;
	int w, steps;
	pthread_barrier_t *bar;   /* NULL: no inspection between steps */
} kdrv_t;

static void *kdrive(void *arg)
{
	kdrv_t *d = arg;
	size_t n = d->p->env.nparams;
	float *g = malloc(sizeof(float) * n);
	assert_non_null(g);
	for (int s = 0; s < d->steps; s++) {
		(void)d->p->ops->begin_step(d->p->self, d->w, (uint64_t)s);
		util_grad(g, n, d->w, (uint64_t)s, 1e-2f);
		st_sync_grads_t gr = { .n_examples = 1, .dense = g, .gstride = 1 };
		assert_int_equal(d->p->ops->apply(d->p->self, d->w, &gr), ST_OK);
		if (d->bar) {
			pthread_barrier_wait(d->bar);   /* main inspects */
			pthread_barrier_wait(d->bar);
		}
	}
	d->p->ops->end_batch(d->p->self, d->w);
	free(g);
	return NULL;
}

static void run_workers(util_pol_t *p, int N, int steps, pthread_barrier_t *bar)
{
	pthread_t th[8];
	kdrv_t d[8];
	for (int w = 0; w < N; w++) {
		d[w] = (kdrv_t){ .p = p, .w = w, .steps = steps, .bar = bar };
		assert_int_equal(pthread_create(&th[w], NULL, kdrive, &d[w]), 0);
	}
	if (bar) {
		size_t n = p->env.nparams;
		for (int s = 1; s <= steps; s++) {
			pthread_barrier_wait(bar);
			const float *v0, *v1;
			const float *x0 = st__sync_kstep_replica(p->self, 0, &v0);
			const float *x1 = st__sync_kstep_replica(p->self, 1, &v1);
			int same_x = !memcmp(x0, x1, sizeof(float) * n);
			int same_v = !memcmp(v0, v1, sizeof(float) * n);
			if (s % 3 == 0) {
				assert_true(same_x);
				assert_true(same_v);
			} else {
				assert_false(same_x);
				assert_false(same_v);
			}
			assert_int_equal(st__sync_kstep_merges(p->self), (uint64_t)(s / 3));
			pthread_barrier_wait(bar);
		}
	}
	for (int w = 0; w < N; w++)
		pthread_join(th[w], NULL);
}

static void test_sync_kstep_replicas_merge(void **state)
{
	(void)state;
	char *keys[] = { (char *)"k" };
	double vals[] = { 3 };
	util_pol_t p;
	assert_int_equal(util_pol_create(&p, "kstep", 2, "adam", "sgd", 1, keys, vals, NULL),
			 ST_OK);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, 3);
	run_workers(&p, 2, 10, &bar);
	pthread_barrier_destroy(&bar);
	/* 10 steps: the last merge was at 9; env->params is the replica mean. */
	size_t n = p.env.nparams;
	const float *x0 = st__sync_kstep_replica(p.self, 0, NULL);
	const float *x1 = st__sync_kstep_replica(p.self, 1, NULL);
	for (size_t j = 0; j < n; j++)
		assert_true(p.env.params[j] == (x0[j] + x1[j]) * 0.5f);
	util_pol_destroy(&p);
}

/* One worker, any k: exactly Adam of ops/optim on the same gradients. */
static void test_sync_kstep_one_worker_is_adam(void **state)
{
	(void)state;
	char *keys[] = { (char *)"k" };
	double vals[] = { 4 };
	util_pol_t p;
	assert_int_equal(util_pol_create(&p, "kstep", 1, "adam", "sgd", 1, keys, vals, NULL),
			 ST_OK);
	size_t n = p.env.nparams, nst = st_sync_dense_state_floats(&p.env);
	float *ref = malloc(sizeof(float) * n), *st = malloc(sizeof(float) * nst);
	float *g = malloc(sizeof(float) * n), *g2 = malloc(sizeof(float) * n);
	memcpy(ref, p.env.params, sizeof(float) * n);
	st_sync_dense_state_init(&p.env, st);
	for (int s = 0; s < 11; s++) {
		util_grad(g, n, 0, (uint64_t)s, 1e-2f);
		memcpy(g2, g, sizeof(float) * n);
		st_sync_dense_update(&p.env, ref, st, g2, (uint64_t)s + 1);
		(void)p.ops->begin_step(p.self, 0, (uint64_t)s);
		st_sync_grads_t gr = { .n_examples = 1, .dense = g, .gstride = 1 };
		assert_int_equal(p.ops->apply(p.self, 0, &gr), ST_OK);
	}
	const float *x = st__sync_kstep_replica(p.self, 0, NULL);
	/* Same float formula; only FMA contraction could differ (1 ulp-ish). */
	for (size_t j = 0; j < n; j++)
		assert_true(fabsf(x[j] - ref[j]) <= 1e-6f + 1e-5f * fabsf(ref[j]));
	free(ref);
	free(st);
	free(g);
	free(g2);
	util_pol_destroy(&p);
}

static size_t nparams_2w;

static uint64_t bytes_for_k(int k, int steps, uint64_t *merges)
{
	char *keys[] = { (char *)"k" };
	double vals[] = { k };
	util_pol_t p;
	assert_int_equal(util_pol_create(&p, "kstep", 2, "adam", "sgd", 1, keys, vals, NULL),
			 ST_OK);
	run_workers(&p, 2, steps, NULL);
	st_sync_stats_t ss;
	p.ops->report(p.self, &ss);
	*merges = st__sync_kstep_merges(p.self);
	nparams_2w = p.env.nparams;
	util_pol_destroy(&p);
	return ss.bytes;
}

static void test_sync_kstep_traffic_falls_as_1_over_k(void **state)
{
	(void)state;
	uint64_t m1, m10, m100;
	uint64_t b1 = bytes_for_k(1, 300, &m1);
	uint64_t b10 = bytes_for_k(10, 300, &m10);
	uint64_t b100 = bytes_for_k(100, 300, &m100);
	print_message("kstep dense bytes over 300 steps, 2 workers: k=1 %llu, k=10 %llu, "
		      "k=100 %llu\n", (unsigned long long)b1, (unsigned long long)b10,
		      (unsigned long long)b100);
	assert_int_equal(m1, 300);
	assert_int_equal(m10, 30);
	assert_int_equal(m100, 3);
	assert_true(b100 > 0);
	/* Per merge and worker: a ring allreduce of params + v sends
	 * 2 (N-1)/N x 2 nparams floats; N = 2 workers. */
	assert_int_equal(b1, 300 * 2 * (2 * 1 * 2 * sizeof(float) * nparams_2w / 2));
	assert_int_equal(b1, 10 * b10);
	assert_int_equal(b1, 100 * b100);
}

static void test_sync_kstep_refuses_non_adam(void **state)
{
	(void)state;
	char *keys[] = { (char *)"k" };
	double vals[] = { 5 };
	util_pol_t p;
	assert_int_equal(util_pol_create(&p, "kstep", 2, "adagrad", "sgd", 1, keys, vals, NULL),
			 ST_EJOB);
	vals[0] = 0;
	assert_int_equal(util_pol_create(&p, "kstep", 2, "adam", "sgd", 1, keys, vals, NULL),
			 ST_EJOB);
}

#define LEARN_ROWS (32 * 4096)

static void test_sync_kstep_learns_like_allreduce(void **state)
{
	(void)state;
	st_sync_cfg_t ar = { .name = (char *)"allreduce" };
	char *keys[] = { (char *)"k" };
	double vals[] = { 10 };
	st_sync_cfg_t ks = { .name = (char *)"kstep", .n_params = 1, .keys = keys, .vals = vals };
	st_sync_stats_t s0, s1;
	double e0, e1;
	double a0 = util_learn(&ar, 2, LEARN_ROWS, &e0, &s0);
	double a1 = util_learn(&ks, 2, LEARN_ROWS, &e1, &s1);
	assert_true(a0 > 0.7 && a1 > 0.7);
	assert_true(fabs(a1 - a0) < 0.01);
	assert_true(fabs(e1 - e0) < 0.01);
	assert_true(s1.bytes < s0.bytes);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sync_kstep_replicas_merge),
		cmocka_unit_test(test_sync_kstep_one_worker_is_adam),
		cmocka_unit_test(test_sync_kstep_traffic_falls_as_1_over_k),
		cmocka_unit_test(test_sync_kstep_refuses_non_adam),
		cmocka_unit_test(test_sync_kstep_learns_like_allreduce),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
