/*
 * test_read_csv.c — CSV with a schema: DeepCTR's criteo_sample (header,
 * floats like 260.0), Avazu (20-digit ids >= 2^63 as CAT), quoting, CRLF
 * and malformed rows. The two real samples (ST_SHARED_DATA) have synthetic
 * twins of the same shape written by the test, so a clone without the
 * shared data still reads both kinds of file; only the real-data cases
 * skip there, saying so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/read/read.h"
#include "ops/read/read_internal.h"
#include "runtime/err.h"
#include "skip_util.h"

static const char *data_dir;
static const char *sample = "criteo/shenweichen_DeepCTR/criteo_sample.txt";
static const char *avazu = "avazu/Lapis-Hong_Wide-ResDNN/train.csv";

static st_source_t csv_src(uint8_t *kinds, int n_cols, int header, int on_bad)
{
	st_source_t s;
	memset(&s, 0, sizeof s);
	s.format = (char *)"csv";
	s.on_bad = on_bad;
	s.max_report = 5;
	s.limit = -1;
	s.sep = ',';
	s.header = header;
	s.n_cols = n_cols;
	s.col_kind = kinds;
	for (int i = 0; i < n_cols; i++) {
		s.n_dense += kinds[i] == ST_COL_DENSE;
		s.n_slots += kinds[i] == ST_COL_CAT;
	}
	return s;
}

static int read_path(const st_source_t *src, const char *path, uint32_t cap,
		     st_batch_t **b, st_read_stats_t *st)
{
	st_reader_t *r;
	int rc = st_reader_open(&r, src, path);
	if (rc < 0)
		return rc;
	assert_int_equal(st_batch_create(b, cap, (uint32_t)src->n_dense,
					 (uint32_t)src->n_slots, 16), 0);
	do {
		rc = st_reader_next(r, *b, cap);
	} while (rc > 0);
	st_reader_stats(r, st);
	st_reader_close(r);
	return rc;
}

static int read_mem(const st_source_t *src, const char *text, size_t len,
		    st_batch_t **b, st_read_stats_t *st, char *err, size_t errlen)
{
	st_reader_t *r;
	assert_int_equal(st__reader_open_mem(&r, src, "mem.csv", text, len, 0, 0), 0);
	assert_int_equal(st_batch_create(b, 64, (uint32_t)src->n_dense,
					 (uint32_t)src->n_slots, 2), 0);
	assert_int_equal(st_batch_set_labels(*b, (uint32_t)st_source_labels(src)), 0);
	int rc;
	do {
		rc = st_reader_next(r, *b, 64);
	} while (rc > 0);
	st_reader_stats(r, st);
	snprintf(err, errlen, "%s", st_reader_error(r));
	st_reader_close(r);
	return rc;
}

static void test_read_csv_deepctr_criteo_sample(void **state)
{
	(void)state;
	TU_NEED_SHARED(sample);
	uint8_t kinds[40];
	kinds[0] = ST_COL_LABEL;
	for (int i = 1; i <= 13; i++)
		kinds[i] = ST_COL_DENSE;
	for (int i = 14; i < 40; i++)
		kinds[i] = ST_COL_CAT;
	st_source_t src = csv_src(kinds, 40, 1, ST_BAD_FAIL);
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", data_dir, sample);
	st_batch_t *b;
	st_read_stats_t st;
	assert_int_equal(read_path(&src, path, 256, &b, &st), 0);
	assert_int_equal(b->n, 200);
	assert_int_equal(st.bad, 0);
	int pos = 0;
	for (uint32_t i = 0; i < b->n; i++)
		pos += b->labels[i] == 1.0f;
	/* awk -F, 'NR>1{c+=$1; for(i=15;i<=40;i++) if($i!="")k++} END{print c, k}'
	 * -> 49 4627 */
	assert_int_equal(pos, 49);
	assert_int_equal(st_batch_nkeys(b), 4627);
	/* Row 1: 0,,3,260.0,,17668.0,,,33.0,,,,0.0,,05db9164,08d6d899,... */
	static const float row0[13] = { 0, 3, 260, 0, 17668, 0, 0, 33, 0, 0, 0, 0, 0 };
	assert_true(b->labels[0] == 0.0f);
	assert_memory_equal(b->dense, row0, sizeof row0);
	assert_true(b->keys[0] == st_read_key(0, "05db9164", 8));
	assert_true(b->keys[1] == st_read_key(1, "08d6d899", 8));
	st_batch_destroy(b);
}

