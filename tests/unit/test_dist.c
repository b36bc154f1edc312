/*
 * test_dist.c — the sharded store's owner side (ops/dist/serve.c) without a
 * network: synchronous steps are applied only once every rank's list has
 * arrived, summed in rank order; malformed, repeated and late pushes are
 * rejected and change nothing; asynchronous pushes apply on arrival; the
 * fp16 codec's error stays within half an fp16 step of the row's scale.
 * The multi-process paths run in tests/e2e/dist.sh.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/dist/dist_internal.h"
#include "ops/optim/optim.h"
#include "runtime/err.h"

enum { DIM = 4 };

typedef struct fix {
	st_dist_t d;
	st_table_t *t;
	st_optim_t opt;
	st_sync_env_t env;
} fix_t;

static fix_t *fix_new(int P)
{
	fix_t *f = calloc(1, sizeof *f);
	st_optim_cfg_t oc = { .name = "sgd", .lr = 0.5 };
	assert_int_equal(st_optim_init(&f->opt, &oc), ST_OK);
	st_table_opts_t to = { .dim = DIM, .state_dim = 0, .seed = 1, .init_scale = 0.1f };
	assert_int_equal(st_table_create(&f->t, &to), ST_OK);
	f->env = (st_sync_env_t){ .sparse_opt = &f->opt, .dense_opt = &f->opt };
	st_dist_t *d = &f->d;
	d->rank = 0;
	d->P = P;
	d->owners = P;
	d->n_tables = 1;
	d->tables[0] = f->t;
	d->dim[0] = DIM;
	d->env = &f->env;
	d->done = calloc((size_t)P, sizeof *d->done);
	d->trow = malloc(sizeof(float) * DIM);
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	return f;
}

static void fix_free(fix_t *f)
{
	st_dist_t *d = &f->d;
	while (d->steps) {
		step_acc_t *a = d->steps;
		d->steps = a->next;
		st__dist_step_free(a, d->P);
	}
	free(d->done);
	free(d->trow);
	free(d->rscratch);
	free(d->mkey);
	free(d->spos);
	free(d->mkeys);
	free(d->mslot);
	free(d->macc);
	free(d->mtab);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	st_table_destroy(f->t);
	free(f);
}

/* A PUSH message of n keys with gradients g[i * DIM ..]. */
static void *push_msg(uint64_t step, int sync, const uint64_t *keys, uint32_t n, const float *g,
		      size_t *len)
{
	size_t bytes = sizeof(wire_hdr_t) + 8 * (size_t)n + wire_pad8(n) +
		       sizeof(float) * DIM * (size_t)n;
	uint8_t *m = calloc(1, bytes);
	wire_hdr_t *h = (wire_hdr_t *)m;
	*h = (wire_hdr_t){ .type = MSG_PUSH, .n = n, .step = step, .t = 1,
			   .flags = sync ? WF_SYNC : 0 };
	memcpy(m + sizeof *h, keys, 8 * (size_t)n);
	memcpy(m + sizeof *h + 8 * (size_t)n + wire_pad8(n), g, sizeof(float) * DIM * n);
	*len = bytes;
	return m;
}

static void row_of(fix_t *f, uint64_t key, float *out)
{
	float *r = NULL;
	assert_true(st_table_resolve(f->t, &key, 1, 0, 1, &r) >= 0);
	assert_non_null(r);
	memcpy(out, r, sizeof(float) * DIM);
}

static int push(fix_t *f, int from, uint64_t step, int sync, const uint64_t *keys, uint32_t n,
		const float *g)
{
	size_t len;
	void *m = push_msg(step, sync, keys, n, g, &len);
	return st__dist_handle(&f->d, m, len, from);
}

static void test_sync_step_waits_and_sums_in_rank_order(void **state)
{
	fix_t *f = fix_new(3);
	const uint64_t keys[2] = { 11, 22 };
	float before[2][DIM];
	row_of(f, 11, before[0]);
	row_of(f, 22, before[1]);
	/* Key 11's gradients show the order of the sum in float: rank order
	 * (1e8 + -1e8) + 1 = 1; the arrival order below, (1 + -1e8) + 1e8,
	 * gives 0. */
	float g0[2 * DIM], g1[2 * DIM], g2[DIM];
	for (int j = 0; j < DIM; j++) {
		g0[j] = 1e8f; g0[DIM + j] = 0.25f;
		g1[j] = -1e8f; g1[DIM + j] = 0.5f;
		g2[j] = 1.0f;
	}
	/* Ranks 2 and 1 first: nothing is applied without rank 0. */
	assert_int_equal(push(f, 2, 0, 1, keys, 1, g2), ST_OK);
	assert_int_equal(push(f, 1, 0, 1, keys, 2, g1), ST_OK);
	assert_int_equal(f->d.applied, 0);
	float now[DIM];
	row_of(f, 11, now);
	assert_memory_equal(now, before[0], sizeof now);
	assert_int_equal(push(f, 0, 0, 1, keys, 2, g0), ST_OK);
	assert_int_equal(f->d.applied, 1);
	volatile float big = 1e8f;
	float sum = (big + -big) + 1.0f;
	assert_true(sum == 1.0f);
	row_of(f, 11, now);
	for (int j = 0; j < DIM; j++)
		assert_true(now[j] == before[0][j] - 0.5f * sum);
	row_of(f, 22, now);
	for (int j = 0; j < DIM; j++)
		assert_true(now[j] == before[1][j] - 0.5f * (0.25f + 0.5f));
	fix_free(f);
}

