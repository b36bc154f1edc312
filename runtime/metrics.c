/*
 * metrics.c — named job metrics and the progress reporter.
 *
 * Metrics: a fixed table of ST_METRICS_MAX (name, value) pairs under one
 * mutex. Ops update a handful of values per batch, so a mutex is cheap
 * enough and keeps set/add/get exact (a double cannot be added atomically
 * without a CAS loop, which would buy nothing here). Entries are never
 * removed, so registration order is stable.
 *
 * Declarations: a second fixed table, under the same mutex, of what the ops
 * said about their metrics (st_metrics_declare). The runtime knows no
 * metric by name; the reporter lays the progress line out from a snapshot
 * of both tables: the headline counter, the declared metrics by order, then
 * the undeclared ones in registration order. A metric matches the
 * declaration of its exact name, else the one of its longest declared
 * prefix.
 *
 * Progress: one thread, "st-progress-0", wakes every interval on a condition
 * variable with a CLOCK_MONOTONIC deadline (so st_progress_stop is immediate,
 * never a sleep away), takes a snapshot of the metrics and the graph's stage
 * stats, and
 *   - on a terminal, rewrites one status line with '\r' (ended with a newline
 *     by st_progress_stop);
 *   - with a JSON path, appends one JSON object per line; non-finite numbers
 *     are written as null, since JSON has no NaN or Inf.
 * Rates are per interval (delta over delta); the final record, written by
 * st_progress_stop on the caller's thread after the reporter thread was
 * joined, gives whole-run averages and "final":true.
 *
 * Write errors: every write and flush of the JSON file, and its close, is
 * checked. The first failure is kept (wr_err) and logged once with the path;
 * the reporter goes on (a later write may succeed, and metrics are never a
 * reason to stop training), and st_progress_stop returns it so the caller
 * can fail the run: a full disk must not leave a silently truncated file.
 *
 * Meters (st_meter_t): no thread; the caller's updates draw the line
 * directly, rate-limited by the clock, so a meter costs one clock read per
 * update. Whether they draw is one process-wide flag (st_meter_set_tty),
 * set by the command from isatty(2) and its --quiet / rank rules.
 *
 * Locks: st_progress.mu (stop flag) and st_metrics.mu are never held
 * together: the reporter drops mu before it snapshots the metrics.
 */
#include "metrics.h"

#include "err.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NAME_MAX_LEN 64
#define LABEL_MAX_LEN 24
#define FMT_MAX_LEN 16
#define HELP_MAX_LEN 160

struct metric {
	char name[NAME_MAX_LEN];
	double v;
};

struct decl {
	char name[NAME_MAX_LEN];
	char label[LABEL_MAX_LEN];  /* "" = the metric's name */
	char fmt[FMT_MAX_LEN];
	char help[HELP_MAX_LEN];    /* "" = none */
	st_metric_kind_t kind;
	unsigned flags;
	int order;
};

struct st_metrics {
	pthread_mutex_t mu;
	int n;
	int overflow_logged;
	struct metric m[ST_METRICS_MAX];
	int n_decl;
	struct decl d[ST_METRICS_MAX_DECL];
};

int st_metrics_create(st_metrics_t **out)
{
	st_metrics_t *m = calloc(1, sizeof *m);
	*out = NULL;
	if (!m)
		return ST_ENOMEM;
	pthread_mutex_init(&m->mu, NULL);
	*out = m;
	return ST_OK;
}

void st_metrics_destroy(st_metrics_t *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->mu);
	free(m);
}

/* Index of name, creating it when create is set; ST_ENOENT if absent,
 * ST_ENOSPC if the table is full. Called with mu held. */
