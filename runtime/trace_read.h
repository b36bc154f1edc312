/*
 * trace_read.h — reading back a trace written by st_trace_write (trace.h):
 * one event at a time through a callback (st_trace_read, what `strata
 * report` draws from), and the per-stage sums of `strata trace summarize`
 * built on it. One reader for both, so the two commands agree on what a
 * file holds.
 *
 * The reader is line-based: st_trace_write puts one event per line, and
 * other Chrome traces whose events are one per line also work. A line
 * without a "ph" field is not an event (the header, the closing bracket).
 *
 * Library-grade: includes no runtime-wide header; errors are negative errno
 * values (== ST_E* codes). Thread-safe: no shared state.
 */
#ifndef ST_TRACE_READ_H
#define ST_TRACE_READ_H

#include <stdint.h>

#include "runtime/trace.h"

/* One event as read back. Strings are cut to their buffers; a field the
 * line lacks is "" (strings), -1 (dur_us, batch) or 0. */
typedef struct st_trace_rec {
	char ph;                   /* 'X' span, 'C' counter, 'i' instant, 'M' metadata */
	int tid;
	double ts_us;              /* µs since the recorder opened */
	double dur_us;             /* 'X' */
	double value;              /* 'C': the counter's value */
	int64_t batch;             /* 'X': args.batch */
	char cat[16];
	char name[64];
	char stage[32];
	char detail[ST_TRACE_TEXT]; /* 'i': args.detail; 'M': args.name */
} st_trace_rec_t;

/* Called once per event in file order; a negative return stops the read
 * and is returned by st_trace_read. */
typedef int (*st_trace_rec_fn)(const st_trace_rec_t *r, void *ctx);

/* Reads path and calls fn for every event. *dropped (may be NULL) gets the
 * file's otherData.dropped (0 when absent). ST_OK; -errno when the file
 * cannot be read; -EINVAL when it holds no trace events; fn's negative
 * return. */
int st_trace_read(const char *path, st_trace_rec_fn fn, void *ctx, uint64_t *dropped);

#define ST_TRACE_MAX_STAGES 16

typedef struct st_trace_stage_sum {
	char name[32];
	int threads;           /* tracks with spans of this stage */
	uint64_t spans;        /* work spans (batches handled) */
	double busy_s;         /* in the stage's op */
	double idle_s;         /* waiting for input (empty input queue) */
	double blocked_s;      /* waiting to hand a batch on (full output queue) */
} st_trace_stage_sum_t;

typedef struct st_trace_summary {
	int n;
	st_trace_stage_sum_t st[ST_TRACE_MAX_STAGES];
	int bottleneck;        /* index into st, -1 when no stage has spans */
	uint64_t dropped;      /* events the rings dropped (the summary covers the newest) */
	uint64_t events;       /* events read */
	double wall_s;         /* the pipeline's time: first to last stage span */
} st_trace_summary_t;

/* Reads a trace (st_trace_read) and sums, per stage, the spans of cat
 * "stage" (busy) and "wait" (name "wait input": idle; "wait output":
 * blocked). The bottleneck is the stage whose threads were each busy the
 * longest, i.e. the largest share of the pipeline's time (wall_s; a stage
 * whose threads ended early does not fill it). ST_OK; -errno when the file
 * cannot be read; -EINVAL when it holds no trace events. */
int st_trace_summarize(const char *path, st_trace_summary_t *out);

#endif
