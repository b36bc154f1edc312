/* test_prom.c — the Prometheus text exposition of the run's metrics
 * (ops/metrics/prom.h): the one name mapping, label escaping, and a whole
 * exposition checked line by line against the format's grammar (0.0.4). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/metrics/catalog.h"
#include "ops/metrics/prom.h"
#include "runtime/err.h"

static void check_name(const char *name, const st_metric_desc_t *d, const char *want,
		       double want_scale, const char *want_bucket)
{
	char out[128];
	double scale;
	const char *bucket;
	assert_int_equal(st_prom_name(name, d, out, sizeof out, &scale, &bucket), ST_OK);
	assert_string_equal(out, want);
	assert_true(scale == want_scale);
	if (want_bucket)
		assert_string_equal(bucket, want_bucket);
	else
		assert_null(bucket);
}

static void test_prom_names(void **state)
{
	(void)state;
	const st_metric_desc_t counter = { .name = "examples", .kind = ST_METRIC_COUNTER };
	const st_metric_desc_t gauge = { .name = "loss", .kind = ST_METRIC_GAUGE };
	const st_metric_desc_t rate = { .name = "r", .kind = ST_METRIC_RATE };
	const st_metric_desc_t hist = { .name = "hist.", .kind = ST_METRIC_COUNTER,
					.flags = ST_METRIC_PREFIX };
	check_name("examples", &counter, "strata_examples_total", 1.0, NULL);
	check_name("loss", &gauge, "strata_loss", 1.0, NULL);
	check_name("r", &rate, "strata_r", 1.0, NULL);
	/* Units in base units: seconds and bytes; a counter's _total last. */
	check_name("ckpt.stall_s", NULL, "strata_ckpt_stall_seconds", 1.0, NULL);
	check_name("ckpt.write_s", &counter, "strata_ckpt_write_seconds_total", 1.0, NULL);
	check_name("ssd.read_mb", NULL, "strata_ssd_read_bytes", 1e6, NULL);
	check_name("sent_total", &counter, "strata_sent_total", 1.0, NULL);
	check_name("a-b c", NULL, "strata_a_b_c", 1.0, NULL);
	/* A prefix family: the last part is the bucket label. */
	check_name("hist.sync_staleness.2-3", &hist, "strata_hist_sync_staleness_total", 1.0,
		   "2-3");
	check_name("hist.sync_staleness.64+", &hist, "strata_hist_sync_staleness_total", 1.0,
		   "64+");
	assert_string_equal(st_prom_type(NULL), "untyped");
	assert_string_equal(st_prom_type(&counter), "counter");
	assert_string_equal(st_prom_type(&rate), "gauge");
	char small[8];
	double scale;
	const char *bucket;
	assert_int_equal(st_prom_name("examples", &counter, small, sizeof small, &scale, &bucket),
			 ST_ERANGE);
}

static void test_prom_escape(void **state)
{
	(void)state;
	char out[64];
	assert_int_equal(st_prom_escape_label(out, sizeof out, "a\"b\\c\nd"), 10);
	assert_string_equal(out, "a\\\"b\\\\c\\nd");
	assert_int_equal(st_prom_escape_label(out, 4, "\"\"\""), 6);   /* truncated, counted */
	assert_string_equal(out, "\\\"\\");
	assert_int_equal(st_prom_escape_label(NULL, 0, "plain"), 5);
}

#define NAME "[a-zA-Z_:][a-zA-Z0-9_:]*"
#define LVAL "\"([^\"\\\\\n]|\\\\[\\\\\"n])*\""
#define LABEL "[a-zA-Z_][a-zA-Z0-9_]*=" LVAL
#define VALUE "(NaN|[+-]Inf|[-+]?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?)"

/* Every line is a HELP, a TYPE or a sample of the family TYPE'd last; each
 * family is TYPE'd once; returns the number of samples. */
