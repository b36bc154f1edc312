/*
 * nn.c — the CPU reference layers of the CTR models (contract: nn.h).
 *
 * Every function is a pure computation over caller-owned row-major float
 * arrays: no allocation, no threads, no global state, so a worker thread can
 * call any of them on its own workspace without locks. The CUDA twins in
 * cuda/ are checked against these, so clarity wins over the last percent.
 *
 * Invariants and choices:
 *  - Linear layers go through OpenBLAS cblas_sgemm (the only place with real
 *    FLOPs); everything else is a plain loop whose innermost loop runs over
 *    the contiguous dimension so that the compiler can vectorize it.
 *  - Buffers that may alias (activations allow in-place) are not declared
 *    restrict; buffers the contract says are distinct are, so the compiler
 *    need not emit alias checks.
 *  - Per-example scratch (slot key counts, FM field sums) lives in fixed-size
 *    stack arrays processed in chunks, never on the heap, which keeps the
 *    "no allocation" promise for any number of slots or any dimension.
 *  - Rows that are NULL read as zeros in the forward pass; their gradients
 *    are still accumulated (the caller decides whether to apply them).
 */
#include "ops/nn/nn.h"
#include "ops/nn/smallgemm.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "runtime/simd.h"

/* The pooling loops and the fused ReLU/bias backward also exist compiled
 * for AVX2 by target attribute (the default build targets baseline x86-64)
 * and are chosen at run time by runtime/simd.h. They keep mul and add
 * separate (no FMA; this file builds with -ffp-contract=off) and every
 * output element sees the same additions in the same order as the plain
 * loops, so both give the same bits (tests/unit/test_nn_simd.c). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NN_AVX2 1
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))
#define AVX2_FN __attribute__((target("avx2")))
#else
#define NN_AVX2 0
#endif

/* ---- embedding pooling -------------------------------------------------- */

/* Slots are counted in windows of this many so the counts fit on the stack. */
#define POOL_WIN 512

/* Counts example keys [k0, k1) whose slot lies in [s0, s0 + POOL_WIN). */
static void count_slots(const uint16_t *key_slot, uint32_t k0, uint32_t k1,
			int s0, int *cnt)
{
	memset(cnt, 0, POOL_WIN * sizeof *cnt);
	for (uint32_t k = k0; k < k1; k++) {
		int s = (int)key_slot[k] - s0;
		if (s >= 0 && s < POOL_WIN)
			cnt[s]++;
	}
}

/* out[j] += a * x[j] for j < d: the inner loop of pooling, kept separate so
 * that restrict tells the compiler the row and the output never overlap. */
static inline void axpy(int d, float a, const float *restrict x, float *restrict y)
{
	for (int j = 0; j < d; j++)
		y[j] += a * x[j];
}

typedef void (*axpy_fn)(int d, float a, const float *restrict x, float *restrict y);

#if NN_AVX2
/* axpy 8 floats per instruction: y[j] + (a * x[j]) per lane, as the scalar
 * loop (a separate multiply and add, not an FMA). */
AVX2_INLINE void axpy_avx2(int d, float a, const float *restrict x, float *restrict y)
{
	const __m256 va = _mm256_set1_ps(a);
	int j = 0;
	for (; j + 8 <= d; j += 8)
		_mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_loadu_ps(y + j),
						      _mm256_mul_ps(va, _mm256_loadu_ps(x + j))));
	for (; j < d; j++)
		y[j] += a * x[j];
}
#endif

/* The pooling loops are written once, over an axpy: pool_*_body is inlined
 * into a plain entry (axpy) and an AVX2 entry (axpy_avx2), so the control
 * flow — key order, mean counts, NULL rows — is one text for both. */
