/*
 * timeline.h — a Gantt chart of a trace as inline SVG, for the HTML report
 * (report.h): one row per track (thread), its spans drawn as rectangles
 * coloured by kind, a time axis, and vertical markers (phases, policies).
 * The picture Perfetto would show, without Perfetto: the report must open
 * offline and run no script.
 *
 * Bounded size. A trace holds up to 65536 spans per thread; drawing each
 * would make pages of many megabytes. Each row is cut into ST_TIMELINE_COLS
 * columns; a column takes the colour of the kind of span that covered most
 * of it, shaded by how much of the column it covered (quarters), and
 * neighbouring columns of the same colour become one rectangle. So a row
 * has at most ST_TIMELINE_COLS rectangles, and the page at most
 * ST_TIMELINE_COLS x ST_TIMELINE_ROWS, whatever the trace's length; a span
 * longer than a column is drawn at its length, to a column's precision.
 *
 * Kinds (the cat of the span, runtime/trace.h): "stage" is a stage's work
 * on a batch, and so is a "train worker" span (a train worker's share of
 * its batch); a "wait" named "wait input" is idle, any other "wait" is
 * blocked (a full output queue, a lock); "pass" is a pass over data (the
 * main track); every other cat ("work", "file", "round", "step") is the
 * background work of a thread that is no stage. Nested spans (a train
 * worker's share inside its batch's train span) count towards their own
 * kind; where two kinds tie, the earlier in that list wins.
 *
 * Library-grade: includes only html.h. Not thread-safe: one builder per
 * timeline.
 */
#ifndef ST_REPORT_TIMELINE_H
#define ST_REPORT_TIMELINE_H

#include <stddef.h>

#include "ops/report/chart.h"
#include "ops/report/html.h"

#define ST_TIMELINE_COLS 600   /* columns per row */
#define ST_TIMELINE_ROWS 48    /* rows drawn; further tracks are counted */

enum st_timeline_kind {
	ST_TL_STAGE = 0,   /* cat "stage" */
	ST_TL_BLOCKED,     /* cat "wait", not "wait input" */
	ST_TL_IDLE,        /* "wait input" */
	ST_TL_BACKGROUND,  /* "work", "file", "round", "step", anything else */
	ST_TL_PASS,        /* cat "pass" */
	ST_TL_KINDS
};

struct st__tl_track;

typedef struct st_timeline {
	struct st__tl_track *tr;   /* owned */
	int n, cap;
	size_t spans;
	int oom;                   /* sticky: a span or track was lost */
} st_timeline_t;

/* An empty timeline (caller-owned storage). */
void st_timeline_init(st_timeline_t *t);
/* Frees what the timeline holds. Safe twice. */
void st_timeline_fini(st_timeline_t *t);

/* Names the track tid (a trace's thread_name metadata); copied, cut to 31
 * bytes. A track never named is drawn as "tid N". */
void st_timeline_track(st_timeline_t *t, int tid, const char *name);
/* Adds a span of track tid: [t0, t0 + dur] in seconds, of the kind given
 * by its cat and name (see above). A negative duration counts as 0. */
void st_timeline_span(st_timeline_t *t, int tid, double t0, double dur, const char *cat,
		      const char *name);

/* The kind a span of this cat and name is drawn as. */
enum st_timeline_kind st_timeline_kind(const char *cat, const char *name);

/* Appends one <svg class="timeline"> element: a row per track that has
 * spans (in tid order, at most ST_TIMELINE_ROWS), its rectangles (class
 * "tl-<kind>": tl-stage, tl-blocked, tl-idle, tl-background, tl-pass), a
 * legend, a time axis in seconds and the markers (x in seconds, labels
 * escaped). Returns the rectangles drawn (0: no spans, nothing appended).
 * Nothing of t or markers is kept. */
size_t st_timeline_svg(st_html_t *h, const st_timeline_t *t, const st_chart_marker_t *markers,
		       int nmarkers);

/* The fill colour of a kind at full coverage ("#rrggbb"). */
const char *st_timeline_colour(enum st_timeline_kind k);

#endif