static void test_read_csv_avazu_huge_ids(void **state)
{
	(void)state;
	TU_NEED_SHARED(avazu);
	uint8_t kinds[24];
	for (int i = 0; i < 24; i++)
		kinds[i] = ST_COL_CAT;
	kinds[1] = ST_COL_LABEL;   /* click */
	st_source_t src = csv_src(kinds, 24, 1, ST_BAD_FAIL);
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", data_dir, avazu);
	st_batch_t *b;
	st_read_stats_t st;
	assert_int_equal(read_path(&src, path, 10000, &b, &st), 0);
	assert_int_equal(b->n, 8087);
	assert_int_equal(st.bad, 0);
	int pos = 0;
	for (uint32_t i = 0; i < b->n; i++)
		pos += b->labels[i] == 1.0f;
	assert_int_equal(pos, 1397);  /* awk -F, 'NR>1{c+=$2} END{print c}' */
	/* Every row has all 23 CAT columns filled. */
	assert_int_equal(st_batch_nkeys(b), 8087 * 23);
	/* ids >= 2^63 are hashed as bytes: two ids, two keys. */
	uint64_t k0 = b->keys[0], k1 = b->keys[23];
	assert_true(k0 == st_read_key(0, "10000169349117863715", 20));
	assert_true(k1 == st_read_key(0, "10000371904215119486", 20));
	assert_true(k0 != k1);
	/* hour (slot 1) is constant in this file. */
	assert_true(b->keys[1] == b->keys[24]);
	assert_true(b->keys[1] == st_read_key(1, "14102100", 8));
	st_batch_destroy(b);
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static char *tmp_path(const char *name)
{
	static char p[600];
	const char *t = getenv("TMPDIR");
	snprintf(p, sizeof p, "%s/st-csv-%d-%s", t && *t ? t : "/tmp", (int)getpid(), name);
	return p;
}

/* The DeepCTR sample's shape, written by the test: a header, the label,
 * 13 dense columns written by pandas as floats ("260.0", empty when
 * missing), 26 hex CAT columns (some empty). */
static void test_read_csv_synth_criteo_sample(void **state)
{
	(void)state;
	enum { ROWS = 200 };
	uint8_t kinds[40];
	kinds[0] = ST_COL_LABEL;
	for (int i = 1; i <= 13; i++)
		kinds[i] = ST_COL_DENSE;
	for (int i = 14; i < 40; i++)
		kinds[i] = ST_COL_CAT;
	st_source_t src = csv_src(kinds, 40, 1, ST_BAD_FAIL);
	const char *path = tmp_path("criteo.csv");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "label");
	for (int i = 1; i <= 13; i++)
		fprintf(f, ",I%d", i);
	for (int i = 1; i <= 26; i++)
		fprintf(f, ",C%d", i);
	fputc('\n', f);
	static float labels[ROWS], dense[ROWS * 13];
	static uint64_t keys[ROWS * 26];
	static uint16_t slots[ROWS * 26];
	uint32_t off[ROWS + 1] = { 0 }, nk = 0;
	uint64_t s = 7;
	for (int i = 0; i < ROWS; i++) {
		int label = rnd(&s) % 4 == 0;
		labels[i] = (float)label;
		fprintf(f, "%d", label);
		for (int j = 0; j < 13; j++) {
			uint64_t r = rnd(&s);
			float v = 0;
			if (r % 3 == 0) {
				fputc(',', f);
			} else {
				v = (float)(r % 20000);
				fprintf(f, ",%.1f", (double)v);
			}
			dense[i * 13 + j] = v;
		}
		for (int c = 0; c < 26; c++) {
			uint64_t r = rnd(&s);
			fputc(',', f);
			if (r % 9 == 0)
				continue;
			char hex[9];
			snprintf(hex, sizeof hex, "%08x", (unsigned)(r >> 32));
			fputs(hex, f);
			keys[nk] = st_read_key((uint32_t)c, hex, 8);
			slots[nk++] = (uint16_t)c;
		}
		fputc('\n', f);
		off[i + 1] = nk;
	}
	assert_int_equal(fclose(f), 0);
	st_batch_t *b;
	st_read_stats_t st;
	assert_int_equal(read_path(&src, path, 256, &b, &st), 0);
	assert_int_equal(b->n, ROWS);
	assert_int_equal(st.rows, ROWS);
	assert_int_equal(st.bad, 0);
	assert_memory_equal(b->labels, labels, sizeof labels);
	assert_memory_equal(b->dense, dense, sizeof dense);
	assert_memory_equal(b->row_off, off, sizeof off);
	assert_int_equal(st_batch_nkeys(b), nk);
	assert_memory_equal(b->keys, keys, nk * sizeof *keys);
	assert_memory_equal(b->key_slot, slots, nk * sizeof *slots);
	st_batch_destroy(b);
	unlink(path);
}

