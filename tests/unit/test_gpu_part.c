/* test_gpu_part.c — the host-side logic of the GPU backend (cuda/gpu_part.h),
 * which needs no GPU and runs on every build: key -> GPU partition, the
 * stable routing buckets of Algorithm 2 (the reference the device kernel is
 * checked against in tests/gpu), device-table sizing, and the AUC of a
 * prediction histogram against ops/metrics' streaming accumulator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/gpu_part.h"
#include "ops/metrics/auc.h"
#include "runtime/err.h"

static uint64_t rs = 7;

static uint64_t rnd(void)
{
	uint64_t z = (rs += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Consecutive keys (the worst case for a weak hash) spread evenly: every
 * part within 2% of n / parts for 400k keys (the binomial standard
 * deviation is < 0.5% of the mean for 8 parts). */
static void test_gpu_part_balance(void **state)
{
	enum { N = 400000 };
	for (uint32_t parts = 1; parts <= 8; parts++) {
		uint32_t cnt[8] = { 0 };
		for (uint64_t k = 0; k < N; k++) {
			uint32_t p = st_gpu_part_of(k, parts);
			assert_true(p < parts);
			cnt[p]++;
		}
		for (uint32_t p = 0; p < parts; p++)
			assert_true(fabs((double)cnt[p] - (double)N / parts) < 0.02 * N / parts);
	}
}

/* The partition uses the high bits of the hash and a table's home slot the
 * low bits: the keys one GPU owns still fill both halves (and every residue)
 * of its table. With h % 2 as the partition, GPU 0 would get only even home
 * slots. */
static void test_gpu_part_independent_of_home(void **state)
{
	uint32_t odd = 0, total = 0, res4[4] = { 0 };
	for (uint64_t k = 0; k < 200000; k++) {
		if (st_gpu_part_of(k, 2) != 0)
			continue;
		uint32_t h = st_gpu_home(k, 1023);
		odd += h & 1;
		res4[h & 3]++;
		total++;
	}
	assert_true(total > 90000);
	assert_true(fabs((double)odd / total - 0.5) < 0.01);
	for (int r = 0; r < 4; r++)
		assert_true(fabs((double)res4[r] / total - 0.25) < 0.01);
}

/* Buckets partition the input, hold only their owner's keys, and keep the
 * input order inside each bucket (the device kernel must match this). */
static void test_gpu_part_route_plan(void **state)
{
	enum { N = 5000 };
	uint64_t *keys = malloc(N * sizeof *keys);
	uint32_t *perm = malloc(N * sizeof *perm), off[65];
	char *seen = malloc(N);
	assert_non_null(keys);
	assert_non_null(perm);
	assert_non_null(seen);
	const uint32_t cases[] = { 1, 3, 8, 64 };
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		uint32_t P = cases[c], n = c == 0 ? 0 : N;
		for (uint32_t i = 0; i < n; i++)
			keys[i] = rnd() % 1000;   /* repeats: ties must keep order */
		st_gpu_route_plan_host(keys, n, P, off, perm);
		assert_int_equal(off[0], 0);
		assert_int_equal(off[P], n);
		memset(seen, 0, N);
		for (uint32_t p = 0; p < P; p++) {
			assert_true(off[p] <= off[p + 1]);
			for (uint32_t j = off[p]; j < off[p + 1]; j++) {
				assert_true(perm[j] < n);
				assert_int_equal(st_gpu_part_of(keys[perm[j]], P), p);
				assert_false(seen[perm[j]]);
				seen[perm[j]] = 1;
				if (j > off[p])
					assert_true(perm[j] > perm[j - 1]);
			}
		}
	}
	assert_int_equal(st_gpu_route_scratch_words(0, 4), 4);
	assert_int_equal(st_gpu_route_scratch_words(ST_GPU_ROUTE_BLOCK + 1, 4), 8);
	free(keys);
	free(perm);
	free(seen);
}

