/*
 * optim_internal.h — what optim.c (the references) and optim_avx2.c (the
 * AVX2 loops) share so that both give the same bits: Adam's per-call
 * constants and the entry of the AVX2 loops. Not for other modules.
 */
#ifndef ST_OPTIM_INTERNAL_H
#define ST_OPTIM_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/optim/optim.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define ST_OPTIM_AVX2 1
#else
#define ST_OPTIM_AVX2 0
#endif

/* Adam's step lr / bc1 and 1 / sqrt(bc2), the bias corrections
 * bc = 1 - beta^t taken in double (beta2^t for large t loses most of its
 * digits in float), rounded to float once per call. */
static inline void st__optim_adam_consts(const st_optim_t *o, uint64_t t, float *step,
					 float *inv_sqrt_bc2)
{
	const double bc1 = 1.0 - pow((double)o->beta1, (double)t);
	const double bc2 = 1.0 - pow((double)o->beta2, (double)t);
	*step = (float)((double)o->lr / bc1);
	*inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
}

/* The mean of g'² over a row for rowwise AdaGrad, in double and in index
 * order (each term is exact in double; the sum's order is part of the
 * result, so both paths use this one loop). */
static inline double st__optim_row_sq(float l2, const float *w, const float *g, size_t len)
{
	double sq = 0.0;
	for (size_t i = 0; i < len; i++) {
		double gi = (double)(g[i] + l2 * w[i]);
		sq += gi * gi;
	}
	return sq;
}

#if ST_OPTIM_AVX2
/* st_optim_update's contract, 8 coordinates per instruction; only called
 * when st_simd_avx2() says the CPU has AVX2. Same bits as
 * st_optim_update_ref. */
void st__optim_update_avx2(const st_optim_t *o, float *w, float *state, const float *g,
			   size_t len, uint64_t t);
#endif

#endif
