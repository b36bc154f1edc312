/* test_algo.c — the algorithm cores of ops/algo, alone and as the two
 * transports drive them (one process's threads in ops/sync, the ranks of
 * many in ops/dist; docs/design-notes.md "One core per algorithm"):
 *
 *   owner   keys spread evenly over their owner ranks and stay put; tensors
 *           go largest first to the least-loaded worker; worker slices
 *           cover a flat array in order;
 *   params  the per-tensor dense steps together equal the whole step.
 *
 * Everything here is single-threaded and exact: the cores take no locks
 * (their callers serialize), so a scripted sequence is the whole test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/owner.h"
#include "ops/algo/params.h"
#include "runtime/err.h"

/* ---- a small dnn model and its optimizers --------------------------------- */

typedef struct {
	st_model_t *model;
	st_optim_t dopt, sopt;
	st_algo_params_t p;
} mfix_t;

static void opt_cfg(st_optim_cfg_t *o, const char *name, double lr)
{
	memset(o, 0, sizeof *o);
	o->name = (char *)name;
	o->lr = lr;
	o->eps = 1e-8;
	o->beta1 = 0.9;
	o->beta2 = 0.999;
	o->init_accum = 0.1;
	o->beta = 1.0;
}

static void mfix_init(mfix_t *f, const char *dense_opt, int rowwise)
{
	memset(f, 0, sizeof *f);
	st_model_cfg_t mc;
	memset(&mc, 0, sizeof mc);
	mc.type = (char *)"dnn";
	mc.emb_dim = 4;
	mc.n_hidden = 2;
	mc.hidden[0] = 16;
	mc.hidden[1] = 8;
	mc.init_scale = 0.05;
	assert_int_equal(st_model_create(&f->model, &mc, 3, 2, 7), ST_OK);
	st_optim_cfg_t oc;
	opt_cfg(&oc, dense_opt, 0.01);
	oc.rowwise = rowwise;
	assert_int_equal(st_optim_init(&f->dopt, &oc), ST_OK);
	opt_cfg(&oc, "adagrad", 0.05);
	assert_int_equal(st_optim_init(&f->sopt, &oc), ST_OK);
	f->p = (st_algo_params_t){ .model = f->model, .params = st_model_params(f->model),
				   .nparams = st_model_nparams(f->model),
				   .dense_opt = &f->dopt, .sparse_opt = &f->sopt };
}

static void mfix_fini(mfix_t *f)
{
	st_model_destroy(f->model);
}

/* A reproducible value stream in [-1, 1). */
static float rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float)((int64_t)(*s >> 11) % 1000000) / 1e6f;
}

/* ---- owner ------------------------------------------------------------------ */

static void test_algo_owner_keys_spread_and_stay(void **state)
{
	(void)state;
	enum { OWNERS = 4, KEYS = 40000 };
	int cnt[OWNERS] = { 0 };
	for (uint64_t k = 0; k < KEYS; k++) {
		int o = st_algo_owner_key(k * 7919 + 3, OWNERS);
		assert_true(o >= 0 && o < OWNERS);
		assert_int_equal(o, st_algo_owner_key(k * 7919 + 3, OWNERS));
		cnt[o]++;
	}
	/* Within 5 % of an even share (a binomial's spread is about 0.4 %). */
	for (int o = 0; o < OWNERS; o++)
		assert_true(abs(cnt[o] - KEYS / OWNERS) < KEYS / OWNERS / 20);
	for (uint64_t k = 0; k < 100; k++)
		assert_int_equal(st_algo_owner_key(k, 1), 0);
	/* Worker of a unique key in a lockstep step: u mod N. */
	assert_int_equal(st_algo_owner_row(7, 3), 1);
	assert_int_equal(st_algo_owner_row(9, 3), 0);
}

