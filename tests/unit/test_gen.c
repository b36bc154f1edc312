/* test_gen.c — synthetic data: determinism, format, label rate, skew, batches. */
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

#include "ops/gen/conv.h"
#include "ops/gen/cross.h"
#include "ops/gen/gen.h"
#include "ops/gen/history.h"
#include "ops/metrics/auc.h"
#include "ops/read/read.h"
#include "runtime/err.h"

#define ROWS 40000
#define EVAL_ROWS 3000
#define FILES 3

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *p = malloc((size_t)n + 1);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
	p[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return p;
}

static char *file_in(const char *dir, const char *name)
{
	char *p = malloc(strlen(dir) + strlen(name) + 2);
	sprintf(p, "%s/%s", dir, name);
	return p;
}

static char *train_name(const char *dir, int f)
{
	char name[32];
	snprintf(name, sizeof name, "train-%05d.tsv", f);
	return file_in(dir, name);
}

/* Removes what st_gen_write may have left in dir, then dir. */
static void rm_dir(const char *dir, int files)
{
	for (int f = 0; f < files; f++) {
		char *p = train_name(dir, f);
		unlink(p);
		free(p);
	}
	char *e = file_in(dir, "eval.tsv");
	unlink(e);
	free(e);
	rmdir(dir);
}

static void gen_opts(st_gen_opts_t *o, const char *dir, uint64_t seed, int threads)
{
	memset(o, 0, sizeof *o);
	o->dir = dir;
	o->rows = ROWS;
	o->eval_rows = EVAL_ROWS;
	o->files = FILES;
	o->seed = seed;
	o->zipf = 1.1;
	o->vocab = 1000000;
	o->threads = threads;
}

static char *make_tmpdir(void)
{
	char tmpl[] = "/tmp/st-test-gen-XXXXXX";
	char *d = mkdtemp(tmpl);
	assert_non_null(d);
	return strdup(d);
}

/* Concatenation of every output file, in order. */
static char *all_output(const char *dir, size_t *len)
{
	size_t cap = 0, n = 0;
	char *out = NULL;
	for (int f = 0; f <= FILES; f++) {
		char *p = f < FILES ? train_name(dir, f) : file_in(dir, "eval.tsv");
		size_t l;
		char *d = read_all(p, &l);
		assert_non_null(d);
		free(p);
		if (n + l + 1 > cap) {
			cap = (n + l + 1) * 2;
			out = realloc(out, cap);
		}
		memcpy(out + n, d, l);
		n += l;
		free(d);
	}
	*len = n;
	return out;
}

static int64_t progress_last;
static int progress_calls;

static void on_progress(int64_t done, int64_t total, void *arg)
{
	(void)arg;
	assert_true(done > progress_last);
	assert_int_equal(total, ROWS + EVAL_ROWS);
	progress_last = done;
	progress_calls++;
}

static void test_gen_deterministic_across_threads(void **state)
{
	(void)state;
	char *d1 = make_tmpdir(), *d2 = make_tmpdir(), *d3 = make_tmpdir();
	st_gen_opts_t o;
	gen_opts(&o, d1, 42, 1);
	progress_last = 0;
	progress_calls = 0;
	assert_int_equal(st_gen_write(&o, on_progress, NULL), ST_OK);
	assert_int_equal(progress_last, ROWS + EVAL_ROWS);
	assert_true(progress_calls >= FILES + 1);
	gen_opts(&o, d2, 42, 3);
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	gen_opts(&o, d3, 43, 2);
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);

	size_t l1, l2, l3;
	char *a = all_output(d1, &l1), *b = all_output(d2, &l2), *c = all_output(d3, &l3);
	assert_int_equal(l1, l2);
	assert_memory_equal(a, b, l1);
	assert_true(l1 != l3 || memcmp(a, c, l1) != 0);
	/* No temporary files stay behind. */
	char *tmp = file_in(d1, ".train-00000.tsv.tmp");
	assert_int_equal(access(tmp, F_OK), -1);
	free(tmp);
	free(a);
	free(b);
	free(c);
	rm_dir(d1, FILES);
	rm_dir(d2, FILES);
	rm_dir(d3, FILES);
	free(d1);
	free(d2);
	free(d3);
}

/* Checks every line of buf: 40 tab-separated fields, label 0/1, integer
 * fields, 8-hex-digit categorical fields. Returns lines; counts positives. */
static int64_t check_lines(const char *buf, size_t len, int64_t *pos)
{
	int64_t lines = 0;
	const char *p = buf, *end = buf + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		assert_non_null(nl);
		int field = 0;
		const char *f = p;
		for (const char *q = p; q <= nl; q++) {
			if (*q != '\t' && *q != '\n')
				continue;
			size_t fl = (size_t)(q - f);
			if (field == 0) {
				assert_int_equal(fl, 1);
				assert_true(f[0] == '0' || f[0] == '1');
				*pos += f[0] == '1';
			} else if (field <= 13) {
				for (size_t i = 0; i < fl; i++)
					assert_true((f[i] >= '0' && f[i] <= '9') || (i == 0 && f[i] == '-'));
			} else {
				assert_true(fl == 0 || fl == 8);
				for (size_t i = 0; i < fl; i++)
					assert_non_null(strchr("0123456789abcdef", f[i]));
			}
			field++;
			f = q + 1;
		}
		assert_int_equal(field, 40);
		lines++;
		p = nl + 1;
	}
	return lines;
}

static void test_gen_format_rows_and_positive_rate(void **state)
{
	(void)state;
	char *d = make_tmpdir();
	st_gen_opts_t o;
	gen_opts(&o, d, 7, 2);
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	int64_t lines = 0, pos = 0;
	for (int f = 0; f < FILES; f++) {
		char *p = train_name(d, f);
		size_t l;
		char *buf = read_all(p, &l);
		assert_non_null(buf);
		int64_t n = check_lines(buf, l, &pos);
		/* Rows are split evenly across files. */
		assert_true(n == ROWS / FILES || n == ROWS / FILES + 1);
		lines += n;
		free(buf);
		free(p);
	}
	assert_int_equal(lines, ROWS);
	double rate = (double)pos / (double)lines;
	assert_true(rate >= 0.2 && rate <= 0.3);
	char *e = file_in(d, "eval.tsv");
	size_t l;
	char *buf = read_all(e, &l);
	int64_t epos = 0;
	assert_int_equal(check_lines(buf, l, &epos), EVAL_ROWS);
	free(buf);
	free(e);
	rm_dir(d, FILES);
	free(d);
}

