/*
 * test_read_csv.c — CSV with a schema: DeepCTR's criteo_sample (header,
 * floats like 260.0), Avazu (20-digit ids >= 2^63 as CAT), quoting, CRLF
 * and malformed rows.
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

int main(void)
{
	data_dir = getenv("ST_SHARED_DATA");
	char p[1024];
	snprintf(p, sizeof p, "%s/%s", data_dir ? data_dir : "", avazu);
	if (!data_dir || access(p, R_OK) != 0) {
		printf("skip: ST_SHARED_DATA is not set or lacks %s\n", avazu);
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_csv_deepctr_criteo_sample),
		cmocka_unit_test(test_read_csv_avazu_huge_ids),
		cmocka_unit_test(test_read_csv_quotes_crlf_empty),
		cmocka_unit_test(test_read_csv_bad_rows),
		cmocka_unit_test(test_read_csv_schema_mismatch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