static int check_grammar(const char *text)
{
	regex_t sample, help, type;
	assert_int_equal(regcomp(&sample, "^(" NAME ")(\\{" LABEL "(," LABEL ")*\\})? " VALUE "$",
				 REG_EXTENDED), 0);
	assert_int_equal(regcomp(&help, "^# HELP (" NAME ") [^\n]*$", REG_EXTENDED), 0);
	assert_int_equal(regcomp(&type, "^# TYPE (" NAME ") (counter|gauge|untyped)$",
				 REG_EXTENDED), 0);
	char *copy = strdup(text);
	char fam[128] = "", helped[128] = "";
	char seen[64][128];
	int nseen = 0, samples = 0;
	assert_true(strlen(text) > 0 && text[strlen(text) - 1] == '\n');
	for (char *save, *line = strtok_r(copy, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		regmatch_t mt[2];
		if (!regexec(&help, line, 2, mt, 0)) {
			snprintf(helped, sizeof helped, "%.*s", (int)(mt[1].rm_eo - mt[1].rm_so),
				 line + mt[1].rm_so);
		} else if (!regexec(&type, line, 2, mt, 0)) {
			snprintf(fam, sizeof fam, "%.*s", (int)(mt[1].rm_eo - mt[1].rm_so),
				 line + mt[1].rm_so);
			assert_string_equal(fam, helped);   /* HELP right before its TYPE */
			for (int i = 0; i < nseen; i++)
				assert_string_not_equal(seen[i], fam);
			assert_true(nseen < 64);
			snprintf(seen[nseen++], sizeof seen[0], "%s", fam);
		} else if (!regexec(&sample, line, 2, mt, 0)) {
			char name[128];
			snprintf(name, sizeof name, "%.*s", (int)(mt[1].rm_eo - mt[1].rm_so),
				 line + mt[1].rm_so);
			assert_string_equal(name, fam);
			samples++;
		} else {
			fail_msg("not a line of the exposition format: '%s'", line);
		}
	}
	free(copy);
	regfree(&sample);
	regfree(&help);
	regfree(&type);
	return samples;
}

static void test_prom_format_catalog(void **state)
{
	(void)state;
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	assert_int_equal(st_catalog_declare_train(m), ST_OK);
	assert_int_equal(st_catalog_declare_read(m), ST_OK);
	st_metrics_add(m, "examples", 1234);
	st_metrics_set(m, "hist.sync_staleness.0", 5);
	st_metrics_set(m, "loss", NAN);
	st_metrics_set(m, "ssd.read_mb", 2.5);
	st_metrics_add(m, "ckpt.write_s", 0.25);
	st_metrics_set(m, "hist.sync_staleness.64+", 7);   /* apart from its family */
	st_metrics_add(m, "bad_records", 3);
	st_stage_stats_t stages[2] = {
		{ .name = "read", .n_threads = 2, .items = 10, .busy_ns = 1500000000,
		  .wait_ns = 0, .queue_depth = 0, .queue_cap = 0 },
		{ .name = "tr\"a\\in\n", .n_threads = 1, .items = 9, .busy_ns = 250000000,
		  .wait_ns = 1000000000, .queue_depth = 3, .queue_cap = 4 },
	};
	char *text;
	size_t len;
	assert_int_equal(st_prom_format(m, stages, 2, &text, &len), ST_OK);
	assert_int_equal(len, strlen(text));
	/* 7 metrics (hist is one family of two) + 6 families x 2 stages */
	assert_int_equal(check_grammar(text), 7 + 12);
	const char *want[] = {
		"# HELP strata_examples_total Examples trained on.\n"
		"# TYPE strata_examples_total counter\n"
		"strata_examples_total 1234\n",
		"# TYPE strata_hist_sync_staleness_total counter\n"
		"strata_hist_sync_staleness_total{bucket=\"0\"} 5\n"
		"strata_hist_sync_staleness_total{bucket=\"64+\"} 7\n",
		"# TYPE strata_loss gauge\nstrata_loss NaN\n",
		"# TYPE strata_ssd_read_bytes untyped\nstrata_ssd_read_bytes 2500000\n",
		"strata_ckpt_write_seconds 0.25\n",
		"# TYPE strata_bad_records_total counter\nstrata_bad_records_total 3\n",
		"# TYPE strata_stage_busy_seconds_total counter\n"
		"strata_stage_busy_seconds_total{stage=\"read\"} 1.5\n"
		"strata_stage_busy_seconds_total{stage=\"tr\\\"a\\\\in\\n\"} 0.25\n",
		"strata_stage_wait_seconds_total{stage=\"tr\\\"a\\\\in\\n\"} 1\n",
		"strata_stage_batches_total{stage=\"read\"} 10\n",
		"strata_stage_threads{stage=\"read\"} 2\n",
		"strata_stage_queue_depth{stage=\"tr\\\"a\\\\in\\n\"} 3\n",
		"strata_stage_queue_capacity{stage=\"tr\\\"a\\\\in\\n\"} 4\n",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		if (!strstr(text, want[i]))
			fail_msg("missing:\n%s\nin:\n%s", want[i], text);
	free(text);
	st_metrics_destroy(m);
}

static void test_prom_format_empty(void **state)
{
	(void)state;
	char *text;
	size_t len;
	assert_int_equal(st_prom_format(NULL, NULL, 0, &text, &len), ST_OK);
	assert_int_equal(len, 0);
	assert_string_equal(text, "");
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prom_names),
		cmocka_unit_test(test_prom_escape),
		cmocka_unit_test(test_prom_format_catalog),
		cmocka_unit_test(test_prom_format_empty),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
