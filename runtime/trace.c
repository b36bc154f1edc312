/*
 * trace.c — the timeline recorder (trace.h): per-thread rings of
 * fixed-size events, written as Chrome trace-event JSON at the end.
 *
 * Threads: none of its own. Any thread records; st_trace_open, _write,
 * _stats and _close run when no thread records (the caller joins them
 * first: the stage threads at the end of each pass, the pool, network and
 * store threads when the runner is destroyed).
 *
 * Invariants: a buffer (struct buf) is written only by the thread that
 * holds it (held = 1, set under mu); a thread finds its buffer through a
 * thread-local pointer tagged with the recorder's generation, so a stale
 * pointer from an earlier open is never used. When a thread exits, the
 * pthread key's destructor marks its buffer free under mu; the next thread
 * with the same name takes it under mu, so the handover is ordered by the
 * mutex and the two threads never write the same buffer concurrently. The
 * writer reads the buffers after the recording threads were joined (join
 * orders their writes before the reads).
 *
 * Ring: b->n counts every event the thread recorded; the kept ones are the
 * last min(n, cap), at ev[i % cap]. Recording never blocks and never fails:
 * when the ring is full the oldest event goes.
 *
 * One lock only (mu), never held while recording an event.
 */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct buf {
	char name[32];
	int tid;               /* 1-based, in registration order */
	int held;              /* a live thread records into it (under mu) */
	uint64_t n;            /* events recorded */
	st_trace_ev_t *ev;     /* [cap] */
};

struct str {
	struct str *next;
	char s[];
};

static struct {
	pthread_mutex_t mu;    /* guards bufs, n, strs and buffer handover */
	atomic_int on;
	atomic_uint_least64_t gen;  /* bumped by every open */
	uint64_t t0;
	size_t cap;
	struct buf **bufs;
	int n, nalloc;
	struct str *strs;
} T = { .mu = PTHREAD_MUTEX_INITIALIZER };

static _Thread_local struct {
	uint64_t gen;
	struct buf *b;
	char want[32];         /* st_trace_thread_name before the first event */
} tls;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t tkey;

uint64_t st_trace_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Thread exit: the buffer becomes free for the next thread of that name.
 * The key's value is (generation << 16 | index + 1), not a pointer, so a
 * thread that outlives st_trace_close touches nothing freed. */
static void on_thread_exit(void *v)
{
	uintptr_t x = (uintptr_t)v;
	uint64_t gen = (uint64_t)(x >> 16);
	int idx = (int)(x & 0xffff) - 1;
	pthread_mutex_lock(&T.mu);
	if (atomic_load(&T.on) && (atomic_load(&T.gen) & 0xffffffffffffu) == gen &&
	    idx >= 0 && idx < T.n)
		T.bufs[idx]->held = 0;
	pthread_mutex_unlock(&T.mu);
}

static void make_key(void)
{
	if (pthread_key_create(&tkey, on_thread_exit) != 0)
		abort();   /* impossible at this point of a run */
}

int st_trace_open(size_t events_per_thread)
{
	pthread_once(&key_once, make_key);
	pthread_mutex_lock(&T.mu);
	if (atomic_load(&T.on)) {
		pthread_mutex_unlock(&T.mu);
		return -EINVAL;
	}
	T.cap = events_per_thread ? events_per_thread : ST_TRACE_DEFAULT_EVENTS;
	T.t0 = st_trace_now();
	T.n = 0;
	atomic_fetch_add(&T.gen, 1);
	atomic_store(&T.on, 1);
	pthread_mutex_unlock(&T.mu);
	return 0;
}

int st_trace_enabled(void)
{
	return atomic_load_explicit(&T.on, memory_order_relaxed);
}

static const char *intern_locked(const char *s)
{
	for (struct str *p = T.strs; p; p = p->next)
		if (!strcmp(p->s, s))
			return p->s;
	size_t len = strlen(s);
	struct str *p = malloc(sizeof *p + len + 1);
	if (!p)
		return NULL;
	memcpy(p->s, s, len + 1);
	p->next = T.strs;
	T.strs = p;
	return p->s;
}

const char *st_trace_intern(const char *s)
{
	if (!st_trace_enabled() || !s)
		return NULL;
	pthread_mutex_lock(&T.mu);
	const char *r = intern_locked(s);
	pthread_mutex_unlock(&T.mu);
	return r;
}

void st_trace_thread_name(const char *name)
{
	snprintf(tls.want, sizeof tls.want, "%s", name);
}

/* The slow path: the first event of this thread since st_trace_open. Takes
 * a free buffer of the same name or makes one. NULL when out of memory
 * (the thread's events are then lost, not the run). */
