/* test_rows.c — the sparse row file: round trips (array writer, builder,
 * streaming and whole-file readers, deltas), argument checks, truncation at
 * every byte, a flipped bit at every byte, crafted bad headers, a full disk,
 * and the pure-Python reader of docs/formats.md; the builder empty and
 * reused (reset, reserve); files larger than one staging buffer (dumpio's
 * writer thread) hitting the file size limit or a full disk; direct I/O,
 * aligned, and its fallback when the file system refuses it; the widest
 * rows read in bounded memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "dump_util.h"
#include "skip_util.h"
#include "ops/dump/rows.h"
#include "runtime/err.h"

static char *dir;

static int setup(void **state)
{
	(void)state;
	dir = tu_mkdtemp("rows");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	st__dumpio_rmtree(dir);
	free(dir);
	return 0;
}

/* Deterministic content: row i has key i * 1000003 + 7, last_step i,
 * freq 2i + 1 and floats (key % 1000) / 4 + j. The Python check uses the
 * same formulas. */
static uint64_t key_of(size_t i)
{
	return (uint64_t)i * 1000003u + 7u;
}

static float val_of(uint64_t key, size_t j)
{
	return (float)(key % 1000) * 0.25f + (float)j;
}

typedef struct table {
	size_t n, nf;
	float *vals;
	st_rows_row_t *rows;
} table_t;

/* n rows of nf floats, presented in a scrambled order. */
static void make_table(table_t *t, size_t n, size_t nf)
{
	t->n = n;
	t->nf = nf;
	t->vals = malloc((n ? n : 1) * nf * sizeof(float));
	t->rows = malloc((n ? n : 1) * sizeof *t->rows);
	for (size_t i = 0; i < n; i++) {
		size_t r = (i * 7919) % n;   /* a permutation: 7919 is prime, n is not its multiple */
		uint64_t k = key_of(r);
		for (size_t j = 0; j < nf; j++)
			t->vals[i * nf + j] = val_of(k, j);
		t->rows[i] = (st_rows_row_t){ k, (uint32_t)r, (uint32_t)(2 * r + 1), t->vals + i * nf };
	}
}

static void free_table(table_t *t)
{
	free(t->vals);
	free(t->rows);
}

static void check_file(const st_rows_file_t *f, size_t n, size_t nf)
{
	assert_int_equal(f->info.n_rows, n);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(f->keys[i], key_of(i));
		assert_int_equal(f->last_step[i], i);
		assert_int_equal(f->freq[i], 2 * i + 1);
		for (size_t j = 0; j < nf; j++)
			assert_true(f->vals[i * nf + j] == val_of(key_of(i), j));
	}
}

static char *write_small(const char *name, int delta)
{
	table_t t;
	make_table(&t, 5, 3);
	st_rows_info_t info = { .table_id = 9, .dim = 2, .state_dim = 1,
				.flags = delta ? ST_ROWS_DELTA : 0 };
	uint64_t del[2] = { 99, 4 };
	char *p = tu_path(dir, name);
	char err[512] = "";
	int rc = st_rows_write(p, &info, t.rows, t.n, delta ? del : NULL, delta ? 2 : 0, NULL,
			       err, sizeof err);
	if (rc)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(rc, ST_OK);
	free_table(&t);
	return p;
}

