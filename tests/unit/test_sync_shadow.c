/* test_sync_shadow.c — ShadowSync (ops/sync/shadow.c): workers complete
 * many steps while the shadow thread is held at a test hook (it never
 * blocks them); replicas converge toward each other through syncs alone
 * (easgd, ma, bmuf); the sync gap is reported; the fixed-rate variant
 * syncs exactly every n steps; it learns like allreduce. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <semaphore.h>

#include "sync_policy_util.h"

extern void (*st__sync_shadow_hook)(void *arg, uint64_t round);
extern void *st__sync_shadow_hook_arg;
uint64_t st__sync_shadow_gap(void *self, uint64_t *syncs, uint64_t *gap_sum);
void st__sync_shadow_replica(void *self, int w, float *out);

/* The hook: posts `entered` at every round; at round hold_at it also posts
 * `held` (exactly once per hold, so the test can wait for the hold itself
 * whatever number of rounds it has already counted) and waits on
 * `release`. */
static sem_t entered, release, held;
static uint64_t hold_at = UINT64_MAX;   /* atomic */

static void hook(void *arg, uint64_t round)
{
	(void)arg;
	sem_post(&entered);
	if (round == __atomic_load_n(&hold_at, __ATOMIC_ACQUIRE)) {
		sem_post(&held);
		while (sem_wait(&release) != 0)
			;
	}
}

static void wait_sem(sem_t *s)
{
	while (sem_wait(s) != 0)
		;
}

typedef struct {
	util_pol_t *p;
	int w, steps;
	float scale;      /* 0: zero gradients (SGD: no change) */
} sdrv_t;

static void *sdrive(void *arg)
{
	sdrv_t *d = arg;
	size_t n = d->p->env.nparams;
	float *g = malloc(sizeof(float) * n);
	assert_non_null(g);
	for (int s = 0; s < d->steps; s++) {
		(void)d->p->ops->begin_step(d->p->self, d->w, (uint64_t)s);
		util_grad(g, n, d->w, (uint64_t)s, d->scale);
		st_sync_grads_t gr = { .n_examples = 1, .dense = g, .gstride = 1 };
		assert_int_equal(d->p->ops->apply(d->p->self, d->w, &gr), ST_OK);
	}
	free(g);
	return NULL;
}

static void run2(util_pol_t *p, int steps, float scale)
{
	pthread_t th;
	sdrv_t d1 = { p, 1, steps, scale }, d0 = { p, 0, steps, scale };
	assert_int_equal(pthread_create(&th, NULL, sdrive, &d1), 0);
	sdrive(&d0);
	pthread_join(th, NULL);
}

static double dist(util_pol_t *p)
{
	size_t n = p->env.nparams;
	float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
	st__sync_shadow_replica(p->self, 0, a);
	st__sync_shadow_replica(p->self, 1, b);
	double d = 0;
	for (size_t j = 0; j < n; j++)
		d += ((double)a[j] - b[j]) * ((double)a[j] - b[j]);
	free(a);
	free(b);
	return sqrt(d);
}

static void held_then_converge(const char *algo)
{
	char *keys[] = { (char *)"algo", (char *)"alpha" };
	double vals[] = { 0, 0.5 };
	char *strs[] = { (char *)algo, NULL };
	sem_init(&entered, 0, 0);
	sem_init(&release, 0, 0);
	sem_init(&held, 0, 0);
	__atomic_store_n(&hold_at, 0, __ATOMIC_RELEASE);
	st__sync_shadow_hook = hook;
	util_pol_t p;
	assert_int_equal(util_pol_create(&p, "shadow", 2, "sgd", "sgd", 2, keys, vals, strs),
			 ST_OK);
	/* 2 x 500 steps while the shadow thread is held in round 0: if a
	 * worker ever waited on it, this would never return. */
	run2(&p, 500, 1.0f);
	wait_sem(&held);
	uint64_t syncs, gap_sum;
	assert_int_equal(st__sync_shadow_gap(p.self, &syncs, &gap_sum), 0);
	assert_int_equal(syncs, 0);
	st_sync_stats_t ss;
	p.ops->report(p.self, &ss);
	assert_int_equal(ss.steps, 1000);
	double d0 = dist(&p);
	assert_true(d0 > 0);
	/* Release; zero-gradient steps (SGD: the replicas move only through
	 * syncs) kick rounds until 30 are done, then hold the thread again at
	 * the start of round 30 to read the replicas at rest. */
	__atomic_store_n(&hold_at, 30, __ATOMIC_RELEASE);
	sem_post(&release);
	while (st__sync_shadow_gap(p.self, NULL, NULL) < 30) {
		run2(&p, 1, 0.0f);
		while (sem_wait(&entered) != 0)
			;
	}
	/* 30 rounds are done: the thread sits in round 30's hook, or enters
	 * it once kicked; `held` is posted exactly once for that hold (waiting
	 * on `entered` here raced with the loop above, which may already have
	 * consumed round 30's post). */
	run2(&p, 1, 0.0f);
	wait_sem(&held);
	double d1 = dist(&p);
	print_message("shadow %-5s: replica distance %.3g before syncs, %.3g after 30 rounds\n",
		      algo, d0, d1);
	assert_true(d1 < 1e-3 * d0);
	/* The first sync of each replica saw its 500 steps (gap >= 500). */
	assert_int_equal(st__sync_shadow_gap(p.self, &syncs, &gap_sum), 30);
	assert_true(syncs >= 60);
	assert_true(gap_sum >= 1000);
	p.ops->report(p.self, &ss);
	uint64_t big = 0;
	for (int b = 9; b < ST_SYNC_HIST; b++)
		big += ss.staleness[b];
	assert_int_equal(big, 2);
	sem_post(&release);
	util_pol_destroy(&p);
	st__sync_shadow_hook = NULL;
	sem_destroy(&entered);
	sem_destroy(&release);
	sem_destroy(&held);
}

