/* test_lgraph.c — the layer graph executor (ops/nn/graph.h): a graph that
 * uses every node kind, with the embeddings read by four consumers, checked
 * by finite differences on every dense parameter and row float; the tensor
 * order and names the builders produce; builder errors that name the layer;
 * and the rule that an input without parameters upstream gets no gradient. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lgraph_fd.h"
#include "ops/nn/graph.h"
#include "runtime/err.h"

enum { ND = 3, NS = 2, DIM = 3, NEX = 5, NU = 6, RD = DIM + 1 };

static const int dims[NS] = { DIM, DIM }, offs[NS] = { 0, DIM };
static const int wide_col[NS] = { DIM, DIM };

static st_lgraph_sparse_t sparse(void)
{
	st_lgraph_sparse_t sp = { .wide_col = wide_col };
	sp.pool = (st_pool_layout_t){ .n_slots = NS, .dim = dims, .off = offs,
				      .width = NS * DIM };
	return sp;
}

/* 5 examples, keys 0-2 in slot 0 and 3-5 in slot 1, example 2 has none in
 * slot 0 (an empty bag), example 4 has a repeated key. */
static st_batch_t *batch(void)
{
	static const int keys[NEX][3] = {
		{ 0, 3, -1 }, { 1, 4, 5 }, { 3, -1, -1 }, { 2, 0, 4 }, { 1, 1, 5 },
	};
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, NEX, ND, NS, 32), ST_OK);
	b->key_idx = malloc(sizeof(uint32_t) * 32);
	uint32_t k = 0;
	for (int i = 0; i < NEX; i++) {
		b->labels[i] = (float)(i % 2);
		for (int d = 0; d < ND; d++)
			b->dense[i * ND + d] = (float)((i + 2) * (d + 1) % 5) - 1.0f;
		b->row_off[i] = k;
		for (int j = 0; j < 3 && keys[i][j] >= 0; j++, k++) {
			b->keys[k] = (uint64_t)keys[i][j];
			b->key_slot[k] = (uint16_t)(keys[i][j] >= 3);
			b->key_val[k] = j == 1 ? 0.5f : 1.0f;
			b->key_idx[k] = (uint32_t)keys[i][j];
		}
	}
	b->row_off[NEX] = k;
	b->n = NEX;
	return b;
}

/* Every node kind. The embedding feeds concat, fm, dot and a low-rank
 * cross; the dense features feed concat and a linear (no gradient flows to
 * them); the logit adds six terms. */
static st_lgraph_t *all_kinds(void)
{
	st_lgraph_sparse_t sp = sparse();
	st_lgraph_t *g;
	assert_int_equal(st_lgraph_create(&g, &sp, ND), ST_OK);
	int x = st_lgraph_dense(g, 1);
	int e = st_lgraph_embed(g);
	int c = st_lgraph_concat(g, 2, (int[]){ e, x });
	int full = st_lgraph_cross(g, c, "cross", 2, 0);
	int h = st_lgraph_mlp(g, full, "mlp", 2, (int[]){ 4, 3 }, ST_LGRAPH_ACT_SIGMOID);
	int o1 = st_lgraph_linear(g, h, "out", 1);
	int low = st_lgraph_cross(g, e, "lcross", 2, 2);
	int o2 = st_lgraph_linear(g, low, "lout", 1);
	int lin = st_lgraph_linear(g, x, "dense", 1);
	int fm = st_lgraph_fm(g, e, NS);
	int dot = st_lgraph_dot(g, e, NS);
	int w = st_lgraph_wide(g);
	int logit = st_lgraph_add(g, 6, (int[]){ o1, o2, lin, fm, dot, w });
	assert_true(logit >= 0);
	assert_int_equal(st_lgraph_finish(g, logit, 3), ST_OK);
	return g;
}

/* Central differences of Σ r·logit against st_lgraph_backward with dlogit
 * = r. Tolerance as test_model.c's fd_check: h = 1e-2 in float leaves
 * ~1e-4 truncation (the cross stack is a low-degree polynomial) plus
 * rounding; atol 2e-3 + rtol 2e-2 catches any wrong term, which is O(|g|). */
