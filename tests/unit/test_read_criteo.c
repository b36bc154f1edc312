/*
 * test_read_criteo.c — the Criteo TSV reader on real Kaggle samples
 * (ST_SHARED_DATA, see its SOURCES.md), compressed copies, CRLF, small
 * buffers, and malformed lines (skip vs fail, file:line messages).
 *
 * Every behaviour tested on the real samples is also tested on a synthetic
 * file the test writes (read_fixtures.h, test_read_criteo_synth_*), so a
 * clone without ../shared/data still runs the reader: only the cases on the
 * real files skip there, each saying so.
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
#include <zlib.h>
#include <zstd.h>

#include "ops/read/read.h"
#include "ops/read/read_internal.h"
#include "runtime/err.h"
#include "read_fixtures.h"
#include "skip_util.h"

static const char *data_dir;
static char tmp_dir[256];

static const char *lapis = "criteo/Lapis-Hong_Wide-ResDNN/train.csv";

static char *path_in(const char *dir, const char *rel)
{
	static char buf[4][1024];
	static int i;
	char *p = buf[i++ & 3];
	snprintf(p, 1024, "%s/%s", dir, rel);
	return p;
}

static st_source_t criteo_src(int on_bad)
{
	st_source_t s;
	memset(&s, 0, sizeof s);
	s.format = (char *)"criteo";
	s.on_bad = on_bad;
	s.max_report = 5;
	s.limit = -1;
	s.n_dense = 13;
	s.n_slots = 26;
	return s;
}

/* Reads a whole file into one batch of capacity cap. Returns the last
 * st_reader_next result (0 at a clean end) and the stats. */
static int read_file(const st_source_t *src, const char *path, uint32_t cap,
		     st_batch_t **out, st_read_stats_t *st, char *err, size_t errlen)
{
	st_reader_t *r;
	int rc = st_reader_open(&r, src, path);
	if (rc < 0)
		return rc;
	rc = st_batch_create(out, cap, 13, 26, 64);
	assert_int_equal(rc, ST_OK);
	do {
		rc = st_reader_next(r, *out, 1000);
	} while (rc > 0);
	st_reader_stats(r, st);
	if (err)
		snprintf(err, errlen, "%s", st_reader_error(r));
	st_reader_close(r);
	return rc;
}

static void assert_same_batch(const st_batch_t *a, const st_batch_t *b)
{
	assert_int_equal(a->n, b->n);
	assert_memory_equal(a->labels, b->labels, sizeof(float) * a->n);
	assert_memory_equal(a->dense, b->dense, sizeof(float) * a->n * 13);
	assert_memory_equal(a->row_off, b->row_off, sizeof(uint32_t) * (a->n + 1));
	uint32_t nk = st_batch_nkeys(a);
	assert_memory_equal(a->keys, b->keys, sizeof(uint64_t) * nk);
	assert_memory_equal(a->key_slot, b->key_slot, sizeof(uint16_t) * nk);
	assert_memory_equal(a->key_val, b->key_val, sizeof(float) * nk);
}

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void test_read_criteo_lapis_rows_labels_values(void **state)
{
	(void)state;
	TU_NEED_SHARED(lapis);
	st_source_t src = criteo_src(ST_BAD_SKIP);
	st_batch_t *b;
	st_read_stats_t st;
	int rc = read_file(&src, path_in(data_dir, lapis), 8000, &b, &st, NULL, 0);
	assert_int_equal(rc, 0);
	assert_int_equal(b->n, 7200);
	assert_int_equal(st.rows, 7200);
	assert_int_equal(st.bad, 0);
	assert_int_equal(st.bytes, 1744474);  /* file size, SOURCES.md */
	/* Expected positives: awk -F'\t' '$1==1{c++} END{print c}' train.csv
	 * -> 1549 (1549 / 7200 = 0.2151, the rate in SOURCES.md). */
	int pos = 0;
	for (uint32_t i = 0; i < b->n; i++) {
		assert_true(b->labels[i] == 0.0f || b->labels[i] == 1.0f);
		pos += b->labels[i] == 1.0f;
	}
	assert_int_equal(pos, 1549);
	/* Non-empty C fields: awk -F'\t' '{for(i=15;i<=NF;i++) if($i!="") k++}
	 * END{print k}' -> 165865. */
	assert_int_equal(st_batch_nkeys(b), 165865);
	/* Sum of all I fields: awk -F'\t' '{for(i=2;i<=14;i++) s+=$i} END{printf
	 * "%.0f", s}' -> 120372775 (every value is exact in float). */
	double sum = 0;
	for (uint32_t i = 0; i < b->n * 13; i++)
		sum += b->dense[i];
	assert_true(sum == 120372775.0);

	/* Row 1: 0 1 1 5 0 1382 4 15 2 181 1 2 <empty> 2 68fd1e64 80e26c9b ... */
	static const float row0[13] = { 1, 1, 5, 0, 1382, 4, 15, 2, 181, 1, 2, 0, 2 };
	assert_true(b->labels[0] == 0.0f);
	assert_memory_equal(b->dense, row0, sizeof row0);
	assert_int_equal(b->row_off[1] - b->row_off[0], 25); /* C22 is empty */
	assert_true(b->keys[0] == st_read_key(0, "68fd1e64", 8));
	assert_int_equal(b->key_slot[0], 0);
	assert_true(b->key_val[0] == 1.0f);
	assert_true(b->keys[1] == st_read_key(1, "80e26c9b", 8));
	/* C23 (slot 22) follows the empty C22: slot numbers skip it. */
	assert_int_equal(b->key_slot[21], 22);
	assert_true(b->keys[21] == st_read_key(22, "3a171ecb", 8));
	/* Row 5 (line 5): 0 <e> -1 <e> <e> 12824 <e> 0 0 6 <e> 0 <e> <e> 05db9164 */
	static const float row4[13] = { 0, -1, 0, 0, 12824, 0, 0, 0, 6, 0, 0, 0, 0 };
	assert_memory_equal(b->dense + 4 * 13, row4, sizeof row4);
	assert_true(b->keys[b->row_off[4]] == st_read_key(0, "05db9164", 8));
	/* The same bytes in another slot give another key. */
	assert_true(st_read_key(0, "05db9164", 8) != st_read_key(1, "05db9164", 8));
	st_batch_destroy(b);
}

