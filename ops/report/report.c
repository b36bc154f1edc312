/*
 * report.c — the page of report.h, section by section: summary, model
 * quality, throughput, pipeline, store, sync, phases and events,
 * configuration.
 *
 * The metrics file is turned into aligned points first (points.h: time
 * and examples cumulative across phases, phase ends, stage names); every
 * metric plot is a set of y values over those points. The trace's counters and instants
 * (runtime/trace_read.h) are drawn on the trace's own clock, which is not
 * the metrics file's: the two are never mixed on one axis.
 *
 * Arrays for the charts come from one arena freed at the end; out of
 * memory is sticky (c->oom) and reported once.
 *
 * This file is long because it is the page itself, its sections in reading
 * order, each a few dozen lines over the same context and chart helpers;
 * cut into files they would share every helper through a header and the
 * page's order would no longer be read top to bottom. The drawing is
 * elsewhere (chart.c, timeline.c, html.c), and so is the reading
 * (runlog.c, points.c, runtime/trace_read.c).
 */
#include "ops/report/report.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/report/chart.h"
#include "ops/report/points.h"
#include "ops/report/timeline.h"
#include "runtime/trace_read.h"

#define MAX_SERIES 24
#define MAX_COUNTERS 64
#define MAX_INSTANTS 5000

struct vec {
	double *v;
	size_t n, cap;
};

struct counter {
	char name[64];
	struct vec x, y;
};

struct instant {
	double t;
	char name[64];
	char *detail;
};

/* What the trace holds, for the report (filled by on_event). */
struct trace {
	int have;
	st_trace_summary_t sum;
	struct counter cn[MAX_COUNTERS];
	int ncn;
	struct instant *in;
	size_t nin, in_cap, in_dropped;
	st_timeline_t tl;      /* every span, per track */
	int oom;
};

struct ctx {
	st_html_t *h;
	void **arena;
	size_t narena, arena_cap;
	int oom;
	st_points_t r;
	struct trace tr;
	/* markers on the metrics file's axes: phase ends, policy switches */
	st_chart_marker_t *mk_t, *mk_x;
	int nmk;
	char (*mk_label)[96];
};

static void *alloc(struct ctx *c, size_t n, size_t size)
{
	if (c->oom)
		return NULL;
	if (c->narena == c->arena_cap) {
		size_t cap = c->arena_cap ? 2 * c->arena_cap : 64;
		void **a = realloc(c->arena, cap * sizeof *a);
		if (!a) {
			c->oom = 1;
			return NULL;
		}
		c->arena = a;
		c->arena_cap = cap;
	}
	void *p = calloc(n ? n : 1, size);
	if (!p) {
		c->oom = 1;
		return NULL;
	}
	c->arena[c->narena++] = p;
	return p;
}

static int vpush(struct vec *a, double v)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 256;
		double *p = realloc(a->v, cap * sizeof *p);
		if (!p)
			return -1;
		a->v = p;
		a->cap = cap;
	}
	a->v[a->n++] = v;
	return 0;
}

/* ---- the metrics file as points ---------------------------------------- */


/* ---- charts -------------------------------------------------------------- */

struct plot {
	st_chart_t ch;
	st_chart_series_t s[MAX_SERIES];
	char names[MAX_SERIES][96];
};

static void plot_init(struct plot *p, const char *title, const char *xlabel, const char *ylabel)
{
	memset(p, 0, sizeof *p);
	p->ch.title = title;
	p->ch.xlabel = xlabel;
	p->ch.ylabel = ylabel;
	p->ch.series = p->s;
}

/* Adds a series unless y is NULL (absent from the inputs). */
static void add(struct plot *p, const char *name, const double *x, const double *y, size_t n,
		int dots)
{
	if (!y || !n || p->ch.nseries == MAX_SERIES)
		return;
	int i = p->ch.nseries++;
	snprintf(p->names[i], sizeof p->names[i], "%s", name);
	p->s[i] = (st_chart_series_t){ .name = p->names[i], .x = x, .y = y, .n = n, .dots = dots };
}

/* Draws p, or says it was not recorded (and why, when the caller knows). */
static void emit(struct ctx *c, struct plot *p, const char *why)
{
	if (st_chart_points(&p->ch) == 0) {
		st_html_raw(c->h, "<p class=\"absent\"><b>");
		st_html_text(c->h, p->ch.title);
		st_html_raw(c->h, "</b>: not recorded in this run");
		if (why) {
			st_html_raw(c->h, " (");
			st_html_text(c->h, why);
			st_html_raw(c->h, ")");
		}
		st_html_raw(c->h, ".</p>\n");
		return;
	}
	st_chart_svg(c->h, &p->ch);
}

