/* test_safetensors.c — safetensors writer and strict reader: round trips, a
 * hand-built reference file, every malformed-header branch, truncation at
 * every byte, random damage, a full disk, and loading in PyTorch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump_util.h"
#include "skip_util.h"
#include "ops/dump/safetensors.h"
#include "runtime/err.h"

static char *dir;

static int setup(void **state)
{
	(void)state;
	dir = tu_mkdtemp("safetensors");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	st__dumpio_rmtree(dir);
	free(dir);
	return 0;
}

/* The tensors every test writes: a matrix, a vector, a scalar, an empty one. */
static float w_data[12], b_data[4], s_data[1] = { 42.0f };

static void sample(st_safetensors_tensor_t t[4])
{
	for (int i = 0; i < 12; i++)
		w_data[i] = 0.5f * (float)i;
	for (int i = 0; i < 4; i++)
		b_data[i] = -(float)i;
	memset(t, 0, 4 * sizeof *t);
	t[0] = (st_safetensors_tensor_t){ .name = "w", .ndim = 2, .shape = { 3, 4 }, .f32 = w_data };
	t[1] = (st_safetensors_tensor_t){ .name = "b", .ndim = 1, .shape = { 4 }, .f32 = b_data };
	t[2] = (st_safetensors_tensor_t){ .name = "s", .ndim = 0, .f32 = s_data };
	t[3] = (st_safetensors_tensor_t){ .name = "e", .ndim = 2, .shape = { 0, 5 }, .f32 = NULL };
}

static const st_kv_t sample_meta[] = {
	{ "format", "pt" },
	{ "strata.note", "quote \" backslash \\ newline \n tab \t unicode \xc3\xa9\xe2\x82\xac" },
};

static char *write_sample(const char *name, st_dumpio_sum_t *sum)
{
	st_safetensors_tensor_t t[4];
	sample(t);
	char *p = tu_path(dir, name);
	char err[512] = "";
	int rc = st_safetensors_write(p, t, 4, sample_meta, 2, sum, err, sizeof err);
	if (rc != ST_OK)
		fprintf(stderr, "write: %s\n", err);
	assert_int_equal(rc, ST_OK);
	return p;
}

