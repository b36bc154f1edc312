/*
 * trace.h — a process-wide recorder of a timeline: spans, counters and
 * instant events per thread, written as a Chrome trace-event JSON file
 * (the format ui.perfetto.dev and chrome://tracing open; docs/observability.md).
 *
 * Recording: each thread that records gets its own buffer the first time it
 * records (one mutex taken once, at that moment; its track is named after
 * the thread's name, "st-read-0"). After that an event is a fixed-size
 * record appended to the thread's own buffer: no lock, no allocation, no
 * shared write. A buffer is a ring: when it is full the oldest events of
 * that thread are overwritten, so a long run keeps the newest
 * `events_per_thread` events of every thread and memory stays bounded
 * (events_per_thread x sizeof(st_trace_ev_t) per thread). A thread that
 * exits hands its buffer back; the next thread with the same name (the
 * same stage's thread in the next pass) appends to it, so a stage keeps
 * one track for the whole run.
 *
 * Writing: st_trace_write reads every buffer. It must run when no thread
 * records any more (after the stage threads and every other recording
 * thread were joined): buffers are written by their thread only and read
 * by the writer only after that, which is what makes them race-free
 * without atomics on the hot path.
 *
 * Names: `cat` and `name` of spans and counters are stored as pointers, so
 * they must live until st_trace_write: string literals, or strings from
 * st_trace_intern. Instant texts are copied (cut to ST_TRACE_TEXT - 1 bytes)
 * under the recorder's mutex: instants are rare (phases, policy switches,
 * checkpoints, errors), never one per batch.
 *
 * Library-grade: includes no runtime-wide header; errors are negative errno
 * values (== ST_E* codes).
 */
#ifndef ST_TRACE_H
#define ST_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* Default ring size per thread (events); 4 MiB per thread. */
#define ST_TRACE_DEFAULT_EVENTS 65536
#define ST_TRACE_TEXT 512       /* longest instant text kept, with its NUL */

/* One recorded event (fixed size: 64 bytes). */
typedef struct st_trace_ev {
	uint64_t ts;          /* ns since st_trace_open (CLOCK_MONOTONIC) */
	uint64_t dur;         /* 'X': ns */
	const char *cat;      /* 'X': "stage", "wait", "work", "pass", "file",
			       * "round"; 'C': unused */
	const char *name;
	const char *stage;    /* optional: the pipeline stage it belongs to */
	int64_t id;           /* 'X': batch id (written "batch"; cat "pass": the
			       * phase, written "phase"; cat "file": a file's
			       * number, "file"; cat "round": a background
			       * round's count, "round"; cat "step": a
			       * policy's step, "step"), -1 none */
	union {
		double value;     /* 'C': the counter's value */
		const char *text; /* 'i': detail (a copy the recorder owns) */
	} u;
	char ph;              /* 'X' span, 'C' counter, 'i' instant */
} st_trace_ev_t;

/* Turns recording on for this process with rings of events_per_thread
 * events (0: the default). ST_OK; -EINVAL if already open; -ENOMEM.
 * Not thread-safe against recording threads: call before they start. */
int st_trace_open(size_t events_per_thread);

/* 1 while recording is on. Cheap (a relaxed atomic load); every hook
 * checks it first so that a run without --trace pays one load per event. */
int st_trace_enabled(void);

/* CLOCK_MONOTONIC now, in ns (the clock of every event). */
uint64_t st_trace_now(void);

/* A copy of s owned by the recorder until st_trace_close (so names built
 * at run time can be recorded by pointer). NULL when not open or out of
 * memory. Thread-safe; takes the recorder's mutex: not for the hot path. */
const char *st_trace_intern(const char *s);

/* A span [t0, t1] (st_trace_now values) on the calling thread's track.
 * cat, name and stage (may be NULL) must outlive the trace (see above); id
 * is the batch id (-1 for none; for cats "pass", "file", "round" and "step" what
 * st_trace_ev_t.id says). No-op when not recording. Thread-safe:
 * writes the caller's own buffer only. */
void st_trace_span(const char *cat, const char *name, const char *stage,
		   uint64_t t0, uint64_t t1, int64_t id);

/* A value of the counter track `name` (process-wide track, one per name). */
void st_trace_counter(const char *name, double value);

/* An instant event (phase or policy switch, checkpoint, error) with a
 * detail text (printf format; copied and cut). Takes the recorder's mutex
 * to copy the text: not for per-batch events. */
void st_trace_instant(const char *name, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Names the calling thread's track before its first event (default: the
 * thread's OS name). Copied. */
void st_trace_thread_name(const char *name);

typedef struct st_trace_stats {
	int threads;           /* tracks */
	uint64_t events;       /* recorded, kept or not */
	uint64_t kept;         /* still in the rings */
	uint64_t dropped;      /* overwritten by newer events */
	size_t events_per_thread;
} st_trace_stats_t;

/* Counts so far. Same rule as st_trace_write: no thread may be recording. */
void st_trace_stats(st_trace_stats_t *out);

/* Writes the Chrome trace-event JSON file: one process (pid, named
 * process_name), one track (tid) per buffer with its thread name, then
 * every event kept, one per line. No thread may be recording (see above).
 * ST_OK, or -errno of the failed open/write. */
int st_trace_write(const char *path, int pid, const char *process_name);

/* Turns recording off and frees every buffer and interned string. After
 * it st_trace_open may be called again. No thread may be recording. */
void st_trace_close(void);

/* Reading a trace back (`strata trace summarize`, `strata report`):
 * runtime/trace_read.h. */

#endif
