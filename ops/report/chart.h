/*
 * chart.h — a line chart as inline SVG, for the HTML report (report.h):
 * axes with round ticks, several series in distinct colours with a legend,
 * and vertical markers (phase starts, policy switches) with labels.
 *
 * Every string of a chart (title, axis labels, series and marker names) is
 * HTML-escaped here; the caller passes them as read from the inputs.
 *
 * Library-grade: includes only html.h. Thread-safe: no shared state.
 */
#ifndef ST_REPORT_CHART_H
#define ST_REPORT_CHART_H

#include <stddef.h>

#include "ops/report/html.h"

typedef struct st_chart_series {
	const char *name;
	const double *x, *y;   /* n points in x order; a non-finite y breaks the line */
	size_t n;
	int dots;              /* 1: points only, no line (a few values, e.g. per phase) */
} st_chart_series_t;

typedef struct st_chart_marker {
	double x;
	const char *label;
} st_chart_marker_t;

typedef struct st_chart {
	const char *title, *xlabel, *ylabel;
	const st_chart_series_t *series;
	int nseries;
	const st_chart_marker_t *markers;
	int nmarkers;
	int y_zero;            /* 1: the y axis starts at 0 (counts, rates) */
	double y_top;          /* > 0: the y axis ends there at least (100 for %) */
} st_chart_t;

/* Finite points of c's series: 0 means there is nothing to draw. */
size_t st_chart_points(const st_chart_t *c);

/* Appends one <svg class="chart"> element drawing c (ownership of c stays
 * with the caller; nothing is kept). Each series is a <path
 * class="series"> (dots: <circle> elements), each marker a dashed <line
 * class="marker">. A chart without points draws its axes only: callers
 * say "not recorded" instead (st_chart_points). */
void st_chart_svg(st_html_t *h, const st_chart_t *c);

/* The colour of series i (the legend's and the tables' colour). */
const char *st_chart_colour(int i);

#endif
