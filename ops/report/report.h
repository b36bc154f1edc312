/*
 * report.h — the HTML report of a run (`strata report`): one self-contained
 * page (inline CSS and SVG, no script, nothing fetched) drawn from the
 * run's metrics file (runlog.h), its trace (runtime/trace_read.h) and the
 * job's configuration text, each optional.
 *
 * What it shows (docs/observability.md, "The report"): progressive and
 * eval AUC and logloss over examples; examples/s, each stage's batches/s
 * and busy share over time; queue occupancy; store hit rates, rows and
 * bytes per tier; staleness and dropped gradients per policy; phase and
 * policy-switch markers; the trace's per-stage sums and events; the
 * configuration. A plot whose series the inputs lack is replaced by a line
 * saying it was "not recorded in this run", never drawn empty.
 *
 * Every string taken from the inputs is HTML-escaped (html.h).
 *
 * Library-grade: includes no runtime-wide header. Thread-safe: no shared
 * state.
 */
#ifndef ST_REPORT_REPORT_H
#define ST_REPORT_REPORT_H

#include <stddef.h>

#include "ops/report/html.h"
#include "ops/report/runlog.h"

typedef struct st_report_in {
	const char *title;          /* page title; NULL: "strata report" */
	const char *metrics_path;   /* named in the page; may be NULL */
	const st_runlog_t *log;     /* the metrics file read back; may be NULL */
	const char *trace_path;     /* a trace to read here; may be NULL */
	const char *config_text;    /* the job's configuration; may be NULL */
	const char *config_from;    /* where config_text came from (shown) */
} st_report_in_t;

/* Appends the whole page to out (caller-owned, st_html_init'ed). Reads the
 * trace when in->trace_path is set. ST_OK; a negative ST_E code with a
 * message in err (errlen bytes) when the trace cannot be read or out of
 * memory. Nothing of in is kept. */
int st_report_build(const st_report_in_t *in, st_html_t *out, char *err, size_t errlen);

#endif
