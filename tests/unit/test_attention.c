/* test_attention.c — DIN's target attention (ops/nn/attention.h) and its
 * graph node (st_lgraph_attention): an exact forward on a hand-computed
 * case, finite-difference gradients of a small DIN graph on every dense
 * parameter and every row float (query and sequence rows, a key shared by
 * both, an empty sequence, a missing row), the same result whatever the
 * chunk size, the embed node leaving sequence slots out, tensor names, and
 * builder errors that name the layer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lgraph_fd.h"
#include "ops/nn/attention.h"
#include "ops/nn/graph.h"
#include "runtime/err.h"

/* Slots: 0 user (one key), 1 item (the query, one key), 2 clicks (the
 * sequence). Unique keys 0..NU-1; rows are RD floats (DIM embedding). */
enum { ND = 2, NS = 3, DIM = 3, NEX = 5, NU = 8, RD = DIM };

static const int dims[NS] = { DIM, DIM, DIM }, offs[NS] = { 0, DIM, 2 * DIM };
static const uint8_t seq[NS] = { 0, 0, 1 };

static st_lgraph_sparse_t sparse(void)
{
	st_lgraph_sparse_t sp = { .seq = seq };
	sp.pool = (st_pool_layout_t){ .n_slots = NS, .dim = dims, .off = offs,
				      .width = NS * DIM };
	return sp;
}

/* Per example: user, item, then the clicks (-1 ends). Example 1 has no
 * clicks; example 2's item (key 4) is also in its clicks (one row, two
 * roles); example 3 has a repeated click; example 4 has no item. */
static st_batch_t *batch(void)
{
	static const int ex[NEX][7] = {
		{ 0, 3, 5, 6, -1 },
		{ 1, 4, -1 },
		{ 0, 4, 4, 7, 5, -1 },
		{ 2, 3, 6, 6, -1 },
		{ 1, -2, 5, 7, 6, 3, -1 },   /* -2: no item key */
	};
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, NEX, ND, NS, 64), ST_OK);
	b->key_idx = malloc(sizeof(uint32_t) * 64);
	uint32_t k = 0;
	for (int i = 0; i < NEX; i++) {
		b->labels[i] = (float)(i % 2);
		for (int d = 0; d < ND; d++)
			b->dense[i * ND + d] = (float)((i + 1) * (d + 2) % 4) - 1.0f;
		b->row_off[i] = k;
		for (int j = 0; j < 7 && ex[i][j] != -1; j++) {
			if (ex[i][j] == -2)
				continue;
			b->keys[k] = (uint64_t)ex[i][j];
			b->key_slot[k] = (uint16_t)(j < 2 ? j : 2);
			b->key_val[k] = j == 3 ? 0.5f : 1.0f;   /* a weighted click */
			b->key_idx[k] = (uint32_t)ex[i][j];
			k++;
		}
	}
	b->row_off[NEX] = k;
	b->n = NEX;
	return b;
}

/* DIN: logit = out(mlp(concat(embed, attention, dense))). */
static st_lgraph_t *din(int act, int n_hidden)
{
	st_lgraph_sparse_t sp = sparse();
	st_lgraph_t *g;
	assert_int_equal(st_lgraph_create(&g, &sp, ND), ST_OK);
	int e = st_lgraph_embed(g);
	int a = st_lgraph_attention(g, "din", 1, 2, n_hidden, (int[]){ 4, 3 }, act);
	int x = st_lgraph_dense(g, 0);
	int c = st_lgraph_concat(g, 3, (int[]){ e, a, x });
	int h = st_lgraph_mlp(g, c, "mlp", 1, (int[]){ 5 }, ST_LGRAPH_ACT_SIGMOID);
	int o = st_lgraph_linear(g, h, "out", 1);
	assert_true(o >= 0);
	assert_int_equal(st_lgraph_finish(g, o, 5), ST_OK);
	return g;
}

static void fill_rows(float *rowbuf, float **rows, uint64_t seed)
{
	for (int u = 0; u < NU; u++) {
		rows[u] = rowbuf + u * RD;
		for (int j = 0; j < RD; j++) {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			rows[u][j] = (float)((double)(seed >> 40) / (double)(1ULL << 24) - 0.5);
		}
	}
}

/* Central differences of Σ r·logit against st_lgraph_backward, as
 * test_lgraph.c: h = 1e-2 in float; with sigmoid activations the third
 * derivatives are small, so truncation stays ~1e-4; atol 2e-3 + rtol 2e-2
 * catches a missing term or wrong sign (those are O(|g|)). ReLU is checked
 * too: its kinks are met only when a pre-activation lies within h of 0,
 * which these seeded values avoid (the test would flag it, not hide it). */