/* The Avazu sample's shape: 24 columns, click the label, the rest CAT; the
 * 20-digit ids (>= 2^63, above int64) are hashed as bytes, and a constant
 * hour gives one key. */
static void test_read_csv_synth_avazu_huge_ids(void **state)
{
	(void)state;
	enum { ROWS = 500 };
	uint8_t kinds[24];
	for (int i = 0; i < 24; i++)
		kinds[i] = ST_COL_CAT;
	kinds[1] = ST_COL_LABEL;
	st_source_t src = csv_src(kinds, 24, 1, ST_BAD_FAIL);
	const char *path = tmp_path("avazu.csv");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "id,click,hour");
	for (int i = 3; i < 24; i++)
		fprintf(f, ",c%d", i);
	fputc('\n', f);
	static char ids[ROWS][21];
	uint64_t s = 9;
	int pos = 0;
	for (int i = 0; i < ROWS; i++) {
		/* 10000000000000000000 .. 18446744073709551615: all >= 2^63 */
		uint64_t id = UINT64_C(10000000000000000000) +
			      rnd(&s) % (UINT64_C(8446744073709551615));
		snprintf(ids[i], sizeof ids[i], "%llu", (unsigned long long)id);
		assert_int_equal(strlen(ids[i]), 20);
		int click = rnd(&s) % 6 == 0;
		pos += click;
		fprintf(f, "%s,%d,14102100", ids[i], click);
		for (int c = 3; c < 24; c++)
			fprintf(f, ",%x", (unsigned)(rnd(&s) % 5000));
		fputc('\n', f);
	}
	assert_int_equal(fclose(f), 0);
	st_batch_t *b;
	st_read_stats_t st;
	assert_int_equal(read_path(&src, path, ROWS + 10, &b, &st), 0);
	assert_int_equal(b->n, ROWS);
	assert_int_equal(st.bad, 0);
	int got = 0;
	for (uint32_t i = 0; i < b->n; i++)
		got += b->labels[i] == 1.0f;
	assert_int_equal(got, pos);
	assert_int_equal(st_batch_nkeys(b), ROWS * 23);
	for (uint32_t i = 0; i < b->n; i++) {
		assert_true(b->keys[i * 23] == st_read_key(0, ids[i], 20));
		assert_true(b->keys[i * 23 + 1] == st_read_key(1, "14102100", 8));
	}
	assert_true(b->keys[0] != b->keys[23]);
	st_batch_destroy(b);
	unlink(path);
}

static uint8_t small_kinds[4] = { ST_COL_LABEL, ST_COL_DENSE, ST_COL_CAT, ST_COL_IGNORE };