/* Parses the label and the 26 categorical fields of one line into keys the
 * way the Criteo reader does (st_read_key(slot, hex, len) per non-empty
 * value). Returns the number of keys. */
static int parse_line(const char *p, int *label, int64_t *dense, uint64_t *keys,
		      const char **next)
{
	int field = 0, nk = 0;
	const char *f = p;
	for (const char *q = p;; q++) {
		if (*q != '\t' && *q != '\n')
			continue;
		size_t fl = (size_t)(q - f);
		if (field == 0)
			*label = f[0] - '0';
		else if (field <= 13)
			dense[field - 1] = fl ? strtoll(f, NULL, 10) : 0;
		else if (fl)
			keys[nk++] = st_read_key((uint32_t)(field - 14), f, fl);
		field++;
		f = q + 1;
		if (*q == '\n')
			break;
	}
	*next = f;
	return nk;
}

static void test_gen_fill_batch_matches_file(void **state)
{
	(void)state;
	char *d = make_tmpdir();
	st_gen_opts_t o;
	gen_opts(&o, d, 11, 2);
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	st_gen_t *g;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);

	/* File 1 starts at row ROWS/FILES; eval.tsv at ST_GEN_EVAL_BASE. */
	const char *names[2] = { "train-00001.tsv", "eval.tsv" };
	uint64_t first[2] = { ROWS / FILES, ST_GEN_EVAL_BASE };
	for (int t = 0; t < 2; t++) {
		char *p = file_in(d, names[t]);
		size_t l;
		char *buf = read_all(p, &l);
		st_batch_t *b;
		assert_int_equal(st_batch_create(&b, 1000, 13, 26, 64), ST_OK);
		assert_int_equal(st_gen_fill_batch(g, first[t], b, 1000), ST_OK);
		assert_int_equal(b->n, 1000);
		const char *q = buf;
		for (uint32_t i = 0; i < b->n; i++) {
			int label;
			int64_t dense[13];
			uint64_t keys[26];
			int nk = parse_line(q, &label, dense, keys, &q);
			assert_int_equal((int)b->labels[i], label);
			for (int j = 0; j < 13; j++)
				assert_true(b->dense[i * 13 + (uint32_t)j] == (float)dense[j]);
			assert_int_equal(b->row_off[i + 1] - b->row_off[i], nk);
			for (int k = 0; k < nk; k++)
				assert_int_equal(b->keys[b->row_off[i] + (uint32_t)k], keys[k]);
		}
		/* A full batch refuses more rows. */
		assert_int_equal(st_gen_fill_batch(g, 0, b, 1), ST_EINVAL);
		st_batch_destroy(b);
		free(buf);
		free(p);
	}
	st_gen_destroy(g);
	rm_dir(d, FILES);
	free(d);
}

/* The real Criteo reader, on the written file, gives exactly the batch that
 * st_gen_fill_batch makes (labels, dense values, keys, slots). */