static void test_safetensors_round_trip(void **state)
{
	(void)state;
	st_dumpio_sum_t sum;
	char *p = write_sample("rt.safetensors", &sum);
	size_t len = 0;
	uint8_t *raw = tu_read(p, &len);
	assert_int_equal(sum.bytes, len);
	/* data starts 8-aligned: the header is padded with spaces */
	uint64_t n = 0;
	memcpy(&n, raw, 8);
	assert_int_equal(n % 8, 0);
	assert_int_equal(raw[8], '{');
	assert_int_equal(raw[8 + n - 1] == ' ' || raw[8 + n - 1] == '}', 1);
	assert_int_equal(len, 8 + n + (12 + 4 + 1) * 4);
	st_dumpio_sum_t again;
	assert_int_equal(st__dumpio_hash_file(p, &again, NULL, 0), ST_OK);
	assert_int_equal(again.xxh3, sum.xxh3);

	st_safetensors_t *f;
	char err[512] = "";
	assert_int_equal(st_safetensors_read(p, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->n_tensors, 4);
	assert_int_equal(f->header_len, n);
	const st_safetensors_tensor_t *w = st_safetensors_find(f, "w");
	assert_non_null(w);
	assert_int_equal(w->dtype, ST_SAFETENSORS_F32);
	assert_int_equal(w->ndim, 2);
	assert_int_equal(w->shape[0], 3);
	assert_int_equal(w->shape[1], 4);
	assert_int_equal(w->numel, 12);
	assert_int_equal((uintptr_t)w->f32 % 4, 0);
	assert_memory_equal(w->f32, w_data, sizeof w_data);
	const st_safetensors_tensor_t *b = st_safetensors_find(f, "b");
	assert_memory_equal(b->f32, b_data, sizeof b_data);
	const st_safetensors_tensor_t *s = st_safetensors_find(f, "s");
	assert_int_equal(s->ndim, 0);
	assert_int_equal(s->numel, 1);
	assert_true(s->f32[0] == 42.0f);
	const st_safetensors_tensor_t *e = st_safetensors_find(f, "e");
	assert_int_equal(e->numel, 0);
	assert_int_equal(e->nbytes, 0);
	assert_null(st_safetensors_find(f, "nope"));
	assert_string_equal(st_safetensors_meta(f, "format"), "pt");
	assert_string_equal(st_safetensors_meta(f, "strata.note"), sample_meta[1].value);
	assert_null(st_safetensors_meta(f, "nope"));
	st_safetensors_free(f);
	free(raw);
	free(p);
}

static void test_safetensors_empty_file_round_trip(void **state)
{
	(void)state;
	char *p = tu_path(dir, "empty.safetensors");
	assert_int_equal(st_safetensors_write(p, NULL, 0, NULL, 0, NULL, NULL, 0), ST_OK);
	st_safetensors_t *f;
	assert_int_equal(st_safetensors_read(p, &f, NULL, 0), ST_OK);
	assert_int_equal(f->n_tensors, 0);
	assert_int_equal(f->n_meta, 0);
	st_safetensors_free(f);
	free(p);
}

/* Builds a file image from a header string and n data bytes (0, 1, 2...). */
static uint8_t *image(const char *header, size_t data_len, size_t *len)
{
	size_t h = strlen(header);
	*len = 8 + h + data_len;
	uint8_t *b = malloc(*len);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)h >> (8 * i));
	memcpy(b + 8, header, h);
	for (size_t i = 0; i < data_len; i++)
		b[8 + h + i] = (uint8_t)i;
	return b;
}

/* The layout the reference writer produces (what `safetensors.torch.save_file`
 * writes for {"a": 2x2 F32, "idx": 3 I64} with metadata {"format": "pt"}):
 * compact JSON, "__metadata__" first, tensors ordered by alignment then name,
 * header padded with spaces to a multiple of 8. */
static void test_safetensors_reads_reference_layout(void **state)
{
	(void)state;
	const char *hdr =
		"{\"__metadata__\":{\"format\":\"pt\"},"
		"\"idx\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]},"
		"\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[24,40]}}";
	char padded[256];
	snprintf(padded, sizeof padded, "%s", hdr);
	while (strlen(padded) % 8)
		strcat(padded, " ");
	size_t len = 0;
	uint8_t *b = image(padded, 40, &len);
	int64_t idx[3] = { 7, -1, 1LL << 40 };
	float a[4] = { 1, 2, 3, 4 };
	size_t off = 8 + strlen(padded);
	memcpy(b + off, idx, 24);
	memcpy(b + off + 24, a, 16);
	char *p = tu_path(dir, "ref.safetensors");
	tu_write(p, b, len);
	st_safetensors_t *f;
	char err[512] = "";
	int rc = st_safetensors_read(p, &f, err, sizeof err);
	if (rc)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(rc, ST_OK);
	assert_int_equal(f->n_tensors, 2);
	/* tensors come back in data order */
	assert_string_equal(f->tensors[0].name, "idx");
	assert_int_equal(f->tensors[0].dtype, ST_SAFETENSORS_I64);
	assert_null(f->tensors[0].f32);
	assert_memory_equal(f->tensors[0].data, idx, 24);
	assert_string_equal(f->tensors[1].name, "a");
	assert_memory_equal(f->tensors[1].f32, a, 16);
	assert_string_equal(st_safetensors_meta(f, "format"), "pt");
	st_safetensors_free(f);

	/* Whitespace, escapes and an unpadded header are legal JSON / format too;
	 * the unpadded data is realigned by the reader. */
	const char *loose = " {\n \"\\u00e9t\\u00e9\\ud83d\\ude00\" : { \"shape\" : [ 2 ] ,"
			    "\"data_offsets\":[0,8], \"dtype\":\"F32\"} }";
	uint8_t *b2 = image(loose + 1, 8, &len);   /* must start with '{' */
	float two[2] = { 1.5f, -2.5f };
	memcpy(b2 + len - 8, two, 8);
	assert_int_equal(st_safetensors_parse(b2, len, "loose", &f, err, sizeof err), ST_OK);
	assert_string_equal(f->tensors[0].name, "\xc3\xa9t\xc3\xa9\xf0\x9f\x98\x80");
	assert_int_equal((uintptr_t)f->tensors[0].f32 % 4, 0);
	assert_memory_equal(f->tensors[0].f32, two, 8);
	st_safetensors_free(f);
	free(b2);
	free(b);
	free(p);
}

