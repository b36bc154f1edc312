/*
 * trace_read.c — the trace reader of trace_read.h: each line of a Chrome
 * trace-event file that is an event becomes an st_trace_rec_t for the
 * caller's callback; st_trace_summarize is one such callback that adds up
 * the stages' spans.
 *
 * Fields are found by key within the line (st_trace_write's own output is
 * flat apart from args, whose keys do not collide with the event's), so
 * the reader needs no JSON tree. No threads, no shared state.
 */
#include "runtime/trace_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value after "key": in line, as a string (copied into out, escapes
 * reduced to the escaped character) or a number. 1 found, 0 not. */
static int field_str(const char *line, const char *key, char *out, size_t cap)
{
	char pat[40];
	snprintf(pat, sizeof pat, "\"%s\":\"", key);
	const char *p = strstr(line, pat);
	if (!p)
		return 0;
	p += strlen(pat);
	size_t n = 0;
	while (*p && *p != '"' && n + 1 < cap) {
		if (*p == '\\' && p[1])
			p++;
		out[n++] = *p++;
	}
	out[n] = '\0';
	return 1;
}

static int field_num(const char *line, const char *key, double *out)
{
	char pat[40];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *p = strstr(line, pat);
	if (!p)
		return 0;
	char *end;
	*out = strtod(p + strlen(pat), &end);
	return end != p + strlen(pat);
}

int st_trace_read(const char *path, st_trace_rec_fn fn, void *ctx, uint64_t *dropped)
{
	if (dropped)
		*dropped = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	char *line = NULL;
	size_t cap = 0;
	int any = 0, rc = 0;
	st_trace_rec_t *r = malloc(sizeof *r);
	if (!r) {
		fclose(f);
		return -ENOMEM;
	}
	while (rc >= 0 && getline(&line, &cap, f) > 0) {
		char ph[4];
		double v;
		if (dropped && field_num(line, "dropped", &v) && strstr(line, "otherData"))
			*dropped = (uint64_t)v;
		if (!field_str(line, "ph", ph, sizeof ph))
			continue;
		any = 1;
		memset(r, 0, sizeof *r);
		r->ph = ph[0];
		r->dur_us = -1;
		r->batch = -1;
		if (field_num(line, "tid", &v))
			r->tid = (int)v;
		field_num(line, "ts", &r->ts_us);
		field_num(line, "dur", &r->dur_us);
		field_num(line, "value", &r->value);
		if (field_num(line, "batch", &v))
			r->batch = (int64_t)v;
		field_str(line, "cat", r->cat, sizeof r->cat);
		field_str(line, "name", r->name, sizeof r->name);
		field_str(line, "stage", r->stage, sizeof r->stage);
		if (!field_str(line, "detail", r->detail, sizeof r->detail) && r->ph == 'M') {
			/* Metadata: args.name is the second "name" of the line. */
			const char *a = strstr(line, "\"args\":");
			if (a)
				field_str(a, "name", r->detail, sizeof r->detail);
		}
		rc = fn(r, ctx);
	}
	free(r);
	free(line);
	int err = ferror(f) ? -EIO : 0;
	fclose(f);
	if (rc < 0)
		return rc;
	if (err)
		return err;
	return any ? 0 : -EINVAL;
}

/* ---- per-stage sums ------------------------------------------------------ */

/* Distinct (stage, tid) pairs, to count each stage's threads. */
struct seen {
	int stage, tid;
};

struct sum_ctx {
	st_trace_summary_t *out;
	struct seen seen[ST_TRACE_MAX_STAGES * 64];
	int nseen;
	double t_first, t_last;   /* µs: the stages' first and last span */
	uint64_t nspan;
};

static int stage_index(st_trace_summary_t *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->st[i].name, name))
			return i;
	if (s->n == ST_TRACE_MAX_STAGES)
		return -1;
	snprintf(s->st[s->n].name, sizeof s->st[s->n].name, "%s", name);
	return s->n++;
}

static int sum_one(const st_trace_rec_t *r, void *arg)
{
	struct sum_ctx *c = arg;
	c->out->events++;
	if (r->ph != 'X' || !r->cat[0] || !r->stage[0] || !r->name[0] || r->dur_us < 0)
		return 0;
	double dur = r->dur_us, ts = r->ts_us;
	if (!c->nspan || ts < c->t_first)
		c->t_first = ts;
	if (!c->nspan || ts + dur > c->t_last)
		c->t_last = ts + dur;
	c->nspan++;
	int i = stage_index(c->out, r->stage);
	if (i < 0)
		return 0;
	st_trace_stage_sum_t *s = &c->out->st[i];
	if (!strcmp(r->cat, "stage")) {
		s->busy_s += dur / 1e6;
		s->spans++;
		int known = 0;
		for (int k = 0; k < c->nseen && !known; k++)
			known = c->seen[k].stage == i && c->seen[k].tid == r->tid;
		if (!known && c->nseen < (int)(sizeof c->seen / sizeof c->seen[0])) {
			c->seen[c->nseen++] = (struct seen){ i, r->tid };
			s->threads++;
		}
	} else if (!strcmp(r->cat, "wait")) {
		if (!strcmp(r->name, "wait input"))
			s->idle_s += dur / 1e6;
		else if (!strcmp(r->name, "wait output"))
			s->blocked_s += dur / 1e6;
	}
	return 0;
}

int st_trace_summarize(const char *path, st_trace_summary_t *out)
{
	memset(out, 0, sizeof *out);
	out->bottleneck = -1;
	struct sum_ctx *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->out = out;
	int rc = st_trace_read(path, sum_one, c, &out->dropped);
	/* Every stage is measured against the same clock: its threads times
	 * the pipeline's time (first to last stage span). Against its own
	 * threads' traced time instead, a reader that read everything into
	 * the queues early and ended would count as 100% busy. */
	out->wall_s = c->nspan ? (c->t_last - c->t_first) / 1e6 : 0;
	free(c);
	if (rc < 0)
		return rc;
	double best = -1;
	for (int i = 0; i < out->n; i++) {
		const st_trace_stage_sum_t *s = &out->st[i];
		if (!s->spans || s->threads <= 0)
			continue;
		double per_thread = s->busy_s / s->threads;
		if (per_thread > best) {
			best = per_thread;
			out->bottleneck = i;
		}
	}
	return 0;
}
