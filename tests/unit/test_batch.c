/* test_batch.c — columnar batch allocation and key growth. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_reserve_keys_grows_and_keeps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
