/*
 * test_dist.c — the sharded store's owner side (ops/dist/serve.c) without a
 * network: synchronous steps are applied only once every rank's list has
 * arrived, summed in rank order; malformed, repeated and late pushes are
 * rejected and change nothing; asynchronous pushes apply on arrival (a
 * message's keys looked up in one batch, updated in message order), and a
 * worker step's read (steprows.c) sees them, creates nothing, and rejects
 * malformed requests; the
 * fp16 codec's error stays within half an fp16 step of the row's scale;
 * the gradient buffers of gba and bsp (psbuf.c) apply one step per M
 * contributions, drop row gradients by their IDs' tags, average rows over
 * their touchers (gba) or the step's contributions (bsp), drop stale dense
 * gradients, and reject contributions that disagree on M or carry a token
 * from the future; hop_bs's clock rule (hop.c) holds a worker's reply
 * while it is more than b gradients ahead of the slowest active worker;
 * hop_bw's quorum (hop.c) closes a step with all but b active ranks and
 * drops the late ones, and the owners apply its rows once the K kept
 * ranks' lists are in.
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
#include "ops/nn/model.h"
#include "ops/optim/optim.h"
#include "runtime/err.h"

enum { DIM = 4 };

typedef struct fix {
	st_dist_t d;
	st_table_t *t;
	st_optim_t opt;
} fix_t;

static fix_t *fix_new(int P)
{
	fix_t *f = calloc(1, sizeof *f);
	st_optim_cfg_t oc = { .name = "sgd", .lr = 0.5 };
	assert_int_equal(st_optim_init(&f->opt, &oc), ST_OK);
	st_table_opts_t to = { .dim = DIM, .state_dim = 0, .seed = 1, .init_scale = 0.1f };
	assert_int_equal(st_table_create(&f->t, &to), ST_OK);
	st_dist_t *d = &f->d;
	d->p = (st_algo_params_t){ .sparse_opt = &f->opt, .dense_opt = &f->opt };
	d->n_workers = 1;
	d->rank = 0;
	d->P = P;
	d->owners = P;
	d->n_tables = 1;
	d->tables[0] = f->t;
	d->dim[0] = DIM;
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
	st__dist_row_scratch_free(d);
	free(d->mkeys);
	free(d->mslot);
	free(d->macc);
	free(d->mtab);
	st__dist_buf_free(d);
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

/* The owner updates a step's rows one table at a time (serve.c,
 * st__dist_update_rows): with two tables, the same key in each takes its
 * own table's sum, and a key its table does not hold (never pulled, so
 * never admitted) is skipped, not created. Both paths: a sync step
 * (apply_step) and a bsp buffer step (psbuf.c). */
static void tables_case(int buffered)
{
	fix_t *f = fix_new(2);
	st_table_t *t1;
	st_table_opts_t to = { .dim = DIM, .state_dim = 0, .seed = 2, .init_scale = 0.1f };
	assert_int_equal(st_table_create(&t1, &to), ST_OK);
	f->d.n_tables = 2;
	f->d.tables[1] = t1;
	f->d.dim[1] = DIM;
	const uint64_t keys[3] = { 11, 11, 33 };
	float b0[DIM], b1[DIM], *r = NULL, g[3 * DIM];
	row_of(f, 11, b0);
	assert_true(st_table_resolve(t1, &keys[1], 1, 0, 1, &r) >= 0);
	memcpy(b1, r, sizeof b1);
	for (int j = 0; j < DIM; j++) {
		g[j] = 1.0f;             /* table 0, key 11 */
		g[DIM + j] = 2.0f;       /* table 1, key 11 */
		g[2 * DIM + j] = 4.0f;   /* table 1, key 33: not held */
	}
	for (int from = 0; from < 2; from++) {
		size_t len;
		wire_hdr_t *h = push_msg(0, !buffered, keys, 3, g, &len);
		uint8_t *tab = (uint8_t *)(h + 1) + 8 * 3;
		tab[0] = 0;
		tab[1] = tab[2] = 1;
		if (buffered) {
			h->flags |= WF_BUF;
			h->stamp = 2;
			h->pad = ST_ALGO_GBA_NO_TOL;
		}
		assert_int_equal(st__dist_handle(&f->d, h, len, from), ST_OK);
	}
	/* sync: the sum of both ranks' gradients; bsp: their mean. */
	const float s0 = buffered ? 1.0f : 2.0f, s1 = buffered ? 2.0f : 4.0f;
	float now[DIM];
	row_of(f, 11, now);
	for (int j = 0; j < DIM; j++)
		assert_true(now[j] == b0[j] - 0.5f * s0);
	r = NULL;
	assert_int_equal(st_table_resolve(t1, &keys[1], 1, 0, 0, &r), 0);
	assert_non_null(r);
	for (int j = 0; j < DIM; j++)
		assert_true(r[j] == b1[j] - 0.5f * s1);
	r = NULL;
	assert_int_equal(st_table_resolve(t1, &keys[2], 1, 0, 0, &r), 0);
	assert_null(r);
	fix_free(f);
	st_table_destroy(t1);
}

