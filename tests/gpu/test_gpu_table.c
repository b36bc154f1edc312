/* test_gpu_table.c — the device hash table (cuda/table.cu) against a host
 * reference, and the host-tier glue (cuda/tier.c) against the host tier
 * (runtime/store/table.h). Values are exact here (copies, and accumulates
 * of small integers, which float adds exactly in any order). */
#include "gpu_test.h"

#include "ops/optim/optim.h"
#include "runtime/store/table.h"

enum { RF = 5 };

/* Distinct random keys (never ST_GPU_EMPTY_KEY). */
static uint64_t *keys_new(uint32_t n)
{
	uint64_t *k = malloc(n * sizeof *k);
	assert_non_null(k);
	for (uint32_t i = 0; i < n; i++)
		k[i] = (gt_rnd() & ~UINT64_C(0xfffff)) | i;   /* low bits keep them distinct */
	return k;
}

static void test_gpu_table_insert_lookup_get(void **state)
{
	enum { N = 3000, CAP = 4000 };
	st_gpu_table_t *t;
	assert_int_equal(st_gpu_table_create(&t, CAP, RF, 0), ST_OK);
	uint64_t *k = keys_new(N);
	float *rows = gt_rand((size_t)N * RF);
	uint64_t *dk = gt_dev(k, N * sizeof *k);
	float *dr = gt_dev(rows, (size_t)N * RF * sizeof(float));
	int32_t *ds = gt_dev(NULL, N * sizeof(int32_t));
	/* First half inserted, then all: the second insert creates the rest. */
	assert_int_equal(st_gpu_table_insert(t, dk, dr, N / 2, ds, 0, NULL), N / 2);
	assert_int_equal(st_gpu_table_insert(t, dk, dr, N, ds, 0, NULL), N - N / 2);
	assert_int_equal(st_gpu_table_free_rows(t, NULL), CAP - N);
	int32_t *slots = gt_host(ds, N * sizeof(int32_t));
	char *used = calloc(CAP, 1);
	for (int i = 0; i < N; i++) {
		assert_true(slots[i] >= 0 && slots[i] < CAP);
		assert_false(used[slots[i]]);   /* distinct keys, distinct rows */
		used[slots[i]] = 1;
	}
	/* lookup gives the same slots; unknown keys give -1 */
	uint64_t *q = malloc(2 * N * sizeof *q);
	memcpy(q, k, N * sizeof *q);
	for (int i = 0; i < N; i++)
		q[N + i] = k[i] ^ UINT64_C(0x8000000000000000);
	uint64_t *dq = gt_dev(q, 2 * N * sizeof *q);
	int32_t *dq_s = gt_dev(NULL, 2 * N * sizeof(int32_t));
	assert_int_equal(st_gpu_table_lookup(t, dq, 2 * N, dq_s, 0, NULL), ST_OK);
	int32_t *qs = gt_host(dq_s, 2 * N * sizeof(int32_t));
	for (int i = 0; i < N; i++) {
		assert_int_equal(qs[i], slots[i]);
		assert_int_equal(qs[N + i], -1);
	}
	/* get returns the inserted rows, zeros for unknown keys */
	float *dout = gt_dev(NULL, 2 * (size_t)N * RF * sizeof(float));
	assert_int_equal(st_gpu_table_get(t, dq, 2 * N, dout, NULL), ST_OK);
	float *out = gt_host(dout, 2 * (size_t)N * RF * sizeof(float));
	assert_memory_equal(out, rows, (size_t)N * RF * sizeof(float));
	for (size_t j = (size_t)N * RF; j < 2 * (size_t)N * RF; j++)
		assert_true(out[j] == 0.0f);
	/* the reserved key is refused */
	uint64_t bad = ST_GPU_EMPTY_KEY;
	uint64_t *dbad = gt_dev(&bad, sizeof bad);
	assert_int_equal(st_gpu_table_insert(t, dbad, NULL, 1, ds, 0, NULL), ST_EINVAL);
	st_gpu_free(dbad);
	free(k), free(rows), free(slots), free(used), free(q), free(qs), free(out);
	st_gpu_free(dk), st_gpu_free(dr), st_gpu_free(ds), st_gpu_free(dq), st_gpu_free(dq_s);
	st_gpu_free(dout);
	st_gpu_table_destroy(t);
}

/* Pinned rows survive eviction with their slots; unpinned ones are dropped;
 * a full table says ST_ENOSPC. */
