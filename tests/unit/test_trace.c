/* test_trace.c — the timeline recorder (runtime/trace.h): per-thread
 * buffers from several threads, the ring keeps the newest events, the file
 * is valid JSON (a small strict parser below reads it back), spans are
 * well-nested per thread, counters and instants, a track handed from an
 * exited thread to the next of the same name, and a traced graph whose slow
 * stage `st_trace_summarize` names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/batch.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/trace_read.h"

/* ---- a strict JSON checker (RFC 8259 syntax; values are not kept) ------- */

typedef struct {
	const char *p;
} js_t;

static void ws(js_t *j)
{
	while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')
		j->p++;
}

static int value(js_t *j, int depth);

static int string(js_t *j)
{
	if (*j->p != '"')
		return 0;
	j->p++;
	while (*j->p != '"') {
		unsigned char c = (unsigned char)*j->p;
		if (c < 0x20)
			return 0;
		if (c == '\\') {
			j->p++;
			if (*j->p == 'u') {
				for (int k = 1; k <= 4; k++)
					if (!isxdigit((unsigned char)j->p[k]))
						return 0;
				j->p += 4;
			} else if (!strchr("\"\\/bfnrt", *j->p) || !*j->p) {
				return 0;
			}
		}
		j->p++;
	}
	j->p++;
	return 1;
}

static int number(js_t *j)
{
	const char *s = j->p;
	if (*j->p == '-')
		j->p++;
	if (*j->p == '0')
		j->p++;
	else if (isdigit((unsigned char)*j->p))
		while (isdigit((unsigned char)*j->p))
			j->p++;
	else
		return 0;
	if (*j->p == '.') {
		j->p++;
		if (!isdigit((unsigned char)*j->p))
			return 0;
		while (isdigit((unsigned char)*j->p))
			j->p++;
	}
	if (*j->p == 'e' || *j->p == 'E') {
		j->p++;
		if (*j->p == '+' || *j->p == '-')
			j->p++;
		if (!isdigit((unsigned char)*j->p))
			return 0;
		while (isdigit((unsigned char)*j->p))
			j->p++;
	}
	return j->p > s;
}

static int value(js_t *j, int depth)
{
	if (depth > 64)
		return 0;
	ws(j);
	char c = *j->p;
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		j->p++;
		ws(j);
		if (*j->p == close) {
			j->p++;
			return 1;
		}
		for (;;) {
			if (c == '{') {
				ws(j);
				if (!string(j))
					return 0;
				ws(j);
				if (*j->p++ != ':')
					return 0;
			}
			if (!value(j, depth + 1))
				return 0;
			ws(j);
			if (*j->p == ',') {
				j->p++;
				continue;
			}
			if (*j->p++ != close)
				return 0;
			return 1;
		}
	}
	if (c == '"')
		return string(j);
	if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "null", 4)) {
		j->p += 4;
		return 1;
	}
	if (!strncmp(j->p, "false", 5)) {
		j->p += 5;
		return 1;
	}
	return number(j);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	assert_non_null(s);
	assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
	s[n] = '\0';
	fclose(f);
	return s;
}

static void assert_valid_json(const char *path)
{
	char *s = slurp(path);
	js_t j = { s };
	assert_true(value(&j, 0));
	ws(&j);
	assert_int_equal(*j.p, '\0');
	free(s);
}

/* ---- reading the events back (one per line, as st_trace_write puts them) */

typedef struct {
	char ph;
	int tid;
	double ts, dur;
	long long batch;       /* -1 none */
	char name[64];
} ev_t;

static double num_after(const char *line, const char *key, double dflt)
{
	const char *p = strstr(line, key);
	return p ? strtod(p + strlen(key), NULL) : dflt;
}

static int read_events(const char *path, ev_t **out)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char *line = NULL;
	size_t cap = 0;
	int n = 0, nalloc = 0;
	ev_t *ev = NULL;
	while (getline(&line, &cap, f) > 0) {
		const char *ph = strstr(line, "\"ph\":\"");
		if (!ph)
			continue;
		if (n == nalloc) {
			nalloc = nalloc ? 2 * nalloc : 256;
			ev = realloc(ev, sizeof *ev * (size_t)nalloc);
			assert_non_null(ev);
		}
		ev_t *e = &ev[n++];
		memset(e, 0, sizeof *e);
		e->ph = ph[6];
		e->tid = (int)num_after(line, "\"tid\":", 0);
		e->ts = num_after(line, "\"ts\":", 0);
		e->dur = num_after(line, "\"dur\":", 0);
		e->batch = (long long)num_after(line, "\"batch\":", -1);
		const char *nm = strstr(line, "\"name\":\"");
		if (nm)
			sscanf(nm + 8, "%63[^\"]", e->name);
	}
	free(line);
	fclose(f);
	*out = ev;
	return n;
}

