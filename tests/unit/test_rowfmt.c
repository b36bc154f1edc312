/* test_rowfmt.c — compact rows (storage.row_precision, runtime/store/rowfmt.h):
 * the bf16 / fp16 conversions against hand-computed bits (round to nearest
 * even, ties, overflow, NaN, inf, subnormals), the fast paths against the
 * references on every class of value, and a table with compact rows: the
 * layout (state after the 16-bit emb), deterministic init equal to the
 * rounded fp32 init, and rows that go to SSD and come back bit-exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/store/rowfmt.h"
#include "runtime/store/table.h"

static float f_of(uint32_t x)
{
	float f;
	memcpy(&f, &x, sizeof f);
	return f;
}

static uint32_t bits_of(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	return x;
}

static void test_rowfmt_bf16_rounding(void **state)
{
	(void)state;
	/* Exact values keep their bits. */
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(1.0f), 0x3f80);
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(-2.0f), 0xc000);
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(0.0f), 0x0000);
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(-0.0f), 0x8000);
	/* Below half a unit rounds down, above rounds up. */
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(f_of(0x3f807fff)), 0x3f80);
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(f_of(0x3f808001)), 0x3f81);
	/* Ties go to even: 0x3f80|8000 -> 0x3f80 (even), 0x3f81|8000 -> 0x3f82. */
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(f_of(0x3f808000)), 0x3f80);
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(f_of(0x3f818000)), 0x3f82);
	/* The largest finite fp32 rounds past bf16's largest to inf. */
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(f_of(0x7f7fffff)), 0x7f80);
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(INFINITY), 0x7f80);
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(-INFINITY), 0xff80);
	/* NaN stays NaN (quieted), also one whose payload is only in the low
	 * bits, which rounding would have turned into inf. */
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(f_of(0x7f800001)), 0x7fc0);
	assert_true(isnan(st_rowfmt_bf16_to_f32_ref(st_rowfmt_bf16_from_f32_ref(NAN))));
	/* fp32 subnormals keep their top bits (bf16 has fp32's exponent). */
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(f_of(0x00012345)), 0x0001);
	assert_int_equal(st_rowfmt_bf16_from_f32_ref(f_of(0x00018000)), 0x0002);
	/* Decoding is exact. */
	assert_int_equal(bits_of(st_rowfmt_bf16_to_f32_ref(0x3f81)), 0x3f810000);
}

static void test_rowfmt_fp16_rounding(void **state)
{
	(void)state;
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(1.0f), 0x3c00);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(-2.0f), 0xc000);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(65504.0f), 0x7bff);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(-0.0f), 0x8000);
	/* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even (1). 1 + 3*2^-11
	 * is halfway between 1+2^-10 and 1+2^-9: even (1+2^-9). */
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(1.0f + 0x1p-11f), 0x3c00);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(1.0f + 3 * 0x1p-11f), 0x3c02);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
	/* Overflow: 65519.99 still rounds to 65504, 65520 rounds to inf. */
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(65519.0f), 0x7bff);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(65520.0f), 0x7c00);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(-1e10f), 0xfc00);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(INFINITY), 0x7c00);
	/* NaN stays NaN. */
	uint16_t n = st_rowfmt_fp16_from_f32_ref(NAN);
	assert_int_equal(n & 0x7c00, 0x7c00);
	assert_true((n & 0x3ff) != 0);
	assert_true(isnan(st_rowfmt_fp16_to_f32_ref(n)));
	/* Subnormals: 2^-24 is the smallest, 2^-25 is a tie (to 0, even),
	 * just above it rounds up, 3*2^-25 is a tie between 1 and 2 units
	 * (to 2, even); 2^-14 is the smallest normal. */
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(0x1p-24f), 0x0001);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(0x1p-25f), 0x0000);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(0x1p-25f * 1.0001f), 0x0001);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(3 * 0x1p-25f), 0x0002);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(0x1p-14f), 0x0400);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(0x1p-14f - 0x1p-24f), 0x03ff);
	assert_int_equal(st_rowfmt_fp16_from_f32_ref(-1e-30f), 0x8000);
	/* Decoding is exact, subnormals included. */
	assert_true(st_rowfmt_fp16_to_f32_ref(0x0001) == 0x1p-24f);
	assert_true(st_rowfmt_fp16_to_f32_ref(0x83ff) == -(0x1p-14f - 0x1p-24f));
	assert_true(st_rowfmt_fp16_to_f32_ref(0x7bff) == 65504.0f);
	assert_true(isinf(st_rowfmt_fp16_to_f32_ref(0xfc00)));
	/* Every fp16 value decodes and re-encodes to itself (NaNs: to a NaN). */
	for (uint32_t h = 0; h < 65536; h++) {
		float f = st_rowfmt_fp16_to_f32_ref((uint16_t)h);
		uint16_t back = st_rowfmt_fp16_from_f32_ref(f);
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			assert_true(isnan(f) && (back & 0x7c00) == 0x7c00 && (back & 0x3ff));
		else
			assert_int_equal(back, h);
	}
}