static void on_time(struct ctx *c, struct plot *p)
{
	p->ch.markers = c->mk_t;
	p->ch.nmarkers = c->nmk;
}

static void on_examples(struct ctx *c, struct plot *p)
{
	p->ch.markers = c->mk_x;
	p->ch.nmarkers = c->nmk;
}


static void metric_series(struct ctx *c, struct plot *p, const char *name, const char *metric_name,
			  const double *x)
{
	char key[160];
	snprintf(key, sizeof key, "metrics.%s", metric_name);
	add(p, name, x, st_points_metric(&c->r, key), c->r.n, 0);
}

/* Markers on the metrics file's axes: each phase's end and each record
 * where sync_switches grew (st.sync.auto switched policy). */
static void build_markers(struct ctx *c)
{
	st_points_t *r = &c->r;
	size_t max = r->nph + r->n;
	c->mk_t = alloc(c, max, sizeof *c->mk_t);
	c->mk_x = alloc(c, max, sizeof *c->mk_x);
	c->mk_label = alloc(c, max, sizeof *c->mk_label);
	if (c->oom)
		return;
	for (size_t i = 0; i < r->nph; i++) {
		const char *name = st_runlog_str(r->ph[i], "phase");
		const char *sync = st_runlog_str(r->ph[i], "sync");
		snprintf(c->mk_label[c->nmk], sizeof c->mk_label[0], "end of %s (%s)",
			 name ? name : "?", sync ? sync : "?");
		c->mk_t[c->nmk] = (st_chart_marker_t){ r->ph_t[i], c->mk_label[c->nmk] };
		c->mk_x[c->nmk] = (st_chart_marker_t){ r->ph_x[i], c->mk_label[c->nmk] };
		c->nmk++;
	}
	double prev = NAN;
	for (size_t j = 0; j < r->n; j++) {
		double v;
		if (!st_runlog_num(r->rec[j], "metrics.sync_switches", &v))
			continue;
		if (j > 0 && isfinite(prev) && v > prev && r->seg[j] == r->seg[j - 1]) {
			snprintf(c->mk_label[c->nmk], sizeof c->mk_label[0], "policy switch");
			c->mk_t[c->nmk] = (st_chart_marker_t){ r->t[j], c->mk_label[c->nmk] };
			c->mk_x[c->nmk] = (st_chart_marker_t){ r->x[j], c->mk_label[c->nmk] };
			c->nmk++;
		}
		prev = v;
	}
}

/* ---- the trace ----------------------------------------------------------- */

static int on_event(const st_trace_rec_t *e, void *arg)
{
	struct trace *t = arg;
	if (e->ph == 'C') {
		int i = 0;
		while (i < t->ncn && strcmp(t->cn[i].name, e->name))
			i++;
		if (i == t->ncn) {
			if (t->ncn == MAX_COUNTERS)
				return 0;
			snprintf(t->cn[t->ncn++].name, sizeof t->cn[0].name, "%s", e->name);
		}
		if (vpush(&t->cn[i].x, e->ts_us / 1e6) < 0 || vpush(&t->cn[i].y, e->value) < 0)
			return -ENOMEM;
	} else if (e->ph == 'X') {
		st_timeline_span(&t->tl, e->tid, e->ts_us / 1e6, e->dur_us / 1e6, e->cat, e->name);
	} else if (e->ph == 'M' && !strcmp(e->name, "thread_name")) {
		st_timeline_track(&t->tl, e->tid, e->detail);
	} else if (e->ph == 'i') {
		if (t->nin == MAX_INSTANTS) {
			t->in_dropped++;
			return 0;
		}
		if (t->nin == t->in_cap) {
			size_t cap = t->in_cap ? 2 * t->in_cap : 64;
			struct instant *p = realloc(t->in, cap * sizeof *p);
			if (!p)
				return -ENOMEM;
			t->in = p;
			t->in_cap = cap;
		}
		struct instant *in = &t->in[t->nin];
		in->t = e->ts_us / 1e6;
		snprintf(in->name, sizeof in->name, "%s", e->name);
		if (!(in->detail = strdup(e->detail)))
			return -ENOMEM;
		t->nin++;
	}
	return 0;
}

static int read_trace(struct ctx *c, const char *path, char *err, size_t errlen)
{
	st_timeline_init(&c->tr.tl);
	int rc = st_trace_read(path, on_event, &c->tr, NULL);
	if (rc == 0)
		rc = st_trace_summarize(path, &c->tr.sum);
	if (rc == 0 && c->tr.tl.oom)
		rc = -ENOMEM;
	if (rc == -EINVAL) {
		snprintf(err, errlen, "%s holds no trace events (is it a file of `strata run "
			 "--trace`?)", path);
		return rc;
	}
	if (rc < 0) {
		snprintf(err, errlen, "cannot read the trace %s: %s", path, strerror(-rc));
		return rc;
	}
	c->tr.have = 1;
	return 0;
}

