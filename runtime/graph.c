/*
 * graph.c — the pipeline engine: stages joined by bounded queues.
 *
 * Threads: st_graph_run starts n_threads threads per stage, named
 * "st-<stage>-<n>" and pinned to desc.cpus[n] when >= 0, and joins them all
 * before returning. Stage 0 calls ops->produce until it returns 0 (end of
 * data) or an error; stage i > 0 pops from its input queue, calls
 * ops->process and pushes *out into stage i+1's input queue (the last stage's
 * *out is freed by the engine).
 *
 * Shutdown: each stage has an atomic count of live threads; the thread that
 * brings it to zero runs ops->finish (unless canceled) and then closes the
 * next stage's input queue, so the next stage drains what is left and sees
 * ST_EPIPE. Close propagates down the chain this way, stage by stage.
 *
 * Errors and cancel: the first error (st_stage_fail, an op returning < 0
 * without it, st_graph_cancel) is recorded under mu; later ones are dropped.
 * Then every queue is canceled, which wakes every blocked thread; threads see
 * ST_ECANCELED and return. After joining, st_graph_run drains every queue and
 * frees what is left, so each batch is freed exactly once: by the op that
 * consumed it, by the engine after the last stage, after a failed push, after
 * a failed op, or in the final drain.
 *
 * Locks: mu (the error record) is never held while taking a queue's lock or
 * calling an op; queues take only their own lock. So no lock order arises.
 *
 * Stage metrics are relaxed atomics; the wait time of a stage is the time its
 * threads were blocked popping its input queue plus pushing into its output
 * queue, as measured by the queues themselves.
 *
 * Trace (runtime/trace.h, when recording is on at st_graph_add_stage): each
 * op call is a span of cat "stage" with the batch's seq; a pop or push that
 * took longer than TRACE_WAIT_NS is a span of cat "wait" ("wait input":
 * the stage idles on an empty input queue; "wait output": it is blocked by
 * a full output queue), so that `strata trace summarize` can split each
 * stage's time into busy, idle and blocked; after each pop the consumer
 * records its input queue's depth as the counter "queue <stage>".
 */
#include "graph.h"
#include "graph_internal.h"

#include "err.h"
#include "queue.h"
#include "trace.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct stage;

struct worker {
	st_stage_ctx_t ctx;
	struct stage *st;
	pthread_t tid;
	int started;
};

struct stage {
	st_stage_desc_t d;
	char *name;              /* owned copy; d.name points here */
	int idx;
	st_queue_t *in;          /* NULL for the source */
	struct stage *next;      /* NULL for the last stage */
	atomic_int live;         /* threads of this stage still running */
	atomic_uint_least64_t items, busy_ns;
	const char *tr_stage;    /* interned names; NULL when not tracing */
	const char *tr_queue;
	struct worker w[ST_MAX_STAGE_THREADS];
};

/* A pop or push that takes less than this did not block (an uncontended
 * lock costs ~100 ns; a wake-up from a condition variable several us), so it
 * is not recorded as a wait: the trace stays small on a pipeline that never
 * stalls. */
#define TRACE_WAIT_NS 2000

struct st_graph {
	struct stage **stages;
	int n, cap;
	int ran;
	atomic_int canceled;
	atomic_int pin_warned;
	pthread_mutex_t mu;      /* guards err and msg */
	int err;
	char msg[1024];
	void (*free_fn)(st_batch_t *b);
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int st_graph_create(st_graph_t **out)
{
	st_graph_t *g = calloc(1, sizeof *g);
	*out = NULL;
	if (!g)
		return ST_ENOMEM;
	pthread_mutex_init(&g->mu, NULL);
	g->free_fn = st_batch_destroy;
	*out = g;
	return ST_OK;
}

void st__graph_set_free_hook(st_graph_t *g, void (*fn)(st_batch_t *b))
{
	g->free_fn = fn ? fn : st_batch_destroy;
}

int st_graph_add_stage(st_graph_t *g, const st_stage_desc_t *desc)
{
	if (g->ran || !desc || !desc->ops || !desc->name || !desc->name[0] ||
	    desc->n_threads < 1 || desc->n_threads > ST_MAX_STAGE_THREADS)
		return ST_EINVAL;
	if (g->n == 0 ? !desc->ops->produce : !desc->ops->process)
		return ST_EINVAL;
	if (g->n > 0 && desc->queue_cap < 1)
		return ST_EINVAL;
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 4;
		struct stage **s = realloc(g->stages, sizeof *s * (size_t)cap);
		if (!s)
			return ST_ENOMEM;
		g->stages = s;
		g->cap = cap;
	}
	struct stage *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->d = *desc;
	s->name = strdup(desc->name);
	if (!s->name) {
		free(s);
		return ST_ENOMEM;
	}
	s->d.name = s->name;
	s->idx = g->n;
	if (st_trace_enabled()) {
		char q[64];
		snprintf(q, sizeof q, "queue %s", s->name);
		s->tr_stage = st_trace_intern(s->name);
		s->tr_queue = st_trace_intern(q);
	}
	if (g->n > 0) {
		/* Queues exist from here on, so st_graph_cancel is safe at any
		 * time, even before st_graph_run. */
		int rc = st_queue_create(&s->in, (size_t)desc->queue_cap);
		if (rc < 0) {
			free(s->name);
			free(s);
			return rc;
		}
		g->stages[g->n - 1]->next = s;
	}
	g->stages[g->n++] = s;
	return ST_OK;
}