static void test_step_updates_rows_of_every_table(void **state)
{
	(void)state;
	tables_case(0);
	tables_case(1);
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

/* An asynchronous PUSH of several keys is looked up in one batch (serve.c,
 * apply_async) and updates as key-by-key updates did: a key twice in the
 * message twice, in message order; a key without a row is not created. */
static void test_async_push_batch_updates_in_order(void **state)
{
	fix_t *f = fix_new(2);
	const uint64_t keys[4] = { 5, 6, 5, 99 };
	const float g[4 * DIM] = { 1, 2, 3, 4, -1, 0.5f, 2, 8, 0.25f, 4, -2, 1, 9, 9, 9, 9 };
	float r5[DIM], r6[DIM], now[DIM];
	row_of(f, 5, r5);
	row_of(f, 6, r6);
	assert_int_equal(push(f, 1, 0, 0, keys, 4, g), ST_OK);
	row_of(f, 5, now);
	for (int j = 0; j < DIM; j++)
		assert_true(now[j] == (r5[j] - 0.5f * g[j]) - 0.5f * g[2 * DIM + j]);
	row_of(f, 6, now);
	for (int j = 0; j < DIM; j++)
		assert_true(now[j] == r6[j] - 0.5f * g[DIM + j]);
	float *row = NULL;
	assert_int_equal(st_table_resolve(f->t, &keys[3], 1, 0, 0, &row), 0);
	assert_null(row);
	fix_free(f);
}

/* A worker step's read (steprows.c) of keys this rank owns: it sees the
 * pushes applied before it, creates no row, and says which rows are gone. */
static void test_step_pull_reads_applied_pushes(void **state)
{
	fix_t *f = fix_new(1);
	st_dist_t *d = &f->d;
	st_dist_stepbuf_t *s = st_dist_stepbuf_create(d, 3);
	assert_non_null(s);
	const uint64_t keys[3] = { 5, 99, 6 };
	const uint8_t tab[3] = { 0, 0, 0 };
	const uint32_t idx[3] = { 0, 1, 2 };
	float g[DIM] = { 1, 2, 3, 4 }, r5[DIM], r6[DIM], buf[3 * DIM];
	row_of(f, 5, r5);
	row_of(f, 6, r6);
	assert_int_equal(push(f, 0, 0, 0, keys, 1, g), ST_OK);
	for (int j = 0; j < DIM; j++)
		r5[j] -= 0.5f * g[j];
	for (int j = 0; j < 3 * DIM; j++)
		buf[j] = -7.0f;
	uint8_t ok[3] = { 9, 9, 9 };
	assert_int_equal(st_dist_pull_step(d, s, keys, tab, idx, 3, 1, buf, DIM, ok), ST_OK);
	assert_int_equal(ok[0], 1);
	assert_int_equal(ok[1], 0);
	assert_int_equal(ok[2], 1);
	assert_memory_equal(buf, r5, sizeof r5);
	assert_true(buf[DIM] == -7.0f);            /* untouched */
	assert_memory_equal(buf + 2 * DIM, r6, sizeof r6);
	float *row = NULL;
	assert_int_equal(st_table_resolve(f->t, &keys[1], 1, 0, 0, &row), 0);
	assert_null(row);                          /* not created */
	/* Only the positions asked for are written. */
	const uint32_t one[1] = { 2 };
	ok[0] = ok[1] = ok[2] = 9;
	assert_int_equal(st_dist_pull_step(d, s, keys, tab, one, 1, 1, buf, DIM, ok), ST_OK);
	assert_int_equal(ok[0], 9);
	assert_int_equal(ok[2], 1);
	st_dist_stepbuf_destroy(s);
	assert_null(st_dist_stepbuf_create(d, CH_STEP_MAX_WORKERS));
	fix_free(f);
}

/* A PULL flagged as a worker step that names no valid reply channel, waits
 * for a step or asks to create rows is dropped. */
static void test_bad_step_pulls_are_dropped(void **state)
{
	fix_t *f = fix_new(2);
	const uint64_t key = 11;
	struct { wire_hdr_t h; uint64_t k; uint8_t t[8]; } m0 = {
		.h = { .type = MSG_PULL, .n = 1, .flags = WF_STEP }, .k = key,
	};
	const wire_hdr_t bad[3] = {
		{ .type = MSG_PULL, .n = 1, .flags = WF_STEP, .worker = CH_STEP_MAX_WORKERS },
		{ .type = MSG_PULL, .n = 1, .flags = WF_STEP, .step = 1 },
		{ .type = MSG_PULL, .n = 1, .flags = WF_STEP | WF_CREATE },
	};
	for (int i = 0; i < 3; i++) {
		void *m = malloc(sizeof m0);
		m0.h = bad[i];
		memcpy(m, &m0, sizeof m0);
		assert_int_equal(st__dist_handle(&f->d, m, sizeof m0, 1), ST_EPEER);
	}
	assert_int_equal(f->d.n_def, 0);
	float *row = NULL;
	assert_int_equal(st_table_resolve(f->t, &key, 1, 0, 0, &row), 0);
	assert_null(row);
	fix_free(f);
}

/* A buffered PUSH (psbuf.c): M, tolerance (UINT32_MAX: none), gba or bsp. */
static int bpush(fix_t *f, uint64_t token, uint32_t M, uint32_t tol, int perid,
		 const uint64_t *keys, uint32_t n, const float *g)
{
	size_t len;
	wire_hdr_t *h = push_msg(token, 0, keys, n, g, &len);
	h->flags |= WF_BUF | (perid ? WF_PERID : 0);
	h->stamp = M;
	h->pad = tol;
	return st__dist_handle(&f->d, h, len, 1);
}

static void fill(float *g, float v)
{
	for (int j = 0; j < DIM; j++)
		g[j] = v;
}

static void expect_row(fix_t *f, uint64_t key, const float *before, float delta)
{
	float now[DIM];
	row_of(f, key, now);
	for (int j = 0; j < DIM; j++)
		assert_true(now[j] == before[j] - delta);
}

static void test_gba_rows_buffer_tags_and_averages(void **state)
{
	fix_t *f = fix_new(2);
	const uint64_t k11[1] = { 11 }, both[2] = { 11, 22 }, k22[1] = { 22 };
	float b11[DIM], b22[DIM], g[2 * DIM];
	row_of(f, 11, b11);
	row_of(f, 22, b22);
	/* Step 0 (M = 2, tolerance 0): nothing until the second contribution;
	 * key 11 averaged over its 2 touchers, key 22 over its one. */
	fill(g, 1.0f);
	assert_int_equal(bpush(f, 0, 2, 0, 1, k11, 1, g), ST_OK);
	expect_row(f, 11, b11, 0);
	fill(g, 3.0f);
	fill(g + DIM, 2.0f);
	assert_int_equal(bpush(f, 0, 2, 0, 1, both, 2, g), ST_OK);
	assert_int_equal(f->d.buf.rows.k, 1);
	expect_row(f, 11, b11, 0.5f * 2.0f);          /* sgd lr 0.5, (1 + 3) / 2 */
	expect_row(f, 22, b22, 0.5f * 2.0f);
	row_of(f, 11, b11);
	row_of(f, 22, b22);
	/* Step 1: a contribution read at step 0 is one step stale for keys 11
	 * and 22 (updated by step 0): beyond tolerance 0, dropped, but it still
	 * counts as a toucher of 11; one read at step 1 is fresh. An empty
	 * contribution counts toward M. */
	fill(g, 5.0f);
	assert_int_equal(bpush(f, 0, 2, 0, 1, k11, 1, g), ST_OK);
	fill(g, 1.0f);
	assert_int_equal(bpush(f, 1, 2, 0, 1, k11, 1, g), ST_OK);
	expect_row(f, 11, b11, 0.5f * (1.0f / 2));
	assert_int_equal(f->d.st.buf_rows_dropped, 1);
	assert_int_equal(bpush(f, 1, 2, 0, 1, k22, 0, g), ST_OK);
	/* Step 2 with tolerance 0: key 22's tag is step 0, so a contribution
	 * read at step 1 is fresh for it although it is one step old. */
	fill(g, 4.0f);
	assert_int_equal(bpush(f, 1, 2, 0, 1, k22, 1, g), ST_OK);
	assert_int_equal(f->d.buf.rows.k, 3);
	expect_row(f, 22, b22, 0.5f * 4.0f);
	/* Disagreeing parameters and a token from the future change nothing. */
	row_of(f, 22, b22);
	assert_int_equal(bpush(f, 0, 3, 0, 1, k22, 1, g), ST_EPEER);
	assert_int_equal(bpush(f, 0, 2, 1, 1, k22, 1, g), ST_EPEER);
	assert_int_equal(bpush(f, 0, 2, 0, 0, k22, 1, g), ST_EPEER);
	assert_int_equal(bpush(f, 9, 2, 0, 1, k22, 1, g), ST_EPEER);
	assert_int_equal(f->d.buf.rows.count, 0);
	/* A partial buffer is applied by a flush (the end of the job). */
	assert_int_equal(bpush(f, 3, 2, 0, 1, k22, 1, g), ST_OK);
	expect_row(f, 22, b22, 0);
	assert_int_equal(st__dist_buf_flush(&f->d), ST_OK);
	expect_row(f, 22, b22, 0.5f * 4.0f);
	fix_free(f);
}

static void test_bsp_rows_average_over_the_step(void **state)
{
	fix_t *f = fix_new(2);
	const uint64_t k11[1] = { 11 };
	float b11[DIM], g[DIM];
	row_of(f, 11, b11);
	/* b = 3: key 11 in two of three contributions, the sum over 3; no
	 * staleness check (bsp), so an old token is kept. */
	fill(g, 3.0f);
	assert_int_equal(bpush(f, 0, 3, UINT32_MAX, 0, k11, 1, g), ST_OK);
	assert_int_equal(bpush(f, 0, 3, UINT32_MAX, 0, k11, 0, g), ST_OK);
	expect_row(f, 11, b11, 0);
	assert_int_equal(bpush(f, 0, 3, UINT32_MAX, 0, k11, 1, g), ST_OK);
	expect_row(f, 11, b11, 0.5f * (6.0f / 3));
	row_of(f, 11, b11);
	for (int i = 0; i < 3; i++)
		assert_int_equal(bpush(f, 0, 3, UINT32_MAX, 0, k11, 1, g), ST_OK);
	expect_row(f, 11, b11, 0.5f * 3.0f);
	assert_int_equal(f->d.st.buf_rows_dropped, 0);
	fix_free(f);
}

/* Dense parameters on rank 0 (an LR model of at most 8 floats, all 1, SGD
 * lr 0.5): the model to destroy. */
static st_model_t *dense_fix(fix_t *f, uint64_t *dt, float *dstate)
{
	st_model_cfg_t mc;
	memset(&mc, 0, sizeof mc);
	mc.type = (char *)"lr";
	mc.emb_dim = 1;
	st_model_t *model;
	assert_int_equal(st_model_create(&model, &mc, 2, 1, 1), ST_OK);
	float *p = st_model_params(model);
	const size_t np = st_model_nparams(model);
	assert_true(np >= 1 && np <= 8);
	for (size_t j = 0; j < np; j++)
		p[j] = 1.0f;
	f->d.p.model = model;
	f->d.p.params = p;
	f->d.p.nparams = np;
	f->d.dense_t = dt;
	f->d.dense_state = dstate;
	return model;
}

static void test_gba_dense_drops_stale_gradients(void **state)
{
	fix_t *f = fix_new(2);
	uint64_t dt = 0;
	float dstate[8] = { 0 };
	st_model_t *model = dense_fix(f, &dt, dstate);
	float *p = f->d.p.params;
	const size_t np = f->d.p.nparams;
	wire_hdr_t h = { .type = MSG_DENSE, .stamp = 2, .pad = 1,
			 .flags = WF_BUF | WF_PERID | 1 };
	float g[8];
	uint64_t tok, age;
	int dropped;
	/* Two fresh gradients (2 and 4): one step of their mean, 3. */
	for (int i = 0; i < 2; i++) {
		for (size_t j = 0; j < np; j++)
			g[j] = 2.0f + 2.0f * (float)i;
		h.step = 0;
		assert_int_equal(st__dist_buf_dense(&f->d, &h, g, &tok, &age, &dropped), ST_OK);
		assert_int_equal(dropped, 0);
	}
	assert_int_equal(tok, 1);
	assert_int_equal(dt, 1);
	for (size_t j = 0; j < np; j++)
		assert_true(p[j] == 1.0f - 0.5f * 3.0f);
	/* Step 1 (tolerance 1), step 2 (a token-0 gradient is 2 stale). */
	for (size_t j = 0; j < np; j++)
		g[j] = 1.0f;
	h.step = 0;
	assert_int_equal(st__dist_buf_dense(&f->d, &h, g, &tok, &age, &dropped), ST_OK);
	assert_true(age == 1 && !dropped);
	h.step = 1;
	assert_int_equal(st__dist_buf_dense(&f->d, &h, g, &tok, &age, &dropped), ST_OK);
	assert_int_equal(tok, 2);
	const float after1 = 1.0f - 0.5f * 3.0f - 0.5f * 1.0f;
	for (size_t j = 0; j < np; j++)
		assert_true(p[j] == after1);
	h.step = 0;
	assert_int_equal(st__dist_buf_dense(&f->d, &h, g, &tok, &age, &dropped), ST_OK);
	assert_true(age == 2 && dropped);
	h.step = 2;
	for (size_t j = 0; j < np; j++)
		g[j] = 4.0f;
	assert_int_equal(st__dist_buf_dense(&f->d, &h, g, &tok, &age, &dropped), ST_OK);
	/* The dropped gradient counts as zero in the mean over the step's 2. */
	for (size_t j = 0; j < np; j++)
		assert_true(p[j] == after1 - 0.5f * (4.0f / 2));
	/* A fetch (no gradient) only returns the token; a future token is bad. */
	h.flags &= ~1u;
	assert_int_equal(st__dist_buf_dense(&f->d, &h, NULL, &tok, &age, &dropped), ST_OK);
	assert_int_equal(tok, 3);
	h.step = 7;
	assert_int_equal(st__dist_buf_dense(&f->d, &h, NULL, &tok, &age, &dropped), ST_EINVAL);
	st__dist_buf_free(&f->d);
	st_model_destroy(model);
	fix_free(f);
}

static int n_replies;
static int reply_count(st_dist_t *d, int to, uint32_t w, uint64_t req)
{
	(void)d;
	assert_int_equal(to, 0);
	assert_int_equal(w, 0);
	assert_int_equal(req, 77);
	n_replies++;
	return ST_OK;
}

/* hop_bs's clock rule on rank 0 (hop.c): b = 1 over 2 ranks x 2 workers. */
static void test_hop_bs_clock_rule(void **state)
{
	fix_t *f = fix_new(2);
	st_dist_t *d = &f->d;
	f->d.n_workers = 2;
	wire_hdr_t fetch = { .type = MSG_DENSE, .stamp = 1, .flags = WF_HOP }, grad = fetch;
	grad.flags |= 1;
	wire_hdr_t r1 = fetch;
	/* Worker 0 of rank 0 alone: never waits for workers not seen yet. */
	assert_int_equal(st__dist_hop_step(d, &fetch, 0, 0), ST_OK);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(st__dist_hop_step(d, &grad, 0, 1), ST_OK);
		assert_true(st__dist_hop_ready(d, 0, 0));
	}
	/* Rank 1's worker 0 joins at the slowest active clock (3), not 0. */
	assert_int_equal(st__dist_hop_step(d, &r1, 1, 0), ST_OK);
	assert_int_equal(d->hop.clk.clock[2], 3);
	assert_int_equal(st__dist_hop_step(d, &grad, 0, 1), ST_OK);   /* 4 vs 3 */
	assert_true(st__dist_hop_ready(d, 0, 0));
	assert_int_equal(st__dist_hop_step(d, &grad, 0, 1), ST_OK);   /* 5 vs 3 */
	assert_false(st__dist_hop_ready(d, 0, 0));
	assert_true(st__dist_hop_ready(d, 1, 0));                       /* the slowest */
	/* The held reply goes out once the slowest catches up to within b. */
	n_replies = 0;
	assert_int_equal(st__dist_hop_hold(d, 0, 0, 77), ST_OK);
	assert_int_equal(st__dist_hop_release(d, reply_count), ST_OK);
	assert_int_equal(n_replies, 0);
	r1.flags |= 1;
	assert_int_equal(st__dist_hop_step(d, &r1, 1, 1), ST_OK);     /* 4 */
	assert_int_equal(st__dist_hop_release(d, reply_count), ST_OK);
	assert_int_equal(n_replies, 1);
	assert_int_equal(d->hop.nheld, 0);
	/* An idle worker is not the slowest: rank 0's worker may go on. */
	assert_int_equal(st__dist_hop_step(d, &grad, 0, 1), ST_OK);   /* 6 vs 4 */
	assert_false(st__dist_hop_ready(d, 0, 0));
	assert_int_equal(st__dist_hop_idle(d, 1, 0), ST_OK);
	assert_true(st__dist_hop_ready(d, 0, 0));
	/* Back from idling: at the slowest active clock (6). */
	assert_int_equal(st__dist_hop_step(d, &r1, 1, 1), ST_OK);
	assert_int_equal(d->hop.clk.clock[2], 7);
	/* A worker index beyond the job's, or another bound: rejected. */
	wire_hdr_t bad = grad;
	bad.worker = 2;
	assert_int_equal(st__dist_hop_step(d, &bad, 1, 1), ST_EINVAL);
	bad = grad;
	bad.stamp = 3;
	assert_int_equal(st__dist_hop_step(d, &bad, 1, 1), ST_EINVAL);
	assert_int_equal(st__dist_hop_idle(d, 1, 5), ST_EINVAL);
	/* From another rank, such a message is logged and dropped (ST_EPEER),
	 * not taken for a failure of this rank's shard, which would stop it. */
	wire_hdr_t *idle = calloc(1, sizeof *idle);
	*idle = (wire_hdr_t){ .type = MSG_IDLE, .worker = 5 };
	assert_int_equal(st__dist_handle(d, idle, sizeof *idle, 1), ST_EPEER);
	st__dist_hop_free(d);
	fix_free(f);
}