static void test_read_csv_quotes_crlf_empty(void **state)
{
	(void)state;
	static const char text[] =
		"click,price,ad,note\r\n"
		"1,2.5,\"a,b\",x\r\n"
		"0,,\"say \"\"hi\"\"\",\"ignored, really\"\r\n"
		"1,-3e2,,\n"
		"0,7,plain\"quote,";
	st_source_t src = csv_src(small_kinds, 4, 1, ST_BAD_FAIL);
	st_batch_t *b;
	st_read_stats_t st;
	char err[512];
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 4);
	static const float labels[4] = { 1, 0, 1, 0 };
	static const float dense[4] = { 2.5f, 0, -300, 7 };
	static const uint32_t off[5] = { 0, 1, 2, 2, 3 };
	assert_memory_equal(b->labels, labels, sizeof labels);
	assert_memory_equal(b->dense, dense, sizeof dense);
	assert_memory_equal(b->row_off, off, sizeof off);
	assert_true(b->keys[0] == st_read_key(0, "a,b", 3));
	assert_true(b->keys[1] == st_read_key(0, "say \"hi\"", 8));
	assert_true(b->keys[2] == st_read_key(0, "plain\"quote", 11));
	st_batch_destroy(b);
}

static void check_bad(const char *line, const char *msg)
{
	char text[256], want[512], err[512];
	snprintf(text, sizeof text, "click,price,ad,note\n1,1,a,\n%s\n0,2,b,\n", line);
	st_source_t src = csv_src(small_kinds, 4, 1, ST_BAD_SKIP);
	st_batch_t *b;
	st_read_stats_t st;
	assert_int_equal(read_mem(&src, text, strlen(text), &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 2);
	assert_int_equal(st.bad, 1);
	assert_int_equal(st_batch_nkeys(b), 2);
	assert_true(b->dense[1] == 2.0f);
	assert_true(b->keys[1] == st_read_key(0, "b", 1));
	snprintf(want, sizeof want, "mem.csv:3: %s", msg);
	assert_string_equal(err, want);
	st_batch_destroy(b);
	src.on_bad = ST_BAD_FAIL;
	assert_int_equal(read_mem(&src, text, strlen(text), &b, &st, err, sizeof err), ST_EBADREC);
	assert_int_equal(b->n, 1);
	assert_string_equal(err, want);
	st_batch_destroy(b);
}

static void test_read_csv_bad_rows(void **state)
{
	(void)state;
	check_bad("1,2,c", "3 columns, expected 4");
	check_bad("1,2,c,d,e", "5 columns, expected 4");
	check_bad("1,abc,c,d", "field 1 (price): 'abc' is not a number");
	check_bad(",2,c,d", "field 0 (click): empty label");
	check_bad("x,2,c,d", "field 0 (click): 'x' is not a label (a number)");
	check_bad("1,2,\"c,d", "field 2 (ad): quoted field has no closing quote");
	check_bad("1,2,\"c\"x,d", "field 2 (ad): text after a closing quote");
	check_bad("1,1e300,c,d", "field 1 (price): '1e300' is out of range");
	check_bad("", "empty line");
}

static void test_read_csv_schema_mismatch(void **state)
{
	(void)state;
	st_source_t src = csv_src(small_kinds, 4, 0, ST_BAD_FAIL);
	src.n_slots = 2;  /* the schema has one CAT column */
	st_reader_t *r;
	assert_int_equal(st__reader_open_mem(&r, &src, "m", "", 0, 0, 0), ST_EINVAL);
	src = csv_src(small_kinds, 4, 1, ST_BAD_FAIL);
	/* header with the wrong number of columns is a bad record */
	static const char text[] = "a,b,c\n1,1,a,\n";
	st_batch_t *b;
	st_read_stats_t st;
	char err[256];
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err), ST_EBADREC);
	assert_string_equal(err, "mem.csv:1: header has 3 columns, the schema has 4");
	st_batch_destroy(b);
}

/* label, cat (single), cat (list '^', max_len 3), cat (list ' ') */
static uint8_t list_kinds[] = { ST_COL_LABEL, ST_COL_CAT, ST_COL_CAT, ST_COL_CAT };

