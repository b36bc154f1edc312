/* test_optim_simd.c — st_optim_update's AVX2 loops (ops/optim/optim_avx2.c)
 * against the references (st_optim_update_ref), bit for bit.
 *
 * Every optimizer, lengths 0..67 (every remainder mod 8, empty vectors,
 * vectors shorter than one AVX2 register), several steps on the same
 * state, values drawn to cover exact zeros, both signs, tiny and large
 * magnitudes (and FTRL rows that land inside and outside the l1 threshold).
 * The comparison is memcmp of weights and state: the fast path must
 * compute each coordinate with the reference's operations in the
 * reference's order, so there is no tolerance to justify. On a CPU without
 * AVX2 every case skips (exit 77): there is no fast path to pin. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/optim/optim.h"
#include "runtime/err.h"
#include "runtime/simd.h"
#include "skip_util.h"

static uint64_t rs = 23;

static uint64_t next(void)
{
	uint64_t z = (rs += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* A value of either sign: one in eight is an exact zero, the others spread
 * over magnitudes 1e-6 .. 1e3 (scale picked at random per value). */
static float val(void)
{
	uint64_t r = next();
	if ((r & 7) == 0)
		return 0.0f;
	static const float scale[] = { 1e-6f, 1e-3f, 0.1f, 1.0f, 10.0f, 1e3f };
	double u = (double)(r >> 11) * 0x1.0p-53;
	float x = (float)u * scale[(r >> 3) % 6];
	return (r & 8) ? -x : x;
}

static void fill(float *x, size_t n, int nonneg)
{
	for (size_t i = 0; i < n; i++)
		x[i] = nonneg ? fabsf(val()) : val();
}

enum { MAXLEN = 67, STEPS = 4 };

static st_optim_t make(const char *name, int rowwise, double l2, double l1)
{
	st_optim_cfg_t cfg = {
		.name = (char *)name, .rowwise = rowwise, .lr = 0.05, .l2 = l2,
		.eps = 1e-8, .beta1 = 0.9, .beta2 = 0.999, .init_accum = 0.1,
		.l1 = l1, .beta = 1.0,
	};
	st_optim_t o;
	assert_int_equal(st_optim_init(&o, &cfg), ST_OK);
	return o;
}

/* Runs STEPS updates through st_optim_update (AVX2 allowed) and through
 * st_optim_update_ref on copies of the same random vector and state, for
 * every length 0..MAXLEN; t0 is Adam's first step number. */
static void check_same_bits(const st_optim_t *o, uint64_t t0)
{
	if (!st_simd_cpu_avx2()) {
		TU_SKIP("this CPU has no AVX2: no fast path to compare");
		return;
	}
	st_simd_set_ref(0);
	assert_true(st_simd_avx2());
	float w1[MAXLEN], w2[MAXLEN], g[MAXLEN], s1[2 * MAXLEN + 1], s2[2 * MAXLEN + 1];
	for (size_t len = 0; len <= MAXLEN; len++) {
		size_t ns = st_optim_state_floats(o, len);
		fill(w1, len, 0);
		/* States stay in their domain: accumulators and second
		 * moments are sums of squares (>= 0); FTRL's z has any sign
		 * and n >= 0; Adam's m any sign, v >= 0. */
		if (o->kind == ST_OPT_ADAM || o->kind == ST_OPT_FTRL) {
			fill(s1, len, 0);
			fill(s1 + len, len, 1);
		} else {
			fill(s1, ns, 1);
		}
		memcpy(w2, w1, len * sizeof *w1);
		memcpy(s2, s1, ns * sizeof *s1);
		for (uint64_t t = t0; t < t0 + STEPS; t++) {
			fill(g, len, 0);
			st_optim_update(o, w1, s1, g, len, t);
			st_optim_update_ref(o, w2, s2, g, len, t);
			if (memcmp(w1, w2, len * sizeof *w1) || memcmp(s1, s2, ns * sizeof *s1)) {
				for (size_t i = 0; i < len; i++)
					if (memcmp(&w1[i], &w2[i], sizeof *w1))
						fprintf(stderr, "kind %d len %zu t %llu: w[%zu] %a vs ref %a\n",
							o->kind, len, (unsigned long long)t, i,
							(double)w1[i], (double)w2[i]);
				fail_msg("kind %d len %zu step %llu: AVX2 and reference differ",
					 o->kind, len, (unsigned long long)t);
			}
		}
	}
}

