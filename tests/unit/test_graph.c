/* test_graph.c — pipeline engine: delivery, errors, cancel, shutdown, names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/graph_internal.h"

/* Every batch the mocks create and every batch anyone frees (mocks or the
 * engine, through the free hook) is counted, so a test can check that each
 * batch was freed exactly once: created == destroyed and nothing leaks
 * (ASan would report the leak; a double free would crash it). */
static atomic_ulong created, destroyed;

static void count_destroy(st_batch_t *b)
{
	atomic_fetch_add(&destroyed, 1);
	st_batch_destroy(b);
}

static void reset_counts(void)
{
	atomic_store(&created, 0);
	atomic_store(&destroyed, 0);
}

/* --- mock source ------------------------------------------------------ */

struct source {
	uint64_t k;           /* batches to produce (UINT64_MAX: endless) */
	atomic_ulong next;
	uint64_t fail_at;     /* seq at which produce fails, UINT64_MAX: never */
	atomic_int finished;
};

static int source_produce(void *state, st_stage_ctx_t *ctx, st_batch_t **out)
{
	struct source *s = state;
	uint64_t seq = atomic_fetch_add(&s->next, 1);
	if (seq >= s->k)
		return 0;
	if (seq == s->fail_at)
		return st_stage_fail(ctx, ST_EIO, "shard-3.tsv: read error at batch %llu",
				     (unsigned long long)seq);
	st_batch_t *b;
	int rc = st_batch_create(&b, 1, 0, 0, 1);
	if (rc < 0)
		return st_stage_fail(ctx, rc, "out of memory");
	atomic_fetch_add(&created, 1);
	b->seq = seq;
	*out = b;
	return 1;
}

static int source_finish(void *state, st_stage_ctx_t *ctx)
{
	struct source *s = state;
	atomic_fetch_add(&s->finished, 1);
	return 0;
}

static const st_stage_ops_t source_ops = {
	.name = "mock-source",
	.produce = source_produce,
	.finish = source_finish,
};

/* --- mock pass-through stage ----------------------------------------- */

struct pass {
	uint64_t fail_at;
	const char *expect_prefix; /* thread names must be expect_prefix + index */
	int fail_start;            /* thread 1 fails to start (without st_stage_fail) */
	atomic_int names_ok, names_bad, started, stopped, finished;
};

static int pass_thread_start(void *state, st_stage_ctx_t *ctx)
{
	struct pass *p = state;
	char name[32], want[32];
	atomic_fetch_add(&p->started, 1);
	if (p->fail_start && ctx->thread_idx == 1)
		return ST_ENOMEM;
	if (!p->expect_prefix)
		return 0;
	snprintf(want, sizeof want, "%s%d", p->expect_prefix, ctx->thread_idx);
	if (pthread_getname_np(pthread_self(), name, sizeof name) == 0 &&
	    strcmp(name, want) == 0)
		atomic_fetch_add(&p->names_ok, 1);
	else
		atomic_fetch_add(&p->names_bad, 1);
	return 0;
}

static void pass_thread_stop(void *state, st_stage_ctx_t *ctx)
{
	struct pass *p = state;
	atomic_fetch_add(&p->stopped, 1);
}

static int pass_process(void *state, st_stage_ctx_t *ctx, st_batch_t *in,
			st_batch_t **out)
{
	struct pass *p = state;
	if (in->seq == p->fail_at) {
		unsigned long long seq = in->seq;
		count_destroy(in);
		return st_stage_fail(ctx, ST_EBADREC, "batch %llu is poisoned", seq);
	}
	*out = in;
	return 0;
}

static int pass_finish(void *state, st_stage_ctx_t *ctx)
{
	struct pass *p = state;
	atomic_fetch_add(&p->finished, 1);
	return 0;
}

static const st_stage_ops_t pass_ops = {
	.name = "mock-pass",
	.process = pass_process,
	.thread_start = pass_thread_start,
	.thread_stop = pass_thread_stop,
	.finish = pass_finish,
};

/* --- mock sink --------------------------------------------------------- */

struct sink {
	uint64_t k;
	atomic_uint *seen;     /* [k] receptions per seq, NULL: don't record */
	atomic_ulong count;
	uint64_t fail_at;
	uint64_t signal_at;    /* post `reached` when count hits this */
	sem_t reached;
	st_graph_t *g;         /* for fail_when_full */
	int fail_when_full;    /* on the first batch, wait for full queues, fail */
};

/* Spins until every queue of g is full, i.e. every upstream thread is stuck
 * (or about to be) on a push. Polling the engine's own counters is
 * synchronization, not timing: no sleep is involved. */