static void test_rows_round_trip_full(void **state)
{
	(void)state;
	table_t t;
	make_table(&t, 1000, 12);
	st_rows_info_t info = { .table_id = 3, .dim = 8, .state_dim = 4 };
	char *p = tu_path(dir, "full.rows");
	st_dumpio_sum_t sum;
	char err[512] = "";
	assert_int_equal(st_rows_write(p, &info, t.rows, t.n, NULL, 0, &sum, err, sizeof err), ST_OK);
	assert_int_equal(sum.bytes, ST_ROWS_HEADER_SIZE + 1000 * (16 + 48) + ST_ROWS_FOOTER_SIZE);
	st_dumpio_sum_t again;
	assert_int_equal(st__dumpio_hash_file(p, &again, NULL, 0), ST_OK);
	assert_int_equal(again.xxh3, sum.xxh3);

	st_rows_file_t *f;
	assert_int_equal(st_rows_read(p, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->info.version, ST_ROWS_VERSION);
	assert_int_equal(f->info.flags, 0);
	assert_int_equal(f->info.table_id, 3);
	assert_int_equal(f->info.dim, 8);
	assert_int_equal(f->info.state_dim, 4);
	assert_int_equal(f->info.n_deleted, 0);
	check_file(f, 1000, 12);
	st_rows_file_free(f);

	/* streaming: same rows, in key order, then 0 */
	st_rows_reader_t *r;
	assert_int_equal(st_rows_reader_open(p, &r, err, sizeof err), ST_OK);
	assert_int_equal(st_rows_reader_info(r)->n_rows, 1000);
	st_rows_row_t row;
	size_t i = 0;
	int rc;
	while ((rc = st_rows_reader_next(r, &row)) == 1) {
		assert_int_equal(row.key, key_of(i));
		assert_true(row.vals[11] == val_of(key_of(i), 11));
		assert_int_equal((uintptr_t)row.vals % 4, 0);
		i++;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(i, 1000);
	assert_int_equal(st_rows_reader_next(r, &row), 0);
	size_t nd = 7;
	st_rows_reader_deleted(r, &nd);
	assert_int_equal(nd, 0);
	assert_string_equal(st_rows_reader_error(r), "");
	st_rows_reader_close(r);
	free_table(&t);
	free(p);
}

static void test_rows_round_trip_delta_and_empty(void **state)
{
	(void)state;
	char *p = write_small("delta.rows", 1);
	st_rows_file_t *f;
	char err[512] = "";
	assert_int_equal(st_rows_read(p, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->info.flags, ST_ROWS_DELTA);
	check_file(f, 5, 3);
	assert_int_equal(f->info.n_deleted, 2);
	assert_int_equal(f->deleted[0], 4);   /* sorted by the writer */
	assert_int_equal(f->deleted[1], 99);
	st_rows_file_free(f);
	free(p);

	/* an empty table is a valid file */
	p = tu_path(dir, "empty.rows");
	st_rows_info_t info = { .dim = 1 };
	assert_int_equal(st_rows_write(p, &info, NULL, 0, NULL, 0, NULL, err, sizeof err), ST_OK);
	assert_int_equal(st_rows_read(p, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->info.n_rows, 0);
	st_rows_file_free(f);
	free(p);
}

/* The builder copies rows (so the source may change after add) and writes
 * the same bytes as the array writer; many rows span several chunks. */
static void test_rows_builder_matches_array_writer(void **state)
{
	(void)state;
	enum { N = 120000, NF = 20 };
	table_t t;
	make_table(&t, N, NF);
	st_rows_info_t info = { .table_id = 1, .dim = 16, .state_dim = 4, .flags = ST_ROWS_DELTA };
	st_rows_writer_t *w;
	assert_int_equal(st_rows_writer_create(&w, &info), ST_OK);
	float scratch[NF];
	for (size_t i = 0; i < N; i++) {
		memcpy(scratch, t.rows[i].vals, sizeof scratch);
		assert_int_equal(st_rows_writer_add(w, t.rows[i].key, t.rows[i].last_step,
						    t.rows[i].freq, scratch), ST_OK);
		memset(scratch, 0xff, sizeof scratch);
	}
	assert_int_equal(st_rows_writer_delete(w, 5), ST_OK);
	assert_int_equal(st_rows_writer_count(w), N);
	char *a = tu_path(dir, "built.rows"), *b = tu_path(dir, "array.rows");
	char err[512] = "";
	assert_int_equal(st_rows_writer_finish(w, a, NULL, err, sizeof err), ST_OK);
	st_rows_writer_destroy(w);
	uint64_t del = 5;
	assert_int_equal(st_rows_write(b, &info, t.rows, N, &del, 1, NULL, err, sizeof err), ST_OK);
	size_t la, lb;
	uint8_t *ra = tu_read(a, &la), *rb = tu_read(b, &lb);
	assert_int_equal(la, lb);
	assert_memory_equal(ra, rb, la);
	st_rows_file_t *f;
	assert_int_equal(st_rows_read(a, &f, err, sizeof err), ST_OK);
	check_file(f, N, NF);
	st_rows_file_free(f);

	/* a full builder refuses deleted keys */
	info.flags = 0;
	assert_int_equal(st_rows_writer_create(&w, &info), ST_OK);
	assert_int_equal(st_rows_writer_delete(w, 1), ST_EINVAL);
	st_rows_writer_destroy(w);
	info.dim = 0;
	assert_int_equal(st_rows_writer_create(&w, &info), ST_EINVAL);
	free(ra);
	free(rb);
	free(a);
	free(b);
	free_table(&t);
}

static void test_rows_write_rejects_bad_arguments(void **state)
{
	(void)state;
	table_t t;
	make_table(&t, 4, 2);
	char *p = tu_path(dir, "bad.rows");
	char err[512] = "";
	st_rows_info_t info = { .dim = 1, .state_dim = 1 };
	t.rows[2].key = t.rows[0].key;
	assert_int_equal(st_rows_write(p, &info, t.rows, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "is given twice"));
	free_table(&t);
	make_table(&t, 4, 2);
	uint64_t del[2] = { 1, 1 };
	assert_int_equal(st_rows_write(p, &info, t.rows, 4, del, 1, NULL, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "deleted keys given for a full row file"));
	info.flags = ST_ROWS_DELTA;
	assert_int_equal(st_rows_write(p, &info, t.rows, 4, del, 2, NULL, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "deleted key 0x0000000000000001 is given twice"));
	del[0] = key_of(1);
	assert_int_equal(st_rows_write(p, &info, t.rows, 4, del, 1, NULL, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "is both a row and deleted"));
	t.rows[1].vals = NULL;
	assert_int_equal(st_rows_write(p, &info, t.rows, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "has no values"));
	info.dim = 0;
	assert_int_equal(st_rows_write(p, &info, t.rows, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	info.dim = ST_ROWS_MAX_FLOATS;
	info.state_dim = 1;
	assert_int_equal(st_rows_write(p, &info, t.rows, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	info.dim = 1;
	info.flags = 2;
	assert_int_equal(st_rows_write(p, &info, t.rows, 4, NULL, 0, NULL, err, sizeof err), ST_EINVAL);
	assert_false(tu_exists(p));
	free_table(&t);
	free(p);
}

static void test_rows_truncation_at_every_byte(void **state)
{
	(void)state;
	char *p = write_small("trunc-src.rows", 1);
	size_t len = 0;
	uint8_t *raw = tu_read(p, &len);
	assert_int_equal(len, 64 + 5 * 28 + 2 * 8 + 32);
	char *q = tu_path(dir, "trunc.rows");
	for (size_t cut = 0; cut <= len + 3; cut++) {
		if (cut == len)
			continue;
		if (cut < len) {
			tu_write(q, raw, cut);
		} else {   /* bytes appended after the footer */
			uint8_t *b = calloc(1, cut);
			memcpy(b, raw, len);
			tu_write(q, b, cut);
			free(b);
		}
		st_rows_file_t *f = NULL;
		char err[512] = "";
		int rc = st_rows_read(q, &f, err, sizeof err);
		if (rc != ST_ECORRUPT || f || !strstr(err, "trunc.rows: ") ||
		    (cut < len && !strstr(err, "truncated"))) {
			fprintf(stderr, "cut %zu of %zu: rc %d '%s'\n", cut, len, rc, err);
			fail();
		}
		/* the streaming reader fails at open */
		st_rows_reader_t *r = NULL;
		assert_int_equal(st_rows_reader_open(q, &r, NULL, 0), ST_ECORRUPT);
		assert_null(r);
	}
	free(q);
	free(raw);
	free(p);
}

/* A flipped bit anywhere is detected: in the header by its checksum (or the
 * magic), in rows and deleted keys by the footer's, in the footer by the
 * counts, magic or checksum. */
static void test_rows_flipped_bit_at_every_byte(void **state)
{
	(void)state;
	char *p = write_small("flip-src.rows", 1);
	size_t len = 0;
	uint8_t *raw = tu_read(p, &len);
	char *q = tu_path(dir, "flip.rows");
	for (size_t at = 0; at < len; at++) {
		raw[at] ^= (uint8_t)(1u << (at % 8));
		tu_write(q, raw, len);
		raw[at] ^= (uint8_t)(1u << (at % 8));
		st_rows_file_t *f = NULL;
		char err[512] = "";
		int rc = st_rows_read(q, &f, err, sizeof err);
		int want = at < 8 ? ST_EFORMAT : ST_ECORRUPT;
		if (rc != want || f || !strstr(err, "flip.rows: ")) {
			fprintf(stderr, "flip at %zu: rc %d '%s'\n", at, rc, err);
			fail();
		}
		if (at >= 64 && at < len - 32)   /* a key may also break the order first */
			assert_true(strstr(err, "checksum mismatch") || strstr(err, "is not above") ||
				    strstr(err, "both a row and deleted"));
	}
	free(q);
	free(raw);
	free(p);
}

/* The streaming reader hands out rows before it can know the checksum; a
 * damaged row shows up as ST_ECORRUPT at the end, never as a clean 0. */
static void test_rows_streaming_reports_damage_at_the_end(void **state)
{
	(void)state;
	char *p = write_small("stream.rows", 0);
	size_t len = 0;
	uint8_t *raw = tu_read(p, &len);
	raw[64 + 28 * 3 + 20] ^= 0x40;   /* a float of row 3 */
	tu_write(p, raw, len);
	st_rows_reader_t *r;
	assert_int_equal(st_rows_reader_open(p, &r, NULL, 0), ST_OK);
	st_rows_row_t row;
	int rows = 0, rc;
	while ((rc = st_rows_reader_next(r, &row)) == 1)
		rows++;
	assert_int_equal(rows, 5);
	assert_int_equal(rc, ST_ECORRUPT);
	assert_non_null(strstr(st_rows_reader_error(r), "stream.rows: checksum mismatch"));
	assert_int_equal(st_rows_reader_next(r, &row), ST_ECORRUPT);   /* sticky */
	size_t nd = 3;
	st_rows_reader_deleted(r, &nd);
	assert_int_equal(nd, 0);
	st_rows_reader_close(r);
	free(raw);
	free(p);
}

/* The reader's whole-file sum is what a manifest lists (st_dumpio's hash
 * of the file), known once the stream ended — also when the footer
 * disagrees, so that a loader that verifies while it loads (resume) can
 * name the damage as a manifest mismatch without reading the file again;
 * before the end there is none. */
static void test_rows_reader_sum_is_the_files_hash(void **state)
{
	(void)state;
	char *p = write_small("sum.rows", 1);
	st_dumpio_sum_t want, got = { 0, 0 };
	assert_int_equal(st__dumpio_hash_file(p, &want, NULL, 0), ST_OK);
	for (int damaged = 0; damaged < 2; damaged++) {
		if (damaged) {
			size_t len = 0;
			uint8_t *raw = tu_read(p, &len);
			raw[len - 32 - 16 - 1] ^= 0x01;   /* a float of the last row, before the deleted keys */
			tu_write(p, raw, len);
			free(raw);
			assert_int_equal(st__dumpio_hash_file(p, &want, NULL, 0), ST_OK);
		}
		st_rows_reader_t *r;
		assert_int_equal(st_rows_reader_open(p, &r, NULL, 0), ST_OK);
		st_rows_row_t rows[2];
		assert_int_equal(st_rows_reader_sum(r, &got), ST_EAGAIN);
		int rc;
		while ((rc = st_rows_reader_next_batch(r, rows, 2)) > 0)
			assert_int_equal(st_rows_reader_sum(r, &got), ST_EAGAIN);
		assert_int_equal(rc, damaged ? ST_ECORRUPT : 0);
		assert_int_equal(st_rows_reader_sum(r, &got), ST_OK);
		assert_int_equal(got.bytes, want.bytes);
		assert_int_equal(got.xxh3, want.xxh3);
		st_rows_reader_close(r);
	}
	free(p);
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* Rewrites both checksums, so a crafted change gets past them and the check
 * behind them is what answers. */
static void reseal(uint8_t *b, size_t len)
{
	put64(b + 56, XXH3_64bits(b, 56));
	put64(b + len - 8, XXH3_64bits(b, len - 32));
}

static void expect_read(const char *path, const uint8_t *b, size_t len, int code, const char *msg)
{
	tu_write(path, b, len);
	st_rows_file_t *f = NULL;
	char err[512] = "";
	int rc = st_rows_read(path, &f, err, sizeof err);
	if (rc != code || !strstr(err, msg)) {
		fprintf(stderr, "rc %d '%s', wanted %d '%s'\n", rc, err, code, msg);
		fail();
	}
	assert_null(f);
}

static void test_rows_rejects_crafted_headers(void **state)
{
	(void)state;
	char *p = write_small("craft-src.rows", 1);
	size_t len = 0;
	uint8_t *raw = tu_read(p, &len), *b = malloc(len);
	char *q = tu_path(dir, "craft.rows");
#define FRESH() memcpy(b, raw, len)
	FRESH();
	b[8] = 2;   /* version 2 */
	reseal(b, len);
	expect_read(q, b, len, ST_EFORMAT, "row file version 2; this strata reads version 1");
	FRESH();
	b[12] |= 4;   /* unknown flag */
	reseal(b, len);
	expect_read(q, b, len, ST_EFORMAT, "unknown flags 0x5");
	FRESH();
	b[50] = 1;
	reseal(b, len);
	expect_read(q, b, len, ST_EFORMAT, "reserved header bytes");
	FRESH();
	memset(b + 24, 0, 4);   /* dim 0 */
	reseal(b, len);
	expect_read(q, b, len, ST_EFORMAT, "bad table shape: dim 0");
	FRESH();
	b[12] = 0;   /* a full file that has deleted keys */
	reseal(b, len);
	expect_read(q, b, len, ST_EFORMAT, "a full row file with 2 deleted keys");
	FRESH();
	put64(b + 32, UINT64_MAX / 2);   /* row count that cannot be */
	reseal(b, len);
	expect_read(q, b, len, ST_ECORRUPT, "cannot fit in a file");
	FRESH();
	memcpy(b + 64 + 28, b + 64, 8);   /* row 1 gets row 0's key */
	reseal(b, len);
	expect_read(q, b, len, ST_ECORRUPT, "row 1: key 0x0000000000000007 is not above");
	FRESH();
	put64(b + 64 + 5 * 28 + 8, 4);   /* deleted keys 4, 4 */
	reseal(b, len);
	expect_read(q, b, len, ST_ECORRUPT, "deleted key 1 (0x0000000000000004) is not above");
	FRESH();
	put64(b + 64 + 5 * 28 + 8, key_of(2));   /* a key both a row and deleted */
	reseal(b, len);
	expect_read(q, b, len, ST_ECORRUPT, "is both a row and deleted");
	FRESH();
	b[len - 32] = 'X';   /* footer magic */
	expect_read(q, b, len, ST_ECORRUPT, "bad footer");
	FRESH();
	put64(b + len - 24, 4);   /* footer row count */
	expect_read(q, b, len, ST_ECORRUPT, "bad footer: magic or counts (4 rows");
	/* not a row file at all, long or short; a missing file */
	memset(b, 'x', len);
	expect_read(q, b, len, ST_EFORMAT, "not a strata row file");
	expect_read(q, b, 10, ST_EFORMAT, "not a strata row file");
	char *missing = tu_path(dir, "missing.rows");
	st_rows_file_t *f;
	char err[512] = "";
	assert_int_equal(st_rows_read(missing, &f, err, sizeof err), ST_ENOENT);
	assert_non_null(strstr(err, "missing.rows: cannot open"));
#undef FRESH
	free(missing);
	free(q);
	free(b);
	free(raw);
	free(p);
}

static void test_rows_disk_full_leaves_nothing(void **state)
{
	(void)state;
	table_t t;
	make_table(&t, 50000, 8);   /* 1.2 MB: more than one write buffer */
	st_rows_info_t info = { .dim = 4, .state_dim = 4 };
	char *p = tu_path(dir, "full.rows");
	char err[512] = "";
	long long limits[] = { 0, 1, 63, 64, 1000, 1 << 20, (1 << 20) + 5, 1200000 };
	for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
		tu_disk_limit(limits[i], 0);
		int rc = st_rows_write(p, &info, t.rows, t.n, NULL, 0, NULL, err, sizeof err);
		tu_disk_unlimited();
		assert_int_equal(rc, ST_ENOSPC);
		assert_non_null(strstr(err, "No space left on device"));
		assert_false(tu_exists(p));
	}
	tu_disk_limit(-1, 1);
	assert_int_equal(st_rows_write(p, &info, t.rows, t.n, NULL, 0, NULL, err, sizeof err), ST_ENOSPC);
	tu_disk_unlimited();
	assert_false(tu_exists(p));
	free_table(&t);
	free(p);
}

/* ---- the builder's reuse, large files, direct I/O ------------------------ */

static void add_rows(st_rows_writer_t *w, const table_t *t, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		assert_int_equal(st_rows_writer_add(w, t->rows[i].key, t->rows[i].last_step,
						    t->rows[i].freq, t->rows[i].vals), ST_OK);
}

static void finish_ok(st_rows_writer_t *w, const char *path)
{
	char err[512] = "";
	int rc = st_rows_writer_finish(w, path, NULL, err, sizeof err);
	if (rc != ST_OK)
		fail_msg("finish %s: %s (%s)", path, err, st_strerror(rc));
}

static void assert_same_file(const char *a, const char *b)
{
	size_t la, lb;
	uint8_t *ra = tu_read(a, &la), *rb = tu_read(b, &lb);
	assert_non_null(ra);
	assert_non_null(rb);
	assert_int_equal(la, lb);
	assert_memory_equal(ra, rb, la);
	free(ra);
	free(rb);
}

/* A builder with no rows writes the same valid file as the array writer
 * with none, also again and after a reset; a delta builder with only
 * deleted keys writes them. */
static void test_rows_builder_empty_finish(void **state)
{
	(void)state;
	st_rows_info_t info = { .table_id = 3, .dim = 2, .state_dim = 1 };
	char *a = tu_path(dir, "empty-array.rows"), *b = tu_path(dir, "empty-built.rows");
	char err[512] = "";
	st_dumpio_sum_t sa, sb;
	assert_int_equal(st_rows_write(a, &info, NULL, 0, NULL, 0, &sa, err, sizeof err), ST_OK);
	st_rows_writer_t *w;
	assert_int_equal(st_rows_writer_create(&w, &info), ST_OK);
	assert_int_equal(st_rows_writer_finish(w, b, &sb, err, sizeof err), ST_OK);
	assert_int_equal(sb.bytes, ST_ROWS_HEADER_SIZE + ST_ROWS_FOOTER_SIZE);
	assert_int_equal(sb.xxh3, sa.xxh3);
	assert_same_file(a, b);
	st_rows_file_t *f;
	assert_int_equal(st_rows_read(b, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->info.n_rows, 0);
	assert_int_equal(f->info.table_id, 3);
	st_rows_file_free(f);
	finish_ok(w, b);
	assert_same_file(a, b);
	st_rows_writer_reset(w);
	finish_ok(w, b);
	assert_same_file(a, b);
	st_rows_writer_destroy(w);

	info.flags = ST_ROWS_DELTA;
	assert_int_equal(st_rows_writer_create(&w, &info), ST_OK);
	assert_int_equal(st_rows_writer_delete(w, 5), ST_OK);
	assert_int_equal(st_rows_writer_delete(w, 2), ST_OK);
	finish_ok(w, b);
	st_rows_writer_destroy(w);
	assert_int_equal(st_rows_read(b, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->info.n_rows, 0);
	assert_int_equal(f->info.n_deleted, 2);
	assert_int_equal(f->deleted[0], 2);
	assert_int_equal(f->deleted[1], 5);
	st_rows_file_free(f);
	free(a);
	free(b);
}

/* A builder reused through reset (and reserve, larger or smaller) writes
 * byte for byte what a fresh builder writes for the same rows, whatever
 * the order they come in and whether there are fewer than before; a reset
 * forgets deleted keys too. 200000 rows of 48 bytes: three 4 MiB chunks,
 * and a file larger than one staging buffer. */
static void test_rows_builder_reset_reserve_reuse(void **state)
{
	(void)state;
	enum { N = 200000, NF = 8 };
	table_t t;
	make_table(&t, N, NF);
	st_rows_info_t info = { .table_id = 4, .dim = 5, .state_dim = 3, .flags = ST_ROWS_DELTA };
	char *ref = tu_path(dir, "reuse-ref.rows"), *half = tu_path(dir, "reuse-half.rows");
	char *out = tu_path(dir, "reuse-out.rows");
	st_rows_writer_t *w;
	assert_int_equal(st_rows_writer_create(&w, &info), ST_OK);
	add_rows(w, &t, 0, N);
	finish_ok(w, ref);
	st_rows_writer_destroy(w);
	assert_int_equal(st_rows_writer_create(&w, &info), ST_OK);
	add_rows(w, &t, 0, N / 2);
	finish_ok(w, half);
	st_rows_writer_destroy(w);
	st_rows_file_t *f;
	char err[512] = "";
	assert_int_equal(st_rows_read(ref, &f, err, sizeof err), ST_OK);
	check_file(f, N, NF);
	st_rows_file_free(f);

	/* the builder that is reused: first with deleted keys */
	assert_int_equal(st_rows_writer_create(&w, &info), ST_OK);
	add_rows(w, &t, 0, N);
	assert_int_equal(st_rows_writer_delete(w, 1), ST_OK);
	finish_ok(w, out);
	assert_int_equal(st_rows_read(out, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->info.n_deleted, 1);
	st_rows_file_free(f);
	/* reset, room for twice as many, the same rows backwards */
	st_rows_writer_reset(w);
	assert_int_equal(st_rows_writer_count(w), 0);
	assert_int_equal(st_rows_writer_reserve(w, 2 * N), ST_OK);
	for (size_t i = N; i-- > 0;)
		assert_int_equal(st_rows_writer_add(w, t.rows[i].key, t.rows[i].last_step,
						    t.rows[i].freq, t.rows[i].vals), ST_OK);
	finish_ok(w, out);
	assert_same_file(ref, out);
	/* finishing again writes the same */
	finish_ok(w, out);
	assert_same_file(ref, out);
	/* fewer rows than the memory held */
	st_rows_writer_reset(w);
	add_rows(w, &t, 0, N / 2);
	finish_ok(w, out);
	assert_same_file(half, out);
	/* a reserve below what is there, then more rows than before the reset */
	st_rows_writer_reset(w);
	assert_int_equal(st_rows_writer_reserve(w, 10), ST_OK);
	add_rows(w, &t, 0, N / 2);
	assert_int_equal(st_rows_writer_reserve(w, N), ST_OK);
	add_rows(w, &t, N / 2, N);
	finish_ok(w, out);
	assert_same_file(ref, out);
	st_rows_writer_destroy(w);
	free_table(&t);
	free(ref);
	free(half);
	free(out);
}

/* Writes larger than one 8 MiB staging buffer go through dumpio's writer
 * thread. A file size limit (EFBIG, which binds root too) or a full disk
 * anywhere in such a file — in the first buffer, the second, at a buffer's
 * edge, in the tail written at close — gives the error with the file's
 * name, stops the thread, and leaves no file at all, so nothing that looks
 * like a complete row file; the builder then still writes the file once
 * the limit is gone. */
static void test_rows_large_file_limit_leaves_nothing(void **state)
{
	(void)state;
	enum { N = 400000, NF = 8 };   /* 19.2 MB */
	table_t t;
	make_table(&t, N, NF);
	st_rows_info_t info = { .dim = 4, .state_dim = 4 };
	const long long total = ST_ROWS_HEADER_SIZE + (long long)N * (16 + 4 * NF) +
				ST_ROWS_FOOTER_SIZE;
	st_rows_writer_t *w;
	assert_int_equal(st_rows_writer_create(&w, &info), ST_OK);
	add_rows(w, &t, 0, N);
	char *p = tu_path(dir, "large.rows");
	char err[512];
	const long long limits[] = { 0, 4096, 1 << 20, (8 << 20) - 1, 8 << 20, (8 << 20) + 12345,
				     16 << 20, total - ST_ROWS_FOOTER_SIZE, total - 1 };
	void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
	struct rlimit old;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
		struct rlimit lim = { (rlim_t)limits[i], old.rlim_max };
		assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
		err[0] = 0;
		int rc = st_rows_writer_finish(w, p, NULL, err, sizeof err);
		int rc2 = i == 0 ? st_rows_write(p, &info, t.rows, N, NULL, 0, NULL, err, sizeof err)
				 : -EFBIG;
		assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
		if (rc != -EFBIG || rc2 != -EFBIG)
			fail_msg("limit %lld: %s, %s: %s", limits[i], st_strerror(rc), st_strerror(rc2),
				 err);
		assert_non_null(strstr(err, p));
		assert_non_null(strstr(err, "File too large"));
		assert_false(tu_exists(p));
	}
	signal(SIGXFSZ, old_sig);
	/* a full disk, as dumpio's write hook simulates it (called from the
	 * writer thread) */
	const long long space[] = { 5 << 20, (8 << 20) + 100, 17 << 20, total - 5 };
	for (size_t i = 0; i < sizeof space / sizeof space[0]; i++) {
		tu_disk_limit(space[i], 0);
		err[0] = 0;
		int rc = st_rows_writer_finish(w, p, NULL, err, sizeof err);
		tu_disk_unlimited();
		assert_int_equal(rc, ST_ENOSPC);
		assert_non_null(strstr(err, "No space left on device"));
		assert_false(tu_exists(p));
	}
	st_dumpio_sum_t sum;
	assert_int_equal(st_rows_writer_finish(w, p, &sum, err, sizeof err), ST_OK);
	assert_int_equal(sum.bytes, total);
	st_rows_file_t *f;
	assert_int_equal(st_rows_read(p, &f, err, sizeof err), ST_OK);
	check_file(f, N, NF);
	st_rows_file_free(f);
	st_rows_writer_destroy(w);
	free_table(&t);
	free(p);
}

/* Direct I/O as the writes see it, through dumpio's open and write hooks.
 * The counters are touched by the writing thread of the moment (the
 * caller's, or dumpio's writer thread between its start and its join). */
static struct {
	int refuse_open, refuse_write;   /* EINVAL for O_DIRECT opens / writes */
	int open_direct, open_plain;
	long direct, plain, misaligned, refused;
} dio;

static int dio_open(const char *path, int flags, mode_t mode)
{
	if (flags & O_DIRECT) {
		dio.open_direct++;
		if (dio.refuse_open) {
			errno = EINVAL;
			return -1;
		}
	} else {
		dio.open_plain++;
	}
	return open(path, flags, mode);
}

static ssize_t dio_write(int fd, const void *buf, size_t n)
{
	if (fcntl(fd, F_GETFL) & O_DIRECT) {
		if (dio.refuse_write) {
			dio.refused++;
			errno = EINVAL;
			return -1;
		}
		dio.direct++;
		/* what O_DIRECT asks of the address, the length and the offset */
		if ((uintptr_t)buf % 4096 || n % 4096 || lseek(fd, 0, SEEK_CUR) % 4096)
			dio.misaligned++;
	} else {
		dio.plain++;
	}
	return write(fd, buf, n);
}

/* Writes the builder's rows to path with the hooks on; the file must equal
 * ref byte for byte. */
static void dio_finish(st_rows_writer_t *w, const char *path, const char *ref, int refuse_open,
		       int refuse_write)
{
	memset(&dio, 0, sizeof dio);
	dio.refuse_open = refuse_open;
	dio.refuse_write = refuse_write;
	st__dumpio_open_hook = dio_open;
	st__dumpio_write_hook = dio_write;
	char err[512] = "";
	int rc = st_rows_writer_finish(w, path, NULL, err, sizeof err);
	st__dumpio_open_hook = NULL;
	st__dumpio_write_hook = NULL;
	if (rc != ST_OK)
		fail_msg("finish %s: %s", path, err);
	assert_same_file(ref, path);
}

/* Row files go to the device with O_DIRECT in whole aligned blocks, only
 * the unaligned tail through the page cache; a file system that refuses
 * O_DIRECT when the file is opened, or refuses a direct write, gets the
 * same bytes through the page cache. 9.6 MB: the writer thread writes. */
static void test_rows_direct_io_and_fallback(void **state)
{
	(void)state;
	enum { N = 200000, NF = 8 };
	table_t t;
	make_table(&t, N, NF);
	st_rows_info_t info = { .table_id = 2, .dim = 6, .state_dim = 2 };
	char *ref = tu_path(dir, "dio-ref.rows"), *p = tu_path(dir, "dio.rows");
	char err[512] = "";
	assert_int_equal(st_rows_write(ref, &info, t.rows, N, NULL, 0, NULL, err, sizeof err),
			 ST_OK);
	assert_true((ST_ROWS_HEADER_SIZE + N * (16 + 4 * NF) + ST_ROWS_FOOTER_SIZE) % 4096 != 0);
	st_rows_writer_t *w;
	assert_int_equal(st_rows_writer_create(&w, &info), ST_OK);
	add_rows(w, &t, 0, N);

	dio_finish(w, p, ref, 0, 0);
	assert_int_equal(dio.open_direct, 1);
	if (dio.open_plain) {
		print_message("skip: %s refuses O_DIRECT; only the fallback is tested\n", dir);
	} else {
		print_message("direct writes %ld, through the cache %ld\n", dio.direct, dio.plain);
		assert_int_equal(dio.misaligned, 0);
		assert_true(dio.direct >= 2);   /* 9.6 MB in buffers of 8 MiB */
		assert_int_equal(dio.plain, 1);   /* the unaligned tail */
	}
	/* refused at open: one try, then a plain open, no direct write */
	dio_finish(w, p, ref, 1, 0);
	assert_int_equal(dio.open_direct, 1);
	assert_int_equal(dio.open_plain, 1);
	assert_int_equal(dio.direct, 0);
	assert_true(dio.plain >= 2);
	/* refused at the first direct write: no direct write is tried again */
	dio_finish(w, p, ref, 0, 1);
	assert_int_equal(dio.open_direct, 1);
	assert_int_equal(dio.refused, dio.open_plain ? 0 : 1);
	assert_int_equal(dio.direct, 0);
	st_rows_file_t *f;
	assert_int_equal(st_rows_read(p, &f, err, sizeof err), ST_OK);
	check_file(f, N, NF);
	st_rows_file_free(f);
	st_rows_writer_destroy(w);
	free_table(&t);
	free(ref);
	free(p);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TU_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TU_SANITIZER 1
#endif
#endif

/* Rows as wide as the format allows (ST_ROWS_MAX_FLOATS floats, 4 MiB
 * each) are read with the reader's usual 8 MiB buffer: a batch holds what
 * fits, not ST_ROWS_BATCH_MAX rows (16 GiB). Read in a child process whose
 * address space may grow by 512 MiB only (without a sanitizer, which maps
 * far more for itself). */
static void test_rows_widest_rows_read_in_bounded_memory(void **state)
{
	(void)state;
	enum { N = 3 };
	const size_t nf = ST_ROWS_MAX_FLOATS;
	float *vals = malloc(N * nf * sizeof(float));
	assert_non_null(vals);
	st_rows_row_t rows[N];
	for (size_t i = 0; i < N; i++) {
		for (size_t j = 0; j < nf; j++)
			vals[i * nf + j] = (float)(i * 7 + j % 1000);
		rows[i] = (st_rows_row_t){ 100 - i, (uint32_t)i, 1, vals + i * nf };
	}
	st_rows_info_t info = { .dim = (uint32_t)nf - 1, .state_dim = 1 };
	char *p = tu_path(dir, "wide.rows");
	char err[512] = "";
	assert_int_equal(st_rows_write(p, &info, rows, N, NULL, 0, NULL, err, sizeof err), ST_OK);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
#ifndef TU_SANITIZER
		long pages = 0;
		FILE *sm = fopen("/proc/self/statm", "r");
		if (!sm || fscanf(sm, "%ld", &pages) != 1)
			_exit(3);
		fclose(sm);
		rlim_t as = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (512u << 20);
		struct rlimit lim = { as, as };
		if (setrlimit(RLIMIT_AS, &lim) < 0)
			_exit(3);
#endif
		st_rows_reader_t *r;
		if (st_rows_reader_open(p, &r, err, sizeof err) < 0) {
			fprintf(stderr, "%s\n", err);
			_exit(1);
		}
		st_rows_row_t got[ST_ROWS_BATCH_MAX];
		int k, n = 0, bad = 0;
		while ((k = st_rows_reader_next_batch(r, got, ST_ROWS_BATCH_MAX)) > 0) {
			for (int i = 0; i < k; i++, n++)
				bad |= got[i].key != (uint64_t)(98 + n) ||
				       got[i].vals[nf - 1] != (float)((2 - n) * 7 + (nf - 1) % 1000);
		}
		if (k < 0)
			fprintf(stderr, "%s\n", st_rows_reader_error(r));
		st_rows_reader_close(r);
		_exit(k == 0 && n == N && !bad ? 0 : 2);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	free(vals);
	free(p);
}

/* The pure-Python reader printed in docs/formats.md reads what strata
 * writes (run from the document itself, so the document cannot rot). */
static const char py_rows[] =
	"import sys, re\n"
	"path, md = sys.argv[1], sys.argv[2]\n"
	"text = open(md, encoding='utf-8').read()\n"
	"m = re.search(r'<!-- example: rows -->\\s*```python\\n(.*?)```', text, re.S)\n"
	"assert m, 'docs/formats.md lacks the rows example'\n"
	"ns = {}\n"
	"exec(compile(m.group(1), 'docs/formats.md (rows example)', 'exec'), ns)\n"
	"info, rows, deleted = ns['read_rows'](path)\n"
	"assert info['dim'] == 3 and info['state_dim'] == 2 and info['delta'], info\n"
	"assert info['table_id'] == 77, info\n"
	"assert len(rows) == 300\n"
	"for i, (key, last_step, freq, emb, state) in enumerate(rows):\n"
	"    assert key == i * 1000003 + 7 and last_step == i and freq == 2 * i + 1, (i, key)\n"
	"    vals = emb + state\n"
	"    assert len(emb) == 3 and len(state) == 2\n"
	"    assert vals == [(key % 1000) * 0.25 + j for j in range(5)], (i, vals)\n"
	"assert deleted == [3, 11], deleted\n"
	"# damage is detected\n"
	"b = bytearray(open(path, 'rb').read()); b[100] ^= 1\n"
	"open(path + '.bad', 'wb').write(b)\n"
	"try:\n"
	"    ns['read_rows'](path + '.bad')\n"
	"except Exception as e:\n"
	"    print('damaged copy rejected:', e)\n"
	"else:\n"
	"    if ns.get('xxhash') is not None: raise SystemExit('damage not detected')\n"
	"    print('(python xxhash not installed: the reader checks sizes, not the checksum)')\n"
	"print('docs rows reader read', len(rows), 'rows and', len(deleted), 'deleted keys')\n";

static void test_rows_docs_python_reader(void **state)
{
	(void)state;
	if (!tu_python())
		TU_SKIP("no python3 (or $ST_PYTHON) to run the docs/formats.md reader");
	table_t t;
	make_table(&t, 300, 5);
	st_rows_info_t info = { .table_id = 77, .dim = 3, .state_dim = 2, .flags = ST_ROWS_DELTA };
	uint64_t del[2] = { 11, 3 };
	char *p = tu_path(dir, "py.rows");
	assert_int_equal(st_rows_write(p, &info, t.rows, t.n, del, 2, NULL, NULL, 0), ST_OK);
	char args[8192];
	snprintf(args, sizeof args, "'%s' '%s'", p, tu_formats_md());
	assert_int_equal(tu_run_python(dir, "check_rows.py", py_rows, args), 0);
	free_table(&t);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows_round_trip_full),
		cmocka_unit_test(test_rows_round_trip_delta_and_empty),
		cmocka_unit_test(test_rows_builder_matches_array_writer),
		cmocka_unit_test(test_rows_write_rejects_bad_arguments),
		cmocka_unit_test(test_rows_truncation_at_every_byte),
		cmocka_unit_test(test_rows_flipped_bit_at_every_byte),
		cmocka_unit_test(test_rows_streaming_reports_damage_at_the_end),
		cmocka_unit_test(test_rows_reader_sum_is_the_files_hash),
		cmocka_unit_test(test_rows_rejects_crafted_headers),
		cmocka_unit_test(test_rows_disk_full_leaves_nothing),
		cmocka_unit_test(test_rows_builder_empty_finish),
		cmocka_unit_test(test_rows_builder_reset_reserve_reuse),
		cmocka_unit_test(test_rows_large_file_limit_leaves_nothing),
		cmocka_unit_test(test_rows_direct_io_and_fallback),
		cmocka_unit_test(test_rows_widest_rows_read_in_bounded_memory),
		cmocka_unit_test(test_rows_docs_python_reader),
	};
	return tu_exit(cmocka_run_group_tests(tests, setup, teardown),
		       sizeof tests / sizeof tests[0]);
}