/* The fast paths give the reference's bits: random fp32 bit patterns (every
 * class: normals of all exponents, subnormals, inf, NaN) and lengths that
 * leave a tail after the 8-wide steps. */
static void test_rowfmt_fast_matches_reference(void **state)
{
	(void)state;
	enum { N = 4099 };
	float *src = malloc(sizeof(float) * N), *dec = malloc(sizeof(float) * N);
	uint16_t *enc = malloc(sizeof(uint16_t) * N);
	assert_non_null(src);
	assert_non_null(dec);
	assert_non_null(enc);
	uint64_t s = 12345;
	for (int round = 0; round < 64; round++) {
		for (int i = 0; i < N; i++) {
			s = s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
			uint32_t x = (uint32_t)(s >> 32);
			if (round & 1)   /* values near 1: the trainer's range */
				x = (x & 0x807fffffu) | ((uint32_t)(112 + (s >> 20) % 30) << 23);
			if (i % 97 == 0)
				x = (x & 0x80000000u) | 0x7f800000u | (i % 2 ? 0x1u : 0u);  /* inf, NaN */
			if (i % 89 == 0)
				x &= 0x800fffffu;   /* fp32 subnormal */
			src[i] = f_of(x);
		}
		const size_t n = (size_t)(N - round);
		for (int prec = ST_ROW_BF16; prec <= ST_ROW_FP16; prec++) {
			st_rowfmt_encode(prec, src, enc, n);
			for (size_t i = 0; i < n; i++) {
				uint16_t r = prec == ST_ROW_BF16 ? st_rowfmt_bf16_from_f32_ref(src[i])
								 : st_rowfmt_fp16_from_f32_ref(src[i]);
				if (enc[i] != r)
					fail_msg("%s encode of 0x%08x: fast 0x%04x, reference 0x%04x",
						 st_rowfmt_name(prec), bits_of(src[i]), enc[i], r);
			}
			st_rowfmt_decode(prec, enc, dec, n);
			for (size_t i = 0; i < n; i++) {
				float r = prec == ST_ROW_BF16 ? st_rowfmt_bf16_to_f32_ref(enc[i])
							      : st_rowfmt_fp16_to_f32_ref(enc[i]);
				if (isnan(r))
					assert_true(isnan(dec[i]));
				else if (bits_of(dec[i]) != bits_of(r))
					fail_msg("%s decode of 0x%04x", st_rowfmt_name(prec), enc[i]);
			}
		}
	}
	/* Encoding writes exactly n values. */
	uint16_t guard[10];
	memset(guard, 0xab, sizeof guard);
	float one[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	st_rowfmt_encode(ST_ROW_BF16, one, guard, 9);
	assert_int_equal(guard[9], 0xabab);
	free(src);
	free(dec);
	free(enc);
}

static void test_rowfmt_names_and_words(void **state)
{
	(void)state;
	assert_int_equal(st_rowfmt_parse("bf16"), ST_ROW_BF16);
	assert_int_equal(st_rowfmt_parse("fp16"), ST_ROW_FP16);
	assert_int_equal(st_rowfmt_parse("fp32"), ST_ROW_FP32);
	assert_int_equal(st_rowfmt_parse(NULL), ST_ROW_FP32);
	assert_int_equal(st_rowfmt_parse("half"), -1);
	assert_string_equal(st_rowfmt_name(ST_ROW_FP16), "fp16");
	assert_int_equal(st_rowfmt_words(ST_ROW_FP32, 9), 9);
	assert_int_equal(st_rowfmt_words(ST_ROW_BF16, 9), 5);
	assert_int_equal(st_rowfmt_words(ST_ROW_FP16, 16), 8);
}

/* ---- a table with compact rows -------------------------------------------- */

#define DIM 9      /* odd: the emb part ends with a pad half-word */
#define STATE 3

static void table_opts(st_table_opts_t *o, int prec)
{
	*o = (st_table_opts_t){ .dim = DIM, .state_dim = STATE, .seed = 11,
				.init_scale = 0.3f, .state_init = 0.125f, .n_shards = 4,
				.row_prec = prec };
}

/* A compact row holds the fp32 table's initial values rounded, the state
 * (fp32) right after the padded emb words, and is smaller. */
static void test_rowfmt_table_layout_and_init(void **state)
{
	(void)state;
	st_table_opts_t o;
	table_opts(&o, ST_ROW_FP32);
	st_table_t *t32;
	assert_int_equal(st_table_create(&t32, &o), ST_OK);
	for (int prec = ST_ROW_BF16; prec <= ST_ROW_FP16; prec++) {
		table_opts(&o, prec);
		st_table_t *t;
		assert_int_equal(st_table_create(&t, &o), ST_OK);
		assert_int_equal(st_table_row_prec(t), prec);
		assert_int_equal(st_table_row_floats(t), (DIM + 1) / 2 + STATE);
		assert_true(st_table_row_bytes(t) < st_table_row_bytes(t32));
		for (uint64_t k = 1; k < 200; k++) {
			float *r, *r32;
			assert_int_equal(st_table_get_or_create(t, k * 7919, 3, &r), 1);
			assert_int_equal(st_table_get_or_create(t32, k * 7919, 3, &r32), prec == ST_ROW_BF16);
			float dec[DIM];
			st_rowfmt_decode(prec, r, dec, DIM);
			for (int j = 0; j < DIM; j++) {
				uint16_t want = prec == ST_ROW_BF16 ? st_rowfmt_bf16_from_f32_ref(r32[j])
								    : st_rowfmt_fp16_from_f32_ref(r32[j]);
				assert_int_equal(((const uint16_t *)(const void *)r)[j], want);
				assert_true(fabsf(dec[j] - r32[j]) <= fabsf(r32[j]) * 0x1p-8f);
			}
			assert_int_equal(((const uint16_t *)(const void *)r)[DIM], 0);  /* pad */
			for (int j = 0; j < STATE; j++)
				assert_true(r[(DIM + 1) / 2 + j] == 0.125f);
			assert_int_equal(st_table_meta(t, r)->last_step, 3);
			assert_ptr_equal(st_table_find(t, k * 7919), r);
		}
		st_table_destroy(t);
	}
	st_table_destroy(t32);
}

static char g_dir[512];

static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	char p[1024];
	while ((e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			unlink(p);
		}
	closedir(d);
	rmdir(dir);
}

/* Cache mode over SSD: rows written with chosen 16-bit values and state
 * go to SSD when the RAM tier overflows and come back with the same bits. */
static void test_rowfmt_table_ssd_round_trip(void **state)
{
	(void)state;
	const char *tmp = getenv("TMPDIR");
	for (int prec = ST_ROW_BF16; prec <= ST_ROW_FP16; prec++) {
		snprintf(g_dir, sizeof g_dir, "%s/st-rowfmt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
		assert_non_null(mkdtemp(g_dir));
		st_ssd_opts_t so = {
			.dir = g_dir,
			.payload_bytes = (uint32_t)((st_rowfmt_words(prec, DIM) + STATE + 2) * sizeof(float)),
			.file_bytes = 64 << 10,
			.queue_depth = 8,
			.fresh = 1,
		};
		st_table_opts_t o;
		table_opts(&o, prec);
		o.n_shards = 1;
		o.cache_rows = 64;
		o.ssd = &so;
		st_table_t *t;
		assert_int_equal(st_table_create(&t, &o), ST_OK);
		enum { KEYS = 1000 };
		/* Write each row's 16-bit values and state from the key. */
		for (uint64_t k = 0; k < KEYS; k++) {
			float *r;
			uint64_t key = k + 1;
			assert_true(st_table_resolve(t, &key, 1, 1, 1, &r) >= 0);
			assert_non_null(r);
			uint16_t *h = (uint16_t *)(void *)r;
			for (int j = 0; j < DIM; j++)
				h[j] = (uint16_t)(k * 131 + (uint64_t)j * 7 + 1);
			for (int j = 0; j < STATE; j++)
				r[st_rowfmt_words(prec, DIM) + j] = (float)k + 0.5f * (float)j;
			st_table_unpin(t, &r, 1);
		}
		st_table_stats_t s;
		st_table_stats(t, &s);
		assert_true(s.spilled > 0);
		assert_true(s.cold_rows > 0);
		for (uint64_t k = 0; k < KEYS; k++) {
			float *r;
			uint64_t key = k + 1;
			assert_true(st_table_resolve(t, &key, 1, 2, 0, &r) >= 0);
			assert_non_null(r);
			const uint16_t *h = (const uint16_t *)(const void *)r;
			for (int j = 0; j < DIM; j++)
				assert_int_equal(h[j], (uint16_t)(k * 131 + (uint64_t)j * 7 + 1));
			for (int j = 0; j < STATE; j++)
				assert_true(r[st_rowfmt_words(prec, DIM) + j] == (float)k + 0.5f * (float)j);
			st_table_unpin(t, &r, 1);
		}
		st_table_stats(t, &s);
		assert_true(s.loads > 0);
		st_table_destroy(t);
		remove_dir(g_dir);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rowfmt_bf16_rounding),
		cmocka_unit_test(test_rowfmt_fp16_rounding),
		cmocka_unit_test(test_rowfmt_fast_matches_reference),
		cmocka_unit_test(test_rowfmt_names_and_words),
		cmocka_unit_test(test_rowfmt_table_layout_and_init),
		cmocka_unit_test(test_rowfmt_table_ssd_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