static inline __attribute__((always_inline)) void
pool_forward_body(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
		  const uint32_t *row_off, const uint16_t *key_slot, const float *key_val,
		  const uint32_t *key_idx, float *const *rows, float *out, axpy_fn ax)
{
	int cnt[POOL_WIN];
	const int any_mean = st_pool_any_mean(L);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k0 = row_off[r0 + i], k1 = row_off[r0 + i + 1];
		float *o = out + (size_t)i * (size_t)L->width;
		memset(o, 0, (size_t)L->width * sizeof *o);
		for (uint32_t k = k0; k < k1; k++) {
			int s = key_slot[k];
			assert(s < L->n_slots);
			const float *row = rows[key_idx[k]];
			if (row)
				ax(L->dim[s], key_val[k], row, o + L->off[s]);
		}
		if (!any_mean)
			continue;
		/* Mean: divide each mean slot's sum by its key count (a slot
		 * with no keys stays zero, as its sum is zero). */
		for (int s0 = 0; s0 < L->n_slots; s0 += POOL_WIN) {
			count_slots(key_slot, k0, k1, s0, cnt);
			int s1 = L->n_slots - s0 < POOL_WIN ? L->n_slots : s0 + POOL_WIN;
			for (int s = s0; s < s1; s++) {
				if (cnt[s - s0] <= 1 || !st_pool_is_mean(L, s))
					continue;
				float inv = 1.0f / (float)cnt[s - s0];
				float *os = o + L->off[s];
				for (int j = 0; j < L->dim[s]; j++)
					os[j] *= inv;
			}
		}
	}
}

static inline __attribute__((always_inline)) void
pool_backward_body(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
		   const uint32_t *row_off, const uint16_t *key_slot, const float *key_val,
		   const uint32_t *key_idx, const float *dout, float *gu, int gstride,
		   axpy_fn ax)
{
	int cnt[POOL_WIN];
	const int any_mean = st_pool_any_mean(L);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k0 = row_off[r0 + i], k1 = row_off[r0 + i + 1];
		const float *d = dout + (size_t)i * (size_t)L->width;
		if (!any_mean) {
			for (uint32_t k = k0; k < k1; k++) {
				int s = key_slot[k];
				assert(s < L->n_slots);
				ax(L->dim[s], key_val[k], d + L->off[s],
				   gu + (size_t)key_idx[k] * (size_t)gstride);
			}
			continue;
		}
		/* Mean: each key of a mean slot s gets val/count(s) of the
		 * slot's gradient, a key of a sum slot val; keys are visited
		 * once per window of slots. */
		for (int s0 = 0; s0 < L->n_slots; s0 += POOL_WIN) {
			count_slots(key_slot, k0, k1, s0, cnt);
			for (uint32_t k = k0; k < k1; k++) {
				int s = key_slot[k];
				assert(s < L->n_slots);
				if (s < s0 || s >= s0 + POOL_WIN)
					continue;
				float a = st_pool_is_mean(L, s) ? key_val[k] / (float)cnt[s - s0]
								 : key_val[k];
				ax(L->dim[s], a, d + L->off[s],
				   gu + (size_t)key_idx[k] * (size_t)gstride);
			}
		}
	}
}

void st_pool_forward_ref(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
			 const uint32_t *row_off, const uint16_t *key_slot,
			 const float *key_val, const uint32_t *key_idx,
			 float *const *rows, float *out)
{
	pool_forward_body(L, r0, n, row_off, key_slot, key_val, key_idx, rows, out, axpy);
}

void st_pool_backward_ref(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
			  const uint32_t *row_off, const uint16_t *key_slot,
			  const float *key_val, const uint32_t *key_idx,
			  const float *dout, float *gu, int gstride)
{
	pool_backward_body(L, r0, n, row_off, key_slot, key_val, key_idx, dout, gu, gstride,
			   axpy);
}

#if NN_AVX2
AVX2_FN static void pool_forward_avx2(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
				      const uint32_t *row_off, const uint16_t *key_slot,
				      const float *key_val, const uint32_t *key_idx,
				      float *const *rows, float *out)
{
	pool_forward_body(L, r0, n, row_off, key_slot, key_val, key_idx, rows, out, axpy_avx2);
}

AVX2_FN static void pool_backward_avx2(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
				       const uint32_t *row_off, const uint16_t *key_slot,
				       const float *key_val, const uint32_t *key_idx,
				       const float *dout, float *gu, int gstride)
{
	pool_backward_body(L, r0, n, row_off, key_slot, key_val, key_idx, dout, gu, gstride,
			   axpy_avx2);
}
#endif

