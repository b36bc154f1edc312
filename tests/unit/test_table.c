/* test_table.c — host embedding table: lookups, concurrency, init, growth,
 * feature admission, TTL eviction and bytes per row. */
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

/* st_table_reserve sizes the index for the rows to come (a restore): rows
 * already in the table stay where they are and findable, the reserved ones
 * insert and are found, and reserving again (or 0) changes nothing. */
static void test_table_reserve_keeps_rows(void **state)
{
	(void)state;
	st_table_opts_t o = { .dim = 4, .state_dim = 0, .seed = 1, .n_shards = 8 };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	enum { N0 = 1000, N = 200000 };
	float **rows = malloc(sizeof(float *) * N);
	for (int i = 0; i < N0; i++) {
		assert_int_equal(st_table_get_or_create(t, (uint64_t)i * 7919, 0, &rows[i]), 1);
		rows[i][0] = (float)i;
	}
	assert_int_equal(st_table_reserve(t, N - N0), ST_OK);
	assert_int_equal(st_table_reserve(t, 0), ST_OK);
	for (int i = 0; i < N0; i++)
		assert_ptr_equal(st_table_find(t, (uint64_t)i * 7919), rows[i]);
	for (int i = N0; i < N; i++) {
		assert_int_equal(st_table_get_or_create(t, (uint64_t)i * 7919, 0, &rows[i]), 1);
		rows[i][0] = (float)i;
	}
	for (int i = 0; i < N; i++) {
		float *r = st_table_find(t, (uint64_t)i * 7919);
		assert_ptr_equal(r, rows[i]);
		assert_true(r[0] == (float)i);
	}
	assert_int_equal(st_table_size(t), N);
	free(rows);
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

/* ---- admission --------------------------------------------------------- */

static void test_table_admit_min_count(void **state)
{
	(void)state;
	st_table_opts_t o = { .dim = 2, .seed = 1, .admit_min_count = 3, .n_shards = 4 };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	float *r = (float *)1;
	for (uint64_t k = 0; k < 1000; k++) {
		/* occurrences 1 and 2: no row, reads as absent */
		assert_int_equal(st_table_get_or_create(t, k, 1, &r), 0);
		assert_null(r);
		assert_int_equal(st_table_get_or_create(t, k, 2, &r), 0);
		assert_null(r);
		assert_null(st_table_find(t, k));
	}
	st_table_stats_t st;
	st_table_stats(t, &st);
	assert_int_equal(st.rows, 0);
	assert_int_equal(st.candidates, 1000);
	assert_int_equal(st.rejected, 2000);
	for (uint64_t k = 0; k < 1000; k++) {
		assert_int_equal(st_table_get_or_create(t, k, 3, &r), 1);   /* the 3rd */
		assert_non_null(r);
		assert_int_equal(st_table_meta(t, r)->freq, 1);
		assert_int_equal(st_table_get_or_create(t, k, 4, &r), 0);
		assert_non_null(r);
	}
	st_table_stats(t, &st);
	assert_int_equal(st.rows, 1000);
	assert_int_equal(st.admitted, 1000);
	assert_int_equal(st.candidates, 0);
	assert_int_equal(st.rejected, 2000);
	st_table_destroy(t);
}

#define AK 50000

typedef struct {
	st_table_t *t;
	pthread_barrier_t *bar;
	uint64_t *keys;
	float **rows;
	int created, err;
} adm_arg_t;

static void *adm_main(void *p)
{
	adm_arg_t *a = p;
	pthread_barrier_wait(a->bar);
	int rc = st_table_resolve(a->t, a->keys, AK, 5, 1, a->rows);
	if (rc < 0)
		a->err = rc;
	else
		a->created = rc;
	return NULL;
}

static void test_table_admit_min_count_two_threads(void **state)
{
	(void)state;
	/* Two threads each see every key once, at the same time: with
	 * min_count = 2 each key gets exactly one row, made by whichever
	 * thread counted the second occurrence. */
	st_table_opts_t o = { .dim = 1, .seed = 2, .admit_min_count = 2, .n_shards = 8 };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, 2);
	adm_arg_t a[2];
	pthread_t tid[2];
	for (int i = 0; i < 2; i++) {
		a[i] = (adm_arg_t){ .t = t, .bar = &bar, .keys = malloc(sizeof(uint64_t) * AK),
				    .rows = malloc(sizeof(float *) * AK) };
		for (int k = 0; k < AK; k++)   /* opposite orders */
			a[i].keys[k] = (uint64_t)(i ? AK - 1 - k : k) * 0x9e3779b97f4a7c15ull;
		assert_int_equal(pthread_create(&tid[i], NULL, adm_main, &a[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&bar);
	assert_int_equal(a[0].err, 0);
	assert_int_equal(a[1].err, 0);
	assert_int_equal(a[0].created + a[1].created, AK);
	for (int k = 0; k < AK; k++) {
		float *r0 = a[0].rows[k], *r1 = a[1].rows[AK - 1 - k];
		/* exactly one of the two lookups got the row */
		assert_true((r0 == NULL) != (r1 == NULL));
		assert_ptr_equal(r0 ? r0 : r1, st_table_find(t, a[0].keys[k]));
	}
	st_table_stats_t st;
	st_table_stats(t, &st);
	assert_int_equal(st.rows, AK);
	assert_int_equal(st.rejected, AK);
	assert_int_equal(st.candidates, 0);
	for (int i = 0; i < 2; i++) {
		free(a[i].keys);
		free(a[i].rows);
	}
	st_table_destroy(t);
}

static void test_table_admit_probability(void **state)
{
	(void)state;
	enum { N = 100000 };
	st_table_opts_t o = { .dim = 1, .seed = 11, .admit_prob = 0.3 };
	st_table_t *t1, *t2, *t3;
	assert_int_equal(st_table_create(&t1, &o), ST_OK);
	o.n_shards = 8;                  /* sharding must not matter */
	assert_int_equal(st_table_create(&t2, &o), ST_OK);
	o.seed = 12;
	assert_int_equal(st_table_create(&t3, &o), ST_OK);
	uint64_t *keys = malloc(sizeof(uint64_t) * N);
	float **rows = malloc(sizeof(float *) * N);
	for (int i = 0; i < N; i++)
		keys[i] = (uint64_t)i;
	int n1 = st_table_resolve(t1, keys, N, 1, 1, rows);
	float *r;
	int same = 0, n3 = 0, differ = 0;
	for (int i = N - 1; i >= 0; i--) {        /* other order, single calls */
		int c2 = st_table_get_or_create(t2, keys[i], 1, &r);
		assert_int_equal(c2, rows[i] != NULL);
		same += c2;
		int c3 = st_table_get_or_create(t3, keys[i], 1, &r);
		n3 += c3;
		differ += c3 != (rows[i] != NULL);
	}
	assert_int_equal(same, n1);
	/* 0.3 +- 0.006 is over 4 standard deviations (sqrt(.21/1e5) = .00145) */
	assert_true(n1 > N * 0.294 && n1 < N * 0.306);
	assert_true(n3 > N * 0.294 && n3 < N * 0.306);
	assert_true(differ > N / 4);     /* another seed admits other keys */
	/* a rejected key stays rejected */
	assert_int_equal(st_table_resolve(t1, keys, N, 2, 1, rows), 0);
	st_table_stats_t st;
	st_table_stats(t1, &st);
	assert_int_equal(st.rows, (uint64_t)n1);
	assert_int_equal(st.rejected, 2 * (uint64_t)(N - n1));
	free(keys);
	free(rows);
	st_table_destroy(t1);
	st_table_destroy(t2);
	st_table_destroy(t3);
}

/* ---- TTL eviction ------------------------------------------------------ */

/* A restore that found its file damaged after inserting its rows empties
 * the table and loads an older checkpoint: the table must then be as a new
 * one — no row, no admission candidate, no counter of the first load — so
 * that the model is the older checkpoint's alone, and no on_evict call
 * (nothing was evicted: a delta export would list the keys as deleted). */
static int evict_calls;
static void count_evict(void *arg, uint64_t key)
{
	(void)arg, (void)key;
	evict_calls++;
}

static void test_table_clear_is_a_new_table(void **state)
{
	(void)state;
	st_table_opts_t o = { .dim = 3, .state_dim = 1, .seed = 9, .init_scale = 0.5f,
			      .n_shards = 4, .admit_min_count = 2, .on_evict = count_evict };
	st_table_t *a, *b;
	assert_int_equal(st_table_create(&a, &o), ST_OK);
	assert_int_equal(st_table_create(&b, &o), ST_OK);
	enum { N = 5000 };
	float *r;
	for (int i = 0; i < N; i++) {   /* admitted on the second look; odd keys once more */
		st_table_get_or_create(a, (uint64_t)i, 1, &r);
		st_table_get_or_create(a, (uint64_t)i, 1, &r);
		if (r)
			r[0] = 1000.0f;
	}
	for (int i = N; i < N + 100; i++)   /* candidates only */
		st_table_get_or_create(a, (uint64_t)i, 2, &r);
	for (int i = 0; i < 10; i++)
		st_table_get_or_create(a, (uint64_t)i, 50, &r);
	assert_true(st_table_evict_older(a, 10, 5) > 0);   /* a free list */
	evict_calls = 0;
	assert_int_equal(st_table_clear(a), ST_OK);
	assert_int_equal(evict_calls, 0);
	assert_int_equal(st_table_size(a), 0);
	st_table_stats_t sa, sb;
	st_table_stats(a, &sa);
	st_table_stats(b, &sb);
	assert_memory_equal(&sa, &sb, sizeof sa);
	for (int i = 0; i < N + 100; i++)
		assert_null(st_table_find(a, (uint64_t)i));
	/* the same lookups on both give the same rows, values and counters:
	 * a key seen once before the clear is not admitted on its first look */
	for (int i = 0; i < 2 * N; i += 3) {
		float *ra, *rb;
		int ca = st_table_get_or_create(a, (uint64_t)i, 7, &ra);
		int cb = st_table_get_or_create(b, (uint64_t)i, 7, &rb);
		assert_int_equal(ca, cb);
		assert_true((ra == NULL) == (rb == NULL));
	}
	for (int i = 0; i < 2 * N; i += 3) {
		float *ra, *rb;
		assert_int_equal(st_table_get_or_create(a, (uint64_t)i, 8, &ra),
				 st_table_get_or_create(b, (uint64_t)i, 8, &rb));
		assert_non_null(ra);
		assert_memory_equal(ra, rb, sizeof(float) * 4);
		assert_memory_equal(st_table_meta(a, ra), st_table_meta(b, rb), sizeof(st_table_meta_t));
	}
	st_table_stats(a, &sa);
	st_table_stats(b, &sb);
	assert_memory_equal(&sa, &sb, sizeof sa);
	st_table_destroy(a);
	st_table_destroy(b);
}

static void test_table_evict_older(void **state)
{
	(void)state;
	/* One shard, so every new key below lands where the free slots are. */
	st_table_opts_t o = { .dim = 4, .state_dim = 1, .seed = 3, .n_shards = 1 };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	enum { N = 20000 };
	float **first = malloc(sizeof(float *) * N);
	for (int i = 0; i < N; i++)      /* key i touched at step i % 100 */
		assert_int_equal(st_table_get_or_create(t, (uint64_t)i, (uint32_t)(i % 100),
							&first[i]), 1);
	/* keys with step < 40 are stale at now = 100, ttl = 60 (100 - 39 > 60) */
	for (int i = 0; i < N; i += 100) {   /* re-touch a few old ones */
		float *r;
		assert_int_equal(st_table_get_or_create(t, (uint64_t)i, 100, &r), 0);
	}
	uint64_t stale = 0;
	for (int i = 0; i < N; i++)
		stale += (i % 100) < 40 && (i % 100) != 0;
	assert_int_equal(st_table_evict_older(t, 100, 60), stale);
	assert_int_equal(st_table_size(t), N - stale);
	for (int i = 0; i < N; i++) {
		int gone = (i % 100) < 40 && (i % 100) != 0;
		float *r = st_table_find(t, (uint64_t)i);
		if (gone)
			assert_null(r);
		else
			assert_ptr_equal(r, first[i]);
	}
	assert_int_equal(st_table_evict_older(t, 100, 60), 0);   /* nothing left */
	/* new keys reuse the freed slots: no new memory, same row addresses */
	size_t bytes_before = st_table_row_bytes(t) * st_table_size(t);
	st_table_stats_t st;
	st_table_stats(t, &st);
	assert_int_equal(st.free_rows, stale);
	assert_int_equal(st.evicted, stale);
	for (uint64_t k = 0; k < stale; k++) {
		float *r;
		assert_int_equal(st_table_get_or_create(t, N + k, 101, &r), 1);
		int found = 0;
		for (int i = 0; i < N && !found; i++)
			found = r == first[i] && (i % 100) < 40 && (i % 100) != 0;
		assert_true(found);
		assert_int_equal(st_table_meta(t, r)->last_step, 101);
		assert_int_equal(st_table_meta(t, r)->freq, 1);
	}
	st_table_stats(t, &st);
	assert_int_equal(st.free_rows, 0);
	assert_int_equal(st_table_size(t), N);
	/* within a few bytes (integer division by rows) of the same memory */
	assert_true(st_table_row_bytes(t) * N <= bytes_before + N);
	free(first);
	st_table_destroy(t);
}

static void sum_keys(uint64_t key, float *row, void *arg)
{
	uint64_t *s = arg;
	s[0]++;
	s[1] += key;
	s[2] += row[0] == (float)(key % 4099);
}

static void test_table_evict_against_reference(void **state)
{
	(void)state;
	/* Random creating lookups over 6000 keys with the step rising, and an
	 * eviction every 50 steps; a plain array says what must be there. */
	enum { K = 6000, STEPS = 2000, TTL = 120 };
	st_table_opts_t o = { .dim = 2, .state_dim = 2, .seed = 4, .n_shards = 2 };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	int64_t *last = malloc(sizeof(int64_t) * K);   /* -1 = absent */
	for (int k = 0; k < K; k++)
		last[k] = -1;
	uint64_t s = 99, n_ref = 0, evicted = 0;
	for (uint32_t step = 1; step <= STEPS; step++) {
		for (int j = 0; j < 20; j++) {
			/* skewed: low keys are hot, high keys rare */
			uint64_t k = rnd(&s) % (1 + rnd(&s) % K);
			float *r;
			int rc = st_table_get_or_create(t, k, step, &r);
			assert_int_equal(rc, last[k] < 0);
			if (rc == 1) {
				r[0] = (float)(k % 4099);
				n_ref++;
			}
			assert_true(r[0] == (float)(k % 4099));
			last[k] = step;
		}
		if (step % 50 == 0) {
			uint64_t want = 0;
			for (int k = 0; k < K; k++) {
				if (last[k] >= 0 && (int64_t)step - last[k] > TTL) {
					last[k] = -1;
					want++;
				}
			}
			assert_int_equal(st_table_evict_older(t, step, TTL), want);
			n_ref -= want;
			evicted += want;
			assert_int_equal(st_table_size(t), n_ref);
		}
	}
	assert_true(evicted > 1000);    /* the test exercised eviction */
	uint64_t want_sum = 0;
	for (int k = 0; k < K; k++) {
		float *r = st_table_find(t, (uint64_t)k);
		if (last[k] < 0) {
			assert_null(r);
			continue;
		}
		want_sum += (uint64_t)k;
		assert_non_null(r);
		assert_int_equal(st_table_meta(t, r)->last_step, (uint32_t)last[k]);
	}
	uint64_t got[3] = { 0, 0, 0 };
	st_table_foreach(t, sum_keys, got);
	assert_int_equal(got[0], n_ref);
	assert_int_equal(got[1], want_sum);
	assert_int_equal(got[2], n_ref);
	free(last);
	st_table_destroy(t);
}

static void test_table_evict_forgets_candidates(void **state)
{
	(void)state;
	st_table_opts_t o = { .dim = 1, .admit_min_count = 2 };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	float *r;
	assert_int_equal(st_table_get_or_create(t, 7, 1, &r), 0);
	assert_int_equal(st_table_get_or_create(t, 8, 9, &r), 0);
	assert_int_equal(st_table_evict_older(t, 10, 5), 0);   /* no rows */
	st_table_stats_t st;
	st_table_stats(t, &st);
	assert_int_equal(st.candidates, 1);           /* key 7 forgotten, 8 kept */
	assert_int_equal(st_table_get_or_create(t, 7, 10, &r), 0);   /* counts from 1 */
	assert_int_equal(st_table_get_or_create(t, 8, 10, &r), 1);
	st_table_destroy(t);
}

/* ---- memory ------------------------------------------------------------ */

static void test_table_row_bytes_overhead(void **state)
{
	(void)state;
	/* dim 16 + element-wise adagrad (16 floats): 128 bytes of floats. The
	 * row adds last_step, freq and the key (16 bytes); the index 4 bytes per
	 * entry at a load between 3/8 and 3/4 (5.3 to 10.7 bytes a row); chunks
	 * and bookkeeping under 2 bytes at this size. */
	st_table_opts_t o = { .dim = 16, .state_dim = 16, .seed = 1 };
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	assert_int_equal(st_table_row_bytes(t), 128 + 16);   /* empty: the row stride */
	enum { N = 400000 };
	float *r;
	size_t worst = 0;
	for (int i = 0; i < N; i++) {
		assert_int_equal(st_table_get_or_create(t, (uint64_t)i * 31, 0, &r), 1);
		if (i >= 100000 && i % 10000 == 0) {
			size_t ov = st_table_row_bytes(t) - 128;
			if (ov > worst)
				worst = ov;
		}
	}
	assert_true(worst >= 16 + 5);
	assert_true(worst <= 16 + 11 + 2);
	st_table_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_insert_find_against_reference),
		cmocka_unit_test(test_table_concurrent_get_or_create),
		cmocka_unit_test(test_table_deterministic_init),
		cmocka_unit_test(test_table_growth_keeps_rows),
		cmocka_unit_test(test_table_reserve_keeps_rows),
		cmocka_unit_test(test_table_foreach_and_bad_opts),
		cmocka_unit_test(test_table_resolve_matches_single_calls),
		cmocka_unit_test(test_table_admit_min_count),
		cmocka_unit_test(test_table_admit_min_count_two_threads),
		cmocka_unit_test(test_table_admit_probability),
		cmocka_unit_test(test_table_evict_older),
		cmocka_unit_test(test_table_clear_is_a_new_table),
		cmocka_unit_test(test_table_evict_against_reference),
		cmocka_unit_test(test_table_evict_forgets_candidates),
		cmocka_unit_test(test_table_row_bytes_overhead),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