static void test_read_criteo_stripped_tabs_no_final_newline(void **state)
{
	(void)state;
	TU_NEED_SHARED("criteo/jqsl2012_pytorch-fm/train.txt");
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_batch_t *b;
	st_read_stats_t st;
	int rc = read_file(&src, path_in(data_dir, "criteo/jqsl2012_pytorch-fm/train.txt"),
			   2000, &b, &st, NULL, 0);
	assert_int_equal(rc, 0);
	assert_int_equal(b->n, 1000);
	assert_int_equal(st.bad, 0);
	assert_int_equal(st.bytes, 240110);
	int pos = 0;
	for (uint32_t i = 0; i < b->n; i++)
		pos += b->labels[i] == 1.0f;
	assert_int_equal(pos, 205);  /* awk -F'\t' '$1==1' train.txt | wc -l */
	assert_int_equal(st_batch_nkeys(b), 22873);  /* non-empty C fields, awk as above */
	st_batch_destroy(b);
}

static void test_read_criteo_paddle_part0(void **state)
{
	(void)state;
	TU_NEED_SHARED("criteo/PaddlePaddle_PaddleRec/part-0");
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_batch_t *b;
	st_read_stats_t st;
	int rc = read_file(&src, path_in(data_dir, "criteo/PaddlePaddle_PaddleRec/part-0"),
			   128, &b, &st, NULL, 0);
	assert_int_equal(rc, 0);
	assert_int_equal(b->n, 100);
	int pos = 0;
	for (uint32_t i = 0; i < b->n; i++)
		pos += b->labels[i] == 1.0f;
	assert_int_equal(pos, 29);  /* awk: 29 positives (pos 0.29) */
	assert_int_equal(st_batch_nkeys(b), 2300);
	st_batch_destroy(b);
}

/* A capacity smaller than the file: batches fill exactly, nothing is lost. */
static void test_read_criteo_batches_split_exactly(void **state)
{
	(void)state;
	TU_NEED_SHARED(lapis);
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_reader_t *r;
	assert_int_equal(st_reader_open(&r, &src, path_in(data_dir, lapis)), 0);
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, 1000, 13, 26, 16), 0);
	uint64_t total = 0;
	int calls = 0;
	for (;;) {
		st_batch_clear(b);
		int n = st_reader_next(r, b, 700);
		assert_true(n >= 0);
		if (n == 0)
			break;
		assert_true(n == 700 || total + (uint64_t)n == 7200);
		total += (uint64_t)n;
		calls++;
	}
	assert_int_equal(total, 7200);
	assert_int_equal(calls, 11);
	st_batch_destroy(b);
	st_reader_close(r);
}

