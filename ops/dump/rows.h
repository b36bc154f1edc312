/*
 * rows.h — the sparse row file: one embedding table (or a delta of one) in
 * checkpoints and exports.
 *
 * Little-endian throughout (docs/formats.md has the byte tables):
 *
 *   header   64 bytes   "STRATARW", version, flags (bit 0: delta), table id,
 *                       dim, state_dim, row count, deleted count, reserved,
 *                       XXH3-64 of the 56 bytes before it
 *   rows     n_rows x (16 + 4 (dim + state_dim)) bytes, strictly increasing key:
 *                       u64 key, u32 last_step, u32 freq,
 *                       f32 emb[dim], f32 state[state_dim]
 *   deleted  n_deleted x u64, strictly increasing (delta files only)
 *   footer   32 bytes   "STRATAFT", row count, deleted count,
 *                       XXH3-64 of every byte before the footer
 *
 * The size of a file follows from its header, so truncation anywhere is
 * found before a row is read; a flipped bit is found by the header checksum
 * or, at the end of the stream, by the footer's. A reader must not commit
 * what it streamed until st_rows_reader_next has returned 0.
 *
 * Thread-safety: functions are reentrant; one reader or writer object is
 * used by one thread at a time.
 */
#ifndef ST_DUMP_ROWS_H
#define ST_DUMP_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/dump/dumpio.h"

#define ST_ROWS_VERSION 1
#define ST_ROWS_HEADER_SIZE 64
#define ST_ROWS_FOOTER_SIZE 32
/* Bound on dim + state_dim, so a damaged header cannot ask for huge rows. */
#define ST_ROWS_MAX_FLOATS (1u << 20)

enum { ST_ROWS_DELTA = 1u << 0 };   /* flags: a delta (may carry deleted keys) */

/* The header. Writing: the caller sets table_id, dim, state_dim and flags;
 * version and the counts are filled in by the writer. Reading: all set. */
typedef struct st_rows_info {
	uint32_t version;
	uint32_t flags;
	uint64_t table_id;
	uint32_t dim;         /* embedding floats, >= 1 */
	uint32_t state_dim;   /* optimizer-state floats, >= 0 */
	uint64_t n_rows;
	uint64_t n_deleted;   /* 0 unless flags has ST_ROWS_DELTA */
} st_rows_info_t;

/* One row. vals holds dim + state_dim floats: the embedding, then the
 * optimizer state (the layout of a st_table row). */
typedef struct st_rows_row {
	uint64_t key;
	uint32_t last_step;
	uint32_t freq;
	const float *vals;
} st_rows_row_t;

/*
 * Writes a row file from the caller's rows in any order: sorts rows[] and
 * deleted[] in place by key (the arrays are reordered; the floats are not
 * copied but streamed from row.vals), writes, fsyncs. A key given twice, or
 * both as a row and as deleted, is ST_EINVAL, as are deleted keys in a full
 * file. Returns ST_OK and *sum (size and XXH3 of the whole file; may be
 * NULL), ST_EINVAL, ST_ENOSPC, ST_EIO, ST_ENOMEM; on failure nothing is left
 * at path and err (may be NULL) holds "path: reason". Nothing is kept.
 */
int st_rows_write(const char *path, const st_rows_info_t *info, st_rows_row_t *rows, size_t n,
		  uint64_t *deleted, size_t n_deleted, st_dumpio_sum_t *sum, char *err, size_t errlen);

/*
 * A builder for callers that produce rows one at a time (say under a shard
 * lock, to snapshot a table that training keeps changing): add copies the
 * row, so memory is one copy of the rows plus 16 bytes a row, and from the
 * first finish on 16 more (the sort's second array, kept with the rows).
 */
typedef struct st_rows_writer st_rows_writer_t;

/* Creates an empty builder for info (counts ignored). ST_OK, ST_EINVAL for
 * dim == 0 or too many floats, ST_ENOMEM. The caller destroys it. */
int st_rows_writer_create(st_rows_writer_t **out, const st_rows_info_t *info);

/* Copies one row (dim + state_dim floats from vals). ST_OK or ST_ENOMEM. */
int st_rows_writer_add(st_rows_writer_t *w, uint64_t key, uint32_t last_step, uint32_t freq,
		       const float *vals);

/* Records a deleted key (delta builders only; ST_EINVAL otherwise). */
int st_rows_writer_delete(st_rows_writer_t *w, uint64_t key);

/* Forgets the rows and deleted keys added so far but keeps the memory that
 * held them, so that building the same table again (the next checkpoint)
 * writes into pages that are already mapped instead of faulting in fresh,
 * zeroed ones. The info stays. */
