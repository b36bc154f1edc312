/* test_batch.c — columnar batch allocation, key growth, key dedup. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "runtime/batch.h"
#include "runtime/err.h"

static void test_batch_reserve_keys_grows_and_keeps(void **state)
{
	(void)state;
	st_batch_t *b = NULL;
	assert_int_equal(st_batch_create(&b, 4, 2, 3, 2), ST_OK);
	for (uint32_t i = 0; i < 2; i++) {
		b->keys[i] = 100 + i;
		b->key_slot[i] = (uint16_t)i;
		b->key_val[i] = 1.0f;
	}
	b->n = 1;
	b->row_off[1] = 2;
	assert_int_equal(st_batch_reserve_keys(b, 1000), ST_OK);
	assert_true(b->key_cap >= 1002);
	assert_int_equal(b->keys[0], 100);
	assert_int_equal(b->keys[1], 101);
	assert_int_equal(b->key_slot[1], 1);
	assert_int_equal(st_batch_nkeys(b), 2);
	st_batch_clear(b);
	assert_int_equal(b->n, 0);
	assert_int_equal(st_batch_nkeys(b), 0);
	st_batch_destroy(b);
}

/* Unique keys in first-occurrence order, each occurrence's index, the slot
 * of each key's first occurrence; the scratch is reused across batches and
 * grows; a key of 0 is a key like any other. */
static void test_batch_dedup_first_occurrence(void **state)
{
	(void)state;
	st_batch_t *b = NULL;
	assert_int_equal(st_batch_create(&b, 4, 0, 3, 8), ST_OK);
	const uint64_t keys[8] = { 7, 3, 7, 0, 3, 9, 0, 7 };
	const uint16_t slot[8] = { 0, 1, 2, 0, 1, 2, 1, 0 };
	for (int i = 0; i < 8; i++) {
		b->keys[i] = keys[i];
		b->key_slot[i] = slot[i];
		b->key_val[i] = 1.0f;
	}
	b->n = 2;
	b->row_off[1] = 4;
	b->row_off[2] = 8;
	st_dedup_t t = { 0 };
	uint16_t *us = NULL;
	assert_int_equal(st_batch_dedup(&t, b, 1, &us), ST_OK);
	assert_int_equal(b->n_uniq, 4);
	const uint64_t want_u[4] = { 7, 3, 0, 9 };
	const uint32_t want_k[8] = { 0, 1, 0, 2, 1, 3, 2, 0 };
	const uint16_t want_s[4] = { 0, 1, 0, 2 };
	for (int u = 0; u < 4; u++) {
		assert_int_equal(b->uniq[u], want_u[u]);
		assert_int_equal(us[u], want_s[u]);
	}
	for (int k = 0; k < 8; k++)
		assert_int_equal(b->key_idx[k], want_k[k]);
	((uint8_t *)(us + 8))[7] = 1;   /* the extra room is there (ASan checks) */
	free(us);
	/* A bigger batch through the same scratch. */
	assert_int_equal(st_batch_reserve_keys(b, 1000), ST_OK);
	for (uint32_t i = 0; i < 1000; i++) {
		b->keys[i] = i % 250;
		b->key_slot[i] = 0;
	}
	b->n = 1;
	b->row_off[1] = 1000;
	assert_int_equal(st_batch_dedup(&t, b, 0, &us), ST_OK);
	assert_int_equal(b->n_uniq, 250);
	assert_int_equal(b->key_idx[999], 249);
	free(us);
	st_dedup_fini(&t);
	st_batch_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_reserve_keys_grows_and_keeps),
		cmocka_unit_test(test_batch_dedup_first_occurrence),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
