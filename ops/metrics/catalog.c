/*
 * catalog.c — the tables of catalog.h. The order numbers place a metric on
 * the progress line among the declared ones; undeclared metrics follow in
 * the order they were first set.
 */
#include "ops/metrics/catalog.h"

#include <stddef.h>

#include "runtime/err.h"

static const st_metric_desc_t train_metrics[] = {
	{ .name = "examples", .kind = ST_METRIC_COUNTER, .flags = ST_METRIC_HEADLINE,
	  .label = "ex", .help = "Examples trained on." },
	{ .name = "loss", .kind = ST_METRIC_GAUGE, .flags = ST_METRIC_FINITE, .order = 10,
	  .fmt = "%.4f", .help = "Progressive logloss of the examples trained on so far." },
	{ .name = "auc", .kind = ST_METRIC_GAUGE, .flags = ST_METRIC_FINITE, .order = 20,
	  .fmt = "%.4f", .help = "Progressive AUC of the examples trained on so far." },
	/* ops/sync/sync.c, st_sync_stats_publish: "hist.sync_staleness.<range>". */
	{ .name = "hist.", .kind = ST_METRIC_COUNTER,
	  .flags = ST_METRIC_PREFIX | ST_METRIC_JSON_ONLY,
	  .help = "Histogram bucket published by the sync policy (the bucket's range is in "
		  "the name)." },
};

static const st_metric_desc_t read_metrics[] = {
	{ .name = "bad_records", .kind = ST_METRIC_COUNTER, .flags = ST_METRIC_JSON_ONLY,
	  .help = "Input records skipped as malformed." },
	{ .name = "lists_truncated", .kind = ST_METRIC_COUNTER, .flags = ST_METRIC_JSON_ONLY,
	  .help = "List fields longer than their max_len, cut to it." },
	{ .name = "list_items_empty", .kind = ST_METRIC_COUNTER, .flags = ST_METRIC_JSON_ONLY,
	  .help = "Empty items inside list fields, skipped." },
	{ .name = "lists_empty", .kind = ST_METRIC_COUNTER, .flags = ST_METRIC_JSON_ONLY,
	  .help = "List fields with no item." },
	{ .name = "missing_keys", .kind = ST_METRIC_COUNTER, .flags = ST_METRIC_JSON_ONLY,
	  .help = "Empty categorical fields given their learnable missing key." },
};

static int declare(st_metrics_t *m, const st_metric_desc_t *d, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int rc = st_metrics_declare(m, &d[i]);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}

int st_catalog_declare_train(st_metrics_t *m)
{
	return declare(m, train_metrics, sizeof train_metrics / sizeof train_metrics[0]);
}

int st_catalog_declare_read(st_metrics_t *m)
{
	return declare(m, read_metrics, sizeof read_metrics / sizeof read_metrics[0]);
}