/* Every rejection branch of the reader, with the message it must give. */
static void test_safetensors_rejects_malformed_headers(void **state)
{
	(void)state;
	static const struct {
		const char *header;
		size_t data;
		int code;
		const char *msg;
	} cases[] = {
		{ "", 0, ST_EFORMAT, "must be a JSON object" },
		{ "[]", 0, ST_EFORMAT, "must be a JSON object" },
		{ " {}", 0, ST_EFORMAT, "must be a JSON object" },
		{ "{", 0, ST_EFORMAT, "header ends where a string (the header)" },
		{ "{\"a\":{\"dtype\":\"F32\"", 0, ST_EFORMAT, "header ends where '}' a tensor entry" },
		{ "{\"a\"", 0, ST_EFORMAT, "header ends where ':' after a key" },
		{ "{\"a\" 1}", 0, ST_EFORMAT, "expected ':' after a key" },
		{ "{1:2}", 0, ST_EFORMAT, "expected a string" },
		{ "{\"a", 0, ST_EFORMAT, "unterminated string" },
		{ "{\"a\\", 0, ST_EFORMAT, "unterminated escape" },
		{ "{\"a\\x\":1}", 0, ST_EFORMAT, "invalid escape '\\x'" },
		{ "{\"a\\u12G4\":1}", 0, ST_EFORMAT, "invalid \\u escape" },
		{ "{\"a\\ud800\":1}", 0, ST_EFORMAT, "lone high surrogate" },
		{ "{\"a\\udc00\":1}", 0, ST_EFORMAT, "lone low surrogate" },
		{ "{\"a\\u0000\":1}", 0, ST_EFORMAT, "NUL character" },
		{ "{\"a\tb\":1}", 0, ST_EFORMAT, "control character 0x09" },
		{ "{\"a\xff\":1}", 0, ST_EFORMAT, "invalid UTF-8" },
		{ "{\"a\xc0\xaf\":1}", 0, ST_EFORMAT, "invalid UTF-8" },
		{ "{\"a\xed\xa0\x80\":1}", 0, ST_EFORMAT, "invalid UTF-8" },
		{ "{\"a\":1}", 0, ST_EFORMAT, "expected '{' a tensor entry" },
		{ "{\"a\":{}}", 0, ST_EFORMAT, "tensor 'a' lacks \"dtype\"" },
		{ "{\"a\":{\"dtype\":\"F32\"}}", 0, ST_EFORMAT, "lacks \"shape\"" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[]}}", 0, ST_EFORMAT, "lacks \"data_offsets\"" },
		{ "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 0, ST_EFORMAT, "\"dtype\" appears twice" },
		{ "{\"a\":{\"shape\":[],\"shape\":[]}}", 0, ST_EFORMAT, "\"shape\" appears twice" },
		{ "{\"a\":{\"data_offsets\":[0,0],\"data_offsets\":[0,0]}}", 0, ST_EFORMAT,
		  "\"data_offsets\" appears twice" },
		{ "{\"a\":{\"dtype\":\"F31\"}}", 0, ST_EFORMAT, "unknown dtype 'F31'" },
		{ "{\"a\":{\"dtype\":7}}", 0, ST_EFORMAT, "expected a string (dtype)" },
		{ "{\"a\":{\"offsets\":[0,0]}}", 0, ST_EFORMAT, "unknown field 'offsets'" },
		{ "{\"a\":{\"shape\":2}}", 0, ST_EFORMAT, "expected '[' shape" },
		{ "{\"a\":{\"shape\":[-2]}}", 0, ST_EFORMAT, "negative number" },
		{ "{\"a\":{\"shape\":[02]}}", 0, ST_EFORMAT, "leading zero" },
		{ "{\"a\":{\"shape\":[2.0]}}", 0, ST_EFORMAT, "not an integer" },
		{ "{\"a\":{\"shape\":[2e3]}}", 0, ST_EFORMAT, "not an integer" },
		{ "{\"a\":{\"shape\":[x]}}", 0, ST_EFORMAT, "expected a number" },
		{ "{\"a\":{\"shape\":[2", 0, ST_EFORMAT, "header ends where ']' shape" },
		{ "{\"a\":{\"shape\":[", 0, ST_EFORMAT, "header ends where a number" },
		{ "{\"a\":{\"shape\":[9223372036854775808]}}", 0, ST_EFORMAT, "number too large" },
		{ "{\"a\":{\"shape\":[1,1,1,1,1,1,1,1,1]}}", 0, ST_EFORMAT, "too many entries in shape" },
		{ "{\"a\":{\"data_offsets\":[0]}}", 0, ST_EFORMAT, "needs [begin, end]" },
		{ "{\"a\":{\"data_offsets\":[0,1,2]}}", 0, ST_EFORMAT, "too many entries in data_offsets" },
		{ "{\"a\":{\"data_offsets\":[18446744073709551616,0]}}", 0, ST_EFORMAT, "number too large" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, ST_EFORMAT,
		  "tensor 'a' appears twice" },
		{ "{\"__metadata__\":{\"k\":\"v\"},\"__metadata__\":{}}", 0, ST_EFORMAT,
		  "\"__metadata__\" appears twice" },
		{ "{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0, ST_EFORMAT,
		  "metadata key 'k' appears twice" },
		{ "{\"__metadata__\":{\"k\":1}}", 0, ST_EFORMAT, "a __metadata__ value must be a string" },
		{ "{\"__metadata__\":[]}", 0, ST_EFORMAT, "expected '{' __metadata__" },
		{ "{} x", 0, ST_EFORMAT, "unexpected bytes after the header object" },
		{ "{}{}", 0, ST_EFORMAT, "unexpected bytes after the header object" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, ST_EFORMAT,
		  "end before they begin" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, ST_EFORMAT,
		  "shape x F32 is 8 bytes but data_offsets [0, 4] span 4" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],"
		  "\"data_offsets\":[0,4]}}", 4, ST_EFORMAT, "shape overflows" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, ST_EFORMAT,
		  "data begins at 4 but the previous tensor ends at 0 (a gap)" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, ST_EFORMAT,
		  "(they overlap)" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, ST_EFORMAT,
		  "2 bytes after the last tensor's data" },
		{ "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1,5]}}", 5, ST_EFORMAT,
		  "data offset 1 is not a multiple of its element size 4" },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, ST_ECORRUPT,
		  "truncated: tensor 'a' ends at data byte 16 but the file has 8 data bytes" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t len = 0;
		uint8_t *b = image(cases[i].header, cases[i].data, &len);
		st_safetensors_t *f = (st_safetensors_t *)1;
		char err[512] = "";
		int rc = st_safetensors_parse(b, len, "case.safetensors", &f, err, sizeof err);
		if (rc != cases[i].code || !strstr(err, cases[i].msg) || f != NULL ||
		    strncmp(err, "case.safetensors: ", 18)) {
			fprintf(stderr, "case %zu (%s): rc %d, message '%s', wanted %d and '%s'\n",
				i, cases[i].header, rc, err, cases[i].code, cases[i].msg);
			fail();
		}
		free(b);
	}
}

