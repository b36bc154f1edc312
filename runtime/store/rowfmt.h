/*
 * rowfmt.h — the precision of the embedding part of a stored row
 * (storage.row_precision): fp32, or 16 bits per value (bf16, fp16) to halve
 * the bytes a row takes in the RAM and SSD tiers. The optimizer state of a
 * row always stays fp32; only emb (+ wide weight) is compact.
 *
 * A compact row is
 *
 *   uint16 emb[dim] (padded to a 4-byte word) | float state[state_dim] | meta
 *
 * so the row pointer stays a float * to the row's first word and the state
 * starts st_rowfmt_words(prec, dim) words in. Values are converted to fp32
 * for every computation (pooling reads decoded copies; an update decodes,
 * computes in fp32 and rounds back), so nothing but the stored bits changes.
 *
 * Rounding is round-to-nearest-even for both formats (the IEEE default, what
 * F16C's _mm256_cvtps_ph and PyTorch's .to(bfloat16) do). NaN stays NaN
 * (quieted), ±inf stays ±inf, fp32 values beyond a format's range round to
 * ±inf, fp16's subnormals are kept (gradual underflow), and bf16 — which
 * has fp32's exponent range — keeps fp32's subnormals to 8 bits.
 *
 * Each conversion has a plain C reference (the _ref functions, one value at
 * a time) and a fast path (st_rowfmt_encode / decode: AVX2 + F16C where the
 * build has them, else the reference); tests/unit/test_rowfmt.c pins the
 * two to the same bits on every class of value.
 *
 * Library-grade: the C library only. Thread-safe (pure functions).
 */
#ifndef ST_ROWFMT_H
#define ST_ROWFMT_H

#include <stddef.h>
#include <stdint.h>

enum st_row_prec {
	ST_ROW_FP32 = 0,
	ST_ROW_BF16 = 1,
	ST_ROW_FP16 = 2,
};

/* 4-byte words that n values take in precision prec (n, or n/2 rounded up). */
static inline uint32_t st_rowfmt_words(int prec, uint32_t n)
{
	return prec == ST_ROW_FP32 ? n : (n + 1) / 2;
}

/* "fp32", "bf16", "fp16". */
const char *st_rowfmt_name(int prec);

/* The precision named s, or -1 for an unknown name (NULL reads as fp32). */
int st_rowfmt_parse(const char *s);

/* Reference conversions of one value (round-to-nearest-even). */
uint16_t st_rowfmt_bf16_from_f32_ref(float f);
float st_rowfmt_bf16_to_f32_ref(uint16_t h);
uint16_t st_rowfmt_fp16_from_f32_ref(float f);
float st_rowfmt_fp16_to_f32_ref(uint16_t h);

/* dst[0..n) = the fp32 values of the n stored values at src (precision
 * prec; fp32 copies). src and dst must not overlap. */
void st_rowfmt_decode(int prec, const void *src, float *dst, size_t n);

/* Stores the n fp32 values src into dst in precision prec, rounded to
 * nearest even (fp32 copies). Writes exactly the n values' bytes. */
void st_rowfmt_encode(int prec, const float *src, void *dst, size_t n);

#endif