void st_pool_forward(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
		     const uint32_t *row_off, const uint16_t *key_slot,
		     const float *key_val, const uint32_t *key_idx,
		     float *const *rows, float *out)
{
#if NN_AVX2
	if (st_simd_avx2()) {
		pool_forward_avx2(L, r0, n, row_off, key_slot, key_val, key_idx, rows, out);
		return;
	}
#endif
	st_pool_forward_ref(L, r0, n, row_off, key_slot, key_val, key_idx, rows, out);
}

void st_pool_backward(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
		      const uint32_t *row_off, const uint16_t *key_slot,
		      const float *key_val, const uint32_t *key_idx,
		      const float *dout, float *gu, int gstride)
{
#if NN_AVX2
	if (st_simd_avx2()) {
		pool_backward_avx2(L, r0, n, row_off, key_slot, key_val, key_idx, dout, gu,
				   gstride);
		return;
	}
#endif
	st_pool_backward_ref(L, r0, n, row_off, key_slot, key_val, key_idx, dout, gu, gstride);
}

/* ---- wide ----------------------------------------------------------------- */

void st_wide_forward(uint32_t r0, uint32_t n, const uint32_t *row_off,
		     const float *key_val, const uint32_t *key_idx,
		     float *const *rows, int col, float *out)
{
	for (uint32_t i = 0; i < n; i++) {
		float acc = 0.0f;
		for (uint32_t k = row_off[r0 + i]; k < row_off[r0 + i + 1]; k++) {
			const float *row = rows[key_idx[k]];
			if (row)
				acc += key_val[k] * row[col];
		}
		out[i] = acc;
	}
}

void st_wide_backward(uint32_t r0, uint32_t n, const uint32_t *row_off,
		      const float *key_val, const uint32_t *key_idx,
		      const float *dout, float *gu, int gstride, int col)
{
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t k = row_off[r0 + i]; k < row_off[r0 + i + 1]; k++)
			gu[(size_t)key_idx[k] * (size_t)gstride + (size_t)col] +=
				dout[i] * key_val[k];
}

/* ---- linear ----------------------------------------------------------------
 * Row-major sgemm shapes (M × N, inner K):
 *   forward   Y  [n × out] = X [n × in]  · Wᵀ,  K = in   (NoTrans, Trans)
 *   dX        dX [n × in]  = dY[n × out] · W,   K = out  (NoTrans, NoTrans)
 *   dW        dW [out × in] += dYᵀ · X,         K = n    (Trans, NoTrans)
 * The forward and dX of narrow maps go to libxsmm first (smallgemm.h),
 * which declines the rest. OpenBLAS rejects a leading dimension of 0, so
 * empty shapes return early. */

void st_linear_forward_ld(int n, int in, int out, const float *X, int ldx, const float *W,
			  const float *b, float *restrict Y, int ldy)
{
	if (n <= 0 || out <= 0)
		return;
	if (in <= 0) {
		for (int i = 0; i < n; i++)
			for (int o = 0; o < out; o++)
				Y[(size_t)i * ldy + o] = b ? b[o] : 0.0f;
		return;
	}
	/* Seed Y with the bias, then let sgemm accumulate (beta = 1): one pass
	 * over Y instead of a separate bias pass after the product. */
	if (b) {
		for (int i = 0; i < n; i++)
			memcpy(Y + (size_t)i * ldy, b, (size_t)out * sizeof *Y);
	}
	if (!st_smallgemm_forward(n, in, out, X, ldx, W, b ? 1.0f : 0.0f, Y, ldy))
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in,
			    1.0f, X, ldx, W, in, b ? 1.0f : 0.0f, Y, ldy);
}

void st_linear_forward(int n, int in, int out, const float *X, const float *W,
		       const float *b, float *Y)
{
	st_linear_forward_ld(n, in, out, X, in, W, b, Y, out);
}

void st_linear_backward_ld(int n, int in, int out, const float *X, int ldx, const float *W,
			   const float *dY, int lddy, float *dX, int lddx, float *dW,
			   float *restrict db)
{
	if (n <= 0 || out <= 0)
		return;
	if (in > 0) {
		if (dX && !st_smallgemm_backward_dx(n, in, out, dY, lddy, W, dX, lddx))
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out,
				    1.0f, dY, lddy, W, in, 0.0f, dX, lddx);
		if (dW)
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n,
				    1.0f, dY, lddy, X, ldx, 1.0f, dW, in);
	}
	if (db) {
		for (int i = 0; i < n; i++) {
			const float *restrict d = dY + (size_t)i * lddy;
			for (int o = 0; o < out; o++)
				db[o] += d[o];
		}
	}
}