static void test_gpu_part_sizing(void **state)
{
	uint64_t rows = 0;
	assert_int_equal(st_gpu_index_slots(1), 64);
	assert_int_equal(st_gpu_index_slots(1000), 2048);
	assert_int_equal(st_gpu_index_slots(1024), 2048);
	/* No budget: exactly the pinned working set. */
	assert_int_equal(st_gpu_table_rows(50000, 3, 0, 33, 16, &rows), ST_OK);
	assert_int_equal(rows, 150000);
	/* A budget: the largest table that fits. */
	size_t budget = (size_t)64 << 20;
	assert_int_equal(st_gpu_table_rows(50000, 3, budget, 33, 16, &rows), ST_OK);
	assert_true(rows >= 150000);
	assert_true(st_gpu_table_bytes(rows, 33, 16) <= budget);
	assert_true(st_gpu_table_bytes(rows + 1, 33, 16) > budget);
	/* The pinned working set must fit. */
	assert_int_equal(st_gpu_table_rows(1000000, 2, budget, 33, 16, &rows), ST_ENOSPC);
	assert_int_equal(st_gpu_table_rows(0, 2, budget, 33, 16, &rows), ST_EINVAL);
	/* Bytes: 33 + 16 floats + 24 bytes of bookkeeping per row, 12 per slot. */
	assert_int_equal(st_gpu_table_bytes(1000, 33, 16), 1000 * (33 * 4 + 16 + 16 * 4 + 8) +
			 2048 * 12);
	assert_int_equal(st_gpu_table_bytes(1000, 33, 0), 1000 * (33 * 4 + 16) + 2048 * 12);
}

/* The histogram AUC equals the streaming accumulator's to the last bit when
 * the buckets are the same (that is the contract st_gpu_auc_hist keeps),
 * and is within 1e-3 of the exact AUC. */
static void test_gpu_part_auc_hist(void **state)
{
	enum { N = 20000, BITS = 16 };
	const size_t nb = (size_t)1 << BITS;
	uint64_t *hist = calloc(2 * nb, sizeof *hist);
	float *p = malloc(N * sizeof *p), *y = malloc(N * sizeof *y);
	st_auc_acc_t *acc;
	assert_non_null(hist);
	assert_int_equal(st_auc_acc_create(&acc, BITS), ST_OK);
	for (int i = 0; i < N; i++) {
		y[i] = (float)(rnd() % 3 == 0);
		double u = (double)(rnd() >> 11) * 0x1.0p-53;
		p[i] = (float)(y[i] > 0.5f ? 0.3 + 0.7 * u : 0.7 * u);
		if (i % 97 == 0)
			p[i] = i % 2 ? 0.0f : 1.0f;   /* the clamped edges */
		st_auc_acc_add(acc, p[i], y[i]);
		double d = p[i];
		size_t b = !(d > 0.0) ? 0 : d >= 1.0 ? nb - 1 : (size_t)(d * (double)nb);
		hist[(size_t)(y[i] > 0.5f) * nb + b]++;
	}
	st_auc_stats_t s;
	const st_auc_acc_t *accs[] = { acc };
	st_auc_acc_read(accs, 1, &s);
	double got = st_gpu_auc_from_hist(hist, BITS), exact;
	assert_true(got == s.auc);
	assert_int_equal(st_auc_exact(p, y, N, &exact), ST_OK);
	assert_true(fabs(got - exact) < 1e-3);
	memset(hist, 0, 2 * nb * sizeof *hist);
	hist[5] = 3;   /* negatives only */
	assert_true(isnan(st_gpu_auc_from_hist(hist, BITS)));
	st_auc_acc_destroy(acc);
	free(hist);
	free(p);
	free(y);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_part_balance),
		cmocka_unit_test(test_gpu_part_independent_of_home),
		cmocka_unit_test(test_gpu_part_route_plan),
		cmocka_unit_test(test_gpu_part_sizing),
		cmocka_unit_test(test_gpu_part_auc_hist),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
