/*
 * catalog.h — the metrics ops publish, declared for the progress reporter
 * (runtime/metrics.h: st_metrics_declare). runtime/ knows no metric by
 * name; each op's metrics are listed here, in a table per op, next to the
 * name of the code that computes them, and that op declares them when it
 * is created. Each entry's help sentence is the # HELP line of the
 * Prometheus endpoint (ops/metrics/prom.h), whose names are derived from
 * these entries' names and kinds.
 */
#ifndef ST_CATALOG_H
#define ST_CATALOG_H

#include "runtime/metrics.h"

/* The trainer's (ops/train): "examples" (trained examples, the headline
 * counter, "ex" and "ex/s" on the line), "loss" and "auc" (progressive
 * logloss and AUC, "%.4f", shown once computed, in that order), and the
 * histogram buckets the trainer publishes for its sync policy
 * (st_sync_stats_publish, "hist." prefix, JSON only). ST_OK or the first
 * st_metrics_declare error. Thread-safe. */
int st_catalog_declare_train(st_metrics_t *m);

/* The read stage's (ops/read): "bad_records" (a counter, JSON only: the
 * run reports bad records itself at the end of a pass), and the list and
 * missing-value counts added at the end of each pass: "lists_truncated",
 * "list_items_empty", "lists_empty", "missing_keys" (JSON only). ST_OK or the
 * st_metrics_declare error. Thread-safe. */
int st_catalog_declare_read(st_metrics_t *m);

#endif