void st_linear_backward(int n, int in, int out, const float *X, const float *W,
			const float *dY, float *dX, float *dW, float *db)
{
	st_linear_backward_ld(n, in, out, X, in, W, dY, out, dX, in, dW, db);
}

/* ---- activations -----------------------------------------------------------
 * No restrict: the contract allows x == y (in place). Same-index elementwise
 * loops still vectorize; the compiler adds a cheap overlap check. */

void st_relu_forward(size_t len, const float *x, float *y)
{
	for (size_t i = 0; i < len; i++)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void st_relu_backward_ref(size_t len, const float *y, const float *dy, float *dx)
{
	for (size_t i = 0; i < len; i++)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

#if NN_AVX2
/* Ordered >: a NaN y masks to 0, as y > 0.0f does; and-ing with the mask
 * leaves dy's bits or +0.0, the reference's two results. */
AVX2_FN static void relu_backward_avx2(size_t len, const float *y, const float *dy,
				       float *dx)
{
	const __m256 zero = _mm256_setzero_ps();
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		__m256 m = _mm256_cmp_ps(_mm256_loadu_ps(y + i), zero, _CMP_GT_OQ);
		_mm256_storeu_ps(dx + i, _mm256_and_ps(m, _mm256_loadu_ps(dy + i)));
	}
	for (; i < len; i++)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
#endif

void st_relu_backward(size_t len, const float *y, const float *dy, float *dx)
{
#if NN_AVX2
	if (st_simd_avx2()) {
		relu_backward_avx2(len, y, dy, dx);
		return;
	}
#endif
	st_relu_backward_ref(len, y, dy, dx);
}

void st_act_forward(int act, size_t len, float *y)
{
	if (act == ST_ACT_RELU)
		st_relu_forward(len, y, y);
	else if (act == ST_ACT_SIGMOID)
		st_sigmoid_forward(len, y, y);
}

void st_act_backward(int act, size_t len, const float *y, float *dy)
{
	if (act == ST_ACT_RELU)
		st_relu_backward(len, y, dy, dy);
	else if (act == ST_ACT_SIGMOID)
		st_sigmoid_backward(len, y, dy, dy);
}

float *st_act_bias_backward(int act, int n, int out, const float *Y, float *dY, float *db)
{
	if (act == ST_ACT_RELU) {
		st_relu_bias_backward(n, out, Y, dY, db);
		return NULL;
	}
	st_act_backward(act, (size_t)n * (size_t)out, Y, dY);
	return db;
}

/* The reference: ReLU's backward pass, then the bias gradient's pass over
 * the masked dY, exactly as st_relu_backward + st_linear_backward do. */
void st_relu_bias_backward_ref(int n, int out, const float *Y, float *dY,
			       float *restrict db)
{
	if (n <= 0 || out <= 0)
		return;
	st_relu_backward_ref((size_t)n * (size_t)out, Y, dY, dY);
	if (db) {
		for (int i = 0; i < n; i++) {
			const float *restrict d = dY + (size_t)i * out;
			for (int o = 0; o < out; o++)
				db[o] += d[o];
		}
	}
}

#if NN_AVX2
/* One pass: each 8-wide block of a row of dY is masked and added to db
 * while it is in a register; db[o] still gets rows 0, 1, ..., n-1 in that
 * order, and a masked-out element adds +0.0 as in the reference. */
AVX2_FN static void relu_bias_backward_avx2(int n, int out, const float *Y, float *dY,
					    float *restrict db)
{
	const __m256 zero = _mm256_setzero_ps();
	for (int i = 0; i < n; i++) {
		const float *y = Y + (size_t)i * out;
		float *d = dY + (size_t)i * out;
		int o = 0;
		for (; o + 8 <= out; o += 8) {
			/* Ordered >: a NaN y masks to 0, as y > 0.0f does. */
			__m256 m = _mm256_cmp_ps(_mm256_loadu_ps(y + o), zero, _CMP_GT_OQ);
			__m256 v = _mm256_and_ps(m, _mm256_loadu_ps(d + o));
			_mm256_storeu_ps(d + o, v);
			if (db)
				_mm256_storeu_ps(db + o, _mm256_add_ps(_mm256_loadu_ps(db + o), v));
		}
		for (; o < out; o++) {
			float v = y[o] > 0.0f ? d[o] : 0.0f;
			d[o] = v;
			if (db)
				db[o] += v;
		}
	}
}
#endif

void st_relu_bias_backward(int n, int out, const float *Y, float *dY, float *db)
{
	if (n <= 0 || out <= 0)
		return;
#if NN_AVX2
	if (st_simd_avx2()) {
		relu_bias_backward_avx2(n, out, Y, dY, db);
		return;
	}
#endif
	st_relu_bias_backward_ref(n, out, Y, dY, db);
}

void st_sigmoid_forward(size_t len, const float *x, float *y)
{
	/* exp of a non-positive number never overflows: σ(x) = 1/(1+e) for
	 * x >= 0 and e/(1+e) for x < 0, with e = exp(-|x|). */
	for (size_t i = 0; i < len; i++) {
		float e = expf(-fabsf(x[i]));
		float r = 1.0f / (1.0f + e);
		y[i] = x[i] >= 0.0f ? r : e * r;
	}
}

void st_sigmoid_backward(size_t len, const float *y, const float *dy, float *dx)
{
	for (size_t i = 0; i < len; i++)
		dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

/* ---- FM -------------------------------------------------------------------
 * The field sum Σ_f E[i,f,k] is built in stack chunks of FM_CHUNK of the d
 * components, so the inner loops run over contiguous k. */

#define FM_CHUNK 256

void st_fm_forward(int n, int F, int d, const float *restrict E, float *restrict out)
{
	float s[FM_CHUNK], q[FM_CHUNK];
	for (int i = 0; i < n; i++) {
		const float *e = E + (size_t)i * F * d;
		float acc = 0.0f;
		for (int k0 = 0; k0 < d; k0 += FM_CHUNK) {
			int m = d - k0 < FM_CHUNK ? d - k0 : FM_CHUNK;
			memset(s, 0, (size_t)m * sizeof *s);
			memset(q, 0, (size_t)m * sizeof *q);
			for (int f = 0; f < F; f++) {
				const float *ef = e + (size_t)f * d + k0;
				for (int k = 0; k < m; k++) {
					s[k] += ef[k];
					q[k] += ef[k] * ef[k];
				}
			}
			for (int k = 0; k < m; k++)
				acc += s[k] * s[k] - q[k];
		}
		out[i] = 0.5f * acc;
	}
}

void st_fm_backward(int n, int F, int d, const float *restrict E,
		    const float *restrict dout, float *restrict dE)
{
	float s[FM_CHUNK];
	for (int i = 0; i < n; i++) {
		const float *e = E + (size_t)i * F * d;
		float *de = dE + (size_t)i * F * d;
		float g = dout[i];
		for (int k0 = 0; k0 < d; k0 += FM_CHUNK) {
			int m = d - k0 < FM_CHUNK ? d - k0 : FM_CHUNK;
			memset(s, 0, (size_t)m * sizeof *s);
			for (int f = 0; f < F; f++) {
				const float *ef = e + (size_t)f * d + k0;
				for (int k = 0; k < m; k++)
					s[k] += ef[k];
			}
			for (int f = 0; f < F; f++) {
				const float *ef = e + (size_t)f * d + k0;
				float *def = de + (size_t)f * d + k0;
				for (int k = 0; k < m; k++)
					def[k] = g * (s[k] - ef[k]);
			}
		}
	}
}

/* ---- DLRM dot interaction ------------------------------------------------- */

static inline float dotf(int d, const float *restrict a, const float *restrict b)
{
	float acc = 0.0f;
	for (int k = 0; k < d; k++)
		acc += a[k] * b[k];
	return acc;
}

void st_dot_forward(int n, int F, int d, const float *restrict Z, float *restrict out)
{
	size_t np = (size_t)F * (size_t)(F - 1) / 2;
	for (int i = 0; i < n; i++) {
		const float *z = Z + (size_t)i * F * d;
		float *o = out + (size_t)i * np;
		size_t p = 0;
		for (int a = 1; a < F; a++)
			for (int b = 0; b < a; b++)
				o[p++] = dotf(d, z + (size_t)a * d, z + (size_t)b * d);
	}
}

void st_dot_backward(int n, int F, int d, const float *restrict Z,
		     const float *restrict dout, float *restrict dZ)
{
	size_t np = (size_t)F * (size_t)(F - 1) / 2;
	for (int i = 0; i < n; i++) {
		const float *z = Z + (size_t)i * F * d;
		const float *g = dout + (size_t)i * np;
		float *dz = dZ + (size_t)i * F * d;
		memset(dz, 0, (size_t)F * d * sizeof *dz);
		size_t p = 0;
		for (int a = 1; a < F; a++)
			for (int b = 0; b < a; b++, p++) {
				/* ∂(z_a·z_b)/∂z_a = z_b and vice versa. */
				axpy(d, g[p], z + (size_t)b * d, dz + (size_t)a * d);
				axpy(d, g[p], z + (size_t)a * d, dz + (size_t)b * d);
			}
	}
}

/* ---- DCNv2 cross layer (Wang et al. 2020, §3) -----------------------------
 * The products go through st_linear_*; the element-wise parts of a layer
 * (x0 ⊙ t + x forward; dY ⊙ X0 and dY ⊙ T backward) are fused into one pass
 * over the rows each, because at CTR widths (a few hundred) they are memory
 * bound and a separate pass per operation would read the arrays 2-3 times. */

void st_cross_forward(int n, int d, int r, const float *restrict X0, const float *X,
		      const float *W, const float *U, const float *b, float *restrict T,
		      float *Vt, float *Y)
{
	if (r > 0) {
		st_linear_forward(n, d, r, X, W, NULL, Vt);
		st_linear_forward(n, r, d, Vt, U, b, T);
	} else {
		st_linear_forward(n, d, d, X, W, b, T);
	}
	/* Y may not alias X (X is read after Y's row is written only row by
	 * row, but the contract keeps them distinct to stay simple). */
	for (size_t j = 0; j < (size_t)n * (size_t)d; j++)
		Y[j] = X0[j] * T[j] + X[j];
}

void st_cross_backward(int n, int d, int r, const float *restrict X0, const float *X,
		       const float *W, const float *U, const float *restrict T,
		       const float *Vt, const float *restrict dY, float *restrict dT,
		       float *dVt, float *dX, float *restrict dX0, float *dW, float *dU,
		       float *db)
{
	const size_t len = (size_t)n * (size_t)d;
	if (dX0) {
		for (size_t j = 0; j < len; j++) {
			dT[j] = dY[j] * X0[j];
			dX0[j] += dY[j] * T[j];
		}
	} else {
		for (size_t j = 0; j < len; j++)
			dT[j] = dY[j] * X0[j];
	}
	if (r > 0) {
		st_linear_backward(n, r, d, Vt, U, dT, dVt, dU, db);
		st_linear_backward(n, d, r, X, W, dVt, dX, dW, NULL);
	} else {
		st_linear_backward(n, d, d, X, W, dT, dX, dW, db);
	}
	if (dX)
		for (size_t j = 0; j < len; j++)
			dX[j] += dY[j];
}

/* ---- loss ------------------------------------------------------------------
 * loss(z, y) = −y log σ(z) − (1−y) log(1−σ(z)) = max(z,0) − z y + log1p(e^{−|z|}),
 * which never overflows and keeps full precision for large |z|. Computed in
 * double because the sum over a minibatch is what callers report. */

double st_logloss_forward_backward(int n, const float *logit, const float *label,
				   float scale, float *prob, float *dlogit)
{
	double sum = 0.0;
	for (int i = 0; i < n; i++) {
		double z = logit[i], y = label[i];
		double e = exp(-fabs(z));
		sum += (z > 0.0 ? z : 0.0) - z * y + log1p(e);
		double p = z >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
		if (prob)
			prob[i] = (float)p;
		if (dlogit)
			dlogit[i] = (float)((p - y) * (double)scale);
	}
	return sum;
}