static void test_gpu_table_pins_evict(void **state)
{
	enum { CAP = 100 };
	st_gpu_table_t *t;
	assert_int_equal(st_gpu_table_create(&t, CAP, RF, 0), ST_OK);
	uint64_t *k = keys_new(2 * CAP);
	uint64_t *dk = gt_dev(k, 2 * CAP * sizeof *k);
	int32_t *ds = gt_dev(NULL, 2 * CAP * sizeof(int32_t));
	float *rows = gt_rand((size_t)CAP * RF);
	float *dr = gt_dev(rows, (size_t)CAP * RF * sizeof(float));
	/* 30 pinned, 70 unpinned */
	assert_int_equal(st_gpu_table_insert(t, dk, dr, 30, ds, 1, NULL), 30);
	assert_int_equal(st_gpu_table_insert(t, dk + 30, dr + 30 * RF, 70, ds + 30, 0, NULL), 70);
	int32_t *before = gt_host(ds, 30 * sizeof(int32_t));
	/* full: the next key finds no row */
	assert_int_equal(st_gpu_table_insert(t, dk + CAP, NULL, 1, ds + CAP, 0, NULL), ST_ENOSPC);
	assert_int_equal(st_gpu_table_evict(t, NULL), CAP - 30);
	assert_int_equal(st_gpu_table_lookup(t, dk, CAP, ds, 0, NULL), ST_OK);
	int32_t *after = gt_host(ds, CAP * sizeof(int32_t));
	for (int i = 0; i < 30; i++)
		assert_int_equal(after[i], before[i]);
	for (int i = 30; i < CAP; i++)
		assert_int_equal(after[i], -1);
	/* pinned rows kept their values */
	float *dout = gt_dev(NULL, 30 * RF * sizeof(float));
	assert_int_equal(st_gpu_table_get(t, dk, 30, dout, NULL), ST_OK);
	float *out = gt_host(dout, 30 * RF * sizeof(float));
	assert_memory_equal(out, rows, 30 * RF * sizeof(float));
	/* 70 new keys fit now; after unpinning, everything can go */
	assert_int_equal(st_gpu_table_insert(t, dk + CAP, NULL, 70, ds + CAP, 0, NULL), 70);
	int32_t *dpinned = gt_dev(before, 30 * sizeof(int32_t));
	assert_int_equal(st_gpu_table_unpin(t, dpinned, 30, NULL), ST_OK);
	assert_int_equal(st_gpu_table_evict(t, NULL), CAP);
	free(k), free(rows), free(before), free(after), free(out);
	st_gpu_free(dk), st_gpu_free(ds), st_gpu_free(dr), st_gpu_free(dout), st_gpu_free(dpinned);
	st_gpu_table_destroy(t);
}

/* accumulate adds every contribution (keys repeat); absent keys are
 * counted; gradient mode + apply runs SGD once per touched row on the sum. */
static void test_gpu_table_accumulate_apply(void **state)
{
	enum { N = 64, M = 1000 };
	st_gpu_table_t *t;
	assert_int_equal(st_gpu_table_create(&t, N, RF, RF), ST_OK);
	uint64_t *k = keys_new(N + 1);
	uint64_t *dk = gt_dev(k, (N + 1) * sizeof *k);
	int32_t *ds = gt_dev(NULL, N * sizeof(int32_t));
	assert_int_equal(st_gpu_table_insert(t, dk, NULL, N, ds, 0, NULL), N);
	uint64_t *q = malloc(M * sizeof *q);
	float *v = malloc((size_t)M * RF * sizeof *v);
	float *want = calloc((size_t)N * RF, sizeof *want);
	for (int i = 0; i < M; i++) {
		int r = (int)(gt_rnd() % (N + 1));   /* r == N: absent key */
		q[i] = k[r];
		for (int j = 0; j < RF; j++) {
			v[(size_t)i * RF + j] = (float)(int)(gt_rnd() % 7) - 3.0f;
			if (r < N)
				want[(size_t)r * RF + j] += v[(size_t)i * RF + j];
		}
	}
	int dropped = 0;
	for (int i = 0; i < M; i++)
		dropped += q[i] == k[N];
	uint64_t *dq = gt_dev(q, M * sizeof *q);
	float *dv = gt_dev(v, (size_t)M * RF * sizeof *v);
	float *dout = gt_dev(NULL, (size_t)N * RF * sizeof(float));
	assert_int_equal(st_gpu_table_accumulate(t, dq, dv, M, RF, ST_GPU_ACC_VALUES, NULL), ST_OK);
	assert_int_equal(st_gpu_table_get(t, dk, N, dout, NULL), ST_OK);
	float *out = gt_host(dout, (size_t)N * RF * sizeof(float));
	assert_memory_equal(out, want, (size_t)N * RF * sizeof(float));
	assert_int_equal(st_gpu_table_dropped(t, NULL), dropped);
	/* gradients: w -= lr * sum(g), once per touched row (lr 0.5 keeps
	 * integers and halves exact) */
	st_optim_t o = { .kind = ST_OPT_SGD, .lr = 0.5f };
	assert_int_equal(st_gpu_table_accumulate(t, dq, dv, M, RF, ST_GPU_ACC_GRAD, NULL), ST_OK);
	int touched = 0;
	for (int r = 0; r < N; r++)
		for (int i = 0; i < M; i++)
			if (q[i] == k[r]) {
				touched++;
				break;
			}
	assert_int_equal(st_gpu_table_apply(t, &o, 1, NULL), touched);
	assert_int_equal(st_gpu_table_apply(t, &o, 2, NULL), 0);
	assert_int_equal(st_gpu_table_get(t, dk, N, dout, NULL), ST_OK);
	free(out);
	out = gt_host(dout, (size_t)N * RF * sizeof(float));
	for (size_t j = 0; j < (size_t)N * RF; j++)
		assert_true(out[j] == want[j] - 0.5f * want[j]);
	free(k), free(q), free(v), free(want), free(out);
	st_gpu_free(dk), st_gpu_free(ds), st_gpu_free(dq), st_gpu_free(dv), st_gpu_free(dout);
	st_gpu_table_destroy(t);
}