static void gzip_file(const char *src, const char *dst)
{
	size_t len;
	char *buf = slurp(src, &len);
	gzFile g = gzopen(dst, "wb6");
	assert_non_null(g);
	/* Two gzip members, as `cat a.gz b.gz` makes: the reader must go on. */
	size_t half = len / 2;
	assert_int_equal(gzwrite(g, buf, (unsigned)half), (int)half);
	assert_int_equal(gzclose(g), Z_OK);
	g = gzopen(dst, "ab6");
	assert_int_equal(gzwrite(g, buf + half, (unsigned)(len - half)), (int)(len - half));
	assert_int_equal(gzclose(g), Z_OK);
	free(buf);
}

static void zstd_file(const char *src, const char *dst)
{
	size_t len;
	char *buf = slurp(src, &len);
	size_t cap = ZSTD_compressBound(len);
	char *out = malloc(cap);
	size_t n = ZSTD_compress(out, cap, buf, len, 3);
	assert_false(ZSTD_isError(n));
	write_file(dst, out, n);
	free(out);
	free(buf);
}

static void test_read_criteo_gzip_zstd_identical(void **state)
{
	(void)state;
	TU_NEED_SHARED(lapis);
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_batch_t *plain, *gz, *zst;
	st_read_stats_t st;
	const char *p = path_in(data_dir, lapis);
	char gzp[512], zsp[512];
	snprintf(gzp, sizeof gzp, "%s/train.tsv.gz", tmp_dir);
	snprintf(zsp, sizeof zsp, "%s/train.tsv.zst", tmp_dir);
	gzip_file(p, gzp);
	zstd_file(p, zsp);
	assert_int_equal(read_file(&src, p, 8000, &plain, &st, NULL, 0), 0);
	assert_int_equal(read_file(&src, gzp, 8000, &gz, &st, NULL, 0), 0);
	assert_int_equal(st.bytes, 1744474);  /* uncompressed bytes */
	assert_int_equal(read_file(&src, zsp, 8000, &zst, &st, NULL, 0), 0);
	assert_int_equal(st.rows, 7200);
	assert_same_batch(plain, gz);
	assert_same_batch(plain, zst);
	st_batch_destroy(plain);
	st_batch_destroy(gz);
	st_batch_destroy(zst);
}

static void test_read_criteo_truncated_gzip_is_an_error(void **state)
{
	(void)state;
	TU_NEED_SHARED("criteo/PaddlePaddle_PaddleRec/part-0");
	st_source_t src = criteo_src(ST_BAD_FAIL);
	char gzp[512], cut[512];
	snprintf(gzp, sizeof gzp, "%s/t.tsv.gz", tmp_dir);
	snprintf(cut, sizeof cut, "%s/cut.tsv.gz", tmp_dir);
	gzip_file(path_in(data_dir, "criteo/PaddlePaddle_PaddleRec/part-0"), gzp);
	size_t len;
	char *buf = slurp(gzp, &len);
	write_file(cut, buf, len / 2);
	free(buf);
	st_batch_t *b;
	st_read_stats_t st;
	char err[512];
	int rc = read_file(&src, cut, 200, &b, &st, err, sizeof err);
	assert_int_equal(rc, ST_EIO);
	assert_non_null(strstr(err, "cut.tsv.gz: truncated gzip data"));
	st_batch_destroy(b);
}

/* CRLF line ends and tiny buffers (many refills, lines split across them)
 * give the same rows as the plain file. */
static void test_read_criteo_crlf_and_small_buffers(void **state)
{
	(void)state;
	TU_NEED_SHARED(lapis);
	st_source_t src = criteo_src(ST_BAD_FAIL);
	const char *p = path_in(data_dir, lapis);
	st_batch_t *ref, *b;
	st_read_stats_t st;
	assert_int_equal(read_file(&src, p, 8000, &ref, &st, NULL, 0), 0);

	size_t len;
	char *buf = slurp(p, &len);
	char *crlf = malloc(len * 2);
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == '\n')
			crlf[o++] = '\r';
		crlf[o++] = buf[i];
	}
	char cp[512];
	snprintf(cp, sizeof cp, "%s/crlf.tsv", tmp_dir);
	write_file(cp, crlf, o);
	assert_int_equal(read_file(&src, cp, 8000, &b, &st, NULL, 0), 0);
	assert_same_batch(ref, b);
	st_batch_destroy(b);

	static const size_t bufs[] = { 512, 1000, 4096 };
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
		st_reader_t *r;
		assert_int_equal(st__reader_open_mem(&r, &src, "mem", buf, len,
						     bufs[i], 400), 0);
		assert_int_equal(st_batch_create(&b, 8000, 13, 26, 64), 0);
		while ((st_reader_next(r, b, 8000)) > 0)
			;
		st_reader_stats(r, &st);
		assert_int_equal(st.bad, 0);
		assert_same_batch(ref, b);
		st_reader_close(r);
		st_batch_destroy(b);
	}
	free(crlf);
	free(buf);
	st_batch_destroy(ref);
}