static void test_gen_reader_agrees_with_fill_batch(void **state)
{
	(void)state;
	char *d = make_tmpdir();
	st_gen_opts_t o;
	gen_opts(&o, d, 13, 2);
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	st_gen_t *g;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	st_source_t src;
	memset(&src, 0, sizeof src);
	src.format = (char *)"criteo";
	src.on_bad = ST_BAD_FAIL;
	src.limit = -1;
	src.n_dense = 13;
	src.n_slots = 26;
	char *p = train_name(d, 0);
	st_reader_t *r;
	assert_int_equal(st_reader_open(&r, &src, p), ST_OK);
	enum { N = 5000 };
	st_batch_t *a, *b;
	assert_int_equal(st_batch_create(&a, N, 13, 26, 64), ST_OK);
	assert_int_equal(st_batch_create(&b, N, 13, 26, 64), ST_OK);
	while (a->n < N) {
		int n = st_reader_next(r, a, N - a->n);
		assert_true(n > 0);
	}
	assert_int_equal(st_gen_fill_batch(g, 0, b, N), ST_OK);
	assert_memory_equal(a->labels, b->labels, sizeof(float) * N);
	assert_memory_equal(a->dense, b->dense, sizeof(float) * N * 13);
	assert_memory_equal(a->row_off, b->row_off, sizeof(uint32_t) * (N + 1));
	assert_memory_equal(a->keys, b->keys, sizeof(uint64_t) * st_batch_nkeys(b));
	assert_memory_equal(a->key_slot, b->key_slot, sizeof(uint16_t) * st_batch_nkeys(b));
	st_reader_close(r);
	st_batch_destroy(a);
	st_batch_destroy(b);
	st_gen_destroy(g);
	free(p);
	rm_dir(d, FILES);
	free(d);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static void test_gen_zipf_skew(void **state)
{
	(void)state;
	st_gen_opts_t o;
	gen_opts(&o, NULL, 5, 1);
	st_gen_t *g;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	enum { N = 100000 };
	uint32_t *v = malloc(sizeof(uint32_t) * N);
	st_gen_row_t r;
	int n = 0;
	for (int i = 0; i < N; i++) {
		st_gen_row(g, (uint64_t)i, &r);
		if (!(r.cat_missing & 1u))
			v[n++] = r.cat[0];
	}
	/* Counts of each distinct printed value of slot 0. */
	qsort(v, (size_t)n, sizeof *v, cmp_u32);
	uint32_t *cnt = malloc(sizeof(uint32_t) * (size_t)n);
	int nd = 0;
	for (int i = 0; i < n;) {
		int j = i;
		while (j < n && v[j] == v[i])
			j++;
		cnt[nd++] = (uint32_t)(j - i);
		i = j;
	}
	qsort(cnt, (size_t)nd, sizeof *cnt, cmp_u32);
	uint32_t top = cnt[nd - 1], median = cnt[nd / 2];
	assert_true(nd > 1000);
	assert_true(top > 100 * median);
	/* Zipf(1.1) over 1e6: the top value has ~12% of the mass. */
	assert_true(top > N / 20 && top < N / 4);
	free(cnt);
	free(v);
	st_gen_destroy(g);
}

/* The sampler follows Zipf: P(v = k-1) = k^-s / H(n, s), checked for the
 * first ranks with both code paths (s = 1.1 takes the integer-power path,
 * s = 1.3 the exp/log1p one). */
static void test_gen_zipf_matches_pmf(void **state)
{
	(void)state;
	const double exps[2] = { 1.1, 1.3 };
	for (int e = 0; e < 2; e++) {
		st_gen_opts_t o;
		gen_opts(&o, NULL, 3, 1);
		o.zipf = exps[e];
		o.vocab = 100000;
		st_gen_t *g;
		assert_int_equal(st_gen_create(&g, &o), ST_OK);
		double h = 0.0;
		for (uint64_t k = 1; k <= o.vocab; k++)
			h += pow((double)k, -o.zipf);
		enum { N = 40000, R = 4 };
		uint64_t cnt[R] = { 0 }, tot = 0;
		st_gen_row_t r;
		for (int i = 0; i < N; i++) {
			st_gen_row(g, (uint64_t)i, &r);
			for (int sl = 0; sl < ST_GEN_N_CAT; sl++) {
				assert_true(r.cat_idx[sl] < o.vocab);
				if (r.cat_idx[sl] < R)
					cnt[r.cat_idx[sl]]++;
				tot++;
			}
		}
		for (int k = 0; k < R; k++) {
			double want = pow(k + 1.0, -o.zipf) / h * (double)tot;
			/* ~1M draws: 4 sigma of a binomial count is well under 3%. */
			assert_true(fabs((double)cnt[k] - want) < 0.03 * want);
		}
		st_gen_destroy(g);
	}
}

/* The Bayes AUC (true logit as the score) sits in the intended band, so the
 * data is learnable but not trivial. */
static void test_gen_bayes_auc_band(void **state)
{
	(void)state;
	st_gen_opts_t o;
	gen_opts(&o, NULL, 1, 1);
	st_gen_t *g;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	enum { N = 100000 };
	float *p = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
	st_gen_row_t r;
	for (int i = 0; i < N; i++) {
		st_gen_row(g, ST_GEN_EVAL_BASE + (uint64_t)i, &r);
		p[i] = (float)(1.0 / (1.0 + exp(-r.logit)));
		y[i] = (float)r.label;
	}
	double auc;
	assert_int_equal(st_auc_exact(p, y, N, &auc), ST_OK);
	print_message("bayes auc %.4f, calibration %.3f\n", auc, st_calibration(p, y, N));
	assert_true(auc > 0.80 && auc < 0.87);
	double cal = st_calibration(p, y, N);
	assert_true(cal > 0.95 && cal < 1.05);
	free(p);
	free(y);
	st_gen_destroy(g);
}

/* FNV-1a 64 of the formatted lines of train rows 0..1999 and eval rows
 * 0..199 (seed 42, the defaults of gen_opts, days 0). */
static uint64_t rows_checksum(const st_gen_t *g, uint64_t base, int n, uint64_t h)
{
	char line[ST_GEN_MAX_LINE];
	st_gen_row_t r;
	for (int i = 0; i < n; i++) {
		st_gen_row(g, base + (uint64_t)i, &r);
		int len = st_gen_format(&r, line);
		for (int k = 0; k < len; k++) {
			h ^= (unsigned char)line[k];
			h *= UINT64_C(0x100000001b3);
		}
	}
	return h;
}

/* days = 0 is the generator as it was before days and drift existed: the
 * checksum below was computed from the code before they were added, so any
 * change to the undrifted stream (weights, values, b0, labels) fails here. */
static void test_gen_days0_output_unchanged(void **state)
{
	(void)state;
	st_gen_opts_t o;
	gen_opts(&o, NULL, 42, 1);
	st_gen_t *g;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	h = rows_checksum(g, 0, 2000, h);
	h = rows_checksum(g, ST_GEN_EVAL_BASE, 200, h);
	print_message("days=0 checksum %016llx\n", (unsigned long long)h);
	assert_true(h == UINT64_C(0xafedbe15b1889ff6));
	st_gen_destroy(g);
}

static void test_gen_bad_dir_fails_cleanly(void **state)
{
	(void)state;
	char *d = make_tmpdir();
	char *file = file_in(d, "plain");
	FILE *f = fopen(file, "w");
	fclose(f);
	char *sub = file_in(file, "out");   /* a directory under a regular file */
	st_gen_opts_t o;
	gen_opts(&o, sub, 1, 2);
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_EIO);
	gen_opts(&o, d, 1, 2);
	o.files = 0;
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_EINVAL);
	unlink(file);
	rmdir(d);
	free(sub);
	free(file);
	free(d);
}

/* ---- days: a hidden model that drifts ------------------------------------ */

#define DAYS 4
#define DAY_ROWS 20001   /* not a multiple of DAYS: the split must add up */

static char *day_name(const char *dir, int d)
{
	char name[32];
	snprintf(name, sizeof name, "day-%03d.tsv", d);
	return file_in(dir, name);
}

static void rm_days(const char *dir, int days)
{
	for (int d = 0; d < days; d++) {
		char *p = day_name(dir, d);
		unlink(p);
		free(p);
	}
	rm_dir(dir, 0);
}

static void days_opts(st_gen_opts_t *o, const char *dir, int threads)
{
	gen_opts(o, dir, 42, threads);
	o->files = 1;
	o->rows = DAY_ROWS;
	o->days = DAYS;
	o->drift = 0.1;
}

/* With days, st_gen_write makes day-000.tsv .. day-<D-1>.tsv holding rows
 * split evenly and adding up to rows, plus eval.tsv from the last day; the
 * bytes are the same at any thread count; day 0 is the undrifted generator
 * (day-000.tsv is the first rows of the days = 0 output, and with days = 1
 * eval.tsv is the days = 0 eval.tsv). */
