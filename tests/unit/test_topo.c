/* test_topo.c — topology loading (XML and this machine) and thread placement. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"
#include "runtime/topo.h"

/* tests/data/topo-4socket-8gpu.xml: 4 packages x 8 cores x 1 PU; package p
 * holds PUs 8p..8p+7. cuda0-3 + eth0 on package 0, cuda4-7 on 1,
 * nvme0n1-nvme3n1 on 2, nvme4n1-nvme7n1 on 3. */
static int setup_xml(void **state)
{
	const char *dir = getenv("ST_TEST_DATA");
	char path[4096];
	snprintf(path, sizeof path, "%s/topo-4socket-8gpu.xml", dir ? dir : "tests/data");
	st_topo_t *t = NULL;
	if (st_topo_load(&t, path) != ST_OK)
		return -1;
	*state = t;
	return 0;
}

static int teardown_xml(void **state)
{
	st_topo_destroy(*state);
	return 0;
}

static int pkg_of_cpu(int cpu)
{
	return cpu / 8;
}

static st_place_req_t req(const char *stage, const char *near, int n)
{
	st_place_req_t r;
	memset(&r, 0, sizeof r);
	r.stage = stage;
	r.near = near;
	r.n_threads = n;
	return r;
}

static void test_topo_xml_counts(void **state)
{
	st_topo_t *t = *state;
	assert_int_equal(st_topo_npackages(t), 4);
	assert_int_equal(st_topo_ncores(t), 32);

	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	st_topo_print(t, f);
	fclose(f);
	assert_non_null(strstr(buf, "4 packages"));
	assert_non_null(strstr(buf, "cuda5"));
	assert_non_null(strstr(buf, "nvme7n1"));
	/* the NIC is reported with its class and package */
	const char *eth = strstr(buf, "eth0");
	assert_non_null(eth);
	assert_non_null(strstr(buf, "net   eth0"));
	assert_true(strstr(eth, "package 0") == strchr(eth, 'p'));
	free(buf);
}

static void test_topo_place_near_classes_and_names(void **state)
{
	st_topo_t *t = *state;
	st_place_req_t r[4] = {
		req("read", "disk", 2),
		req("train", "gpu", 4),
		req("net", "net", 1),
		req("dump", "nvme5n1", 1),
	};
	assert_int_equal(st_topo_place(t, r, 4), ST_OK);

	assert_true(r[0].package == 2 || r[0].package == 3);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pkg_of_cpu(r[0].cpus[i]), r[0].package);
	assert_int_equal(strncmp(r[0].device, "nvme", 4), 0);

	assert_true(r[1].package == 0 || r[1].package == 1);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pkg_of_cpu(r[1].cpus[i]), r[1].package);
	assert_int_equal(strncmp(r[1].device, "cuda", 4), 0);

	assert_int_equal(r[2].package, 0);
	assert_int_equal(pkg_of_cpu(r[2].cpus[0]), 0);
	assert_string_equal(r[2].device, "eth0");

	assert_int_equal(r[3].package, 3);
	assert_int_equal(pkg_of_cpu(r[3].cpus[0]), 3);
	assert_string_equal(r[3].device, "nvme5n1");

	/* one thread per core while cores are free: no cpu used twice */
	int used[32] = { 0 };
	for (int q = 0; q < 4; q++)
		for (int i = 0; i < r[q].n_threads; i++)
			assert_int_equal(used[r[q].cpus[i]]++, 0);
	assert_int_equal(r[0].cpus[2], -1); /* unused slots are -1 */
}

/* Two "gpu" stages: the second goes to the GPU package with more free cores,
 * so they spread over packages 0 and 1. */
static void test_topo_place_class_balances_devices(void **state)
{
	st_topo_t *t = *state;
	st_place_req_t r[2] = { req("train", "gpu", 6), req("eval", "gpu", 6) };
	assert_int_equal(st_topo_place(t, r, 2), ST_OK);
	assert_int_equal(r[0].package, 0);
	assert_int_equal(r[1].package, 1);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(pkg_of_cpu(r[0].cpus[i]), 0);
		assert_int_equal(pkg_of_cpu(r[1].cpus[i]), 1);
	}
}

/* Auto requests are placed after the near ones, on cores those left free,
 * round-robin across packages; in the order given they still come later. */
