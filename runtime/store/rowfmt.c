/*
 * rowfmt.c — fp32 <-> bf16 / fp16 conversions of stored rows (rowfmt.h).
 *
 * The _ref functions are the readable definition, bit by bit; encode and
 * decode are the fast paths the trainer calls per row: 8 values per step
 * with AVX2 (bf16: integer shifts, the same rounding as the reference) and
 * F16C (fp16: _mm256_cvtps_ph / _mm256_cvtph_ps, which round to nearest
 * even in hardware), the tail through the reference. Builds without those
 * instructions use the reference throughout. tests/unit/test_rowfmt.c
 * checks that both give the same bits.
 */
#include "runtime/store/rowfmt.h"

#include <string.h>

/* The build does not assume AVX2 (-Dnative_arch is off by default), so the
 * vector loops are compiled for AVX2 + F16C by attribute and chosen at run
 * time when the CPU has both. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define ROWFMT_SIMD 1
#define SIMD_FN __attribute__((target("avx2,f16c")))

static int have_simd(void)
{
	static int v = -1;   /* racy first use is benign: every thread computes the same */
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		__builtin_cpu_init();
		/* F16C from CPUID leaf 1 (ECX bit 29): clang's
		 * __builtin_cpu_supports knows no "f16c" and refuses to compile. */
		unsigned a, b, c, d;
		r = __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) &&
		    (c & bit_F16C) != 0;
		__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	}
	return r;
}
#endif

const char *st_rowfmt_name(int prec)
{
	switch (prec) {
	case ST_ROW_BF16: return "bf16";
	case ST_ROW_FP16: return "fp16";
	default: return "fp32";
	}
}

int st_rowfmt_parse(const char *s)
{
	if (!s || !strcmp(s, "fp32"))
		return ST_ROW_FP32;
	if (!strcmp(s, "bf16"))
		return ST_ROW_BF16;
	if (!strcmp(s, "fp16"))
		return ST_ROW_FP16;
	return -1;
}

static inline uint32_t f32_bits(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	return x;
}

static inline float bits_f32(uint32_t x)
{
	float f;
	memcpy(&f, &x, sizeof f);
	return f;
}

/* bf16 is the top half of an fp32: rounding adds just under half a unit of
 * the kept part, plus the kept part's lowest bit (ties go to even). NaN
 * would carry into the exponent or turn into inf, so it is cut and quieted
 * instead. */
uint16_t st_rowfmt_bf16_from_f32_ref(float f)
{
	uint32_t x = f32_bits(f);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

float st_rowfmt_bf16_to_f32_ref(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

/* fp16: 5-bit exponent (bias 15), 10-bit mantissa. */
uint16_t st_rowfmt_fp16_from_f32_ref(float f)
{
	uint32_t x = f32_bits(f);
	const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	x &= 0x7fffffffu;
	if (x > 0x7f800000u)          /* NaN: quieted, payload's top bits kept */
		return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
	if (x >= 0x477ff000u)         /* >= 65520 (and inf): rounds to inf */
		return (uint16_t)(sign | 0x7c00u);
	if (x < 0x38800000u) {        /* below 2^-14: fp16 subnormal or zero */
		if (x < 0x33000000u)  /* below 2^-25: rounds to zero */
			return sign;
		/* value = m * 2^(e-150); in units of 2^-24 that is m >> (126-e),
		 * rounded to nearest even. e is 102..112, the shift 14..24. */
		const uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
		const uint32_t sh = 126u - e;
		uint32_t r = m >> sh;
		const uint32_t rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
		if (rem > half || (rem == half && (r & 1u)))
			r++;
		return (uint16_t)(sign | r);
	}
	/* Normal: rebias the exponent (127 - 15 = 112), round the 13 dropped
	 * bits to nearest even; a carry moves into the exponent as it should. */
	uint32_t r = x - 0x38000000u;
	r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
	return (uint16_t)(sign | r);
}

float st_rowfmt_fp16_to_f32_ref(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0) {
		float v = (float)m * 0x1p-24f;   /* zero or subnormal, exact */
		return sign ? -v : v;
	}
	if (e == 31)                       /* inf, or NaN (quieted) */
		return bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
	return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- fast paths ----------------------------------------------------------- */

#ifdef ROWFMT_SIMD
/* The 8-wide part of decode; returns how many values it did. */
SIMD_FN static size_t decode_simd(int prec, const uint16_t *h, float *dst, size_t n)
{
	size_t i = 0;
	if (prec == ST_ROW_BF16) {
		for (; i + 8 <= n; i += 8) {
			__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(h + i));
			__m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16);
			_mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
		}
	} else {
		for (; i + 8 <= n; i += 8) {
			__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(h + i));
			_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(v));
		}
	}
	return i;
}

/* The 8-wide part of encode; returns how many values it did. */
SIMD_FN static size_t encode_simd(int prec, const float *src, uint16_t *h, size_t n)
{
	size_t i = 0;
	if (prec == ST_ROW_BF16) {
		const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
		const __m256i quiet = _mm256_set1_epi32(0x40);
		for (; i + 8 <= n; i += 8) {
			__m256 f = _mm256_loadu_ps(src + i);
			__m256i x = _mm256_castps_si256(f);
			__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
			__m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
			__m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
			__m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
			r = _mm256_blendv_epi8(r, q, nan);
			/* 32 -> 16 bits: packus works within 128-bit lanes, the
			 * permute puts the two lanes' halves side by side. */
			__m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
			_mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_castsi256_si128(p));
		}
	} else {
		for (; i + 8 <= n; i += 8) {
			__m128i v = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
			_mm_storeu_si128((__m128i *)(void *)(h + i), v);
		}
	}
	return i;
}
#endif

void st_rowfmt_decode(int prec, const void *src, float *dst, size_t n)
{
	if (prec == ST_ROW_FP32) {
		memcpy(dst, src, n * sizeof(float));
		return;
	}
	const uint16_t *h = src;
	size_t i = 0;
#ifdef ROWFMT_SIMD
	if (have_simd())
		i = decode_simd(prec, h, dst, n);
#endif
	if (prec == ST_ROW_BF16)
		for (; i < n; i++)
			dst[i] = st_rowfmt_bf16_to_f32_ref(h[i]);
	else
		for (; i < n; i++)
			dst[i] = st_rowfmt_fp16_to_f32_ref(h[i]);
}

void st_rowfmt_encode(int prec, const float *src, void *dst, size_t n)
{
	if (prec == ST_ROW_FP32) {
		memcpy(dst, src, n * sizeof(float));
		return;
	}
	uint16_t *h = dst;
	size_t i = 0;
#ifdef ROWFMT_SIMD
	if (have_simd())
		i = encode_simd(prec, src, h, n);
#endif
	if (prec == ST_ROW_BF16)
		for (; i < n; i++)
			h[i] = st_rowfmt_bf16_from_f32_ref(src[i]);
	else
		for (; i < n; i++)
			h[i] = st_rowfmt_fp16_from_f32_ref(src[i]);
}
