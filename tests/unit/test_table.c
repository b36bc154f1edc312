/* test_table.c — host embedding table: lookups, concurrency, init, growth. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"
#include "runtime/store/table.h"

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static int ref_has(const uint64_t *ref, size_t n, uint64_t key)
{
	return bsearch(&key, ref, n, sizeof key, cmp_u64) != NULL;
}

static void test_table_insert_find_against_reference(void **state)
{
	(void)state;
	st_table_opts_t o = { .dim = 2, .state_dim = 1, .seed = 1, .state_init = 0.5f };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	enum { N = 200000 };
	uint64_t *ref = malloc(sizeof(uint64_t) * N);
	size_t nref = 0;
	uint64_t s = 3;
	for (int i = 0; i < N; i++) {
		/* Small key range gives many repeats; 0 and ~0 are ordinary keys. */
		uint64_t key = i == 0 ? 0 : i == 1 ? UINT64_MAX : rnd(&s) % 150000;
		float *row;
		int had = ref_has(ref, nref, key);
		int rc = st_table_get_or_create(t, key, (uint32_t)i, &row);
		assert_int_equal(rc, had ? 0 : 1);
		if (!had) {
			row[0] = (float)(key % 1000003);
			row[1] = 1.0f;
			ref[nref++] = key;
			/* Keep ref sorted (insertion; fine at this size with memmove). */
			size_t j = nref - 1;
			while (j > 0 && ref[j - 1] > key) {
				ref[j] = ref[j - 1];
				j--;
			}
			ref[j] = key;
		}
		assert_true(row[2] == 0.5f);
		st_table_meta_t *m = st_table_meta(t, row);
		assert_int_equal(m->last_step, (uint32_t)i);
	}
	assert_int_equal(st_table_size(t), nref);
	for (size_t i = 0; i < nref; i++) {
		float *row = st_table_find(t, ref[i]);
		assert_non_null(row);
		assert_true(row[0] == (float)(ref[i] % 1000003));
	}
	for (uint64_t k = 150000; k < 160000; k++)
		assert_null(st_table_find(t, k));
	/* freq counts every get_or_create. */
	float *row = st_table_find(t, 0);
	uint32_t f0 = st_table_meta(t, row)->freq;
	assert_true(f0 >= 1);
	assert_int_equal(st_table_get_or_create(t, 0, 7, &row), 0);
	assert_int_equal(st_table_meta(t, row)->freq, f0 + 1);
	assert_int_equal(st_table_meta(t, row)->last_step, 7);
	assert_true(st_table_row_bytes(t) >= (2 + 1 + 2) * sizeof(float));
	free(ref);
	st_table_destroy(t);
}

#define NT 4
#define NKEYS 100000

typedef struct {
	st_table_t *t;
	pthread_barrier_t *bar;
	int idx;
	uint8_t *created;      /* [NKEYS] */
	float **rows;          /* [NKEYS] */
	int err;
} cc_arg_t;

static void *cc_main(void *p)
{
	cc_arg_t *a = p;
	pthread_barrier_wait(a->bar);
	/* Each thread walks all keys from a different start, so every key is
	 * raced by several threads at different moments. */
	for (int j = 0; j < NKEYS; j++) {
		int i = (j + a->idx * (NKEYS / NT)) % NKEYS;
		uint64_t key = (uint64_t)i * UINT64_C(0x9e3779b97f4a7c15);
		int rc = st_table_get_or_create(a->t, key, 0, &a->rows[i]);
		if (rc < 0) {
			a->err = rc;
			break;
		}
		a->created[i] = (uint8_t)rc;
	}
	return NULL;
}

static void test_table_concurrent_get_or_create(void **state)
{
	(void)state;
	st_table_opts_t o = { .dim = 4, .state_dim = 4, .seed = 9, .init_scale = 0.1f,
			      .n_shards = 8 };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, NT);
	cc_arg_t a[NT];
	pthread_t tid[NT];
	for (int i = 0; i < NT; i++) {
		a[i] = (cc_arg_t){ .t = t, .bar = &bar, .idx = i,
				   .created = calloc(NKEYS, 1),
				   .rows = calloc(NKEYS, sizeof(float *)) };
		assert_int_equal(pthread_create(&tid[i], NULL, cc_main, &a[i]), 0);
	}
	for (int i = 0; i < NT; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&bar);
	for (int k = 0; k < NKEYS; k++) {
		int c = 0;
		for (int i = 0; i < NT; i++) {
			c += a[i].created[k];
			assert_ptr_equal(a[i].rows[k], a[0].rows[k]);
		}
		assert_int_equal(c, 1);
		assert_int_equal(st_table_meta(t, a[0].rows[k])->freq, NT);
	}
	for (int i = 0; i < NT; i++) {
		assert_int_equal(a[i].err, 0);
		free(a[i].created);
		free(a[i].rows);
	}
	assert_int_equal(st_table_size(t), NKEYS);
	st_table_destroy(t);
}