static void test_gen_days_files_deterministic(void **state)
{
	(void)state;
	char *d1 = make_tmpdir(), *d2 = make_tmpdir(), *d0 = make_tmpdir();
	st_gen_opts_t o;
	days_opts(&o, d1, 1);
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	days_opts(&o, d2, 3);
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	int64_t total = 0;
	size_t l1, l2;
	char *a, *b;
	for (int d = 0; d <= DAYS; d++) {
		char *p1 = d < DAYS ? day_name(d1, d) : file_in(d1, "eval.tsv");
		char *p2 = d < DAYS ? day_name(d2, d) : file_in(d2, "eval.tsv");
		a = read_all(p1, &l1);
		b = read_all(p2, &l2);
		assert_non_null(a);
		assert_non_null(b);
		assert_int_equal(l1, l2);
		assert_memory_equal(a, b, l1);
		int64_t pos = 0, n = check_lines(a, l1, &pos);
		if (d < DAYS) {
			assert_true(n == DAY_ROWS / DAYS || n == DAY_ROWS / DAYS + 1);
			total += n;
		} else {
			assert_int_equal(n, EVAL_ROWS);
		}
		free(a);
		free(b);
		free(p1);
		free(p2);
	}
	assert_int_equal(total, DAY_ROWS);
	/* No train-*.tsv with days. */
	char *t = train_name(d1, 0);
	assert_int_equal(access(t, F_OK), -1);
	free(t);

	/* Day 0 is the generator without days. */
	gen_opts(&o, d0, 42, 2);
	o.files = 1;
	o.rows = DAY_ROWS;
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	char *p0 = train_name(d0, 0), *pd = day_name(d1, 0);
	a = read_all(p0, &l1);
	b = read_all(pd, &l2);
	assert_true(l2 < l1);
	assert_memory_equal(a, b, l2);
	assert_true(a[l2 - 1] == '\n');
	free(a);
	free(b);
	free(p0);
	free(pd);
	char *e0 = file_in(d0, "eval.tsv");
	a = read_all(e0, &l1);
	rm_days(d1, DAYS);
	days_opts(&o, d1, 2);
	o.days = 1;
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	char *e1 = file_in(d1, "eval.tsv");
	b = read_all(e1, &l2);
	assert_int_equal(l1, l2);
	assert_memory_equal(a, b, l1);
	free(a);
	free(b);
	free(e0);
	free(e1);

	rm_days(d1, 1);
	rm_days(d2, DAYS);
	rm_dir(d0, 1);
	free(d0);
	free(d1);
	free(d2);
}

/* Options that make no sense with days are refused before anything runs. */
static void test_gen_days_bad_options(void **state)
{
	(void)state;
	char *d = make_tmpdir();
	st_gen_opts_t o;
	st_gen_t *g;
	days_opts(&o, d, 1);
	o.files = 2;                   /* each day is one file */
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_EINVAL);
	days_opts(&o, d, 1);
	o.rows = DAYS - 1;             /* a day without rows */
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_EINVAL);
	days_opts(&o, d, 1);
	o.drift = 1.5;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.drift = -0.1;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	days_opts(&o, d, 1);
	o.days = ST_GEN_MAX_DAYS + 1;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.days = -1;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	/* Without days, drift is not looked at (zeroed options stay valid). */
	gen_opts(&o, NULL, 1, 1);
	o.drift = 7.0;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	st_gen_destroy(g);
	/* Nothing was written. */
	char *p = day_name(d, 0);
	assert_int_equal(access(p, F_OK), -1);
	free(p);
	rmdir(d);
	free(d);
}

/* b0 is calibrated per day: every day's positive rate is about 0.25, under
 * strong drift too. */
static void test_gen_days_positive_rate(void **state)
{
	(void)state;
	const double drifts[2] = { 0.1, 0.5 };
	for (int k = 0; k < 2; k++) {
		st_gen_opts_t o;
		gen_opts(&o, NULL, 3, 1);
		o.days = 12;
		o.drift = drifts[k];
		st_gen_t *g;
		assert_int_equal(st_gen_create(&g, &o), ST_OK);
		enum { N = 20000 };
		st_gen_row_t r;
		for (int d = 0; d < o.days; d += 1) {
			int pos = 0;
			for (int i = 0; i < N; i++) {
				st_gen_day_row(g, d, (uint64_t)i, &r);
				pos += r.label;
			}
			double rate = (double)pos / N;
			print_message("drift %.1f day %2d: b0 %+.3f positive rate %.4f\n",
				      o.drift, d, st_gen_b0(g, d), rate);
			/* Binomial sd 0.003 plus the calibration sample's error
			 * (4096 rows, about 0.005). */
			assert_true(rate > 0.23 && rate < 0.27);
		}
		st_gen_destroy(g);
	}
}

/* Sample correlation of x and y. */
static double corr(const double *x, const double *y, int n)
{
	double mx = 0, my = 0, sxx = 0, syy = 0, sxy = 0;
	for (int i = 0; i < n; i++) {
		mx += x[i];
		my += y[i];
	}
	mx /= n;
	my /= n;
	for (int i = 0; i < n; i++) {
		sxx += (x[i] - mx) * (x[i] - mx);
		syy += (y[i] - my) * (y[i] - my);
		sxy += (x[i] - mx) * (y[i] - my);
	}
	return sxy / sqrt(sxx * syy);
}

/* The hidden weights drift as an AR(1): corr(w_0, w_d) = (1 - drift)^(d/2)
 * and the variance stays that of day 0. drift = 0 changes nothing. */
