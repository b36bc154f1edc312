/*
 * cross.h — the planted cross terms of `strata gen --cross K` (issue 19): a
 * signal in the product of two fields' keys, which a multiplicative cross
 * (DCNv2's cross layers, ops/nn/model.c) can express directly and a sum of
 * per-field terms cannot.
 *
 * Model: every value index v of slot s has a hidden latent
 *     z(s, v) ~ N(0, 1)   (a hash of the value's hash and a salt of its own)
 * and pair k (0 <= k < K) of slots (2k, 2k+1) adds
 *     ST_GEN_CROSS_BETA * z(2k, v_2k) * z(2k+1, v_2k+1)
 * to the click logit when both fields are present (0 when either is empty).
 * The latents are functions of (seed, slot, value) only, so the option draws
 * nothing from a row's random stream: every field of a row is what it is
 * without --cross, and only the labels (and b0, calibrated with the term)
 * change. The term given one field's key is z_a * E[z_b]; E[z_b] is ~0 over
 * uniform values, but under the Zipf popularity the few head values' latents
 * leave a small mean, so a first-order model sees a sliver of the signal and
 * the rest lies in the product.
 */
#ifndef ST_GEN_CROSS_H
#define ST_GEN_CROSS_H

#include <stdint.h>

#define ST_GEN_MAX_CROSS 13      /* pairs (0,1) .. (24,25) */
#define ST_GEN_CROSS_BETA 1.0

/* The slots of pair k: *a = 2k, *b = 2k + 1. */
static inline void st__gen_cross_pair(int k, int *a, int *b)
{
	*a = 2 * k;
	*b = 2 * k + 1;
}

/* The latent z of the value whose 64-bit hash (gen.c's hash3(seed, slot + 1,
 * v)) is h: approximately N(0, 1), independent of the value's first-order
 * weight and printed digits. Pure. */
double st__gen_cross_latent(uint64_t h);

#endif