static int bw_replies;
static int reply_bw(st_dist_t *d, int to, uint32_t w, uint64_t req)
{
	(void)d;
	assert_true(to == 1 || to == 2);
	assert_int_equal(w, 0);
	assert_int_equal(req, 5);
	bw_replies++;
	return ST_OK;
}

/* hop_bw across ranks (hop.c): 3 ranks, b = 1 — a step closes with the
 * first 2 of the 3 active ranks, the third's gradient is dropped; a rank
 * that is done no longer counts. The owners apply a step's rows once its K
 * kept ranks' lists are in (serve.c). */
static void test_hop_bw_quorum(void **state)
{
	fix_t *f = fix_new(3);
	st_dist_t *d = &f->d;
	uint64_t dt = 0;
	float dstate[8] = { 0 };
	st_model_t *model = dense_fix(f, &dt, dstate);
	float *p = f->d.p.params;
	const size_t np = f->d.p.nparams;
	f->d.n_workers = 1;
	wire_hdr_t h = { .type = MSG_DENSE, .stamp = 1, .flags = WF_BW | 1, .step = 0 };
	float g1[8], g3[8];
	for (size_t j = 0; j < np; j++) {
		g1[j] = 1.0f;
		g3[j] = 3.0f;
	}
	int late;
	for (int r = 0; r < 3; r++)    /* every rank joins */
		assert_int_equal(st__dist_bw_contrib(d, &h, NULL, r, &late), ST_OK);
	bw_replies = 0;
	assert_int_equal(st__dist_bw_contrib(d, &h, g1, 1, &late), ST_OK);
	assert_int_equal(late, 0);
	assert_int_equal(st__dist_hop_hold(d, 1, 0, 5), ST_OK);
	assert_int_equal(st__dist_bw_close(d, reply_bw), ST_OK);
	assert_int_equal(d->hop.q.k, 0);                 /* 1 of the quorum of 2 */
	assert_int_equal(st__dist_bw_contrib(d, &h, g3, 2, &late), ST_OK);
	assert_int_equal(st__dist_hop_hold(d, 2, 0, 5), ST_OK);
	assert_int_equal(st__dist_bw_close(d, reply_bw), ST_OK);
	assert_int_equal(d->hop.q.k, 1);
	assert_int_equal(bw_replies, 2);
	assert_int_equal(d->hop.lastK[1], 2);
	for (size_t j = 0; j < np; j++)
		assert_true(p[j] == 1.0f - 0.5f * 2.0f);   /* sgd lr 0.5, mean of 1 and 3 */
	/* Rank 0 comes late for step 0: dropped, nothing changes. */
	assert_int_equal(st__dist_bw_contrib(d, &h, g3, 0, &late), ST_OK);
	assert_int_equal(late, 1);
	for (size_t j = 0; j < np; j++)
		assert_true(p[j] == 0.0f);
	/* A step not open yet, another b: rejected. */
	h.step = 5;
	assert_int_equal(st__dist_bw_contrib(d, &h, g1, 1, &late), ST_EINVAL);
	h.step = 1;
	h.stamp = 2;
	assert_int_equal(st__dist_bw_contrib(d, &h, g1, 1, &late), ST_EINVAL);
	h.stamp = 1;
	/* Ranks 0 and 2 done: rank 1 alone is the quorum. */
	assert_int_equal(st__dist_hop_idle(d, 0, 0), ST_OK);
	assert_int_equal(st__dist_hop_idle(d, 2, 0), ST_OK);
	bw_replies = 0;
	assert_int_equal(st__dist_bw_contrib(d, &h, g1, 1, &late), ST_OK);
	assert_int_equal(st__dist_hop_hold(d, 1, 0, 5), ST_OK);
	assert_int_equal(st__dist_bw_close(d, reply_bw), ST_OK);
	assert_int_equal(d->hop.q.k, 2);
	assert_int_equal(bw_replies, 1);
	assert_int_equal(d->hop.lastK[1], 1);

	/* Rows: step 0 kept ranks 1 and 2 (K = 2); applied once both are in,
	 * a third list or a different K rejected. */
	const uint64_t keys[1] = { 9 };
	float before[DIM], gr[DIM];
	row_of(f, 9, before);
	fill(gr, 2.0f);
	size_t len;
	wire_hdr_t *m = push_msg(0, 1, keys, 1, gr, &len);
	m->flags |= WF_BW;
	m->pad = 2;
	assert_int_equal(st__dist_handle(d, m, len, 2), ST_OK);
	expect_row(f, 9, before, 0);
	m = push_msg(0, 1, keys, 1, gr, &len);
	m->flags |= WF_BW;
	m->pad = 3;
	assert_int_equal(st__dist_handle(d, m, len, 1), ST_EPEER);
	m = push_msg(0, 1, keys, 1, gr, &len);
	m->flags |= WF_BW;
	m->pad = 2;
	assert_int_equal(st__dist_handle(d, m, len, 1), ST_OK);
	assert_int_equal(d->applied, 1);
	expect_row(f, 9, before, 0.5f * 4.0f);
	st__dist_hop_free(d);
	st_model_destroy(model);
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
		cmocka_unit_test(test_step_updates_rows_of_every_table),
		cmocka_unit_test(test_bad_pushes_change_nothing),
		cmocka_unit_test(test_async_applies_on_arrival),
		cmocka_unit_test(test_async_push_batch_updates_in_order),
		cmocka_unit_test(test_step_pull_reads_applied_pushes),
		cmocka_unit_test(test_bad_step_pulls_are_dropped),
		cmocka_unit_test(test_gba_rows_buffer_tags_and_averages),
		cmocka_unit_test(test_bsp_rows_average_over_the_step),
		cmocka_unit_test(test_gba_dense_drops_stale_gradients),
		cmocka_unit_test(test_hop_bs_clock_rule),
		cmocka_unit_test(test_hop_bw_quorum),
		cmocka_unit_test(test_f16_codec),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
