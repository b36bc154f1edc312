/*
 * blend.c — ShadowSync's EASGD, MA and BMUF updates (blend.h). Replicas
 * are read and written with relaxed atomics, element by element, since
 * Hogwild workers write them at the same time (blend.h, "Memory").
 *
 * Threads: none; the caller serializes calls on its own arrays.
 */
#include "ops/algo/blend.h"

static inline float ld(const float *p)
{
	float v;
	__atomic_load(p, &v, __ATOMIC_RELAXED);
	return v;
}

static inline void sto(float *p, float v)
{
	__atomic_store(p, &v, __ATOMIC_RELAXED);
}

void st_algo_blend_ps(float *ps, const float *x, size_t n, float alpha)
{
	const float a = alpha, b = 1.0f - alpha;
	for (size_t j = 0; j < n; j++)
		ps[j] = b * ps[j] + a * ld(&x[j]);
}

void st_algo_blend_toward(float *w, const float *c, float scale, size_t n, float alpha)
{
	const float a = alpha, b = 1.0f - alpha;
	for (size_t j = 0; j < n; j++)
		sto(&w[j], b * ld(&w[j]) + a * (c[j] * scale));
}

void st_algo_blend_bmuf_step(float *glob, const float *c, float scale, size_t n, float eta)
{
	for (size_t j = 0; j < n; j++)
		glob[j] += eta * (c[j] * scale - glob[j]);
}

void st_algo_blend_mean(float *out, float *const *reps, int n_reps, size_t n)
{
	const float inv = 1.0f / (float)n_reps;
	for (size_t j = 0; j < n; j++) {
		float sum = 0.0f;
		for (int i = 0; i < n_reps; i++)
			sum += ld(&reps[i][j]);
		out[j] = sum * inv;
	}
}