static void wait_queues_full(st_graph_t *g, int upto)
{
	for (int i = 1; i < upto; i++) {
		for (;;) {
			st_stage_stats_t s;
			st_graph_stage_stats(g, i, &s);
			if (s.queue_depth == s.queue_cap)
				break;
			sched_yield();
		}
	}
}

static int sink_process(void *state, st_stage_ctx_t *ctx, st_batch_t *in,
			st_batch_t **out)
{
	struct sink *s = state;
	uint64_t n = atomic_fetch_add(&s->count, 1) + 1;
	if (s->seen && in->seq < s->k)
		atomic_fetch_add(&s->seen[in->seq], 1);
	if (n == s->signal_at)
		sem_post(&s->reached);
	if (s->fail_when_full) {
		wait_queues_full(s->g, st_graph_nstages(s->g));
		count_destroy(in);
		return st_stage_fail(ctx, ST_ENOSPC, "disk full after %llu batches",
				     (unsigned long long)n);
	}
	if (in->seq == s->fail_at) {
		count_destroy(in);
		return st_stage_fail(ctx, ST_EIO, "cannot write batch");
	}
	/* Odd batches are handed back so that the engine frees them. */
	if (in->seq % 2)
		*out = in;
	else
		count_destroy(in);
	return 0;
}

static const st_stage_ops_t sink_ops = {
	.name = "mock-sink",
	.process = sink_process,
};

static st_stage_desc_t desc(const char *name, const st_stage_ops_t *ops, void *state,
			    int threads, int cap)
{
	st_stage_desc_t d = { .name = name, .ops = ops, .state = state,
			      .n_threads = threads, .queue_cap = cap };
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		d.cpus[i] = -1;
	return d;
}

static void sink_init(struct sink *s, uint64_t k)
{
	memset(s, 0, sizeof *s);
	s->k = k;
	s->fail_at = UINT64_MAX;
	s->signal_at = UINT64_MAX;
	if (k != UINT64_MAX) {
		s->seen = calloc(k, sizeof *s->seen);
		assert_non_null(s->seen);
	}
	sem_init(&s->reached, 0, 0);
}

static void sink_fini(struct sink *s)
{
	free(s->seen);
	sem_destroy(&s->reached);
}

/* 4 stages, 1 + 2 + 3 + 1 threads: every batch arrives exactly once, names
 * are st-<stage>-<n>, finish runs once per stage after all its threads. */
static void test_graph_delivers_every_batch_once(void **state)
{
	(void)state;
	enum { K = 2000 };
	reset_counts();
	struct source src = { .k = K, .fail_at = UINT64_MAX };
	struct pass p1 = { .fail_at = UINT64_MAX, .expect_prefix = "st-pull-" };
	struct pass p2 = { .fail_at = UINT64_MAX, .expect_prefix = "st-train-" };
	struct sink snk;
	sink_init(&snk, K);
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st__graph_set_free_hook(g, count_destroy);
	st_stage_desc_t d = desc("read", &source_ops, &src, 1, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("pull", &pass_ops, &p1, 2, 2);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("train", &pass_ops, &p2, 3, 1);
	/* cpus that may not exist here must be ignored, not fatal */
	d.cpus[0] = 0;
	d.cpus[2] = 9999;
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("push", &sink_ops, &snk, 1, 3);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);

	assert_int_equal(st_graph_run(g), ST_OK);
	assert_null(st_graph_error(g));
	assert_int_equal(st_graph_canceled(g), 0);
	for (int i = 0; i < K; i++)
		if (snk.seen[i] != 1)
			fail_msg("batch %d arrived %u times", i, (unsigned)snk.seen[i]);
	assert_int_equal(atomic_load(&snk.count), K);
	assert_int_equal(atomic_load(&created), K);
	assert_int_equal(atomic_load(&destroyed), K);
	assert_int_equal(atomic_load(&p1.names_ok), 2);
	assert_int_equal(atomic_load(&p2.names_ok), 3);
	assert_int_equal(atomic_load(&p2.names_bad), 0);
	assert_int_equal(atomic_load(&p2.stopped), 3);
	assert_int_equal(atomic_load(&src.finished), 1);
	assert_int_equal(atomic_load(&p1.finished), 1);
	assert_int_equal(atomic_load(&p2.finished), 1);

	assert_int_equal(st_graph_nstages(g), 4);
	st_stage_stats_t s;
	st_graph_stage_stats(g, 0, &s);
	assert_string_equal(s.name, "read");
	assert_int_equal(s.items, K);
	st_graph_stage_stats(g, 2, &s);
	assert_int_equal(s.n_threads, 3);
	assert_int_equal(s.items, K);
	assert_int_equal(s.queue_cap, 1);
	assert_int_equal(s.queue_depth, 0);

	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	st_graph_print(g, f);
	fclose(f);
	assert_non_null(strstr(buf, "train"));
	assert_non_null(strstr(buf, "0,-,9999"));
	free(buf);

	assert_int_equal(st_graph_run(g), ST_EINVAL); /* once per graph */
	st_graph_destroy(g);
	sink_fini(&snk);
}

