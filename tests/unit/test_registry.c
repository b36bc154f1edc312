/* test_registry.c — the sync-policy table (ops/sync/policies.def): every
 * entry bound to ops of its own name, capabilities consistent with the ops,
 * lookups, the listings error messages use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "ops/sync/registry.h"

static void test_registry_entries_bound_to_their_ops(void **state)
{
	(void)state;
	assert_true(st_n_policies >= 10);
	for (size_t i = 0; i < st_n_policies; i++) {
		const st_policy_t *p = &st_policies[i];
		assert_non_null(p->name);
		assert_non_null(p->summary);
		assert_non_null(p->checkpoint);
		if (p->caps & ST_POL_META) {
			/* A meta policy switches between others: no ops. */
			assert_null(p->local);
			assert_null(p->dist);
			continue;
		}
		assert_non_null(p->local);
		assert_string_equal(p->local->name, p->name);
		if (p->dist)
			assert_string_equal(p->dist->name, p->name);
		/* auto's sides across processes must run across processes. */
		if (p->caps & (ST_POL_AUTO_SYNC | ST_POL_AUTO_ASYNC | ST_POL_STEP_PER_BATCH))
			assert_non_null(p->dist);
		/* Its synchronous side steps in lockstep, its asynchronous one not. */
		if (p->caps & ST_POL_AUTO_SYNC)
			assert_int_equal(p->dist->schedule, ST_SYNC_LOCKSTEP);
		if (p->caps & ST_POL_AUTO_ASYNC)
			assert_int_equal(p->dist->schedule, ST_SYNC_FREE);
		/* A lag parameter bounds a lockstep policy's pulls. */
		if (p->lag_param)
			assert_int_equal(p->dist->schedule, ST_SYNC_LOCKSTEP);
		for (size_t k = 0; k < i; k++)
			assert_true(strcmp(st_policies[k].name, p->name) != 0);
	}
}

static void test_registry_find(void **state)
{
	(void)state;
	assert_string_equal(st_policy_find("gba")->name, "gba");
	assert_string_equal(st_policy_find(NULL)->name, "async");
	assert_null(st_policy_find("no_such_policy"));
	assert_true(st_policy_find("auto")->caps & ST_POL_META);
	assert_true(st_policy_dist(st_policy_find("auto")));
	assert_false(st_policy_dist(NULL));
	assert_ptr_equal(st_sync_find("allreduce"), st_policy_find("allreduce")->local);
	assert_ptr_equal(st_sync_find_dist("hop_bw"), st_policy_find("hop_bw")->dist);
	assert_null(st_sync_find("auto"));
	assert_null(st_sync_find(NULL));
}

static void test_registry_names_listing(void **state)
{
	(void)state;
	char b[512];
	assert_string_equal(st_policy_names(b, sizeof b, ST_POL_AUTO_SYNC, 1), "allreduce and hybrid");
	assert_string_equal(st_policy_names(b, sizeof b, ST_POL_AUTO_ASYNC, 1),
			    "async, hop_bs, bsp and gba");
	st_policy_names(b, sizeof b, 0, 0);
	for (size_t i = 0; i < st_n_policies; i++)
		assert_non_null(strstr(b, st_policies[i].name));
	/* A short buffer is cut, never overrun. */
	char s[8];
	memset(s, 'x', sizeof s);
	st_policy_names(s, 6, 0, 0);
	assert_int_equal(s[5], 0);
	assert_int_equal(s[6], 'x');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registry_entries_bound_to_their_ops),
		cmocka_unit_test(test_registry_find),
		cmocka_unit_test(test_registry_names_listing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