/* One good line, as in the Kaggle file. */
static const char good[] =
	"1\t5\t-2\t\t7\t\t\t\t\t\t\t\t\t9\ta\tb\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\tz";

struct bad_case {
	const char *line;   /* NULL: built in code */
	size_t len;
	const char *msg;    /* expected text after "path:2: " */
};

/* Writes good \n bad \n good and reads it under both policies. */
static void check_bad(const char *bad, size_t blen, const char *msg, const char *name)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", tmp_dir, name);
	size_t glen = strlen(good);
	char *buf = malloc(2 * glen + blen + 3);
	memcpy(buf, good, glen);
	buf[glen] = '\n';
	memcpy(buf + glen + 1, bad, blen);
	buf[glen + 1 + blen] = '\n';
	memcpy(buf + glen + 2 + blen, good, glen);
	write_file(p, buf, 2 * glen + blen + 2);
	free(buf);

	st_source_t src = criteo_src(ST_BAD_SKIP);
	st_batch_t *b;
	st_read_stats_t st;
	char err[512], want[600];
	assert_int_equal(read_file(&src, p, 10, &b, &st, err, sizeof err), 0);
	assert_int_equal(b->n, 2);
	assert_int_equal(st.rows, 2);
	assert_int_equal(st.bad, 1);
	/* The bad line left nothing behind: both rows are the good line. */
	assert_int_equal(b->row_off[1], 3);
	assert_int_equal(b->row_off[2], 6);
	assert_true(b->dense[13 + 1] == -2.0f && b->labels[1] == 1.0f);
	snprintf(want, sizeof want, "%s:2: %s", p, msg);
	assert_string_equal(err, want);
	st_batch_destroy(b);

	src.on_bad = ST_BAD_FAIL;
	assert_int_equal(read_file(&src, p, 10, &b, &st, err, sizeof err), ST_EBADREC);
	assert_int_equal(b->n, 1);
	assert_int_equal(st.bad, 1);
	assert_string_equal(err, want);
	st_batch_destroy(b);
}

static void test_read_criteo_bad_records_skip_and_fail(void **state)
{
	(void)state;
	check_bad("2\t1", 3, "field 0 (label): '2' is not a label (0 or 1)", "label.tsv");
	check_bad("0\t1\t2\tabc\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13", 28,
		  "field 3 (I3): 'abc' is not an integer", "int.tsv");
	check_bad("0\t1\t2\t3.5\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13", 28,
		  "field 3 (I3): '3.5' is not an integer", "float.tsv");
	check_bad("0\t-", 3, "field 1 (I1): '-' is not an integer", "minus.tsv");
	check_bad("0\t1234567890123456789", 21,
		  "field 1 (I1): '1234567890123456789' is out of range", "range.tsv");
	check_bad("0\t1\t2", 5, "3 fields, expected 14 to 40", "short.tsv");
	check_bad("", 0, "empty line", "empty.tsv");
	char many[200];
	size_t o = 0;
	many[o++] = '1';
	for (int i = 0; i < 40; i++)
		many[o++] = '\t';
	check_bad(many, o, "41 fields, expected 14 to 40", "41.tsv");
	/* NUL bytes inside an integer field */
	static const char nul[] = "0\t1\t2\x00\x00" "3";
	check_bad(nul, sizeof nul - 1, "field 2 (I2): '2\\x00\\x003' is not an integer", "nul.tsv");
	/* Binary junk without newline or tab */
	char junk[300];
	for (int i = 0; i < 300; i++)
		junk[i] = (char)((i * 37 + 11) & 0xff);
	for (int i = 0; i < 300; i++)
		if (junk[i] == '\n' || junk[i] == '\t' || junk[i] == '\r')
			junk[i] = 'x';
	check_bad(junk, sizeof junk, "field 0 (label): '\\x0b0Uz\\x9f\\xc4\\xe9\\x0e3X}\\xa2\\xc7\\xec\\x116[\\x80\\xa5\\xca\\xef\\x149^\\x83\\xa8\\xcd\\xf2\\x17<a\\x86\\xab\\xd0\\xf5\\x1a?d\\x89\\xae...' is not a label (0 or 1)",
		  "junk.tsv");
	/* An overlong line (over the 1 MiB cap) is one bad record. */
	size_t big = ((size_t)1 << 20) + 100;
	char *huge = malloc(big);
	memset(huge, '7', big);
	huge[0] = '0';
	huge[1] = '\t';
	check_bad(huge, big, "line longer than 1048576 bytes", "huge.tsv");
	free(huge);
}