static void test_gen_days_weight_correlation(void **state)
{
	(void)state;
	st_gen_opts_t o;
	gen_opts(&o, NULL, 5, 1);
	o.days = 33;
	o.drift = 0.1;
	st_gen_t *g;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	enum { NV = 20000 };
	const int slots[2] = { 0, 3 };          /* a fixed slot and a rotating one */
	const int days[6] = { 1, 2, 4, 8, 16, 32 };
	double *w0 = malloc(sizeof(double) * NV), *wd = malloc(sizeof(double) * NV);
	for (int k = 0; k < 2; k++) {
		int s = slots[k];
		for (int v = 0; v < NV; v++)
			w0[v] = st_gen_weight(g, 0, s, (uint64_t)v);
		double prev = 1.0;
		for (int j = 0; j < 6; j++) {
			double var0 = 0, vard = 0;
			for (int v = 0; v < NV; v++) {
				wd[v] = st_gen_weight(g, days[j], s, (uint64_t)v);
				var0 += w0[v] * w0[v];
				vard += wd[v] * wd[v];
			}
			double c = corr(w0, wd, NV), want = pow(1.0 - o.drift, days[j] / 2.0);
			print_message("slot %d day %2d: corr %.4f (want %.4f), var ratio %.3f\n",
				      s, days[j], c, want, vard / var0);
			/* sd of a correlation estimate from 20000 pairs < 0.007 */
			assert_true(fabs(c - want) < 0.03);
			assert_true(c < prev);
			assert_true(vard / var0 > 0.94 && vard / var0 < 1.06);
			prev = c;
		}
	}
	/* Noise slots stay noise. */
	assert_true(st_gen_weight(g, 7, ST_GEN_N_CAT - 1, 3) == 0.0);
	st_gen_destroy(g);

	o.drift = 0.0;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	for (int v = 0; v < 1000; v++)
		assert_true(st_gen_weight(g, 32, 0, (uint64_t)v) == st_gen_weight(g, 0, 0, (uint64_t)v));
	st_gen_destroy(g);
	free(w0);
	free(wd);
}

/* Popularity drifts on the rotating slots only: on day d (drift 0.1: a
 * shift of d ranks) the top value of slot 3 is the value index vocab - d,
 * and day 0's top value (index 0) has fallen to rank d; slot 0 keeps its
 * ranking. */
static void test_gen_days_popularity_drift(void **state)
{
	(void)state;
	st_gen_opts_t o;
	gen_opts(&o, NULL, 9, 1);
	o.days = 6;
	o.drift = 0.1;
	st_gen_t *g;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	enum { N = 20000, D = 5 };
	int new_top = 0, old_top = 0, fixed_top = 0;
	st_gen_row_t r;
	for (int i = 0; i < N; i++) {
		st_gen_day_row(g, D, (uint64_t)i, &r);
		new_top += r.cat_idx[3] == o.vocab - D;
		old_top += r.cat_idx[3] == 0;
		fixed_top += r.cat_idx[0] == 0;
	}
	print_message("day %d: slot 3 new top %.3f, old top %.3f; slot 0 top %.3f\n", D,
		      (double)new_top / N, (double)old_top / N, (double)fixed_top / N);
	/* Zipf(1.1) over 1e6: rank 0 has ~12% of the mass, rank 5 ~1.7%. */
	assert_true(new_top > N / 12 && new_top < N / 6);
	assert_true(old_top > N / 100 && old_top < N / 30);
	assert_true(fixed_top > N / 12 && fixed_top < N / 6);
	st_gen_destroy(g);
}

/* A model frozen at day 0 scores later days worse than each day's own
 * model (the Bayes-optimal score), and the more days have passed, the
 * worse: what online learning has to keep up with. */
static void test_gen_days_stale_model_auc_decays(void **state)
{
	(void)state;
	st_gen_opts_t o;
	gen_opts(&o, NULL, 1, 1);
	o.days = 17;
	o.drift = 0.1;
	st_gen_t *g;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	enum { N = 60000 };
	float *own = malloc(sizeof(float) * N), *stale = malloc(sizeof(float) * N);
	float *y = malloc(sizeof(float) * N);
	const int days[5] = { 0, 1, 2, 4, 16 };
	double prev_stale = 1.0;
	st_gen_row_t r;
	for (int j = 0; j < 5; j++) {
		int d = days[j];
		for (int i = 0; i < N; i++) {
			st_gen_day_row(g, d, ST_GEN_EVAL_BASE + (uint64_t)i, &r);
			/* The row's own day gives back its logit exactly. */
			assert_true(st_gen_logit(g, d, &r) == r.logit);
			own[i] = (float)r.logit;
			stale[i] = (float)st_gen_logit(g, 0, &r);
			y[i] = (float)r.label;
		}
		double a_own, a_stale;
		assert_int_equal(st_auc_exact(own, y, N, &a_own), ST_OK);
		assert_int_equal(st_auc_exact(stale, y, N, &a_stale), ST_OK);
		print_message("day %2d: bayes auc %.4f, day-0 model %.4f (loss %.4f)\n", d, a_own,
			      a_stale, a_own - a_stale);
		assert_true(a_own > 0.80 && a_own < 0.87);
		if (d == 0) {
			assert_true(a_own == a_stale);
		} else {
			/* Measured: 0.02 after one day, 0.1+ after 16. */
			assert_true(a_own - a_stale > 0.005 * d || a_own - a_stale > 0.05);
			assert_true(a_stale < prev_stale);
		}
		prev_stale = a_stale;
	}
	free(own);
	free(stale);
	free(y);
	st_gen_destroy(g);
}

/* Multi-hot (gen.h, issue 18): the '^'-joined lists of the written file,
 * read by the csv reader with list columns, give exactly the batch that
 * st_gen_fill_batch makes; lengths are 1..L; the row's logit is the one
 * st_gen_logit recomputes from its lists; first_only keeps key 0. */
