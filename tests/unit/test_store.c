/* test_store.c — the host table in cache mode over the SSD tier: a
 * randomized property test against a reference map (lookups, updates, pins,
 * evictions, compactions, reopen), concurrent lookups of shared keys through
 * evictions, pins holding rows in RAM, and corrupt SSD records surfacing as
 * errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/store/table.h"

#define DIM 4
#define STATE 2
#define FL (DIM + STATE)

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static char g_dir[512];

static void make_dir(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(g_dir, sizeof g_dir, "%s/st-store-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(g_dir));
}

static void remove_dir(void)
{
	DIR *d = opendir(g_dir);
	if (!d)
		return;
	struct dirent *e;
	char p[1024];
	while ((e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
			unlink(p);
		}
	closedir(d);
	rmdir(g_dir);
}

static st_table_t *open_table(uint64_t cache_rows, uint32_t shards, int fresh)
{
	st_ssd_opts_t so = {
		.dir = g_dir,
		.payload_bytes = (FL + 2) * sizeof(float),
		.file_bytes = 64 << 10,
		.queue_depth = 8,
		.fresh = fresh,
	};
	st_table_opts_t o = {
		.dim = DIM, .state_dim = STATE, .seed = 7, .init_scale = 0.5f,
		.state_init = 0.25f, .n_shards = shards, .cache_rows = cache_rows, .ssd = &so,
	};
	st_table_t *t;
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	return t;
}

/* ---- property test ----------------------------------------------------- */

#define UNIVERSE 3000
#define HELD 6

typedef struct {
	int present;
	float v[FL];
	uint32_t freq, last;
} ref_t;

typedef struct {
	float **rows;
	uint32_t n;
} held_t;

static void check_row(const ref_t *r, st_table_t *t, float *row, uint64_t key)
{
	for (int j = 0; j < FL; j++)
		if (row[j] != r->v[j])
			fail_msg("key %llu float %d: %g, reference %g", (unsigned long long)key, j,
				 row[j], r->v[j]);
	st_table_meta_t *m = st_table_meta(t, row);
	if (m->freq != r->freq || m->last_step != r->last)
		fail_msg("key %llu meta: freq %u last %u, reference %u %u",
			 (unsigned long long)key, m->freq, m->last_step, r->freq, r->last);
}

typedef struct {
	ref_t *ref;
	st_table_t *t;
	uint64_t seen;
} all_t;

static void visit(uint64_t key, float *row, void *arg)
{
	all_t *a = arg;
	assert_true(key < UNIVERSE);
	assert_true(a->ref[key].present);
	check_row(&a->ref[key], a->t, row, key);
	a->seen++;
}

