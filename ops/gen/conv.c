/*
 * conv.c — strata gen's planted conversion label (conv.h): hidden latents
 * of the conversion slots and the per-row draw, pure functions of their
 * inputs (no state, no random stream shared with gen.c).
 */
#include "ops/gen/conv.h"

#include <math.h>

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* N(0, 1)-ish from 64 bits: Irwin-Hall of four 16-bit uniforms (as
 * cross.c), mean 0, variance 1. */
static double normal_bits(uint64_t b)
{
	double s = (double)(b & 0xffff) + (double)((b >> 16) & 0xffff) +
		   (double)((b >> 32) & 0xffff) + (double)(b >> 48);
	return (s * (1.0 / 65536.0) - 2.0) * 1.7320508075688772;
}

double st__gen_conv_own(uint64_t seed, const uint32_t *cat, uint32_t cat_missing)
{
	static const int slots[ST_GEN_CONV_NSLOTS] = ST_GEN_CONV_SLOTS;
	double t = 0.0;
	for (int i = 0; i < ST_GEN_CONV_NSLOTS; i++) {
		int s = slots[i];
		if (cat_missing & (1u << s))
			continue;
		uint64_t h = mix64(seed ^ UINT64_C(0x636f6e76 /* "conv" */));
		h = mix64(h ^ ((uint64_t)(s + 1) << 32) ^ cat[s]);
		t += normal_bits(h);
	}
	return ST_GEN_CONV_BETA * t;
}

int st__gen_conv(uint64_t seed, int day, uint64_t row, int click, double click_z,
		 const uint32_t *cat, uint32_t cat_missing)
{
	if (!click)
		return 0;
	double z = ST_GEN_CONV_B0 + ST_GEN_CONV_SHARED * click_z +
		   st__gen_conv_own(seed, cat, cat_missing);
	uint64_t h = mix64(seed ^ UINT64_C(0x636f6e7664726177 /* "convdraw" */));
	h = mix64(h ^ ((uint64_t)day << 48) ^ mix64(row));
	double u = (double)(h >> 11) * 0x1.0p-53;
	return u < 1.0 / (1.0 + exp(-z));
}