static int count(const ev_t *ev, int n, char ph, int tid, const char *name)
{
	int c = 0;
	for (int i = 0; i < n; i++)
		c += ev[i].ph == ph && (tid < 0 || ev[i].tid == tid) &&
		     (!name || !strcmp(ev[i].name, name));
	return c;
}

static int by_start(const void *a, const void *b)
{
	const ev_t *x = a, *y = b;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->dur > y->dur ? -1 : x->dur < y->dur;  /* outer first */
}

/* Every thread's spans nest: a span that starts inside another ends inside
 * it too (Chrome's rule for 'X' events on one track). */
static void assert_well_nested(const ev_t *ev, int n)
{
	ev_t *x = malloc(sizeof *x * (size_t)(n ? n : 1));
	assert_non_null(x);
	for (int tid = 0; tid < 256; tid++) {
		int m = 0;
		for (int i = 0; i < n; i++)
			if (ev[i].ph == 'X' && ev[i].tid == tid)
				x[m++] = ev[i];
		qsort(x, (size_t)m, sizeof *x, by_start);
		double stack[64];
		int top = 0;
		for (int i = 0; i < m; i++) {
			while (top > 0 && x[i].ts >= stack[top - 1] - 1e-4)   /* adjacent */
				top--;
			if (top > 0 && x[i].ts + x[i].dur > stack[top - 1] + 1e-3)
				fail_msg("tid %d: %s [%.3f +%.3f] overlaps the end %.3f of the span "
					 "around it", tid, x[i].name, x[i].ts, x[i].dur, stack[top - 1]);
			assert_true(top < 64);
			stack[top++] = x[i].ts + x[i].dur;
		}
	}
	free(x);
}

static char *tmp_path(const char *tag)
{
	static char path[256];
	snprintf(path, sizeof path, "/tmp/st_test_trace_%d_%s.json", (int)getpid(), tag);
	return path;
}

/* ---- tests --------------------------------------------------------------- */

static void test_trace_off_records_nothing(void **state)
{
	(void)state;
	assert_int_equal(sizeof(st_trace_ev_t), 64);   /* the documented bound */
	assert_false(st_trace_enabled());
	st_trace_span("stage", "x", NULL, 1, 2, 0);   /* no-op, no crash */
	st_trace_counter("c", 1);
	st_trace_instant("i", "x");
	assert_null(st_trace_intern("x"));
	assert_int_equal(st_trace_open(0), ST_OK);
	assert_int_equal(st_trace_open(0), ST_EINVAL);  /* already open */
	st_trace_close();
	assert_false(st_trace_enabled());
}

#define NTHREADS 4
#define PER_THREAD 1000

typedef struct {
	int idx;
	pthread_barrier_t *bar;
} rec_arg_t;

static void *recorder_main(void *p)
{
	rec_arg_t *a = p;
	char name[16];
	snprintf(name, sizeof name, "tt-%d", a->idx);
	pthread_setname_np(pthread_self(), name);
	pthread_barrier_wait(a->bar);   /* every thread records at once */
	uint64_t base = st_trace_now();
	for (int i = 0; i < PER_THREAD; i++) {
		/* Nested by construction: outer [t0, t0 + 100], inner inside. */
		uint64_t t0 = base + 1000 * (uint64_t)i;
		st_trace_span("work", "inner", NULL, t0 + 10, t0 + 20, i);
		st_trace_span("stage", "outer", "s", t0, t0 + 100, i);
		if (i % 100 == 0)
			st_trace_counter("ctr", i);
	}
	return NULL;
}