static void test_table_deterministic_init(void **state)
{
	(void)state;
	st_table_opts_t o = { .dim = 8, .state_dim = 2, .seed = 77, .init_scale = 0.5f,
			      .state_init = 0.25f };
	st_table_t *t1, *t2, *t3;
	assert_int_equal(st_table_create(&t1, &o), ST_OK);
	o.n_shards = 16;   /* sharding must not change values */
	assert_int_equal(st_table_create(&t2, &o), ST_OK);
	o.seed = 78;
	assert_int_equal(st_table_create(&t3, &o), ST_OK);
	enum { N = 5000 };
	float *r;
	for (int i = 0; i < N; i++)
		assert_int_equal(st_table_get_or_create(t1, (uint64_t)i, 0, &r), 1);
	for (int i = N - 1; i >= 0; i--) {
		assert_int_equal(st_table_get_or_create(t2, (uint64_t)i, 0, &r), 1);
		assert_int_equal(st_table_get_or_create(t3, (uint64_t)i, 0, &r), 1);
	}
	int differ = 0;
	double sum = 0.0;
	for (int i = 0; i < N; i++) {
		float *a = st_table_find(t1, (uint64_t)i), *b = st_table_find(t2, (uint64_t)i);
		float *c = st_table_find(t3, (uint64_t)i);
		assert_memory_equal(a, b, sizeof(float) * 10);
		for (int j = 0; j < 8; j++) {
			assert_true(a[j] >= -0.5f && a[j] < 0.5f);
			differ += a[j] != c[j];
			sum += a[j];
		}
		assert_true(a[8] == 0.25f && a[9] == 0.25f);
	}
	assert_true(differ > N * 8 * 9 / 10);
	assert_true(sum / (N * 8) > -0.02 && sum / (N * 8) < 0.02);   /* centred */
	st_table_destroy(t1);
	st_table_destroy(t2);
	st_table_destroy(t3);
}

static void test_table_growth_keeps_rows(void **state)
{
	(void)state;
	/* 66-float rows make ~1000-row chunks: 4 shards x 300k keys span
	 * hundreds of chunks and many index doublings. */
	st_table_opts_t o = { .dim = 64, .state_dim = 0, .seed = 1, .n_shards = 4 };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	enum { N = 300000 };
	float **first = malloc(sizeof(float *) * N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(st_table_get_or_create(t, (uint64_t)i, 0, &first[i]), 1);
		first[i][0] = (float)i;
		first[i][63] = (float)-i;
	}
	for (int i = 0; i < N; i++) {
		float *r = st_table_find(t, (uint64_t)i);
		assert_ptr_equal(r, first[i]);
		assert_true(r[0] == (float)i && r[63] == (float)-i);
	}
	assert_int_equal(st_table_size(t), N);
	size_t rb = st_table_row_bytes(t);
	assert_true(rb >= 66 * sizeof(float) && rb < 2 * 66 * sizeof(float));
	free(first);
	st_table_destroy(t);
}

static void count_row(uint64_t key, float *row, void *arg)
{
	(void)row;
	uint64_t *sum = arg;
	sum[0]++;
	sum[1] += key;
}

static void test_table_foreach_and_bad_opts(void **state)
{
	(void)state;
	st_table_t *t;
	st_table_opts_t bad = { .dim = 0 };
	assert_int_equal(st_table_create(&t, &bad), ST_EINVAL);
	bad = (st_table_opts_t){ .dim = 1, .n_shards = 3 };
	assert_int_equal(st_table_create(&t, &bad), ST_EINVAL);
	st_table_opts_t o = { .dim = 1 };
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	float *r;
	uint64_t want = 0;
	for (uint64_t k = 1; k <= 1000; k++) {
		assert_int_equal(st_table_get_or_create(t, k, 0, &r), 1);
		want += k;
	}
	uint64_t sum[2] = { 0, 0 };
	st_table_foreach(t, count_row, sum);
	assert_int_equal(sum[0], 1000);
	assert_int_equal(sum[1], want);
	st_table_destroy(t);
}

static void test_table_resolve_matches_single_calls(void **state)
{
	(void)state;
	st_table_opts_t o = { .dim = 3, .state_dim = 1, .seed = 5, .init_scale = 0.1f,
			      .n_shards = 16 };
	st_table_t *t, *ref;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	assert_int_equal(st_table_create(&ref, &o), ST_OK);
	enum { N = 50000 };
	uint64_t *keys = malloc(sizeof(uint64_t) * N);
	float **rows = malloc(sizeof(float *) * N);
	for (int round = 0; round < 3; round++) {
		/* Distinct keys per call (as pull gives), overlapping across calls. */
		for (int i = 0; i < N; i++)
			keys[i] = (uint64_t)i * 7 + (uint64_t)round * 100000;
		int want = 0;
		for (int i = 0; i < N; i++)
			want += st_table_find(t, keys[i]) == NULL;
		/* Lookup only: nothing is created, absent keys give NULL. */
		assert_int_equal(st_table_resolve(t, keys, N, 1, 0, rows), 0);
		for (int i = 0; i < N; i++)
			assert_ptr_equal(rows[i], st_table_find(t, keys[i]));
		assert_int_equal(st_table_resolve(t, keys, N, (uint32_t)round + 2, 1, rows), want);
		for (int i = 0; i < N; i++) {
			float *r;
			st_table_get_or_create(ref, keys[i], 0, &r);
			assert_ptr_equal(rows[i], st_table_find(t, keys[i]));
			assert_memory_equal(rows[i], r, sizeof(float) * 4);
			assert_int_equal(st_table_meta(t, rows[i])->last_step, (uint32_t)round + 2);
		}
	}
	assert_int_equal(st_table_size(t), st_table_size(ref));
	assert_int_equal(st_table_resolve(t, keys, 0, 0, 1, rows), 0);
	free(keys);
	free(rows);
	st_table_destroy(t);
	st_table_destroy(ref);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_insert_find_against_reference),
		cmocka_unit_test(test_table_concurrent_get_or_create),
		cmocka_unit_test(test_table_deterministic_init),
		cmocka_unit_test(test_table_growth_keeps_rows),
		cmocka_unit_test(test_table_foreach_and_bad_opts),
		cmocka_unit_test(test_table_resolve_matches_single_calls),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
