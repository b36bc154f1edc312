/*
 * prom.h — the run's metrics in the Prometheus text exposition format
 * (version 0.0.4), for the live endpoint (`strata run --metrics-port`,
 * ops/metrics/prom_http.h). Pure formatting: no sockets, no threads of its
 * own, so the unit tests check the text directly.
 *
 * What is exported is what the --metrics JSON lines carry, named by
 * Prometheus conventions (docs/observability.md, "Live metrics"):
 *   - every metric of st_metrics_t, named by st_prom_name from its
 *     declaration in the catalog (ops/metrics/catalog.c): a counter gets
 *     "_total", a gauge or rate stays a gauge, an undeclared metric is
 *     "untyped"; the catalog's help sentence is the # HELP line;
 *   - per pipeline stage, from st_stage_stats_t: busy and wait seconds and
 *     batches (counters), threads and the input queue's depth and capacity
 *     (gauges), each with a stage="<name>" label.
 * Per-interval rates (ex/s, busy %) are not exported: Prometheus computes
 * them from the counters (rate()).
 */
#ifndef ST_PROM_H
#define ST_PROM_H

#include <stddef.h>

#include "runtime/graph.h"
#include "runtime/metrics.h"

/* The Prometheus type of a metric: its declared kind, "untyped" if d is
 * NULL (an undeclared metric). Pure. */
const char *st_prom_type(const st_metric_desc_t *d);

/*
 * The one mapping from a metric's name (as the ops set it) to its
 * Prometheus series: "strata_" + name, every character outside [A-Za-z0-9_]
 * written as '_', a unit spelled out in base units ("_s" -> "_seconds",
 * "_mb" -> "_bytes", and *scale becomes 1e6 so the value is in bytes), and
 * "_total" after a counter's name. A metric covered by a prefix declaration
 * (d->flags & ST_METRIC_PREFIX, e.g. "hist.sync_staleness.2-3") is one
 * series of a family: the part after its last '.' is returned in *bucket
 * (a pointer into name; else NULL) for a bucket="..." label and is left
 * out of the name. Writes at most cap bytes of out, NUL included; returns
 * ST_OK, or ST_ERANGE if the name did not fit. Pure, thread-safe.
 */
int st_prom_name(const char *name, const st_metric_desc_t *d, char *out, size_t cap,
		 double *scale, const char **bucket);

/*
 * Writes the exposition text of m (read through st_metrics_foreach_desc:
 * one consistent snapshot) and of stages[0..nstages) (NULL / 0: none) to a
 * new NUL-terminated buffer: *out, *len its length. Each family has one
 * # HELP and one # TYPE line, then its series; label values are escaped
 * ('\\', '"', newline). Two metrics that map to the same series (a.b and
 * a_b) give the first one only. ST_OK or ST_ENOMEM. The caller frees *out.
 * Thread-safe (m may be written meanwhile).
 */
int st_prom_format(const st_metrics_t *m, const st_stage_stats_t *stages, int nstages,
		   char **out, size_t *len);

/* Writes s as a Prometheus label value (no quotes): '\\' as "\\\\", '"' as
 * "\\\"", newline as "\\n". snprintf-style: at most cap bytes with the NUL,
 * returns the length of the whole escaped text. Pure. */
size_t st_prom_escape_label(char *out, size_t cap, const char *s);

#endif