static void test_trace_threads_get_own_buffers(void **state)
{
	(void)state;
	assert_int_equal(st_trace_open(4 * PER_THREAD), ST_OK);
	pthread_t t[NTHREADS];
	rec_arg_t a[NTHREADS];
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, NTHREADS);
	for (int i = 0; i < NTHREADS; i++) {
		a[i] = (rec_arg_t){ i, &bar };
		assert_int_equal(pthread_create(&t[i], NULL, recorder_main, &a[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&bar);
	st_trace_stats_t s;
	st_trace_stats(&s);
	assert_int_equal(s.threads, NTHREADS);
	assert_int_equal(s.events, NTHREADS * (2 * PER_THREAD + PER_THREAD / 100));
	assert_int_equal(s.dropped, 0);
	const char *path = tmp_path("threads");
	assert_int_equal(st_trace_write(path, 42, "test \"proc\""), ST_OK);
	st_trace_close();
	assert_valid_json(path);
	ev_t *ev;
	int n = read_events(path, &ev);
	for (int tid = 1; tid <= NTHREADS; tid++) {
		/* Each thread's events are on its own track, none lost. */
		assert_int_equal(count(ev, n, 'X', tid, "outer"), PER_THREAD);
		assert_int_equal(count(ev, n, 'X', tid, "inner"), PER_THREAD);
		assert_int_equal(count(ev, n, 'C', tid, "ctr"), PER_THREAD / 100);
		assert_int_equal(count(ev, n, 'M', tid, "thread_name"), 1);
	}
	assert_well_nested(ev, n);
	free(ev);
	unlink(path);
}

static void test_trace_ring_keeps_newest(void **state)
{
	(void)state;
	assert_int_equal(st_trace_open(16), ST_OK);
	for (int i = 0; i < 100; i++)
		st_trace_span("stage", "s", NULL, st_trace_now(), st_trace_now(), i);
	st_trace_stats_t s;
	st_trace_stats(&s);
	assert_int_equal(s.events, 100);
	assert_int_equal(s.kept, 16);
	assert_int_equal(s.dropped, 84);
	const char *path = tmp_path("ring");
	assert_int_equal(st_trace_write(path, 1, "ring"), ST_OK);
	st_trace_close();
	assert_valid_json(path);
	ev_t *ev;
	int n = read_events(path, &ev);
	assert_int_equal(count(ev, n, 'X', -1, NULL), 16);
	/* The newest 16: batch ids 84..99, oldest first. */
	int k = 84;
	for (int i = 0; i < n; i++)
		if (ev[i].ph == 'X')
			assert_int_equal(ev[i].batch, k++);
	free(ev);
	char *text = slurp(path);
	assert_non_null(strstr(text, "\"dropped\":84"));
	free(text);
	unlink(path);
}

static void test_trace_counters_and_instants(void **state)
{
	(void)state;
	assert_int_equal(st_trace_open(0), ST_OK);
	st_trace_thread_name("main \"thread\"");
	st_trace_counter("queue pull", 3);
	st_trace_counter("hit rate", 0.25);
	st_trace_counter("bad", 0.0 / 0.0);   /* NaN is no JSON number: written 0 */
	char big[2 * ST_TRACE_TEXT];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	st_trace_instant("policy", "async -> \"sync\"\n\\ and a tail: %s", big);
	const char *path = tmp_path("counters");
	assert_int_equal(st_trace_write(path, 7, "p"), ST_OK);
	st_trace_close();
	assert_valid_json(path);
	char *text = slurp(path);
	assert_non_null(strstr(text, "\"name\":\"queue pull\",\"args\":{\"value\":3}"));
	assert_non_null(strstr(text, "\"name\":\"hit rate\",\"args\":{\"value\":0.25}"));
	assert_non_null(strstr(text, "\"name\":\"bad\",\"args\":{\"value\":0}"));
	assert_non_null(strstr(text, "async -> \\\"sync\\\"\\u000a\\\\ and"));
	/* The text is cut to ST_TRACE_TEXT - 1 bytes, never overruns. */
	const char *x = strstr(text, "xxx");
	assert_non_null(x);
	assert_int_equal(strspn(x, "x"), ST_TRACE_TEXT - 1 - strlen("async -> \"sync\"\n\\ and a tail: "));
	assert_non_null(strstr(text, "\"name\":\"main \\\"thread\\\"\""));
	free(text);
	unlink(path);
}

/* A span's id is written under the name its cat gives it (file, round,
 * step, phase, else batch), and an st_error while recording is an "error"
 * instant on the logging thread's track, with the message's text. */
static void test_trace_id_args_and_error_instant(void **state)
{
	(void)state;
	assert_int_equal(st_trace_open(0), ST_OK);
	st_trace_thread_name("st-ssd-writer-0");
	uint64_t t = st_trace_now();
	st_trace_span("file", "write file", NULL, t, t + 1000, 42);
	st_trace_span("round", "compaction", NULL, t, t + 1000, 3);
	st_trace_span("step", "apply step", NULL, t, t + 1000, 9);
	st_trace_span("pass", "train pass", NULL, t, t + 1000, 1);
	st_trace_span("stage", "read", "read", t, t + 1000, 5);
	st_error("disk %s is full", "/nvme");
	st_warn("a warning is no error instant");
	const char *path = tmp_path("ids");
	assert_int_equal(st_trace_write(path, 7, "p"), ST_OK);
	st_trace_close();
	st_error("after close: no trace, no crash");
	assert_valid_json(path);
	char *text = slurp(path);
	assert_non_null(strstr(text, "\"name\":\"write file\",\"dur\":1.000,\"cat\":\"file\",\"args\":{\"file\":42}"));
	assert_non_null(strstr(text, "\"cat\":\"round\",\"args\":{\"round\":3}"));
	assert_non_null(strstr(text, "\"cat\":\"step\",\"args\":{\"step\":9}"));
	assert_non_null(strstr(text, "\"cat\":\"pass\",\"args\":{\"phase\":1}"));
	assert_non_null(strstr(text, "\"cat\":\"stage\",\"args\":{\"batch\":5,\"stage\":\"read\"}"));
	assert_non_null(strstr(text, "\"name\":\"error\",\"s\":\"p\",\"args\":{\"detail\":\"disk /nvme is full\"}"));
	assert_null(strstr(text, "a warning"));
	free(text);
	unlink(path);
}

static void *named_once(void *p)
{
	pthread_setname_np(pthread_self(), "st-x-0");
	st_trace_span("stage", "x", NULL, st_trace_now(), st_trace_now(), (int64_t)(intptr_t)p);
	return NULL;
}

/* A stage's thread of the next pass has the same name: same track. */
static void test_trace_track_reused_by_next_thread(void **state)
{
	(void)state;
	assert_int_equal(st_trace_open(0), ST_OK);
	for (intptr_t i = 0; i < 3; i++) {
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, named_once, (void *)i), 0);
		pthread_join(t, NULL);
	}
	st_trace_stats_t s;
	st_trace_stats(&s);
	assert_int_equal(s.threads, 1);
	assert_int_equal(s.events, 3);
	st_trace_close();
}

