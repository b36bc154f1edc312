/*
 * prom.c — the Prometheus text exposition format (version 0.0.4) of the
 * run's metrics (prom.h). Pure: builds the text from one snapshot of the
 * metrics (st_metrics_foreach_desc) and the stage stats the caller passes.
 *
 * The format wants every series of a family together under one # HELP and
 * one # TYPE line. The metrics come in registration order, and the
 * buckets of one prefix family need not be registered together, so the
 * series are first collected, then written family by family in the order
 * each family first appeared.
 */
#include "ops/metrics/prom.h"

#include "runtime/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAMILY_MAX 128
#define LABELS_MAX 256
#define HELP_MAX 192

struct series {
	char family[FAMILY_MAX];
	char labels[LABELS_MAX];  /* 'stage="read"', or "" */
	char help[HELP_MAX];
	const char *type;         /* a string literal */
	double v;
};

struct coll {
	struct series *s;
	int n, cap;
	int nomem;
};

const char *st_prom_type(const st_metric_desc_t *d)
{
	if (!d)
		return "untyped";
	return d->kind == ST_METRIC_COUNTER ? "counter" : "gauge";
}

static int ends_with(const char *s, size_t len, const char *suf)
{
	size_t n = strlen(suf);
	return len >= n && !memcmp(s + len - n, suf, n);
}

int st_prom_name(const char *name, const st_metric_desc_t *d, char *out, size_t cap,
		 double *scale, const char **bucket)
{
	*scale = 1.0;
	*bucket = NULL;
	size_t len = strlen(name);
	if (d && (d->flags & ST_METRIC_PREFIX)) {
		const char *dot = strrchr(name, '.');
		if (dot && dot[1]) {
			*bucket = dot + 1;
			len = (size_t)(dot - name);
		}
	}
	char base[FAMILY_MAX];
	int n = snprintf(base, sizeof base, "strata_%.*s", (int)len, name);
	if (n < 0 || (size_t)n >= sizeof base)
		return ST_ERANGE;
	for (char *p = base; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_'))
			*p = '_';
	size_t bl = (size_t)n;
	const char *unit = "";
	if (ends_with(base, bl, "_s")) {
		bl -= 2;
		unit = "_seconds";
	} else if (ends_with(base, bl, "_mb")) {
		bl -= 3;
		unit = "_bytes";
		*scale = 1e6;
	}
	int counter = d && d->kind == ST_METRIC_COUNTER;
	if (counter && ends_with(base, bl, "_total") && !*unit)
		bl -= 6;   /* already a _total name: one suffix, not two */
	n = snprintf(out, cap, "%.*s%s%s", (int)bl, base, unit, counter ? "_total" : "");
	return n < 0 || (size_t)n >= cap ? ST_ERANGE : ST_OK;
}

size_t st_prom_escape_label(char *out, size_t cap, const char *s)
{
	size_t len = 0;
	for (; *s; s++) {
		char e[2] = { *s, 0 };
		size_t k = 1;
		if (*s == '\\' || *s == '"' || *s == '\n') {
			e[0] = '\\';
			e[1] = *s == '\n' ? 'n' : *s;
			k = 2;
		}
		for (size_t i = 0; i < k; i++, len++)
			if (len + 1 < cap)
				out[len] = e[i];
	}
	if (cap)
		out[len < cap ? len : cap - 1] = 0;
	return len;
}

static void add(struct coll *c, const char *family, const char *lname, const char *lval,
		const char *type, const char *help, double v)
{
	if (c->nomem)
		return;
	char labels[LABELS_MAX] = "";
	if (lname) {
		char esc[LABELS_MAX - 16];
		if (st_prom_escape_label(esc, sizeof esc, lval) >= sizeof esc)
			return;   /* a label this long is not a metric of ours */
		snprintf(labels, sizeof labels, "%s=\"%s\"", lname, esc);
	}
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->s[i].family, family) && !strcmp(c->s[i].labels, labels))
			return;   /* a.b and a_b: the first one stands */
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 64;
		struct series *s = realloc(c->s, sizeof *s * (size_t)cap);
		if (!s) {
			c->nomem = 1;
			return;
		}
		c->s = s;
		c->cap = cap;
	}
	struct series *s = &c->s[c->n++];
	snprintf(s->family, sizeof s->family, "%s", family);
	memcpy(s->labels, labels, sizeof labels);
	snprintf(s->help, sizeof s->help, "%s", help);
	s->type = type;
	s->v = v;
}

