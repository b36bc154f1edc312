/*
 * chart.c — the SVG line chart of chart.h.
 *
 * Layout (user units, the SVG scales to the page's width): a 900 x 300 box,
 * the plot area inside margins that leave room for tick labels on the left
 * and below, the title and the legend above. Ticks are 1, 2 or 5 times a
 * power of ten, about five per axis, so the labels are round numbers. A
 * range of one value is widened so that a flat series draws as a line in
 * the middle rather than dividing by zero.
 */
#include "ops/report/chart.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define W 900.0
#define H 300.0
#define L 72.0         /* plot area: left, right, top, bottom */
#define R 880.0
#define T 56.0
#define B 252.0
#define MAX_POINTS 1500

static const char *const colours[] = {
	"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
	"#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
};

const char *st_chart_colour(int i)
{
	return colours[(unsigned)i % (sizeof colours / sizeof colours[0])];
}

size_t st_chart_points(const st_chart_t *c)
{
	size_t n = 0;
	for (int s = 0; s < c->nseries; s++)
		for (size_t i = 0; i < c->series[s].n; i++)
			n += isfinite(c->series[s].x[i]) && isfinite(c->series[s].y[i]);
	return n;
}

/* A round step for about `want` ticks over span. */
static double nice_step(double span, int want)
{
	double raw = span / want;
	double p = pow(10, floor(log10(raw)));
	double f = raw / p;
	return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* A short label: 1.5M, 20k, 0.25, 3e-05. */
static void label(char *out, size_t cap, double v, double step)
{
	double a = fabs(v);
	if (a < step * 1e-6)
		snprintf(out, cap, "0");
	else if (a >= 1e9)
		snprintf(out, cap, "%.4gG", v / 1e9);
	else if (a >= 1e6)
		snprintf(out, cap, "%.4gM", v / 1e6);
	else if (a >= 1e4)
		snprintf(out, cap, "%.4gk", v / 1e3);
	else
		snprintf(out, cap, "%.4g", v);
}

/* Widens [*lo, *hi] when it is one value (or empty). */
static void widen(double *lo, double *hi)
{
	if (!(*hi > *lo)) {
		double d = fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1.0;
		*lo -= d;
		*hi += d;
	}
}

void st_chart_svg(st_html_t *h, const st_chart_t *c)
{
	double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
	for (int s = 0; s < c->nseries; s++)
		for (size_t i = 0; i < c->series[s].n; i++) {
			double x = c->series[s].x[i], y = c->series[s].y[i];
			if (!isfinite(x) || !isfinite(y))
				continue;
			x0 = fmin(x0, x);
			x1 = fmax(x1, x);
			y0 = fmin(y0, y);
			y1 = fmax(y1, y);
		}
	for (int m = 0; m < c->nmarkers; m++)
		if (isfinite(c->markers[m].x) && isfinite(x0)) {
			x0 = fmin(x0, c->markers[m].x);
			x1 = fmax(x1, c->markers[m].x);
		}
	if (!isfinite(x0)) {
		x0 = 0;
		x1 = 1;
		y0 = 0;
		y1 = 1;
	}
	if (c->y_zero && y0 > 0)
		y0 = 0;
	if (c->y_top > 0 && y1 < c->y_top)
		y1 = c->y_top;
	/* All zero on an axis from 0 (nothing dropped): 0 at the bottom. */
	if (c->y_zero && y0 == 0 && !(y1 > 0))
		y1 = 1;
	widen(&x0, &x1);
	widen(&y0, &y1);
	/* Round the y range out to whole ticks. */
	double ys = nice_step(y1 - y0, 5);
	y0 = floor(y0 / ys + 1e-9) * ys;
	y1 = ceil(y1 / ys - 1e-9) * ys;
	double xs = nice_step(x1 - x0, 6);

#define PX(x) (L + ((x) - x0) / (x1 - x0) * (R - L))
#define PY(y) (B - ((y) - y0) / (y1 - y0) * (B - T))

	st_html_printf(h, "<svg class=\"chart\" viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n", W, H);
	st_html_raw(h, "<title>");
	st_html_text(h, c->title);
	st_html_raw(h, "</title>\n<text class=\"title\" x=\"8\" y=\"18\">");
	st_html_text(h, c->title);
	st_html_raw(h, "</text>\n");
	/* Legend: one swatch and name per series, in a row under the title. */
	double lx = L;
	for (int s = 0; s < c->nseries; s++) {
		const char *name = c->series[s].name ? c->series[s].name : "";
		st_html_printf(h, "<rect x=\"%.1f\" y=\"28\" width=\"14\" height=\"8\" fill=\"%s\"/>"
			       "<text class=\"legend\" x=\"%.1f\" y=\"36\">", lx, st_chart_colour(s),
			       lx + 18);
		st_html_text(h, name);
		st_html_raw(h, "</text>\n");
		lx += 30 + 6.5 * (double)strlen(name);
	}
	/* Grid and tick labels. */
	st_html_printf(h, "<rect class=\"plot\" x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\"/>\n",
		       L, T, R - L, B - T);
	char buf[32];
	for (double v = y0; v <= y1 + ys * 1e-6; v += ys) {
		double py = PY(v);
		label(buf, sizeof buf, v, ys);
		st_html_printf(h, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			       "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
			       L, py, R, py, L - 6, py + 4, buf);
	}
	for (double v = ceil(x0 / xs - 1e-9) * xs; v <= x1 + xs * 1e-6; v += xs) {
		double px = PX(v);
		label(buf, sizeof buf, v, xs);
		st_html_printf(h, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			       "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
			       px, T, px, B, px, B + 16, buf);
	}
	st_html_printf(h, "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
		       (L + R) / 2, H - 12);
	st_html_text(h, c->xlabel);
	st_html_printf(h, "</text>\n<text class=\"axis\" transform=\"translate(16 %.1f) rotate(-90)\" "
		       "text-anchor=\"middle\">", (T + B) / 2);
	st_html_text(h, c->ylabel);
	st_html_raw(h, "</text>\n");
	/* Markers under the series, labels staggered over three rows. */
	for (int m = 0; m < c->nmarkers; m++) {
		double px = PX(c->markers[m].x);
		if (!isfinite(px))
			continue;
		/* Near the right edge the label goes left of its line. */
		int left = px > R - 200;
		st_html_printf(h, "<line class=\"marker\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
			       "<text class=\"mlabel\" x=\"%.1f\" y=\"%.1f\"%s>", px, T, px, B,
			       left ? px - 3 : px + 3, T + 11 + 11 * (m % 3),
			       left ? " text-anchor=\"end\"" : "");
		st_html_text(h, c->markers[m].label);
		st_html_raw(h, "</text>\n");
	}
	for (int s = 0; s < c->nseries; s++) {
		const st_chart_series_t *se = &c->series[s];
		const char *col = st_chart_colour(s);
		if (!se->dots) {
			st_html_printf(h, "<path class=\"series\" stroke=\"%s\" d=\"", col);
			/* A long run's thousands of records: every stride-th
			 * point (and the last), at most ~MAX_POINTS per line. */
			size_t stride = se->n > MAX_POINTS ? se->n / MAX_POINTS + 1 : 1;
			int pen = 0;
			for (size_t i = 0; i < se->n; i++) {
				if (i % stride && i + 1 != se->n)
					continue;
				if (!isfinite(se->x[i]) || !isfinite(se->y[i])) {
					pen = 0;
					continue;
				}
				st_html_printf(h, "%s%.1f %.1f", pen ? " L" : " M", PX(se->x[i]),
					       PY(se->y[i]));
				pen = 1;
			}
			st_html_raw(h, "\"><title>");
			st_html_text(h, se->name);
			st_html_raw(h, "</title></path>\n");
		}
		/* Dots where the points are few enough to tell apart. */
		if (se->dots || se->n <= 40)
			for (size_t i = 0; i < se->n; i++)
				if (isfinite(se->x[i]) && isfinite(se->y[i]))
					st_html_printf(h, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" "
						       "fill=\"%s\"/>\n", PX(se->x[i]), PY(se->y[i]),
						       se->dots ? "4.5" : "2.5", col);
	}
	st_html_raw(h, "</svg>\n");
#undef PX
#undef PY
}