/* The committed fixture tests/data/read/criteo_bad.tsv: 3 good rows, 6 bad. */
static void test_read_criteo_fixture_counts(void **state)
{
	(void)state;
	const char *td = tu_test_data();
	st_source_t src = criteo_src(ST_BAD_SKIP);
	st_batch_t *b;
	st_read_stats_t st;
	char err[512];
	assert_int_equal(read_file(&src, path_in(td, "read/criteo_bad.tsv"), 20, &b,
				   &st, err, sizeof err), 0);
	assert_int_equal(st.rows, 3);
	assert_int_equal(st.bad, 6);
	assert_non_null(strstr(err, "criteo_bad.tsv:9: "));
	st_batch_destroy(b);
}

/* Only the first max_report bad records are logged, then one line saying
 * the rest are counted only. stderr is captured in a file to count lines. */
static void test_read_criteo_report_limit(void **state)
{
	(void)state;
	const char *td = tu_test_data();
	char logp[512];
	snprintf(logp, sizeof logp, "%s/stderr.log", tmp_dir);
	fflush(stderr);
	int saved = dup(2);
	FILE *lf = fopen(logp, "w");
	assert_non_null(lf);
	dup2(fileno(lf), 2);
	st_source_t src = criteo_src(ST_BAD_SKIP);
	src.max_report = 2;
	st_batch_t *b;
	st_read_stats_t st;
	int rc = read_file(&src, path_in(td, "read/criteo_bad.tsv"), 20, &b, &st, NULL, 0);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	fclose(lf);
	assert_int_equal(rc, 0);
	assert_int_equal(st.bad, 6);
	st_batch_destroy(b);
	size_t len;
	char *log = slurp(logp, &len);
	log = realloc(log, len + 1);
	log[len] = 0;
	int lines = 0;
	for (size_t i = 0; i < len; i++)
		lines += log[i] == '\n';
	assert_int_equal(lines, 3);
	assert_non_null(strstr(log, "criteo_bad.tsv:2: field 0 (label): '2' is not a label (0 or 1)\n"));
	assert_non_null(strstr(log, "criteo_bad.tsv:3: field 1 (I1): 'x' is not an integer\n"));
	assert_non_null(strstr(log, "criteo_bad.tsv: more bad records; further ones are counted only\n"));
	assert_null(strstr(log, "criteo_bad.tsv:5:"));
	free(log);
}

static void test_read_criteo_open_errors(void **state)
{
	(void)state;
	TU_NEED_SHARED(lapis);
	st_source_t src = criteo_src(ST_BAD_SKIP);
	st_reader_t *r = NULL;
	char p[512];
	snprintf(p, sizeof p, "%s/does-not-exist.tsv", tmp_dir);
	assert_int_equal(st_reader_open(&r, &src, p), ST_ENOENT);
	src.format = (char *)"parquet";
	assert_int_equal(st_reader_open(&r, &src, path_in(data_dir, lapis)), ST_EFORMAT);
	src = criteo_src(ST_BAD_SKIP);
	src.n_dense = 12;
	assert_int_equal(st_reader_open(&r, &src, path_in(data_dir, lapis)), ST_EINVAL);
}

