/* test_auc.c — exact AUC with ties, logloss, calibration, streaming AUC,
 * and non-finite scores (issue 15: a NaN score used to hang the exact AUC,
 * so the whole program runs under an alarm and a hang fails it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "ops/metrics/auc.h"
#include "runtime/err.h"

/* cmocka 1.1 has no double comparison; |a - b| <= eps. */
#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))

static uint64_t rs = 1;

static double unif(void)
{
	uint64_t z = (rs += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1.0p-53;
}

/* Pairs: positive above negative counts 1, tied counts 1/2. */
static double brute_auc(const float *p, const float *y, int n)
{
	double num = 0.0, pairs = 0.0;
	for (int i = 0; i < n; i++) {
		if (y[i] <= 0.5f)
			continue;
		for (int j = 0; j < n; j++) {
			if (y[j] > 0.5f)
				continue;
			pairs += 1.0;
			num += p[i] > p[j] ? 1.0 : p[i] == p[j] ? 0.5 : 0.0;
		}
	}
	return num / pairs;
}

static void test_auc_exact_matches_brute_force_with_ties(void **state)
{
	(void)state;
	enum { N = 2000 };
	float p[N], y[N];
	for (int rep = 0; rep < 5; rep++) {
		int levels = rep == 0 ? 3 : 10 * rep;
		for (int i = 0; i < N; i++) {
			/* Coarse levels give many ties; labels depend on p. */
			p[i] = (float)floor(unif() * levels) / (float)levels;
			y[i] = unif() < 0.2 + 0.6 * p[i] ? 1.0f : 0.0f;
		}
		double a;
		assert_int_equal(st_auc_exact(p, y, N, &a), ST_OK);
		assert_near(a, brute_auc(p, y, N), 1e-12);
	}
}

static void test_auc_exact_edge_cases(void **state)
{
	(void)state;
	float p[4] = { 0.1f, 0.2f, 0.3f, 0.4f };
	float up[4] = { 0, 0, 1, 1 }, down[4] = { 1, 1, 0, 0 }, one[4] = { 1, 1, 1, 1 };
	float tied[4] = { 0.5f, 0.5f, 0.5f, 0.5f };
	double a;
	assert_int_equal(st_auc_exact(p, up, 4, &a), ST_OK);
	assert_near(a, 1.0, 0);
	assert_int_equal(st_auc_exact(p, down, 4, &a), ST_OK);
	assert_near(a, 0.0, 0);
	assert_int_equal(st_auc_exact(tied, up, 4, &a), ST_OK);
	assert_near(a, 0.5, 0);
	assert_int_equal(st_auc_exact(p, one, 4, &a), ST_OK);
	assert_true(isnan(a));
	assert_int_equal(st_auc_exact(p, one, 0, &a), ST_OK);
	assert_true(isnan(a));
}

/* NaN and infinite scores are left out of the AUC and counted; the rest is
 * ranked as if they were not there. Each case would rank differently if the
 * non-finite score took part (+inf on a negative above every positive,
 * -inf on a positive below every negative). */
static void test_auc_exact_nonfinite_scores(void **state)
{
	(void)state;
	double a;
	size_t nf = 99;
	float p_nan[5] = { 0.1f, NAN, 0.3f, 0.4f, NAN }, y_nan[5] = { 0, 1, 1, 1, 0 };
	assert_int_equal(st_auc_exact_finite(p_nan, y_nan, 5, &a, &nf), ST_OK);
	assert_near(a, 1.0, 0);
	assert_int_equal(nf, 2);
	assert_int_equal(st_auc_exact(p_nan, y_nan, 5, &a), ST_OK);
	assert_near(a, 1.0, 0);

	float p_pinf[4] = { 0.1f, 0.2f, INFINITY, 0.4f }, y_pinf[4] = { 0, 1, 0, 1 };
	assert_int_equal(st_auc_exact_finite(p_pinf, y_pinf, 4, &a, &nf), ST_OK);
	assert_near(a, 1.0, 0);
	assert_int_equal(nf, 1);

	float p_ninf[4] = { -INFINITY, 0.2f, 0.3f, 0.4f }, y_ninf[4] = { 1, 0, 1, 0 };
	assert_int_equal(st_auc_exact_finite(p_ninf, y_ninf, 4, &a, &nf), ST_OK);
	assert_near(a, 0.5, 0);
	assert_int_equal(nf, 1);

	/* Every score NaN: nothing to rank, the AUC is unavailable (NaN). */
	float p_all[4] = { NAN, NAN, -NAN, NAN }, y_all[4] = { 0, 1, 0, 1 };
	assert_int_equal(st_auc_exact_finite(p_all, y_all, 4, &a, &nf), ST_OK);
	assert_true(isnan(a));
	assert_int_equal(nf, 4);
	/* Only one class among the finite scores: unavailable too. */
	float p_one[4] = { 0.2f, NAN, 0.7f, INFINITY }, y_one[4] = { 1, 0, 1, 0 };
	assert_int_equal(st_auc_exact_finite(p_one, y_one, 4, &a, &nf), ST_OK);
	assert_true(isnan(a));
	assert_int_equal(nf, 2);
}

/* A diverging model's scores: many NaN and infinities among ties; the AUC
 * equals the brute-force AUC of the finite scores alone. */
static void test_auc_exact_nonfinite_matches_finite_subset(void **state)
{
	(void)state;
	enum { N = 3000 };
	static float p[N], y[N], fp[N], fy[N];
	int m = 0;
	for (int i = 0; i < N; i++) {
		double u = unif();
		p[i] = u < 0.2 ? NAN : u < 0.25 ? INFINITY : u < 0.3 ? -INFINITY
			: (float)floor(unif() * 20) / 20.0f;
		y[i] = unif() < 0.3 ? 1.0f : 0.0f;
		if (isfinite(p[i])) {
			fp[m] = p[i];
			fy[m++] = y[i];
		}
	}
	double a;
	size_t nf;
	assert_int_equal(st_auc_exact_finite(p, y, N, &a, &nf), ST_OK);
	assert_int_equal(nf, N - m);
	assert_near(a, brute_auc(fp, fy, m), 1e-12);
}

static void test_auc_logloss_and_calibration(void **state)
{
	(void)state;
	float p[4] = { 0.5f, 0.5f, 0.0f, 1.0f };
	float y[4] = { 1, 0, 1, 1 };
	/* ln 2 twice, -ln(1e-7) once (clamped, finite), ~0 once. */
	double want = (2 * log(2.0) - log(ST_LOGLOSS_EPS) - log(1 - ST_LOGLOSS_EPS)) / 4;
	assert_near(st_logloss(p, y, 4), want, 1e-9);
	assert_true(isfinite(st_logloss(p, y, 4)));
	assert_near(st_calibration(p, y, 4), 2.0 / 3.0, 1e-9);
	float z[2] = { 0, 0 };
	assert_true(isnan(st_calibration(p, z, 2)));
	assert_near(st_logloss(p, y, 0), 0.0, 0);
}

static void test_auc_streaming_close_to_exact(void **state)
{
	(void)state;
	enum { N = 1000000 };
	float *p = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
	st_auc_acc_t *acc[2];
	assert_int_equal(st_auc_acc_create(&acc[0], 16), ST_OK);
	assert_int_equal(st_auc_acc_create(&acc[1], 16), ST_OK);
	for (int i = 0; i < N; i++) {
		/* CTR-like scores: logit ~ N(-1.3, 1) (Box-Muller), label from the
		 * score itself, so the true AUC is ~0.75 and most mass is < 0.4. */
		double u1 = unif(), u2 = unif();
		double z = sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2);
		double q = 1.0 / (1.0 + exp(-(-1.3 + z)));
		p[i] = (float)q;
		y[i] = unif() < q ? 1.0f : 0.0f;
		st_auc_acc_add(acc[i & 1], p[i], y[i]);
	}
	double exact;
	assert_int_equal(st_auc_exact(p, y, N, &exact), ST_OK);
	st_auc_stats_t s;
	st_auc_acc_read((const st_auc_acc_t *const *)acc, 2, &s);
	assert_int_equal(s.n, N);
	assert_true(fabs(s.auc - exact) < 1e-3);
	assert_true(exact > 0.7 && exact < 0.8);
	assert_near(s.logloss, st_logloss(p, y, N), 1e-6);
	assert_near(s.calibration, st_calibration(p, y, N), 1e-6);
	/* One accumulator alone sees half the data: different counts. */
	st_auc_acc_read((const st_auc_acc_t *const *)acc, 1, &s);
	assert_int_equal(s.n, N / 2);
	st_auc_acc_reset(acc[0]);
	st_auc_acc_read((const st_auc_acc_t *const *)acc, 1, &s);
	assert_int_equal(s.n, 0);
	assert_true(isnan(s.auc));
	st_auc_acc_destroy(acc[0]);
	st_auc_acc_destroy(acc[1]);
	free(p);
	free(y);
}

int main(void)
{
	/* A hang (the bug these tests pin) must fail, not wait for meson. */
	alarm(60);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auc_exact_matches_brute_force_with_ties),
		cmocka_unit_test(test_auc_exact_edge_cases),
		cmocka_unit_test(test_auc_exact_nonfinite_scores),
		cmocka_unit_test(test_auc_exact_nonfinite_matches_finite_subset),
		cmocka_unit_test(test_auc_logloss_and_calibration),
		cmocka_unit_test(test_auc_streaming_close_to_exact),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
