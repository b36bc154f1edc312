/*
 * conv.h — the planted second label of `strata gen --labels 2` (issue 19,
 * multi-task): a conversion on clicked rows, correlated with the click but
 * driven partly by fields the click does not depend on.
 *
 * Model (z(s, v) a hidden N(0, 1) latent of value v of slot s, a hash of the
 * printed value, the seed and the slot, salted apart from the click's
 * weights and from cross.h's latents):
 *     conversion = 0                                         if click = 0
 *     p(conversion = 1 | click = 1) = sigmoid(ST_GEN_CONV_B0
 *             + ST_GEN_CONV_SHARED * (click logit - b0)          shared part
 *             + ST_GEN_CONV_BETA * Σ_{s in S} z(s, v_s))          its own part
 * over the conversion slots S = ST_GEN_CONV_SLOTS (present fields only).
 * Three of S (22..24) carry no click signal at all, so only a model that
 * learns the conversion on its own head sees them; the shared part makes the
 * two labels correlated beyond "conversion implies click". The draw is a
 * hash of (seed, day, row), not a draw from the row's random stream, so the
 * click label and every feature are those of the one-label output, and the
 * default output (labels 1) stays byte-identical.
 *
 * Files print the conversion as the second column (click, conversion, 13
 * ints, 26 categorical values): read them with st.data.csv, sep "\t", no
 * header, columns { { "label", name = "click" }, { "label", name =
 * "conversion" }, 13 × "dense", 26 × "cat" } (jobs/mtl.lua).
 */
#ifndef ST_GEN_CONV_H
#define ST_GEN_CONV_H

#include <stdint.h>

#define ST_GEN_MAX_LABELS 2
#define ST_GEN_CONV_B0 (-0.5)
#define ST_GEN_CONV_SHARED 0.5
#define ST_GEN_CONV_BETA 0.8
#define ST_GEN_CONV_NSLOTS 5
#define ST_GEN_CONV_SLOTS { 2, 7, 22, 23, 24 }

/* The conversion of a row: 0 unless click; else a Bernoulli draw as above.
 * cat[26] are the row's printed 32-bit values, cat_missing its empty-field
 * mask, click_z the click logit without b0. Pure. */
int st__gen_conv(uint64_t seed, int day, uint64_t row, int click, double click_z,
		 const uint32_t *cat, uint32_t cat_missing);

/* The conversion logit's own part (ST_GEN_CONV_BETA × Σ z) for tests. Pure. */
double st__gen_conv_own(uint64_t seed, const uint32_t *cat, uint32_t cat_missing);

#endif