static void test_optim_simd_sgd(void **state)
{
	(void)state;
	st_optim_t o = make("sgd", 0, 0.0, 0.0);
	check_same_bits(&o, 1);
	o = make("sgd", 0, 0.01, 0.0);
	check_same_bits(&o, 1);
}

static void test_optim_simd_adagrad(void **state)
{
	(void)state;
	st_optim_t o = make("adagrad", 0, 0.0, 0.0);
	check_same_bits(&o, 1);
	o = make("adagrad", 0, 0.01, 0.0);
	check_same_bits(&o, 1);
}

static void test_optim_simd_adagrad_rowwise(void **state)
{
	(void)state;
	st_optim_t o = make("adagrad", 1, 0.0, 0.0);
	check_same_bits(&o, 1);
	o = make("adagrad", 1, 0.01, 0.0);
	check_same_bits(&o, 1);
}

static void test_optim_simd_adam(void **state)
{
	(void)state;
	st_optim_t o = make("adam", 0, 0.0, 0.0);
	check_same_bits(&o, 1);
	o = make("adam", 0, 0.01, 0.0);
	check_same_bits(&o, 1);
	/* Late steps: bias corrections near 1. */
	check_same_bits(&o, 100000);
}

static void test_optim_simd_ftrl(void **state)
{
	(void)state;
	/* l1 = 1 puts many |z| under the threshold (exact zeros), the large
	 * gradients above it; l2 the proximal term. */
	st_optim_t o = make("ftrl", 0, 0.0, 1.0);
	check_same_bits(&o, 1);
	o = make("ftrl", 0, 0.5, 0.0);
	check_same_bits(&o, 1);
}

/* The rows entry point goes through the same dispatch, per row for rowwise
 * AdaGrad: a whole dense tensor of odd shape. */
static void test_optim_simd_update_rows(void **state)
{
	(void)state;
	if (!st_simd_cpu_avx2()) {
		TU_SKIP("this CPU has no AVX2: no fast path to compare");
		return;
	}
	st_simd_set_ref(0);
	enum { R = 7, C = 45 };
	static const char *names[] = { "sgd", "adagrad", "adagrad", "adam", "ftrl" };
	for (int k = 0; k < 5; k++) {
		st_optim_t o = make(names[k], k == 2, 0.01, k == 4 ? 0.5 : 0.0);
		float w1[R * C], w2[R * C], g[R * C], s1[2 * R * C], s2[2 * R * C];
		size_t ns = (size_t)R * st_optim_state_floats(&o, C);
		fill(w1, R * C, 0);
		memcpy(w2, w1, sizeof w1);
		/* each row's state, as the rows entry point lays it out (the
		 * length given to state_init is in parameters, not state floats) */
		for (int r = 0; r < R; r++)
			st_optim_state_init(&o, s1 + (size_t)r * st_optim_state_floats(&o, C), C);
		if (o.kind == ST_OPT_ADAGRAD_ROW)
			for (size_t i = 0; i < ns; i++)
				s1[i] = 0.1f;
		memcpy(s2, s1, ns * sizeof *s1);
		for (uint64_t t = 1; t <= 3; t++) {
			fill(g, R * C, 0);
			st_optim_update_rows(&o, w1, s1, g, R, C, t);
			st_simd_set_ref(1);
			st_optim_update_rows(&o, w2, s2, g, R, C, t);
			st_simd_set_ref(0);
			assert_memory_equal(w1, w2, sizeof w1);
			assert_memory_equal(s1, s2, ns * sizeof *s1);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_optim_simd_sgd),
		cmocka_unit_test(test_optim_simd_adagrad),
		cmocka_unit_test(test_optim_simd_adagrad_rowwise),
		cmocka_unit_test(test_optim_simd_adam),
		cmocka_unit_test(test_optim_simd_ftrl),
		cmocka_unit_test(test_optim_simd_update_rows),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	return tu_exit(failed, sizeof tests / sizeof tests[0]);
}
