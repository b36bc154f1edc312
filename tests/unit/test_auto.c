/*
 * test_auto.c — st.sync.auto's controller (ops/sync/auto.c) without a
 * trainer: no decision before every worker has a full window; the
 * threshold with its hysteresis (up above threshold, back below 0.8 x
 * threshold); a restart forgets the samples; the ranks transport votes
 * every window ticks, every voter reaching the same decision as one
 * controller over all the workers would (three voters on threads, an
 * in-memory allgather as their network); a vote finds every voter out of
 * data; the settings' checks (unknown sub-policies, sides that cannot run
 * across processes). The trainer's switches are pinned in test_trainer.c
 * (test_trainer_auto_switches) and tests/e2e/dist_auto.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "ops/sync/auto.h"
#include "runtime/err.h"

/* An auto cfg with window and threshold (no sub-policies: the defaults). */
static st_sync_cfg_t auto_cfg(char **keys, double *vals, double window, double threshold)
{
	keys[0] = (char *)"window";
	keys[1] = (char *)"threshold";
	vals[0] = window;
	vals[1] = threshold;
	return (st_sync_cfg_t){ .name = (char *)"auto", .n_params = 2, .keys = keys,
				.vals = vals };
}

/* Records `n` step times for each of the two workers: worker 0 at 1 s,
 * worker 1 at `slow` s. */
static void record(st_auto_t *a, int n, double slow)
{
	for (int i = 0; i < n; i++) {
		st_auto_record(a, 0, 1.0);
		st_auto_record(a, 1, slow);
	}
}

static void test_auto_threshold_with_hysteresis(void **state)
{
	(void)state;
	char *keys[2];
	double vals[2];
	st_sync_cfg_t cfg = auto_cfg(keys, vals, 4, 1.5);
	st_auto_transport_t tp;
	st_auto_transport_threads(&tp);
	st_auto_t *a;
	assert_int_equal(st_auto_create(&a, &cfg, 2, &tp), ST_OK);
	assert_string_equal(st_auto_policy(a, 0)->name, "allreduce");
	assert_string_equal(st_auto_policy(a, 1)->name, "async");
	assert_int_equal(st_auto_current(a), 0);
	assert_false(st_auto_across(a));
	st_auto_verdict_t v;
	/* Three samples each: no full window, no decision. */
	record(a, 3, 2.0);
	assert_int_equal(st_auto_tick(a, 0, 1, "allreduce", &v), ST_OK);
	assert_int_equal(v.want, 0);
	/* The fourth: 2x apart, above 1.5. */
	record(a, 1, 2.0);
	assert_int_equal(st_auto_tick(a, 0, 2, "allreduce", &v), ST_OK);
	assert_int_equal(v.want, 1);
	assert_true(v.ratio == 2.0);
	st_auto_switched(a, &v, 2, "allreduce", "async");
	st_auto_restart(a);
	assert_int_equal(st_auto_current(a), 1);
	/* 1.3x: below the threshold but above 0.8 x 1.5 = 1.2: stays. */
	record(a, 4, 1.3);
	assert_int_equal(st_auto_tick(a, 0, 3, "async", &v), ST_OK);
	assert_int_equal(v.want, 1);
	/* A window of 1.1x (the ring keeps the last 4 samples): back. */
	record(a, 4, 1.1);
	assert_int_equal(st_auto_tick(a, 0, 4, "async", &v), ST_OK);
	assert_int_equal(v.want, 0);
	st_auto_destroy(a);
}

static void test_auto_restart_forgets_samples(void **state)
{
	(void)state;
	char *keys[2];
	double vals[2];
	st_sync_cfg_t cfg = auto_cfg(keys, vals, 2, 1.5);
	st_auto_transport_t tp;
	st_auto_transport_threads(&tp);
	st_auto_t *a;
	assert_int_equal(st_auto_create(&a, &cfg, 2, &tp), ST_OK);
	record(a, 2, 5.0);
	st_auto_restart(a);
	st_auto_verdict_t v;
	assert_int_equal(st_auto_tick(a, 0, 1, "allreduce", &v), ST_OK);
	assert_int_equal(v.want, 0);
	record(a, 1, 5.0);
	assert_int_equal(st_auto_tick(a, 0, 2, "allreduce", &v), ST_OK);
	assert_int_equal(v.want, 0);
	record(a, 1, 5.0);
	assert_int_equal(st_auto_tick(a, 0, 3, "allreduce", &v), ST_OK);
	assert_int_equal(v.want, 1);
	st_auto_destroy(a);
}

/* ---- three voters on threads: the ranks transport's rules ------------------ */

enum { VOTERS = 3 };

typedef struct board {
	pthread_barrier_t bar;
	unsigned char slot[VOTERS][64];
	size_t len;
} board_t;

typedef struct voter {
	board_t *b;
	int r;
	double speed;          /* this voter's one worker's step time */
	int done_at;           /* out of data from this tick on (0: never) */
	int want[8];           /* verdict of each tick */
	int voted[8];
	int all_done[8];
} voter_t;