/* A middle stage fails at batch 5 while the source still has plenty to
 * produce: the run returns the op's code, the message names the stage, and
 * every batch created was freed exactly once. */
static void test_graph_middle_stage_failure_frees_everything(void **state)
{
	(void)state;
	reset_counts();
	struct source src = { .k = 100000, .fail_at = UINT64_MAX };
	struct pass p1 = { .fail_at = 5 };
	struct sink snk;
	sink_init(&snk, UINT64_MAX);
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st__graph_set_free_hook(g, count_destroy);
	st_stage_desc_t d = desc("read", &source_ops, &src, 2, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("pull", &pass_ops, &p1, 2, 2);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("push", &sink_ops, &snk, 1, 2);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);

	assert_int_equal(st_graph_run(g), ST_EBADREC);
	const char *err = st_graph_error(g);
	assert_non_null(err);
	assert_string_equal(err, "stage pull: batch 5 is poisoned");
	assert_int_equal(st_graph_canceled(g), 1);
	assert_true(atomic_load(&created) > 5);
	assert_int_equal(atomic_load(&created), atomic_load(&destroyed));
	/* finish is skipped on failure */
	assert_int_equal(atomic_load(&p1.finished), 0);
	assert_int_equal(atomic_load(&src.finished), 0);
	st_graph_destroy(g);
	sink_fini(&snk);
}

