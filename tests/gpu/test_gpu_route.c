/* test_gpu_route.c — Algorithm 2 on the device: the bucketing kernel
 * (cuda/route.cu) against its host reference st_gpu_route_plan_host
 * (exact: the same stable counting sort), and the NCCL paths (cuda/comm.cu)
 * over every GPU of this machine (one GPU: one rank sending to itself):
 * allreduce, dist_accumulate into the owners' tables, dist_get back.
 * Values are small integers, so every sum is exact in any order. */
#include "gpu_test.h"

static void test_gpu_route_plan_matches_host(void **state)
{
	enum { N = 20000 };
	uint64_t *keys = malloc(N * sizeof *keys);
	for (int i = 0; i < N; i++)
		keys[i] = gt_rnd() % 5000;   /* repeated keys: order within a bucket */
	uint64_t *d_keys = gt_dev(keys, N * sizeof *keys);
	const uint32_t parts[] = { 1, 2, 3, 8, 64 };
	const uint32_t sizes[] = { 0, 1, 255, 256, 257, N };
	for (size_t a = 0; a < sizeof parts / sizeof parts[0]; a++)
		for (size_t b = 0; b < sizeof sizes / sizeof sizes[0]; b++) {
			uint32_t P = parts[a], n = sizes[b];
			uint32_t off[65], *perm = malloc((n ? n : 1) * sizeof *perm);
			st_gpu_route_plan_host(keys, n, P, off, perm);
			uint32_t *d_scr = gt_dev(NULL, st_gpu_route_scratch_words(n, P) * 4);
			uint32_t *d_off = gt_dev(NULL, (P + 1) * 4), *d_perm = gt_dev(NULL, n * 4);
			assert_int_equal(st_gpu_route_plan(d_keys, n, P, d_scr, d_off, d_perm, NULL),
					 ST_OK);
			uint32_t *goff = gt_host(d_off, (P + 1) * 4), *gperm = gt_host(d_perm, n * 4);
			assert_memory_equal(goff, off, (P + 1) * 4);
			if (n)
				assert_memory_equal(gperm, perm, n * 4);
			/* gather then scatter is the identity */
			if (n) {
				float *rows = gt_rand((size_t)n * 3);
				float *d_rows = gt_dev(rows, (size_t)n * 12);
				float *d_g = gt_dev(NULL, (size_t)n * 12), *d_b = gt_dev(NULL, (size_t)n * 12);
				assert_int_equal(st_gpu_gather_rows(d_rows, 3, d_perm, n, d_g, NULL), ST_OK);
				assert_int_equal(st_gpu_scatter_rows(d_g, 3, d_perm, n, d_b, NULL), ST_OK);
				float *back = gt_host(d_b, (size_t)n * 12);
				assert_memory_equal(back, rows, (size_t)n * 12);
				free(rows), free(back);
				st_gpu_free(d_rows), st_gpu_free(d_g), st_gpu_free(d_b);
			}
			free(perm), free(goff), free(gperm);
			st_gpu_free(d_scr), st_gpu_free(d_off), st_gpu_free(d_perm);
		}
	assert_int_equal(st_gpu_route_plan(d_keys, 10, 65, NULL, NULL, NULL, NULL), ST_EINVAL);
	free(keys);
	st_gpu_free(d_keys);
}

enum { MAXG = 8, NK = 3000, RF = 4, NQ = 5000 };

