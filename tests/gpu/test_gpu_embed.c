/* test_gpu_embed.c — cuda/embed.cu against ops/nn/nn.c on the same seeded
 * batch: pooling forward/backward (sum and mean, per-slot dims, repeated
 * slots, NULL rows) and the wide term.
 *
 * Tolerances (values are O(1)):
 *  - forward: every output is summed by one thread in the CPU's key order;
 *    only fused multiply-adds differ (one rounding less per key, <= 1 ulp =
 *    6e-8 relative per term, a handful of terms): atol 1e-6 + rtol 1e-5;
 *  - backward: atomicAdd sums the m contributions of a unique key in any
 *    order; with ~300 × 3 key occurrences over 200 unique keys m averages
 *    4.5 (max ~15), so the reassociation error is <= m · eps · Σ|term|
 *    ~ 15 · 6e-8 · 15 ≈ 1.4e-5: atol 2e-5 + rtol 1e-5. A wrong index or a
 *    missing mean factor is off by O(0.1). */
#include "gpu_test.h"

#include "ops/nn/nn.h"

enum { N = 300, S = 5, U = 200, MAXK = 6 };

typedef struct batch {
	uint32_t row_off[N + 1];
	uint16_t slot[N * MAXK];
	float val[N * MAXK];
	uint32_t idx[N * MAXK];
	int dim[S], off[S], width, stride;
	float *vals;          /* [U × stride] */
	float *rows[U];       /* CPU view (NULL for absent rows) */
	int32_t slots[U];     /* GPU view */
} batch_t;

static void make_batch(batch_t *b, int uniform_dim)
{
	b->width = 0;
	b->stride = 0;
	for (int s = 0; s < S; s++) {
		b->dim[s] = uniform_dim ? uniform_dim : 1 + (int)(gt_rnd() % 40); /* > 32: 2 lanes rounds */
		b->off[s] = b->width;
		b->width += b->dim[s];
		if (b->dim[s] + 1 > b->stride)
			b->stride = b->dim[s] + 1;   /* + the wide column */
	}
	b->row_off[0] = 0;
	for (int i = 0; i < N; i++) {
		int nk = (int)(gt_rnd() % (MAXK + 1));
		for (int j = 0; j < nk; j++) {
			uint32_t k = b->row_off[i] + j;
			b->slot[k] = (uint16_t)(gt_rnd() % S);   /* slots repeat in an example */
			b->val[k] = j % 3 == 2 ? gt_sym() : 1.0f;
			b->idx[k] = (uint32_t)(gt_rnd() % U);
		}
		b->row_off[i + 1] = b->row_off[i] + nk;
	}
	b->vals = gt_rand((size_t)U * b->stride);
	for (int u = 0; u < U; u++) {
		int absent = u % 17 == 5;
		b->rows[u] = absent ? NULL : b->vals + (size_t)u * b->stride;
		b->slots[u] = absent ? -1 : u;
	}
}

typedef struct dev {
	st_gpu_csr_t c;
	st_gpu_rows_t r;
	void *bufs[5];
} dbatch_t;

static void to_dev(dbatch_t *d, const batch_t *b)
{
	uint32_t nk = b->row_off[N];
	d->bufs[0] = gt_dev(b->row_off, sizeof b->row_off);
	d->bufs[1] = gt_dev(b->slot, nk * sizeof(uint16_t));
	d->bufs[2] = gt_dev(b->val, nk * sizeof(float));
	d->bufs[3] = gt_dev(b->idx, nk * sizeof(uint32_t));
	d->bufs[4] = gt_dev(b->slots, sizeof b->slots);
	d->c = (st_gpu_csr_t){ .n = N, .row_off = d->bufs[0], .key_slot = d->bufs[1],
			       .key_val = d->bufs[2], .key_idx = d->bufs[3] };
	d->r = (st_gpu_rows_t){ .vals = gt_dev(b->vals, (size_t)U * b->stride * sizeof(float)),
				.stride = (uint32_t)b->stride, .slot = d->bufs[4] };
}

static void free_dev(dbatch_t *d)
{
	for (int i = 0; i < 5; i++)
		st_gpu_free(d->bufs[i]);
	st_gpu_free((void *)d->r.vals);
}

/* mean: 0 sum, 1 mean, 2 per slot (slot_mean: odd slots mean, even sum,
 * the layout of csv list fields with their own pooling). */