static void gradcheck(int act, int n_hidden)
{
	st_lgraph_t *g = din(act, n_hidden);
	st_lgraph_ws_t *ws;
	assert_int_equal(st_lgraph_ws_create(&ws, g, NEX), ST_OK);
	st_batch_t *b = batch();
	float rowbuf[NU * RD], *rows[NU];
	fill_rows(rowbuf, rows, 99);
	rows[7] = NULL;   /* a key not admitted: reads as zeros, still a position */
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

	int nonzero = 0;
	int bad = lgraph_fd_check(g, ws, b, NEX, rows, 7, RD, params, np, r, gp, gu,
				  &nonzero);
	assert_int_equal(bad, 0);
	assert_true(nonzero > 7 * RD / 2);   /* the gradients reach the rows */
	free(params);
	free(gp);
	st_batch_destroy(b);
	st_lgraph_ws_destroy(ws);
	st_lgraph_destroy(g);
}

static void test_attention_gradcheck_sigmoid(void **state)
{
	(void)state;
	gradcheck(ST_LGRAPH_ACT_SIGMOID, 2);
}

static void test_attention_gradcheck_relu(void **state)
{
	(void)state;
	gradcheck(ST_LGRAPH_ACT_RELU, 1);
}

static void test_attention_gradcheck_no_hidden(void **state)
{
	(void)state;
	gradcheck(ST_LGRAPH_ACT_NONE, 0);
}

/* No hidden layer: w_t = W·[k, q, k − q, k ⊙ q] + b, computed by hand. */
static void test_attention_forward_exact(void **state)
{
	(void)state;
	st_batch_t *b = batch();
	float rowbuf[NU * RD], *rows[NU];
	fill_rows(rowbuf, rows, 7);
	st_attn_shape_t s = { .d = DIM, .q_slot = 1, .k_slot = 2, .act = 0, .n_hidden = 0,
			      .chunk = 3 };
	float W[4 * DIM], bias = 0.25f;
	for (int j = 0; j < 4 * DIM; j++)
		W[j] = 0.1f * (float)(j % 7) - 0.3f;
	const float *Wl[1] = { W }, *bl[1] = { &bias };
	void *scratch = aligned_alloc(64, (st_attn_scratch_bytes(&s, NEX) + 63) & ~(size_t)63);
	float out[NEX * DIM];
	st_attn_forward(&s, 0, NEX, b->row_off, b->key_slot, b->key_val, b->key_idx, rows,
			Wl, bl, scratch, out);
	for (int i = 0; i < NEX; i++) {
		double want[DIM] = { 0 }, q[DIM] = { 0 };
		for (uint32_t k = b->row_off[i]; k < b->row_off[i + 1]; k++)
			if (b->key_slot[k] == 1)
				for (int j = 0; j < DIM; j++)
					q[j] += b->key_val[k] * rows[b->key_idx[k]][j];
		for (uint32_t k = b->row_off[i]; k < b->row_off[i + 1]; k++) {
			if (b->key_slot[k] != 2)
				continue;
			double kt[DIM], w = bias;
			for (int j = 0; j < DIM; j++)
				kt[j] = b->key_val[k] * rows[b->key_idx[k]][j];
			for (int j = 0; j < DIM; j++)
				w += W[j] * kt[j] + W[DIM + j] * q[j] + W[2 * DIM + j] * (kt[j] - q[j]) +
				     W[3 * DIM + j] * kt[j] * q[j];
			for (int j = 0; j < DIM; j++)
				want[j] += w * kt[j];
		}
		for (int j = 0; j < DIM; j++)
			assert_true(fabs(out[i * DIM + j] - want[j]) <= 1e-6 + 1e-5 * fabs(want[j]));
	}
	/* Example 1 has no clicks: zeros. */
	for (int j = 0; j < DIM; j++)
		assert_true(out[1 * DIM + j] == 0.0f);
	free(scratch);
	st_batch_destroy(b);
}

/* The layer alone, L = Σ dout·out, by central differences on every
 * weight, bias and row float (query rows, sequence rows, the row shared by
 * both). No MLP above it damps the gradients, so a missing term shows at
 * full size; h = 3e-3 keeps the truncation of the sigmoid MLP below ~1e-5
 * and float rounding of L (|L| ~ 1) below ~5e-5 after dividing by 2h. */
typedef struct lctx {
	const st_batch_t *b;
	float **rows;
	const st_attn_shape_t *s;
	const float *const *W, *const *bl;
	void *scratch;
	const float *dout;
} lctx_t;

static double layer_loss(const lctx_t *c)
{
	float out[NEX * DIM];
	st_attn_forward(c->s, 0, NEX, c->b->row_off, c->b->key_slot, c->b->key_val,
			c->b->key_idx, c->rows, c->W, c->bl, c->scratch, out);
	double L = 0;
	for (int j = 0; j < NEX * DIM; j++)
		L += (double)c->dout[j] * out[j];
	return L;
}