static int find_locked(st_metrics_t *m, const char *name, int create)
{
	for (int i = 0; i < m->n; i++)
		if (!strcmp(m->m[i].name, name))
			return i;
	if (!create)
		return ST_ENOENT;
	if (m->n == ST_METRICS_MAX) {
		if (!m->overflow_logged) {
			m->overflow_logged = 1;
			st_warn("metrics: more than %d names; \"%s\" and later new names are ignored",
				ST_METRICS_MAX, name);
		}
		return ST_ENOSPC;
	}
	snprintf(m->m[m->n].name, NAME_MAX_LEN, "%s", name);
	m->m[m->n].v = 0.0;
	return m->n++;
}

void st_metrics_set(st_metrics_t *m, const char *name, double v)
{
	pthread_mutex_lock(&m->mu);
	int i = find_locked(m, name, 1);
	if (i >= 0)
		m->m[i].v = v;
	pthread_mutex_unlock(&m->mu);
}

void st_metrics_add(st_metrics_t *m, const char *name, double dv)
{
	pthread_mutex_lock(&m->mu);
	int i = find_locked(m, name, 1);
	if (i >= 0)
		m->m[i].v += dv;
	pthread_mutex_unlock(&m->mu);
}

double st_metrics_get(const st_metrics_t *cm, const char *name, double def)
{
	st_metrics_t *m = (st_metrics_t *)cm; /* the lock is not part of the value */
	pthread_mutex_lock(&m->mu);
	int i = find_locked(m, name, 0);
	double v = i >= 0 ? m->m[i].v : def;
	pthread_mutex_unlock(&m->mu);
	return v;
}

void st_metrics_foreach(const st_metrics_t *cm,
			void (*fn)(const char *name, double v, void *arg), void *arg)
{
	/* Copy first: fn is a callback and must not run under our lock. */
	st_metrics_t *m = (st_metrics_t *)cm;
	struct metric copy[ST_METRICS_MAX];
	pthread_mutex_lock(&m->mu);
	int n = m->n;
	memcpy(copy, m->m, sizeof copy[0] * (size_t)n);
	pthread_mutex_unlock(&m->mu);
	for (int i = 0; i < n; i++)
		fn(copy[i].name, copy[i].v, arg);
}

/* One printf conversion of a double ("%.4f", "%8.3g"), maybe with text
 * around it ("%%" included) but no other conversion. */
static int fmt_ok(const char *f)
{
	int conv = 0;
	for (const char *p = f; *p; p++) {
		if (*p != '%')
			continue;
		if (p[1] == '%') {
			p++;
			continue;
		}
		p++;
		while (*p && strchr("-+ #0", *p))
			p++;
		while (isdigit((unsigned char)*p))
			p++;
		if (*p == '.')
			for (p++; isdigit((unsigned char)*p); p++)
				;
		if (!*p || !strchr("fFeEgGaA", *p) || conv++)
			return 0;
	}
	return conv == 1;
}