static int board_allgather(void *ctx, const void *mine, size_t len, void *out)
{
	voter_t *v = ctx;
	board_t *b = v->b;
	memcpy(b->slot[v->r], mine, len);
	pthread_barrier_wait(&b->bar);
	for (int r = 0; r < VOTERS; r++)
		memcpy((unsigned char *)out + (size_t)r * len, b->slot[r], len);
	pthread_barrier_wait(&b->bar);
	return ST_OK;
}

static void *voter_main(void *arg)
{
	voter_t *me = arg;
	char *keys[2];
	double vals[2];
	st_sync_cfg_t cfg = auto_cfg(keys, vals, 2, 1.5);
	st_auto_transport_t tp = { .n = VOTERS, .allgather = board_allgather, .ctx = me,
				   .per_window = 1 };
	st_auto_t *a;
	if (st_auto_create(&a, &cfg, 1, &tp) < 0)
		return NULL;
	for (int t = 0; t < 8; t++) {
		int done = me->done_at && t >= me->done_at;
		if (!done)
			st_auto_record(a, 0, me->speed);
		st_auto_verdict_t v;
		st_auto_tick(a, done, (uint64_t)t, "x", &v);
		me->voted[t] = tp.tick == 0;   /* a vote starts the count over */
		me->want[t] = v.want;
		me->all_done[t] = v.all_done;
		if (v.want != st_auto_current(a)) {
			st_auto_switched(a, &v, (uint64_t)t, "x", "y");
			st_auto_restart(a);
		}
	}
	st_auto_destroy(a);
	return NULL;
}

static void run_voters(voter_t *v)
{
	board_t b;
	pthread_barrier_init(&b.bar, NULL, VOTERS);
	pthread_t t[VOTERS];
	for (int r = 0; r < VOTERS; r++) {
		v[r].b = &b;
		v[r].r = r;
		assert_int_equal(pthread_create(&t[r], NULL, voter_main, &v[r]), 0);
	}
	for (int r = 0; r < VOTERS; r++)
		pthread_join(t[r], NULL);
	pthread_barrier_destroy(&b.bar);
}

static void test_auto_ranks_vote_every_window_and_agree(void **state)
{
	(void)state;
	/* Voter 2's worker is 3x slower than the others: the slowest of any
	 * voter against the fastest of any voter, as one controller over the
	 * three workers would decide. Votes at ticks 1, 3, 5, 7 (window 2);
	 * the first has full windows and switches everyone. */
	voter_t v[VOTERS] = { { .speed = 1.0 }, { .speed = 1.0 }, { .speed = 3.0 } };
	run_voters(v);
	for (int r = 0; r < VOTERS; r++) {
		for (int t = 0; t < 8; t++) {
			assert_int_equal(v[r].voted[t], t % 2 == 1);
			assert_int_equal(v[r].want[t], v[0].want[t]);
			assert_int_equal(v[r].all_done[t], 0);
		}
		assert_int_equal(v[r].want[0], 0);
		assert_int_equal(v[r].want[1], 1);
	}
}

static void test_auto_vote_finds_everyone_out_of_data(void **state)
{
	(void)state;
	/* Equal speeds (no switch); voters run out of data at ticks 2, 4 and
	 * 6: only the vote at tick 7 finds them all out. */
	voter_t v[VOTERS] = { { .speed = 1.0, .done_at = 2 }, { .speed = 1.0, .done_at = 4 },
			      { .speed = 1.0, .done_at = 6 } };
	run_voters(v);
	for (int r = 0; r < VOTERS; r++)
		for (int t = 0; t < 8; t++) {
			assert_int_equal(v[r].all_done[t], t == 7);
			assert_int_equal(v[r].want[t], 0);
		}
}

/* ---- the job's settings ----------------------------------------------------- */

static void test_auto_settings_checks(void **state)
{
	(void)state;
	st_sync_cfg_t kstep = { .name = (char *)"kstep" };
	st_sync_cfg_t nope = { .name = (char *)"no_such_policy" };
	st_sync_cfg_t a = { .name = (char *)"auto" };
	assert_true(st_auto_is_meta(&a));
	assert_false(st_auto_is_meta(&kstep));
	assert_null(st_auto_missing(&a));
	assert_true(st_auto_dist_ok(&a));   /* allreduce and async */
	a.sub[1] = &kstep;
	assert_null(st_auto_missing(&a));
	assert_false(st_auto_dist_ok(&a));  /* kstep keeps replicas */
	a.sub[0] = &nope;
	assert_string_equal(st_auto_missing(&a), "no_such_policy");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auto_threshold_with_hysteresis),
		cmocka_unit_test(test_auto_restart_forgets_samples),
		cmocka_unit_test(test_auto_ranks_vote_every_window_and_agree),
		cmocka_unit_test(test_auto_vote_finds_everyone_out_of_data),
		cmocka_unit_test(test_auto_settings_checks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