/* The keys of row i of slot s, in order, into out; returns how many. */
static int row_keys(const st_batch_t *b, uint32_t i, uint16_t s, uint64_t *out)
{
	int n = 0;
	for (uint32_t k = b->row_off[i]; k < b->row_off[i + 1]; k++)
		if (b->key_slot[k] == s)
			out[n++] = b->keys[k];
	return n;
}

/* Every list case of docs/job-language.md, "List fields": split, first /
 * last truncation, empty items skipped, empty lists and empty fields
 * missing (key or drop), quoted lists holding the field separator, a space
 * as the list separator; each counted. */
static void test_read_csv_lists(void **state)
{
	(void)state;
	st_slot_opt_t so[3] = {
		{ .missing = ST_MISSING_KEY },
		{ .list_sep = '^', .max_len = 3, .missing = ST_MISSING_KEY },
		{ .list_sep = ' ', .missing = ST_MISSING_DROP },
	};
	st_source_t src = csv_src(list_kinds, 4, 0, ST_BAD_FAIL);
	src.slot_opt = so;
	static const char text[] =
		"1,u,a^b,x y\n"            /* plain */
		"0,u,a^b^c^d^e,x\n"        /* truncated to a^b^c */
		"1,,^^,\n"                 /* empty single, list of empty items, empty */
		"0,u,a^^b^,\"x,y  z\"\n";  /* empty items skipped; quoted, sep inside */
	st_batch_t *b;
	st_read_stats_t st;
	char err[256];
	uint64_t k[8];
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 4);
	assert_int_equal(row_keys(b, 0, 1, k), 2);
	assert_true(k[0] == st_read_key(1, "a", 1) && k[1] == st_read_key(1, "b", 1));
	assert_int_equal(row_keys(b, 0, 2, k), 2);
	assert_true(k[0] == st_read_key(2, "x", 1) && k[1] == st_read_key(2, "y", 1));
	assert_int_equal(row_keys(b, 1, 1, k), 3);
	assert_true(k[0] == st_read_key(1, "a", 1) && k[2] == st_read_key(1, "c", 1));
	/* row 2: slot 0 and slot 1 get their missing keys, slot 2 nothing */
	assert_int_equal(row_keys(b, 2, 0, k), 1);
	assert_true(k[0] == st_read_missing_key(0));
	assert_int_equal(row_keys(b, 2, 1, k), 1);
	assert_true(k[0] == st_read_missing_key(1));
	assert_int_equal(row_keys(b, 2, 2, k), 0);
	assert_int_equal(row_keys(b, 3, 1, k), 2);
	assert_true(k[0] == st_read_key(1, "a", 1) && k[1] == st_read_key(1, "b", 1));
	assert_int_equal(row_keys(b, 3, 2, k), 2);
	assert_true(k[0] == st_read_key(2, "x,y", 3) && k[1] == st_read_key(2, "z", 1));
	assert_int_equal(st.lists_truncated, 1);
	/* "^^": 3 empty items; "x,y  z": 1; "a^^b^": 2 */
	assert_int_equal(st.list_items_empty, 6);
	assert_int_equal(st.lists_empty, 2);     /* "^^" and the empty last field */
	assert_int_equal(st.missing_keys, 2);
	assert_int_equal(st.bad, 0);
	st_batch_destroy(b);

	/* keep last: the most recent keys */
	so[1].keep_last = 1;
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err), 0);
	assert_int_equal(row_keys(b, 1, 1, k), 3);
	assert_true(k[0] == st_read_key(1, "c", 1) && k[2] == st_read_key(1, "e", 1));
	st_batch_destroy(b);

	/* A long list needs more keys than the batch reserved: it grows. */
	char big[4200];
	int n = snprintf(big, sizeof big, "1,u,x,");
	for (int i = 0; i < 1000; i++)
		n += snprintf(big + n, sizeof big - (size_t)n, "%s%d", i ? " " : "", i);
	big[n++] = '\n';
	assert_int_equal(read_mem(&src, big, (size_t)n, &b, &st, err, sizeof err), 0);
	assert_int_equal(st_batch_nkeys(b), 1 + 1 + 1000);
	assert_true(b->keys[2 + 999] == st_read_key(2, "999", 3));
	st_batch_destroy(b);
}