/* ---- a traced graph: a source, a slow stage, a sink ---------------------- */

#define NBATCH 40

typedef struct {
	int made;
} src_t;

static int produce(void *state, st_stage_ctx_t *ctx, st_batch_t **out)
{
	(void)ctx;
	src_t *s = state;
	if (s->made == NBATCH)
		return 0;
	int rc = st_batch_create(out, 1, 0, 0, 1);
	if (rc < 0)
		return rc;
	(*out)->seq = (uint64_t)s->made++;
	return 1;
}

/* Spins 2 ms: the stage's work is far slower than the others' (which do
 * nothing), whatever else runs on the machine. */
static int slow(void *state, st_stage_ctx_t *ctx, st_batch_t *in, st_batch_t **out)
{
	(void)state;
	(void)ctx;
	uint64_t end = st_trace_now() + 2000000;
	while (st_trace_now() < end)
		;
	*out = in;
	return 0;
}

static int pass(void *state, st_stage_ctx_t *ctx, st_batch_t *in, st_batch_t **out)
{
	(void)state;
	(void)ctx;
	*out = in;
	return 0;
}

static void test_trace_graph_names_slow_stage(void **state)
{
	(void)state;
	assert_int_equal(st_trace_open(0), ST_OK);
	static const st_stage_ops_t src_ops = { .name = "src", .produce = produce };
	static const st_stage_ops_t slow_ops = { .name = "slow", .process = slow };
	static const st_stage_ops_t sink_ops = { .name = "sink", .process = pass };
	src_t src = { 0 };
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st_stage_desc_t d[3] = {
		{ .name = "src", .ops = &src_ops, .state = &src, .n_threads = 1 },
		{ .name = "slow", .ops = &slow_ops, .n_threads = 1, .queue_cap = 2 },
		{ .name = "sink", .ops = &sink_ops, .n_threads = 1, .queue_cap = 2 },
	};
	for (int i = 0; i < 3; i++) {
		for (int t = 0; t < ST_MAX_STAGE_THREADS; t++)
			d[i].cpus[t] = -1;
		assert_int_equal(st_graph_add_stage(g, &d[i]), ST_OK);
	}
	assert_int_equal(st_graph_run(g), ST_OK);
	st_graph_destroy(g);   /* the trace keeps its own copies of the names */
	const char *path = tmp_path("graph");
	assert_int_equal(st_trace_write(path, 1, "graph"), ST_OK);
	st_trace_close();
	assert_valid_json(path);
	ev_t *ev;
	int n = read_events(path, &ev);
	/* Every stage handled every batch, each span with its batch id. */
	const char *names[3] = { "src", "slow", "sink" };
	for (int i = 0; i < 3; i++) {
		assert_int_equal(count(ev, n, 'X', -1, names[i]), NBATCH);
		for (int k = 0; k < n; k++)
			if (ev[k].ph == 'X' && !strcmp(ev[k].name, names[i]))
				assert_true(ev[k].batch >= 0 && ev[k].batch < NBATCH);
	}
	assert_true(count(ev, n, 'C', -1, "queue slow") == NBATCH);
	assert_well_nested(ev, n);
	free(ev);
	st_trace_summary_t s;
	assert_int_equal(st_trace_summarize(path, &s), ST_OK);
	assert_int_equal(s.n, 3);
	assert_true(s.bottleneck >= 0);
	assert_string_equal(s.st[s.bottleneck].name, "slow");
	/* The source waits on the slow stage's full queue; the sink idles. */
	for (int i = 0; i < 3; i++) {
		if (!strcmp(s.st[i].name, "src"))
			assert_true(s.st[i].blocked_s > s.st[i].busy_s);
		if (!strcmp(s.st[i].name, "sink"))
			assert_true(s.st[i].idle_s > s.st[i].busy_s);
	}
	unlink(path);
}