static void test_read_criteo_number_parsers(void **state)
{
	(void)state;
	float f;
	int64_t v;
	assert_int_equal(st__read_float("260.0", 5, &f), 0);
	assert_true(f == 260.0f);
	assert_int_equal(st__read_float("-1.5e2", 6, &f), 0);
	assert_true(f == -150.0f);
	assert_int_equal(st__read_float(".5", 2, &f), 0);
	assert_true(f == 0.5f);
	assert_int_equal(st__read_float("0.3651", 6, &f), 0);
	assert_true(fabsf(f - 0.3651f) <= 1e-7f);
	assert_int_equal(st__read_float("+1", 2, &f), 0);
	assert_true(f == 1.0f);
	assert_int_equal(st__read_float("1e39", 4, &f), ST_ERANGE);
	assert_int_equal(st__read_float("1e-500", 6, &f), 0);
	assert_true(f == 0.0f);
	assert_int_equal(st__read_float("", 0, &f), ST_EINVAL);
	assert_int_equal(st__read_float(".", 1, &f), ST_EINVAL);
	assert_int_equal(st__read_float("1e", 2, &f), ST_EINVAL);
	assert_int_equal(st__read_float("1x", 2, &f), ST_EINVAL);
	assert_int_equal(st__read_float("nan", 3, &f), ST_EINVAL);
	assert_int_equal(st__read_int("-42", 3, &v), 0);
	assert_int_equal(v, -42);
	assert_int_equal(st__read_int("-", 1, &v), ST_EINVAL);
	assert_int_equal(st__read_int("4 ", 2, &v), ST_EINVAL);
}

/* ---- the same behaviours on a synthetic file (read_fixtures.h) ---- */

#define SYN_ROWS 3000
static tf_criteo_t syn, syn_strip;
static char syn_path[512], syn_strip_path[512];

/* Rows, labels, dense values (empty = 0, negatives), keys and their slots
 * (an empty C field's slot is skipped), stats: all of the file. */
static void test_read_criteo_synth_rows_labels_values(void **state)
{
	(void)state;
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_batch_t *b;
	st_read_stats_t st;
	assert_int_equal(read_file(&src, syn_path, SYN_ROWS + 10, &b, &st, NULL, 0), 0);
	assert_int_equal(st.rows, SYN_ROWS);
	assert_int_equal(st.bad, 0);
	assert_int_equal(st.bytes, syn.bytes);
	tf_criteo_assert_batch(&syn, b);
	int pos = 0;
	double sum = 0;
	for (uint32_t i = 0; i < b->n; i++)
		pos += b->labels[i] == 1.0f;
	for (uint32_t i = 0; i < b->n * 13; i++)
		sum += b->dense[i];
	assert_int_equal(pos, syn.pos);
	assert_true(sum == syn.dense_sum);
	assert_true(syn.pos > 500 && syn.n_keys > 50000);  /* the fixture has substance */
	st_batch_destroy(b);
}

/* Trailing empty C fields stripped (14 to 39 fields) and no final newline:
 * the same rows. */
static void test_read_criteo_synth_stripped_tabs_no_final_newline(void **state)
{
	(void)state;
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_batch_t *b;
	st_read_stats_t st;
	assert_int_equal(read_file(&src, syn_strip_path, SYN_ROWS + 10, &b, &st, NULL, 0), 0);
	assert_int_equal(st.bad, 0);
	assert_int_equal(st.bytes, syn_strip.bytes);
	assert_true(syn_strip.bytes < syn.bytes);
	tf_criteo_assert_batch(&syn, b);
	st_batch_destroy(b);
}

static void test_read_criteo_synth_batches_split_exactly(void **state)
{
	(void)state;
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_reader_t *r;
	assert_int_equal(st_reader_open(&r, &src, syn_path), 0);
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, 1000, 13, 26, 16), 0);
	uint64_t total = 0;
	int calls = 0;
	for (;;) {
		st_batch_clear(b);
		int n = st_reader_next(r, b, 700);
		assert_true(n >= 0);
		if (n == 0)
			break;
		assert_true(n == 700 || total + (uint64_t)n == SYN_ROWS);
		total += (uint64_t)n;
		calls++;
	}
	assert_int_equal(total, SYN_ROWS);
	assert_int_equal(calls, 5);   /* 4 x 700 + 200 */
	st_batch_destroy(b);
	st_reader_close(r);
}

static void test_read_criteo_synth_gzip_zstd_identical(void **state)
{
	(void)state;
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_batch_t *gz, *zst;
	st_read_stats_t st;
	char gzp[600], zsp[600];
	snprintf(gzp, sizeof gzp, "%s/synth.tsv.gz", tmp_dir);
	snprintf(zsp, sizeof zsp, "%s/synth.tsv.zst", tmp_dir);
	gzip_file(syn_path, gzp);   /* two gzip members */
	zstd_file(syn_path, zsp);
	assert_int_equal(read_file(&src, gzp, SYN_ROWS + 10, &gz, &st, NULL, 0), 0);
	assert_int_equal(st.bytes, syn.bytes);   /* uncompressed bytes */
	assert_int_equal(read_file(&src, zsp, SYN_ROWS + 10, &zst, &st, NULL, 0), 0);
	assert_int_equal(st.rows, SYN_ROWS);
	tf_criteo_assert_batch(&syn, gz);
	tf_criteo_assert_batch(&syn, zst);
	st_batch_destroy(gz);
	st_batch_destroy(zst);
}