static void cancel_queues(st_graph_t *g)
{
	atomic_store(&g->canceled, 1);
	for (int i = 0; i < g->n; i++)
		if (g->stages[i]->in)
			st_queue_cancel(g->stages[i]->in);
}

/* Records the first error (message already formatted) and cancels. */
static void record_error(st_graph_t *g, int code, const char *msg)
{
	if (code >= 0)
		code = ST_ESTAGE;
	pthread_mutex_lock(&g->mu);
	int first = g->err == 0;
	if (first) {
		g->err = code;
		snprintf(g->msg, sizeof g->msg, "%s", msg);
	}
	pthread_mutex_unlock(&g->mu);
	if (first)
		st_trace_instant(code == ST_ECANCELED ? "cancel" : "error", "%s", msg);
	cancel_queues(g);
}

static void stage_error(st_graph_t *g, const char *stage, int code,
			const char *fmt, va_list ap)
{
	char text[900], msg[1024];
	vsnprintf(text, sizeof text, fmt, ap);
	snprintf(msg, sizeof msg, "stage %s: %s", stage, text);
	record_error(g, code, msg);
}

static void stage_errorf(st_graph_t *g, const char *stage, int code,
			 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void stage_errorf(st_graph_t *g, const char *stage, int code,
			 const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	stage_error(g, stage, code, fmt, ap);
	va_end(ap);
}

int st_stage_fail(st_stage_ctx_t *ctx, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	stage_error(ctx->graph, ctx->stage, code, fmt, ap);
	va_end(ap);
	return code;
}

void st_graph_cancel(st_graph_t *g, const char *why)
{
	char msg[1024];
	snprintf(msg, sizeof msg, "canceled: %s", why ? why : "by request");
	record_error(g, ST_ECANCELED, msg);
}

int st_graph_canceled(const st_graph_t *g)
{
	return atomic_load(&((st_graph_t *)g)->canceled);
}

const char *st_graph_error(const st_graph_t *g)
{
	st_graph_t *mg = (st_graph_t *)g;
	pthread_mutex_lock(&mg->mu);
	/* msg is written once, together with err, and never changes after, so
	 * the pointer stays valid until st_graph_destroy. */
	const char *m = mg->err ? mg->msg : NULL;
	pthread_mutex_unlock(&mg->mu);
	return m;
}

/* Hands b to the next stage, or frees it after the last one. Returns 0 when
 * the thread must stop (the graph was canceled; b has been freed). */
static int deliver(st_graph_t *g, struct stage *s, st_batch_t *b)
{
	if (!s->next) {
		g->free_fn(b);
		return 1;
	}
	/* After a successful push b belongs to the next stage: read it first. */
	const int64_t seq = (int64_t)b->seq;
	const uint64_t t0 = s->tr_stage ? now_ns() : 0;
	int rc = st_queue_push(s->next->in, b);
	if (s->tr_stage) {
		uint64_t t1 = now_ns();
		if (t1 - t0 >= TRACE_WAIT_NS)
			st_trace_span("wait", "wait output", s->tr_stage, t0, t1, seq);
	}
	if (rc == ST_OK)
		return 1;
	/* Not taken by the queue: still ours. EPIPE cannot happen (the next
	 * queue closes only after this stage's last thread), so it is a cancel. */
	g->free_fn(b);
	return 0;
}

static void run_source(struct worker *w)
{
	struct stage *s = w->st;
	st_graph_t *g = w->ctx.graph;
	while (!atomic_load_explicit(&g->canceled, memory_order_relaxed)) {
		st_batch_t *b = NULL;
		uint64_t t0 = now_ns();
		int rc = s->d.ops->produce(s->d.state, &w->ctx, &b);
		uint64_t t1 = now_ns();
		atomic_fetch_add_explicit(&s->busy_ns, t1 - t0, memory_order_relaxed);
		if (s->tr_stage && rc > 0 && b)
			st_trace_span("stage", s->tr_stage, s->tr_stage, t0, t1, (int64_t)b->seq);
		if (rc < 0) {
			stage_errorf(g, s->name, rc, "produce failed: %s", st_strerror(rc));
			if (b)
				g->free_fn(b);
			return;
		}
		if (rc == 0) {
			if (b)  /* end of data with a batch: keep it leak-free */
				g->free_fn(b);
			return;
		}
		if (!b)
			continue;
		atomic_fetch_add_explicit(&s->items, 1, memory_order_relaxed);
		if (!deliver(g, s, b))
			return;
	}
}

static void run_stage(struct worker *w)
{
	struct stage *s = w->st;
	st_graph_t *g = w->ctx.graph;
	for (;;) {
		void *p;
		const uint64_t tw = s->tr_stage ? now_ns() : 0;
		/* EPIPE: upstream finished and we drained; ECANCELED: stop. */
		int prc = st_queue_pop(s->in, &p);
		uint64_t t0 = now_ns();
		int64_t seq = prc == ST_OK ? (int64_t)((st_batch_t *)p)->seq : -1;
		if (s->tr_stage) {
			if (t0 - tw >= TRACE_WAIT_NS)
				st_trace_span("wait", "wait input", s->tr_stage, tw, t0, seq);
			if (prc == ST_OK)
				st_trace_counter(s->tr_queue, (double)st_queue_len(s->in));
		}
		if (prc != ST_OK)
			return;
		st_batch_t *out = NULL;
		int rc = s->d.ops->process(s->d.state, &w->ctx, p, &out);
		uint64_t t1 = now_ns();
		atomic_fetch_add_explicit(&s->busy_ns, t1 - t0, memory_order_relaxed);
		if (s->tr_stage)
			st_trace_span("stage", s->tr_stage, s->tr_stage, t0, t1, seq);
		atomic_fetch_add_explicit(&s->items, 1, memory_order_relaxed);
		if (rc < 0) {
			stage_errorf(g, s->name, rc, "process failed: %s", st_strerror(rc));
			if (out)
				g->free_fn(out);
			return;
		}
		if (out && !deliver(g, s, out))
			return;
	}
}

static void name_thread(const char *stage, int n)
{
	/* Linux allows 15 characters; cut the stage name, not the index, so
	 * that threads of one stage stay distinguishable in top/gdb. */
	char suffix[16], name[16];
	snprintf(suffix, sizeof suffix, "-%d", n);
	size_t ls = strlen(suffix);
	size_t sl = strnlen(stage, 15 - 3 - ls);
	memcpy(name, "st-", 3);
	memcpy(name + 3, stage, sl);
	memcpy(name + 3 + sl, suffix, ls + 1);
	pthread_setname_np(pthread_self(), name);
}

static void pin_thread(st_graph_t *g, int cpu)
{
	if (cpu < 0)
		return;
	int rc = EINVAL;
	if (cpu < CPU_SETSIZE) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
	}
	/* A plan made for another machine names cpus this one lacks; running
	 * unpinned is correct, just slower, so say it once, quietly. */
	if (rc != 0 && atomic_exchange(&g->pin_warned, 1) == 0)
		st_debug("cannot pin a thread to cpu %d (%s); running unpinned",
			 cpu, st_strerror(-rc));
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct stage *s = w->st;
	st_graph_t *g = w->ctx.graph;
	const st_stage_ops_t *ops = s->d.ops;

	name_thread(s->name, w->ctx.thread_idx);
	pin_thread(g, s->d.cpus[w->ctx.thread_idx]);

	int rc = 0;
	if (ops->thread_start) {
		rc = ops->thread_start(s->d.state, &w->ctx);
		if (rc < 0)
			stage_errorf(g, s->name, rc, "thread start failed: %s",
				     st_strerror(rc));
	}
	if (rc >= 0) {
		if (s->idx == 0)
			run_source(w);
		else
			run_stage(w);
		if (ops->thread_stop)
			ops->thread_stop(s->d.state, &w->ctx);
	}

	if (atomic_fetch_sub(&s->live, 1) == 1) {
		if (ops->finish && !atomic_load(&g->canceled)) {
			rc = ops->finish(s->d.state, &w->ctx);
			if (rc < 0)
				stage_errorf(g, s->name, rc, "finish failed: %s",
					     st_strerror(rc));
		}
		if (s->next)
			st_queue_close(s->next->in);
	}
	return NULL;
}