static void free_trace(struct trace *t)
{
	for (int i = 0; i < t->ncn; i++) {
		free(t->cn[i].x.v);
		free(t->cn[i].y.v);
	}
	for (size_t i = 0; i < t->nin; i++)
		free(t->in[i].detail);
	free(t->in);
	st_timeline_fini(&t->tl);
}


/* ---- sections ------------------------------------------------------------ */

static const char css[] =
	"body{font:14px/1.45 'DejaVu Sans',Arial,sans-serif;margin:24px auto;max-width:960px;"
	"color:#222;background:#fff}\n"
	"h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;margin-top:32px}\n"
	"svg.chart,svg.timeline{width:100%;height:auto;display:block;margin:8px 0 16px}\n"
	".title{font-size:15px;font-weight:bold}.legend,.tick,.mlabel{font-size:11px;fill:#333}\n"
	".axis{font-size:12px;fill:#333}.plot{fill:#fcfcfc;stroke:#999}\n"
	".grid{stroke:#e4e4e4}.series{fill:none;stroke-width:1.8}\n"
	".marker{stroke:#555;stroke-dasharray:4 3}.mlabel{fill:#555}\n"
	".absent{color:#8a5a00;background:#fff8e6;padding:6px 10px;border-left:3px solid #e0a800}\n"
	"table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
	"text-align:right}th{background:#f2f2f2}td.l,th.l{text-align:left}\n"
	"pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}\n"
	".note{color:#555;font-size:13px}\n";

static void td_num(st_html_t *h, const st_runlog_rec_t *e, const char *key, const char *fmt)
{
	double v;
	if (e && st_runlog_num(e, key, &v))
		st_html_printf(h, "<td>"), st_html_printf(h, fmt, v), st_html_raw(h, "</td>");
	else
		st_html_raw(h, "<td>—</td>");
}

static void td_text(st_html_t *h, const char *s)
{
	st_html_raw(h, "<td class=\"l\">");
	st_html_text(h, s ? s : "—");
	st_html_raw(h, "</td>");
}