static void on_metric(const char *name, double v, const st_metric_desc_t *d, void *arg)
{
	char family[FAMILY_MAX], help[HELP_MAX];
	double scale;
	const char *bucket;
	if (st_prom_name(name, d, family, sizeof family, &scale, &bucket) < 0)
		return;
	if (d && d->help)
		snprintf(help, sizeof help, "%s", d->help);
	else
		snprintf(help, sizeof help, "The run's metric \"%s\" (not declared in the metrics "
			 "catalog: its kind is unknown).", name);
	add(arg, family, bucket ? "bucket" : NULL, bucket, st_prom_type(d), help, v * scale);
}

/* A growable text buffer; sticky out-of-memory flag. */
struct sbuf {
	char *p;
	size_t len, cap;
	int nomem;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	while (!b->nomem) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = b->cap - b->len;
		int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->nomem = 1;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 4096;
		while (cap - b->len <= (size_t)n)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->nomem = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

/* A sample value: integers exactly, others to 15 digits, and the
 * format's spellings of the non-finite ones. */
static void sb_value(struct sbuf *b, double v)
{
	if (isnan(v))
		sb_printf(b, "NaN");
	else if (isinf(v))
		sb_printf(b, "%sInf", v > 0 ? "+" : "-");
	else if (v == floor(v) && fabs(v) < 9.0e15)
		sb_printf(b, "%.0f", v);
	else
		sb_printf(b, "%.15g", v);
}

/* HELP text: '\\' and newline escaped (quotes are fine there). */
static void sb_help(struct sbuf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\')
			sb_printf(b, "\\\\");
		else if (*s == '\n')
			sb_printf(b, "\\n");
		else
			sb_printf(b, "%c", *s);
	}
}

int st_prom_format(const st_metrics_t *m, const st_stage_stats_t *stages, int nstages,
		   char **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	struct coll c = { 0 };
	if (m)
		st_metrics_foreach_desc(m, on_metric, &c);
	for (int i = 0; i < nstages; i++) {
		const st_stage_stats_t *s = &stages[i];
		const char *nm = s->name ? s->name : "";
		add(&c, "strata_stage_busy_seconds_total", "stage", nm, "counter",
		    "Time the stage's threads spent working on batches, summed over its threads.",
		    (double)s->busy_ns / 1e9);
		add(&c, "strata_stage_wait_seconds_total", "stage", nm, "counter",
		    "Time the stage's threads were blocked on a queue (input empty or output "
		    "full), summed over its threads.", (double)s->wait_ns / 1e9);
		add(&c, "strata_stage_batches_total", "stage", nm, "counter",
		    "Batches the stage handled.", (double)s->items);
		add(&c, "strata_stage_threads", "stage", nm, "gauge",
		    "Threads of the stage.", s->n_threads);
		add(&c, "strata_stage_queue_depth", "stage", nm, "gauge",
		    "Batches waiting in the stage's input queue.", s->queue_depth);
		add(&c, "strata_stage_queue_capacity", "stage", nm, "gauge",
		    "Capacity of the stage's input queue.", s->queue_cap);
	}
	struct sbuf b = { 0 };
	char *done = calloc((size_t)c.n + 1, 1);
	if (c.nomem || !done) {
		free(c.s);
		free(done);
		return ST_ENOMEM;
	}
	for (int i = 0; i < c.n; i++) {
		if (done[i])
			continue;
		sb_printf(&b, "# HELP %s ", c.s[i].family);
		sb_help(&b, c.s[i].help);
		sb_printf(&b, "\n# TYPE %s %s\n", c.s[i].family, c.s[i].type);
		for (int j = i; j < c.n; j++) {
			if (done[j] || strcmp(c.s[j].family, c.s[i].family))
				continue;
			done[j] = 1;
			if (c.s[j].labels[0])
				sb_printf(&b, "%s{%s} ", c.s[j].family, c.s[j].labels);
			else
				sb_printf(&b, "%s ", c.s[j].family);
			sb_value(&b, c.s[j].v);
			sb_printf(&b, "\n");
		}
	}
	if (!b.p)
		sb_printf(&b, "%s", "");   /* an empty exposition is still a string */
	free(c.s);
	free(done);
	if (b.nomem) {
		free(b.p);
		return ST_ENOMEM;
	}
	*out = b.p;
	*len = b.len;
	return ST_OK;
}