static int fd_compare(const char *what, const lctx_t *c, float *x, int nx, const float *g)
{
	const float h = 3e-3f;
	int bad = 0;
	for (int i = 0; i < nx; i++) {
		float v = x[i];
		x[i] = v + h;
		double lp = layer_loss(c);
		x[i] = v - h;
		double lm = layer_loss(c);
		x[i] = v;
		double fd = (lp - lm) / (2.0 * h);
		if (fabs(fd - g[i]) > 2e-4 + 1e-2 * fabs(fd)) {
			print_message("%s %d: fd %g analytic %g\n", what, i, fd, g[i]);
			bad++;
		}
	}
	return bad;
}

static void test_attention_layer_gradcheck(void **state)
{
	(void)state;
	st_batch_t *b = batch();
	float rowbuf[NU * RD], *rows[NU];
	fill_rows(rowbuf, rows, 3);
	for (int j = 0; j < NU * RD; j++)
		rowbuf[j] *= 3.0f;   /* embeddings in ±1.5: products of rows matter */
	enum { H = 4, NP = H * 4 * DIM + H + H + 1 };
	float P[NP];
	for (int j = 0; j < NP; j++)
		P[j] = 1.2f * (float)((j * 7) % 11) / 11.0f - 0.6f;
	const float *Wl[2] = { P, P + H * 4 * DIM + H }, *bl[2] = { P + H * 4 * DIM, P + NP - 1 };
	float dout[NEX * DIM];
	for (int j = 0; j < NEX * DIM; j++)
		dout[j] = 0.25f * (float)(j % 9) - 1.0f;
	st_attn_shape_t s = { .d = DIM, .q_slot = 1, .k_slot = 2, .act = 2, .n_hidden = 1,
			      .hidden = { H }, .chunk = 4 };
	void *scratch = aligned_alloc(64, (st_attn_scratch_bytes(&s, NEX) + 63) & ~(size_t)63);
	float gp[NP] = { 0 }, gu[NU * RD] = { 0 };
	float *dW[2] = { gp, gp + H * 4 * DIM + H }, *db[2] = { gp + H * 4 * DIM, gp + NP - 1 };
	lctx_t c = { b, rows, &s, Wl, bl, scratch, dout };
	layer_loss(&c);
	st_attn_backward(&s, 0, NEX, b->row_off, b->key_slot, b->key_val, b->key_idx, rows,
			 Wl, bl, dout, scratch, dW, db, gu, RD);
	int bad = fd_compare("param", &c, P, NP, gp) + fd_compare("row", &c, rowbuf, NU * RD, gu);
	assert_int_equal(bad, 0);
	/* Key 2 is only a user key: no gradient from this layer. */
	for (int j = 0; j < RD; j++)
		assert_true(gu[2 * RD + j] == 0.0f);
	free(scratch);
	st_batch_destroy(b);
}

/* Chunks of 1, 2, 5 and 512 keys give the same output and gradients (the
 * chunk only bounds the scratch): equal within float rounding of sums
 * taken in another order. */
static void test_attention_chunk_size_does_not_matter(void **state)
{
	(void)state;
	st_batch_t *b = batch();
	float rowbuf[NU * RD], *rows[NU];
	fill_rows(rowbuf, rows, 11);
	enum { H = 4, NP = H * 4 * DIM + H + H + 1 };
	float P[NP];
	for (int j = 0; j < NP; j++)
		P[j] = 0.2f * (float)((j * 7) % 11) / 11.0f - 0.1f;
	const float *Wl[2] = { P, P + H * 4 * DIM + H }, *bl[2] = { P + H * 4 * DIM, P + NP - 1 };
	float dout[NEX * DIM];
	for (int j = 0; j < NEX * DIM; j++)
		dout[j] = 0.1f * (float)(j % 9) - 0.4f;
	float ref_out[NEX * DIM], ref_gp[NP], ref_gu[NU * RD];
	const int chunks[] = { 512, 1, 2, 5 };
	for (int c = 0; c < 4; c++) {
		st_attn_shape_t s = { .d = DIM, .q_slot = 1, .k_slot = 2, .act = 2,
				      .n_hidden = 1, .hidden = { H }, .chunk = chunks[c] };
		void *scratch = aligned_alloc(64, (st_attn_scratch_bytes(&s, NEX) + 63) &
						  ~(size_t)63);
		float out[NEX * DIM], gp[NP] = { 0 }, gu[NU * RD] = { 0 };
		float *dW[2] = { gp, gp + H * 4 * DIM + H }, *db[2] = { gp + H * 4 * DIM,
									 gp + NP - 1 };
		st_attn_forward(&s, 0, NEX, b->row_off, b->key_slot, b->key_val, b->key_idx,
				rows, Wl, bl, scratch, out);
		st_attn_backward(&s, 0, NEX, b->row_off, b->key_slot, b->key_val, b->key_idx,
				 rows, Wl, bl, dout, scratch, dW, db, gu, RD);
		if (c == 0) {
			memcpy(ref_out, out, sizeof out);
			memcpy(ref_gp, gp, sizeof gp);
			memcpy(ref_gu, gu, sizeof gu);
		}
		for (int j = 0; j < NEX * DIM; j++)
			assert_true(fabsf(out[j] - ref_out[j]) <= 1e-6f + 1e-5f * fabsf(ref_out[j]));
		for (int j = 0; j < NP; j++)
			assert_true(fabsf(gp[j] - ref_gp[j]) <= 1e-6f + 1e-5f * fabsf(ref_gp[j]));
		for (int j = 0; j < NU * RD; j++)
			assert_true(fabsf(gu[j] - ref_gu[j]) <= 1e-6f + 1e-5f * fabsf(ref_gu[j]));
		free(scratch);
	}
	st_batch_destroy(b);
}