void st_rows_writer_reset(st_rows_writer_t *w);

/* Makes room for `rows` rows in all, writing the new memory once so that
 * it is mapped: adding up to that many rows (after a reset) then faults in
 * no fresh page. For a caller that can spend that time before it needs the
 * rows (a trainer between two checkpoints, while the next copy would hold
 * training). ST_OK or ST_ENOMEM (the rows added so far stay). */
int st_rows_writer_reserve(st_rows_writer_t *w, size_t rows);

/* Rows added so far. */
size_t st_rows_writer_count(const st_rows_writer_t *w);

/* The info the builder was created with. Owned by w. */
const st_rows_info_t *st_rows_writer_info(const st_rows_writer_t *w);

/* Sorts and writes everything added so far, as st_rows_write. The builder
 * keeps its rows (it may write them again) until destroyed or reset. */
int st_rows_writer_finish(st_rows_writer_t *w, const char *path, st_dumpio_sum_t *sum,
			  char *err, size_t errlen);

/* Frees the builder and its copies (NULL-safe). */
void st_rows_writer_destroy(st_rows_writer_t *w);

/*
 * Streaming reader. open validates the header, the file size and the footer
 * (so a truncated file fails here, with ST_ECORRUPT); next returns the rows
 * in key order; after the last row it reads the deleted keys and checks the
 * footer checksum, and only then returns 0.
 */
typedef struct st_rows_reader st_rows_reader_t;

/* ST_OK and *out (the caller closes it), ST_ENOENT / ST_EIO, ST_ENOMEM,
 * ST_EFORMAT (not a row file, unknown version or flags), ST_ECORRUPT
 * (truncated, bad header checksum, bad footer); message in err. */
int st_rows_reader_open(const char *path, st_rows_reader_t **out, char *err, size_t errlen);

/* The header of the open file. */
const st_rows_info_t *st_rows_reader_info(const st_rows_reader_t *r);

/* 1 and *row (row->vals valid until the next call), 0 at the end with the
 * checksum verified, or ST_ECORRUPT / ST_EIO (then st_rows_reader_error). */
int st_rows_reader_next(st_rows_reader_t *r, st_rows_row_t *row);

/* Most rows one st_rows_reader_next_batch call returns. */
#define ST_ROWS_BATCH_MAX 4096

/* Up to max (at most ST_ROWS_BATCH_MAX, and at most the rows that fit the
 * reader's 8 MiB buffer) next rows in key order, checked as by
 * st_rows_reader_next: returns how many (>= 1) with rows[0..count) filled
 * and every rows[i].vals valid until the next call, 0 at the end with the
 * checksum verified, or ST_ECORRUPT / ST_EIO. For callers that insert rows in
 * batches (st_table_resolve). */
int st_rows_reader_next_batch(st_rows_reader_t *r, st_rows_row_t *rows, size_t max);

/* Size and XXH3-64 of the whole file (header, rows, deleted keys and
 * footer: what a manifest lists, st_dumpio), from the bytes the reader
 * read, so that a loader verifies a file against its manifest in the pass
 * that loads it. ST_OK and *sum once the reader reached the end of the
 * stream: next returned 0, or ST_ECORRUPT for a footer checksum that does
 * not match; ST_EAGAIN before (and after a failure earlier in the
 * stream). */
int st_rows_reader_sum(const st_rows_reader_t *r, st_dumpio_sum_t *sum);

/* The deleted keys, sorted; valid once next has returned 0, owned by r. */
const uint64_t *st_rows_reader_deleted(const st_rows_reader_t *r, size_t *n);

/* "path: reason" of the last failure ("" if none). Owned by r. */
const char *st_rows_reader_error(const st_rows_reader_t *r);

/* Closes and frees (NULL-safe). */
void st_rows_reader_close(st_rows_reader_t *r);

/* A whole file in memory, columns by row index. */
typedef struct st_rows_file {
	st_rows_info_t info;
	uint64_t *keys;        /* n_rows, strictly increasing */
	uint32_t *last_step;   /* n_rows */
	uint32_t *freq;        /* n_rows */
	float *vals;           /* n_rows x (dim + state_dim) */
	uint64_t *deleted;     /* n_deleted, strictly increasing */
} st_rows_file_t;

/* Reads and verifies a whole file (as the streaming reader, plus: no key is
 * both a row and deleted). ST_OK and *out (free with st_rows_file_free), or
 * the reader's codes with the message in err. */
int st_rows_read(const char *path, st_rows_file_t **out, char *err, size_t errlen);

void st_rows_file_free(st_rows_file_t *f);

#endif
