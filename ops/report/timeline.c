/*
 * timeline.c — the Gantt chart of timeline.h.
 *
 * Building: spans are kept per track (start, end, kind), in the order they
 * come; nothing is drawn until st_timeline_svg, which needs the time range
 * of all of them. Drawing a row: its spans are spread over the columns
 * (each span adds the time it overlaps each column to that column's sum
 * for its kind), then each column's dominant kind and coverage (in
 * quarters) are read off and runs of equal columns written as one <rect>.
 * The cost is the spans plus the columns they cover; the output is at most
 * ST_TIMELINE_COLS rectangles per row.
 *
 * Layout (user units; the SVG scales to the page's width): 900 wide, the
 * track names left of x = 150, a title and the legend above the rows, the
 * time axis below them. Colours are solid (the quarter shades are mixed
 * with white here, not with opacity), so the picture does not depend on
 * what is behind it and a rendered pixel has one of a few known colours.
 */
#include "ops/report/timeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W 900.0
#define L 150.0        /* rows: left, right edges */
#define R 885.0
#define T 58.0         /* top of the first row */
#define RH 14.0        /* row height */
#define RG 4.0         /* gap between rows */

struct tl_span {
	double t0, t1;
	unsigned char kind;
};

struct st__tl_track {
	int tid;
	char name[32];
	struct tl_span *sp;
	size_t n, cap;
};

static const char *const kind_class[ST_TL_KINDS] = {
	"tl-stage", "tl-blocked", "tl-idle", "tl-background", "tl-pass",
};
static const char *const kind_label[ST_TL_KINDS] = {
	"stage work (a batch)", "blocked (output full, a lock)", "idle (input empty)",
	"background work", "pass over data",
};
/* Chosen apart from the line charts' colours (chart.c), so that a
 * rendered page can be checked for each. */
static const unsigned kind_rgb[ST_TL_KINDS] = {
	0x3b6fb6, 0xe8590c, 0xa8a8a8, 0x2f9e44, 0xb9a7e0,
};

const char *st_timeline_colour(enum st_timeline_kind k)
{
	static const char *const hex[ST_TL_KINDS] = {
		"#3b6fb6", "#e8590c", "#a8a8a8", "#2f9e44", "#b9a7e0",
	};
	return hex[(unsigned)k < ST_TL_KINDS ? k : ST_TL_BACKGROUND];
}

void st_timeline_init(st_timeline_t *t)
{
	memset(t, 0, sizeof *t);
}

void st_timeline_fini(st_timeline_t *t)
{
	for (int i = 0; i < t->n; i++)
		free(t->tr[i].sp);
	free(t->tr);
	memset(t, 0, sizeof *t);
}

static struct st__tl_track *track(st_timeline_t *t, int tid)
{
	for (int i = 0; i < t->n; i++)
		if (t->tr[i].tid == tid)
			return &t->tr[i];
	if (t->n == t->cap) {
		int cap = t->cap ? 2 * t->cap : 16;
		struct st__tl_track *p = realloc(t->tr, (size_t)cap * sizeof *p);
		if (!p) {
			t->oom = 1;
			return NULL;
		}
		t->tr = p;
		t->cap = cap;
	}
	struct st__tl_track *k = &t->tr[t->n++];
	memset(k, 0, sizeof *k);
	k->tid = tid;
	snprintf(k->name, sizeof k->name, "tid %d", tid);
	return k;
}

void st_timeline_track(st_timeline_t *t, int tid, const char *name)
{
	struct st__tl_track *k = track(t, tid);
	if (k && name && name[0])
		snprintf(k->name, sizeof k->name, "%s", name);
}

enum st_timeline_kind st_timeline_kind(const char *cat, const char *name)
{
	if (!cat)
		return ST_TL_BACKGROUND;
	if (!strcmp(cat, "stage"))
		return ST_TL_STAGE;
	if (!strcmp(cat, "wait"))
		return name && !strcmp(name, "wait input") ? ST_TL_IDLE : ST_TL_BLOCKED;
	if (!strcmp(cat, "pass"))
		return ST_TL_PASS;
	/* A train worker's share of a batch is the train stage's work, on
	 * threads the graph does not run (ops/train/pool.c). */
	if (name && !strcmp(name, "train worker"))
		return ST_TL_STAGE;
	return ST_TL_BACKGROUND;
}