static void test_store_property_against_reference(void **state)
{
	(void)state;
	make_dir();
	/* An uncached table with the same seed gives every new row's values. */
	st_table_opts_t po = { .dim = DIM, .state_dim = STATE, .seed = 7, .init_scale = 0.5f,
			       .state_init = 0.25f };
	st_table_t *oracle;
	assert_int_equal(st_table_create(&oracle, &po), ST_OK);
	st_table_t *t = open_table(200, 4, 1);
	ref_t *ref = calloc(UNIVERSE, sizeof *ref);
	held_t held[HELD] = { 0 };
	uint64_t s = 42, keys[64];
	uint32_t step = 1;
	int reopens = 0, compactions = 0;
	for (int op = 0; op < 4000; op++) {
		uint64_t r = rnd(&s) % 100;
		if (r < 70) {
			/* A batch: unique keys, Zipf-like (small keys more often). */
			uint32_t n = 1 + (uint32_t)(rnd(&s) % 48), m = 0;
			int create = rnd(&s) % 8 != 0;
			while (m < n) {
				uint64_t k = rnd(&s) % UNIVERSE;
				if (rnd(&s) % 2)
					k %= 150;
				int dup = 0;
				for (uint32_t i = 0; i < m; i++)
					dup |= keys[i] == k;
				if (!dup)
					keys[m++] = k;
			}
			float **rows = malloc(sizeof(float *) * n);
			int rc = st_table_resolve(t, keys, n, step, create, rows);
			assert_true(rc >= 0);
			for (uint32_t i = 0; i < n; i++) {
				ref_t *e = &ref[keys[i]];
				if (!create && !e->present) {
					assert_null(rows[i]);
					continue;
				}
				assert_non_null(rows[i]);
				if (!e->present) {
					float *o;
					assert_int_equal(st_table_get_or_create(oracle, keys[i], 0, &o), 1);
					memcpy(e->v, o, sizeof e->v);
					e->present = 1;
				}
				if (create) {
					e->freq++;
					e->last = step;
				}
				check_row(e, t, rows[i], keys[i]);
				if (create)
					for (int j = 0; j < FL; j++) {
						rows[i][j] += (float)(rnd(&s) % 1000) * 0.001f;
						e->v[j] = rows[i][j];
					}
			}
			step++;
			/* Keep some batches pinned for a while, as the pipeline does. */
			int slot = (int)(rnd(&s) % HELD);
			if (held[slot].rows) {
				st_table_unpin(t, held[slot].rows, held[slot].n);
				free(held[slot].rows);
			}
			held[slot] = (held_t){ rows, n };
		} else if (r < 80) {
			int slot = (int)(rnd(&s) % HELD);
			if (held[slot].rows) {
				st_table_unpin(t, held[slot].rows, held[slot].n);
				free(held[slot].rows);
				held[slot].rows = NULL;
			}
		} else if (r < 90) {
			assert_true(st_ssd_compact_now(st_table_ssd(t)) >= 0);
			compactions++;
		} else if (r < 93) {
			for (int h = 0; h < HELD; h++)
				if (held[h].rows) {
					st_table_unpin(t, held[h].rows, held[h].n);
					free(held[h].rows);
					held[h].rows = NULL;
				}
			assert_int_equal(st_table_spill_all(t), ST_OK);
			st_table_destroy(t);
			t = open_table(200, 4, 0);
			reopens++;
		}
		/* Capacity: RAM rows beyond the budget only while pinned. */
		st_table_stats_t ts;
		st_table_stats(t, &ts);
		uint64_t pinned = 0;
		for (int h = 0; h < HELD; h++)
			pinned += held[h].rows ? held[h].n : 0;
		assert_true(ts.rows <= 200 + pinned + 4);
	}
	for (int h = 0; h < HELD; h++)
		if (held[h].rows) {
			st_table_unpin(t, held[h].rows, held[h].n);
			free(held[h].rows);
		}
	all_t a = { ref, t, 0 };
	assert_int_equal(st_table_foreach_all(t, visit, &a), ST_OK);
	uint64_t want = 0;
	for (int k = 0; k < UNIVERSE; k++)
		want += ref[k].present;
	assert_int_equal(a.seen, want);
	st_table_stats_t ts;
	st_table_stats(t, &ts);
	print_message("property: %llu keys, %d reopens, %d compactions, final %llu in RAM / %llu on SSD\n",
		      (unsigned long long)want, reopens, compactions,
		      (unsigned long long)ts.rows, (unsigned long long)ts.cold_rows);
	assert_true(reopens > 0 && compactions > 0);
	st_table_destroy(t);
	st_table_destroy(oracle);
	free(ref);
	remove_dir();
}

/* ---- concurrency --------------------------------------------------------- */

#define CKEYS 400
#define CROUNDS 300

typedef struct {
	st_table_t *t;
	int id;
	pthread_barrier_t *bar;
	uint32_t count[CKEYS];
} cthread_t;

static void *cworker(void *arg)
{
	cthread_t *c = arg;
	uint64_t s = (uint64_t)c->id * 1000 + 1, keys[32];
	float *rows[32];
	pthread_barrier_wait(c->bar);
	for (int round = 0; round < CROUNDS; round++) {
		uint32_t n = 0;
		while (n < 32) {
			uint64_t k = rnd(&s) % CKEYS;
			int dup = 0;
			for (uint32_t i = 0; i < n; i++)
				dup |= keys[i] == k;
			if (!dup)
				keys[n++] = k;
		}
		assert_true(st_table_resolve(c->t, keys, n, (uint32_t)round, 1, rows) >= 0);
		for (uint32_t i = 0; i < n; i++) {
			/* Both threads may hold the same row: count with atomics. */
			__atomic_fetch_add((uint32_t *)(void *)&rows[i][DIM], 1u, __ATOMIC_RELAXED);
			c->count[keys[i]]++;
		}
		st_table_unpin(c->t, rows, n);
	}
	return NULL;
}

typedef struct {
	uint32_t got[CKEYS];
} cvisit_t;

static void cvisit(uint64_t key, float *row, void *arg)
{
	cvisit_t *v = arg;
	uint32_t u;
	memcpy(&u, &row[DIM], sizeof u);
	v->got[key] = u;
}