static void test_read_criteo_synth_truncated_gzip_is_an_error(void **state)
{
	(void)state;
	st_source_t src = criteo_src(ST_BAD_FAIL);
	char gzp[600], cut[600];
	snprintf(gzp, sizeof gzp, "%s/syn-t.tsv.gz", tmp_dir);
	snprintf(cut, sizeof cut, "%s/syn-cut.tsv.gz", tmp_dir);
	gzip_file(syn_path, gzp);
	size_t len;
	char *buf = slurp(gzp, &len);
	write_file(cut, buf, len / 2);
	free(buf);
	st_batch_t *b;
	st_read_stats_t st;
	char err[512];
	int rc = read_file(&src, cut, SYN_ROWS + 10, &b, &st, err, sizeof err);
	assert_int_equal(rc, ST_EIO);
	assert_non_null(strstr(err, "syn-cut.tsv.gz: truncated gzip data"));
	assert_true(b->n < SYN_ROWS);
	st_batch_destroy(b);
}

static void test_read_criteo_synth_crlf_and_small_buffers(void **state)
{
	(void)state;
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_batch_t *b;
	st_read_stats_t st;
	char cp[600];
	snprintf(cp, sizeof cp, "%s/syn-crlf.tsv", tmp_dir);
	tf_criteo_write(cp, SYN_ROWS, 1, TF_CRLF, NULL);
	assert_int_equal(read_file(&src, cp, SYN_ROWS + 10, &b, &st, NULL, 0), 0);
	tf_criteo_assert_batch(&syn, b);
	st_batch_destroy(b);

	size_t len;
	char *buf = slurp(syn_path, &len);
	static const size_t bufs[] = { 512, 1000, 4096 };
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
		st_reader_t *r;
		assert_int_equal(st__reader_open_mem(&r, &src, "mem", buf, len, bufs[i], 400), 0);
		assert_int_equal(st_batch_create(&b, SYN_ROWS + 10, 13, 26, 64), 0);
		while ((st_reader_next(r, b, SYN_ROWS + 10)) > 0)
			;
		st_reader_stats(r, &st);
		assert_int_equal(st.bad, 0);
		tf_criteo_assert_batch(&syn, b);
		st_reader_close(r);
		st_batch_destroy(b);
	}
	free(buf);
}

static void test_read_criteo_synth_open_errors(void **state)
{
	(void)state;
	st_source_t src = criteo_src(ST_BAD_SKIP);
	st_reader_t *r = NULL;
	src.format = (char *)"parquet";
	assert_int_equal(st_reader_open(&r, &src, syn_path), ST_EFORMAT);
	src = criteo_src(ST_BAD_SKIP);
	src.n_dense = 12;
	assert_int_equal(st_reader_open(&r, &src, syn_path), ST_EINVAL);
	src = criteo_src(ST_BAD_SKIP);
	src.n_slots = 27;
	assert_int_equal(st_reader_open(&r, &src, syn_path), ST_EINVAL);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmp_dir, sizeof tmp_dir, "/tmp/st-test-read-criteo-XXXXXX");
	if (!mkdtemp(tmp_dir))
		return -1;
	snprintf(syn_path, sizeof syn_path, "%s/synth.tsv", tmp_dir);
	snprintf(syn_strip_path, sizeof syn_strip_path, "%s/synth-strip.tsv", tmp_dir);
	tf_criteo_write(syn_path, SYN_ROWS, 1, 0, &syn);
	tf_criteo_write(syn_strip_path, SYN_ROWS, 1, TF_STRIP | TF_NO_FINAL_NL, &syn_strip);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	tf_criteo_free(&syn);
	tf_criteo_free(&syn_strip);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* missing = key: an empty C field, and one a stripped line leaves out,
 * get the slot's missing key; the default (drop) gives none. */