int st_metrics_declare(st_metrics_t *m, const st_metric_desc_t *d)
{
	const unsigned known = ST_METRIC_JSON_ONLY | ST_METRIC_FINITE | ST_METRIC_HEADLINE |
			       ST_METRIC_PREFIX;
	if (!d->name || !*d->name || strlen(d->name) >= NAME_MAX_LEN ||
	    (d->label && strlen(d->label) >= LABEL_MAX_LEN) ||
	    (d->fmt && (strlen(d->fmt) >= FMT_MAX_LEN || !fmt_ok(d->fmt))) ||
	    (d->help && strlen(d->help) >= HELP_MAX_LEN) ||
	    (d->flags & ~known) || (unsigned)d->kind > ST_METRIC_RATE)
		return ST_EINVAL;
	if ((d->flags & ST_METRIC_HEADLINE) &&
	    (d->kind != ST_METRIC_COUNTER || (d->flags & (ST_METRIC_JSON_ONLY | ST_METRIC_PREFIX))))
		return ST_EINVAL;
	struct decl nd = { .kind = d->kind, .flags = d->flags, .order = d->order };
	snprintf(nd.name, sizeof nd.name, "%s", d->name);
	snprintf(nd.label, sizeof nd.label, "%s", d->label ? d->label : "");
	snprintf(nd.fmt, sizeof nd.fmt, "%s", d->fmt ? d->fmt : "%.4g");
	snprintf(nd.help, sizeof nd.help, "%s", d->help ? d->help : "");
	int rc = ST_OK;
	pthread_mutex_lock(&m->mu);
	int i = 0;
	while (i < m->n_decl && strcmp(m->d[i].name, nd.name))
		i++;
	for (int k = 0; k < m->n_decl; k++)
		if (k != i && (nd.flags & m->d[k].flags & ST_METRIC_HEADLINE))
			rc = ST_EINVAL;   /* one headline */
	if (rc >= 0 && i == ST_METRICS_MAX_DECL)
		rc = ST_ENOSPC;
	if (rc >= 0) {
		m->d[i] = nd;
		m->n_decl += i == m->n_decl;
	}
	pthread_mutex_unlock(&m->mu);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Progress reporter                                                   */

/* Both tables at one instant (the reporter's view). */
struct snap {
	int n, n_decl;
	struct metric m[ST_METRICS_MAX];
	struct decl d[ST_METRICS_MAX_DECL];
};

static void take_snap(const st_metrics_t *cm, struct snap *s)
{
	st_metrics_t *m = (st_metrics_t *)cm; /* the lock is not part of the value */
	pthread_mutex_lock(&m->mu);
	s->n = m->n;
	s->n_decl = m->n_decl;
	memcpy(s->m, m->m, sizeof s->m[0] * (size_t)m->n);
	memcpy(s->d, m->d, sizeof s->d[0] * (size_t)m->n_decl);
	pthread_mutex_unlock(&m->mu);
}

/* The declaration of name: its exact one, else its longest prefix one. */
static const struct decl *decl_of(const struct snap *s, const char *name)
{
	const struct decl *best = NULL;
	size_t best_len = 0;
	for (int i = 0; i < s->n_decl; i++) {
		const struct decl *d = &s->d[i];
		if (!(d->flags & ST_METRIC_PREFIX)) {
			if (!strcmp(d->name, name))
				return d;
			continue;
		}
		size_t l = strlen(d->name);
		if (l > best_len && !strncmp(d->name, name, l)) {
			best = d;
			best_len = l;
		}
	}
	return best;
}

static const struct decl *headline(const struct snap *s)
{
	for (int i = 0; i < s->n_decl; i++)
		if (s->d[i].flags & ST_METRIC_HEADLINE)
			return &s->d[i];
	return NULL;
}

static double snap_get(const struct snap *s, const char *name, double def)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->m[i].name, name))
			return s->m[i].v;
	return def;
}

void st_metrics_foreach_desc(const st_metrics_t *m,
			     void (*fn)(const char *name, double v, const st_metric_desc_t *d,
					void *arg),
			     void *arg)
{
	struct snap *sn = malloc(sizeof *sn);
	if (!sn)
		return;   /* a reader's view; nothing to report it to */
	take_snap(m, sn);
	for (int i = 0; i < sn->n; i++) {
		const struct decl *dc = decl_of(sn, sn->m[i].name);
		st_metric_desc_t d = { 0 };
		if (dc) {
			d = (st_metric_desc_t){ .name = dc->name, .kind = dc->kind,
						.flags = dc->flags, .order = dc->order,
						.label = dc->label[0] ? dc->label : NULL,
						.fmt = dc->fmt,
						.help = dc->help[0] ? dc->help : NULL };
		}
		fn(sn->m[i].name, sn->m[i].v, dc ? &d : NULL, arg);
	}
	free(sn);
}