static void test_safetensors_rejects_bad_lengths(void **state)
{
	(void)state;
	char err[512] = "";
	st_safetensors_t *f;
	uint8_t b[16] = { 0 };
	/* a header length over the limit, and one longer than the file */
	uint64_t n = ST_SAFETENSORS_MAX_HEADER + 1;
	memcpy(b, &n, 8);
	assert_int_equal(st_safetensors_parse(b, 16, "x", &f, err, sizeof err), ST_EFORMAT);
	assert_non_null(strstr(err, "over the 100000000-byte limit"));
	n = 9;
	memcpy(b, &n, 8);
	assert_int_equal(st_safetensors_parse(b, 16, "x", &f, err, sizeof err), ST_ECORRUPT);
	assert_non_null(strstr(err, "truncated: the header is 9 bytes but only 8 follow"));
	assert_int_equal(st_safetensors_parse(b, 5, "x", &f, err, sizeof err), ST_ECORRUPT);
	assert_non_null(strstr(err, "shorter than the 8-byte header length"));
	/* a missing file names the file */
	char *p = tu_path(dir, "missing.safetensors");
	assert_int_equal(st_safetensors_read(p, &f, err, sizeof err), ST_ENOENT);
	assert_non_null(strstr(err, "missing.safetensors"));
	free(p);
}

