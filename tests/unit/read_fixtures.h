/*
 * read_fixtures.h — synthetic Criteo (dac) files for the reader tests, so
 * that they run real cases in a clone without the shared real data
 * (../shared/data). The test writes the file itself (no golden file to keep
 * in step) and gets back every value it wrote, so a check compares the
 * whole batch, not a few sums.
 *
 * The file has the quirks of the real samples (SOURCES.md): empty I and C
 * fields, negative I values, I5 up to 1.6 million (still exact in float),
 * 8-hex C values, rows whose last C fields are all empty, and optionally
 * those trailing TABs stripped with no final newline (the pytorch-fm
 * sample), or CRLF line ends. Deterministic for a seed.
 *
 * Header-only with static functions: each test is one program.
 */
#ifndef ST_TEST_READ_FIXTURES_H
#define ST_TEST_READ_FIXTURES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/read/read.h"
#include "runtime/batch.h"

enum {
	TF_STRIP = 1,       /* drop trailing empty C fields (their TABs) */
	TF_NO_FINAL_NL = 2, /* no newline after the last row */
	TF_CRLF = 4,        /* "\r\n" line ends */
};

/* What a reader must produce from the file (the batch's arrays). */
typedef struct tf_criteo {
	uint32_t n;
	float *labels;        /* [n] */
	float *dense;         /* [n * 13]; an empty field reads as 0 */
	uint32_t *row_off;    /* [n + 1] */
	uint64_t *keys;       /* [n_keys] */
	uint16_t *key_slot;   /* [n_keys] */
	uint32_t n_keys;
	uint32_t pos;         /* rows labelled 1 */
	double dense_sum;     /* exact: every value is an integer below 2^24 */
	size_t bytes;         /* file size */
} tf_criteo_t;

static inline uint64_t tf_rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Writes n rows to path; fills *exp (free with tf_criteo_free) unless NULL.
 * Aborts on I/O errors (a test fixture cannot be half-written). */
static inline void tf_criteo_write(const char *path, uint32_t n, uint64_t seed, int flags,
				   tf_criteo_t *exp)
{
	FILE *f = fopen(path, "wb");
	if (!f) {
		perror(path);
		abort();
	}
	tf_criteo_t e;
	memset(&e, 0, sizeof e);
	e.n = n;
	e.labels = calloc(n, sizeof *e.labels);
	e.dense = calloc((size_t)n * 13, sizeof *e.dense);
	e.row_off = calloc((size_t)n + 1, sizeof *e.row_off);
	e.keys = calloc((size_t)n * 26, sizeof *e.keys);
	e.key_slot = calloc((size_t)n * 26, sizeof *e.key_slot);
	if (!e.labels || !e.dense || !e.row_off || !e.keys || !e.key_slot)
		abort();
	uint64_t s = seed;
	const char *nl = flags & TF_CRLF ? "\r\n" : "\n";
	for (uint32_t i = 0; i < n; i++) {
		char line[1024];
		size_t o = 0;
		int label = tf_rnd(&s) % 100 < 22;
		e.labels[i] = (float)label;
		e.pos += (uint32_t)label;
		o += (size_t)snprintf(line + o, sizeof line - o, "%d", label);
		for (int j = 0; j < 13; j++) {
			uint64_t r = tf_rnd(&s);
			line[o++] = '\t';
			if (r % 6 == 0)
				continue;   /* empty */
			long v = j == 4 ? (long)(r % 1618113) : (long)(r % 65536);
			if (j == 1 && r % 10 == 1)
				v = -1 - (long)(r % 2);   /* I2 has -1 and -2 */
			e.dense[(size_t)i * 13 + (size_t)j] = (float)v;
			e.dense_sum += (double)v;
			o += (size_t)snprintf(line + o, sizeof line - o, "%ld", v);
		}
		/* Every 5th row has its last 1..4 C fields empty, every 50th all
		 * of them; elsewhere a C field is empty one time in 8. */
		int tail_empty = i % 50 == 0 ? 26 : i % 5 == 0 ? 1 + (int)(i / 5 % 4) : 0;
		int last = -1;   /* last non-empty C field */
		char cval[26][9];
		for (int c = 0; c < 26; c++) {
			uint64_t r = tf_rnd(&s);
			cval[c][0] = 0;
			if (c >= 26 - tail_empty || r % 8 == 0)
				continue;
			snprintf(cval[c], sizeof cval[c], "%08x", (unsigned)(r >> 32));
			last = c;
		}
		int upto = flags & TF_STRIP ? last : 25;
		for (int c = 0; c <= upto; c++) {
			line[o++] = '\t';
			if (!cval[c][0])
				continue;
			memcpy(line + o, cval[c], 8);
			o += 8;
			e.keys[e.n_keys] = st_read_key((uint32_t)c, cval[c], 8);
			e.key_slot[e.n_keys++] = (uint16_t)c;
		}
		e.row_off[i + 1] = e.n_keys;
		if (i + 1 < n || !(flags & TF_NO_FINAL_NL)) {
			memcpy(line + o, nl, strlen(nl));
			o += strlen(nl);
		}
		if (fwrite(line, 1, o, f) != o)
			abort();
		e.bytes += o;
	}
	if (fclose(f) != 0)
		abort();
	if (exp)
		*exp = e;
	else {
		free(e.labels);
		free(e.dense);
		free(e.row_off);
		free(e.keys);
		free(e.key_slot);
	}
}

static inline void tf_criteo_free(tf_criteo_t *e)
{
	free(e->labels);
	free(e->dense);
	free(e->row_off);
	free(e->keys);
	free(e->key_slot);
	memset(e, 0, sizeof *e);
}

/* The batch holds exactly the rows of e (key values all 1). */
static inline void tf_criteo_assert_batch(const tf_criteo_t *e, const st_batch_t *b)
{
	assert_int_equal(b->n, e->n);
	assert_memory_equal(b->labels, e->labels, sizeof(float) * e->n);
	assert_memory_equal(b->dense, e->dense, sizeof(float) * e->n * 13);
	assert_memory_equal(b->row_off, e->row_off, sizeof(uint32_t) * (e->n + 1));
	assert_int_equal(st_batch_nkeys(b), e->n_keys);
	assert_memory_equal(b->keys, e->keys, sizeof(uint64_t) * e->n_keys);
	assert_memory_equal(b->key_slot, e->key_slot, sizeof(uint16_t) * e->n_keys);
	for (uint32_t k = 0; k < e->n_keys; k++)
		assert_true(b->key_val[k] == 1.0f);
}

#endif
