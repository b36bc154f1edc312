/* test_report.c — the HTML report (ops/report/report.h) built from small
 * metrics and trace files written here: every recorded series is drawn as
 * an SVG path, a series the inputs lack says "not recorded in this run"
 * instead of an empty chart, strings from the inputs (phase names, metric
 * names, trace texts, the job file) are HTML-escaped, a malformed metrics
 * line is named by file:line (a last line cut short by a killed run is left
 * out instead), and the trace's stage sums and queue
 * counters reach the page through the shared reader (runtime/trace_read.h),
 * and the timeline draws a row per track with spans, thinned to at most
 * ST_TIMELINE_COLS rectangles a row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/report/chart.h"
#include "ops/report/html.h"
#include "ops/report/report.h"
#include "ops/report/runlog.h"
#include "ops/report/timeline.h"
#include "runtime/err.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/st-test-report-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Writes text to dir/name; returns the path (static buffer per call site). */
static const char *put(const char *name, const char *text, char *path, size_t cap)
{
	snprintf(path, cap, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	return path;
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Two phases: progress records with AUC, loss, stages, store hit rates and
 * staleness; the {"phase": ...} line after each. */
static const char metrics_two_phases[] =
	"{\"t\":0.5,\"examples\":1000,\"examples_per_s\":2000,\"metrics\":{\"auc\":0.61,"
	"\"loss\":0.55,\"cache.hit\":0.9,\"sync_staleness_mean\":0,\"sync_staleness_max\":0,"
	"\"sync_dropped\":0,\"sync_switches\":0},\"stages\":[{\"name\":\"read\",\"threads\":1,"
	"\"items\":4,\"busy_pct\":20,\"wait_s\":0.1,\"queue_depth\":0,\"queue_cap\":0},"
	"{\"name\":\"train\",\"threads\":1,\"items\":3,\"busy_pct\":95,\"wait_s\":0,"
	"\"queue_depth\":4,\"queue_cap\":4}]}\n"
	"{\"t\":1.0,\"examples\":2000,\"examples_per_s\":2000,\"metrics\":{\"auc\":0.65,"
	"\"loss\":0.52,\"cache.hit\":0.92,\"sync_staleness_mean\":0,\"sync_staleness_max\":0,"
	"\"sync_dropped\":0,\"sync_switches\":0},\"stages\":[{\"name\":\"read\",\"threads\":1,"
	"\"items\":8,\"busy_pct\":22,\"wait_s\":0.1,\"queue_depth\":0,\"queue_cap\":0},"
	"{\"name\":\"train\",\"threads\":1,\"items\":7,\"busy_pct\":97,\"wait_s\":0,"
	"\"queue_depth\":3,\"queue_cap\":4}],\"final\":true}\n"
	"{\"phase\":\"warm <up>\",\"index\":1,\"sync\":\"allreduce\",\"examples\":2000,"
	"\"secs\":1.0,\"auc\":0.65,\"logloss\":0.52,\"sync_switches\":0,\"eval_auc\":0.7,"
	"\"eval_logloss\":0.5}\n"
	"{\"t\":0.5,\"examples\":3000,\"examples_per_s\":2000,\"metrics\":{\"auc\":0.68,"
	"\"loss\":0.5,\"cache.hit\":0.93,\"sync_staleness_mean\":1.5,\"sync_staleness_max\":4,"
	"\"sync_dropped\":2,\"sync_switches\":0},\"stages\":[{\"name\":\"read\",\"threads\":1,"
	"\"items\":4,\"busy_pct\":20,\"wait_s\":0.1,\"queue_depth\":0,\"queue_cap\":0},"
	"{\"name\":\"train\",\"threads\":1,\"items\":3,\"busy_pct\":90,\"wait_s\":0,"
	"\"queue_depth\":4,\"queue_cap\":4}],\"final\":true}\n"
	"{\"phase\":\"rest\",\"index\":2,\"sync\":\"async\",\"examples\":1000,\"secs\":0.5,"
	"\"auc\":0.68,\"logloss\":0.5,\"sync_switches\":0,\"eval_auc\":0.72,"
	"\"eval_logloss\":0.49}\n";

/* Builds the page from the given files; returns it (caller frees). */
static char *build(const char *metrics, const char *trace, const char *config)
{
	st_runlog_t log;
	char err[256];
	if (metrics)
		assert_int_equal(st_runlog_read(metrics, &log, err, sizeof err), ST_OK);
	st_report_in_t in = { .metrics_path = metrics, .log = metrics ? &log : NULL,
			      .trace_path = trace, .config_text = config,
			      .config_from = config ? "job.lua" : NULL };
	st_html_t h;
	st_html_init(&h);
	int rc = st_report_build(&in, &h, err, sizeof err);
	if (rc < 0)
		fail_msg("st_report_build: %s", err);
	if (metrics)
		st_runlog_fini(&log);
	char *page = h.p;   /* ownership moves to the caller */
	assert_non_null(page);
	return page;
}

/* The chart titled title is drawn: its <title> is in an <svg>, and no
 * "not recorded" line names it. */
static void assert_drawn(const char *page, const char *title)
{
	char a[160], b[160];
	snprintf(a, sizeof a, "<svg class=\"chart\" viewBox=\"0 0 900 300\" role=\"img\">\n"
		 "<title>%s</title>", title);
	snprintf(b, sizeof b, "<b>%s</b>: not recorded in this run", title);
	if (!strstr(page, a) || strstr(page, b))
		fail_msg("chart '%s' is not drawn", title);
}

static void assert_absent(const char *page, const char *title)
{
	char a[160], b[160];
	snprintf(a, sizeof a, "<title>%s</title>", title);
	snprintf(b, sizeof b, "<b>%s</b>: not recorded in this run", title);
	if (strstr(page, a) || !strstr(page, b))
		fail_msg("chart '%s' should say 'not recorded in this run'", title);
}

static void test_report_draws_recorded_series(void **state)
{
	(void)state;
	char mp[128];
	char *page = build(put("m.jsonl", metrics_two_phases, mp, sizeof mp), NULL, NULL);
	assert_drawn(page, "AUC over examples");
	assert_drawn(page, "Logloss over examples");
	assert_drawn(page, "Examples per second over time");
	assert_drawn(page, "Examples per second of each stage");
	assert_drawn(page, "Busy share of each stage");
	assert_drawn(page, "Queue occupancy at each progress record");
	assert_drawn(page, "Hit rates per tier");
	assert_drawn(page, "Staleness of applied updates");
	assert_drawn(page, "Dropped gradients");
	/* A path per series with two or more points: auc, loss, rate, 2 stages
	 * x (batches/s, busy), one queue (read has none), hit, mean, max, dropped. */
	assert_true(count(page, "<path class=\"series\"") >= 12);
	/* Points are drawn: "M x y L x y" with numbers. */
	assert_non_null(strstr(page, "d=\" M"));
	assert_true(count(page, " L") >= 12);
	/* Eval values at the phase ends are dots; the phase ends are markers. */
	assert_non_null(strstr(page, "eval AUC (end of phase)"));
	assert_int_equal(count(page, "<line class=\"marker\""), 2 * 9);   /* 9 charts drawn */
	assert_non_null(strstr(page, "end of rest (async)"));
	/* The per-policy table has each phase's policy and its staleness. */
	assert_non_null(strstr(page, "<td class=\"l\">phase rest</td><td class=\"l\">async</td>"));
	assert_non_null(strstr(page, "<td>1.500</td><td>4</td><td>2</td>"));
	free(page);
}

static void test_report_absent_series_say_so(void **state)
{
	(void)state;
	char mp[128];
	char *page = build(put("bare.jsonl", "{\"t\":1,\"examples\":10,\"examples_per_s\":10,"
			       "\"metrics\":{},\"stages\":[]}\n", mp, sizeof mp), NULL, NULL);
	assert_drawn(page, "Examples per second over time");
	assert_absent(page, "AUC over examples");
	assert_absent(page, "Hit rates per tier");
	assert_absent(page, "Bytes per tier");
	assert_absent(page, "Staleness of applied updates");
	assert_absent(page, "Queue occupancy after each take (trace)");
	assert_non_null(strstr(page, "<b>Eval AUC and logloss</b>: not recorded in this run"));
	assert_non_null(strstr(page, "<b>Events</b> (phases, policy switches, checkpoints, "
			       "errors): not recorded in this run"));
	assert_non_null(strstr(page, "<b>The job's configuration</b>: not recorded"));
	assert_int_equal(count(page, "<svg"), 1);
	free(page);
}

static void test_report_escapes_inputs(void **state)
{
	(void)state;
	char mp[128], tp[128];
	const char *m = put("esc.jsonl",
			    "{\"t\":1,\"examples\":10,\"metrics\":{\"worker_eps_<i>\":5,"
			    "\"auc\":0.5},\"stages\":[]}\n"
			    "{\"t\":2,\"examples\":20,\"metrics\":{\"worker_eps_<i>\":6,"
			    "\"auc\":0.6},\"stages\":[]}\n"
			    "{\"phase\":\"<script>alert(\\\"x\\\")</script>&\",\"sync\":\"a'b\","
			    "\"index\":1}\n", mp, sizeof mp);
	const char *t = put("esc.json",
			    "{\"traceEvents\":[\n"
			    "{\"ph\":\"i\",\"pid\":1,\"tid\":1,\"ts\":5.0,\"name\":\"error\","
			    "\"s\":\"p\",\"args\":{\"detail\":\"bad <tag> & \\\"quote\\\"\"}}\n"
			    "]}\n", tp, sizeof tp);
	char *page = build(m, t, "-- <b>job</b> & more\n");
	assert_null(strstr(page, "<script"));
	assert_null(strstr(page, "<tag>"));
	assert_null(strstr(page, "<i>"));
	assert_null(strstr(page, "<b>job</b>"));
	assert_non_null(strstr(page, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;"));
	assert_non_null(strstr(page, "worker_eps_&lt;i&gt;"));
	assert_non_null(strstr(page, "a&#39;b"));
	assert_non_null(strstr(page, "bad &lt;tag&gt; &amp; &quot;quote&quot;"));
	assert_non_null(strstr(page, "-- &lt;b&gt;job&lt;/b&gt; &amp; more"));
	/* Nothing the page refers to is fetched. */
	assert_null(strstr(page, "src="));
	assert_null(strstr(page, "http"));
	free(page);
}

static void test_report_draws_trace(void **state)
{
	(void)state;
	char tp[128];
	const char *t = put("t.json",
		"{\"displayTimeUnit\":\"ms\",\"otherData\":{\"recorder\":\"strata\",\"dropped\":0},\n"
		"\"traceEvents\":[\n"
		"{\"ph\":\"M\",\"pid\":1,\"tid\":2,\"name\":\"thread_name\",\"args\":{\"name\":\"st-read-0\"}},\n"
		"{\"ph\":\"i\",\"pid\":1,\"tid\":1,\"ts\":1.0,\"name\":\"start\",\"s\":\"p\",\"args\":{\"detail\":\"myjob\"}},\n"
		"{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":10,\"name\":\"read\",\"dur\":100000,\"cat\":\"stage\",\"args\":{\"batch\":0,\"stage\":\"read\"}},\n"
		"{\"ph\":\"X\",\"pid\":1,\"tid\":3,\"ts\":10,\"name\":\"train\",\"dur\":900000,\"cat\":\"stage\",\"args\":{\"batch\":0,\"stage\":\"train\"}},\n"
		"{\"ph\":\"C\",\"pid\":1,\"tid\":3,\"ts\":20,\"name\":\"queue train\",\"args\":{\"value\":3}},\n"
		"{\"ph\":\"C\",\"pid\":1,\"tid\":3,\"ts\":500000,\"name\":\"queue train\",\"args\":{\"value\":4}},\n"
		"{\"ph\":\"i\",\"pid\":1,\"tid\":1,\"ts\":400000,\"name\":\"policy\",\"s\":\"p\",\"args\":{\"detail\":\"async (auto switch)\"}}\n"
		"]}\n", tp, sizeof tp);
	char *page = build(NULL, t, NULL);
	assert_drawn(page, "Queue occupancy after each take (trace)");
	assert_non_null(strstr(page, "queue train"));
	assert_non_null(strstr(page, "policy async (auto switch)"));
	assert_non_null(strstr(page, "<td class=\"l\">myjob</td>"));
	/* The stage sums of trace summarize, train named the bottleneck. */
	const char *row = strstr(page, "<td class=\"l\">train</td>");
	assert_non_null(row);
	assert_non_null(strstr(row, "&larr; bottleneck"));
	assert_true(strstr(row, "&larr; bottleneck") < strstr(row, "</tr>"));
	/* Metrics charts without a metrics file say why. */
	assert_non_null(strstr(page, "<b>AUC over examples</b>: not recorded in this run "
			       "(no --metrics file given)"));
	free(page);
}

/* The timeline: a row per track with spans (named, escaped; a track with
 * counters only has none), rectangles of each kind where the trace has
 * such spans, the phase marker, and the section says "not recorded"
 * without a trace. */
static void test_report_draws_timeline(void **state)
{
	(void)state;
	char tp[128];
	const char *t = put("tl.json",
		"{\"traceEvents\":[\n"
		"{\"ph\":\"M\",\"pid\":1,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"main\"}},\n"
		"{\"ph\":\"M\",\"pid\":1,\"tid\":2,\"name\":\"thread_name\",\"args\":{\"name\":\"st-read-0\"}},\n"
		"{\"ph\":\"M\",\"pid\":1,\"tid\":3,\"name\":\"thread_name\",\"args\":{\"name\":\"st-train-0\"}},\n"
		"{\"ph\":\"M\",\"pid\":1,\"tid\":4,\"name\":\"thread_name\",\"args\":{\"name\":\"st-ssd-<w>\"}},\n"
		"{\"ph\":\"M\",\"pid\":1,\"tid\":5,\"name\":\"thread_name\",\"args\":{\"name\":\"st-counters-only\"}},\n"
		"{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0,\"name\":\"train pass\",\"dur\":1000000,\"cat\":\"pass\",\"args\":{}},\n"
		"{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":0,\"name\":\"read\",\"dur\":100000,\"cat\":\"stage\",\"args\":{\"batch\":0}},\n"
		"{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":100000,\"name\":\"wait output\",\"dur\":800000,\"cat\":\"wait\",\"args\":{}},\n"
		"{\"ph\":\"X\",\"pid\":1,\"tid\":3,\"ts\":0,\"name\":\"wait input\",\"dur\":100000,\"cat\":\"wait\",\"args\":{}},\n"
		"{\"ph\":\"X\",\"pid\":1,\"tid\":3,\"ts\":100000,\"name\":\"train\",\"dur\":900000,\"cat\":\"stage\",\"args\":{\"batch\":0}},\n"
		"{\"ph\":\"X\",\"pid\":1,\"tid\":4,\"ts\":300000,\"name\":\"compaction\",\"dur\":200000,\"cat\":\"round\",\"args\":{\"round\":1}},\n"
		"{\"ph\":\"C\",\"pid\":1,\"tid\":5,\"ts\":20,\"name\":\"queue train\",\"args\":{\"value\":3}},\n"
		"{\"ph\":\"i\",\"pid\":1,\"tid\":1,\"ts\":500000,\"name\":\"phase\",\"s\":\"p\",\"args\":{\"detail\":\"2 'rest': sync async\"}}\n"
		"]}\n", tp, sizeof tp);
	char *page = build(NULL, t, NULL);
	const char *svg = strstr(page, "<svg class=\"timeline\"");
	assert_non_null(svg);
	const char *end = strstr(svg, "</svg>");
	assert_non_null(end);
	/* Rows: four tracks with spans, in tid order; none for counters only. */
	const char *m = strstr(svg, ">main</text>"), *r = strstr(svg, ">st-read-0</text>");
	const char *tr = strstr(svg, ">st-train-0</text>");
	const char *w = strstr(svg, ">st-ssd-&lt;w&gt;</text>");
	assert_true(m && r && tr && w && m < r && r < tr && tr < w && w < end);
	assert_null(strstr(svg, "st-counters-only"));
	/* A rectangle of each kind. */
	assert_true(count(svg, "<rect class=\"tl-stage\"") >= 2);
	assert_true(count(svg, "<rect class=\"tl-blocked\"") >= 1);
	assert_true(count(svg, "<rect class=\"tl-idle\"") >= 1);
	assert_true(count(svg, "<rect class=\"tl-background\"") >= 1);
	assert_true(count(svg, "<rect class=\"tl-pass\"") >= 1);
	/* Spans longer than a column: one rectangle each (1 + 2 + 2 + 1). */
	assert_int_equal(count(svg, "<rect class=\"tl-"), 6);
	assert_non_null(strstr(svg, "<title>phase 2 &#39;rest&#39;: sync async</title>"));
	assert_non_null(strstr(svg, "time since the trace began (s)"));
	free(page);

	/* Without a trace the section says so. */
	char mp[128];
	page = build(put("m.jsonl", metrics_two_phases, mp, sizeof mp), NULL, NULL);
	assert_null(strstr(page, "<svg class=\"timeline\""));
	assert_non_null(strstr(page, "<b>Timeline of the threads</b>: not recorded in this run "
			       "(no --trace file given)"));
	free(page);
}

/* A long trace stays bounded: 200,000 spans on one track make at most
 * ST_TIMELINE_COLS rectangles, not one each. */
static void test_report_timeline_thinned(void **state)
{
	(void)state;
	st_timeline_t tl;
	st_timeline_init(&tl);
	st_timeline_track(&tl, 7, "st-pull-0");
	for (int i = 0; i < 200000; i++)
		st_timeline_span(&tl, 7, i * 1e-5, 0.6e-5, i % 3 ? "stage" : "wait",
				 i % 3 ? "pull" : "wait output");
	st_html_t h;
	st_html_init(&h);
	size_t rects = st_timeline_svg(&h, &tl, NULL, 0);
	assert_true(rects >= 1 && rects <= ST_TIMELINE_COLS);
	assert_int_equal(count(h.p, "<rect class=\"tl-"), rects);
	/* Mostly stage work: the columns' dominant kind. */
	assert_true(count(h.p, "<rect class=\"tl-stage\"") >= 1);
	assert_true(h.len < 200 * 1024);
	st_html_fini(&h);
	/* An empty timeline draws nothing. */
	st_timeline_fini(&tl);
	/* Kinds: a train worker's share is stage work, a lock wait is
	 * blocked, the background threads' cats are background work. */
	assert_int_equal(st_timeline_kind("work", "train worker"), ST_TL_STAGE);
	assert_int_equal(st_timeline_kind("wait", "wait shard lock"), ST_TL_BLOCKED);
	assert_int_equal(st_timeline_kind("wait", "wait input"), ST_TL_IDLE);
	assert_int_equal(st_timeline_kind("file", "write file"), ST_TL_BACKGROUND);
	assert_int_equal(st_timeline_kind("round", "compaction"), ST_TL_BACKGROUND);
	assert_int_equal(st_timeline_kind("pass", "train pass"), ST_TL_PASS);
	assert_int_equal(st_timeline_kind(NULL, "x"), ST_TL_BACKGROUND);
	st_html_init(&h);
	assert_int_equal(st_timeline_svg(&h, &tl, NULL, 0), 0);
	assert_int_equal(h.len, 0);
	st_html_fini(&h);
}

static void test_report_bad_inputs_named(void **state)
{
	(void)state;
	char mp[128], err[256];
	st_runlog_t log;
	const char *m = put("bad.jsonl", "{\"t\":1}\n\n{\"t\":2,\"x\" 3}\n", mp, sizeof mp);
	assert_int_equal(st_runlog_read(m, &log, err, sizeof err), ST_EINVAL);
	st_runlog_fini(&log);
	char want[160];
	snprintf(want, sizeof want, "%s:3: expected ':' after a key (column 12)", m);
	assert_string_equal(err, want);
	m = put("trunc.jsonl", "{\"t\":1,\"metrics\":{\"auc\":0.5\n", mp, sizeof mp);
	assert_int_equal(st_runlog_read(m, &log, err, sizeof err), ST_EINVAL);
	st_runlog_fini(&log);
	assert_non_null(strstr(err, "trunc.jsonl:1: "));
	/* A last line cut short without its newline (a killed run) is left out. */
	m = put("cut.jsonl", "{\"t\":1,\"examples\":5}\n{\"t\":2,\"exa", mp, sizeof mp);
	assert_int_equal(st_runlog_read(m, &log, err, sizeof err), ST_OK);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.cut_line, 2);
	st_runlog_fini(&log);
	snprintf(mp, sizeof mp, "%s/none.jsonl", dir);
	assert_int_equal(st_runlog_read(mp, &log, err, sizeof err), ST_ENOENT);
	st_runlog_fini(&log);
	assert_non_null(strstr(err, "none.jsonl"));
	/* A trace that is not one. */
	st_report_in_t in = { .trace_path = put("nt.json", "hello\n", mp, sizeof mp) };
	st_html_t h;
	st_html_init(&h);
	assert_int_equal(st_report_build(&in, &h, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "nt.json holds no trace events"));
	st_html_fini(&h);
}

static void test_report_runlog_flattens(void **state)
{
	(void)state;
	st_runlog_rec_t r;
	char err[128];
	assert_int_equal(st_runlog_parse("{\"a\":{\"b.c\":[1,{\"d\":\"x\\u00e9\\n\"}]},"
					 "\"n\":null,\"t\":true}", &r, err, sizeof err), ST_OK);
	double v;
	assert_true(st_runlog_num(&r, "a.b.c.0", &v));
	assert_true(v == 1.0);
	assert_string_equal(st_runlog_str(&r, "a.b.c.1.d"), "x\xc3\xa9\n");
	assert_false(st_runlog_num(&r, "n", &v));
	assert_true(st_runlog_num(&r, "t", &v) && v == 1.0);
	assert_false(r.is_phase);
	st_runlog_rec_fini(&r);
	assert_int_equal(st_runlog_parse("{\"a\":1} x", &r, err, sizeof err), ST_EINVAL);
	assert_string_equal(err, "text after the object (column 9)");
	st_runlog_rec_fini(&r);
}

/* A two-head job's records carry metrics.auc_<label> / loss_<label>: each
 * further head gets its own progressive series, named by its label. */
static void test_report_draws_every_head(void **state)
{
	(void)state;
	static const char two_heads[] =
		"{\"t\":0.5,\"examples\":1000,\"metrics\":{\"auc\":0.61,\"loss\":0.55,"
		"\"loss_conversion\":0.4,\"auc_conversion\":0.66}}\n"
		"{\"t\":1.0,\"examples\":2000,\"metrics\":{\"auc\":0.65,\"loss\":0.52,"
		"\"loss_conversion\":0.38,\"auc_conversion\":0.7},\"final\":true}\n";
	char mp[128];
	char *page = build(put("h.jsonl", two_heads, mp, sizeof mp), NULL, NULL);
	assert_drawn(page, "AUC over examples");
	assert_non_null(strstr(page, "progressive AUC conversion"));
	assert_non_null(strstr(page, "progressive logloss conversion"));
	free(page);
	/* a one-head job's page names no further head */
	page = build(put("m.jsonl", metrics_two_phases, mp, sizeof mp), NULL, NULL);
	assert_null(strstr(page, "progressive AUC "));
	free(page);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_report_draws_recorded_series),
		cmocka_unit_test(test_report_draws_every_head),
		cmocka_unit_test(test_report_absent_series_say_so),
		cmocka_unit_test(test_report_escapes_inputs),
		cmocka_unit_test(test_report_draws_trace),
		cmocka_unit_test(test_report_draws_timeline),
		cmocka_unit_test(test_report_timeline_thinned),
		cmocka_unit_test(test_report_bad_inputs_named),
		cmocka_unit_test(test_report_runlog_flattens),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
