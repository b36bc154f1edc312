/*
 * cross.c — the latents of strata gen's planted cross terms (cross.h). Pure
 * functions of a value's hash, salted apart from the first-order weight
 * (gen.c's weight0) so the two are independent.
 */
#include "ops/gen/cross.h"

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

double st__gen_cross_latent(uint64_t h)
{
	uint64_t b = mix64(h ^ UINT64_C(0x63726f7373 /* "cross" */));
	/* Irwin-Hall of four 16-bit uniforms, as gen.c's normal_from_bits:
	 * mean 0, variance 1, tails cut at +-3.46. */
	double s = (double)(b & 0xffff) + (double)((b >> 16) & 0xffff) +
		   (double)((b >> 32) & 0xffff) + (double)(b >> 48);
	return (s * (1.0 / 65536.0) - 2.0) * 1.7320508075688772;
}
