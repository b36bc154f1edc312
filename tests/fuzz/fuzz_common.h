/*
 * fuzz_common.h — shared by the reader fuzz targets: sources for each
 * format and a loop that reads every row of an input and checks the batch.
 */
#ifndef ST_FUZZ_COMMON_H
#define ST_FUZZ_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/read/read.h"
#include "ops/read/read_internal.h"
#include "runtime/err.h"

static inline void fuzz_source_base(st_source_t *s, const char *fmt)
{
	memset(s, 0, sizeof *s);
	s->format = (char *)fmt;
	s->on_bad = ST_BAD_SKIP;
	s->max_report = 0;   /* keep the fuzzer's output quiet */
	s->limit = -1;
}

static inline void fuzz_source_criteo(st_source_t *s)
{
	fuzz_source_base(s, "criteo");
	s->n_dense = 13;
	s->n_slots = 26;
}

static inline void fuzz_source_libsvm(st_source_t *s)
{
	fuzz_source_base(s, "libsvm");
	s->n_slots = 8;
}

static inline void fuzz_source_csv(st_source_t *s)
{
	static uint8_t kinds[6] = { ST_COL_LABEL, ST_COL_DENSE, ST_COL_CAT,
				    ST_COL_IGNORE, ST_COL_CAT, ST_COL_DENSE };
	fuzz_source_base(s, "csv");
	s->sep = ',';
	s->header = 1;
	s->n_cols = 6;
	s->col_kind = kinds;
	s->n_dense = 2;
	s->n_slots = 2;
	/* slot 0 single with a missing key; slot 1 (column 4) a '^' list of
	 * at most 4 keys, the last ones kept: every list path of csv.c */
	static st_slot_opt_t so[2] = {
		{ .missing = ST_MISSING_KEY },
		{ .list_sep = '^', .max_len = 4, .keep_last = 1, .missing = ST_MISSING_KEY },
	};
	s->slot_opt = so;
}

static inline void fuzz_read_all(const st_source_t *src, const uint8_t *data,
				 size_t size)
{
	st_reader_t *r;
	st_batch_t *b;
	st_log_set_level(ST_LOG_ERROR);  /* bad records are the common case */
	/* 256-byte buffer, 200-byte lines: refills every few lines. */
	if (st__reader_open_mem(&r, src, "fuzz", data, size, 256, 200) < 0)
		abort();
	if (st_batch_create(&b, 8, (uint32_t)src->n_dense,
			    (uint32_t)src->n_slots, 4) < 0 ||
	    st_batch_set_labels(b, (uint32_t)st_source_labels(src)) < 0)
		abort();
	for (;;) {
		st_batch_clear(b);
		int n = st_reader_next(r, b, 8);
		if (n < 0)
			abort();    /* memory input: only bad records, skipped */
		if (n == 0)
			break;
		if (b->n != (uint32_t)n || b->n > b->cap)
			abort();
		for (uint32_t i = 0; i < b->n; i++)
			if (b->row_off[i] > b->row_off[i + 1])
				abort();
		for (uint32_t k = 0; k < st_batch_nkeys(b); k++)
			if (b->key_slot[k] >= b->n_slots)
				abort();
		/* libsvm reads every label as 0 or 1 (> 0 is 1) */
		for (uint32_t i = 0; !strcmp(src->format, "libsvm") && i < b->n * b->n_labels; i++)
			if (b->labels[i] != 0.0f && b->labels[i] != 1.0f)
				abort();
	}
	st_read_stats_t st;
	st_reader_stats(r, &st);
	if (st.bytes != size)
		abort();    /* every byte is consumed exactly once */
	st_reader_close(r);
	st_batch_destroy(b);
}

#endif