struct st_progress {
	st_graph_t *g;
	st_metrics_t *m;
	double interval_s;
	FILE *json;
	char *json_path;
	int wr_err;        /* first error writing the JSON file, 0 if none */
	int tty;
	int nstages;
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
	uint64_t t0_ns;
	/* previous snapshot, for per-interval rates */
	uint64_t prev_ns;
	double prev_examples;
	uint64_t *prev_busy;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A growable text buffer; on allocation failure it just stops growing (a
 * truncated progress line is better than a failed job). */
struct sbuf {
	char *p;
	size_t len, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = b->cap - b->len;
		int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 512;
		while (cap - b->len <= (size_t)n)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return;
		b->p = p;
		b->cap = cap;
	}
}

static void sb_num(struct sbuf *b, double v)
{
	if (!isfinite(v))
		sb_printf(b, "null");
	else if (v == floor(v) && fabs(v) < 9.0e15)
		sb_printf(b, "%.0f", v);
	else
		sb_printf(b, "%.6g", v);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if s does not start
 * one (a stray continuation byte, an overlong form, a surrogate, a value
 * past U+10FFFF, a truncated sequence). s[0] >= 0x80. */
static int utf8_len(const unsigned char *s)
{
	int n;
	uint32_t cp;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1fu;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0fu;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07u;
	else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)   /* also stops at the NUL */
			return 0;
		cp = (cp << 6) | (s[i] & 0x3fu);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

size_t st_json_quote(char *out, size_t cap, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t len = 0;
	char tmp[8];
#define PUT(p, n)                                                                 \
	do {                                                                      \
		for (size_t k_ = 0; k_ < (size_t)(n); k_++, len++)                \
			if (len + 1 < cap)                                        \
				out[len] = (p)[k_];                               \
	} while (0)
	PUT("\"", 1);
	while (*s) {
		unsigned char c = *s;
		if (c == '"' || c == '\\') {
			tmp[0] = '\\';
			tmp[1] = (char)c;
			PUT(tmp, 2);
			s++;
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(tmp, sizeof tmp, "\\u%04x", c);
			PUT(tmp, 6);
			s++;
		} else if (c < 0x80) {
			PUT(s, 1);
			s++;
		} else {
			int n = utf8_len(s);
			if (n) {
				PUT(s, n);
				s += n;
			} else {
				PUT("\\ufffd", 6);
				s++;
			}
		}
	}
	PUT("\"", 1);
#undef PUT
	if (cap)
		out[len < cap ? len : cap - 1] = 0;
	return len;
}

static void sb_str(struct sbuf *b, const char *s)
{
	size_t n = st_json_quote(NULL, 0, s);
	char small[256];
	char *q = n < sizeof small ? small : malloc(n + 1);
	if (!q)
		return;
	st_json_quote(q, n + 1, s);
	sb_printf(b, "%s", q);
	if (q != small)
		free(q);
}

/* "1.20M", "250k", "12" */
static void human(char *out, size_t n, double v)
{
	if (!isfinite(v))
		snprintf(out, n, "-");
	else if (v >= 1e9)
		snprintf(out, n, "%.2fG", v / 1e9);
	else if (v >= 1e6)
		snprintf(out, n, "%.2fM", v / 1e6);
	else if (v >= 1e4)
		snprintf(out, n, "%.0fk", v / 1e3);
	else if (v >= 1e3)
		snprintf(out, n, "%.1fk", v / 1e3);
	else
		snprintf(out, n, "%.0f", v);
}

/* One value on the progress line: "  <label> <value>". */
static void tty_value(struct sbuf *b, const struct decl *d, const char *name, double v)
{
	if (d && (d->flags & ST_METRIC_FINITE) && !isfinite(v))
		return;
	char num[64];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	/* fmt was checked to be one conversion of a double (fmt_ok). */
	snprintf(num, sizeof num, d ? d->fmt : "%.4g", v);
#pragma GCC diagnostic pop
	sb_printf(b, "  %s %s", d && d->label[0] && !(d->flags & ST_METRIC_PREFIX) ? d->label : name,
		  num);
}

/* The declared metrics by order (ties: declaration order), each with the
 * metrics it covers in registration order, then the undeclared ones. */
static void tty_metrics(struct sbuf *b, const struct snap *s)
{
	int idx[ST_METRICS_MAX_DECL], n = 0;
	for (int i = 0; i < s->n_decl; i++)
		if (!(s->d[i].flags & (ST_METRIC_JSON_ONLY | ST_METRIC_HEADLINE)))
			idx[n++] = i;
	for (int i = 1; i < n; i++)   /* stable insertion sort by order */
		for (int j = i; j > 0 && s->d[idx[j - 1]].order > s->d[idx[j]].order; j--) {
			int t = idx[j];
			idx[j] = idx[j - 1];
			idx[j - 1] = t;
		}
	for (int k = 0; k < n; k++) {
		const struct decl *d = &s->d[idx[k]];
		for (int i = 0; i < s->n; i++)
			if (decl_of(s, s->m[i].name) == d)
				tty_value(b, d, s->m[i].name, s->m[i].v);
	}
	for (int i = 0; i < s->n; i++)
		if (!decl_of(s, s->m[i].name))
			tty_value(b, NULL, s->m[i].name, s->m[i].v);
}

/* Keeps and logs the first error writing the JSON file. Called on the
 * reporter thread, or on the stopping one after the reporter was joined. */
static void json_error(st_progress_t *p, int e)
{
	if (p->wr_err)
		return;
	p->wr_err = e > 0 ? -e : ST_EIO;
	st_error("metrics: cannot write %s: %s; the metrics file is incomplete", p->json_path,
		 st_strerror(p->wr_err));
}

/* Takes a snapshot and emits it. final: whole-run rates, "final":true and a
 * newline after the terminal line. Runs on the reporter thread, or on the
 * stopping thread once the reporter is joined, never both at once. */
static void report(st_progress_t *p, int final)
{
	uint64_t now = mono_ns();
	double t = (double)(now - p->t0_ns) / 1e9;
	struct snap *sn = malloc(sizeof *sn);
	if (!sn)
		return;
	take_snap(p->m, sn);
	/* The headline counter (the trainer's examples) and its rate. */
	const struct decl *hd = headline(sn);
	double ex = hd ? snap_get(sn, hd->name, 0.0) : 0.0;
	uint64_t base_ns = final ? p->t0_ns : p->prev_ns;
	double dt = (double)(now - base_ns) / 1e9;
	double dex = ex - (final ? 0.0 : p->prev_examples);
	double rate = dt > 0 ? dex / dt : NAN;
	const char *unit = hd ? (hd->label[0] ? hd->label : hd->name) : "";

	st_stage_stats_t *ss = NULL;
	double *busy = NULL;
	if (p->nstages > 0) {
		ss = calloc((size_t)p->nstages, sizeof *ss);
		busy = calloc((size_t)p->nstages, sizeof *busy);
		if (!ss || !busy) {
			free(ss);
			free(busy);
			free(sn);
			return;
		}
	}
	for (int i = 0; i < p->nstages; i++) {
		st_graph_stage_stats(p->g, i, &ss[i]);
		uint64_t db = ss[i].busy_ns - (final ? 0 : p->prev_busy[i]);
		busy[i] = dt > 0 ? 100.0 * (double)db / (dt * 1e9 * ss[i].n_threads) : NAN;
		p->prev_busy[i] = ss[i].busy_ns;
	}
	p->prev_ns = now;
	p->prev_examples = ex;

	if (p->tty) {
		struct sbuf b = { 0 };
		char hex[16], hrate[16];
		human(hex, sizeof hex, ex);
		human(hrate, sizeof hrate, rate);
		sb_printf(&b, "\r%7.1fs", t);
		if (hd)
			sb_printf(&b, "  %s %s  %s %s/s", hex, unit, hrate, unit);
		tty_metrics(&b, sn);
		if (p->nstages > 0) {
			sb_printf(&b, " |");
			for (int i = 0; i < p->nstages; i++)
				sb_printf(&b, " %s %.0f%%", ss[i].name,
					  isfinite(busy[i]) ? busy[i] : 0.0);
			if (p->nstages > 1) {
				sb_printf(&b, " | q");
				for (int i = 1; i < p->nstages; i++)
					sb_printf(&b, " %d/%d", ss[i].queue_depth,
						  ss[i].queue_cap);
			}
		}
		/* Erase what a longer previous line left behind. */
		sb_printf(&b, "\033[K%s", final ? "\n" : "");
		if (b.p) {
			ssize_t w = write(2, b.p, b.len);
			(void)w;
		}
		free(b.p);
	}

	if (p->json) {
		struct sbuf b = { 0 };
		sb_printf(&b, "{\"t\":");
		sb_num(&b, t);
		if (hd) {
			char key[NAME_MAX_LEN + 8];
			snprintf(key, sizeof key, "%s_per_s", unit);
			sb_printf(&b, ",");
			sb_str(&b, hd->name);
			sb_printf(&b, ":");
			sb_num(&b, ex);
			sb_printf(&b, ",");
			sb_str(&b, key);
			sb_printf(&b, ":");
			sb_num(&b, rate);
		}
		sb_printf(&b, ",\"metrics\":{");
		for (int i = 0; i < sn->n; i++) {
			sb_printf(&b, "%s", i ? "," : "");
			sb_str(&b, sn->m[i].name);
			sb_printf(&b, ":");
			sb_num(&b, sn->m[i].v);
		}
		sb_printf(&b, "},\"stages\":[");
		for (int i = 0; i < p->nstages; i++) {
			sb_printf(&b, "%s{\"name\":", i ? "," : "");
			sb_str(&b, ss[i].name);
			sb_printf(&b, ",\"threads\":%d,\"items\":%llu,\"busy_pct\":",
				  ss[i].n_threads, (unsigned long long)ss[i].items);
			sb_num(&b, busy[i]);
			sb_printf(&b, ",\"wait_s\":");
			sb_num(&b, (double)ss[i].wait_ns / 1e9);
			sb_printf(&b, ",\"queue_depth\":%d,\"queue_cap\":%d}",
				  ss[i].queue_depth, ss[i].queue_cap);
		}
		sb_printf(&b, "]%s}\n", final ? ",\"final\":true" : "");
		/* Readers (strata report, tail -f) see whole lines: flushed
		 * each time. A line lost to out of memory is an error too. */
		if (!b.p || fwrite(b.p, 1, b.len, p->json) != b.len)
			json_error(p, b.p ? errno : ENOMEM);
		else if (fflush(p->json) != 0)
			json_error(p, errno);
		free(b.p);
	}
	free(ss);
	free(busy);
	free(sn);
}

/* ------------------------------------------------------------------ */
/* Meters (progress of other long commands)                            */

static atomic_int meter_tty = -1;   /* -1: not set, isatty(2) */

void st_meter_set_tty(int on)
{
	atomic_store(&meter_tty, on ? 1 : 0);
}

int st_meter_tty(void)
{
	int v = atomic_load(&meter_tty);
	return v < 0 ? isatty(2) : v;
}

void st_meter_init(st_meter_t *m, const char *what, const char *unit)
{
	memset(m, 0, sizeof *m);
	snprintf(m->what, sizeof m->what, "%s", what);
	snprintf(m->unit, sizeof m->unit, "%s", unit);
	m->on = st_meter_tty();
	m->t0_ns = mono_ns();
}

static void meter_draw(st_meter_t *m, uint64_t now)
{
	double s = (double)(now - m->t0_ns) / 1e9;
	char rate[16];
	human(rate, sizeof rate, s > 0 ? (double)m->done / s : NAN);
	struct sbuf b = { 0 };
	if (m->total > 0)
		sb_printf(&b, "\r%s: %5.1f%% (%lld / %lld %s)  %s %s/s\033[K", m->what,
			  100.0 * (double)m->done / (double)m->total, (long long)m->done,
			  (long long)m->total, m->unit, rate, m->unit);
	else
		sb_printf(&b, "\r%s: %lld %s  %s %s/s\033[K", m->what, (long long)m->done,
			  m->unit, rate, m->unit);
	if (b.p) {
		ssize_t w = write(2, b.p, b.len);
		(void)w;
	}
	free(b.p);
	m->drawn = 1;
	m->last_ns = now;
}

void st_meter_update(st_meter_t *m, int64_t done, int64_t total)
{
	m->done = done;
	m->total = total;
	if (!m->on)
		return;
	uint64_t now = mono_ns();
	/* Nothing for the first 0.25 s, then at most ten lines a second. */
	if (now - m->t0_ns < 250000000u || (m->drawn && now - m->last_ns < 100000000u))
		return;
	meter_draw(m, now);
}

void st_meter_fini(st_meter_t *m)
{
	if (!m->on || !m->drawn)
		return;
	meter_draw(m, mono_ns());
	ssize_t w = write(2, "\n", 1);
	(void)w;
	m->drawn = 0;
	m->on = 0;
}

static void *progress_main(void *arg)
{
	st_progress_t *p = arg;
	pthread_setname_np(pthread_self(), "st-progress-0");
	uint64_t step = (uint64_t)(p->interval_s * 1e9);
	uint64_t next = p->t0_ns + step;
	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		struct timespec dl = { .tv_sec = (time_t)(next / 1000000000u),
				       .tv_nsec = (long)(next % 1000000000u) };
		int rc = pthread_cond_timedwait(&p->cv, &p->mu, &dl);
		if (p->stop)
			break;
		if (rc != ETIMEDOUT)
			continue;  /* spurious wakeup: keep the same deadline */
		pthread_mutex_unlock(&p->mu);
		report(p, 0);
		pthread_mutex_lock(&p->mu);
		/* Fixed ticks that never drift; skip ticks missed while slow. */
		uint64_t now = mono_ns();
		do
			next += step;
		while (next <= now);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int st_progress_start(st_progress_t **out, st_graph_t *g, st_metrics_t *m,
		      double interval_s, const char *json_path, int tty)
{
	*out = NULL;
	if (!m || !(interval_s > 0) || interval_s > 1e6)
		return ST_EINVAL;
	st_progress_t *p = calloc(1, sizeof *p);
	if (!p)
		return ST_ENOMEM;
	p->g = g;
	p->m = m;
	p->interval_s = interval_s;
	p->tty = tty;
	p->nstages = g ? st_graph_nstages(g) : 0;
	p->prev_busy = calloc((size_t)p->nstages + 1, sizeof *p->prev_busy);
	if (!p->prev_busy) {
		free(p);
		return ST_ENOMEM;
	}
	if (json_path) {
		p->json = fopen(json_path, "w");
		if (!p->json || !(p->json_path = strdup(json_path))) {
			int e = errno;
			st_error("metrics: cannot open %s for writing: %s", json_path,
				 strerror(e));
			if (p->json)
				fclose(p->json);
			free(p->prev_busy);
			free(p);
			return ST_EIO;
		}
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	p->t0_ns = p->prev_ns = mono_ns();
	int rc = pthread_create(&p->tid, NULL, progress_main, p);
	if (rc != 0) {
		if (p->json)
			fclose(p->json);
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p->json_path);
		free(p->prev_busy);
		free(p);
		return -rc;
	}
	*out = p;
	return ST_OK;
}

int st_progress_stop(st_progress_t *p)
{
	if (!p)
		return ST_OK;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->tid, NULL);
	report(p, 1);
	/* fclose flushes what is left and reports a failed flush or close. */
	if (p->json && fclose(p->json) != 0)
		json_error(p, errno);
	int rc = p->wr_err;
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->json_path);
	free(p->prev_busy);
	free(p);
	return rc;
}