static void test_sync_shadow_easgd_never_blocks_and_converges(void **state)
{
	(void)state;
	held_then_converge("easgd");
}

static void test_sync_shadow_ma_never_blocks_and_converges(void **state)
{
	(void)state;
	held_then_converge("ma");
}

static void test_sync_shadow_bmuf_never_blocks_and_converges(void **state)
{
	(void)state;
	held_then_converge("bmuf");
}

static void test_sync_shadow_fixed_rate(void **state)
{
	(void)state;
	char *keys[] = { (char *)"algo", (char *)"alpha", (char *)"every" };
	double vals[] = { 0, 0.5, 5 };
	char *strs[] = { (char *)"ma", NULL, NULL };
	util_pol_t p;
	assert_int_equal(util_pol_create(&p, "shadow", 2, "sgd", "sgd", 3, keys, vals, strs),
			 ST_OK);
	run2(&p, 50, 1.0f);
	uint64_t syncs, gap_sum;
	assert_int_equal(st__sync_shadow_gap(p.self, &syncs, &gap_sum), 0);   /* no thread */
	assert_int_equal(syncs, 20);
	assert_int_equal(gap_sum, 100);
	st_sync_stats_t ss;
	p.ops->report(p.self, &ss);
	assert_int_equal(ss.staleness[st_sync_hist_bucket(5)], 20);
	util_pol_destroy(&p);
}

static void test_sync_shadow_refuses_bad_params(void **state)
{
	(void)state;
	char *keys[] = { (char *)"algo", (char *)"alpha" };
	double vals[] = { 0, 0.5 };
	char *strs[] = { (char *)"gossip", NULL };
	util_pol_t p;
	assert_int_equal(util_pol_create(&p, "shadow", 2, "adam", "sgd", 2, keys, vals, strs),
			 ST_EJOB);
}

#define LEARN_ROWS (32 * 4096)

static void test_sync_shadow_learns_like_allreduce(void **state)
{
	(void)state;
	st_sync_cfg_t ar = { .name = (char *)"allreduce" };
	char *keys[] = { (char *)"algo", (char *)"alpha" };
	double vals[] = { 0, 0.5 };
	static const char *algos[] = { "easgd", "ma", "bmuf" };
	st_sync_stats_t s0, s1;
	double e0, e1;
	double a0 = util_learn(&ar, 2, LEARN_ROWS, &e0, &s0);
	for (int i = 0; i < 3; i++) {
		char *strs[] = { (char *)algos[i], NULL };
		st_sync_cfg_t sh = { .name = (char *)"shadow", .n_params = 2, .keys = keys,
				     .vals = vals, .strs = strs };
		double a1 = util_learn(&sh, 2, LEARN_ROWS, &e1, &s1);
		uint64_t n = 0;
		for (int b = 0; b < ST_SYNC_HIST; b++)
			n += s1.staleness[b];
		print_message("  shadow %s: %llu replica syncs\n", algos[i], (unsigned long long)n);
		assert_true(n > 0);
		/* Progressive AUC of a Hogwild policy depends on thread timing:
		 * over 24 runs shadow's ranged 0.7093-0.7213 against allreduce's
		 * fixed 0.7107, so it gets 0.02; the held-out AUC varied only
		 * 0.7645-0.7668 (allreduce 0.7633) and keeps 0.01. */
		if (!(fabs(a1 - a0) < 0.02))
			fail_msg("shadow %s: progressive auc %.4f vs allreduce %.4f", algos[i], a1, a0);
		if (!(fabs(e1 - e0) < 0.01))
			fail_msg("shadow %s: eval auc %.4f vs allreduce %.4f", algos[i], e1, e0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sync_shadow_easgd_never_blocks_and_converges),
		cmocka_unit_test(test_sync_shadow_ma_never_blocks_and_converges),
		cmocka_unit_test(test_sync_shadow_bmuf_never_blocks_and_converges),
		cmocka_unit_test(test_sync_shadow_fixed_rate),
		cmocka_unit_test(test_sync_shadow_refuses_bad_params),
		cmocka_unit_test(test_sync_shadow_learns_like_allreduce),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