static struct buf *take_buffer(uint64_t gen)
{
	char name[32];
	if (tls.want[0])
		snprintf(name, sizeof name, "%s", tls.want);
	else if (pthread_getname_np(pthread_self(), name, sizeof name) != 0 || !name[0])
		snprintf(name, sizeof name, "thread");
	struct buf *b = NULL;
	int idx = -1;
	pthread_mutex_lock(&T.mu);
	for (int i = 0; i < T.n && !b; i++)
		if (!T.bufs[i]->held && !strcmp(T.bufs[i]->name, name))
			b = T.bufs[i], idx = i;
	if (!b && T.n < 0xfffe) {
		if (T.n == T.nalloc) {
			int na = T.nalloc ? 2 * T.nalloc : 16;
			struct buf **nb = realloc(T.bufs, sizeof *nb * (size_t)na);
			if (nb) {
				T.bufs = nb;
				T.nalloc = na;
			}
		}
		if (T.n < T.nalloc && (b = calloc(1, sizeof *b))) {
			/* Untouched pages of the ring cost no memory until used. */
			b->ev = malloc(T.cap * sizeof *b->ev);
			if (!b->ev) {
				free(b);
				b = NULL;
			} else {
				snprintf(b->name, sizeof b->name, "%s", name);
				b->tid = T.n + 1;
				idx = T.n;
				T.bufs[T.n++] = b;
			}
		}
	}
	if (b)
		b->held = 1;
	pthread_mutex_unlock(&T.mu);
	if (b) {
		uintptr_t v = (uintptr_t)((gen & 0xffffffffffffu) << 16) | (uintptr_t)(idx + 1);
		pthread_setspecific(tkey, (void *)v);
	}
	tls.gen = gen;
	tls.b = b;
	return b;
}

/* The caller's next event slot, or NULL when not recording. */
static st_trace_ev_t *slot(void)
{
	/* Acquire pairs with st_trace_open's store: a thread that existed
	 * before the open sees its cap and t0 (free on x86). */
	if (!atomic_load_explicit(&T.on, memory_order_acquire))
		return NULL;
	uint64_t gen = atomic_load_explicit(&T.gen, memory_order_relaxed);
	struct buf *b = tls.gen == gen ? tls.b : take_buffer(gen);
	if (!b)
		return NULL;
	st_trace_ev_t *e = &b->ev[b->n % T.cap];
	b->n++;
	return e;
}

void st_trace_span(const char *cat, const char *name, const char *stage,
		   uint64_t t0, uint64_t t1, int64_t id)
{
	st_trace_ev_t *e = slot();
	if (!e)
		return;
	e->ph = 'X';
	e->ts = t0 > T.t0 ? t0 - T.t0 : 0;
	e->dur = t1 > t0 ? t1 - t0 : 0;
	e->cat = cat;
	e->name = name;
	e->stage = stage;
	e->id = id;
}

void st_trace_counter(const char *name, double value)
{
	st_trace_ev_t *e = slot();
	if (!e)
		return;
	uint64_t now = st_trace_now();
	e->ph = 'C';
	e->ts = now > T.t0 ? now - T.t0 : 0;
	e->dur = 0;
	e->cat = NULL;
	e->name = name;
	e->stage = NULL;
	e->id = -1;
	e->u.value = value;
}

void st_trace_instant(const char *name, const char *fmt, ...)
{
	if (!st_trace_enabled())
		return;
	char text[ST_TRACE_TEXT];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	/* A copy, not interned: each checkpoint's text differs, and a list
	 * search per instant would grow with the run. */
	size_t len = strlen(text);
	struct str *c = malloc(sizeof *c + len + 1);
	if (!c)
		return;
	memcpy(c->s, text, len + 1);
	pthread_mutex_lock(&T.mu);
	c->next = T.strs;
	T.strs = c;
	pthread_mutex_unlock(&T.mu);
	st_trace_ev_t *e = slot();
	if (!e)
		return;   /* c is freed by st_trace_close */
	uint64_t now = st_trace_now();
	e->ph = 'i';
	e->ts = now > T.t0 ? now - T.t0 : 0;
	e->dur = 0;
	e->cat = NULL;
	e->name = name;
	e->stage = NULL;
	e->id = -1;
	e->u.text = c->s;
}

void st_trace_stats(st_trace_stats_t *out)
{
	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&T.mu);
	out->events_per_thread = T.cap;
	if (atomic_load(&T.on))
		for (int i = 0; i < T.n; i++) {
			uint64_t n = T.bufs[i]->n;
			out->threads++;
			out->events += n;
			out->kept += n < T.cap ? n : T.cap;
		}
	pthread_mutex_unlock(&T.mu);
	out->dropped = out->events - out->kept;
}

