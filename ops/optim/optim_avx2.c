/*
 * optim_avx2.c — the update rules of optim.c, 8 coordinates at a time with
 * AVX2 (contract: optim.h st_optim_update; reference: optim.c's loops).
 *
 * Why a second copy: the default build targets baseline x86-64, so optim.c's
 * loops compile to 4-wide SSE; these are compiled for AVX2 by attribute and
 * st_optim_update picks them at run time (runtime/simd.h).
 *
 * Same bits as the reference, by construction: every coordinate goes
 * through the reference's operations in the reference's order — no FMA
 * (the target is "avx2", not "fma", and meson compiles this file with
 * -ffp-contract=off), and add, sub, mul, div and sqrt are correctly
 * rounded in IEEE, so a lane computes what the scalar code computes. The
 * tail (len % 8) is the reference's scalar formula. Rowwise AdaGrad's sum
 * of squares is a sequential double sum whose order matters; it stays the
 * shared scalar loop (st__optim_row_sq) and only the update is vectorized.
 * tests/unit/test_optim_simd.c pins all of it bit for bit.
 *
 * No allocation, no state; the caller owns w, state, g for the call.
 */
#include "ops/optim/optim_internal.h"

#if ST_OPTIM_AVX2

#include <assert.h>
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

AVX2 static void sgd(const st_optim_t *o, float *restrict w, const float *restrict g,
		     size_t len)
{
	const float lr = o->lr, l2 = o->l2;
	const __m256 vlr = _mm256_set1_ps(lr), vl2 = _mm256_set1_ps(l2);
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		__m256 vw = _mm256_loadu_ps(w + i);
		__m256 gi = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(vl2, vw));
		_mm256_storeu_ps(w + i, _mm256_sub_ps(vw, _mm256_mul_ps(vlr, gi)));
	}
	for (; i < len; i++)
		w[i] -= lr * (g[i] + l2 * w[i]);
}

AVX2 static void adagrad(const st_optim_t *o, float *restrict w, float *restrict acc,
			 const float *restrict g, size_t len)
{
	const float lr = o->lr, l2 = o->l2, eps = o->eps;
	const __m256 vlr = _mm256_set1_ps(lr), vl2 = _mm256_set1_ps(l2),
		     veps = _mm256_set1_ps(eps);
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		__m256 vw = _mm256_loadu_ps(w + i);
		__m256 gi = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(vl2, vw));
		__m256 va = _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(gi, gi));
		_mm256_storeu_ps(acc + i, va);
		__m256 den = _mm256_add_ps(_mm256_sqrt_ps(va), veps);
		__m256 up = _mm256_div_ps(_mm256_mul_ps(vlr, gi), den);
		_mm256_storeu_ps(w + i, _mm256_sub_ps(vw, up));
	}
	for (; i < len; i++) {
		float gi = g[i] + l2 * w[i];
		acc[i] += gi * gi;
		w[i] -= lr * gi / (sqrtf(acc[i]) + eps);
	}
}

AVX2 static void adagrad_row(const st_optim_t *o, float *restrict w, float *restrict acc,
			     const float *restrict g, size_t len)
{
	const float lr = o->lr, l2 = o->l2, eps = o->eps;
	if (len == 0)
		return;
	*acc += (float)(st__optim_row_sq(l2, w, g, len) / (double)len);
	const float step = lr / (sqrtf(*acc) + eps);
	const __m256 vstep = _mm256_set1_ps(step), vl2 = _mm256_set1_ps(l2);
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		__m256 vw = _mm256_loadu_ps(w + i);
		__m256 gi = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(vl2, vw));
		_mm256_storeu_ps(w + i, _mm256_sub_ps(vw, _mm256_mul_ps(vstep, gi)));
	}
	for (; i < len; i++)
		w[i] -= step * (g[i] + l2 * w[i]);
}

