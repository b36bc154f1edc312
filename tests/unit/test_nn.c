/* test_nn.c — layers of ops/nn/nn.h: finite-difference gradient checks for
 * every layer, and exact forward values on hand-computed tiny cases.
 *
 * Gradient checks: a layer's outputs are reduced to a scalar
 * L = Σ_j r_j out_j (r random, accumulated in double), and the analytic
 * backward with dout = r is compared with the central difference
 * (L(x+h) − L(x−h)) / (2h) for every input coordinate, in float forward. */
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
#include "ops/nn/smallgemm.h"

/* cmocka 1.1 has no double comparison; |a - b| <= eps. */
#define assert_near(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))

static uint64_t rs = 7;

static double unif(void)
{
	uint64_t z = (rs += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1.0p-53;
}

/* Uniform in [-1, 1). */
static float sym(void)
{
	return (float)(2.0 * unif() - 1.0);
}

static void fill(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = sym();
}

/* ---- finite differences ----------------------------------------------------
 * Step and tolerance. Pooling, wide, linear, FM and dot are at most
 * quadratic in any single input coordinate, so the central difference has
 * no truncation error there and only float rounding remains; sigmoid and
 * logloss have |f'''| <= 1/8 (sigmoid) so h = 1e-2 adds at most ~2e-6.
 * Rounding: each output is a float with relative error ~ a few 6e-8 over
 * terms of magnitude <= ~10, and the difference divides by 2h = 2e-2, so the
 * error in a derivative stays below ~1e-4 on these sizes; atol 1e-3 +
 * rtol 1e-2 leaves a 10× margin and still catches any wrong factor, sign,
 * index or missing term (those are O(0.1..1) errors). */
#define FD_H 1e-2f
#define FD_ATOL 1e-3
#define FD_RTOL 1e-2

typedef void (*fwd_fn)(void *ctx, float *out);

static double probe(fwd_fn f, void *ctx, float *out, size_t nout, const float *r)
{
	f(ctx, out);
	double L = 0.0;
	for (size_t j = 0; j < nout; j++)
		L += (double)r[j] * (double)out[j];
	return L;
}

/* Checks grad[i] ≈ dL/dx[i] for every i < nx; x is restored afterwards. */
static void check_grad(const char *what, fwd_fn f, void *ctx, float *x, size_t nx,
		       const float *grad, float *out, size_t nout, const float *r)
{
	int bad = 0;
	for (size_t i = 0; i < nx; i++) {
		float x0 = x[i];
		float xp = x0 + FD_H, xm = x0 - FD_H;
		x[i] = xp;
		double Lp = probe(f, ctx, out, nout, r);
		x[i] = xm;
		double Lm = probe(f, ctx, out, nout, r);
		x[i] = x0;
		/* Divide by the step actually taken after float rounding. */
		double num = (Lp - Lm) / ((double)xp - (double)xm);
		double err = fabs(num - (double)grad[i]);
		if (err > FD_ATOL + FD_RTOL * fabs(num)) {
			fprintf(stderr, "%s: d/dx[%zu]: analytic %.6g, numeric %.6g\n",
				what, i, (double)grad[i], num);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
}

/* ---- pooling and wide ------------------------------------------------------ */

/* 5 examples over 3 slots of dims 2, 3, 1 (offsets 0, 2, 5; width 6) and 6
 * unique rows of stride 4 (column 3 holds the wide weight). Example 1 has
 * two keys in slot 0 and none in slot 2, example 2 has no keys at all,
 * keys are not ordered by slot, and key values are not all 1. */
enum { P_SLOTS = 3, P_WIDTH = 6, P_U = 6, P_STRIDE = 4, P_EX = 5, P_R0 = 1, P_N = 4 };
static const int p_dim[P_SLOTS] = {2, 3, 1};
static const int p_off[P_SLOTS] = {0, 2, 5};
static const uint32_t p_row_off[P_EX + 1] = {0, 2, 6, 6, 9, 12};
static const uint16_t p_slot[12] = {0, 1,  1, 0, 0, 1,  /* ex 2: none */
				    2, 0, 1,  0, 2, 2};
static const float p_val[12] = {1.0f, 1.0f,  0.5f, 1.0f, -2.0f, 1.5f,
				1.0f, 1.0f, 3.0f,  1.0f, 0.25f, 1.0f};
static const uint32_t p_idx[12] = {0, 1,  2, 3, 4, 2,  5, 0, 1,  3, 5, 4};

typedef struct {
	st_pool_layout_t L;
	float table[P_U * P_STRIDE];
	float *rows[P_U];
} pool_ctx_t;

static void pool_ctx_init(pool_ctx_t *c, int mean)
{
	c->L = (st_pool_layout_t){P_SLOTS, p_dim, p_off, P_WIDTH, mean, NULL};
	fill(c->table, P_U * P_STRIDE);
	for (int u = 0; u < P_U; u++)
		c->rows[u] = c->table + u * P_STRIDE;
}

static void pool_fwd(void *ctx, float *out)
{
	pool_ctx_t *c = ctx;
	st_pool_forward(&c->L, P_R0, P_N, p_row_off, p_slot, p_val, p_idx,
			c->rows, out);
}

static void check_pool_grad(int mean)
{
	pool_ctx_t c;
	pool_ctx_init(&c, mean);
	float out[P_N * P_WIDTH], r[P_N * P_WIDTH], gu[P_U * P_STRIDE];
	fill(r, P_N * P_WIDTH);
	/* Backward accumulates: start from 1 and subtract it afterwards. */
	for (int i = 0; i < P_U * P_STRIDE; i++)
		gu[i] = 1.0f;
	st_pool_backward(&c.L, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, r,
			 gu, P_STRIDE);
	for (int i = 0; i < P_U * P_STRIDE; i++)
		gu[i] -= 1.0f;
	check_grad(mean ? "pool mean" : "pool sum", pool_fwd, &c, c.table,
		   P_U * P_STRIDE, gu, out, P_N * P_WIDTH, r);
}

static void test_nn_pool_sum_gradient(void **state)
{
	(void)state;
	check_pool_grad(0);
}

static void test_nn_pool_mean_gradient(void **state)
{
	(void)state;
	check_pool_grad(1);
}

static void test_nn_pool_forward_exact(void **state)
{
	(void)state;
	/* Rows u hold (u+1, 10(u+1), 100(u+1), 1000(u+1)). */
	pool_ctx_t c;
	pool_ctx_init(&c, 0);
	for (int u = 0; u < P_U; u++)
		for (int j = 0; j < P_STRIDE; j++)
			c.table[u * P_STRIDE + j] = (float)((u + 1) * (j == 0 ? 1 : j == 1 ? 10 : j == 2 ? 100 : 1000));
	float out[P_N * P_WIDTH];
	st_pool_forward(&c.L, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, c.rows, out);
	/* Example 1 (out row 0): slot0 = 1*row3 + -2*row4 = (4-10, 40-100);
	 * slot1 = 0.5*row2 + 1.5*row2 = 2*row2 = (6, 60, 600); slot2 none. */
	const float want_sum[P_WIDTH] = {-6, -60, 6, 60, 600, 0};
	for (int j = 0; j < P_WIDTH; j++)
		assert_true(out[j] == want_sum[j]);
	/* Example 2 has no keys: zeros. */
	for (int j = 0; j < P_WIDTH; j++)
		assert_true(out[P_WIDTH + j] == 0.0f);

	c.L.mean = 1;
	st_pool_forward(&c.L, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, c.rows, out);
	/* Mean divides by the key count of the slot: 2 in slot 0, 2 in slot 1. */
	const float want_mean[P_WIDTH] = {-3, -30, 3, 30, 300, 0};
	for (int j = 0; j < P_WIDTH; j++)
		assert_true(out[j] == want_mean[j]);
	for (int j = 0; j < P_WIDTH; j++)
		assert_true(out[P_WIDTH + j] == 0.0f);
	/* Example 4 (out row 3): slot0 = row3 (4, 40); slot1 none;
	 * slot2 = mean(0.25*row5, 1*row4) = (0.25*6 + 5) / 2 = 3.25. */
	const float want4[P_WIDTH] = {4, 40, 0, 0, 0, 3.25f};
	for (int j = 0; j < P_WIDTH; j++)
		assert_true(out[3 * P_WIDTH + j] == want4[j]);
}

static void test_nn_pool_null_rows_read_as_zeros(void **state)
{
	(void)state;
	pool_ctx_t c;
	pool_ctx_init(&c, 0);
	float out[P_N * P_WIDTH], ref[P_N * P_WIDTH];
	/* Row 2 NULL equals row 2 all zeros. */
	float *saved = c.rows[2];
	c.rows[2] = NULL;
	st_pool_forward(&c.L, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, c.rows, out);
	c.rows[2] = saved;
	memset(saved, 0, P_STRIDE * sizeof *saved);
	st_pool_forward(&c.L, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, c.rows, ref);
	assert_memory_equal(out, ref, sizeof out);

	/* Every row NULL: zeros everywhere, for sum and for mean. */
	float *none[P_U] = {0};
	for (int mean = 0; mean <= 1; mean++) {
		c.L.mean = mean;
		memset(out, 0xff, sizeof out);
		st_pool_forward(&c.L, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, none, out);
		for (int j = 0; j < P_N * P_WIDTH; j++)
			assert_true(out[j] == 0.0f);
	}
}

/* Per-slot pooling (slot_mean): slot s of the output and its gradient are
 * those of the all-mean layout where slot_mean[s], of the all-sum layout
 * elsewhere. Backward is linear in dout, so splitting dout by slot and
 * adding the two layouts' gradients gives the mixed one exactly up to
 * float rounding of one addition per coordinate. */
static void test_nn_pool_per_slot_modes(void **state)
{
	(void)state;
	static const uint8_t mode[P_SLOTS] = { 1, 0, 1 };
	pool_ctx_t c;
	pool_ctx_init(&c, 0);
	float mix[P_N * P_WIDTH], sum[P_N * P_WIDTH], mean[P_N * P_WIDTH];
	st_pool_layout_t Lm = c.L, Ls = c.L, Lx = c.L;
	Lm.mean = 1;
	Lx.slot_mean = mode;
	Lx.mean = 0;
	st_pool_forward(&Ls, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, c.rows, sum);
	st_pool_forward(&Lm, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, c.rows, mean);
	st_pool_forward(&Lx, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, c.rows, mix);
	float dm[P_N * P_WIDTH], ds[P_N * P_WIDTH], dx[P_N * P_WIDTH];
	fill(dx, P_N * P_WIDTH);
	for (int i = 0; i < P_N; i++)
		for (int sl = 0; sl < P_SLOTS; sl++)
			for (int j = p_off[sl]; j < p_off[sl] + p_dim[sl]; j++) {
				const float *want = mode[sl] ? mean : sum;
				assert_true(mix[i * P_WIDTH + j] == want[i * P_WIDTH + j]);
				dm[i * P_WIDTH + j] = mode[sl] ? dx[i * P_WIDTH + j] : 0.0f;
				ds[i * P_WIDTH + j] = mode[sl] ? 0.0f : dx[i * P_WIDTH + j];
			}
	float gx[P_U * P_STRIDE] = { 0 }, gs[P_U * P_STRIDE] = { 0 };
	st_pool_backward(&Lx, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, dx, gx, P_STRIDE);
	st_pool_backward(&Lm, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, dm, gs, P_STRIDE);
	st_pool_backward(&Ls, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, ds, gs, P_STRIDE);
	for (int i = 0; i < P_U * P_STRIDE; i++)
		assert_float_equal(gx[i], gs[i], 1e-5f * (1.0f + fabsf(gs[i])));
	/* slot_mean all zero is the sum layout, whatever `mean` says */
	static const uint8_t zero[P_SLOTS] = { 0 };
	Lm.slot_mean = zero;
	st_pool_forward(&Lm, P_R0, P_N, p_row_off, p_slot, p_val, p_idx, c.rows, mix);
	assert_memory_equal(mix, sum, sizeof sum);
}

/* More slots than the pooling code counts at once (its stack window):
 * mean must still divide every slot by its own count. */
static void test_nn_pool_mean_many_slots(void **state)
{
	(void)state;
	enum { S = 1300 };
	static int dim[S], off[S];
	for (int s = 0; s < S; s++) {
		dim[s] = 1;
		off[s] = s;
	}
	st_pool_layout_t L = {S, dim, off, S, 1, NULL};
	/* One example: slot 3 twice, slot 700 three times, slot 1299 once. */
	const uint32_t row_off[2] = {0, 6};
	const uint16_t slot[6] = {700, 3, 1299, 700, 3, 700};
	const float val[6] = {1, 1, 1, 1, 1, 1};
	const uint32_t idx[6] = {0, 1, 2, 0, 2, 1};
	float table[3] = {3.0f, 5.0f, 7.0f};
	float *rows[3] = {&table[0], &table[1], &table[2]};
	static float out[S];
	st_pool_forward(&L, 0, 1, row_off, slot, val, idx, rows, out);
	for (int s = 0; s < S; s++) {
		float want = s == 3 ? (5.0f + 7.0f) / 2 : s == 700 ? (3.0f + 3.0f + 5.0f) / 3
			: s == 1299 ? 7.0f : 0.0f;
		assert_near(out[s], want, 1e-6);
	}
	/* Backward: d out[700] = 1 -> row 0 gets 2/3, row 1 gets 1/3. */
	static float dout[S];
	memset(dout, 0, sizeof dout);
	dout[700] = 1.0f;
	dout[3] = 10.0f;
	float gu[3] = {0, 0, 0};
	st_pool_backward(&L, 0, 1, row_off, slot, val, idx, dout, gu, 1);
	assert_near(gu[0], 2.0 / 3.0, 1e-6);
	assert_near(gu[1], 1.0 / 3.0 + 5.0, 1e-6);
	assert_near(gu[2], 5.0, 1e-6);
}

typedef struct {
	float table[P_U * P_STRIDE];
	float *rows[P_U];
} wide_ctx_t;

static void wide_fwd(void *ctx, float *out)
{
	wide_ctx_t *c = ctx;
	st_wide_forward(P_R0, P_N, p_row_off, p_val, p_idx, c->rows, 3, out);
}

static void test_nn_wide_gradient(void **state)
{
	(void)state;
	wide_ctx_t c;
	fill(c.table, P_U * P_STRIDE);
	for (int u = 0; u < P_U; u++)
		c.rows[u] = c.table + u * P_STRIDE;
	float out[P_N], r[P_N], gu[P_U * P_STRIDE];
	fill(r, P_N);
	for (int i = 0; i < P_U * P_STRIDE; i++)
		gu[i] = 1.0f;
	st_wide_backward(P_R0, P_N, p_row_off, p_val, p_idx, r, gu, P_STRIDE, 3);
	for (int i = 0; i < P_U * P_STRIDE; i++)
		gu[i] -= 1.0f;
	check_grad("wide", wide_fwd, &c, c.table, P_U * P_STRIDE, gu, out, P_N, r);
}

static void test_nn_wide_forward_exact(void **state)
{
	(void)state;
	float table[P_U * P_STRIDE] = {0};
	float *rows[P_U];
	for (int u = 0; u < P_U; u++) {
		table[u * P_STRIDE + 3] = (float)(u + 1);
		rows[u] = table + u * P_STRIDE;
	}
	rows[5] = NULL;
	float out[P_N];
	st_wide_forward(P_R0, P_N, p_row_off, p_val, p_idx, rows, 3, out);
	/* ex1: .5*3 + 1*4 - 2*5 + 1.5*3 = 0; ex2: 0; ex3: (row5 NULL) + 1 + 3*2 = 7;
	 * ex4: 4 + 0.25*NULL + 5 = 9. */
	assert_true(out[0] == 0.0f);
	assert_true(out[1] == 0.0f);
	assert_true(out[2] == 7.0f);
	assert_true(out[3] == 9.0f);
}

/* ---- linear ---------------------------------------------------------------- */

enum { LN = 3, LIN = 4, LOUT = 5 };

typedef struct {
	float X[LN * LIN], W[LOUT * LIN], b[LOUT];
} lin_ctx_t;

static void lin_fwd(void *ctx, float *out)
{
	lin_ctx_t *c = ctx;
	st_linear_forward(LN, LIN, LOUT, c->X, c->W, c->b, out);
}

static void test_nn_linear_gradient(void **state)
{
	(void)state;
	lin_ctx_t c;
	fill(c.X, sizeof c.X / sizeof *c.X);
	fill(c.W, sizeof c.W / sizeof *c.W);
	fill(c.b, LOUT);
	float out[LN * LOUT], r[LN * LOUT];
	float dX[LN * LIN], dW[LOUT * LIN], db[LOUT];
	fill(r, LN * LOUT);
	/* dX is overwritten (start from garbage); dW and db accumulate. */
	for (int i = 0; i < LN * LIN; i++)
		dX[i] = 123.0f;
	for (int i = 0; i < LOUT * LIN; i++)
		dW[i] = 1.0f;
	for (int i = 0; i < LOUT; i++)
		db[i] = 1.0f;
	st_linear_backward(LN, LIN, LOUT, c.X, c.W, r, dX, dW, db);
	for (int i = 0; i < LOUT * LIN; i++)
		dW[i] -= 1.0f;
	for (int i = 0; i < LOUT; i++)
		db[i] -= 1.0f;
	check_grad("linear dX", lin_fwd, &c, c.X, LN * LIN, dX, out, LN * LOUT, r);
	check_grad("linear dW", lin_fwd, &c, c.W, LOUT * LIN, dW, out, LN * LOUT, r);
	check_grad("linear db", lin_fwd, &c, c.b, LOUT, db, out, LN * LOUT, r);
}

/* Against a naive triple loop in double on odd sizes (no multiple of any
 * SIMD width). Tolerance: sgemm sums 13 products of |x| < 1 in float,
 * error < 13 * 6e-8 * 13 ≈ 1e-5; 1e-4 absolute leaves margin. */
static void test_nn_linear_matches_naive(void **state)
{
	(void)state;
	enum { N = 7, IN = 13, OUT = 5 };
	float X[N * IN], W[OUT * IN], b[OUT], Y[N * OUT], dY[N * OUT];
	float dX[N * IN], dW[OUT * IN], db[OUT];
	fill(X, N * IN);
	fill(W, OUT * IN);
	fill(b, OUT);
	fill(dY, N * OUT);
	st_linear_forward(N, IN, OUT, X, W, b, Y);
	for (int i = 0; i < N; i++)
		for (int o = 0; o < OUT; o++) {
			double acc = b[o];
			for (int k = 0; k < IN; k++)
				acc += (double)X[i * IN + k] * W[o * IN + k];
			assert_near(Y[i * OUT + o], acc, 1e-4);
		}
	/* No bias: Y = X·Wᵀ exactly, overwriting whatever was there. */
	for (int i = 0; i < N * OUT; i++)
		Y[i] = 99.0f;
	st_linear_forward(N, IN, OUT, X, W, NULL, Y);
	for (int i = 0; i < N; i++)
		for (int o = 0; o < OUT; o++) {
			double acc = 0.0;
			for (int k = 0; k < IN; k++)
				acc += (double)X[i * IN + k] * W[o * IN + k];
			assert_near(Y[i * OUT + o], acc, 1e-4);
		}

	for (int i = 0; i < OUT * IN; i++)
		dW[i] = 0.5f;
	for (int i = 0; i < OUT; i++)
		db[i] = -0.5f;
	st_linear_backward(N, IN, OUT, X, W, dY, dX, dW, db);
	for (int i = 0; i < N; i++)
		for (int k = 0; k < IN; k++) {
			double acc = 0.0;
			for (int o = 0; o < OUT; o++)
				acc += (double)dY[i * OUT + o] * W[o * IN + k];
			assert_near(dX[i * IN + k], acc, 1e-4);
		}
	for (int o = 0; o < OUT; o++) {
		double sb = -0.5;
		for (int i = 0; i < N; i++)
			sb += dY[i * OUT + o];
		assert_near(db[o], sb, 1e-4);
		for (int k = 0; k < IN; k++) {
			double acc = 0.5;
			for (int i = 0; i < N; i++)
				acc += (double)dY[i * OUT + o] * X[i * IN + k];
			assert_near(dW[o * IN + k], acc, 1e-4);
		}
	}
	/* dX NULL is skipped; dW and db still accumulate. */
	float dW2[OUT * IN] = {0}, db2[OUT] = {0};
	st_linear_backward(N, IN, OUT, X, W, dY, NULL, dW2, db2);
	for (int i = 0; i < OUT * IN; i++)
		assert_near(dW2[i], dW[i] - 0.5f, 1e-5);
}

/* The strided pair reads and writes columns of wider matrices and gives
 * the packed pair's bits on the same values, and leaves the columns around
 * its operands as they were (mmoe.c runs experts in the columns of one
 * wide output this way). */
static void test_nn_linear_strided_matches_packed(void **state)
{
	(void)state;
	enum { N = 9, IN = 11, OUT = 6, LX = IN + 5, LY = OUT + 3, OX = 2, OY = 1 };
	float X[N * IN], W[OUT * IN], b[OUT], Y[N * OUT], dY[N * OUT], dX[N * IN];
	float dW[OUT * IN], db[OUT], dW2[OUT * IN], db2[OUT];
	float Xs[N * LX], Ys[N * LY], dYs[N * LY], dXs[N * LX];
	fill(X, N * IN);
	fill(W, OUT * IN);
	fill(b, OUT);
	fill(dY, N * OUT);
	for (int i = 0; i < N * LX; i++)
		Xs[i] = dXs[i] = -7.0f;
	for (int i = 0; i < N * LY; i++)
		Ys[i] = dYs[i] = -7.0f;
	for (int i = 0; i < N; i++) {
		memcpy(Xs + i * LX + OX, X + i * IN, sizeof(float) * IN);
		memcpy(dYs + i * LY + OY, dY + i * OUT, sizeof(float) * OUT);
	}
	st_linear_forward(N, IN, OUT, X, W, b, Y);
	st_linear_forward_ld(N, IN, OUT, Xs + OX, LX, W, b, Ys + OY, LY);
	for (int i = 0; i < OUT * IN; i++)
		dW[i] = dW2[i] = 0.25f;
	for (int i = 0; i < OUT; i++)
		db[i] = db2[i] = -0.25f;
	st_linear_backward(N, IN, OUT, X, W, dY, dX, dW, db);
	st_linear_backward_ld(N, IN, OUT, Xs + OX, LX, W, dYs + OY, LY, dXs + OX, LX, dW2, db2);
	for (int i = 0; i < N; i++) {
		for (int c = 0; c < LY; c++) {
			int in = c >= OY && c < OY + OUT;
			float want = in ? Y[i * OUT + c - OY] : -7.0f;
			assert_memory_equal(&Ys[i * LY + c], &want, sizeof want);
		}
		for (int c = 0; c < LX; c++) {
			int in = c >= OX && c < OX + IN;
			float want = in ? dX[i * IN + c - OX] : -7.0f;
			assert_memory_equal(&dXs[i * LX + c], &want, sizeof want);
		}
	}
	assert_memory_equal(dW, dW2, sizeof dW);
	assert_memory_equal(db, db2, sizeof db);
}

/* The small-GEMM path (libxsmm, smallgemm.h) against the sgemm reference:
 * the same maps to rounding, on shapes inside its rule, packed and strided,
 * with and without a bias, and row counts below, at and past a 64-row
 * block; and it does run there (a build without libxsmm skips). */
static void test_nn_linear_small_gemm_matches_sgemm(void **state)
{
	(void)state;
	if (!st_smallgemm_built())
		skip();
	static const int shapes[][3] = {   /* n, in, out */
		{ 1, 3, 2 }, { 7, 13, 5 }, { 64, 64, 32 }, { 130, 32, 16 }, { 200, 36, 80 },
		{ 65, 16, 1 }, { 129, 128, 64 }, { 70, 64, 429 },
	};
	int prev = st_smallgemm_enable(1);
	for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
		const int n = shapes[c][0], in = shapes[c][1], out = shapes[c][2];
		const int pad = (int)(c % 2) * 3;   /* odd cases strided */
		const int ldx = in + pad, ldy = out + pad;
		size_t nx = (size_t)n * ldx, ny = (size_t)n * ldy;
		float *X = malloc(sizeof(float) * nx), *W = malloc(sizeof(float) * in * out);
		float *b = malloc(sizeof(float) * out), *dY = malloc(sizeof(float) * ny);
		float *Y[2], *dX[2];
		assert_true(X && W && b && dY);
		fill(X, (int)nx);
		fill(W, in * out);
		fill(b, out);
		fill(dY, (int)ny);
		for (int k = 0; k < 2; k++) {
			Y[k] = calloc(ny, sizeof(float));
			dX[k] = calloc(nx, sizeof(float));
			assert_true(Y[k] && dX[k]);
			st_smallgemm_enable(k == 0);
			st_linear_forward_ld(n, in, out, X, ldx, W, c % 3 ? b : NULL, Y[k], ldy);
			st_linear_backward_ld(n, in, out, X, ldx, W, dY, ldy, dX[k], ldx, NULL, NULL);
		}
		for (size_t i = 0; i < ny; i++)
			assert_near(Y[0][i], Y[1][i], 1e-5 + 1e-5 * fabs((double)Y[1][i]));
		for (size_t i = 0; i < nx; i++)
			assert_near(dX[0][i], dX[1][i], 1e-5 + 1e-5 * fabs((double)dX[1][i]));
		/* and the small path did the work */
		st_smallgemm_enable(1);
		assert_int_equal(st_smallgemm_forward(n, in, out, X, ldx, W, 0.0f, Y[0], ldy), 1);
		assert_int_equal(st_smallgemm_backward_dx(n, in, out, dY, ldy, W, dX[0], ldx),
				 out <= 64 || (out <= 128 && in * out <= 8192));
		for (int k = 0; k < 2; k++) {
			free(Y[k]);
			free(dX[k]);
		}
		free(X);
		free(W);
		free(b);
		free(dY);
	}
	/* outside the rule it declines (sgemm does those) */
	float one = 1.0f;
	assert_int_equal(st_smallgemm_forward(4, 256, 64, &one, 256, &one, 0.0f, &one, 64), 0);
	assert_int_equal(st_smallgemm_forward(4, 128, 128, &one, 128, &one, 0.0f, &one, 128), 0);
	assert_int_equal(st_smallgemm_backward_dx(4, 64, 429, &one, 429, &one, &one, 64), 0);
	st_smallgemm_enable(prev);
}

/* ---- activations ----------------------------------------------------------- */

enum { AL = 24 };

typedef struct {
	float x[AL];
	int sig;
} act_ctx_t;

static void act_fwd(void *ctx, float *out)
{
	act_ctx_t *c = ctx;
	if (c->sig)
		st_sigmoid_forward(AL, c->x, out);
	else
		st_relu_forward(AL, c->x, out);
}

static void check_act_grad(int sig)
{
	act_ctx_t c = {.sig = sig};
	/* Keep relu inputs away from the kink at 0 by more than h. */
	for (int i = 0; i < AL; i++) {
		float v = 3.0f * sym();
		c.x[i] = fabsf(v) < 0.05f ? 0.5f : v;
	}
	float y[AL], r[AL], dx[AL], out[AL];
	fill(r, AL);
	act_fwd(&c, y);
	if (sig)
		st_sigmoid_backward(AL, y, r, dx);
	else
		st_relu_backward(AL, y, r, dx);
	check_grad(sig ? "sigmoid" : "relu", act_fwd, &c, c.x, AL, dx, out, AL, r);
}

static void test_nn_relu_gradient(void **state)
{
	(void)state;
	check_act_grad(0);
}

static void test_nn_sigmoid_gradient(void **state)
{
	(void)state;
	check_act_grad(1);
}

static void test_nn_activations_exact_and_in_place(void **state)
{
	(void)state;
	float x[6] = {-2.0f, 0.0f, 3.0f, -100.0f, 100.0f, 1.0f};
	float y[6];
	st_relu_forward(6, x, y);
	const float relu_want[6] = {0, 0, 3, 0, 100, 1};
	assert_memory_equal(y, relu_want, sizeof y);
	st_sigmoid_forward(6, x, y);
	assert_true(y[1] == 0.5f);
	assert_near(y[0], 1.0 / (1.0 + exp(2.0)), 1e-7);
	assert_near(y[5], 1.0 / (1.0 + exp(-1.0)), 1e-7);
	/* Extremes saturate without NaN or overflow, and σ(-100) stays > 0. */
	assert_true(y[3] > 0.0f && y[3] < 1e-40f);
	assert_true(y[4] == 1.0f);
	/* In place gives the same values as out of place. */
	float z[6];
	memcpy(z, x, sizeof z);
	st_sigmoid_forward(6, z, z);
	assert_memory_equal(z, y, sizeof z);
	memcpy(z, x, sizeof z);
	st_relu_forward(6, z, z);
	assert_memory_equal(z, relu_want, sizeof z);
	/* Backward from the output: relu passes dy where y > 0. */
	float dy[6] = {1, 2, 3, 4, 5, 6}, dx[6];
	st_relu_backward(6, relu_want, dy, dx);
	const float drelu[6] = {0, 0, 3, 0, 5, 6};
	assert_memory_equal(dx, drelu, sizeof dx);
}

/* ---- FM -------------------------------------------------------------------- */

enum { FN = 3, FF = 4, FD = 3 };

typedef struct {
	float E[FN * FF * FD];
} fm_ctx_t;

static void fm_fwd(void *ctx, float *out)
{
	fm_ctx_t *c = ctx;
	st_fm_forward(FN, FF, FD, c->E, out);
}

static void test_nn_fm_gradient(void **state)
{
	(void)state;
	fm_ctx_t c;
	fill(c.E, FN * FF * FD);
	float out[FN], r[FN], dE[FN * FF * FD];
	fill(r, FN);
	for (int i = 0; i < FN * FF * FD; i++)
		dE[i] = 123.0f;   /* overwritten */
	st_fm_backward(FN, FF, FD, c.E, r, dE);
	check_grad("fm", fm_fwd, &c, c.E, FN * FF * FD, dE, out, FN, r);
}

static void test_nn_fm_forward_exact(void **state)
{
	(void)state;
	/* 2 fields, d = 2: FM is the pairwise dot product e1·e2 = 3 + 8 = 11.
	 * Second example: 3 fields (1,0),(0,1),(1,1) with d = 2 is a different
	 * call; here e = (-1,2),(0.5,-3): -0.5 - 6 = -6.5. */
	const float E[8] = {1, 2, 3, 4, -1, 2, 0.5f, -3};
	float out[2];
	st_fm_forward(2, 2, 2, E, out);
	assert_true(out[0] == 11.0f);
	assert_true(out[1] == -6.5f);
	/* 3 fields: sum of the 3 pairwise dots: (1,0)·(0,1)=0, (1,0)·(1,1)=1,
	 * (0,1)·(1,1)=1 -> 2. */
	const float E3[6] = {1, 0, 0, 1, 1, 1};
	st_fm_forward(1, 3, 2, E3, out);
	assert_true(out[0] == 2.0f);
	/* Backward: dE[f] = dout * (Σ_g E[g] − E[f]) = dout * other field. */
	float dE[8];
	const float dout[2] = {2.0f, 1.0f};
	st_fm_backward(2, 2, 2, E, dout, dE);
	const float want[8] = {6, 8, 2, 4, 0.5f, -3, -1, 2};
	assert_memory_equal(dE, want, sizeof want);
}

/* A dimension larger than the FM stack chunk still sums every component. */
static void test_nn_fm_large_dim(void **state)
{
	(void)state;
	enum { D = 600 };
	static float E[2 * D], dE[2 * D];
	for (int k = 0; k < D; k++) {
		E[k] = 1.0f;
		E[D + k] = (float)(k % 3);
	}
	float out, dout = 1.0f;
	st_fm_forward(1, 2, D, E, &out);
	/* e1·e2 = Σ k%3 over 600 = 200 * (0+1+2) = 600. */
	assert_near(out, 600.0, 1e-3);
	st_fm_backward(1, 2, D, E, &dout, dE);
	for (int k = 0; k < D; k++) {
		assert_true(dE[k] == (float)(k % 3));
		assert_true(dE[D + k] == 1.0f);
	}
}

/* ---- dot interaction ------------------------------------------------------- */

enum { DN = 2, DF = 4, DD = 3, DP = DF * (DF - 1) / 2 };

typedef struct {
	float Z[DN * DF * DD];
} dot_ctx_t;

static void dot_fwd(void *ctx, float *out)
{
	dot_ctx_t *c = ctx;
	st_dot_forward(DN, DF, DD, c->Z, out);
}

static void test_nn_dot_gradient(void **state)
{
	(void)state;
	dot_ctx_t c;
	fill(c.Z, DN * DF * DD);
	float out[DN * DP], r[DN * DP], dZ[DN * DF * DD];
	fill(r, DN * DP);
	for (int i = 0; i < DN * DF * DD; i++)
		dZ[i] = 123.0f;   /* overwritten */
	st_dot_backward(DN, DF, DD, c.Z, r, dZ);
	check_grad("dot", dot_fwd, &c, c.Z, DN * DF * DD, dZ, out, DN * DP, r);
}

static void test_nn_dot_pair_order(void **state)
{
	(void)state;
	/* Z0=(1,2) Z1=(3,5) Z2=(7,11) Z3=(13,17); order (1,0),(2,0),(2,1),
	 * (3,0),(3,1),(3,2). */
	const float Z[8] = {1, 2, 3, 5, 7, 11, 13, 17};
	float out[6];
	st_dot_forward(1, 4, 2, Z, out);
	const float want[6] = {13, 29, 76, 47, 124, 278};
	assert_memory_equal(out, want, sizeof want);
	/* F = 1: no pairs, nothing written. */
	float none = 42.0f;
	st_dot_forward(1, 1, 2, Z, &none);
	assert_true(none == 42.0f);
}

/* ---- loss ------------------------------------------------------------------ */

enum { LL = 8 };

typedef struct {
	float z[LL], y[LL];
} loss_ctx_t;

static void loss_fwd(void *ctx, float *out)
{
	loss_ctx_t *c = ctx;
	/* Per-example losses, so the generic check can weight them. */
	for (int i = 0; i < LL; i++)
		out[i] = (float)st_logloss_forward_backward(1, &c->z[i], &c->y[i],
							    1.0f, NULL, NULL);
}

/* ---- DCNv2 cross layer ----------------------------------------------------
 * Y = X0 ⊙ (X Wᵀ + b) + X (low rank: W = U V) is bilinear in any single
 * coordinate of X0, X, W, U, V or b, so the central difference is exact up
 * to rounding, as for linear. */

enum { CN = 3, CD = 5, CR = 2 };

typedef struct cross_ctx {
	int r;
	float X0[CN * CD], X[CN * CD], W[CD * CD], V[CR * CD], U[CD * CR], b[CD];
	float T[CN * CD], Vt[CN * CR];
} cross_ctx_t;

static void cross_fwd(void *ctx, float *out)
{
	cross_ctx_t *c = ctx;
	st_cross_forward(CN, CD, c->r, c->X0, c->X, c->r ? c->V : c->W, c->U, c->b, c->T,
			 c->Vt, out);
}

static void cross_gradient(int r)
{
	cross_ctx_t c = { .r = r };
	fill(c.X0, CN * CD);
	fill(c.X, CN * CD);
	fill(c.W, CD * CD);
	fill(c.V, CR * CD);
	fill(c.U, CD * CR);
	fill(c.b, CD);
	float out[CN * CD], rr[CN * CD], dT[CN * CD], dVt[CN * CR], dX[CN * CD];
	float dX0[CN * CD], dW[CD * CD] = { 0 }, dV[CR * CD] = { 0 }, dU[CD * CR] = { 0 };
	float db[CD] = { 0 };
	fill(rr, CN * CD);
	cross_fwd(&c, out);
	for (int i = 0; i < CN * CD; i++) {
		dX[i] = 123.0f;   /* overwritten */
		dX0[i] = 1.0f;    /* accumulated */
	}
	st_cross_backward(CN, CD, r, c.X0, c.X, r ? c.V : c.W, c.U, c.T, c.Vt, rr, dT, dVt,
			  dX, dX0, r ? dV : dW, dU, db);
	for (int i = 0; i < CN * CD; i++)
		dX0[i] -= 1.0f;
	check_grad("cross dX", cross_fwd, &c, c.X, CN * CD, dX, out, CN * CD, rr);
	check_grad("cross dX0", cross_fwd, &c, c.X0, CN * CD, dX0, out, CN * CD, rr);
	check_grad("cross db", cross_fwd, &c, c.b, CD, db, out, CN * CD, rr);
	if (r) {
		check_grad("cross dV", cross_fwd, &c, c.V, CR * CD, dV, out, CN * CD, rr);
		check_grad("cross dU", cross_fwd, &c, c.U, CD * CR, dU, out, CN * CD, rr);
	} else {
		check_grad("cross dW", cross_fwd, &c, c.W, CD * CD, dW, out, CN * CD, rr);
	}
}

static void test_nn_cross_full_rank_gradient(void **state)
{
	(void)state;
	cross_gradient(0);
}

static void test_nn_cross_low_rank_gradient(void **state)
{
	(void)state;
	cross_gradient(CR);
}

/* The formula itself, written out for one example in double (the gradient
 * test alone would pass a consistently wrong forward). */
static void test_nn_cross_forward_exact(void **state)
{
	(void)state;
	cross_ctx_t c = { .r = 0 };
	fill(c.X0, CN * CD);
	fill(c.X, CN * CD);
	fill(c.W, CD * CD);
	fill(c.b, CD);
	float y[CN * CD];
	cross_fwd(&c, y);
	for (int i = 0; i < CN; i++)
		for (int o = 0; o < CD; o++) {
			double t = c.b[o];
			for (int k = 0; k < CD; k++)
				t += (double)c.W[o * CD + k] * c.X[i * CD + k];
			double want = c.X0[i * CD + o] * t + c.X[i * CD + o];
			assert_near(y[i * CD + o], want, 1e-5);
		}
	/* Low rank: T = (X Vᵀ) Uᵀ + b. */
	c.r = CR;
	fill(c.V, CR * CD);
	fill(c.U, CD * CR);
	cross_fwd(&c, y);
	for (int i = 0; i < CN; i++)
		for (int o = 0; o < CD; o++) {
			double t = c.b[o];
			for (int q = 0; q < CR; q++) {
				double v = 0;
				for (int k = 0; k < CD; k++)
					v += (double)c.V[q * CD + k] * c.X[i * CD + k];
				t += (double)c.U[o * CR + q] * v;
			}
			double want = c.X0[i * CD + o] * t + c.X[i * CD + o];
			assert_near(y[i * CD + o], want, 1e-5);
		}
}

static void test_nn_logloss_gradient(void **state)
{
	(void)state;
	loss_ctx_t c;
	for (int i = 0; i < LL; i++) {
		c.z[i] = 4.0f * sym();
		c.y[i] = i % 3 == 0 ? 1.0f : i % 3 == 1 ? 0.0f : 0.3f;  /* soft labels too */
	}
	/* dlogit with scale s is s × dloss/dz; use the same s for every
	 * example and the weights r = s. */
	const float scale = 0.25f;
	float r[LL], dz[LL], prob[LL], out[LL];
	for (int i = 0; i < LL; i++)
		r[i] = scale;
	double sum = st_logloss_forward_backward(LL, c.z, c.y, scale, prob, dz);
	check_grad("logloss", loss_fwd, &c, c.z, LL, dz, out, LL, r);
	double ref = 0.0;
	for (int i = 0; i < LL; i++) {
		double p = 1.0 / (1.0 + exp(-(double)c.z[i]));
		ref += -(c.y[i] * log(p) + (1.0 - c.y[i]) * log(1.0 - p));
		assert_near(prob[i], p, 1e-7);
	}
	assert_near(sum, ref, 1e-9);
}

static void test_nn_logloss_exact_and_stable(void **state)
{
	(void)state;
	const float z[5] = {0.0f, 0.0f, 100.0f, -100.0f, 100.0f};
	const float y[5] = {0.0f, 1.0f, 0.0f, 1.0f, 1.0f};
	float p[5], g[5];
	double s = st_logloss_forward_backward(5, z, y, 0.5f, p, g);
	/* log 2 + log 2 + 100 + 100 + log1p(e^-100) ≈ 200 + 2 log 2. */
	assert_true(isfinite(s));
	assert_near(s, 200.0 + 2.0 * log(2.0), 1e-9);
	assert_true(p[0] == 0.5f && p[2] == 1.0f && p[3] > 0.0f && p[3] < 1e-40f);
	assert_true(g[0] == 0.25f && g[1] == -0.25f);
	assert_true(g[2] == 0.5f && g[3] == -0.5f && g[4] == 0.0f);
	/* prob and dlogit are optional. */
	assert_near(st_logloss_forward_backward(2, z, y, 1.0f, NULL, NULL),
		    2.0 * log(2.0), 1e-12);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nn_pool_sum_gradient),
		cmocka_unit_test(test_nn_pool_mean_gradient),
		cmocka_unit_test(test_nn_pool_forward_exact),
		cmocka_unit_test(test_nn_pool_null_rows_read_as_zeros),
		cmocka_unit_test(test_nn_pool_mean_many_slots),
		cmocka_unit_test(test_nn_pool_per_slot_modes),
		cmocka_unit_test(test_nn_wide_gradient),
		cmocka_unit_test(test_nn_wide_forward_exact),
		cmocka_unit_test(test_nn_linear_gradient),
		cmocka_unit_test(test_nn_linear_matches_naive),
		cmocka_unit_test(test_nn_linear_strided_matches_packed),
		cmocka_unit_test(test_nn_linear_small_gemm_matches_sgemm),
		cmocka_unit_test(test_nn_relu_gradient),
		cmocka_unit_test(test_nn_sigmoid_gradient),
		cmocka_unit_test(test_nn_activations_exact_and_in_place),
		cmocka_unit_test(test_nn_fm_gradient),
		cmocka_unit_test(test_nn_fm_forward_exact),
		cmocka_unit_test(test_nn_fm_large_dim),
		cmocka_unit_test(test_nn_dot_gradient),
		cmocka_unit_test(test_nn_dot_pair_order),
		cmocka_unit_test(test_nn_cross_full_rank_gradient),
		cmocka_unit_test(test_nn_cross_low_rank_gradient),
		cmocka_unit_test(test_nn_cross_forward_exact),
		cmocka_unit_test(test_nn_logloss_gradient),
		cmocka_unit_test(test_nn_logloss_exact_and_stable),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