static void test_algo_owner_tensors_largest_first(void **state)
{
	(void)state;
	mfix_t f;
	mfix_init(&f, "sgd", 0);
	const int nt = st_model_ntensors(f.model);
	for (int N = 1; N <= 5; N++) {
		int *own = st_algo_owner_tensors(f.model, N);
		assert_non_null(own);
		size_t load[5] = { 0 }, big = 0;
		int ibig = 0;
		for (int i = 0; i < nt; i++) {
			assert_true(own[i] >= 0 && own[i] < N);
			load[own[i]] += st_algo_tensor_floats(f.model, i) + 64;
			if (st_algo_tensor_floats(f.model, i) > big) {
				big = st_algo_tensor_floats(f.model, i);
				ibig = i;
			}
		}
		/* The largest tensor goes first, to worker 0; greedy keeps every
		 * worker within one tensor of the least loaded. */
		assert_int_equal(own[ibig], 0);
		size_t lo = SIZE_MAX, hi = 0;
		for (int w = 0; w < N && N <= nt; w++) {
			lo = load[w] < lo ? load[w] : lo;
			hi = load[w] > hi ? load[w] : hi;
		}
		if (N <= nt)
			assert_true(hi - lo <= big + 64);
		free(own);
	}
	mfix_fini(&f);
}

static void test_algo_owner_ranges_cover_in_order(void **state)
{
	(void)state;
	for (size_t n = 0; n < 40; n += 7)
		for (int N = 1; N <= 6; N++) {
			size_t next = 0;
			for (int w = 0; w < N; w++) {
				size_t lo, hi;
				st_algo_owner_range(n, w, N, &lo, &hi);
				assert_true(lo == next && hi >= lo && hi - lo <= n / N + 1);
				next = hi;
			}
			assert_true(next == n);
		}
}

/* ---- params ----------------------------------------------------------------- */

static void test_algo_params_tensor_steps_equal_whole_step(void **state)
{
	(void)state;
	const char *opts[] = { "sgd", "adam", "adagrad", "adagrad" };
	for (int o = 0; o < 4; o++) {
		mfix_t f;
		mfix_init(&f, opts[o], o == 3);   /* rowwise AdaGrad: a state per row */
		const size_t np = f.p.nparams, ns = st_algo_dense_state_floats(&f.p);
		assert_int_equal(st_algo_dense_state_offset(&f.p, st_model_ntensors(f.model)), ns);
		float *w1 = malloc(sizeof(float) * np), *w2 = malloc(sizeof(float) * np);
		float *s1 = malloc(sizeof(float) * (ns + 1)), *s2 = malloc(sizeof(float) * (ns + 1));
		float *g = malloc(sizeof(float) * np);
		memcpy(w1, f.p.params, sizeof(float) * np);
		memcpy(w2, f.p.params, sizeof(float) * np);
		st_algo_dense_state_init(&f.p, s1);
		st_algo_dense_state_init(&f.p, s2);
		uint64_t seed = 5;
		for (uint64_t t = 1; t <= 3; t++) {
			for (size_t j = 0; j < np; j++)
				g[j] = rnd(&seed);
			st_algo_dense_update(&f.p, w1, s1, g, t);
			for (int i = st_model_ntensors(f.model) - 1; i >= 0; i--)
				st_algo_dense_update_tensor(&f.p, w2, s2, g, i, t);
		}
		assert_memory_equal(w1, w2, sizeof(float) * np);
		assert_memory_equal(s1, s2, sizeof(float) * ns);
		assert_memory_not_equal(w1, f.p.params, sizeof(float) * np);
		free(w1);
		free(w2);
		free(s1);
		free(s2);
		free(g);
		mfix_fini(&f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_algo_owner_keys_spread_and_stay),
		cmocka_unit_test(test_algo_owner_tensors_largest_first),
		cmocka_unit_test(test_algo_owner_ranges_cover_in_order),
		cmocka_unit_test(test_algo_params_tensor_steps_equal_whole_step),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