static void test_bad_pushes_change_nothing(void **state)
{
	fix_t *f = fix_new(2);
	const uint64_t keys[1] = { 7 };
	float g[DIM] = { 1, 1, 1, 1 }, before[DIM], now[DIM];
	row_of(f, 7, before);
	size_t len;
	/* Truncated. */
	void *m = push_msg(0, 0, keys, 1, g, &len);
	assert_int_equal(st__dist_handle(&f->d, m, len - 4, 1), ST_EPEER);
	/* Longer than its key count says (trailing bytes). */
	m = push_msg(0, 0, keys, 1, g, &len);
	void *longer = calloc(1, len + 8);
	memcpy(longer, m, len);
	free(m);
	assert_int_equal(st__dist_handle(&f->d, longer, len + 8, 1), ST_EPEER);
	/* A table that does not exist. */
	m = push_msg(0, 0, keys, 1, g, &len);
	((uint8_t *)m)[sizeof(wire_hdr_t) + 8] = 3;
	assert_int_equal(st__dist_handle(&f->d, m, len, 1), ST_EPEER);
	/* A key count that does not fit the length. */
	m = push_msg(0, 0, keys, 1, g, &len);
	((wire_hdr_t *)m)->n = 1u << 30;
	assert_int_equal(st__dist_handle(&f->d, m, len, 1), ST_EPEER);
	/* Shorter than a header, and an unknown type. */
	m = push_msg(0, 0, keys, 1, g, &len);
	assert_int_equal(st__dist_handle(&f->d, m, 8, 1), ST_EPEER);
	m = push_msg(0, 0, keys, 1, g, &len);
	((wire_hdr_t *)m)->type = 0x12345678;
	assert_int_equal(st__dist_handle(&f->d, m, len, 1), ST_EPEER);
	row_of(f, 7, now);
	assert_memory_equal(now, before, sizeof now);
	/* A second list from one rank for one step, and a step already done. */
	assert_int_equal(push(f, 1, 0, 1, keys, 1, g), ST_OK);
	assert_int_equal(push(f, 1, 0, 1, keys, 1, g), ST_EPEER);
	assert_int_equal(push(f, 0, 0, 1, keys, 1, g), ST_OK);
	assert_int_equal(f->d.applied, 1);
	row_of(f, 7, before);
	assert_int_equal(push(f, 1, 0, 1, keys, 1, g), ST_EPEER);
	row_of(f, 7, now);
	assert_memory_equal(now, before, sizeof now);
	fix_free(f);
}

static void test_async_applies_on_arrival(void **state)
{
	fix_t *f = fix_new(2);
	const uint64_t keys[1] = { 5 };
	float g[DIM] = { 1, 2, 3, 4 }, before[DIM], now[DIM];
	row_of(f, 5, before);
	assert_int_equal(push(f, 1, 0, 0, keys, 1, g), ST_OK);
	row_of(f, 5, now);
	for (int j = 0; j < DIM; j++)
		assert_true(now[j] == before[j] - 0.5f * g[j]);
	assert_int_equal(f->d.applied, 0);
	fix_free(f);
}

static void test_f16_codec(void **state)
{
	enum { N = 37 };
	float x[N], y[N];
	uint8_t buf[4 + 2 * N + 4];
	uint64_t s = 42;
	for (int rep = 0; rep < 100; rep++) {
		float m = 0;
		for (int j = 0; j < N; j++) {
			s = s * 6364136223846793005ULL + 1442695040888963407ULL;
			x[j] = (float)((int64_t)(s >> 11) % 2000001 - 1000000) * powf(10, rep % 7 - 6);
			m = fabsf(x[j]) > m ? fabsf(x[j]) : m;
		}
		assert_int_equal(wire_row_bytes(N, 1), 4 + ((2 * N + 3) & ~3));
		st__wire_f16_encode(x, N, buf);
		st__wire_f16_decode(buf, N, y);
		/* fp16 of a value in [-1, 1] is within 2^-11 relative, or 2^-25
		 * absolute near zero (subnormals), of the value. */
		for (int j = 0; j < N; j++)
			assert_true(fabsf(y[j] - x[j]) <= m * (0x1p-11f + 0x1p-24f));
	}
	float z[N] = { 0 };
	st__wire_f16_encode(z, N, buf);
	st__wire_f16_decode(buf, N, y);
	assert_memory_equal(y, z, sizeof z);
	/* Exact values survive: halves of the scale, and the scale itself. */
	float e[4] = { 1.5f, -0.75f, 0.375f, 3.0f }, o[4];
	uint8_t eb[4 + 8];
	st__wire_f16_encode(e, 4, eb);
	st__wire_f16_decode(eb, 4, o);
	assert_memory_equal(o, e, sizeof e);
	/* Round to nearest even at a tie: 1 + 2^-11 is halfway between 1 and
	 * 1 + 2^-10, and goes to 1 (even); 1 + 3 * 2^-11 goes to 1 + 2^-9. */
	float t[2] = { 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f }, big[3];
	uint8_t tb[4 + 8];
	float tt[3] = { 1.0f, t[0] / 2, t[1] / 2 };     /* scale 1: values as they are */
	st__wire_f16_encode(tt, 3, tb);
	st__wire_f16_decode(tb, 3, big);
	assert_true(big[1] == 0.5f);
	assert_true(big[2] == 0.5f + 0x1p-10f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sync_step_waits_and_sums_in_rank_order),
		cmocka_unit_test(test_bad_pushes_change_nothing),
		cmocka_unit_test(test_async_applies_on_arrival),
		cmocka_unit_test(test_f16_codec),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