void st_timeline_span(st_timeline_t *t, int tid, double t0, double dur, const char *cat,
		      const char *name)
{
	if (!isfinite(t0) || !isfinite(dur))
		return;
	struct st__tl_track *k = track(t, tid);
	if (!k)
		return;
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 256;
		struct tl_span *p = realloc(k->sp, cap * sizeof *p);
		if (!p) {
			t->oom = 1;
			return;
		}
		k->sp = p;
		k->cap = cap;
	}
	k->sp[k->n++] = (struct tl_span){ t0, t0 + (dur > 0 ? dur : 0),
					  (unsigned char)st_timeline_kind(cat, name) };
	t->spans++;
}

/* The kind's colour at coverage level q of 4 (1..4), mixed with white. */
static void shade(char *out, size_t cap, int kind, int q)
{
	unsigned rgb = kind_rgb[kind], c[3];
	for (int i = 0; i < 3; i++) {
		unsigned v = (rgb >> (16 - 8 * i)) & 0xff;
		c[i] = 255 - (255 - v) * (unsigned)q / 4;
	}
	snprintf(out, cap, "#%02x%02x%02x", c[0], c[1], c[2]);
}

static int cmp_tid(const void *a, const void *b)
{
	const struct st__tl_track *x = *(const struct st__tl_track *const *)a;
	const struct st__tl_track *y = *(const struct st__tl_track *const *)b;
	return (x->tid > y->tid) - (x->tid < y->tid);
}

