/* test_optim.c — optimizers of ops/optim/optim.h against scalar reference
 * loops written straight from the header's formulas, in double.
 *
 * Tolerance: the implementation runs in float, the references in double.
 * Each step loses a few float ulps (6e-8 relative) per coordinate and the
 * errors do not grow over the handful of steps run here (every rule is a
 * contraction or a bounded step), so atol 1e-6 + rtol 1e-5 on weights of
 * magnitude ~1 has a > 10× margin, and a wrong formula (a missing l2 term,
 * a missing bias correction, sum instead of mean) is off by > 1e-3. */
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

#define ATOL 1e-6
#define RTOL 1e-5

static uint64_t rs = 11;

static double unif(void)
{
	uint64_t z = (rs += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1.0p-53;
}

static float sym(void)
{
	return (float)(2.0 * unif() - 1.0);
}

static void assert_close(const char *what, const float *got, const double *want, size_t n)
{
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		double err = fabs((double)got[i] - want[i]);
		if (!(err <= ATOL + RTOL * fabs(want[i]))) {
			fprintf(stderr, "%s[%zu]: got %.9g want %.9g\n", what, i,
				(double)got[i], want[i]);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
}

static st_optim_t make(const char *name, int rowwise)
{
	st_optim_cfg_t cfg = {
		.name = (char *)name, .rowwise = rowwise, .lr = 0.05, .l2 = 0.01,
		.eps = 1e-8, .beta1 = 0.9, .beta2 = 0.999, .init_accum = 0.1,
		.l1 = 0.0, .beta = 1.0,
	};
	st_optim_t o;
	assert_int_equal(st_optim_init(&o, &cfg), ST_OK);
	return o;
}

enum { LEN = 10, STEPS = 6 };

/* A fresh vector and STEPS gradients; w in double mirrors w in float. */
static void setup(float *w, double *wd, float g[STEPS][LEN])
{
	for (int i = 0; i < LEN; i++)
		wd[i] = w[i] = sym();
	for (int t = 0; t < STEPS; t++)
		for (int i = 0; i < LEN; i++)
			g[t][i] = sym();
}

static void test_optim_init_maps_names(void **state)
{
	(void)state;
	st_optim_cfg_t cfg = {
		.name = "adagrad", .rowwise = 0, .lr = 0.5, .l2 = 1e-4, .eps = 1e-10,
		.beta1 = 0.8, .beta2 = 0.99, .init_accum = 0.1, .l1 = 0.25, .beta = 2.0,
	};
	st_optim_t o;
	assert_int_equal(st_optim_init(&o, &cfg), ST_OK);
	assert_int_equal(o.kind, ST_OPT_ADAGRAD);
	assert_true(o.lr == 0.5f && o.l2 == 1e-4f && o.eps == 1e-10f);
	assert_true(o.beta1 == 0.8f && o.beta2 == 0.99f && o.init_accum == 0.1f);
	assert_true(o.l1 == 0.25f && o.beta == 2.0f);
	cfg.rowwise = 1;
	assert_int_equal(st_optim_init(&o, &cfg), ST_OK);
	assert_int_equal(o.kind, ST_OPT_ADAGRAD_ROW);
	cfg.name = "sgd";
	assert_int_equal(st_optim_init(&o, &cfg), ST_OK);
	assert_int_equal(o.kind, ST_OPT_SGD);   /* rowwise only matters for adagrad */
	cfg.name = "adam";
	assert_int_equal(st_optim_init(&o, &cfg), ST_OK);
	assert_int_equal(o.kind, ST_OPT_ADAM);
	cfg.name = "ftrl";
	assert_int_equal(st_optim_init(&o, &cfg), ST_OK);
	assert_int_equal(o.kind, ST_OPT_FTRL);

	cfg.name = "rmsprop";
	assert_int_equal(st_optim_init(&o, &cfg), ST_EINVAL);
	cfg.name = "Adam";   /* names are exact */
	assert_int_equal(st_optim_init(&o, &cfg), ST_EINVAL);
	cfg.name = NULL;
	assert_int_equal(st_optim_init(&o, &cfg), ST_EINVAL);
}

static void test_optim_state_floats_and_init(void **state)
{
	(void)state;
	const char *names[5] = {"sgd", "adagrad", "adagrad", "adam", "ftrl"};
	const size_t want[5] = {0, 7, 1, 14, 14};
	for (int k = 0; k < 5; k++) {
		st_optim_t o = make(names[k], k == 2);
		assert_int_equal(st_optim_state_floats(&o, 7), want[k]);
		float s[16];
		for (int i = 0; i < 16; i++)
			s[i] = -9.0f;
		st_optim_state_init(&o, s, 7);
		float v = (k == 1 || k == 2) ? 0.1f : 0.0f;
		for (size_t i = 0; i < want[k]; i++)
			assert_true(s[i] == v);
		/* Nothing past the state is touched. */
		assert_true(s[want[k]] == -9.0f);
	}
}

static void test_optim_sgd_matches_reference(void **state)
{
	(void)state;
	st_optim_t o = make("sgd", 0);
	float w[LEN], g[STEPS][LEN];
	double wd[LEN];
	setup(w, wd, g);
	for (int t = 0; t < STEPS; t++) {
		st_optim_update(&o, w, NULL, g[t], LEN, (uint64_t)t + 1);
		for (int i = 0; i < LEN; i++)
			wd[i] -= 0.05 * (g[t][i] + 0.01 * wd[i]);
	}
	assert_close("sgd w", w, wd, LEN);
}

static void test_optim_adagrad_matches_reference(void **state)
{
	(void)state;
	st_optim_t o = make("adagrad", 0);
	o.eps = 1e-10f;
	float w[LEN], g[STEPS][LEN], acc[LEN];
	double wd[LEN], accd[LEN];
	setup(w, wd, g);
	st_optim_state_init(&o, acc, LEN);
	for (int i = 0; i < LEN; i++)
		accd[i] = 0.1;
	for (int t = 0; t < STEPS; t++) {
		st_optim_update(&o, w, acc, g[t], LEN, (uint64_t)t + 1);
		for (int i = 0; i < LEN; i++) {
			double gi = g[t][i] + 0.01 * wd[i];
			accd[i] += gi * gi;
			wd[i] -= 0.05 * gi / (sqrt(accd[i]) + 1e-10);
		}
	}
	assert_close("adagrad w", w, wd, LEN);
	assert_close("adagrad acc", acc, accd, LEN);
}

static void test_optim_adagrad_rowwise_matches_reference(void **state)
{
	(void)state;
	st_optim_t o = make("adagrad", 1);
	float w[LEN], g[STEPS][LEN], acc;
	double wd[LEN], accd = 0.1;
	setup(w, wd, g);
	st_optim_state_init(&o, &acc, LEN);
	assert_true(acc == 0.1f);
	for (int t = 0; t < STEPS; t++) {
		st_optim_update(&o, w, &acc, g[t], LEN, (uint64_t)t + 1);
		double gp[LEN], sq = 0.0;
		for (int i = 0; i < LEN; i++) {
			gp[i] = g[t][i] + 0.01 * wd[i];
			sq += gp[i] * gp[i];
		}
		accd += sq / LEN;   /* mean, not sum, of the squares */
		for (int i = 0; i < LEN; i++)
			wd[i] -= 0.05 * gp[i] / (sqrt(accd) + 1e-8);
	}
	assert_close("rowwise w", w, wd, LEN);
	assert_close("rowwise acc", &acc, &accd, 1);
}

/* Adam reference in the textbook arrangement (m̂ / (sqrt(v̂) + eps)) with
 * the bias corrections 1 − β^t, steps t = t0 .. t0+STEPS-1. */
static void adam_reference(double *wd, double *m, double *v, float g[STEPS][LEN],
			   uint64_t t0, double lr, double eps)
{
	for (int s = 0; s < STEPS; s++) {
		double t = (double)(t0 + (uint64_t)s);
		for (int i = 0; i < LEN; i++) {
			double gi = g[s][i] + 0.01 * wd[i];
			m[i] = 0.9 * m[i] + 0.1 * gi;
			v[i] = 0.999 * v[i] + 0.001 * gi * gi;
			double mh = m[i] / (1.0 - pow(0.9, t));
			double vh = v[i] / (1.0 - pow(0.999, t));
			wd[i] -= lr * mh / (sqrt(vh) + eps);
		}
	}
}

static void test_optim_adam_matches_reference(void **state)
{
	(void)state;
	st_optim_t o = make("adam", 0);
	/* The beta values the reference uses must be those of o exactly. */
	o.beta1 = 0.9f;
	o.beta2 = 0.999f;
	float w[LEN], g[STEPS][LEN], st[2 * LEN];
	double wd[LEN], m[LEN] = {0}, v[LEN] = {0};
	setup(w, wd, g);
	st_optim_state_init(&o, st, LEN);
	for (int t = 0; t < STEPS; t++)
		st_optim_update(&o, w, st, g[t], LEN, (uint64_t)t + 1);
	adam_reference(wd, m, v, g, 1, 0.05, 1e-8);
	/* float betas differ from 0.9/0.999 by < 3e-8 relative: negligible. */
	assert_close("adam w", w, wd, LEN);
	assert_close("adam m", st, m, LEN);
	assert_close("adam v", st + LEN, v, LEN);
}

static void test_optim_adam_bias_correction(void **state)
{
	(void)state;
	st_optim_t o = make("adam", 0);
	o.l2 = 0.0f;
	/* t = 1: m̂ = g and v̂ = g², so the first step is lr·g/(|g|+eps), i.e.
	 * lr·sign(g) for |g| >> eps, whatever the betas: a missing bias
	 * correction would make it lr·0.1/sqrt(0.001) ≈ 3.16·lr. */
	float w[3] = {0.0f, 1.0f, -1.0f}, st[6] = {0}, g[3] = {0.3f, -2.0f, 1e-3f};
	st_optim_update(&o, w, st, g, 3, 1);
	assert_true(fabs(w[0] - (0.0 - 0.05)) < 1e-6);
	assert_true(fabs(w[1] - (1.0 + 0.05)) < 1e-6);
	assert_true(fabs(w[2] - (-1.0 - 0.05 * 1e-3 / (1e-3 + 1e-8))) < 1e-6);

	/* t = 5 .. 10 from a fresh state: rows that a table did not touch at
	 * steps 1..4 still use the table's t (as torch.optim.SparseAdam), so
	 * they are corrected with 1 − β^5, not 1 − β. */
	o.l2 = 0.01f;
	float w5[LEN], g5[STEPS][LEN], s5[2 * LEN] = {0};
	double wd[LEN], m[LEN] = {0}, v[LEN] = {0};
	setup(w5, wd, g5);
	float w1[LEN], s1[2 * LEN] = {0};
	memcpy(w1, w5, sizeof w1);
	for (int s = 0; s < STEPS; s++)
		st_optim_update(&o, w5, s5, g5[s], LEN, (uint64_t)s + 5);
	adam_reference(wd, m, v, g5, 5, 0.05, 1e-8);
	assert_close("adam t=5 w", w5, wd, LEN);
	/* The same first gradient at t = 1 moves w differently than at t = 5. */
	float w5b[LEN], s5b[2 * LEN] = {0};
	memcpy(w5b, w1, sizeof w5b);
	st_optim_update(&o, w1, s1, g5[0], LEN, 1);
	st_optim_update(&o, w5b, s5b, g5[0], LEN, 5);
	int differ = 0;
	for (int i = 0; i < LEN; i++)
		differ += fabsf(w1[i] - w5b[i]) > 1e-3f;
	assert_int_equal(differ, LEN);
}

static void test_optim_ftrl_matches_reference(void **state)
{
	(void)state;
	st_optim_t o = make("ftrl", 0);
	o.l1 = 0.3f;
	o.l2 = 0.1f;
	o.beta = 1.0f;
	o.lr = 0.5f;
	float w[LEN] = {0}, g[STEPS][LEN], st[2 * LEN];
	double wd[LEN] = {0}, z[LEN] = {0}, n[LEN] = {0};
	for (int t = 0; t < STEPS; t++)
		for (int i = 0; i < LEN; i++)
			g[t][i] = (i % 2 == 0) ? 0.2f * sym() : 3.0f * sym();
	st_optim_state_init(&o, st, LEN);
	for (int t = 0; t < STEPS; t++) {
		st_optim_update(&o, w, st, g[t], LEN, (uint64_t)t + 1);
		for (int i = 0; i < LEN; i++) {
			double gi = g[t][i];
			double sigma = (sqrt(n[i] + gi * gi) - sqrt(n[i])) / 0.5;
			z[i] += gi - sigma * wd[i];
			n[i] += gi * gi;
			wd[i] = fabs(z[i]) <= 0.3 ? 0.0
				: -(z[i] - (z[i] > 0 ? 0.3 : -0.3)) / ((1.0 + sqrt(n[i])) / 0.5 + 0.1);
		}
	}
	assert_close("ftrl w", w, wd, LEN);
	assert_close("ftrl z", st, z, LEN);
	assert_close("ftrl n", st + LEN, n, LEN);
	/* l1 gives exact zeros where |z| <= l1 (small gradients on even i)
	 * and non-zeros elsewhere. */
	int zeros = 0, nonzeros = 0;
	for (int i = 0; i < LEN; i++) {
		if (fabs(z[i]) < 0.29)
			assert_true(w[i] == 0.0f), zeros++;
		else if (fabs(z[i]) > 0.31)
			assert_true(w[i] != 0.0f), nonzeros++;
	}
	assert_true(zeros > 0 && nonzeros > 0);
}

/* update_rows: per-coordinate kinds equal one update over rows*cols (state
 * included, bit for bit); rowwise adagrad keeps one accumulator per row. */
static void test_optim_update_rows_equivalence(void **state)
{
	(void)state;
	enum { R = 3, C = 4 };
	const char *names[5] = {"sgd", "adagrad", "adagrad", "adam", "ftrl"};
	for (int k = 0; k < 5; k++) {
		st_optim_t o = make(names[k], k == 2);
		float w0[R * C], g[R * C];
		for (int i = 0; i < R * C; i++) {
			w0[i] = k == 4 ? 0.0f : sym();
			g[i] = sym();
		}
		float wa[R * C], wb[R * C], sa[2 * R * C], sb[2 * R * C];
		memcpy(wa, w0, sizeof wa);
		memcpy(wb, w0, sizeof wb);
		size_t ns = R * st_optim_state_floats(&o, C);
		assert_true(ns <= 2 * R * C);
		for (int r = 0; r < R; r++) {
			size_t per = st_optim_state_floats(&o, C);
			st_optim_state_init(&o, sa + r * per, C);
			st_optim_state_init(&o, sb + r * per, C);
		}
		for (uint64_t t = 1; t <= 3; t++) {
			st_optim_update_rows(&o, wa, sa, g, R, C, t);
			if (k == 2) {
				for (int r = 0; r < R; r++)
					st_optim_update(&o, wb + r * C, sb + r, g + r * C, C, t);
			} else {
				st_optim_update(&o, wb, sb, g, R * C, t);
			}
		}
		assert_memory_equal(wa, wb, sizeof wa);
		if (ns)
			assert_memory_equal(sa, sb, ns * sizeof *sa);
		if (k == 2) {
			/* Rows differ in their gradients, so their accumulators do. */
			assert_true(sa[0] != sa[1] || sa[1] != sa[2]);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_optim_init_maps_names),
		cmocka_unit_test(test_optim_state_floats_and_init),
		cmocka_unit_test(test_optim_sgd_matches_reference),
		cmocka_unit_test(test_optim_adagrad_matches_reference),
		cmocka_unit_test(test_optim_adagrad_rowwise_matches_reference),
		cmocka_unit_test(test_optim_adam_matches_reference),
		cmocka_unit_test(test_optim_adam_bias_correction),
		cmocka_unit_test(test_optim_ftrl_matches_reference),
		cmocka_unit_test(test_optim_update_rows_equivalence),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