static void free_item(void *item, void *arg)
{
	st_graph_t *g = arg;
	g->free_fn(item);
}

int st_graph_run(st_graph_t *g)
{
	if (g->ran || g->n == 0)
		return ST_EINVAL;
	g->ran = 1;
	for (int i = 0; i < g->n; i++)
		atomic_store(&g->stages[i]->live, g->stages[i]->d.n_threads);

	/* Start downstream stages first so that the source never fills a queue
	 * before its consumer exists (harmless either way, but tidier traces). */
	for (int i = g->n - 1; i >= 0 && !atomic_load(&g->canceled); i--) {
		struct stage *s = g->stages[i];
		for (int t = 0; t < s->d.n_threads; t++) {
			struct worker *w = &s->w[t];
			w->st = s;
			w->ctx = (st_stage_ctx_t){ .stage = s->name, .thread_idx = t,
						   .n_threads = s->d.n_threads, .graph = g };
			int rc = pthread_create(&w->tid, NULL, worker_main, w);
			if (rc != 0) {
				/* Threads never started never close their
				 * output, so the graph must be canceled. */
				stage_errorf(g, s->name, -rc, "cannot start thread %d: %s",
					     t, st_strerror(-rc));
				break;
			}
			w->started = 1;
		}
	}

	for (int i = 0; i < g->n; i++)
		for (int t = 0; t < g->stages[i]->d.n_threads; t++)
			if (g->stages[i]->w[t].started)
				pthread_join(g->stages[i]->w[t].tid, NULL);

	/* Every thread is gone: whatever is still queued is ours to free. */
	for (int i = 0; i < g->n; i++)
		if (g->stages[i]->in)
			st_queue_drain(g->stages[i]->in, free_item, g);

	pthread_mutex_lock(&g->mu);
	int err = g->err;
	pthread_mutex_unlock(&g->mu);
	return err;
}

