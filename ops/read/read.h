/*
 * read.h — data readers: Criteo TSV, libsvm/libffm, CSV with a schema.
 *
 * A reader parses one file (plain, .gz or .zst by extension) and appends
 * rows to a batch. Each categorical value is hashed together with its slot
 * into a 64-bit key with xxh3 (st_read_key). Bad records are counted; the
 * first src->max_report are logged with "file:line: field N: reason"; under
 * on_bad = ST_BAD_FAIL the first one stops reading with ST_EBADREC and the
 * message is available from st_reader_error.
 *
 * A reader object is used by one thread at a time. Sharding across reader
 * threads is by file (st_read_stage_* below hands files out in order).
 */
#ifndef ST_READ_H
#define ST_READ_H

#include <stdint.h>

#include "lang/job.h"
#include "runtime/batch.h"
#include "runtime/graph.h"

typedef struct st_reader st_reader_t;

typedef struct st_read_stats {
	uint64_t rows;        /* good rows appended */
	uint64_t bad;         /* bad records seen (skipped or fatal) */
	uint64_t bytes;       /* uncompressed bytes consumed */
	/* Categorical fields of the good rows (docs/job-language.md, "List
	 * fields" and "Missing values"): */
	uint64_t lists_truncated;  /* lists longer than their max_len */
	uint64_t list_items_empty; /* empty items inside lists ("a^^b"), skipped */
	uint64_t lists_empty;      /* list fields with no item at all */
	uint64_t missing_keys;     /* empty fields given their missing key */
} st_read_stats_t;

/* The missing key of a slot: st_read_key(slot, "<missing>"). A raw value
 * that is literally "<missing>" shares it, on purpose. */
#define ST_READ_MISSING "<missing>"
uint64_t st_read_missing_key(uint32_t slot);

/* Opens `path` for the format in src. Returns ST_OK and *out, ST_ENOENT /
 * ST_EIO (message via st_reader_error on a NULL-safe static buffer is not
 * possible, so the message is logged), or ST_EFORMAT. Caller closes. */
int st_reader_open(st_reader_t **out, const st_source_t *src, const char *path);

/* Appends up to max_rows rows to b (never past b->cap). Returns the number of
 * rows appended (0 = end of file), or ST_EBADREC / ST_EIO / ST_ENOMEM. */
int st_reader_next(st_reader_t *r, st_batch_t *b, uint32_t max_rows);

/* Message of the last error ("data/x.tsv:17: field 3 (I3): 'abc' is not an integer"). */
const char *st_reader_error(const st_reader_t *r);

void st_reader_stats(const st_reader_t *r, st_read_stats_t *out);

void st_reader_close(st_reader_t *r);

/* The 64-bit key of a categorical value in a slot: xxh3 of the raw bytes
 * seeded with the slot number. Same bytes in another slot give another key. */
uint64_t st_read_key(uint32_t slot, const char *val, size_t len);

/*
 * The read stage: a source op for the graph. Files of the source are handed
 * out to reader threads in order (file i to the next idle thread); each
 * thread fills batches of batch_size rows (a batch may be short at the end of
 * a file) and stamps seq. `epochs` passes are made over the files.
 */
typedef struct st_read_stage st_read_stage_t;

int st_read_stage_create(st_read_stage_t **out, const st_source_t *src,
			 uint32_t batch_size, int epochs, int eval);
/* Resume (checkpoints): the stage starts at file cursor index `file` (over
 * paths x epochs), drops that file's first `records` records, numbers
 * batches from `seq` and counts `consumed` records against src->limit as
 * already read. Before the graph runs. ST_OK or ST_EINVAL. Exact with one
 * read thread (the position of a multi-threaded read is only that of the
 * batches the trainer saw in order). */
int st_read_stage_seek(st_read_stage_t *s, uint64_t file, uint64_t records, uint64_t seq,
		       uint64_t consumed);
/* Multi-process jobs: keep only batches with seq % shards == shard (the
 * others are read and dropped), so the ranks split the stream batch by
 * batch and rank r trains batches r, r + P, ... — the single-process
 * order. Needs one read thread (batch numbers must not depend on timing).
 * Before the graph runs. ST_OK or ST_EINVAL. */
int st_read_stage_shard(st_read_stage_t *s, int shard, int shards);
extern const st_stage_ops_t st_read_stage_ops;
void st_read_stage_totals(const st_read_stage_t *s, st_read_stats_t *out);
/* After the graph ran (the readers are closed): the bad records of the pass
 * against src->max_bad_fraction, as a share of every record read (good ones
 * of every shard included, so the ranks of a multi-process job agree).
 * Skipped bad records are a warning; above the fraction the pass fails:
 * ST_EBADREC, logged with `name` ("train", "eval"), the source's first
 * path, the counts and what to do. ST_OK when no record was bad, and under
 * on_bad = fail (the first one already stopped the pass). */
int st_read_stage_check_bad(const st_read_stage_t *s, const char *name);
void st_read_stage_destroy(st_read_stage_t *s);

#endif
