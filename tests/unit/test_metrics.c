/* test_metrics.c — metric table under concurrency, declarations (the
 * progress line laid out from what ops declare), progress JSON records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/metrics.h"

#define THREADS 4
#define ADDS 20000

struct adder {
	st_metrics_t *m;
	pthread_barrier_t *bar;
	int id;
};

static void *adder_main(void *arg)
{
	struct adder *a = arg;
	char own[32];
	snprintf(own, sizeof own, "thread%d", a->id);
	pthread_barrier_wait(a->bar);
	for (int i = 0; i < ADDS; i++) {
		st_metrics_add(a->m, "examples", 2.0);
		st_metrics_add(a->m, own, 1.0);
		st_metrics_set(a->m, "last", (double)a->id);
		(void)st_metrics_get(a->m, "examples", 0.0);
	}
	return NULL;
}

struct collect {
	char names[ST_METRICS_MAX][64];
	int n;
};

static void collect_fn(const char *name, double v, void *arg)
{
	struct collect *c = arg;
	snprintf(c->names[c->n++], 64, "%s", name);
}

static void test_metrics_concurrent_sums_exact(void **state)
{
	(void)state;
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	assert_true(st_metrics_get(m, "examples", -1.0) == -1.0);
	assert_true(isnan(st_metrics_get(m, "loss", NAN)));
	st_metrics_set(m, "examples", 0.0); /* registered first */
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, THREADS);
	struct adder a[THREADS];
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++) {
		a[i] = (struct adder){ m, &bar, i };
		assert_int_equal(pthread_create(&t[i], NULL, adder_main, &a[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&bar);
	assert_true(st_metrics_get(m, "examples", 0) == 2.0 * THREADS * ADDS);
	for (int i = 0; i < THREADS; i++) {
		char own[32];
		snprintf(own, sizeof own, "thread%d", i);
		assert_true(st_metrics_get(m, own, 0) == (double)ADDS);
	}
	double last = st_metrics_get(m, "last", -1);
	assert_true(last >= 0 && last < THREADS);

	struct collect c = { .n = 0 };
	st_metrics_foreach(m, collect_fn, &c);
	assert_int_equal(c.n, THREADS + 2);
	assert_string_equal(c.names[0], "examples");

	/* Past ST_METRICS_MAX names, new names are dropped, old ones still work. */
	for (int i = 0; i < ST_METRICS_MAX + 5; i++) {
		char name[32];
		snprintf(name, sizeof name, "extra%d", i);
		st_metrics_set(m, name, i);
	}
	assert_true(st_metrics_get(m, "extra0", -1) == 0.0);
	assert_true(st_metrics_get(m, "extra70", -1) == -1.0);
	st_metrics_add(m, "examples", 1.0);
	assert_true(st_metrics_get(m, "examples", 0) == 2.0 * THREADS * ADDS + 1);
	st_metrics_destroy(m);
	st_metrics_destroy(NULL);
}

/* What the trainer declares (ops/metrics/catalog.c): the runtime knows no
 * metric by name. */
static void declare_like_trainer(st_metrics_t *m)
{
	const st_metric_desc_t d[] = {
		{ .name = "examples", .kind = ST_METRIC_COUNTER, .flags = ST_METRIC_HEADLINE,
		  .label = "ex" },
		{ .name = "loss", .kind = ST_METRIC_GAUGE, .flags = ST_METRIC_FINITE, .order = 10,
		  .fmt = "%.4f" },
		{ .name = "auc", .kind = ST_METRIC_GAUGE, .flags = ST_METRIC_FINITE, .order = 20,
		  .fmt = "%.4f" },
		{ .name = "hist.", .kind = ST_METRIC_COUNTER,
		  .flags = ST_METRIC_PREFIX | ST_METRIC_JSON_ONLY },
		{ .name = "bad_records", .kind = ST_METRIC_COUNTER, .flags = ST_METRIC_JSON_ONLY },
	};
	for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
		assert_int_equal(st_metrics_declare(m, &d[i]), ST_OK);
}

/* --- a tiny graph for the reporter ------------------------------------ */

struct src {
	int left;
	st_metrics_t *m;
};

static int src_produce(void *state, st_stage_ctx_t *ctx, st_batch_t **out)
{
	struct src *s = state;
	if (s->left-- <= 0)
		return 0;
	int rc = st_batch_create(out, 4, 0, 0, 1);
	if (rc < 0)
		return st_stage_fail(ctx, rc, "oom");
	(*out)->n = 4;
	return 1;
}

static int sink_process(void *state, st_stage_ctx_t *ctx, st_batch_t *in,
			st_batch_t **out)
{
	struct src *s = state;
	st_metrics_add(s->m, "examples", in->n);
	st_batch_destroy(in);
	return 0;
}

static const st_stage_ops_t src_ops = { .name = "src", .produce = src_produce };
static const st_stage_ops_t sink_ops = { .name = "sink", .process = sink_process };

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char *buf = calloc(1, 1 << 20);
	size_t n = fread(buf, 1, (1 << 20) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void test_metrics_progress_writes_final_json(void **state)
{
	(void)state;
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	struct src s = { .left = 100, .m = m };
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st_stage_desc_t d = { .name = "read", .ops = &src_ops, .state = &s, .n_threads = 1 };
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		d.cpus[i] = -1;
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d.name = "tr\"ain";  /* a name that needs escaping */
	d.ops = &sink_ops;
	d.n_threads = 2;
	d.queue_cap = 4;
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);

	declare_like_trainer(m);
	/* loss was never computed (NaN), auc is infinite: both must be null */
	st_metrics_set(m, "loss", NAN);
	st_metrics_set(m, "auc", INFINITY);
	st_metrics_set(m, "bad_records", 3);

	char path[] = "/tmp/st-test-metrics-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	st_progress_t *p;
	assert_int_equal(st_progress_start(&p, g, m, 0.001, path, 0), ST_OK);
	assert_int_equal(st_graph_run(g), ST_OK);
	st_progress_stop(p);

	char *text = read_file(path);
	unlink(path);
	/* the last line is the final record */
	size_t len = strlen(text);
	assert_true(len > 2 && text[len - 1] == '\n');
	text[len - 1] = '\0';
	char *last = strrchr(text, '\n');
	last = last ? last + 1 : text;
	assert_true(last[0] == '{' && last[strlen(last) - 1] == '}');
	assert_non_null(strstr(last, "\"t\":"));
	assert_non_null(strstr(last, "\"examples\":400,"));
	assert_non_null(strstr(last, "\"ex_per_s\":"));
	assert_non_null(strstr(last, "\"metrics\":{\"loss\":null,\"auc\":null,"
				     "\"bad_records\":3,\"examples\":400}"));
	assert_non_null(strstr(last, "\"stages\":[{\"name\":\"read\",\"threads\":1,"
				     "\"items\":100,\"busy_pct\":"));
	assert_non_null(strstr(last, "{\"name\":\"tr\\\"ain\",\"threads\":2,\"items\":100,"));
	assert_non_null(strstr(last, "\"queue_depth\":0,\"queue_cap\":4}"));
	assert_non_null(strstr(last, "\"final\":true}"));
	/* no record anywhere may contain NaN or Inf */
	assert_null(strstr(text, "nan"));
	assert_null(strstr(text, "inf"));
	/* Every line (interval records too, if any were written) is one object. */
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		assert_true(line[0] == '{' && line[strlen(line) - 1] == '}');
		assert_non_null(strstr(line, "\"stages\":["));
	}
	free(text);
	st_graph_destroy(g);
	st_metrics_destroy(m);
}

/* On a terminal, the reporter rewrites one line with \r and ends it with a
 * newline at stop. stderr is redirected to a file to look at it. */
static void test_metrics_progress_tty_line(void **state)
{
	(void)state;
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	struct src s = { .left = 10, .m = m };
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st_stage_desc_t d = { .name = "read", .ops = &src_ops, .state = &s, .n_threads = 1 };
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		d.cpus[i] = -1;
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d.name = "train";
	d.ops = &sink_ops;
	d.queue_cap = 3;
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	declare_like_trainer(m);
	st_metrics_set(m, "loss", 0.5);
	st_metrics_set(m, "auc", 0.75);
	st_metrics_set(m, "hit_rate", 0.25);

	char path[] = "/tmp/st-test-tty-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	int saved = dup(2);
	assert_true(saved >= 0);
	dup2(fd, 2);
	st_progress_t *p;
	int rc = st_progress_start(&p, g, m, 3600.0, NULL, 1);
	if (rc == ST_OK) {
		rc = st_graph_run(g);
		st_progress_stop(p);
	}
	dup2(saved, 2);
	close(saved);
	close(fd);
	assert_int_equal(rc, ST_OK);
	char *text = read_file(path);
	unlink(path);
	assert_true(text[0] == '\r');
	assert_non_null(strstr(text, "40 ex"));
	assert_non_null(strstr(text, "ex/s"));
	assert_non_null(strstr(text, "loss 0.5000"));
	assert_non_null(strstr(text, "auc 0.7500"));
	assert_non_null(strstr(text, "hit_rate 0.25"));
	assert_non_null(strstr(text, "| read "));
	assert_non_null(strstr(text, " train "));
	assert_non_null(strstr(text, "| q 0/3"));
	assert_true(text[strlen(text) - 1] == '\n');
	free(text);
	st_graph_destroy(g);
	st_metrics_destroy(m);
}

static void test_metrics_progress_bad_path(void **state)
{
	(void)state;
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	st_progress_t *p = (st_progress_t *)1;
	assert_int_equal(st_progress_start(&p, NULL, m, 1.0, "/nonexistent/dir/m.json", 0),
			 ST_EIO);
	assert_null(p);
	/* Without a graph or file, stop is immediate even with a long interval. */
	assert_int_equal(st_progress_start(&p, NULL, m, 3600.0, NULL, 0), ST_OK);
	st_progress_stop(p);
	st_progress_stop(NULL);
	st_metrics_destroy(m);
}

/* A full disk (/dev/full: every write fails with ENOSPC) must not pass
 * silently: stop reports the error, also when only the final record and
 * the close were written. */
static void test_metrics_progress_write_error(void **state)
{
	(void)state;
	if (access("/dev/full", W_OK) != 0) {
		skip();
		return;
	}
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	st_metrics_set(m, "examples", 10);
	st_progress_t *p;
	/* A long interval: only the final record is written, at stop. */
	assert_int_equal(st_progress_start(&p, NULL, m, 3600.0, "/dev/full", 0), ST_OK);
	assert_int_equal(st_progress_stop(p), ST_ENOSPC);
	/* And with records every millisecond while a graph runs. */
	struct src s = { .left = 200, .m = m };
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st_stage_desc_t d = { .name = "read", .ops = &src_ops, .state = &s, .n_threads = 1 };
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		d.cpus[i] = -1;
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	assert_int_equal(st_progress_start(&p, g, m, 0.001, "/dev/full", 0), ST_OK);
	assert_int_equal(st_graph_run(g), ST_OK);
	assert_int_equal(st_progress_stop(p), ST_ENOSPC);
	/* A good file still stops with ST_OK. */
	char path[] = "/tmp/st-test-metrics-ok-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(st_progress_start(&p, NULL, m, 3600.0, path, 0), ST_OK);
	assert_int_equal(st_progress_stop(p), ST_OK);
	unlink(path);
	st_graph_destroy(g);
	st_metrics_destroy(m);
}

/* Runs a reporter with tty on over m until stopped (one final line) and
 * returns what it wrote to stderr (the caller frees it). */
static char *tty_output(st_metrics_t *m)
{
	char path[] = "/tmp/st-test-tty2-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	int saved = dup(2);
	assert_true(saved >= 0);
	dup2(fd, 2);
	st_progress_t *p;
	int rc = st_progress_start(&p, NULL, m, 3600.0, NULL, 1);
	if (rc == ST_OK)
		st_progress_stop(p);
	dup2(saved, 2);
	close(saved);
	close(fd);
	assert_int_equal(rc, ST_OK);
	char *text = read_file(path);
	unlink(path);
	return text;
}

/* The line shows declared metrics by order (labels, formats), hides
 * JSON-only ones (also by prefix) and non-finite FINITE ones, then the
 * undeclared ones in registration order; the JSON file has them all. */
static void test_metrics_declared_layout(void **state)
{
	(void)state;
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	st_metrics_set(m, "zeta", 2);          /* undeclared, first registered */
	st_metrics_set(m, "hist.lat.0", 7);
	st_metrics_set(m, "hist.lat.1-2", 8);
	st_metrics_set(m, "b_gauge", 0.123456);
	st_metrics_set(m, "a_gauge", 1.5);
	st_metrics_set(m, "missing", NAN);
	st_metrics_set(m, "alpha", 3);         /* undeclared */
	st_metrics_add(m, "rows_done", 1234);
	const st_metric_desc_t d[] = {
		{ .name = "rows_done", .kind = ST_METRIC_COUNTER, .flags = ST_METRIC_HEADLINE,
		  .label = "rows" },
		{ .name = "b_gauge", .kind = ST_METRIC_GAUGE, .order = 1, .label = "B",
		  .fmt = "%.2f" },
		{ .name = "a_gauge", .kind = ST_METRIC_GAUGE, .order = 2, .fmt = "%.1f%%" },
		{ .name = "missing", .kind = ST_METRIC_GAUGE, .flags = ST_METRIC_FINITE },
		{ .name = "hist.", .kind = ST_METRIC_COUNTER,
		  .flags = ST_METRIC_PREFIX | ST_METRIC_JSON_ONLY },
	};
	for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
		assert_int_equal(st_metrics_declare(m, &d[i]), ST_OK);
	char *text = tty_output(m);
	char *head = strstr(text, "1.2k rows  ");
	assert_non_null(head);
	assert_non_null(strstr(head, " rows/s  B 0.12  a_gauge 1.5%  zeta 2  alpha 3\033[K\n"));
	assert_null(strstr(text, "hist"));
	assert_null(strstr(text, "missing"));
	assert_null(strstr(text, "rows_done"));
	free(text);

	/* Declaring again replaces: b_gauge after a_gauge, default format. */
	const st_metric_desc_t again = { .name = "b_gauge", .kind = ST_METRIC_GAUGE, .order = 3 };
	assert_int_equal(st_metrics_declare(m, &again), ST_OK);
	text = tty_output(m);
	assert_non_null(strstr(text, "  a_gauge 1.5%  b_gauge 0.1235  zeta 2"));
	free(text);

	/* JSON: the headline by its name and unit, every metric in "metrics". */
	char path[] = "/tmp/st-test-decl-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	st_progress_t *p;
	assert_int_equal(st_progress_start(&p, NULL, m, 3600.0, path, 0), ST_OK);
	assert_int_equal(st_progress_stop(p), ST_OK);
	text = read_file(path);
	unlink(path);
	assert_non_null(strstr(text, "{\"t\":"));
	assert_non_null(strstr(text, ",\"rows_done\":1234,\"rows_per_s\":"));
	assert_non_null(strstr(text, "\"metrics\":{\"zeta\":2,\"hist.lat.0\":7,"
				     "\"hist.lat.1-2\":8,\"b_gauge\":0.123456,"));
	free(text);
	st_metrics_destroy(m);
}

/* Without declarations nothing is special: no headline, every metric shown
 * as "name value"; the JSON record has no headline fields. */
static void test_metrics_undeclared_plain(void **state)
{
	(void)state;
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	st_metrics_set(m, "examples", 40);
	st_metrics_set(m, "loss", 0.5);
	char *text = tty_output(m);
	assert_true(text[0] == '\r');
	assert_non_null(strstr(text, "s  examples 40  loss 0.5\033[K\n"));
	assert_null(strstr(text, "ex/s"));
	free(text);
	char path[] = "/tmp/st-test-undecl-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	st_progress_t *p;
	assert_int_equal(st_progress_start(&p, NULL, m, 3600.0, path, 0), ST_OK);
	assert_int_equal(st_progress_stop(p), ST_OK);
	text = read_file(path);
	unlink(path);
	assert_null(strstr(text, "ex_per_s"));
	assert_non_null(strstr(text, ",\"metrics\":{\"examples\":40,\"loss\":0.5}"));
	free(text);
	st_metrics_destroy(m);
}

static void test_metrics_declare_refuses_bad(void **state)
{
	(void)state;
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	char longname[80];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	const st_metric_desc_t bad[] = {
		{ .name = "" },
		{ .name = longname },
		{ .name = "a", .fmt = "%d" },
		{ .name = "a", .fmt = "%.4f %g" },
		{ .name = "a", .fmt = "no conversion" },
		{ .name = "a", .flags = 1u << 9 },
		{ .name = "a", .kind = (st_metric_kind_t)7 },
		{ .name = "a", .kind = ST_METRIC_GAUGE, .flags = ST_METRIC_HEADLINE },
		{ .name = "a", .kind = ST_METRIC_COUNTER,
		  .flags = ST_METRIC_HEADLINE | ST_METRIC_JSON_ONLY },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (st_metrics_declare(m, &bad[i]) != ST_EINVAL)
			fail_msg("description %zu was accepted", i);
	/* One headline: a second one is refused, the same one replaced. */
	st_metric_desc_t h = { .name = "examples", .kind = ST_METRIC_COUNTER,
			       .flags = ST_METRIC_HEADLINE, .label = "ex" };
	assert_int_equal(st_metrics_declare(m, &h), ST_OK);
	assert_int_equal(st_metrics_declare(m, &h), ST_OK);
	h.name = "rows";
	assert_int_equal(st_metrics_declare(m, &h), ST_EINVAL);
	/* At most ST_METRICS_MAX_DECL declarations. */
	int rc = ST_OK, i;
	for (i = 0; i < ST_METRICS_MAX_DECL + 1 && rc == ST_OK; i++) {
		char name[32];
		snprintf(name, sizeof name, "m%d", i);
		const st_metric_desc_t d = { .name = name };
		rc = st_metrics_declare(m, &d);
	}
	assert_int_equal(rc, ST_ENOSPC);
	assert_int_equal(i, ST_METRICS_MAX_DECL);   /* 1 headline + 31 more fit */
	st_metrics_destroy(m);
}

/* JSON string literals: the characters JSON needs escaped, control
 * characters, UTF-8 kept, invalid bytes replaced, snprintf-style sizing. */
/* Runs fn with stderr going to a pipe; returns what it wrote (static). */
static const char *capture_stderr(void (*fn)(void))
{
	static char buf[4096];
	int p[2];
	assert_int_equal(pipe(p), 0);
	int saved = dup(2);
	assert_true(saved >= 0);
	assert_true(dup2(p[1], 2) == 2);
	close(p[1]);
	fn();
	assert_true(dup2(saved, 2) == 2);
	close(saved);
	ssize_t n = read(p[0], buf, sizeof buf - 1);
	close(p[0]);
	buf[n > 0 ? n : 0] = 0;
	return buf;
}

static void meter_quick(void)
{
	st_meter_t m;
	st_meter_init(&m, "strata gen", "rows");
	st_meter_update(&m, 1, 2);   /* at once: under 0.25 s, no line */
	st_meter_fini(&m);
}

static void meter_slow(void)
{
	st_meter_t m;
	st_meter_init(&m, "strata gen", "rows");
	m.t0_ns -= 1000000000u;      /* as if it had run for a second */
	st_meter_update(&m, 1, 2);
	st_meter_update(&m, 2, 2);   /* within 0.1 s of the last line: not drawn */
	st_meter_fini(&m);           /* the last state and a newline */
	st_meter_fini(&m);           /* twice is fine */
}

static void meter_unknown_total(void)
{
	st_meter_t m;
	st_meter_init(&m, "strata eval", "examples");
	m.t0_ns -= 1000000000u;
	st_meter_update(&m, 1000, 0);
	st_meter_fini(&m);
}

/* st_meter_t: nothing for quick work or when off; a line rewritten with
 * '\r' and ended with a newline otherwise. */
static void test_metrics_meter(void **state)
{
	(void)state;
	st_meter_set_tty(1);
	assert_string_equal(capture_stderr(meter_quick), "");
	const char *out = capture_stderr(meter_slow);
	assert_non_null(strstr(out, "\rstrata gen:  50.0% (1 / 2 rows)  "));
	assert_non_null(strstr(out, "\rstrata gen: 100.0% (2 / 2 rows)  "));
	assert_int_equal(out[strlen(out) - 1], '\n');
	assert_ptr_equal(strchr(out, '\n'), out + strlen(out) - 1);   /* one newline, last */
	out = capture_stderr(meter_unknown_total);
	assert_non_null(strstr(out, "\rstrata eval: 1000 examples  "));
	assert_non_null(strstr(out, " examples/s"));
	st_meter_set_tty(0);
	assert_string_equal(capture_stderr(meter_slow), "");
	assert_int_equal(st_meter_tty(), 0);
}

static void test_metrics_json_quote(void **state)
{
	(void)state;
	char buf[128];
	size_t n = st_json_quote(buf, sizeof buf, "a\"b\\c\nd\te\x01");
	assert_string_equal(buf, "\"a\\\"b\\\\c\\u000ad\\u0009e\\u0001\"");
	assert_int_equal(n, strlen(buf));
	/* é (2 bytes) and € (3) stay; a stray continuation byte, a lone lead
	 * byte, an overlong '/' and a surrogate become U+FFFD each. */
	st_json_quote(buf, sizeof buf, "\xc3\xa9\xe2\x82\xac|\x80|\xc3|\xc0\xaf|\xed\xa0\x80");
	assert_string_equal(buf, "\"\xc3\xa9\xe2\x82\xac|\\ufffd|\\ufffd|\\ufffd\\ufffd|"
			    "\\ufffd\\ufffd\\ufffd\"");
	/* Sizing: cap 0 writes nothing; a short buffer is cut and terminated. */
	assert_int_equal(st_json_quote(NULL, 0, "x\"y"), 6);
	char small[4] = "zzz";
	assert_int_equal(st_json_quote(small, sizeof small, "x\"y"), 6);
	assert_string_equal(small, "\"x\\");
	assert_int_equal(st_json_quote(buf, sizeof buf, ""), 2);
	assert_string_equal(buf, "\"\"");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metrics_concurrent_sums_exact),
		cmocka_unit_test(test_metrics_progress_writes_final_json),
		cmocka_unit_test(test_metrics_progress_tty_line),
		cmocka_unit_test(test_metrics_progress_bad_path),
		cmocka_unit_test(test_metrics_progress_write_error),
		cmocka_unit_test(test_metrics_declared_layout),
		cmocka_unit_test(test_metrics_undeclared_plain),
		cmocka_unit_test(test_metrics_declare_refuses_bad),
		cmocka_unit_test(test_metrics_json_quote),
		cmocka_unit_test(test_metrics_meter),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