static void test_safetensors_truncation_at_every_byte(void **state)
{
	(void)state;
	char *p = write_sample("trunc.safetensors", NULL);
	size_t len = 0;
	uint8_t *raw = tu_read(p, &len);
	for (size_t cut = 0; cut < len; cut++) {
		st_safetensors_t *f = NULL;
		char err[512] = "";
		int rc = st_safetensors_parse(raw, cut, "t.safetensors", &f, err, sizeof err);
		if (rc != ST_ECORRUPT || f || !strstr(err, "t.safetensors: truncated")) {
			fprintf(stderr, "cut at %zu of %zu: rc %d '%s'\n", cut, len, rc, err);
			fail();
		}
	}
	/* and the whole file parses */
	st_safetensors_t *f;
	assert_int_equal(st_safetensors_parse(raw, len, "t", &f, NULL, 0), ST_OK);
	st_safetensors_free(f);
	free(raw);
	free(p);
}

/* Random damage never crashes the reader (run under ASan/UBSan) and never
 * yields tensors whose data reaches past the image. */
static void test_safetensors_random_damage_is_safe(void **state)
{
	(void)state;
	char *p = write_sample("dmg.safetensors", NULL);
	size_t len = 0;
	uint8_t *raw = tu_read(p, &len);
	uint8_t *b = malloc(len);
	uint64_t s = 12345;
	int accepted = 0;
	for (int it = 0; it < 20000; it++) {
		memcpy(b, raw, len);
		int flips = 1 + it % 4;
		for (int k = 0; k < flips; k++) {
			s = s * 6364136223846793005ULL + 1442695040888963407ULL;
			size_t at = (size_t)(s >> 33) % len;
			/* bias towards the header, where the parser lives */
			if (it % 2)
				at = 8 + at % (len - 8 - 68);
			b[at] ^= (uint8_t)(1u << ((s >> 20) % 8));
		}
		st_safetensors_t *f = NULL;
		int rc = st_safetensors_parse(b, len, "d", &f, NULL, 0);
		if (rc == ST_OK) {
			accepted++;   /* e.g. a flipped data bit: the format has no checksum */
			for (int i = 0; i < f->n_tensors; i++)
				assert_true(f->tensors[i].nbytes <= len);
			st_safetensors_free(f);
		} else {
			assert_null(f);
			assert_true(rc == ST_EFORMAT || rc == ST_ECORRUPT);
		}
	}
	assert_true(accepted > 0);
	free(b);
	free(raw);
	free(p);
}