static void test_gen_multihot(void **state)
{
	(void)state;
	enum { L = 7, N = 3000 };
	char *d = make_tmpdir();
	st_gen_opts_t o;
	gen_opts(&o, d, 17, 2);
	o.rows = N;
	o.files = 1;
	o.eval_rows = 0;
	o.multi_hot = L;
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	st_gen_t *g;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);

	uint8_t kinds[40];
	st_slot_opt_t so[26];
	memset(so, 0, sizeof so);
	kinds[0] = ST_COL_LABEL;
	for (int j = 1; j <= 13; j++)
		kinds[j] = ST_COL_DENSE;
	for (int s = 0; s < 26; s++) {
		kinds[14 + s] = ST_COL_CAT;
		so[s].list_sep = '^';
	}
	st_source_t src;
	memset(&src, 0, sizeof src);
	src.format = (char *)"csv";
	src.on_bad = ST_BAD_FAIL;
	src.limit = -1;
	src.sep = '\t';
	src.n_cols = 40;
	src.col_kind = kinds;
	src.slot_opt = so;
	src.n_dense = 13;
	src.n_slots = 26;
	char *p = train_name(d, 0);
	st_reader_t *r;
	assert_int_equal(st_reader_open(&r, &src, p), ST_OK);
	st_batch_t *a, *b, *f;
	assert_int_equal(st_batch_create(&a, N, 13, 26, 64), ST_OK);
	assert_int_equal(st_batch_create(&b, N, 13, 26, 64), ST_OK);
	assert_int_equal(st_batch_create(&f, N, 13, 26, 64), ST_OK);
	while (a->n < N) {
		int n = st_reader_next(r, a, N - a->n);
		assert_true(n > 0);
	}
	assert_int_equal(st_gen_fill_batch(g, 0, b, N), ST_OK);
	assert_int_equal(st_gen_fill_batch_ex(g, 0, f, N, 1), ST_OK);
	assert_memory_equal(a->labels, b->labels, sizeof(float) * N);
	assert_memory_equal(a->dense, b->dense, sizeof(float) * N * 13);
	assert_memory_equal(a->row_off, b->row_off, sizeof(uint32_t) * (N + 1));
	assert_memory_equal(a->keys, b->keys, sizeof(uint64_t) * st_batch_nkeys(b));
	assert_memory_equal(a->key_slot, b->key_slot, sizeof(uint16_t) * st_batch_nkeys(b));

	/* lengths, logits, and the first-key-only batch */
	static uint64_t idx[ST_GEN_N_CAT * ST_GEN_MAX_LIST];
	st_gen_row_t row;
	row.list_idx = idx;
	uint64_t keys = 0, fields = 0;
	for (uint32_t i = 0; i < N; i++) {
		st_gen_row(g, i, &row);
		assert_true(st_gen_logit(g, 0, &row) == row.logit);
		uint32_t kb = b->row_off[i], kf = f->row_off[i];
		for (int s = 0; s < 26; s++) {
			if (row.cat_missing & (1u << s))
				continue;
			assert_true(row.n_keys[s] >= 1 && row.n_keys[s] <= L);
			assert_true(f->keys[kf] == b->keys[kb]);   /* key 0 */
			assert_int_equal(f->key_slot[kf], s);
			kb += row.n_keys[s];
			kf++;
			keys += row.n_keys[s];
			fields++;
		}
		assert_int_equal(kb, b->row_off[i + 1]);
		assert_int_equal(kf, f->row_off[i + 1]);
	}
	/* uniform 1..L: mean (L + 1) / 2 = 4, within a few standard errors */
	double mean = (double)keys / (double)fields;
	assert_true(fabs(mean - (L + 1) / 2.0) < 0.05);

	st_reader_close(r);
	st_batch_destroy(a);
	st_batch_destroy(b);
	st_batch_destroy(f);
	st_gen_destroy(g);
	free(p);
	rm_dir(d, 1);
	free(d);

	/* multi-hot with days, or past the limit, is refused */
	o.days = 2;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.days = 0;
	o.multi_hot = ST_GEN_MAX_LIST + 1;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
}

/* --history L: every other field of a row is what it is without history
 * (the label aside: the logit moves), the file's last two columns are the
 * candidate and the '^'-joined history, lengths are uniform in 0..L, the
 * logit is st_gen_logit's and gains beta × the matching share, and clicks
 * do rise with that share; days, multi-hot and fill_batch refuse it. */
static void test_gen_history(void **state)
{
	(void)state;
	enum { L = 8, N = 6000 };
	char *d = make_tmpdir();
	st_gen_opts_t o, o0;
	gen_opts(&o, d, 23, 2);
	o.rows = N;
	o.files = 1;
	o.eval_rows = 0;
	o.history = L;
	o0 = o;
	o0.history = 0;
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	st_gen_t *g, *g0;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	assert_int_equal(st_gen_create(&g0, &o0), ST_OK);
	char *p = train_name(d, 0);
	size_t len;
	char *text = read_all(p, &len);
	assert_non_null(text);
	char *line = text, buf[2048], buf0[ST_GEN_MAX_LINE];
	assert_true(st_gen_max_line(g) <= sizeof buf);
	st_gen_row_t r, r0;
	r.list_idx = r0.list_idx = NULL;
	long lens = 0, empty = 0;
	double clicks[2] = { 0 }, rows[2] = { 0 };
	for (int i = 0; i < N; i++) {
		st_gen_row(g, (uint64_t)i, &r);
		st_gen_row(g0, (uint64_t)i, &r0);
		int n = st_gen_format(&r, buf), n0 = st_gen_format(&r0, buf0);
		buf[n] = 0;
		assert_memory_equal(line, buf, (size_t)n);   /* the file is the rows */
		/* fields 2..40 as without history, then two more columns */
		assert_memory_equal(buf + 1, buf0 + 1, (size_t)n0 - 2);
		assert_int_equal(buf[n0 - 1], '\t');
		assert_true(st_gen_logit(g, 0, &r) == r.logit);
		assert_true(r.has_hist && r.n_hist <= L && r.cand_cat < ST_GEN_HIST_CATS);
		int m = 0;
		for (int t = 0; t < r.n_hist; t++)
			m += r.hist_cat[t] == r.cand_cat;
		double term = r.n_hist ? ST_GEN_HIST_BETA * m / r.n_hist : 0.0;
		assert_true(fabs(st__gen_history_term(r.n_hist, r.hist_cat, r.cand_cat) - term) <
			    1e-12);
		/* the history column: n_hist 8-digit values joined by '^' */
		const char *h = strrchr(buf, '\t') + 1;
		int seps = 0;
		for (const char *c = h; *c != '\n'; c++)
			seps += *c == '^';
		assert_int_equal(strchr(h, '\n') - h, r.n_hist ? 9 * r.n_hist - 1 : 0);
		assert_int_equal(seps, r.n_hist ? r.n_hist - 1 : 0);
		lens += r.n_hist;
		empty += r.n_hist == 0;
		int hi = r.n_hist && 2 * m > r.n_hist;   /* most of the history matches */
		clicks[hi] += r.label;
		rows[hi] += 1;
		line += n;
	}
	/* uniform 0..L: mean L / 2, 1 / (L + 1) empty */
	assert_true(fabs((double)lens / N - L / 2.0) < 0.15);
	assert_true(fabs((double)empty / N - 1.0 / (L + 1)) < 0.02);
	/* beta 3 on a share above 1/2 lifts the click rate by far more than
	 * sampling noise (~0.02 on these counts) */
	assert_true(rows[1] > 300);
	assert_true(clicks[1] / rows[1] - clicks[0] / rows[0] > 0.2);

	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, 4, 13, 28, 64), ST_OK);
	assert_int_equal(st_gen_fill_batch(g, 0, b, 4), ST_EINVAL);   /* files only */
	st_batch_destroy(b);
	free(text);
	free(p);
	st_gen_destroy(g);
	st_gen_destroy(g0);
	rm_dir(d, 1);
	free(d);
	o.days = 2;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.days = 0;
	o.multi_hot = 2;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.multi_hot = 0;
	o.history = ST_GEN_MAX_LIST + 1;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
}