static void test_trace_summarize_rejects_non_trace(void **state)
{
	(void)state;
	st_trace_summary_t s;
	const char *path = tmp_path("empty");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"not\":\"a trace\"}\n", f);
	fclose(f);
	assert_int_equal(st_trace_summarize(path, &s), ST_EINVAL);
	unlink(path);
	assert_true(st_trace_summarize(path, &s) < 0);   /* gone: ENOENT */
}

/* A stage whose thread ended early (a reader that put a small file's
 * batches into the queues at once) is not the bottleneck: every stage is
 * measured against the pipeline's time, not its own threads' lifetime
 * (the e2e trace test's train-bound job named read under ASan before). */
static void test_trace_summarize_early_stage_not_bottleneck(void **state)
{
	(void)state;
	const char *path = tmp_path("early");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"traceEvents\":[\n", f);
	/* read: 10 batches of 20 ms, busy the whole 0.2 s it lived */
	for (int i = 0; i < 10; i++)
		fprintf(f, "{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":%d,\"name\":\"read\","
			"\"dur\":20000,\"cat\":\"stage\",\"args\":{\"batch\":%d,\"stage\":\"read\"}},\n",
			i * 20000, i);
	/* train: 10 batches of 590 ms with 10 ms waits for input: 6 s */
	for (int i = 0; i < 10; i++) {
		fprintf(f, "{\"ph\":\"X\",\"pid\":1,\"tid\":3,\"ts\":%d,\"name\":\"wait input\","
			"\"dur\":10000,\"cat\":\"wait\",\"args\":{\"batch\":%d,\"stage\":\"train\"}},\n",
			i * 600000, i);
		fprintf(f, "{\"ph\":\"X\",\"pid\":1,\"tid\":3,\"ts\":%d,\"name\":\"train\","
			"\"dur\":590000,\"cat\":\"stage\",\"args\":{\"batch\":%d,\"stage\":\"train\"}},\n",
			i * 600000 + 10000, i);
	}
	fputs("{\"ph\":\"i\",\"pid\":1,\"tid\":1,\"ts\":0,\"name\":\"start\",\"s\":\"t\"}\n]}\n", f);
	fclose(f);
	st_trace_summary_t s;
	assert_int_equal(st_trace_summarize(path, &s), ST_OK);
	assert_int_equal(s.n, 2);
	assert_true(s.bottleneck >= 0);
	assert_string_equal(s.st[s.bottleneck].name, "train");
	assert_true(s.wall_s > 5.99 && s.wall_s < 6.01);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trace_off_records_nothing),
		cmocka_unit_test(test_trace_threads_get_own_buffers),
		cmocka_unit_test(test_trace_ring_keeps_newest),
		cmocka_unit_test(test_trace_counters_and_instants),
		cmocka_unit_test(test_trace_id_args_and_error_instant),
		cmocka_unit_test(test_trace_track_reused_by_next_thread),
		cmocka_unit_test(test_trace_graph_names_slow_stage),
		cmocka_unit_test(test_trace_summarize_rejects_non_trace),
		cmocka_unit_test(test_trace_summarize_early_stage_not_bottleneck),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