static void test_store_concurrent_lookups_lose_nothing(void **state)
{
	(void)state;
	make_dir();
	st_table_t *t = open_table(96, 2, 1);
	/* Zero the counter float of every row first (as uint32 0). */
	for (uint64_t k = 0; k < CKEYS; k++) {
		float *r;
		assert_true(st_table_get_or_create(t, k, 0, &r) >= 0);
		memset(&r[DIM], 0, sizeof(float));
		st_table_unpin(t, &r, 1);
	}
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, 3);
	cthread_t c[3];
	pthread_t th[3];
	for (int i = 0; i < 3; i++) {
		memset(&c[i], 0, sizeof c[i]);
		c[i].t = t;
		c[i].id = i;
		c[i].bar = &bar;
	}
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, cworker, &c[i]);
	pthread_barrier_wait(&bar);
	/* The third party compacts while the workers run. */
	for (int i = 0; i < 20; i++)
		assert_true(st_ssd_compact_now(st_table_ssd(t)) >= 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cvisit_t v = { { 0 } };
	assert_int_equal(st_table_foreach_all(t, cvisit, &v), ST_OK);
	for (int k = 0; k < CKEYS; k++)
		if (v.got[k] != c[0].count[k] + c[1].count[k])
			fail_msg("key %d: %u increments stored, %u made", k, v.got[k],
				 c[0].count[k] + c[1].count[k]);
	st_table_stats_t ts;
	st_table_stats(t, &ts);
	assert_true(ts.loads > 0 && ts.spilled > 0);
	pthread_barrier_destroy(&bar);
	st_table_destroy(t);
	remove_dir();
}

/* ---- pins and segments ------------------------------------------------- */

static void test_store_pinned_rows_stay_and_segments_fill(void **state)
{
	(void)state;
	make_dir();
	st_table_t *t = open_table(64, 1, 1);
	uint64_t keys[32];
	float *pinned[32], *rows[1];
	for (int i = 0; i < 32; i++)
		keys[i] = 100000 + (uint64_t)i;
	assert_int_equal(st_table_resolve(t, keys, 32, 1, 1, pinned), 32);
	/* 1000 other keys pass through; the pinned rows must not move. */
	for (uint64_t k = 0; k < 1000; k++) {
		assert_true(st_table_resolve(t, &k, 1, 2, 1, rows) >= 0);
		st_table_unpin(t, rows, 1);
	}
	for (int i = 0; i < 32; i++)
		assert_ptr_equal(st_table_find(t, keys[i]), pinned[i]);
	/* New rows start in the LFU segment; a second use moves a row to the
	 * LRU head, and the LRU segment's overflow goes back to LFU. */
	for (uint64_t k = 900; k < 1000; k++) {
		assert_true(st_table_resolve(t, &k, 1, 3, 1, rows) >= 0);
		st_table_unpin(t, rows, 1);
	}
	for (int i = 0; i < 32; i++)
		assert_ptr_equal(st_table_find(t, keys[i]), pinned[i]);
	st_table_stats_t ts;
	st_table_stats(t, &ts);
	assert_true(ts.rows <= 64 + 1);
	assert_true(ts.lfu_rows > 0 && ts.lru_rows > 0);
	assert_true(ts.lru_to_lfu > 0 && ts.spilled > 0);
	st_table_unpin(t, pinned, 32);
	/* Frequently used keys survive a scan in the LFU segment: key 7 used
	 * often, then a scan of cold keys; 7 is still in RAM. */
	for (int rep = 0; rep < 50; rep++) {
		uint64_t k = 7;
		assert_true(st_table_resolve(t, &k, 1, 3, 1, rows) >= 0);
		st_table_unpin(t, rows, 1);
	}
	for (uint64_t k = 5000; k < 5040; k++) {
		assert_true(st_table_resolve(t, &k, 1, 4, 1, rows) >= 0);
		st_table_unpin(t, rows, 1);
	}
	assert_non_null(st_table_find(t, 7));
	st_table_destroy(t);
	remove_dir();
}

static void test_store_budget_smaller_than_pins_counts_over_budget(void **state)
{
	(void)state;
	make_dir();
	st_table_t *t = open_table(16, 1, 1);
	uint64_t keys[40];
	float *rows[40];
	for (int i = 0; i < 40; i++)
		keys[i] = (uint64_t)i;
	assert_int_equal(st_table_resolve(t, keys, 40, 1, 1, rows), 40);
	st_table_stats_t ts;
	st_table_stats(t, &ts);
	assert_int_equal(ts.rows, 40);
	assert_true(ts.over_budget > 0);
	st_table_unpin(t, rows, 40);
	uint64_t k = 1000;
	assert_true(st_table_resolve(t, &k, 1, 2, 1, rows) >= 0);
	st_table_stats(t, &ts);
	assert_true(ts.rows <= 17);
	st_table_unpin(t, rows, 1);
	st_table_destroy(t);
	remove_dir();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_property_against_reference),
		cmocka_unit_test(test_store_concurrent_lookups_lose_nothing),
		cmocka_unit_test(test_store_pinned_rows_stay_and_segments_fill),
		cmocka_unit_test(test_store_budget_smaller_than_pins_counts_over_budget),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
