/*
 * test_read_libsvm.c — libsvm / libffm lines: the xlearn Criteo libffm
 * sample (ST_SHARED_DATA) and, for a clone without it, a synthetic libffm
 * file of the same shape written by the test; small hand-written files with
 * -1/+1 labels and malformed tokens. Only the real-data case skips when
 * the shared data is absent, saying so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/read/read.h"
#include "ops/read/read_internal.h"
#include "runtime/err.h"
#include "skip_util.h"

static const char *data_dir;
static const char *ffm = "criteo_libffm/aksnzhy_xlearn/small_train.txt";

static st_source_t libsvm_src(int n_slots, int on_bad)
{
	st_source_t s;
	memset(&s, 0, sizeof s);
	s.format = (char *)"libsvm";
	s.on_bad = on_bad;
	s.max_report = 5;
	s.limit = -1;
	s.n_slots = n_slots;
	return s;
}

/* Reads all of a memory buffer; returns the last st_reader_next result. */
static int read_mem(const st_source_t *src, const char *text, size_t len,
		    st_batch_t **b, st_read_stats_t *st, char *err, size_t errlen)
{
	st_reader_t *r;
	assert_int_equal(st__reader_open_mem(&r, src, "mem.svm", text, len, 0, 0), 0);
	assert_int_equal(st_batch_create(b, 64, 0, (uint32_t)src->n_slots, 2), 0);
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

static void test_read_libsvm_xlearn_libffm(void **state)
{
	(void)state;
	TU_NEED_SHARED(ffm);
	/* Fields go up to 17 (awk over the file), so 18 slots. */
	st_source_t src = libsvm_src(18, ST_BAD_FAIL);
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", data_dir, ffm);
	st_reader_t *r;
	assert_int_equal(st_reader_open(&r, &src, path), 0);
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, 256, 0, 18, 16), 0);
	int rc;
	do {
		rc = st_reader_next(r, b, 256);
	} while (rc > 0);
	assert_int_equal(rc, 0);
	st_read_stats_t st;
	st_reader_stats(r, &st);
	st_reader_close(r);
	assert_int_equal(st.rows, 200);
	assert_int_equal(st.bad, 0);
	assert_int_equal(st.bytes, 51274);
	int pos = 0;
	for (uint32_t i = 0; i < b->n; i++)
		pos += b->labels[i] == 1.0f;
	/* awk '{if($1>0)c++; k+=NF-1} END{print c, k}' -> 48 3508 */
	assert_int_equal(pos, 48);
	assert_int_equal(st_batch_nkeys(b), 3508);
	/* Line 1: "1 0:0:0.3651 2:1163:0.3651 3:8672:0.3651 ..." */
	assert_true(b->labels[0] == 1.0f);
	assert_true(b->keys[0] == st_read_key(0, "0", 1));
	assert_int_equal(b->key_slot[0], 0);
	assert_true(fabsf(b->key_val[0] - 0.3651f) < 1e-7f);
	assert_true(b->keys[1] == st_read_key(2, "1163", 4));
	assert_int_equal(b->key_slot[1], 2);
	assert_int_equal(b->key_slot[2], 3);
	for (uint32_t k = 0; k < st_batch_nkeys(b); k++)
		assert_true(b->key_slot[k] < 18);
	st_batch_destroy(b);

	/* With only 10 slots the fields >= 10 are bad records. */
	src = libsvm_src(10, ST_BAD_FAIL);
	assert_int_equal(st_reader_open(&r, &src, path), 0);
	assert_int_equal(st_batch_create(&b, 256, 0, 10, 16), 0);
	assert_int_equal(st_reader_next(r, b, 256), ST_EBADREC);
	assert_non_null(strstr(st_reader_error(r), "small_train.txt:1: field 10: field 10 is not below the source's 10 slots"));
	st_reader_close(r);
	st_batch_destroy(b);
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* The shape of the xlearn sample, written by the test: "label
 * field:index:value" tokens, 16 to 36 per line, fields 0..17 (repeats
 * allowed), values k/8 (exact in float); line 1 has a field >= 10 at its
 * 4th token. The reader must return every token as written. */