/* A list separator that is the field separator (or a quote) is refused
 * when the reader opens. */
static void test_read_csv_list_bad_sep(void **state)
{
	(void)state;
	st_slot_opt_t so[3] = { { 0 }, { .list_sep = ',' }, { 0 } };
	st_source_t src = csv_src(list_kinds, 4, 0, ST_BAD_FAIL);
	src.slot_opt = so;
	st_reader_t *r;
	assert_int_equal(st__reader_open_mem(&r, &src, "m", "", 0, 0, 0), ST_EINVAL);
	so[1].list_sep = '"';
	assert_int_equal(st__reader_open_mem(&r, &src, "m", "", 0, 0, 0), ST_EINVAL);
}

/* dense_missing = indicator: each dense column j gets dense[n_dense/2 + j]
 * = 1 when it was empty. */
static void test_read_csv_dense_indicator(void **state)
{
	(void)state;
	static uint8_t kinds[] = { ST_COL_LABEL, ST_COL_DENSE, ST_COL_CAT, ST_COL_DENSE };
	st_source_t src = csv_src(kinds, 4, 0, ST_BAD_FAIL);
	src.dense_indicator = 1;
	src.n_dense = 4;
	static const char text[] = "1,,a,3\n0,2.5,b,\n";
	st_batch_t *b;
	st_read_stats_t st;
	char err[256];
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err), 0);
	static const float want[8] = { 0, 3, 1, 0, 2.5f, 0, 0, 1 };
	assert_memory_equal(b->dense, want, sizeof want);
	st_batch_destroy(b);
}

/* The Taobao sample: click_sequence ('^'-separated, up to 6 items) as a
 * list field with max_len 5 keeping the most recent, every other field
 * single (price dense, time_stamp ignored), missing = key. */
static const char *taobao = "taobao_ad/reczoo_FuxiCTR/train_sample.csv";
static void test_read_csv_taobao_click_sequence(void **state)
{
	(void)state;
	TU_NEED_SHARED(taobao);
	uint8_t kinds[19];
	st_slot_opt_t so[16];
	memset(so, 0, sizeof so);
	kinds[0] = ST_COL_LABEL;
	kinds[1] = ST_COL_IGNORE;
	for (int i = 2; i < 19; i++)
		kinds[i] = ST_COL_CAT;
	kinds[9] = ST_COL_DENSE;
	for (int i = 0; i < 16; i++)
		so[i].missing = ST_MISSING_KEY;
	so[15] = (st_slot_opt_t){ .list_sep = '^', .max_len = 5, .keep_last = 1,
				  .missing = ST_MISSING_KEY };
	st_source_t src = csv_src(kinds, 19, 1, ST_BAD_FAIL);
	src.slot_opt = so;
	assert_int_equal(src.n_slots, 16);
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", data_dir, taobao);
	st_batch_t *b;
	st_read_stats_t st;
	assert_int_equal(read_path(&src, path, 256, &b, &st), 0);
	assert_int_equal(b->n, 100);
	assert_int_equal(st.bad, 0);
	/* python3 csv: 1265 non-empty single fields, 235 empty ones; 40
	 * sequence items (39 kept: one list of 6), 75 empty sequences. */
	assert_int_equal(st_batch_nkeys(b), 1265 + 235 + 39 + 75);
	assert_int_equal(st.missing_keys, 235 + 75);
	assert_int_equal(st.lists_truncated, 1);
	assert_int_equal(st.lists_empty, 75);
	assert_int_equal(st.list_items_empty, 0);
	/* row 2: 170301^573514^158525^633154^383937^431258 keeps the last 5 */
	uint64_t k[8];
	assert_int_equal(row_keys(b, 2, 15, k), 5);
	assert_true(k[0] == st_read_key(15, "573514", 6));
	assert_true(k[4] == st_read_key(15, "431258", 6));
	st_batch_destroy(b);
}