static void head(struct ctx *c, const st_report_in_t *in)
{
	st_html_t *h = c->h;
	const char *title = in->title ? in->title : "strata report";
	st_html_raw(h, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
	st_html_text(h, title);
	st_html_printf(h, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>", css);
	st_html_text(h, title);
	st_html_raw(h, "</h1>\n<table>\n");
	st_html_raw(h, "<tr><th class=\"l\">metrics file</th>");
	td_text(h, in->metrics_path ? in->metrics_path : "not given");
	st_html_raw(h, "</tr>\n<tr><th class=\"l\">trace</th>");
	td_text(h, in->trace_path ? in->trace_path : "not given");
	st_html_raw(h, "</tr>\n<tr><th class=\"l\">configuration</th>");
	td_text(h, in->config_from ? in->config_from : "not given");
	st_html_raw(h, "</tr>\n");
	for (size_t i = 0; i < c->tr.nin; i++)
		if (!strcmp(c->tr.in[i].name, "start")) {
			st_html_raw(h, "<tr><th class=\"l\">job</th>");
			td_text(h, c->tr.in[i].detail);
			st_html_raw(h, "</tr>\n");
			break;
		}
	st_points_t *r = &c->r;
	if (r->n) {
		const st_runlog_rec_t *last = r->rec[r->n - 1];
		st_html_printf(h, "<tr><th class=\"l\">progress records</th><td class=\"l\">%zu "
			       "(%zu phase ends)</td></tr>\n", r->n, r->nph);
		if (isfinite(r->x[r->n - 1])) {
			st_html_raw(h, "<tr><th class=\"l\">");
			st_html_text(h, r->unit);
			st_html_printf(h, "</th><td class=\"l\">%.0f in %.1f s of training</td></tr>\n",
				       r->x[r->n - 1], r->t[r->n - 1]);
		}
		double auc;
		if (st_runlog_num(last, "metrics.auc", &auc))
			st_html_printf(h, "<tr><th class=\"l\">last progressive AUC</th>"
				       "<td class=\"l\">%.4f</td></tr>\n", auc);
	}
	st_html_raw(h, "</table>\n<p class=\"note\">Sections: <a href=\"#quality\">model quality</a>"
		    " · <a href=\"#throughput\">throughput</a> · <a href=\"#pipeline\">pipeline</a>"
		    " · <a href=\"#timeline\">timeline</a>"
		    " · <a href=\"#store\">store</a> · <a href=\"#sync\">sync</a>"
		    " · <a href=\"#events\">phases and events</a>"
		    " · <a href=\"#config\">configuration</a>. Dashed lines mark the end of each "
		    "phase and every policy switch of st.sync.auto.</p>\n");
}

static void quality(struct ctx *c)
{
	st_points_t *r = &c->r;
	const char *no_log = c->r.log ? NULL : "no --metrics file given";
	char xl[96];
	snprintf(xl, sizeof xl, "%s (cumulative)", r->unit[0] ? r->unit : "examples");
	st_html_raw(c->h, "<h2 id=\"quality\">Model quality</h2>\n<p class=\"note\">Progressive "
		    "metrics score each batch before training on it; eval metrics are computed on "
		    "data.eval at the end of each phase (dots).</p>\n");
	const char *what[2][4] = { { "AUC over examples", "AUC", "metrics.auc", "auc" },
				   { "Logloss over examples", "logloss", "metrics.loss", "logloss" } };
	for (int k = 0; k < 2; k++) {
		struct plot p;
		plot_init(&p, what[k][0], xl, what[k][1]);
		add(&p, k ? "progressive logloss" : "progressive auc", r->x,
		    st_points_metric(&c->r, what[k][2]), r->n, 0);
		/* Further heads of a multi-task model: metrics.auc_<label> and
		 * metrics.loss_<label> (docs/models.md, "Several labels"),
		 * named from the last record's keys. */
		const st_runlog_rec_t *last = r->n ? r->rec[r->n - 1] : NULL;
		const char *pre = k ? "metrics.loss_" : "metrics.auc_";
		for (size_t j = 0, nh = 0; last && j < last->n && nh < 8; j++) {
			const char *key = last->kv[j].key;
			if (strncmp(key, pre, strlen(pre)))
				continue;
			char name[96];   /* add() copies it */
			snprintf(name, sizeof name, "progressive %s %s", what[k][1],
				 key + strlen(pre));
			add(&p, name, r->x, st_points_metric(&c->r, key), r->n, 0);
			nh++;
		}
		/* Per phase: eval and slice values at the phase's end. */
		const char *per[2] = { "eval_", "slice_" };
		for (int q = 0; q < 2 && r->nph; q++) {
			char key[32], name[48];
			snprintf(key, sizeof key, "%s%s", per[q], what[k][3]);
			snprintf(name, sizeof name, "%s %s (end of phase)", q ? "slice" : "eval",
				 what[k][1]);
			double *y = alloc(c, r->nph, sizeof *y);
			size_t finite = 0;
			for (size_t i = 0; y && i < r->nph; i++) {
				y[i] = NAN;
				finite += st_runlog_num(r->ph[i], key, &y[i]);
			}
			add(&p, name, r->ph_x, finite ? y : NULL, r->nph, 1);
		}
		on_examples(c, &p);
		emit(c, &p, no_log);
	}
	if (r->log && !r->nph)
		st_html_raw(c->h, "<p class=\"absent\"><b>Eval AUC and logloss</b>: not recorded in "
			    "this run (the metrics file holds them for jobs with phases; a job "
			    "without phases prints them at the end).</p>\n");
}

/* Examples per batch over the run: each segment's examples (phase, or the
 * whole run) over the most batches a stage handled in it (a stage's items
 * restart with each phase); NAN when the log has neither. */
static double examples_per_batch(const st_points_t *r)
{
	double ex = 0, items = 0, x_prev = 0;
	for (size_t j = 0; j < r->n; j++) {
		if (j + 1 < r->n && r->seg[j + 1] == r->seg[j])
			continue;   /* not the segment's last record */
		double most = 0, v;
		for (int s = 0; s < r->nst; s++)
			if (st_points_stage_num(r->rec[j], r->st[s], "items", &v))
				most = fmax(most, v);
		if (isfinite(r->x[j]) && most > 0) {
			ex += r->x[j] - x_prev;
			items += most;
		}
		if (isfinite(r->x[j]))
			x_prev = r->x[j];
	}
	return ex > 0 && items > 0 ? ex / items : NAN;
}

static void throughput(struct ctx *c)
{
	st_points_t *r = &c->r;
	const char *no_log = c->r.log ? NULL : "no --metrics file given";
	st_html_raw(c->h, "<h2 id=\"throughput\">Throughput</h2>\n");
	struct plot p;
	char yl[96];
	snprintf(yl, sizeof yl, "%s/s", r->unit[0] ? r->unit : "examples");
	plot_init(&p, "Examples per second over time", "training time (s)", yl);
	p.ch.y_zero = 1;
	if (r->rate[0])
		add(&p, r->rate, r->t, st_points_metric(&c->r, r->rate), r->n, 0);
	const char *w[MAX_SERIES];
	int nw = st_points_keys_with(&c->r, "worker_eps_", w, MAX_SERIES - 1);
	for (int i = 0; i < nw; i++)
		metric_series(c, &p, w[i], w[i], r->t);
	on_time(c, &p);
	emit(c, &p, no_log);

	/* Each stage's pace in examples/s: its batches/s times the run's
	 * examples per batch (every stage handles the same batches). */
	double per_batch = examples_per_batch(r);
	char yl2[96];
	snprintf(yl2, sizeof yl2, "%s/s (batches/s x %.0f)", r->unit[0] ? r->unit : "examples",
		 per_batch);
	if (isfinite(per_batch))
		plot_init(&p, "Examples per second of each stage", "training time (s)", yl2);
	else
		plot_init(&p, "Batches per second of each stage", "training time (s)", "batches/s");
	p.ch.y_zero = 1;
	for (int s = 0; s < r->nst; s++) {
		double *y = alloc(c, r->n, sizeof *y);
		size_t finite = 0;
		for (size_t j = 0; y && j < r->n; j++) {
			double it, pit = 0, pt = 0, t0;
			y[j] = NAN;
			if (!st_points_stage_num(r->rec[j], r->st[s], "items", &it) ||
			    !st_runlog_num(r->rec[j], "t", &t0))
				continue;
			/* From the previous record of the same phase, or from the phase's start. */
			if (j > 0 && r->seg[j - 1] == r->seg[j] &&
			    st_points_stage_num(r->rec[j - 1], r->st[s], "items", &pit) &&
			    st_runlog_num(r->rec[j - 1], "t", &pt) && it >= pit) {
				;
			} else {
				pit = 0;
				pt = 0;
			}
			if (t0 > pt) {
				y[j] = (it - pit) / (t0 - pt) * (isfinite(per_batch) ? per_batch : 1);
				finite++;
			}
		}
		add(&p, r->st[s], r->t, finite ? y : NULL, r->n, 0);
	}
	on_time(c, &p);
	emit(c, &p, no_log);

	plot_init(&p, "Busy share of each stage", "training time (s)", "busy % (mean over threads)");
	p.ch.y_zero = 1;
	p.ch.y_top = 100;
	for (int s = 0; s < r->nst; s++) {
		double *y = alloc(c, r->n, sizeof *y);
		size_t finite = 0;
		for (size_t j = 0; y && j < r->n; j++) {
			y[j] = NAN;
			finite += st_points_stage_num(r->rec[j], r->st[s], "busy_pct", &y[j]);
		}
		add(&p, r->st[s], r->t, finite ? y : NULL, r->n, 0);
	}
	on_time(c, &p);
	emit(c, &p, no_log);
}

/* The trace's phase and policy instants as markers on its clock (arena). */
static const st_chart_marker_t *trace_markers(struct ctx *c, int *n)
{
	st_chart_marker_t *mk = alloc(c, c->tr.nin, sizeof *mk);
	char (*lab)[96] = alloc(c, c->tr.nin, sizeof *lab);
	int nmk = 0;
	for (size_t i = 0; mk && lab && i < c->tr.nin; i++) {
		const struct instant *in = &c->tr.in[i];
		if (strcmp(in->name, "phase") && strcmp(in->name, "policy"))
			continue;
		snprintf(lab[nmk], sizeof lab[0], "%s %s", in->name, in->detail);
		mk[nmk] = (st_chart_marker_t){ in->t, lab[nmk] };
		nmk++;
	}
	*n = nmk;
	return mk;
}

static void pipeline(struct ctx *c)
{
	st_points_t *r = &c->r;
	st_html_t *h = c->h;
	st_html_raw(h, "<h2 id=\"pipeline\">Pipeline</h2>\n");
	if (c->tr.have && c->tr.sum.n) {
		const st_trace_summary_t *s = &c->tr.sum;
		st_html_printf(h, "<p class=\"note\">From the trace (as <code>strata trace "
			       "summarize</code>): each stage's time over the pipeline's %.3f s.</p>\n"
			       "<table><tr><th class=\"l\">stage</th><th>threads</th><th>batches"
			       "</th><th>busy</th><th>idle</th><th>blocked</th><th></th></tr>\n",
			       s->wall_s);
		for (int i = 0; i < s->n; i++) {
			const st_trace_stage_sum_t *t = &s->st[i];
			double all = t->threads * s->wall_s;
			all = all > 0 ? all : 1;
			st_html_raw(h, "<tr>");
			td_text(h, t->name);
			st_html_printf(h, "<td>%d</td><td>%llu</td><td>%.1f%%</td><td>%.1f%%</td>"
				       "<td>%.1f%%</td><td class=\"l\">%s</td></tr>\n", t->threads,
				       (unsigned long long)t->spans, 100 * t->busy_s / all,
				       100 * t->idle_s / all, 100 * t->blocked_s / all,
				       i == s->bottleneck ? "&larr; bottleneck" : "");
		}
		st_html_raw(h, "</table>\n");
		if (s->dropped)
			st_html_printf(h, "<p class=\"note\">The trace's rings dropped %llu older "
				       "events: the sums cover the newest ones.</p>\n",
				       (unsigned long long)s->dropped);
	} else {
		st_html_raw(h, "<p class=\"absent\"><b>Busy, idle and blocked time per stage</b>: "
			    "not recorded in this run (no --trace file given).</p>\n");
	}
	struct plot p;
	plot_init(&p, "Queue occupancy at each progress record", "training time (s)",
		  "batches in the stage's input queue");
	p.ch.y_zero = 1;
	for (int s = 0; s < r->nst; s++) {
		double *y = alloc(c, r->n, sizeof *y);
		size_t finite = 0;
		double cap = 0;
		for (size_t j = 0; y && j < r->n; j++) {
			double q;
			y[j] = NAN;
			if (st_points_stage_num(r->rec[j], r->st[s], "queue_cap", &q))
				cap = fmax(cap, q);
			if (q > 0 && st_points_stage_num(r->rec[j], r->st[s], "queue_depth", &y[j]))
				finite++;
			else
				y[j] = NAN;
		}
		char name[64];
		snprintf(name, sizeof name, "%s (of %.0f)", r->st[s], cap);
		add(&p, name, r->t, finite && cap > 0 ? y : NULL, r->n, 0);
	}
	on_time(c, &p);
	emit(c, &p, c->r.log ? NULL : "no --metrics file given");

	/* The trace's queue counters, sampled at every take: finer than the
	 * progress records, on the trace's clock with its phase and policy
	 * instants as markers. */
	plot_init(&p, "Queue occupancy after each take (trace)", "time since the trace began (s)",
		  "batches left in the queue");
	p.ch.y_zero = 1;
	for (int i = 0; i < c->tr.ncn; i++)
		if (!strncmp(c->tr.cn[i].name, "queue ", 6))
			add(&p, c->tr.cn[i].name, c->tr.cn[i].x.v, c->tr.cn[i].y.v, c->tr.cn[i].x.n, 0);
	int nmk = 0;
	p.ch.markers = trace_markers(c, &nmk);
	p.ch.nmarkers = nmk;
	emit(c, &p, c->tr.have ? NULL : "no --trace file given");
}

/* Every thread of the trace on one time axis (timeline.h): which stage
 * works while the others wait, and the background threads beside them. */
static void timeline(struct ctx *c)
{
	st_html_t *h = c->h;
	st_html_raw(h, "<h2 id=\"timeline\">Timeline</h2>\n");
	if (!c->tr.have || !c->tr.tl.spans) {
		st_html_raw(h, "<p class=\"absent\"><b>Timeline of the threads</b>: not recorded "
			    "in this run (");
		st_html_raw(h, c->tr.have ? "the trace holds no spans" : "no --trace file given");
		st_html_raw(h, ").</p>\n");
		return;
	}
	st_html_printf(h, "<p class=\"note\">One row per thread of the trace (%zu spans), on the "
		       "trace's clock. Each row is cut into %d columns: a column has the colour "
		       "of the kind of span that covered most of it, lighter when spans covered "
		       "less of it. The bottleneck's row is solid with stage work; the rows "
		       "before it show blocked time, the rows after it idle time. For single "
		       "spans, open the trace in Perfetto.</p>\n", c->tr.tl.spans,
		       ST_TIMELINE_COLS);
	int nmk = 0;
	const st_chart_marker_t *mk = trace_markers(c, &nmk);
	st_timeline_svg(h, &c->tr.tl, mk, nmk);
}

static void store(struct ctx *c)
{
	st_points_t *r = &c->r;
	const char *why = c->r.log ? "the job has no SSD tier, or the store published no such "
		"metric" : "no --metrics file given";
	st_html_raw(c->h, "<h2 id=\"store\">Store</h2>\n<p class=\"note\">Hit rates are lookups "
		    "found in RAM (per segment of the cache) and lookups that loaded the row from "
		    "SSD, as shares of all lookups (docs/storage.md).</p>\n");
	struct plot p;
	plot_init(&p, "Hit rates per tier", "training time (s)", "share of lookups");
	p.ch.y_zero = 1;
	p.ch.y_top = 1;
	const char *hits[] = { "cache.hit", "cache.hit_lru", "cache.hit_lfu", "cache.ssd_load" };
	for (int i = 0; i < 4; i++)
		metric_series(c, &p, hits[i], hits[i], r->t);
	on_time(c, &p);
	emit(c, &p, why);

	plot_init(&p, "Rows per tier", "training time (s)", "rows");
	p.ch.y_zero = 1;
	const char *rows[] = { "rows", "cache.rows_ram", "cache.rows_ssd", "evicted" };
	for (int i = 0; i < 4; i++)
		metric_series(c, &p, rows[i], rows[i], r->t);
	on_time(c, &p);
	emit(c, &p, c->r.log ? NULL : "no --metrics file given");

	plot_init(&p, "Bytes per tier", "training time (s)", "MB");
	p.ch.y_zero = 1;
	const char *mb[] = { "ram_mb", "ssd.disk_mb", "ssd.live_mb", "ssd.index_mb",
			     "ssd.read_mb", "ssd.write_mb" };
	for (int i = 0; i < 6; i++)
		metric_series(c, &p, mb[i], mb[i], r->t);
	on_time(c, &p);
	emit(c, &p, c->r.log ? NULL : "no --metrics file given");
	st_html_raw(c->h, "<p class=\"note\">ram_mb: the RAM tier's row slots (floats, metadata "
		    "and cache words); the hash index and the SSD tier's key index come on top "
		    "(docs/storage.md).</p>\n");
}

/* The policy of segment k: the phase's "sync", or the trace's policies. */
static void segment_policy(struct ctx *c, size_t k, char *out, size_t cap)
{
	if (k < c->r.nph) {
		const char *s = st_runlog_str(c->r.ph[k], "sync");
		snprintf(out, cap, "%s", s ? s : "?");
		return;
	}
	out[0] = '\0';
	for (size_t i = 0; i < c->tr.nin; i++) {
		const char *d = c->tr.in[i].detail;
		if (strcmp(c->tr.in[i].name, "policy") || strstr(out, d))
			continue;
		size_t n = strlen(out);
		snprintf(out + n, cap - n, "%s%s", n ? ", " : "", d);
	}
	if (!out[0])
		snprintf(out, cap, "not recorded (give --trace)");
}

static void sync_section(struct ctx *c)
{
	st_points_t *r = &c->r;
	st_html_t *h = c->h;
	const char *no_log = c->r.log ? NULL : "no --metrics file given";
	st_html_raw(h, "<h2 id=\"sync\">Sync: staleness and dropped gradients</h2>\n");
	struct plot p;
	plot_init(&p, "Staleness of applied updates", "training time (s)", "steps behind");
	p.ch.y_zero = 1;
	metric_series(c, &p, "mean", "sync_staleness_mean", r->t);
	metric_series(c, &p, "max", "sync_staleness_max", r->t);
	on_time(c, &p);
	emit(c, &p, no_log);
	plot_init(&p, "Dropped gradients", "training time (s)", "dropped (cumulative)");
	p.ch.y_zero = 1;
	metric_series(c, &p, "sync_dropped", "sync_dropped", r->t);
	metric_series(c, &p, "dist_buf_rows_dropped", "dist_buf_rows_dropped", r->t);
	on_time(c, &p);
	emit(c, &p, no_log);
	if (!r->n)
		return;
	/* Per policy: the last record of each segment (phase, or the whole run). */
	st_html_raw(h, "<table><tr><th class=\"l\">segment</th><th class=\"l\">policy</th>"
		    "<th>updates</th><th>staleness mean</th><th>staleness max</th>"
		    "<th>dropped</th><th>policy switches</th></tr>\n");
	size_t nseg = r->nph + (r->seg[r->n - 1] == (int)r->nph);
	for (size_t k = 0; k < nseg; k++) {
		const st_runlog_rec_t *last = NULL;
		for (size_t j = 0; j < r->n; j++)
			if (r->seg[j] == (int)k)
				last = r->rec[j];
		char pol[256], seg[96];
		segment_policy(c, k, pol, sizeof pol);
		if (k < r->nph) {
			const char *n = st_runlog_str(r->ph[k], "phase");
			snprintf(seg, sizeof seg, "phase %s", n ? n : "?");
		} else {
			snprintf(seg, sizeof seg, r->nph ? "after the phases" : "the whole run");
		}
		st_html_raw(h, "<tr>");
		td_text(h, seg);
		td_text(h, pol);
		td_num(h, last, "metrics.sync_updates", "%.0f");
		td_num(h, last, "metrics.sync_staleness_mean", "%.3f");
		td_num(h, last, "metrics.sync_staleness_max", "%.0f");
		td_num(h, last, "metrics.sync_dropped", "%.0f");
		td_num(h, last, "metrics.sync_switches", "%.0f");
		st_html_raw(h, "</tr>\n");
	}
	st_html_raw(h, "</table>\n");
}

static void events(struct ctx *c)
{
	st_points_t *r = &c->r;
	st_html_t *h = c->h;
	st_html_raw(h, "<h2 id=\"events\">Phases and events</h2>\n");
	if (r->nph) {
		st_html_raw(h, "<table><tr><th>#</th><th class=\"l\">phase</th><th class=\"l\">"
			    "sync</th><th>examples</th><th>s</th><th>auc</th><th>logloss</th>"
			    "<th>eval auc</th><th>eval logloss</th></tr>\n");
		for (size_t i = 0; i < r->nph; i++) {
			const st_runlog_rec_t *e = r->ph[i];
			st_html_raw(h, "<tr>");
			td_num(h, e, "index", "%.0f");
			td_text(h, st_runlog_str(e, "phase"));
			td_text(h, st_runlog_str(e, "sync"));
			td_num(h, e, "examples", "%.0f");
			td_num(h, e, "secs", "%.2f");
			td_num(h, e, "auc", "%.4f");
			td_num(h, e, "logloss", "%.4f");
			td_num(h, e, "eval_auc", "%.4f");
			td_num(h, e, "eval_logloss", "%.4f");
			st_html_raw(h, "</tr>\n");
		}
		st_html_raw(h, "</table>\n");
	} else if (r->log) {
		st_html_raw(h, "<p class=\"note\">The job has no phases.</p>\n");
	}
	if (!c->tr.have) {
		st_html_raw(h, "<p class=\"absent\"><b>Events</b> (phases, policy switches, "
			    "checkpoints, errors): not recorded in this run (no --trace file "
			    "given).</p>\n");
		return;
	}
	st_html_raw(h, "<table><tr><th>time (s)</th><th class=\"l\">event</th><th class=\"l\">"
		    "detail</th></tr>\n");
	for (size_t i = 0; i < c->tr.nin; i++) {
		st_html_printf(h, "<tr><td>%.3f</td>", c->tr.in[i].t);
		td_text(h, c->tr.in[i].name);
		td_text(h, c->tr.in[i].detail);
		st_html_raw(h, "</tr>\n");
	}
	st_html_raw(h, "</table>\n");
	if (c->tr.in_dropped)
		st_html_printf(h, "<p class=\"note\">%zu more events not listed.</p>\n",
			       c->tr.in_dropped);
}

static void config(struct ctx *c, const st_report_in_t *in)
{
	st_html_raw(c->h, "<h2 id=\"config\">Configuration</h2>\n");
	if (!in->config_text) {
		st_html_raw(c->h, "<p class=\"absent\"><b>The job's configuration</b>: not "
			    "recorded in this run (give --job FILE.lua or --checkpoint DIR).</p>\n");
		return;
	}
	st_html_raw(c->h, "<p class=\"note\">From ");
	st_html_text(c->h, in->config_from);
	st_html_raw(c->h, ":</p>\n<pre>");
	st_html_text(c->h, in->config_text);
	st_html_raw(c->h, "</pre>\n");
}

int st_report_build(const st_report_in_t *in, st_html_t *out, char *err, size_t errlen)
{
	char ebuf[1];
	if (!err || !errlen) {
		err = ebuf;
		errlen = sizeof ebuf;
	}
	err[0] = '\0';
	struct ctx *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->h = out;
	int rc = 0;
	if (in->trace_path)
		rc = read_trace(c, in->trace_path, err, errlen);
	if (rc == 0 && st_points_init(&c->r, in->log) == 0)
		build_markers(c);
	if (rc == 0 && !c->oom) {
		head(c, in);
		quality(c);
		throughput(c);
		pipeline(c);
		timeline(c);
		store(c);
		sync_section(c);
		events(c);
		config(c, in);
		st_html_raw(out, "<p class=\"note\">Written by <code>strata report</code>; "
			    "self-contained: nothing on this page is fetched.</p>\n</body>\n</html>\n");
	}
	if (rc == 0 && (c->oom || c->r.oom || st_html_error(out) < 0)) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory while writing the report");
	}
	for (size_t i = 0; i < c->narena; i++)
		free(c->arena[i]);
	free(c->arena);
	free_trace(&c->tr);
	st_points_fini(&c->r);
	free(c);
	return rc;
}
