/*
 * read_internal.h — what the reader modules of ops/read/ share (private).
 *
 * read.c owns st_reader_t and the bad-record policy; criteo.c, libsvm.c and
 * csv.c each parse one line into the batch. A parser writes the row at index
 * b->n and commits it only by incrementing b->n as its last step, so a bad
 * record never leaves a partial row behind.
 */
#ifndef ST_READ_INTERNAL_H
#define ST_READ_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lines.h"
#include "read.h"

enum { ST__FMT_CRITEO = 1, ST__FMT_LIBSVM, ST__FMT_CSV };

/* Parser results besides negative errors. */
enum { ST__ROW_OK = 0, ST__ROW_BAD = 1 };

struct st_reader {
	int fmt;
	char *path;
	st__lines_t *lines;
	uint32_t n_dense, n_slots;
	uint32_t n_labels;     /* labels per row (b->n_labels must match) */
	int on_bad, max_report;
	st_read_stats_t stats;
	/* Bad records reported so far; points at own_reported or at a counter
	 * shared by all readers of a read stage so that max_report holds for
	 * the whole source. */
	atomic_uint_fast64_t *reported;
	atomic_uint_fast64_t own_reported;
	/* The current bad record, set by a parser returning ST__ROW_BAD:
	 * field is 0-based (-1 for the whole line), name may be NULL. */
	int bad_field;
	const char *bad_name;
	char bad_reason[192];
	char err[512];
	/* csv schema */
	char sep;
	int header;
	int n_cols;
	uint8_t *col_kind;
	char **col_name;       /* from the header line, or NULL */
	char *scratch;         /* unescaped quoted fields, max_line bytes */
	st_slot_opt_t *slot_opt; /* csv: [n_slots] (the source's, or single-valued
				    with the source's missing) */
	int missing;           /* criteo: enum st_missing */
	int dense_indicator;   /* criteo, csv: missing flags at n_dense/2 + j */
};

/* Opens like st_reader_open; on failure errbuf holds the reason. */
int st__reader_open_ex(st_reader_t **out, const st_source_t *src,
		       const char *path, char *errbuf, size_t errlen);

/* Parses from memory (not copied) with a small buffer: for fuzzers and
 * tests. buf_size/max_line 0 = defaults. name is used in messages. */
int st__reader_open_mem(st_reader_t **out, const st_source_t *src,
			const char *name, const void *data, size_t len,
			size_t buf_size, size_t max_line);

/* Makes the reader count reported bad records in *counter (shared). */
void st__reader_share_reported(st_reader_t *r, atomic_uint_fast64_t *counter);

/* Records a bad record's details (printf-style reason). Returns ST__ROW_BAD. */
int st__reader_bad(st_reader_t *r, int field, const char *name,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Writes a printable, truncated copy of bytes into dst (for messages). */
void st__read_quote(char *dst, size_t dstlen, const char *s, size_t n);

/* Number parsing shared by the parsers. Both reject empty input, signs
 * without digits, and trailing junk (ST_EINVAL); they never read past
 * p + n. st__read_float returns ST_ERANGE for a value past a float's. */
int st__read_int(const char *p, size_t n, int64_t *out);
int st__read_float(const char *p, size_t n, float *out);

int st__criteo_parse(st_reader_t *r, st_batch_t *b, const char *line, size_t len);
int st__libsvm_parse(st_reader_t *r, st_batch_t *b, const char *line, size_t len);
int st__csv_parse(st_reader_t *r, st_batch_t *b, const char *line, size_t len);
/* Reads the header line: names for messages, and a column count check. */
int st__csv_header(st_reader_t *r, const char *line, size_t len);

#endif