static void test_graph_source_failure(void **state)
{
	(void)state;
	reset_counts();
	struct source src = { .k = 1000, .fail_at = 7 };
	struct pass p1 = { .fail_at = UINT64_MAX };
	struct sink snk;
	sink_init(&snk, 1000);
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st__graph_set_free_hook(g, count_destroy);
	st_stage_desc_t d = desc("read", &source_ops, &src, 1, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("pull", &pass_ops, &p1, 1, 4);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("push", &sink_ops, &snk, 1, 4);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	assert_int_equal(st_graph_run(g), ST_EIO);
	assert_string_equal(st_graph_error(g),
			    "stage read: shard-3.tsv: read error at batch 7");
	assert_int_equal(atomic_load(&created), 7);
	assert_int_equal(atomic_load(&destroyed), 7);
	/* No batch after the failing one was produced. */
	for (int i = 7; i < 1000; i++)
		assert_int_equal(snk.seen[i], 0);
	st_graph_destroy(g);
	sink_fini(&snk);
}

/* The sink fails only once every queue is full, so the source and the
 * middle threads are blocked pushing: they must be woken, not hang. */
static void test_graph_sink_failure_with_blocked_upstream(void **state)
{
	(void)state;
	reset_counts();
	struct source src = { .k = UINT64_MAX, .fail_at = UINT64_MAX };
	struct pass p1 = { .fail_at = UINT64_MAX };
	struct sink snk;
	sink_init(&snk, UINT64_MAX);
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st__graph_set_free_hook(g, count_destroy);
	snk.g = g;
	snk.fail_when_full = 1;
	st_stage_desc_t d = desc("read", &source_ops, &src, 2, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("pull", &pass_ops, &p1, 2, 3);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("dump", &sink_ops, &snk, 1, 2);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	assert_int_equal(st_graph_run(g), ST_ENOSPC);
	assert_string_equal(st_graph_error(g), "stage dump: disk full after 1 batches");
	/* The queues held 3 + 2 batches, plus those held by blocked threads. */
	assert_true(atomic_load(&created) >= 6);
	assert_int_equal(atomic_load(&created), atomic_load(&destroyed));
	st_stage_stats_t s;
	st_graph_stage_stats(g, 1, &s);
	assert_int_equal(s.queue_depth, 0); /* drained by the engine */
	st_graph_destroy(g);
	sink_fini(&snk);
}

struct canceler {
	st_graph_t *g;
	struct sink *snk;
};

static void *cancel_main(void *arg)
{
	struct canceler *c = arg;
	sem_wait(&c->snk->reached);
	st_graph_cancel(c->g, "interrupted by test");
	return NULL;
}

static void test_graph_cancel_from_another_thread(void **state)
{
	(void)state;
	reset_counts();
	struct source src = { .k = UINT64_MAX, .fail_at = UINT64_MAX };
	struct pass p1 = { .fail_at = UINT64_MAX };
	struct sink snk;
	sink_init(&snk, UINT64_MAX);
	snk.signal_at = 50;
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st__graph_set_free_hook(g, count_destroy);
	st_stage_desc_t d = desc("read", &source_ops, &src, 1, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("pull", &pass_ops, &p1, 2, 2);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("push", &sink_ops, &snk, 2, 2);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	struct canceler c = { g, &snk };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, cancel_main, &c), 0);
	assert_int_equal(st_graph_run(g), ST_ECANCELED);
	pthread_join(t, NULL);
	assert_true(st_graph_canceled(g));
	assert_non_null(strstr(st_graph_error(g), "interrupted by test"));
	assert_true(atomic_load(&snk.count) >= 50);
	assert_int_equal(atomic_load(&created), atomic_load(&destroyed));
	assert_int_equal(atomic_load(&p1.started), 2);
	assert_int_equal(atomic_load(&p1.stopped), 2);
	assert_int_equal(atomic_load(&p1.finished), 0);
	st_graph_destroy(g);
	sink_fini(&snk);
}

/* A thread that cannot start (its op returns an error without calling
 * st_stage_fail) stops the graph with a message the engine writes. */
static void test_graph_thread_start_failure(void **state)
{
	(void)state;
	reset_counts();
	struct source src = { .k = UINT64_MAX, .fail_at = UINT64_MAX };
	struct pass p1 = { .fail_at = UINT64_MAX, .fail_start = 1 };
	struct sink snk;
	sink_init(&snk, UINT64_MAX);
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	st__graph_set_free_hook(g, count_destroy);
	st_stage_desc_t d = desc("read", &source_ops, &src, 1, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("pull", &pass_ops, &p1, 2, 1);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("push", &sink_ops, &snk, 1, 1);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	assert_int_equal(st_graph_run(g), ST_ENOMEM);
	assert_string_equal(st_graph_error(g), "stage pull: thread start failed: "
			    "Cannot allocate memory");
	/* thread_stop runs only on threads whose thread_start succeeded */
	assert_int_equal(atomic_load(&p1.started), 2);
	assert_int_equal(atomic_load(&p1.stopped), 1);
	assert_int_equal(atomic_load(&created), atomic_load(&destroyed));
	st_graph_destroy(g);
	sink_fini(&snk);
}

static void test_graph_rejects_bad_stages(void **state)
{
	(void)state;
	struct source src = { .k = 0, .fail_at = UINT64_MAX };
	struct pass p1 = { .fail_at = UINT64_MAX };
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	assert_int_equal(st_graph_run(g), ST_EINVAL); /* no stages */
	st_stage_desc_t d = desc("pull", &pass_ops, &p1, 1, 1);
	assert_int_equal(st_graph_add_stage(g, &d), ST_EINVAL); /* source needs produce */
	d = desc("read", &source_ops, &src, 0, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_EINVAL);
	d = desc("read", &source_ops, &src, ST_MAX_STAGE_THREADS + 1, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_EINVAL);
	d = desc("read", &source_ops, &src, 1, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	d = desc("pull", &pass_ops, &p1, 1, 0);
	assert_int_equal(st_graph_add_stage(g, &d), ST_EINVAL); /* queue_cap 0 */
	d = desc("pull", &source_ops, &p1, 1, 1);
	assert_int_equal(st_graph_add_stage(g, &d), ST_EINVAL); /* no process */
	d = desc("pull", &pass_ops, &p1, 1, 1);
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
	/* An empty source ends the graph cleanly. */
	assert_int_equal(st_graph_run(g), ST_OK);
	assert_int_equal(atomic_load(&p1.finished), 1);
	st_graph_destroy(g);
	st_graph_destroy(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_graph_delivers_every_batch_once),
		cmocka_unit_test(test_graph_middle_stage_failure_frees_everything),
		cmocka_unit_test(test_graph_source_failure),
		cmocka_unit_test(test_graph_sink_failure_with_blocked_upstream),
		cmocka_unit_test(test_graph_cancel_from_another_thread),
		cmocka_unit_test(test_graph_thread_start_failure),
		cmocka_unit_test(test_graph_rejects_bad_stages),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
