/* test_topo_gpu.c — st_topo_pci_cpus: the cores next to a GPU, found by its
 * PCI bus id through hwloc's PCI objects (no CUDA). Uses the hand-made
 * topology tests/data/topo-4socket-8gpu.xml, whose GPUs are PCI devices
 * 0000:01-04:00.0 on package 0 (PUs 0-7, NUMA node 0) and 0000:11-14:00.0 on
 * package 1 (PUs 8-15, NUMA node 1), and this machine for the no-device
 * path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "runtime/err.h"
#include "runtime/topo.h"

static st_topo_t *load_xml(void)
{
	const char *dir = getenv("ST_TEST_DATA");
	char path[4096];
	snprintf(path, sizeof path, "%s/topo-4socket-8gpu.xml", dir ? dir : "tests/data");
	st_topo_t *t = NULL;
	assert_int_equal(st_topo_load(&t, path), ST_OK);
	return t;
}

static void test_topo_gpu_numa_cores(void **state)
{
	st_topo_t *t = load_xml();
	int cpus[16], numa = -2;
	/* Full form: GPU cuda0 on package 0. */
	assert_int_equal(st_topo_pci_cpus(t, "0000:01:00.0", cpus, 16, &numa), 8);
	assert_int_equal(numa, 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(cpus[i], i);
	/* Short form, upper-case hex: cuda6 on package 1. */
	assert_int_equal(st_topo_pci_cpus(t, "13:00.0", cpus, 16, &numa), 8);
	assert_int_equal(numa, 1);
	for (int i = 0; i < 8; i++)
		assert_int_equal(cpus[i], 8 + i);
	/* A short output array still reports how many cores there are. */
	cpus[2] = -7;
	assert_int_equal(st_topo_pci_cpus(t, "0000:1A:00.0", cpus, 2, NULL), ST_ENOENT);
	assert_int_equal(st_topo_pci_cpus(t, "0000:12:00.0", cpus, 2, NULL), 8);
	assert_int_equal(cpus[0], 8);
	assert_int_equal(cpus[1], 9);
	assert_int_equal(cpus[2], -7);
	st_topo_destroy(t);
}

static void test_topo_gpu_unknown_and_malformed(void **state)
{
	st_topo_t *t = load_xml();
	int cpus[4], numa = 5;
	assert_int_equal(st_topo_pci_cpus(t, "0000:77:00.0", cpus, 4, &numa), ST_ENOENT);
	assert_int_equal(numa, -1);
	assert_int_equal(st_topo_pci_cpus(t, "gpu0", cpus, 4, &numa), ST_EINVAL);
	assert_int_equal(st_topo_pci_cpus(t, "0000:01:00.0x", cpus, 4, &numa), ST_EINVAL);
	assert_int_equal(st_topo_pci_cpus(t, NULL, cpus, 4, &numa), ST_EINVAL);
	st_topo_destroy(t);
}

/* This machine: a bus id no real machine has is simply not found. */
static void test_topo_gpu_this_machine(void **state)
{
	st_topo_t *t = NULL;
	assert_int_equal(st_topo_load(&t, NULL), ST_OK);
	int cpus[4], numa = 0;
	assert_int_equal(st_topo_pci_cpus(t, "ffff:ff:1f.7", cpus, 4, &numa), ST_ENOENT);
	assert_int_equal(numa, -1);
	st_topo_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_topo_gpu_numa_cores),
		cmocka_unit_test(test_topo_gpu_unknown_and_malformed),
		cmocka_unit_test(test_topo_gpu_this_machine),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
