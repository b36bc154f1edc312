/*
 * metrics.h — named job metrics and the progress reporter.
 *
 * st_metrics_t is a small table of named doubles (at most ST_METRICS_MAX),
 * written by ops from any thread and read by the progress reporter. Names
 * the reporter knows: "examples" (count of trained examples), "loss"
 * (progressive mean logloss), "auc" (progressive AUC), "bad_records".
 * Other names are printed after those, in registration order, except names
 * starting with "hist." (histogram buckets), written to the JSON file only.
 *
 * st_progress_t runs one thread ("st-progress-0") that every interval prints
 * a progress line to stderr when stderr is a terminal (examples/s, loss, AUC,
 * per-stage busy %, queue depths) and appends one JSON object per interval to
 * a metrics file when a path is given. st_progress_stop prints/writes a
 * final record.
 */
#ifndef ST_METRICS_H
#define ST_METRICS_H

#include "graph.h"

#define ST_METRICS_MAX 64

typedef struct st_metrics st_metrics_t;

/* ST_OK / ST_ENOMEM. Caller destroys. */
int st_metrics_create(st_metrics_t **out);
void st_metrics_destroy(st_metrics_t *m);

/* Sets / adds to a named value, creating it on first use. Thread-safe.
 * Names beyond ST_METRICS_MAX are ignored (logged once). */
void st_metrics_set(st_metrics_t *m, const char *name, double v);
void st_metrics_add(st_metrics_t *m, const char *name, double dv);

/* Current value, or def if the name was never set. Thread-safe. */
double st_metrics_get(const st_metrics_t *m, const char *name, double def);

/* Calls fn for every metric in registration order. */
void st_metrics_foreach(const st_metrics_t *m,
			void (*fn)(const char *name, double v, void *arg), void *arg);

typedef struct st_progress st_progress_t;

/* Starts the reporter. tty: print the human progress line (pass
 * isatty(2)); json_path: NULL or a file to write JSON lines to (created or
 * truncated; ST_EIO if it cannot be opened; the path is copied). g and m
 * must outlive it. */
int st_progress_start(st_progress_t **out, st_graph_t *g, st_metrics_t *m,
		      double interval_s, const char *json_path, int tty);

/* Stops the thread, emits a final record, closes the JSON file and frees
 * the reporter. Returns ST_OK (also for NULL), or the first error writing,
 * flushing or closing the JSON file (ST_ENOSPC on a full disk, ST_EIO,
 * another -errno); the reporter logged it with the path when it happened
 * (once), and the file is incomplete. A write error never stops the
 * reporter or the job: the caller decides what it means. */
int st_progress_stop(st_progress_t *p);

/* Writes s as a JSON string literal, quotes included: '"' and '\\' are
 * escaped, control characters written as \u00XX, and bytes that are not
 * part of valid UTF-8 as \ufffd, so any C string gives valid JSON.
 * snprintf-style: writes at most cap bytes including the terminating NUL
 * (out may be NULL when cap is 0) and returns the length of the whole
 * literal. Pure and thread-safe. */
size_t st_json_quote(char *out, size_t cap, const char *s);

#endif