static void test_read_libsvm_synth_libffm(void **state)
{
	(void)state;
	enum { ROWS = 300 };
	char path[600];
	const char *t = getenv("TMPDIR");
	snprintf(path, sizeof path, "%s/st-libffm-%d.txt", t && *t ? t : "/tmp", (int)getpid());
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	size_t cap = ROWS * 36;
	uint64_t *keys = malloc(cap * sizeof *keys);
	uint16_t *slots = malloc(cap * sizeof *slots);
	float *vals = malloc(cap * sizeof *vals), labels[ROWS];
	uint32_t off[ROWS + 1] = { 0 }, nk = 0;
	uint64_t s = 42;
	int pos = 0;
	for (int i = 0; i < ROWS; i++) {
		int label = rnd(&s) % 4 == 0;
		labels[i] = (float)label;
		pos += label;
		fprintf(f, "%d", label);
		int ntok = 15 + (int)(rnd(&s) % 21);
		for (int k = 0; k < ntok; k++) {
			unsigned field = i == 0 && k == 3 ? 12 : (unsigned)(rnd(&s) % 18);
			char idx[24];
			int il = snprintf(idx, sizeof idx, "%u", (unsigned)(rnd(&s) % 100000));
			int v8 = (int)(rnd(&s) % 64) - 16;
			fprintf(f, " %u:%s:%g", field, idx, v8 / 8.0);
			keys[nk] = st_read_key(field, idx, (size_t)il);
			slots[nk] = (uint16_t)field;
			vals[nk++] = (float)v8 / 8.0f;
		}
		fputc('\n', f);
		off[i + 1] = nk;
	}
	assert_int_equal(fclose(f), 0);

	st_source_t src = libsvm_src(18, ST_BAD_FAIL);
	st_reader_t *r;
	assert_int_equal(st_reader_open(&r, &src, path), 0);
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, ROWS + 10, 0, 18, 16), 0);
	int rc;
	do {
		rc = st_reader_next(r, b, ROWS + 10);
	} while (rc > 0);
	assert_int_equal(rc, 0);
	st_read_stats_t st;
	st_reader_stats(r, &st);
	st_reader_close(r);
	assert_int_equal(st.rows, ROWS);
	assert_int_equal(st.bad, 0);
	assert_int_equal(b->n, ROWS);
	assert_memory_equal(b->labels, labels, sizeof labels);
	assert_memory_equal(b->row_off, off, sizeof off);
	assert_int_equal(st_batch_nkeys(b), nk);
	assert_memory_equal(b->keys, keys, nk * sizeof *keys);
	assert_memory_equal(b->key_slot, slots, nk * sizeof *slots);
	assert_memory_equal(b->key_val, vals, nk * sizeof *vals);
	assert_true(pos > 40);
	st_batch_destroy(b);

	/* With only 10 slots the fields >= 10 are bad records. */
	src = libsvm_src(10, ST_BAD_FAIL);
	assert_int_equal(st_reader_open(&r, &src, path), 0);
	assert_int_equal(st_batch_create(&b, 256, 0, 10, 16), 0);
	assert_int_equal(st_reader_next(r, b, 256), ST_EBADREC);
	const char *e = st_reader_error(r);
	/* The first field >= 10 of line 1 is at token 4 or before. */
	assert_non_null(strstr(e, ":1: field "));
	assert_non_null(strstr(e, "is not below the source's 10 slots"));
	st_reader_close(r);
	st_batch_destroy(b);
	unlink(path);
	free(keys);
	free(slots);
	free(vals);
}

static void test_read_libsvm_pm1_labels_and_values(void **state)
{
	(void)state;
	static const char text[] =
		"+1 3:1 7:0.5\n"
		"-1 3:2.5e1\n"
		"0 1:1\r\n"
		"1\t4:1   9:-2\n"
		"  -1\n"
		"0.7 2:1";
	st_source_t src = libsvm_src(1, ST_BAD_FAIL);
	st_batch_t *b;
	st_read_stats_t st;
	char err[512];
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 6);
	static const float labels[6] = { 1, 0, 0, 1, 0, 1 };
	assert_memory_equal(b->labels, labels, sizeof labels);
	static const uint32_t off[7] = { 0, 2, 3, 4, 6, 6, 7 };
	assert_memory_equal(b->row_off, off, sizeof off);
	assert_true(b->keys[0] == st_read_key(0, "3", 1));
	assert_true(b->keys[2] == st_read_key(0, "3", 1));
	assert_true(b->key_val[1] == 0.5f);
	assert_true(b->key_val[2] == 25.0f);
	assert_true(b->key_val[5] == -2.0f);
	assert_true(b->keys[6] == st_read_key(0, "2", 1));
	st_batch_destroy(b);
}

