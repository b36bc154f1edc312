/* test_nn_simd.c — the AVX2 paths of ops/nn/nn.c against their plain-loop
 * references, bit for bit: pooling forward and backward (st_pool_* vs
 * st_pool_*_ref) and the fused ReLU + bias gradient backward
 * (st_relu_bias_backward vs st_relu_bias_backward_ref, which is the old
 * two-pass st_relu_backward + bias sum), and ReLU's backward alone
 * (st_relu_backward vs st_relu_backward_ref, the branchy loop).
 *
 * Slot dimensions and layer widths run over 0..67 (every remainder mod 8,
 * widths below one register), with several keys per slot, NULL rows, sum,
 * mean and mixed per-slot pooling, key values and activations that are
 * exact zeros, negative, tiny or large. memcmp, no tolerance: the fast
 * paths must add the same terms in the same order. On a CPU without AVX2
 * every case skips (exit 77). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/nn/nn.h"
#include "runtime/simd.h"
#include "skip_util.h"

static uint64_t rs = 31;

static uint64_t next(void)
{
	uint64_t z = (rs += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Either sign; one in eight an exact zero (one in 16 of those -0); the
 * rest spread over magnitudes 1e-6 .. 1e3. */
static float val(void)
{
	uint64_t r = next();
	if ((r & 7) == 0)
		return (r & 128) ? -0.0f : 0.0f;
	static const float scale[] = { 1e-6f, 1e-3f, 0.1f, 1.0f, 10.0f, 1e3f };
	double u = (double)(r >> 11) * 0x1.0p-53;
	float x = (float)u * scale[(r >> 3) % 6];
	return (r & 8) ? -x : x;
}

static void fill(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = val();
}

static int have_avx2(void)
{
	if (!st_simd_cpu_avx2())
		return 0;
	st_simd_set_ref(0);
	assert_true(st_simd_avx2());
	return 1;
}

enum { SLOTS = 4, EX = 9, MAXKEYS = EX * SLOTS * 3, UNIQ = 23, MAXD = 67 };

/* A random batch of EX examples: each gets 0..2 keys per slot in slot
 * order shuffled by a rotation, keys pointing at UNIQ unique rows of which
 * two are NULL. */
typedef struct {
	uint32_t row_off[EX + 1];
	uint16_t slot[MAXKEYS];
	float val[MAXKEYS];
	uint32_t idx[MAXKEYS];
} batch_t;

static void make_batch(batch_t *b)
{
	uint32_t k = 0;
	b->row_off[0] = 0;
	for (int i = 0; i < EX; i++) {
		int rot = (int)(next() % SLOTS);
		for (int j = 0; j < SLOTS; j++) {
			int s = (j + rot) % SLOTS;
			int nk = (int)(next() % 3);
			for (int q = 0; q < nk; q++, k++) {
				b->slot[k] = (uint16_t)s;
				b->val[k] = (next() & 3) ? 1.0f : val();
				b->idx[k] = (uint32_t)(next() % UNIQ);
			}
		}
		b->row_off[i + 1] = k;
	}
}

static void check_pool(const int *dim, int mean, const uint8_t *slot_mean)
{
	int off[SLOTS], width = 0, maxd = 0;
	for (int s = 0; s < SLOTS; s++) {
		off[s] = width;
		width += dim[s];
		if (dim[s] > maxd)
			maxd = dim[s];
	}
	st_pool_layout_t L = { .n_slots = SLOTS, .dim = dim, .off = off, .width = width,
			       .mean = mean, .slot_mean = slot_mean };
	static float store[UNIQ][MAXD];
	float *rows[UNIQ];
	for (int u = 0; u < UNIQ; u++) {
		fill(store[u], MAXD);
		rows[u] = (u == 3 || u == 17) ? NULL : store[u];
	}
	batch_t b;
	make_batch(&b);
	static float out1[EX * SLOTS * MAXD], out2[EX * SLOTS * MAXD];
	static float gu1[UNIQ * (MAXD + 1)], gu2[UNIQ * (MAXD + 1)];
	/* r0 = 2: the entry points must honour the starting example. */
	uint32_t r0 = 2, n = EX - 2;
	memset(out1, 0x55, sizeof out1);
	memset(out2, 0x55, sizeof out2);
	st_pool_forward(&L, r0, n, b.row_off, b.slot, b.val, b.idx, rows, out1);
	st_pool_forward_ref(&L, r0, n, b.row_off, b.slot, b.val, b.idx, rows, out2);
	assert_memory_equal(out1, out2, sizeof out1);

	/* Backward accumulates into a gu that already holds values. */
	int gstride = maxd + 1;
	fill(gu1, (size_t)UNIQ * (size_t)gstride);
	memcpy(gu2, gu1, sizeof gu1);
	fill(out1, (size_t)n * (size_t)width);
	st_pool_backward(&L, r0, n, b.row_off, b.slot, b.val, b.idx, out1, gu1, gstride);
	st_pool_backward_ref(&L, r0, n, b.row_off, b.slot, b.val, b.idx, out1, gu2, gstride);
	assert_memory_equal(gu1, gu2, sizeof gu1);
}

static void test_nn_simd_pool_sum(void **state)
{
	(void)state;
	if (!have_avx2()) {
		TU_SKIP("this CPU has no AVX2: no fast path to compare");
		return;
	}
	for (int d = 0; d <= MAXD; d++) {
		int dim[SLOTS] = { d, 16, (d * 7 + 3) % (MAXD + 1), MAXD - d };
		check_pool(dim, 0, NULL);
	}
}