static void test_read_criteo_missing_key(void **state)
{
	(void)state;
	char line[512];
	int n = snprintf(line, sizeof line, "1");
	for (int i = 1; i <= 13; i++)
		n += snprintf(line + n, sizeof line - (size_t)n, "\t%d", i);
	/* C1 = "ab", C2 empty, C3 = "cd", and the line ends there */
	n += snprintf(line + n, sizeof line - (size_t)n, "\tab\t\tcd\n");
	st_source_t src = criteo_src(ST_BAD_FAIL);
	st_reader_t *r;
	st_batch_t *b;
	st_read_stats_t st;
	for (int miss = 0; miss < 2; miss++) {
		src.missing = miss ? ST_MISSING_KEY : ST_MISSING_DROP;
		assert_int_equal(st__reader_open_mem(&r, &src, "m.tsv", line, (size_t)n, 0, 0), 0);
		assert_int_equal(st_batch_create(&b, 4, 13, 26, 2), 0);
		assert_int_equal(st_reader_next(r, b, 4), 1);
		st_reader_stats(r, &st);
		st_reader_close(r);
		assert_int_equal(st_batch_nkeys(b), miss ? 26 : 2);
		assert_true(b->keys[0] == st_read_key(0, "ab", 2));
		if (miss) {
			assert_true(b->keys[1] == st_read_missing_key(1));
			assert_true(b->keys[2] == st_read_key(2, "cd", 2));
			assert_true(b->keys[25] == st_read_missing_key(25));
			assert_int_equal(b->key_slot[25], 25);
			assert_int_equal(st.missing_keys, 24);
		} else {
			assert_int_equal(st.missing_keys, 0);
		}
		st_batch_destroy(b);
	}
}

/* dense_missing = indicator: dense[13 + j] is 1 where I(j+1) was empty
 * (n_dense 26); values stay where they were. */
static void test_read_criteo_dense_indicator(void **state)
{
	(void)state;
	static const char line[] = "1\t5\t\t-2\t\t\t\t\t\t\t\t\t\t7\tab\n";
	st_source_t src = criteo_src(ST_BAD_FAIL);
	src.dense_indicator = 1;
	st_reader_t *r;
	st_batch_t *b;
	assert_int_equal(st__reader_open_mem(&r, &src, "m.tsv", line, sizeof line - 1, 0, 0),
			 ST_EINVAL);       /* n_dense must be 26 */
	src.n_dense = 26;
	assert_int_equal(st__reader_open_mem(&r, &src, "m.tsv", line, sizeof line - 1, 0, 0), 0);
	assert_int_equal(st_batch_create(&b, 4, 26, 26, 2), 0);
	assert_int_equal(st_reader_next(r, b, 4), 1);
	st_reader_close(r);
	static const float want[26] = { 5, 0, -2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7,
					0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0 };
	assert_memory_equal(b->dense, want, sizeof want);
	st_batch_destroy(b);
}

int main(void)
{
	data_dir = getenv("ST_SHARED_DATA");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_criteo_lapis_rows_labels_values),
		cmocka_unit_test(test_read_criteo_stripped_tabs_no_final_newline),
		cmocka_unit_test(test_read_criteo_paddle_part0),
		cmocka_unit_test(test_read_criteo_batches_split_exactly),
		cmocka_unit_test(test_read_criteo_gzip_zstd_identical),
		cmocka_unit_test(test_read_criteo_truncated_gzip_is_an_error),
		cmocka_unit_test(test_read_criteo_crlf_and_small_buffers),
		cmocka_unit_test(test_read_criteo_bad_records_skip_and_fail),
		cmocka_unit_test(test_read_criteo_missing_key),
		cmocka_unit_test(test_read_criteo_dense_indicator),
		cmocka_unit_test(test_read_criteo_fixture_counts),
		cmocka_unit_test(test_read_criteo_report_limit),
		cmocka_unit_test(test_read_criteo_open_errors),
		cmocka_unit_test(test_read_criteo_number_parsers),
		cmocka_unit_test(test_read_criteo_synth_rows_labels_values),
		cmocka_unit_test(test_read_criteo_synth_stripped_tabs_no_final_newline),
		cmocka_unit_test(test_read_criteo_synth_batches_split_exactly),
		cmocka_unit_test(test_read_criteo_synth_gzip_zstd_identical),
		cmocka_unit_test(test_read_criteo_synth_truncated_gzip_is_an_error),
		cmocka_unit_test(test_read_criteo_synth_crlf_and_small_buffers),
		cmocka_unit_test(test_read_criteo_synth_open_errors),
	};
	return tu_exit(cmocka_run_group_tests(tests, setup, teardown),
		       sizeof tests / sizeof tests[0]);
}