/* The committed fixture tests/data/read/pm1.svm: -1/+1 labels, via a file. */
static void test_read_libsvm_pm1_fixture_file(void **state)
{
	(void)state;
	const char *td = tu_test_data();
	char path[1024];
	snprintf(path, sizeof path, "%s/read/pm1.svm", td);
	st_source_t src = libsvm_src(1, ST_BAD_FAIL);
	st_reader_t *r;
	assert_int_equal(st_reader_open(&r, &src, path), 0);
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, 8, 0, 1, 2), 0);
	assert_int_equal(st_reader_next(r, b, 8), 4);
	assert_int_equal(st_reader_next(r, b, 8), 0);
	static const float labels[4] = { 1, 0, 1, 0 };
	static const uint32_t off[5] = { 0, 2, 3, 4, 6 };
	assert_memory_equal(b->labels, labels, sizeof labels);
	assert_memory_equal(b->row_off, off, sizeof off);
	assert_true(b->keys[0] == b->keys[3]);      /* idx 1 in rows 1 and 3 */
	assert_true(b->key_val[5] == -1.5f);
	st_reader_close(r);
	st_batch_destroy(b);
}

static void check_bad(const char *line, const char *msg)
{
	char text[256], want[512], err[512];
	snprintf(text, sizeof text, "1 1:1\n%s\n0 2:1\n", line);
	st_source_t src = libsvm_src(4, ST_BAD_SKIP);
	st_batch_t *b;
	st_read_stats_t st;
	assert_int_equal(read_mem(&src, text, strlen(text), &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 2);
	assert_int_equal(st.bad, 1);
	assert_int_equal(st_batch_nkeys(b), 2);
	assert_true(b->keys[1] == st_read_key(0, "2", 1));
	snprintf(want, sizeof want, "mem.svm:2: %s", msg);
	assert_string_equal(err, want);
	st_batch_destroy(b);
	src.on_bad = ST_BAD_FAIL;
	assert_int_equal(read_mem(&src, text, strlen(text), &b, &st, err, sizeof err), ST_EBADREC);
	assert_string_equal(err, want);
	st_batch_destroy(b);
}

static void test_read_libsvm_bad_records(void **state)
{
	(void)state;
	check_bad("yes 1:1", "field 0: 'yes' is not a label (a number)");
	check_bad("1 1:1 7", "field 2: '7' is not idx:val or field:idx:val");
	check_bad("1 1:x", "field 1: '1:x' has a value that is not a number");
	check_bad("1 :1", "field 1: ':1' has an empty index");
	check_bad("1 4:1:1", "field 1: field 4 is not below the source's 4 slots");
	check_bad("1 -1:1:1", "field 1: '-1:1:1' has a field that is not a non-negative integer");
	check_bad("1 1:1:1:1", "field 1: '1:1:1:1' has more than two ':'");
	check_bad("1 1:1e99", "field 1: '1:1e99' has a value out of range");
	check_bad("", "empty line");
}

/* Many keys on one line grow the batch's key arrays beyond the start size. */
static void test_read_libsvm_long_line_grows_keys(void **state)
{
	(void)state;
	size_t cap = 200000, o = 0;
	char *text = malloc(cap);
	o += (size_t)sprintf(text, "1");
	for (int i = 0; i < 10000; i++)
		o += (size_t)sprintf(text + o, " %d:1", i);
	text[o++] = '\n';
	st_source_t src = libsvm_src(1, ST_BAD_FAIL);
	st_batch_t *b;
	st_read_stats_t st;
	char err[512];
	assert_int_equal(read_mem(&src, text, o, &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 1);
	assert_int_equal(st_batch_nkeys(b), 10000);
	assert_true(b->keys[9999] == st_read_key(0, "9999", 4));
	st_batch_destroy(b);
	free(text);
}

/* Several keys of one field (libffm fields repeated, or a libsvm line,
 * whose tokens are all slot 0): each token is one key of its slot, in line
 * order, a repeated index kept twice; a field with no token has none. */
static void test_read_libsvm_multi_key_fields(void **state)
{
	(void)state;
	st_source_t src = libsvm_src(3, ST_BAD_FAIL);
	static const char text[] = "1 2:7:1 0:5:0.5 2:9:2 2:7:1\n0 3:1 4:1\n";
	st_batch_t *b;
	st_read_stats_t st;
	char err[256];
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 2);
	assert_int_equal(b->row_off[1], 4);
	static const uint16_t slots[] = { 2, 0, 2, 2, 0, 0 };
	assert_memory_equal(b->key_slot, slots, sizeof slots);
	assert_true(b->keys[0] == st_read_key(2, "7", 1));
	assert_true(b->keys[2] == st_read_key(2, "9", 1));
	assert_true(b->keys[3] == b->keys[0]);
	assert_true(b->key_val[2] == 2.0f);
	assert_true(b->keys[4] == st_read_key(0, "3", 1));
	assert_true(b->keys[5] == st_read_key(0, "4", 1));
	/* slot 1 has no key in either row: nothing stands for it */
	assert_int_equal(st.missing_keys, 0);
	st_batch_destroy(b);
}

/* labels = 2: the first two tokens are the labels (> 0 is 1), then the
 * features; a line with one label token, or a feature where a label should
 * be, is a bad record at its line. */
static void test_read_libsvm_several_labels(void **state)
{
	(void)state;
	st_source_t src = libsvm_src(2, ST_BAD_SKIP);
	src.n_labels = 2;
	static const char text[] = "1 0 3:1 1:7:2\n-1 1 5:1\n0 1\n1 2:1\n1\n";
	st_batch_t *b;
	st_read_stats_t st;
	char err[256];
	assert_int_equal(read_mem(&src, text, sizeof text - 1, &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 3);
	assert_int_equal(st.bad, 2);
	static const float want[6] = { 1, 0, 0, 1, 0, 1 };
	assert_memory_equal(b->labels, want, sizeof want);
	assert_int_equal(b->row_off[1], 2);
	assert_int_equal(b->row_off[2], 3);
	assert_int_equal(b->row_off[3], 3);   /* "0 1": two labels, no feature */
	assert_true(b->key_val[1] == 2.0f && b->key_slot[1] == 1);
	st_batch_destroy(b);
	src.on_bad = ST_BAD_FAIL;
	static const char t2[] = "1 0 3:1\n1 2:1\n";
	assert_int_equal(read_mem(&src, t2, sizeof t2 - 1, &b, &st, err, sizeof err), ST_EBADREC);
	assert_non_null(strstr(err, "mem.svm:2"));
	assert_non_null(strstr(err, "several labels"));
	st_batch_destroy(b);
	static const char t3[] = "1\n";
	assert_int_equal(read_mem(&src, t3, sizeof t3 - 1, &b, &st, err, sizeof err), ST_EBADREC);
	assert_non_null(strstr(err, "has 1 labels, the source declares labels = 2"));
	st_batch_destroy(b);
}

int main(void)
{
	data_dir = getenv("ST_SHARED_DATA");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_libsvm_several_labels),
		cmocka_unit_test(test_read_libsvm_xlearn_libffm),
		cmocka_unit_test(test_read_libsvm_synth_libffm),
		cmocka_unit_test(test_read_libsvm_pm1_labels_and_values),
		cmocka_unit_test(test_read_libsvm_pm1_fixture_file),
		cmocka_unit_test(test_read_libsvm_bad_records),
		cmocka_unit_test(test_read_libsvm_multi_key_fields),
		cmocka_unit_test(test_read_libsvm_long_line_grows_keys),
	};
	return tu_exit(cmocka_run_group_tests(tests, NULL, NULL), sizeof tests / sizeof tests[0]);
}