/* The planted cross term of row r: its logit under g (with --cross) less
 * its logit under g0 (the same options without), intercepts taken out. */
static double cross_delta(const st_gen_t *g, const st_gen_t *g0, const st_gen_row_t *r)
{
	return (st_gen_logit(g, 0, r) - st_gen_b0(g, 0)) - (st_gen_logit(g0, 0, r) - st_gen_b0(g0, 0));
}

/* --cross K: every field of a row is what it is without cross (only the
 * label may differ), the file is the rows, st_gen_logit gives back the
 * row's logit, the added term is a product of per-value factors of the two
 * slots of each pair (rank one: t(a,b) t(a',b') == t(a,b') t(a',b)), it
 * vanishes when a field of its pair is empty, clicks follow its sign, and
 * fill_batch carries the same labels; days, multi-hot and K past the limit
 * are refused. The default output (cross 0) is pinned by
 * test_gen_days0_output_unchanged's checksum. */
static void test_gen_cross(void **state)
{
	(void)state;
	enum { K = 2, N = 6000 };
	char *d = make_tmpdir();
	st_gen_opts_t o, o0;
	gen_opts(&o, d, 29, 2);
	o.rows = N;
	o.files = 1;
	o.eval_rows = 0;
	o.vocab = 1000;
	o.cross = K;
	o0 = o;
	o0.cross = 0;
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	st_gen_t *g, *g0;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	assert_int_equal(st_gen_create(&g0, &o0), ST_OK);
	char *p = train_name(d, 0);
	size_t len;
	char *text = read_all(p, &len);
	assert_non_null(text);
	char *line = text, buf[ST_GEN_MAX_LINE], buf0[ST_GEN_MAX_LINE];
	st_gen_row_t r, r0, prev;
	memset(&prev, 0, sizeof prev);
	r.list_idx = r0.list_idx = NULL;
	double clicks[2] = { 0 }, rows[2] = { 0 }, sum = 0.0, sum2 = 0.0;
	long label_diff = 0;
	for (int i = 0; i < N; i++) {
		st_gen_row(g, (uint64_t)i, &r);
		st_gen_row(g0, (uint64_t)i, &r0);
		int n = st_gen_format(&r, buf), n0 = st_gen_format(&r0, buf0);
		assert_int_equal(n, n0);
		assert_memory_equal(line, buf, (size_t)n);   /* the file is the rows */
		assert_memory_equal(buf + 1, buf0 + 1, (size_t)n - 1);   /* all but the label */
		label_diff += r.label != r0.label;
		assert_true(st_gen_logit(g, 0, &r) == r.logit);
		double t = cross_delta(g, g0, &r);
		sum += t;
		sum2 += t * t;
		if (fabs(t) > 1.0) {
			clicks[t > 0] += r.label;
			rows[t > 0] += 1;
		}
		if (i > 0) {
			/* Pair 0 on r's other fields, its keys taken from r and
			 * prev: f(x, y) = t - c with c the term of r without pair 0
			 * (slot 0 emptied), which must be beta z0(x) z1(y), so
			 * f(a,b) f(a',b') == f(a,b') f(a',b) (a sum z0 + z1 fails). */
			st_gen_row_t e0 = r, e1 = r, q = r;
			e0.cat_missing |= 1u << 0;
			e1.cat_missing |= 1u << 1;
			double c = cross_delta(g, g0, &e0);
			/* an empty field of the pair takes the pair's term out */
			assert_true(fabs(cross_delta(g, g0, &e1) - c) < 1e-12);
			double f[2][2];
			for (int x = 0; x < 2; x++)
				for (int y = 0; y < 2; y++) {
					q.cat_idx[0] = x ? prev.cat_idx[0] : r.cat_idx[0];
					q.cat_idx[1] = y ? prev.cat_idx[1] : r.cat_idx[1];
					f[x][y] = cross_delta(g, g0, &q) - c;
				}
			assert_true(fabs(f[0][0] * f[1][1] - f[0][1] * f[1][0]) < 1e-9);
		}
		prev = r;
		line += n;
	}
	/* labels move, and clicks follow the term's sign by far more than the
	 * sampling noise (~0.03 on these counts) */
	assert_true(label_diff > N / 20);
	assert_true(rows[0] > 300 && rows[1] > 300);
	assert_true(clicks[1] / rows[1] - clicks[0] / rows[0] > 0.3);
	/* K terms of variance ~beta^2 each, and a mean small beside their spread
	 * (the Zipf head's latents leave a little, cross.h) */
	double mean = sum / N, var = sum2 / N - mean * mean;
	assert_true(var > 0.5 * K * ST_GEN_CROSS_BETA * ST_GEN_CROSS_BETA);
	assert_true(fabs(mean) < 0.5 * sqrt(var));

	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, 64, 13, 26, 64 * 26), ST_OK);
	assert_int_equal(st_gen_fill_batch(g, 0, b, 64), ST_OK);
	for (int i = 0; i < 64; i++) {
		st_gen_row(g, (uint64_t)i, &r);
		assert_true(b->labels[i] == (float)r.label);
	}
	st_batch_destroy(b);
	free(text);
	free(p);
	st_gen_destroy(g);
	st_gen_destroy(g0);
	rm_dir(d, 1);
	free(d);
	o.days = 2;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.days = 0;
	o.multi_hot = 2;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.multi_hot = 0;
	o.cross = ST_GEN_MAX_CROSS + 1;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.cross = -1;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
}