static void test_gpu_route_nccl(void **state)
{
	int G = st_gpu_device_count();
	if (G > MAXG)
		G = MAXG;
	int devs[MAXG];
	for (int g = 0; g < G; g++)
		devs[g] = g;
	st_gpu_comm_t *c;
	assert_int_equal(st_gpu_comm_create_local(&c, G, devs), ST_OK);
	assert_int_equal(st_gpu_comm_nranks(c), G);

	/* allreduce: member g holds g + 1 + i % 5; the sum over ranks is exact */
	enum { L = 1000 };
	float *bufs[MAXG], h[L];
	for (int g = 0; g < G; g++) {
		assert_int_equal(st_gpu_use(g), ST_OK);
		for (int i = 0; i < L; i++)
			h[i] = (float)(g + 1 + i % 5);
		bufs[g] = gt_dev(h, sizeof h);
	}
	assert_int_equal(st_gpu_allreduce_f32(c, bufs, L, 0.5f), ST_OK);
	assert_int_equal(st_gpu_comm_sync(c), ST_OK);
	for (int g = 0; g < G; g++) {
		assert_int_equal(st_gpu_use(g), ST_OK);
		float *got = gt_host(bufs[g], sizeof h);
		for (int i = 0; i < L; i++)
			assert_true(got[i] == 0.5f * (float)(G * (G + 1) / 2 + G * (i % 5)));
		free(got);
		st_gpu_free(bufs[g]);
	}

	/* tables: key k lives on GPU st_gpu_part_of(k, G), its row = k, k, k, k */
	uint64_t keys[NK];
	st_gpu_table_t *tables[MAXG];
	for (int i = 0; i < NK; i++)
		keys[i] = (uint64_t)i * 7919 + 1;
	for (int g = 0; g < G; g++) {
		assert_int_equal(st_gpu_use(g), ST_OK);
		assert_int_equal(st_gpu_table_create(&tables[g], NK, RF, 0), ST_OK);
		uint64_t mine[NK];
		float *rows = malloc(NK * RF * sizeof(float));
		uint32_t m = 0;
		for (int i = 0; i < NK; i++)
			if (st_gpu_part_of(keys[i], (uint32_t)G) == (uint32_t)g) {
				for (int j = 0; j < RF; j++)
					rows[m * RF + j] = (float)i;
				mine[m++] = keys[i];
			}
		uint64_t *dk = gt_dev(mine, m * 8);
		float *dr = gt_dev(rows, (size_t)m * RF * 4);
		int32_t *ds = gt_dev(NULL, m * 4 + 4);
		assert_int_equal(st_gpu_table_insert(tables[g], dk, dr, m, ds, 0, NULL), (int)m);
		st_gpu_free(dk), st_gpu_free(dr), st_gpu_free(ds);
		free(rows);
	}

	/* every member asks for / adds to random keys (repeats included) */
	uint64_t *qk[MAXG], *dq[MAXG];
	float *dv[MAXG], *dout[MAXG];
	uint32_t n[MAXG];
	float *want = calloc((size_t)NK * RF, sizeof(float));
	for (int g = 0; g < G; g++) {
		n[g] = NQ - 100 * (uint32_t)g;
		qk[g] = malloc(n[g] * 8);
		float *v = malloc((size_t)n[g] * RF * 4);
		for (uint32_t i = 0; i < n[g]; i++) {
			int k = (int)(gt_rnd() % NK);
			qk[g][i] = keys[k];
			for (int j = 0; j < RF; j++) {
				v[i * RF + j] = (float)(j + 1);
				want[(size_t)k * RF + j] += (float)(j + 1);
			}
		}
		assert_int_equal(st_gpu_use(g), ST_OK);
		dq[g] = gt_dev(qk[g], n[g] * 8);
		dv[g] = gt_dev(v, (size_t)n[g] * RF * 4);
		dout[g] = gt_dev(NULL, (size_t)n[g] * RF * 4);
		free(v);
	}
	/* get first: rows are (k, k, k, k) */
	assert_int_equal(st_gpu_dist_get(c, tables, (const uint64_t *const *)dq, n, dout), ST_OK);
	for (int g = 0; g < G; g++) {
		assert_int_equal(st_gpu_use(g), ST_OK);
		float *got = gt_host(dout[g], (size_t)n[g] * RF * 4);
		for (uint32_t i = 0; i < n[g]; i++)
			for (int j = 0; j < RF; j++)
				assert_true(got[i * RF + j] == (float)((qk[g][i] - 1) / 7919));
		free(got);
	}
	/* accumulate: every row gains the sum of what all members sent it */
	int64_t total = 0;
	for (int g = 0; g < G; g++)
		total += n[g];
	assert_int_equal(st_gpu_dist_accumulate(c, tables, (const uint64_t *const *)dq,
						(const float *const *)dv, n, RF,
						ST_GPU_ACC_VALUES), total);
	assert_int_equal(st_gpu_dist_get(c, tables, (const uint64_t *const *)dq, n, dout), ST_OK);
	for (int g = 0; g < G; g++) {
		assert_int_equal(st_gpu_use(g), ST_OK);
		float *got = gt_host(dout[g], (size_t)n[g] * RF * 4);
		for (uint32_t i = 0; i < n[g]; i++) {
			uint64_t k = (qk[g][i] - 1) / 7919;
			for (int j = 0; j < RF; j++)
				assert_true(got[i * RF + j] == (float)k + want[k * RF + j]);
		}
		free(got);
		st_gpu_free(dq[g]), st_gpu_free(dv[g]), st_gpu_free(dout[g]);
		free(qk[g]);
		st_gpu_table_destroy(tables[g]);
	}
	free(want);
	st_gpu_comm_destroy(c);
	assert_int_equal(st_gpu_use(0), ST_OK);
}

int main(void)
{
	int skip = gpu_test_skip();
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_route_plan_matches_host),
		cmocka_unit_test(test_gpu_route_nccl),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
