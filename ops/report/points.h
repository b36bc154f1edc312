/*
 * points.h — a run's metrics file (runlog.h) as points to plot: one per
 * progress record, with the run's time and examples made cumulative across
 * phases, the {"phase": ...} lines as phase ends, and the pipeline's stage
 * names. Every metric plot of the report (report.h) is a set of y values
 * over these points.
 *
 * Why cumulative: each phase's progress records count time from the
 * phase's start (its own progress reporter), while "examples" keeps
 * counting; a log whose examples restart after a phase is offset too, so
 * the x axes never run backwards.
 *
 * Arrays handed out (st_points_metric, st_points_alloc) belong to the
 * points and are freed by st_points_fini. Out of memory is sticky (oom).
 * Library-grade: includes only runlog.h. Not thread-safe per object.
 */
#ifndef ST_REPORT_POINTS_H
#define ST_REPORT_POINTS_H

#include <stddef.h>

#include "ops/report/runlog.h"

#define ST_POINTS_MAX_STAGES 16

typedef struct st_points {
	const st_runlog_t *log;        /* not owned; NULL: no metrics file */
	size_t n;                      /* progress records */
	const st_runlog_rec_t **rec;   /* [n] */
	double *t, *x;                 /* [n] cumulative seconds, examples (NAN: absent) */
	int *seg;                      /* [n] phase segment: phase ends before the point */
	char unit[64];                 /* the headline key, "examples" */
	char rate[80];                 /* its rate key, "examples_per_s" ("" none) */
	size_t nph;                    /* phase ends */
	const st_runlog_rec_t **ph;    /* [nph] the {"phase": ...} records */
	double *ph_t, *ph_x;           /* [nph] where each phase ended */
	int nst;
	char st[ST_POINTS_MAX_STAGES][32];  /* stage names, in order of appearance */
	int oom;
	void **own;
	size_t nown, own_cap;
} st_points_t;

/* Fills p (caller-owned storage) from log (kept by pointer: it must
 * outlive p; NULL gives no points). 0 or -ENOMEM. Free with st_points_fini
 * either way. */
int st_points_init(st_points_t *p, const st_runlog_t *log);
/* Frees every array of p. Safe twice. */
void st_points_fini(st_points_t *p);

/* n zeroed elements of size bytes owned by p; NULL when out of memory. */
void *st_points_alloc(st_points_t *p, size_t n, size_t size);

/* y of key ("metrics.auc") at every point, NAN where absent; NULL when no
 * point has a finite value (or out of memory: p->oom). */
double *st_points_metric(st_points_t *p, const char *key);

/* The value "stages.<i>.<field>" of the stage called name in record e:
 * 1 and *out set, or 0. */
int st_points_stage_num(const st_runlog_rec_t *e, const char *name, const char *field,
			double *out);

/* Metric names (the keys after "metrics.") that start with prefix, in
 * order of first appearance, at most max; pointers into the log. */
int st_points_keys_with(const st_points_t *p, const char *prefix, const char **out, int max);

#endif