/* Pull / push through the tier: misses come from host rows, hits stay on
 * the device, pushes write the device rows back, pinned batches survive the
 * eviction a later pull needs. */
static void test_gpu_table_tier(void **state)
{
	enum { B = 40, CAP = 90 };   /* after batch 2, 60 rows live: batch 3 must evict */
	st_table_opts_t to = { .dim = RF, .seed = 3, .init_scale = 0.5f };
	st_table_t *host;
	assert_int_equal(st_table_create(&host, &to), ST_OK);
	st_gpu_table_t *t;
	assert_int_equal(st_gpu_table_create(&t, CAP, RF, 0), ST_OK);
	st_gpu_stream_t *s;
	assert_int_equal(st_gpu_stream_create(&s), ST_OK);
	st_gpu_tier_t *x;
	assert_int_equal(st_gpu_tier_create(&x, t, B, s), ST_OK);
	uint64_t *k = keys_new(3 * B);
	float *rows[3 * B];
	assert_true(st_table_resolve(host, k, 3 * B, 1, 1, rows) >= 0);
	int32_t *d1 = gt_dev(NULL, B * sizeof(int32_t)), *d2 = gt_dev(NULL, B * sizeof(int32_t));
	int32_t *d3 = gt_dev(NULL, B * sizeof(int32_t));
	float *dout = gt_dev(NULL, (size_t)B * RF * sizeof(float));
	uint64_t *dk = gt_dev(k, 3 * B * sizeof *k);
	st_gpu_tier_stats_t st;

	/* batch 1: all misses; device rows equal host rows */
	assert_int_equal(st_gpu_tier_pull(x, k, rows, B, d1), ST_OK);
	assert_int_equal(st_gpu_table_get(t, dk, B, dout, s), ST_OK);
	assert_int_equal(st_gpu_stream_sync(s), ST_OK);
	float *out = gt_host(dout, (size_t)B * RF * sizeof(float));
	for (int i = 0; i < B; i++)
		assert_memory_equal(out + (size_t)i * RF, rows[i], RF * sizeof(float));
	free(out);
	/* change the device rows, push: the host sees the change */
	float *ones = malloc((size_t)B * RF * sizeof(float));
	for (int i = 0; i < B * RF; i++)
		ones[i] = 1.0f;
	float *d_ones = gt_dev(ones, (size_t)B * RF * sizeof(float));
	assert_int_equal(st_gpu_table_accumulate(t, dk, d_ones, B, RF, ST_GPU_ACC_VALUES, s), ST_OK);
	float saved = rows[0][0];
	assert_int_equal(st_gpu_tier_push(x, d1, rows, B), ST_OK);
	assert_true(rows[0][0] == saved + 1.0f);
	/* batch 2 (keys B/2 .. 3B/2) pinned, then batch 3 needs room: batch 1's
	 * unpinned rows go, batch 2's stay */
	assert_int_equal(st_gpu_tier_pull(x, k + B / 2, rows + B / 2, B, d2), ST_OK);
	st_gpu_tier_stats(x, &st);
	assert_int_equal(st.hits, B / 2);
	assert_int_equal(st.misses, B + B / 2);
	assert_int_equal(st_gpu_tier_pull(x, k + 2 * B, rows + 2 * B, B, d3), ST_OK);
	st_gpu_tier_stats(x, &st);
	assert_true(st.evictions >= 1);
	assert_int_equal(st_gpu_table_get(t, dk + B / 2, B, dout, s), ST_OK);
	assert_int_equal(st_gpu_stream_sync(s), ST_OK);
	out = gt_host(dout, (size_t)B * RF * sizeof(float));
	for (int i = 0; i < B; i++)
		assert_memory_equal(out + (size_t)i * RF, rows[B / 2 + i], RF * sizeof(float));
	assert_int_equal(st_gpu_tier_push(x, d2, rows + B / 2, B), ST_OK);
	assert_int_equal(st_gpu_tier_push(x, d3, rows + 2 * B, B), ST_OK);
	free(out), free(ones), free(k);
	st_gpu_free(d1), st_gpu_free(d2), st_gpu_free(d3), st_gpu_free(dout), st_gpu_free(dk);
	st_gpu_free(d_ones);
	st_gpu_tier_destroy(x);
	st_gpu_stream_destroy(s);
	st_gpu_table_destroy(t);
	st_table_destroy(host);
}

int main(void)
{
	int skip = gpu_test_skip();
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_table_insert_lookup_get),
		cmocka_unit_test(test_gpu_table_pins_evict),
		cmocka_unit_test(test_gpu_table_accumulate_apply),
		cmocka_unit_test(test_gpu_table_tier),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