static void test_topo_place_auto_uses_free_cores(void **state)
{
	st_topo_t *t = *state;
	st_place_req_t r[3] = {
		req("read", NULL, 8),
		req("train", "gpu", 8),   /* fills package 0 */
		req("push", "auto", 16),
	};
	assert_int_equal(st_topo_place(t, r, 3), ST_OK);
	int used[32] = { 0 };
	for (int i = 0; i < 8; i++)
		used[r[1].cpus[i]]++;
	for (int i = 0; i < 8; i++) {
		assert_int_equal(used[r[0].cpus[i]], 0);
		used[r[0].cpus[i]]++;
	}
	for (int i = 0; i < 16; i++) {
		assert_int_equal(used[r[2].cpus[i]], 0);
		used[r[2].cpus[i]]++;
	}
	/* round-robin across the 3 packages with free cores */
	assert_int_not_equal(pkg_of_cpu(r[0].cpus[0]), pkg_of_cpu(r[0].cpus[1]));
	assert_int_equal(r[0].package, -1);
	assert_string_equal(r[0].device, "");
}

/* Automatic stages follow their neighbours in the pipeline: pull lands in
 * the package of the read stage before it, push in the package of the train
 * stage before it, so batches handed between them stay in one NUMA node. */
static void test_topo_place_auto_follows_neighbour(void **state)
{
	st_topo_t *t = *state;
	st_place_req_t r[5] = {
		req("read", "disk", 2), req("pull", "auto", 1), req("train", "gpu", 4),
		req("push", NULL, 1), req("dump", "auto", 1),
	};
	assert_int_equal(st_topo_place(t, r, 5), ST_OK);
	assert_true(r[0].package == 2 || r[0].package == 3);
	assert_int_equal(r[1].package, r[0].package);
	assert_true(r[2].package == 0 || r[2].package == 1);
	assert_int_equal(r[3].package, r[2].package);
	assert_int_equal(r[4].package, r[3].package);
}

/* More threads than cores: every core is used before any is shared, and
 * sharing is even (round-robin). */
static void test_topo_place_oversubscribed_round_robin(void **state)
{
	st_topo_t *t = *state;
	st_place_req_t r[2] = { req("train", "gpu", 40), req("rest", NULL, 24) };
	assert_int_equal(st_topo_place(t, r, 2), ST_OK);
	int used[32] = { 0 };
	for (int q = 0; q < 2; q++)
		for (int i = 0; i < r[q].n_threads; i++) {
			assert_in_range(r[q].cpus[i], 0, 31);
			used[r[q].cpus[i]]++;
		}
	for (int c = 0; c < 32; c++)
		assert_int_equal(used[c], 2);
	/* the GPU stage starts on its own package */
	for (int i = 0; i < 8; i++)
		assert_int_equal(pkg_of_cpu(r[0].cpus[i]), 0);
}

static void test_topo_place_unknown_device(void **state)
{
	st_topo_t *t = *state;
	st_place_req_t r[2] = { req("read", "disk", 1), req("dump", "nvme9n1", 1) };
	assert_int_equal(st_topo_place(t, r, 2), ST_EINVAL);
	r[1] = req("dump", "disk", 0);
	assert_int_equal(st_topo_place(t, r, 2), ST_EINVAL);
}

static void test_topo_load_missing_xml_fails(void **state)
{
	(void)state;
	st_topo_t *t = (st_topo_t *)1;
	int rc = st_topo_load(&t, "/nonexistent/topo.xml");
	assert_true(rc < 0);
	assert_null(t);
}

static void test_topo_load_this_machine(void **state)
{
	(void)state;
	st_topo_t *t = NULL;
	assert_int_equal(st_topo_load(&t, NULL), ST_OK);
	assert_true(st_topo_ncores(t) >= 1);
	assert_true(st_topo_npackages(t) >= 1);
	/* Placement works here even with no GPU: a missing class is not an error. */
	st_place_req_t r[2] = { req("train", "gpu", 2), req("read", "auto", 1) };
	assert_int_equal(st_topo_place(t, r, 2), ST_OK);
	assert_true(r[0].cpus[0] >= 0);
	assert_int_equal(st_topo_bind_self(t, r[1].cpus[0]), ST_OK);
	assert_int_equal(st_topo_bind_self(t, -1), ST_OK);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	st_topo_print(t, f);
	fclose(f);
	assert_non_null(strstr(buf, "package 0"));
	free(buf);
	st_topo_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_topo_xml_counts),
		cmocka_unit_test(test_topo_place_near_classes_and_names),
		cmocka_unit_test(test_topo_place_class_balances_devices),
		cmocka_unit_test(test_topo_place_auto_uses_free_cores),
		cmocka_unit_test(test_topo_place_auto_follows_neighbour),
		cmocka_unit_test(test_topo_place_oversubscribed_round_robin),
		cmocka_unit_test(test_topo_place_unknown_device),
		cmocka_unit_test(test_topo_load_missing_xml_fails),
		cmocka_unit_test(test_topo_load_this_machine),
	};
	return cmocka_run_group_tests(tests, setup_xml, teardown_xml);
}
