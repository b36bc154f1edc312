/*
 * metrics.h — named job metrics and the progress reporter.
 *
 * st_metrics_t is a small table of named doubles (at most ST_METRICS_MAX),
 * written by ops from any thread and read by the progress reporter. The
 * runtime knows no metric by name: the op that computes a metric declares
 * it (st_metrics_declare: its kind, where and how the progress line shows
 * it, or that it goes to the JSON file only). Undeclared metrics are shown
 * as "name value" after the declared ones, in registration order.
 *
 * st_progress_t runs one thread ("st-progress-0") that every interval prints
 * a progress line to stderr when stderr is a terminal (the headline counter
 * and its rate per second, the declared metrics, per-stage busy %, queue
 * depths) and appends one JSON object per interval to a metrics file when a
 * path is given. st_progress_stop prints/writes a final record.
 *
 * st_meter_t is the progress line of the other long commands (gen, eval,
 * predict, a checkpoint restore): done of total, on a terminal only.
 */
#ifndef ST_METRICS_H
#define ST_METRICS_H

#include "graph.h"

#include <stdint.h>

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

/* ---- declarations --------------------------------------------------------- */

#define ST_METRICS_MAX_DECL 32

typedef enum st_metric_kind {
	ST_METRIC_GAUGE = 0,   /* a value as of now, set (a loss, a row count) */
	ST_METRIC_COUNTER,     /* a running total, added to (examples) */
	ST_METRIC_RATE,        /* a per-second value its op computes */
} st_metric_kind_t;

/* st_metric_desc_t.flags */
enum {
	/* Never on the progress line (histogram buckets: they would swamp it). */
	ST_METRIC_JSON_ONLY = 1u << 0,
	/* On the line only while the value is finite (not yet computed: NaN). */
	ST_METRIC_FINITE = 1u << 1,
	/* The run's throughput counter (a COUNTER; one per table): it heads
	 * the line as "<count> <label>  <count per second> <label>/s", and the
	 * JSON record carries it as "<name>" and "<label>_per_s" before its
	 * "metrics" (per interval; whole-run averages in the final record). */
	ST_METRIC_HEADLINE = 1u << 2,
	/* name is a prefix: the description covers every metric whose name
	 * starts with it ("hist." for histogram buckets). */
	ST_METRIC_PREFIX = 1u << 3,
};

typedef struct st_metric_desc {
	const char *name;        /* the metric (or, with ST_METRIC_PREFIX, a prefix) */
	st_metric_kind_t kind;
	unsigned flags;          /* ST_METRIC_* */
	int order;               /* place on the progress line among the declared
				    metrics, ascending (ties: declaration order) */
	const char *label;       /* on the line; NULL: the name. A headline's unit */
	const char *fmt;         /* one printf conversion of a double for the line
				    ("%.4f"); NULL: "%.4g" */
	const char *help;        /* one sentence for people (the # HELP line of
				    the Prometheus endpoint); NULL: none */
} st_metric_desc_t;

/*
 * Declares a metric, normally by the op that computes it, before it is
 * first reported (declaring later is fine: each report reads the
 * declarations). Declaring a name again replaces its description. Strings
 * are copied. Thread-safe. ST_OK; ST_EINVAL for a bad description (empty
 * or too long name, label or fmt, a fmt that is not one conversion of a
 * double, a headline that is not a counter or is JSON-only or a prefix, a
 * second headline); ST_ENOSPC past ST_METRICS_MAX_DECL declarations.
 */
int st_metrics_declare(st_metrics_t *m, const st_metric_desc_t *d);

/*
 * Calls fn for every metric in registration order with the declaration
 * that covers it (its exact name, else its longest declared prefix; NULL
 * when undeclared). Both tables are copied under the lock in one go, so fn
 * sees one consistent instant, and fn runs without the lock (it may call
 * back into m). d and its strings are valid during the call only.
 * Thread-safe: a reader on another thread (the Prometheus endpoint) may
 * call it while stages write.
 */
void st_metrics_foreach_desc(const st_metrics_t *m,
			     void (*fn)(const char *name, double v, const st_metric_desc_t *d,
					void *arg),
			     void *arg);

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

/* ---- progress of a long command ----------------------------------------- */

/*
 * st_meter_t: the one-line progress of a long command other than a
 * training pass (strata gen, eval, predict, a checkpoint restore, data
 * generation before a run): "\r<what>: 45.2% (123456 / 273000 rows)
 * 1.20M rows/s" rewritten in place on stderr, ended with a newline by
 * st_meter_fini. It draws only when meters are on for the process
 * (st_meter_set_tty; by default when stderr is a terminal), and only once
 * the work has taken 0.25 s (a quick step leaves no line), then at most
 * every 0.1 s: on a file or a pipe nothing extra is written.
 *
 * Caller-owned storage; one thread updates a meter at a time (the caller
 * serialises, e.g. under its own lock). Different meters are independent.
 */
typedef struct st_meter {
	char what[96];
	char unit[16];
	int on;                 /* drawing (st_meter_tty() at init) */
	int drawn;              /* a line is on the screen */
	uint64_t t0_ns, last_ns;
	int64_t done, total;
} st_meter_t;

/* Process-wide: whether meters draw. The default is isatty(2); a command
 * sets it once, before its meters start (`run --quiet` and ranks other
 * than 0 turn it off). Thread-safe. */
void st_meter_set_tty(int on);
int st_meter_tty(void);

/* Starts a meter: what (copied, cut to fit) heads the line, unit names
 * what is counted ("rows", "examples"). */
void st_meter_init(st_meter_t *m, const char *what, const char *unit);

/* done of total units so far; total <= 0: unknown (the line shows the
 * count and the rate only). Cheap when it does not draw. */
void st_meter_update(st_meter_t *m, int64_t done, int64_t total);

/* Draws the last state and ends the line, if a line was drawn. Safe to
 * call twice. */
void st_meter_fini(st_meter_t *m);

/* Writes s as a JSON string literal, quotes included: '"' and '\\' are
 * escaped, control characters written as \u00XX, and bytes that are not
 * part of valid UTF-8 as \ufffd, so any C string gives valid JSON.
 * snprintf-style: writes at most cap bytes including the terminating NUL
 * (out may be NULL when cap is 0) and returns the length of the whole
 * literal. Pure and thread-safe. */
size_t st_json_quote(char *out, size_t cap, const char *s);

#endif