/* Two LABEL columns (click, conversion) land in labels[i * 2 + l] in column
 * order, whatever columns sit between them. */
static void test_read_csv_several_labels(void **state)
{
	(void)state;
	uint8_t kinds[5] = { ST_COL_LABEL, ST_COL_DENSE, ST_COL_LABEL, ST_COL_CAT, ST_COL_IGNORE };
	st_source_t src = csv_src(kinds, 5, 0, ST_BAD_FAIL);
	src.n_labels = 2;
	static const char text[] = "1,2.5,0,a,x\n0,1,1,b,y\n1,0,1,,z\n";
	st_batch_t *b;
	st_read_stats_t st;
	char err[256];
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 3);
	assert_int_equal(b->n_labels, 2);
	static const float want[6] = { 1, 0, 0, 1, 1, 1 };
	assert_memory_equal(b->labels, want, sizeof want);
	assert_true(b->dense[0] == 2.5f && b->dense[1] == 1.0f);
	assert_true(b->keys[0] == st_read_key(0, "a", 1));
	st_batch_destroy(b);
}

/* A bad second label is a bad record naming its column; a batch of the
 * wrong label count is refused before any row is read. */
static void test_read_csv_several_labels_bad(void **state)
{
	(void)state;
	uint8_t kinds[3] = { ST_COL_LABEL, ST_COL_LABEL, ST_COL_CAT };
	st_source_t src = csv_src(kinds, 3, 0, ST_BAD_FAIL);
	src.n_labels = 2;
	static const char text[] = "1,0,a\n1,yes,b\n";
	st_batch_t *b;
	st_read_stats_t st;
	char err[256];
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err),
			 ST_EBADREC);
	assert_int_equal(b->n, 1);
	assert_non_null(strstr(err, "mem.csv:2"));
	assert_non_null(strstr(err, "field 1"));
	assert_non_null(strstr(err, "'yes' is not a label"));
	st_batch_destroy(b);
	/* the schema has 2 label columns, the source says 1 */
	src.n_labels = 1;
	st_reader_t *r;
	assert_int_equal(st__reader_open_mem(&r, &src, "mem.csv", text, sizeof text - 1, 0, 0),
			 ST_EINVAL);
	/* a one-label batch for a two-label reader */
	src.n_labels = 2;
	assert_int_equal(st__reader_open_mem(&r, &src, "mem.csv", text, sizeof text - 1, 0, 0),
			 0);
	assert_int_equal(st_batch_create(&b, 4, 0, 1, 4), 0);
	assert_int_equal(st_reader_next(r, b, 4), ST_EINVAL);
	assert_non_null(strstr(st_reader_error(r), "n_labels 1"));
	st_batch_destroy(b);
	st_reader_close(r);
}

int main(void)
{
	data_dir = getenv("ST_SHARED_DATA");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_csv_deepctr_criteo_sample),
		cmocka_unit_test(test_read_csv_avazu_huge_ids),
		cmocka_unit_test(test_read_csv_synth_criteo_sample),
		cmocka_unit_test(test_read_csv_synth_avazu_huge_ids),
		cmocka_unit_test(test_read_csv_quotes_crlf_empty),
		cmocka_unit_test(test_read_csv_bad_rows),
		cmocka_unit_test(test_read_csv_schema_mismatch),
		cmocka_unit_test(test_read_csv_lists),
		cmocka_unit_test(test_read_csv_list_bad_sep),
		cmocka_unit_test(test_read_csv_dense_indicator),
		cmocka_unit_test(test_read_csv_taobao_click_sequence),
		cmocka_unit_test(test_read_csv_several_labels),
		cmocka_unit_test(test_read_csv_several_labels_bad),
	};
	return tu_exit(cmocka_run_group_tests(tests, NULL, NULL), sizeof tests / sizeof tests[0]);
}