static void check_pool(int mean, int uniform_dim)
{
	static batch_t b;
	static const uint8_t alt[S] = { 0, 1, 0, 1, 0 };
	make_batch(&b, uniform_dim);
	st_pool_layout_t L = { .n_slots = S, .dim = b.dim, .off = b.off, .width = b.width,
			       .mean = mean == 1, .slot_mean = mean == 2 ? alt : NULL };
	dbatch_t d;
	to_dev(&d, &b);
	st_gpu_pool_t *P;
	assert_int_equal(st_gpu_pool_create(&P, &L), ST_OK);

	size_t no = (size_t)N * b.width, ng = (size_t)U * b.stride;
	float *want = malloc(no * sizeof(float));
	st_pool_forward(&L, 0, N, b.row_off, b.slot, b.val, b.idx, b.rows, want);
	float *d_out = gt_dev(NULL, no * sizeof(float));
	assert_int_equal(st_gpu_pool_forward(P, &d.c, &d.r, d_out, NULL), ST_OK);
	float *got = gt_host(d_out, no * sizeof(float));
	gt_close(mean ? "pool mean fwd" : "pool sum fwd", got, want, no, 1e-6, 1e-5);

	float *dout = gt_rand(no), *gu = calloc(ng, sizeof(float));
	st_pool_backward(&L, 0, N, b.row_off, b.slot, b.val, b.idx, dout, gu, b.stride);
	float *d_dout = gt_dev(dout, no * sizeof(float)), *d_gu = gt_dev(NULL, ng * sizeof(float));
	assert_int_equal(st_gpu_pool_backward(P, &d.c, d_dout, d_gu, b.stride, NULL), ST_OK);
	float *ggot = gt_host(d_gu, ng * sizeof(float));
	gt_close(mean ? "pool mean bwd" : "pool sum bwd", ggot, gu, ng, 2e-5, 1e-5);

	free(want), free(got), free(dout), free(gu), free(ggot), free(b.vals);
	st_gpu_free(d_out), st_gpu_free(d_dout), st_gpu_free(d_gu);
	st_gpu_pool_destroy(P);
	free_dev(&d);
}

static void test_gpu_embed_pool_sum(void **state)
{
	check_pool(0, 0);
}

static void test_gpu_embed_pool_mean(void **state)
{
	check_pool(1, 0);
	check_pool(1, 16);
	check_pool(2, 0);       /* per-slot sum and mean (issue 18) */
}

/* Wide term, fixed column (uniform rows) and per-slot column (col < 0,
 * model.c's wide_forward for per-slot dims, checked against its loop). */
static void test_gpu_embed_wide(void **state)
{
	static batch_t b;
	make_batch(&b, 8);
	st_pool_layout_t L = { .n_slots = S, .dim = b.dim, .off = b.off, .width = b.width };
	dbatch_t d;
	to_dev(&d, &b);
	st_gpu_pool_t *P;
	assert_int_equal(st_gpu_pool_create(&P, &L), ST_OK);
	float want[N], dout[N];
	float *d_out = gt_dev(NULL, sizeof want);
	for (int i = 0; i < N; i++)
		dout[i] = gt_sym();
	float *d_dout = gt_dev(dout, sizeof dout);
	size_t ng = (size_t)U * b.stride;
	float *gu = calloc(ng, sizeof(float));
	float *d_gu = gt_dev(NULL, ng * sizeof(float));

	st_wide_forward(0, N, b.row_off, b.val, b.idx, b.rows, 8, want);
	assert_int_equal(st_gpu_wide_forward(NULL, &d.c, &d.r, 8, d_out, NULL), ST_OK);
	float *got = gt_host(d_out, sizeof want);
	gt_close("wide fwd", got, want, N, 1e-6, 1e-5);
	free(got);
	/* col < 0: the column after the slot's embedding, = 8 for every slot here */
	assert_int_equal(st_gpu_wide_forward(P, &d.c, &d.r, -1, d_out, NULL), ST_OK);
	got = gt_host(d_out, sizeof want);
	gt_close("wide fwd per-slot col", got, want, N, 1e-6, 1e-5);

	st_wide_backward(0, N, b.row_off, b.val, b.idx, dout, gu, b.stride, 8);
	assert_int_equal(st_gpu_wide_backward(P, &d.c, d_dout, d_gu, b.stride, -1, NULL), ST_OK);
	float *ggot = gt_host(d_gu, ng * sizeof(float));
	gt_close("wide bwd", ggot, gu, ng, 2e-5, 1e-5);
	assert_int_equal(st_gpu_wide_forward(NULL, &d.c, &d.r, -1, d_out, NULL), ST_EINVAL);

	free(got), free(gu), free(ggot), free(b.vals);
	st_gpu_free(d_out), st_gpu_free(d_dout), st_gpu_free(d_gu);
	st_gpu_pool_destroy(P);
	free_dev(&d);
}

int main(void)
{
	int skip = gpu_test_skip();
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_embed_pool_sum),
		cmocka_unit_test(test_gpu_embed_pool_mean),
		cmocka_unit_test(test_gpu_embed_wide),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