/* ---- the JSON file ------------------------------------------------------ */

/* Writes s as a JSON string body (quotes, backslashes, control bytes
 * escaped). */
static void put_str(FILE *f, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
}

static void put_us(FILE *f, uint64_t ns)
{
	fprintf(f, "%llu.%03llu", (unsigned long long)(ns / 1000),
		(unsigned long long)(ns % 1000));
}

/* The name of a span's id in its args: a pass's span carries its phase, a
 * file write its file's number, a background round (a compaction pass, a
 * sync round) its count, a policy's applied step its step, every other
 * span its batch. */
static const char *id_arg(const char *cat)
{
	if (!cat)
		return "batch";
	if (!strcmp(cat, "pass"))
		return "phase";
	if (!strcmp(cat, "file"))
		return "file";
	if (!strcmp(cat, "round"))
		return "round";
	if (!strcmp(cat, "step"))
		return "step";
	return "batch";
}

static void put_event(FILE *f, int pid, int tid, const st_trace_ev_t *e)
{
	fprintf(f, ",\n{\"ph\":\"%c\",\"pid\":%d,\"tid\":%d,\"ts\":", e->ph, pid, tid);
	put_us(f, e->ts);
	fputs(",\"name\":\"", f);
	put_str(f, e->name ? e->name : "?");
	fputc('"', f);
	switch (e->ph) {
	case 'X':
		fputs(",\"dur\":", f);
		put_us(f, e->dur);
		fputs(",\"cat\":\"", f);
		put_str(f, e->cat ? e->cat : "span");
		fputs("\",\"args\":{", f);
		if (e->id >= 0)
			fprintf(f, "\"%s\":%lld%s", id_arg(e->cat), (long long)e->id,
				e->stage ? "," : "");
		if (e->stage) {
			fputs("\"stage\":\"", f);
			put_str(f, e->stage);
			fputc('"', f);
		}
		fputs("}}", f);
		break;
	case 'C': {
		/* %.17g round-trips a double; integers print without a point. */
		char v[40];
		snprintf(v, sizeof v, "%.17g", e->u.value);
		if (strchr(v, 'n') || strchr(v, 'i'))   /* nan, inf: not JSON */
			snprintf(v, sizeof v, "0");
		fprintf(f, ",\"args\":{\"value\":%s}}", v);
		break;
	}
	default:
		fputs(",\"s\":\"p\",\"args\":{\"detail\":\"", f);
		put_str(f, e->u.text);
		fputs("\"}}", f);
		break;
	}
}

int st_trace_write(const char *path, int pid, const char *process_name)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -errno;
	st_trace_stats_t s;
	st_trace_stats(&s);
	pthread_mutex_lock(&T.mu);
	fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"recorder\":\"strata\","
		"\"events_per_thread\":%zu,\"events\":%llu,\"dropped\":%llu},\n\"traceEvents\":[\n",
		T.cap, (unsigned long long)s.events, (unsigned long long)s.dropped);
	fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\","
		"\"args\":{\"name\":\"", pid);
	put_str(f, process_name ? process_name : "strata");
	fputs("\"}}", f);
	for (int i = 0; atomic_load(&T.on) && i < T.n; i++) {
		const struct buf *b = T.bufs[i];
		fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
			"\"args\":{\"name\":\"", pid, b->tid);
		put_str(f, b->name);
		fprintf(f, "\"}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":"
			"\"thread_sort_index\",\"args\":{\"sort_index\":%d}}", pid, b->tid, b->tid);
		uint64_t first = b->n > T.cap ? b->n - T.cap : 0;
		for (uint64_t k = first; k < b->n; k++)
			put_event(f, pid, b->tid, &b->ev[k % T.cap]);
	}
	pthread_mutex_unlock(&T.mu);
	fputs("\n]}\n", f);
	int rc = 0;
	if (ferror(f))
		rc = -EIO;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

void st_trace_close(void)
{
	pthread_mutex_lock(&T.mu);
	atomic_store(&T.on, 0);
	for (int i = 0; i < T.n; i++) {
		free(T.bufs[i]->ev);
		free(T.bufs[i]);
	}
	free(T.bufs);
	T.bufs = NULL;
	T.n = T.nalloc = 0;
	while (T.strs) {
		struct str *p = T.strs;
		T.strs = p->next;
		free(p);
	}
	pthread_mutex_unlock(&T.mu);
}
