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

#include "ops/gen/gen.h"
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