/* --labels 2 (conv.h): the click label and every feature are those of the
 * one-label output, a second column holds the conversion, only on clicked
 * rows, driven by its own latents as well as the shared part; the file
 * reads back through a csv source of two label columns; bad options are
 * refused. */
static void test_gen_labels(void **state)
{
	(void)state;
	enum { N = 6000 };
	char *d = make_tmpdir();
	st_gen_opts_t o, o1;
	gen_opts(&o, d, 31, 2);
	o.rows = N;
	o.files = 1;
	o.eval_rows = 0;
	o.vocab = 1000;
	o.labels = 2;
	o1 = o;
	o1.labels = 1;
	assert_int_equal(st_gen_write(&o, NULL, NULL), ST_OK);
	st_gen_t *g, *g1;
	assert_int_equal(st_gen_create(&g, &o), ST_OK);
	assert_int_equal(st_gen_create(&g1, &o1), ST_OK);
	char *p = train_name(d, 0);
	size_t len;
	char *text = read_all(p, &len);
	assert_non_null(text);
	char *line = text, buf[ST_GEN_MAX_LINE], buf1[ST_GEN_MAX_LINE];
	st_gen_row_t r, r1;
	r.list_idx = r1.list_idx = NULL;
	double clicks = 0, convs = 0, hi[2] = { 0 }, lo[2] = { 0 };
	for (int i = 0; i < N; i++) {
		st_gen_row(g, (uint64_t)i, &r);
		st_gen_row(g1, (uint64_t)i, &r1);
		assert_int_equal(r1.conv, -1);
		assert_true(r.conv == 0 || r.conv == 1);
		assert_true(!r.conv || r.label);          /* a conversion needs a click */
		assert_int_equal(r.label, r1.label);
		int n = st_gen_format(&r, buf), n1 = st_gen_format(&r1, buf1);
		assert_int_equal(n, n1 + 2);
		assert_memory_equal(line, buf, (size_t)n);   /* the file is the rows */
		assert_true(buf[1] == '\t' && buf[2] == (char)('0' + r.conv));
		assert_true(buf[0] == buf1[0]);
		assert_memory_equal(buf + 3, buf1 + 1, (size_t)n1 - 1);   /* the rest as one label */
		clicks += r.label;
		convs += r.conv;
		if (r.label) {
			double own = st__gen_conv_own(o.seed, r.cat, r.cat_missing);
			if (own > 1.0) {
				hi[0]++;
				hi[1] += r.conv;
			} else if (own < -1.0) {
				lo[0]++;
				lo[1] += r.conv;
			}
		}
		line += n;
	}
	/* about half the clicks convert, and the conversion's own latents move
	 * it far beyond the sampling noise (~0.05 on these counts) */
	assert_true(convs > 0.3 * clicks && convs < 0.8 * clicks);
	assert_true(hi[0] > 100 && lo[0] > 100);
	assert_true(hi[1] / hi[0] - lo[1] / lo[0] > 0.3);

	/* read back: click, conversion, 13 dense, 26 cat */
	uint8_t kinds[41];
	kinds[0] = kinds[1] = ST_COL_LABEL;
	for (int k = 2; k < 15; k++)
		kinds[k] = ST_COL_DENSE;
	for (int k = 15; k < 41; k++)
		kinds[k] = ST_COL_CAT;
	st_source_t src;
	memset(&src, 0, sizeof src);
	src.format = (char *)"csv";
	src.sep = '\t';
	src.n_cols = 41;
	src.col_kind = kinds;
	src.n_dense = 13;
	src.n_slots = 26;
	src.n_labels = 2;
	src.on_bad = ST_BAD_FAIL;
	src.limit = -1;
	st_reader_t *rd;
	assert_int_equal(st_reader_open(&rd, &src, p), ST_OK);
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, 64, 13, 26, 64 * 26), ST_OK);
	assert_int_equal(st_batch_set_labels(b, 2), ST_OK);
	assert_int_equal(st_reader_next(rd, b, 64), 64);
	for (int i = 0; i < 64; i++) {
		st_gen_row(g, (uint64_t)i, &r);
		assert_true(b->labels[2 * i] == (float)r.label);
		assert_true(b->labels[2 * i + 1] == (float)r.conv);
	}
	st_batch_destroy(b);
	st_reader_close(rd);
	free(text);
	free(p);
	st_gen_destroy(g);
	st_gen_destroy(g1);
	rm_dir(d, 1);
	free(d);
	o.labels = 3;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.labels = 2;
	o.days = 2;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
	o.days = 0;
	o.multi_hot = 2;
	assert_int_equal(st_gen_create(&g, &o), ST_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gen_deterministic_across_threads),
		cmocka_unit_test(test_gen_format_rows_and_positive_rate),
		cmocka_unit_test(test_gen_fill_batch_matches_file),
		cmocka_unit_test(test_gen_reader_agrees_with_fill_batch),
		cmocka_unit_test(test_gen_zipf_skew),
		cmocka_unit_test(test_gen_zipf_matches_pmf),
		cmocka_unit_test(test_gen_bayes_auc_band),
		cmocka_unit_test(test_gen_bad_dir_fails_cleanly),
		cmocka_unit_test(test_gen_days0_output_unchanged),
		cmocka_unit_test(test_gen_days_files_deterministic),
		cmocka_unit_test(test_gen_days_bad_options),
		cmocka_unit_test(test_gen_days_positive_rate),
		cmocka_unit_test(test_gen_days_weight_correlation),
		cmocka_unit_test(test_gen_days_popularity_drift),
		cmocka_unit_test(test_gen_days_stale_model_auc_decays),
		cmocka_unit_test(test_gen_multihot),
		cmocka_unit_test(test_gen_history),
		cmocka_unit_test(test_gen_cross),
		cmocka_unit_test(test_gen_labels),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