int st_graph_nstages(const st_graph_t *g)
{
	return g->n;
}

void st_graph_stage_stats(const st_graph_t *g, int i, st_stage_stats_t *out)
{
	struct stage *s = g->stages[i];
	memset(out, 0, sizeof *out);
	out->name = s->name;
	out->n_threads = s->d.n_threads;
	out->items = atomic_load_explicit(&s->items, memory_order_relaxed);
	out->busy_ns = atomic_load_explicit(&s->busy_ns, memory_order_relaxed);
	st_queue_stats_t qs;
	if (s->in) {
		st_queue_stats(s->in, &qs);
		out->wait_ns += qs.pop_wait_ns;
		out->queue_depth = (int)qs.len;
		out->queue_cap = (int)qs.cap;
	}
	if (s->next) {
		st_queue_stats(s->next->in, &qs);
		out->wait_ns += qs.push_wait_ns;
	}
}

void st_graph_print(const st_graph_t *g, FILE *f)
{
	fprintf(f, "graph: %d stage%s\n", g->n, g->n == 1 ? "" : "s");
	for (int i = 0; i < g->n; i++) {
		const struct stage *s = g->stages[i];
		char q[24], cpus[512];
		if (s->in)
			snprintf(q, sizeof q, "%d", s->d.queue_cap);
		else
			snprintf(q, sizeof q, "source");
		size_t len = 0;
		int pinned = 0;
		cpus[0] = '\0';
		for (int t = 0; t < s->d.n_threads && len < sizeof cpus - 16; t++) {
			pinned |= s->d.cpus[t] >= 0;
			if (s->d.cpus[t] >= 0)
				len += (size_t)snprintf(cpus + len, sizeof cpus - len, "%s%d",
							t ? "," : "", s->d.cpus[t]);
			else
				len += (size_t)snprintf(cpus + len, sizeof cpus - len, "%s-",
							t ? "," : "");
		}
		fprintf(f, "  %d  %-12s threads %-3d queue %-7s cpus %s\n", i, s->name,
			s->d.n_threads, q, pinned ? cpus : "any");
	}
}

void st_graph_destroy(st_graph_t *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->n; i++) {
		struct stage *s = g->stages[i];
		if (s->in) {
			/* Defensive: st_graph_run drained every queue already. */
			st_queue_drain(s->in, free_item, g);
			st_queue_destroy(s->in);
		}
		free(s->name);
		free(s);
	}
	free(g->stages);
	pthread_mutex_destroy(&g->mu);
	free(g);
}