AVX2 static void adam(const st_optim_t *o, float *restrict w, float *restrict m,
		      float *restrict v, const float *restrict g, size_t len, uint64_t t)
{
	assert(t >= 1);
	const float b1 = o->beta1, b2 = o->beta2, l2 = o->l2, eps = o->eps;
	float step, inv_sqrt_bc2;
	st__optim_adam_consts(o, t, &step, &inv_sqrt_bc2);
	const __m256 vb1 = _mm256_set1_ps(b1), vc1 = _mm256_set1_ps(1.0f - b1),
		     vb2 = _mm256_set1_ps(b2), vc2 = _mm256_set1_ps(1.0f - b2),
		     vl2 = _mm256_set1_ps(l2), veps = _mm256_set1_ps(eps),
		     vstep = _mm256_set1_ps(step), vinv = _mm256_set1_ps(inv_sqrt_bc2);
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		__m256 vw = _mm256_loadu_ps(w + i);
		__m256 gi = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_mul_ps(vl2, vw));
		__m256 vm = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)),
					  _mm256_mul_ps(vc1, gi));
		/* (1 - b2) * gi * gi is ((1 - b2) * gi) * gi, left to right. */
		__m256 vv = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)),
					  _mm256_mul_ps(_mm256_mul_ps(vc2, gi), gi));
		_mm256_storeu_ps(m + i, vm);
		_mm256_storeu_ps(v + i, vv);
		__m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vv), vinv), veps);
		__m256 up = _mm256_div_ps(_mm256_mul_ps(vstep, vm), den);
		_mm256_storeu_ps(w + i, _mm256_sub_ps(vw, up));
	}
	for (; i < len; i++) {
		float gi = g[i] + l2 * w[i];
		m[i] = b1 * m[i] + (1.0f - b1) * gi;
		v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
		w[i] -= step * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
	}
}

AVX2 static void ftrl(const st_optim_t *o, float *restrict w, float *restrict z,
		      float *restrict nacc, const float *restrict g, size_t len)
{
	const float lr = o->lr, l1 = o->l1, l2 = o->l2, beta = o->beta;
	const __m256 vlr = _mm256_set1_ps(lr), vl1 = _mm256_set1_ps(l1),
		     vl2 = _mm256_set1_ps(l2), vbeta = _mm256_set1_ps(beta),
		     sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
	/* copysignf(l1, z): |l1| with z's sign bit. */
	const __m256 l1abs = _mm256_andnot_ps(sign, vl1);
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		__m256 gi = _mm256_loadu_ps(g + i), vw = _mm256_loadu_ps(w + i);
		__m256 vn = _mm256_loadu_ps(nacc + i);
		__m256 n_new = _mm256_add_ps(vn, _mm256_mul_ps(gi, gi));
		__m256 sq_new = _mm256_sqrt_ps(n_new);
		__m256 sigma = _mm256_div_ps(_mm256_sub_ps(sq_new, _mm256_sqrt_ps(vn)), vlr);
		__m256 vz = _mm256_add_ps(_mm256_loadu_ps(z + i),
					  _mm256_sub_ps(gi, _mm256_mul_ps(sigma, vw)));
		_mm256_storeu_ps(z + i, vz);
		_mm256_storeu_ps(nacc + i, n_new);
		__m256 az = _mm256_andnot_ps(sign, vz);
		__m256 cs = _mm256_or_ps(_mm256_and_ps(sign, vz), l1abs);
		/* -(x) / y: negation is a sign flip, exact. */
		__m256 num = _mm256_xor_ps(sign, _mm256_sub_ps(vz, cs));
		__m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_add_ps(vbeta, sq_new), vlr), vl2);
		__m256 nw = _mm256_div_ps(num, den);
		/* Ordered <=: a NaN z compares false, as in the scalar code. */
		__m256 thr = _mm256_cmp_ps(az, vl1, _CMP_LE_OQ);
		_mm256_storeu_ps(w + i, _mm256_blendv_ps(nw, zero, thr));
	}
	for (; i < len; i++) {
		float gi = g[i];
		float n_new = nacc[i] + gi * gi;
		float sigma = (sqrtf(n_new) - sqrtf(nacc[i])) / lr;
		z[i] += gi - sigma * w[i];
		nacc[i] = n_new;
		float az = fabsf(z[i]);
		w[i] = az <= l1 ? 0.0f
			: -(z[i] - copysignf(l1, z[i])) / ((beta + sqrtf(n_new)) / lr + l2);
	}
}

void st__optim_update_avx2(const st_optim_t *o, float *w, float *state, const float *g,
			   size_t len, uint64_t t)
{
	switch (o->kind) {
	case ST_OPT_SGD:
		sgd(o, w, g, len);
		return;
	case ST_OPT_ADAGRAD:
		adagrad(o, w, state, g, len);
		return;
	case ST_OPT_ADAGRAD_ROW:
		adagrad_row(o, w, state, g, len);
		return;
	case ST_OPT_ADAM:
		adam(o, w, state, state + len, g, len, t);
		return;
	case ST_OPT_FTRL:
		ftrl(o, w, state, state + len, g, len);
		return;
	}
	assert(!"unknown optimizer kind");
}

#endif