/* The embed node leaves the sequence slot out; attention's tensors are
 * <name>.att.<l>.weight/bias, [h × 4d] first and [1 × h] last. */
static void test_attention_widths_and_names(void **state)
{
	(void)state;
	st_lgraph_t *g = din(ST_LGRAPH_ACT_RELU, 2);
	assert_int_equal(st_lgraph_width(g, 0), 2 * DIM);   /* user and item */
	assert_int_equal(st_lgraph_width(g, 1), DIM);       /* the attention */
	static const char *const want[] = { "din.att.0.weight", "din.att.0.bias",
					    "din.att.1.weight", "din.att.1.bias",
					    "din.att.2.weight", "din.att.2.bias" };
	for (int i = 0; i < 6; i++)
		assert_string_equal(st_lgraph_tensor(g, i)->name, want[i]);
	assert_int_equal(st_lgraph_tensor(g, 0)->shape[0], 4);
	assert_int_equal(st_lgraph_tensor(g, 0)->shape[1], 4 * DIM);
	assert_int_equal(st_lgraph_tensor(g, 4)->shape[0], 1);
	assert_int_equal(st_lgraph_tensor(g, 4)->shape[1], 3);
	st_lgraph_node_info_t ni;
	assert_int_equal(st_lgraph_node_info(g, 1, &ni), ST_OK);
	assert_string_equal(ni.kind, "attention");
	assert_int_equal(ni.nparams, 4 * 4 * DIM + 4 + 3 * 4 + 3 + 3 + 1);
	assert_true(ni.flops > 0);
	st_lgraph_destroy(g);

	/* Without a sequence mask the embed node is every slot, as before. */
	st_lgraph_sparse_t sp = sparse();
	sp.seq = NULL;
	assert_int_equal(st_lgraph_create(&g, &sp, ND), ST_OK);
	assert_int_equal(st_lgraph_width(g, st_lgraph_embed(g)), NS * DIM);
	st_lgraph_destroy(g);
}

static void test_attention_builder_errors(void **state)
{
	(void)state;
	static const int odd[NS] = { DIM, DIM + 1, DIM };
	st_lgraph_sparse_t sp = sparse();
	st_lgraph_t *g;
	assert_int_equal(st_lgraph_create(&g, &sp, ND), ST_OK);
	assert_int_equal(st_lgraph_attention(g, "a", 2, 2, 0, NULL, 0), ST_EINVAL);  /* same */
	assert_int_equal(st_lgraph_attention(g, "a", 1, NS, 0, NULL, 0), ST_EINVAL); /* range */
	assert_int_equal(st_lgraph_attention(g, "a", 1, 2, 1, (int[]){ 0 }, 0), ST_EINVAL);
	assert_int_equal(st_lgraph_attention(g, "a", 1, 2, 16, (int[16]){ 1 }, 0), ST_EINVAL);
	assert_int_equal(st_lgraph_attention(g, "a", 1, 2, 0, NULL, 3), ST_EINVAL);  /* act */
	st_lgraph_destroy(g);
	sp.pool.dim = odd;
	assert_int_equal(st_lgraph_create(&g, &sp, ND), ST_OK);
	assert_int_equal(st_lgraph_attention(g, "a", 1, 2, 0, NULL, 0), ST_EINVAL);  /* dims */
	st_lgraph_destroy(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attention_gradcheck_sigmoid),
		cmocka_unit_test(test_attention_gradcheck_relu),
		cmocka_unit_test(test_attention_gradcheck_no_hidden),
		cmocka_unit_test(test_attention_forward_exact),
		cmocka_unit_test(test_attention_layer_gradcheck),
		cmocka_unit_test(test_attention_chunk_size_does_not_matter),
		cmocka_unit_test(test_attention_widths_and_names),
		cmocka_unit_test(test_attention_builder_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