static void test_nn_simd_pool_mean_and_mixed(void **state)
{
	(void)state;
	if (!have_avx2()) {
		TU_SKIP("this CPU has no AVX2: no fast path to compare");
		return;
	}
	static const uint8_t mixed[SLOTS] = { 1, 0, 0, 1 };
	for (int d = 0; d <= MAXD; d++) {
		int dim[SLOTS] = { d, MAXD - d, 8, (d * 5 + 1) % (MAXD + 1) };
		check_pool(dim, 1, NULL);
		check_pool(dim, 0, mixed);
	}
}

static void check_relu_bias(int n, int out, int with_bias)
{
	size_t len = (size_t)n * (size_t)out;
	float *Y = malloc((len + 1) * sizeof *Y), *d1 = malloc((len + 1) * sizeof *d1),
	      *d2 = malloc((len + 1) * sizeof *d2);
	float db1[MAXD + 1], db2[MAXD + 1];
	assert_non_null(Y);
	assert_non_null(d1);
	assert_non_null(d2);
	fill(Y, len);
	fill(d1, len);
	memcpy(d2, d1, len * sizeof *d1);
	fill(db1, (size_t)out);
	memcpy(db2, db1, (size_t)out * sizeof *db1);
	st_relu_bias_backward(n, out, Y, d1, with_bias ? db1 : NULL);
	st_relu_bias_backward_ref(n, out, Y, d2, with_bias ? db2 : NULL);
	if (memcmp(d1, d2, len * sizeof *d1) || memcmp(db1, db2, (size_t)out * sizeof *db1))
		fail_msg("relu+bias backward n %d out %d bias %d: AVX2 and reference differ",
			 n, out, with_bias);
	free(Y);
	free(d1);
	free(d2);
}

static void test_nn_simd_relu_bias_backward(void **state)
{
	(void)state;
	if (!have_avx2()) {
		TU_SKIP("this CPU has no AVX2: no fast path to compare");
		return;
	}
	static const int ns[] = { 0, 1, 3, 17, 64 };
	for (size_t q = 0; q < sizeof ns / sizeof ns[0]; q++)
		for (int out = 0; out <= MAXD; out++) {
			check_relu_bias(ns[q], out, 1);
			check_relu_bias(ns[q], out, 0);
		}
}

/* ReLU backward alone (what cross, attention and MMoE layers call): every
 * length 0..200 (all remainders mod 8, tails after several registers),
 * out of place and in place, y with NaNs, ±0 and both signs. */
static void test_nn_simd_relu_backward(void **state)
{
	(void)state;
	if (!have_avx2()) {
		TU_SKIP("this CPU has no AVX2: no fast path to compare");
		return;
	}
	enum { L = 200 };
	float y[L], dy[L], dx1[L], dx2[L], in1[L], in2[L];
	for (size_t len = 0; len <= L; len++) {
		fill(y, L);
		fill(dy, L);
		for (size_t i = 0; i < len; i += 7)
			y[i] = NAN;
		memset(dx1, 0x5a, sizeof dx1);
		memset(dx2, 0x5a, sizeof dx2);
		st_relu_backward(len, y, dy, dx1);
		st_relu_backward_ref(len, y, dy, dx2);
		if (memcmp(dx1, dx2, sizeof dx1))
			fail_msg("relu backward len %zu: AVX2 and reference differ", len);
		memcpy(in1, dy, sizeof dy);
		memcpy(in2, dy, sizeof dy);
		st_relu_backward(len, y, in1, in1);
		st_relu_backward_ref(len, y, in2, in2);
		if (memcmp(in1, in2, sizeof in1))
			fail_msg("relu backward in place len %zu: AVX2 and reference differ", len);
	}
	/* The masked values are +0.0 and the kept ones dy's bits, in both. */
	float yy[9] = { 1, -1, 0, -0.0f, NAN, 2, 3, -4, 5 }, d[9], o[9];
	for (int i = 0; i < 9; i++)
		d[i] = -0.0f - (float)i;
	st_relu_backward(9, yy, d, o);
	const float want[9] = { -0.0f, 0, 0, 0, 0, -5, -6, 0, -8 };
	assert_memory_equal(o, want, sizeof o);
}

/* The fused pass is what ReLU's backward plus st_linear_backward's bias
 * sum computed before it existed: with the references forced (ST_SIMD=ref
 * path), st_relu_bias_backward is literally those two passes. */
static void test_nn_simd_relu_bias_matches_two_passes(void **state)
{
	(void)state;
	enum { N = 5, OUT = 13, IN = 3 };
	float Y[N * OUT], d1[N * OUT], d2[N * OUT], db1[OUT], db2[OUT];
	float X[N * IN], W[OUT * IN], dW[OUT * IN] = { 0 };
	fill(Y, N * OUT);
	fill(d1, N * OUT);
	fill(X, N * IN);
	fill(W, OUT * IN);
	memcpy(d2, d1, sizeof d1);
	fill(db1, OUT);
	memcpy(db2, db1, sizeof db1);
	st_relu_bias_backward(N, OUT, Y, d1, db1);
	st_relu_backward(N * OUT, Y, d2, d2);
	st_linear_backward(N, IN, OUT, X, W, d2, NULL, dW, db2);
	assert_memory_equal(d1, d2, sizeof d1);
	assert_memory_equal(db1, db2, sizeof db1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nn_simd_pool_sum),
		cmocka_unit_test(test_nn_simd_pool_mean_and_mixed),
		cmocka_unit_test(test_nn_simd_relu_bias_backward),
		cmocka_unit_test(test_nn_simd_relu_backward),
		cmocka_unit_test(test_nn_simd_relu_bias_matches_two_passes),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	return tu_exit(failed, sizeof tests / sizeof tests[0]);
}
