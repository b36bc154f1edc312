/*
 * points.c — the points of points.h: one pass over the metrics records
 * that keeps the progress records, offsets time (and, if they restart,
 * examples) at each phase end, and collects the stage names; lookups by
 * key on the records for the series.
 */
#include "ops/report/points.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *st_points_alloc(st_points_t *p, size_t n, size_t size)
{
	if (p->oom)
		return NULL;
	if (p->nown == p->own_cap) {
		size_t cap = p->own_cap ? 2 * p->own_cap : 64;
		void **a = realloc(p->own, cap * sizeof *a);
		if (!a) {
			p->oom = 1;
			return NULL;
		}
		p->own = a;
		p->own_cap = cap;
	}
	void *q = calloc(n ? n : 1, size);
	if (!q) {
		p->oom = 1;
		return NULL;
	}
	p->own[p->nown++] = q;
	return q;
}

void st_points_fini(st_points_t *p)
{
	for (size_t i = 0; i < p->nown; i++)
		free(p->own[i]);
	free(p->own);
	memset(p, 0, sizeof *p);
}

/* The headline key ("examples") and the rate key ("examples_per_s") of the
 * first progress record: top-level numbers other than "t". */
static void find_units(st_points_t *r)
{
	for (size_t i = 0; i < r->n && !r->unit[0]; i++)
		for (size_t k = 0; k < r->rec[i]->n; k++) {
			const st_runlog_kv_t *kv = &r->rec[i]->kv[k];
			size_t len = strlen(kv->key);
			if (kv->str || strchr(kv->key, '.') || !strcmp(kv->key, "t") ||
			    !strcmp(kv->key, "final"))
				continue;
			if (len > 6 && !strcmp(kv->key + len - 6, "_per_s"))
				snprintf(r->rate, sizeof r->rate, "%s", kv->key);
			else if (!r->unit[0])
				snprintf(r->unit, sizeof r->unit, "%s", kv->key);
		}
}

int st_points_init(st_points_t *r, const st_runlog_t *log)
{
	memset(r, 0, sizeof *r);
	r->log = log;
	size_t n = log ? log->n : 0;
	r->rec = st_points_alloc(r, n, sizeof *r->rec);
	r->ph = st_points_alloc(r, n, sizeof *r->ph);
	r->t = st_points_alloc(r, n, sizeof *r->t);
	r->x = st_points_alloc(r, n, sizeof *r->x);
	r->seg = st_points_alloc(r, n, sizeof *r->seg);
	r->ph_t = st_points_alloc(r, n, sizeof *r->ph_t);
	r->ph_x = st_points_alloc(r, n, sizeof *r->ph_x);
	if (r->oom)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (!log->rec[i].is_phase)
			r->rec[r->n++] = &log->rec[i];
	find_units(r);
	double t_off = 0, last_t = 0, x_off = 0, last_x = 0;
	int after_phase = 0;
	size_t j = 0;
	for (size_t i = 0; i < n; i++) {
		const st_runlog_rec_t *e = &log->rec[i];
		if (e->is_phase) {
			r->ph[r->nph] = e;
			r->ph_t[r->nph] = t_off + last_t;
			r->ph_x[r->nph] = last_x;
			r->nph++;
			t_off += last_t;
			last_t = 0;
			after_phase = 1;
			continue;
		}
		double t = NAN, ex = NAN;
		st_runlog_num(e, "t", &t);
		if (r->unit[0])
			st_runlog_num(e, r->unit, &ex);
		if (after_phase && isfinite(ex) && ex + x_off < last_x)
			x_off = last_x;
		after_phase = 0;
		r->t[j] = t_off + t;
		r->x[j] = ex + x_off;
		r->seg[j] = (int)r->nph;
		if (isfinite(t))
			last_t = t;
		if (isfinite(ex))
			last_x = ex + x_off;
		j++;
	}
	/* Stage names in order of first appearance. */
	for (size_t i = 0; i < r->n; i++)
		for (int s = 0; s < ST_POINTS_MAX_STAGES; s++) {
			char key[48];
			snprintf(key, sizeof key, "stages.%d.name", s);
			const char *name = st_runlog_str(r->rec[i], key);
			if (!name)
				break;
			int k = 0;
			while (k < r->nst && strcmp(r->st[k], name))
				k++;
			if (k == r->nst && r->nst < ST_POINTS_MAX_STAGES)
				snprintf(r->st[r->nst++], sizeof r->st[0], "%s", name);
		}
	return 0;
}

/* y of key at every point (NAN where absent); NULL when no point has it. */
double *st_points_metric(st_points_t *p, const char *key)
{
	double *y = st_points_alloc(p, p->n, sizeof *y);
	size_t finite = 0;
	for (size_t j = 0; y && j < p->n; j++) {
		y[j] = NAN;
		finite += st_runlog_num(p->rec[j], key, &y[j]);
	}
	return finite ? y : NULL;
}

/* The key "stages.<i>.<field>" of the stage called name in record e. */
int st_points_stage_num(const st_runlog_rec_t *e, const char *name, const char *field,
			double *out)
{
	for (int s = 0; s < ST_POINTS_MAX_STAGES; s++) {
		char key[64];
		snprintf(key, sizeof key, "stages.%d.name", s);
		const char *n = st_runlog_str(e, key);
		if (!n)
			return 0;
		if (!strcmp(n, name)) {
			snprintf(key, sizeof key, "stages.%d.%s", s, field);
			return st_runlog_num(e, key, out);
		}
	}
	return 0;
}

/* Metric keys (without "metrics.") that start with prefix, in order of
 * first appearance, at most max. */
int st_points_keys_with(const st_points_t *p, const char *prefix, const char **out, int max)
{
	int n = 0;
	size_t pl = strlen("metrics."), ql = strlen(prefix);
	for (size_t j = 0; j < p->n; j++)
		for (size_t k = 0; k < p->rec[j]->n; k++) {
			const char *key = p->rec[j]->kv[k].key;
			if (strncmp(key, "metrics.", pl) || strncmp(key + pl, prefix, ql))
				continue;
			int seen = 0;
			for (int i = 0; i < n && !seen; i++)
				seen = !strcmp(out[i], key + pl);
			if (!seen && n < max)
				out[n++] = key + pl;
		}
	return n;
}