static void test_lgraph_gradcheck_all_kinds(void **state)
{
	(void)state;
	st_lgraph_t *g = all_kinds();
	st_lgraph_ws_t *ws;
	assert_int_equal(st_lgraph_ws_create(&ws, g, NEX), ST_OK);
	st_batch_t *b = batch();
	float rowbuf[NU * RD], *rows[NU];
	uint64_t rng = 99;
	for (int u = 0; u < NU; u++) {
		rows[u] = rowbuf + u * RD;
		for (int j = 0; j < RD; j++) {
			rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
			rows[u][j] = (float)((double)(rng >> 40) / (double)(1ULL << 24) - 0.5);
		}
	}
	size_t np = st_lgraph_nparams(g);
	float *params = malloc(sizeof(float) * np), *gp = calloc(np, sizeof(float));
	memcpy(params, st_lgraph_params(g), sizeof(float) * np);
	for (size_t i = 0; i < np; i++)
		if (params[i] == 0.0f)
			params[i] = 0.1f * ((float)(i % 5) - 2.0f);
	float r[NEX] = { 0.3f, -0.7f, 0.5f, 1.0f, -0.2f }, gu[NU * RD] = { 0 };
	lgraph_probe(g, ws, b, NEX, rows, params, r);
	memcpy(st_lgraph_dlogit(ws), r, sizeof r);
	st_lgraph_backward(g, ws, b, 0, NEX, params, gp, gu, RD);

	int bad = lgraph_fd_check(g, ws, b, NEX, rows, NU, RD, params, np, r, gp, gu, NULL);
	assert_int_equal(bad, 0);
	free(params);
	free(gp);
	st_batch_destroy(b);
	st_lgraph_ws_destroy(ws);
	st_lgraph_destroy(g);
}

/* Tensors come in builder-call order, contiguous, with the nn.Linear and
 * DCNv2 names and shapes graph.h promises. */
static void test_lgraph_tensor_order_and_names(void **state)
{
	(void)state;
	st_lgraph_t *g = all_kinds();
	static const char *const want[] = {
		"cross.0.weight", "cross.0.bias", "cross.1.weight", "cross.1.bias",
		"mlp.0.weight", "mlp.0.bias", "mlp.1.weight", "mlp.1.bias",
		"out.weight", "out.bias",
		"lcross.0.v.weight", "lcross.0.u.weight", "lcross.0.u.bias",
		"lcross.1.v.weight", "lcross.1.u.weight", "lcross.1.u.bias",
		"lout.weight", "lout.bias", "dense.weight", "dense.bias",
	};
	const int nwant = (int)(sizeof want / sizeof *want);
	assert_int_equal(st_lgraph_ntensors(g), nwant);
	size_t off = 0;
	for (int i = 0; i < nwant; i++) {
		const st_tensor_info_t *t = st_lgraph_tensor(g, i);
		assert_string_equal(t->name, want[i]);
		assert_int_equal(t->offset, off);
		off += (size_t)t->shape[0] * (t->ndim == 2 ? (size_t)t->shape[1] : 1);
	}
	assert_int_equal(off, st_lgraph_nparams(g));
	const st_tensor_info_t *t = st_lgraph_tensor(g, 10);   /* lcross.0.v: [r × d] */
	assert_int_equal(t->shape[0], 2);
	assert_int_equal(t->shape[1], NS * DIM);
	t = st_lgraph_tensor(g, 0);                            /* cross.0: [d × d], d = 9 */
	assert_int_equal(t->shape[0], NS * DIM + ND);
	assert_int_equal(t->shape[1], NS * DIM + ND);
	st_lgraph_destroy(g);
}

static void test_lgraph_builder_errors(void **state)
{
	(void)state;
	st_lgraph_sparse_t sp = sparse();
	sp.wide_col = NULL;
	st_lgraph_t *g;
	assert_int_equal(st_lgraph_create(&g, &sp, ND), ST_OK);
	int x = st_lgraph_dense(g, 0), e = st_lgraph_embed(g);
	assert_int_equal(st_lgraph_wide(g), ST_EINVAL);         /* rows have no wide column */
	assert_int_equal(st_lgraph_fm(g, x, 2), ST_EINVAL);     /* 3 wide is not 2 fields */
	assert_int_equal(st_lgraph_add(g, 2, (int[]){ x, e }), ST_EINVAL);   /* 3 vs 6 */
	assert_int_equal(st_lgraph_cross(g, e, "cross", 17, 0), ST_EINVAL);
	assert_int_equal(st_lgraph_mlp(g, e, "mlp", 1, (int[]){ 0 }, 0), ST_EINVAL);
	assert_int_equal(st_lgraph_linear(g, 42, "out", 1), ST_EINVAL);
	/* A failed builder's code passes through the chain to finish. */
	int bad = st_lgraph_fm(g, x, 2);
	int h = st_lgraph_mlp(g, bad, "mlp", 1, (int[]){ 4 }, 0);
	assert_int_equal(h, ST_EINVAL);
	assert_int_equal(st_lgraph_finish(g, st_lgraph_linear(g, h, "out", 1), 1), ST_EINVAL);
	/* No layers = the input itself, no node. */
	int n = st_lgraph_nnodes(g);
	assert_int_equal(st_lgraph_cross(g, e, "cross", 0, 0), e);
	assert_int_equal(st_lgraph_mlp(g, e, "mlp", 0, NULL, 0), e);
	assert_int_equal(st_lgraph_nnodes(g), n);
	/* The output must be one logit wide. */
	assert_int_equal(st_lgraph_finish(g, e, 1), ST_EINVAL);
	st_lgraph_destroy(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lgraph_gradcheck_all_kinds),
		cmocka_unit_test(test_lgraph_tensor_order_and_names),
		cmocka_unit_test(test_lgraph_builder_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