/* A round step for about `want` ticks over span (as chart.c's axes). */
static double nice_step(double span, int want)
{
	double raw = span / want;
	double p = pow(10, floor(log10(raw)));
	double f = raw / p;
	return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* One row: the columns' sums, then the runs as rectangles. */
static size_t draw_row(st_html_t *h, const struct st__tl_track *k, double lo, double hi,
		       double y, double (*cov)[ST_TL_KINDS])
{
	const int C = ST_TIMELINE_COLS;
	const double cw = (hi - lo) / C;
	memset(cov, 0, sizeof *cov * (size_t)C);
	for (size_t i = 0; i < k->n; i++) {
		const struct tl_span *s = &k->sp[i];
		double a = (s->t0 - lo) / cw, b = (s->t1 - lo) / cw;
		if (b < 0 || a > C)
			continue;
		int c0 = a < 0 ? 0 : (int)a, c1 = b >= C ? C - 1 : (int)ceil(b) - 1;
		if (c0 >= C)
			c0 = C - 1;
		if (c1 <= c0) {
			/* Within one column: at least a hundredth of it, so
			 * a burst of tiny spans still shows. */
			cov[c0][s->kind] += fmax(fmin(b, C) - fmax(a, 0), 0.01);
			continue;
		}
		/* Across columns: the overlaps, leaving out rounding crumbs
		 * (a span that starts a millionth of a column early). */
		for (int c = c0; c <= c1; c++) {
			double o = fmin(b, c + 1.0) - fmax(a, c);
			if (o > 1e-6)
				cov[c][s->kind] += o;
		}
	}
	int kind[ST_TIMELINE_COLS], q[ST_TIMELINE_COLS];
	for (int c = 0; c < C; c++) {
		int best = 0;
		for (int j = 1; j < ST_TL_KINDS; j++)
			if (cov[c][j] > cov[c][best])
				best = j;
		double f = fmin(cov[c][best], 1.0);
		kind[c] = best;
		q[c] = f <= 0 ? 0 : f >= 0.75 ? 4 : f >= 0.5 ? 3 : f >= 0.25 ? 2 : 1;
	}
	const double px = (R - L) / C;
	size_t rects = 0;
	for (int c = 0; c < C;) {
		int e = c + 1;
		while (e < C && q[e] == q[c] && (q[c] == 0 || kind[e] == kind[c]))
			e++;
		if (q[c]) {
			char fill[8];
			shade(fill, sizeof fill, kind[c], q[c]);
			st_html_printf(h, "<rect class=\"%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
				       "height=\"%.1f\" fill=\"%s\"/>\n", kind_class[kind[c]],
				       L + c * px, y, (e - c) * px, RH, fill);
			rects++;
		}
		c = e;
	}
	return rects;
}

size_t st_timeline_svg(st_html_t *h, const st_timeline_t *t, const st_chart_marker_t *markers,
		       int nmarkers)
{
	if (!t->spans)
		return 0;
	const struct st__tl_track **rows = malloc((size_t)t->n * sizeof *rows);
	double (*cov)[ST_TL_KINDS] = malloc(sizeof *cov * ST_TIMELINE_COLS);
	if (!rows || !cov) {
		free(rows);
		free(cov);
		st_html_raw(h, "<p class=\"absent\"><b>Timeline</b>: out of memory.</p>\n");
		return 0;
	}
	int nr = 0;
	double lo = INFINITY, hi = -INFINITY;
	for (int i = 0; i < t->n; i++) {
		const struct st__tl_track *k = &t->tr[i];
		if (!k->n)
			continue;
		rows[nr++] = k;
		for (size_t j = 0; j < k->n; j++) {
			lo = fmin(lo, k->sp[j].t0);
			hi = fmax(hi, k->sp[j].t1);
		}
	}
	qsort(rows, (size_t)nr, sizeof *rows, cmp_tid);
	int more = nr > ST_TIMELINE_ROWS ? nr - ST_TIMELINE_ROWS : 0;
	nr -= more;
	if (!(hi > lo))
		hi = lo + 1e-3;
	const double bottom = T + nr * (RH + RG);
	const double H = bottom + 44;
	st_html_printf(h, "<svg class=\"timeline\" viewBox=\"0 0 %.0f %.0f\" "
		       "role=\"img\">\n", W, H);
	st_html_raw(h, "<title>Timeline of the threads (trace)</title>\n"
		    "<text class=\"title\" x=\"10\" y=\"18\">Timeline of the threads (trace)</text>\n");
	/* The legend, one swatch per kind. */
	double lx = 10;
	for (int k = 0; k < ST_TL_KINDS; k++) {
		st_html_printf(h, "<rect x=\"%.0f\" y=\"30\" width=\"12\" height=\"10\" fill=\"%s\"/>"
			       "<text class=\"legend\" x=\"%.0f\" y=\"39\">%s</text>\n", lx,
			       st_timeline_colour((enum st_timeline_kind)k), lx + 16, kind_label[k]);
		lx += 24 + 6.2 * (double)strlen(kind_label[k]);
	}
	/* The time axis: ticks and light grid lines over the rows. */
	double step = nice_step(hi - lo, 8);
	for (double v = ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
		double x = L + (v - lo) / (hi - lo) * (R - L);
		st_html_printf(h, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
			       "y2=\"%.1f\"/><text class=\"tick\" x=\"%.1f\" y=\"%.1f\" "
			       "text-anchor=\"middle\">%.4g</text>\n", x, T - 4, x, bottom, x,
			       bottom + 14, fabs(v) < step * 1e-6 ? 0.0 : v);
	}
	st_html_printf(h, "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">"
		       "time since the trace began (s)</text>\n", (L + R) / 2, bottom + 34);
	size_t rects = 0;
	st_html_raw(h, "<g shape-rendering=\"crispEdges\">\n");
	for (int i = 0; i < nr; i++) {
		double y = T + i * (RH + RG);
		st_html_printf(h, "<text class=\"tick\" x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">",
			       L - 6, y + RH - 3);
		st_html_text(h, rows[i]->name);
		st_html_raw(h, "</text>\n");
		rects += draw_row(h, rows[i], lo, hi, y, cov);
	}
	st_html_raw(h, "</g>\n");
	for (int i = 0; i < nmarkers; i++) {
		double v = markers[i].x;
		if (!(v >= lo && v <= hi))
			continue;
		double x = L + (v - lo) / (hi - lo) * (R - L);
		st_html_printf(h, "<line class=\"marker\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
			       "y2=\"%.1f\"><title>", x, T - 8, x, bottom);
		st_html_text(h, markers[i].label);
		st_html_raw(h, "</title></line>\n");
	}
	st_html_raw(h, "</svg>\n");
	if (more)
		st_html_printf(h, "<p class=\"note\">%d more tracks are not drawn (the first %d "
			       "by thread number are).</p>\n", more, ST_TIMELINE_ROWS);
	free(rows);
	free(cov);
	return rects;
}