static void test_safetensors_write_rejects_bad_arguments(void **state)
{
	(void)state;
	st_safetensors_tensor_t t[4];
	char err[512];
	char *p = tu_path(dir, "bad.safetensors");
	sample(t);
	t[1].name = "w";
	assert_int_equal(st_safetensors_write(p, t, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "tensor name 'w' given twice"));
	sample(t);
	t[0].name = "__metadata__";
	assert_int_equal(st_safetensors_write(p, t, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	sample(t);
	t[0].name = "bad\xff";
	assert_int_equal(st_safetensors_write(p, t, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	sample(t);
	t[0].ndim = 9;
	assert_int_equal(st_safetensors_write(p, t, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	sample(t);
	t[0].shape[0] = -1;
	assert_int_equal(st_safetensors_write(p, t, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	sample(t);
	t[1].f32 = NULL;
	assert_int_equal(st_safetensors_write(p, t, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "tensor 'b': no data"));
	sample(t);
	st_kv_t dup[2] = { { "k", "1" }, { "k", "2" } };
	assert_int_equal(st_safetensors_write(p, t, 4, dup, 2, NULL, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "metadata key 'k' given twice"));
	assert_false(tu_exists(p));
	free(p);
}

static void test_safetensors_disk_full_leaves_nothing(void **state)
{
	(void)state;
	st_safetensors_tensor_t t[4];
	sample(t);
	char *p = tu_path(dir, "full.safetensors");
	char err[512] = "";
	for (long long space = 0; space < 200; space += 13) {
		tu_disk_limit(space, 0);
		int rc = st_safetensors_write(p, t, 4, sample_meta, 2, NULL, err, sizeof err);
		tu_disk_unlimited();
		assert_int_equal(rc, ST_ENOSPC);
		assert_non_null(strstr(err, "full.safetensors: write failed: No space left on device"));
		assert_false(tu_exists(p));
	}
	tu_disk_limit(-1, 1);
	assert_int_equal(st_safetensors_write(p, t, 4, NULL, 0, NULL, err, sizeof err), ST_ENOSPC);
	tu_disk_unlimited();
	assert_non_null(strstr(err, "fsync failed"));
	assert_false(tu_exists(p));
	free(p);
}

/*
 * PyTorch loads what strata writes. With the `safetensors` package the
 * file goes through safetensors.torch.load_file itself; without it (Debian
 * 12 has no python3-safetensors) through a loader written from the format
 * specification with the reference implementation's checks, installed as
 * `safetensors.torch` so that the docs/formats.md example runs verbatim.
 */
static const char py_check[] =
	"import sys, json, struct, re, types, math\n"
	"path, md = sys.argv[1], sys.argv[2]\n"
	"try:\n"
	"    import torch\n"
	"except ImportError:\n"
	"    print('skip: python has no torch'); sys.exit(77)\n"
	"try:\n"
	"    from safetensors.torch import load_file\n"
	"    how = 'safetensors.torch.load_file'\n"
	"except ImportError:\n"
	"    how = 'a spec loader (python safetensors is not installed)'\n"
	"    DT = {'F32': (torch.float32, 4), 'F64': (torch.float64, 8), 'I64': (torch.int64, 8),\n"
	"          'I32': (torch.int32, 4), 'U8': (torch.uint8, 1), 'F16': (torch.float16, 2)}\n"
	"    def load_file(p):\n"
	"        b = open(p, 'rb').read()\n"
	"        n, = struct.unpack('<Q', b[:8])\n"
	"        assert n <= 100_000_000 and 8 + n <= len(b), 'header length'\n"
	"        h = json.loads(b[8:8 + n].decode('utf-8'))\n"
	"        assert b[8:9] == b'{'\n"
	"        h.pop('__metadata__', None)\n"
	"        data, pos, out = b[8 + n:], 0, {}\n"
	"        for s, e, name in sorted((v['data_offsets'][0], v['data_offsets'][1], k) for k, v in h.items()):\n"
	"            assert s == pos, 'tensors must cover the data without gaps'\n"
	"            t, size = DT[h[name]['dtype']]\n"
	"            shape = h[name]['shape']\n"
	"            assert math.prod(shape) * size == e - s, 'size'\n"
	"            out[name] = (torch.frombuffer(bytearray(data[s:e]), dtype=t) if e > s\n"
	"                         else torch.zeros(0, dtype=t)).reshape(shape)\n"
	"            pos = e\n"
	"        assert pos == len(data), 'trailing bytes'\n"
	"        return out\n"
	"    pkg = types.ModuleType('safetensors'); pkg.torch = types.ModuleType('safetensors.torch')\n"
	"    pkg.torch.load_file = load_file\n"
	"    sys.modules['safetensors'] = pkg; sys.modules['safetensors.torch'] = pkg.torch\n"
	"d = load_file(path)\n"
	"assert set(d) == {'w', 'b', 's', 'e'}, d.keys()\n"
	"assert d['w'].dtype == torch.float32 and tuple(d['w'].shape) == (3, 4)\n"
	"assert torch.equal(d['w'].flatten(), torch.arange(12, dtype=torch.float32) * 0.5)\n"
	"assert torch.equal(d['b'], -torch.arange(4, dtype=torch.float32))\n"
	"assert tuple(d['s'].shape) == () and d['s'].item() == 42.0\n"
	"assert tuple(d['e'].shape) == (0, 5)\n"
	"# the dense example of docs/formats.md, run as written, on this file's directory\n"
	"text = open(md, encoding='utf-8').read()\n"
	"m = re.search(r'<!-- example: dense -->\\s*```python\\n(.*?)```', text, re.S)\n"
	"assert m, 'docs/formats.md lacks the dense example'\n"
	"code = re.sub(r'(?m)^ckpt_dir = .*$', 'ckpt_dir = %r' % path.rsplit('/', 1)[0], m.group(1))\n"
	"code = code.replace('dense.safetensors', path.rsplit('/', 1)[1])\n"
	"exec(compile(code, 'docs/formats.md (dense example)', 'exec'), {})\n"
	"print('pytorch loaded', path, 'with', how)\n";

static void test_safetensors_loads_in_pytorch(void **state)
{
	(void)state;
	if (!tu_python())
		TU_SKIP("no python3 (or $ST_PYTHON) to cross-check with PyTorch");
	char *p = write_sample("torch.safetensors", NULL);
	char args[8192];
	snprintf(args, sizeof args, "'%s' '%s'", p, tu_formats_md());
	int rc = tu_run_python(dir, "check_safetensors.py", py_check, args);
	free(p);
	if (rc == 77)
		TU_SKIP("%s has no torch module to cross-check with PyTorch", tu_python());
	assert_int_equal(rc, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_safetensors_round_trip),
		cmocka_unit_test(test_safetensors_empty_file_round_trip),
		cmocka_unit_test(test_safetensors_reads_reference_layout),
		cmocka_unit_test(test_safetensors_rejects_malformed_headers),
		cmocka_unit_test(test_safetensors_rejects_bad_lengths),
		cmocka_unit_test(test_safetensors_truncation_at_every_byte),
		cmocka_unit_test(test_safetensors_random_damage_is_safe),
		cmocka_unit_test(test_safetensors_write_rejects_bad_arguments),
		cmocka_unit_test(test_safetensors_disk_full_leaves_nothing),
		cmocka_unit_test(test_safetensors_loads_in_pytorch),
	};
	return tu_exit(cmocka_run_group_tests(tests, setup, teardown),
		       sizeof tests / sizeof tests[0]);
}
