/* test_model.c — model presets: tensor names and shapes, whole-model
 * finite-difference gradients (dense params and embedding rows), predictions
 * in (0, 1), validation of bad shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/nn/model.h"
#include "ops/nn/nn.h"
#include "runtime/err.h"

enum { ND = 3, NS = 3, NEX = 5, EMB = 4 };

/* dcnv2's cross rank for make_cfg (0 = full rank); the other presets ignore
 * the cross fields. */
static int cross_rank;

static void make_cfg(st_model_cfg_t *c, const char *type)
{
	memset(c, 0, sizeof *c);
	c->type = (char *)type;
	c->emb_dim = EMB;
	c->n_hidden = 2;
	c->hidden[0] = 6;
	c->hidden[1] = 5;
	c->n_bottom = 2;
	c->bottom[0] = 7;
	c->bottom[1] = EMB;
	c->n_cross = 2;
	c->cross_rank = cross_rank;
	/* Smooth activations keep finite differences away from ReLU kinks. */
	c->activation = (char *)"sigmoid";
}

/* A tiny hand-made batch: NEX examples, 1-3 keys per example over NS slots
 * (one slot with two keys, one slot empty), keys shared across examples,
 * non-unit key values, unique index = key. */
static st_batch_t *tiny_batch(uint32_t *n_uniq)
{
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, NEX, ND, NS, 64), ST_OK);
	static const int keys[NEX][4] = {
		{ 0, 2, 5, -1 }, { 1, 2, 4, 6 }, { 0, 3, -1, -1 }, { 1, 5, 6, -1 }, { 2, 4, 5, -1 },
	};
	/* slot of each key: 0,1 -> slot 0; 2,3 -> slot 1; 4,5,6 -> slot 2 */
	static const int slot_of[7] = { 0, 0, 1, 1, 2, 2, 2 };
	uint32_t k = 0;
	b->key_idx = malloc(sizeof(uint32_t) * 64);
	for (int i = 0; i < NEX; i++) {
		b->labels[i] = (float)(i % 2);
		for (int d = 0; d < ND; d++)
			b->dense[i * ND + d] = (float)((i + 1) * (d + 2) % 7) - 1.0f;
		b->row_off[i] = k;
		for (int j = 0; j < 4 && keys[i][j] >= 0; j++) {
			b->keys[k] = (uint64_t)keys[i][j];
			b->key_slot[k] = (uint16_t)slot_of[keys[i][j]];
			b->key_val[k] = j == 2 ? 0.5f : 1.0f;
			b->key_idx[k] = (uint32_t)keys[i][j];
			k++;
		}
	}
	b->row_off[NEX] = k;
	b->n = NEX;
	b->n_uniq = 7;
	*n_uniq = 7;
	return b;
}

static void check_names(const char *type, const char *const *want, int nwant)
{
	st_model_cfg_t c;
	make_cfg(&c, type);
	st_model_t *m;
	assert_int_equal(st_model_create(&m, &c, 13, 26, 1), ST_OK);
	assert_int_equal(st_model_ntensors(m), nwant);
	size_t off = 0;
	for (int i = 0; i < nwant; i++) {
		const st_tensor_info_t *t = st_model_tensor(m, i);
		assert_string_equal(t->name, want[i]);
		assert_int_equal(t->offset, off);
		assert_int_equal(st_model_find_tensor(m, want[i]), i);
		off += (size_t)t->shape[0] * (t->ndim == 2 ? (size_t)t->shape[1] : 1);
	}
	assert_int_equal(off, st_model_nparams(m));
	assert_int_equal(st_model_find_tensor(m, "nope"), ST_ENOENT);
	st_model_destroy(m);
}

static void test_model_tensor_names(void **state)
{
	(void)state;
	static const char *lr[] = { "dense.weight", "dense.bias" };
	static const char *dnn[] = { "mlp.0.weight", "mlp.0.bias", "mlp.1.weight",
				     "mlp.1.bias", "out.weight", "out.bias" };
	static const char *wdl[] = { "dense.weight", "dense.bias", "mlp.0.weight",
				     "mlp.0.bias", "mlp.1.weight", "mlp.1.bias",
				     "out.weight", "out.bias" };
	static const char *dlrm[] = { "bot.0.weight", "bot.0.bias", "bot.1.weight",
				      "bot.1.bias", "mlp.0.weight", "mlp.0.bias",
				      "mlp.1.weight", "mlp.1.bias", "out.weight", "out.bias" };
	check_names("lr", lr, 2);
	check_names("dnn", dnn, 6);
	check_names("wdl", wdl, 8);
	check_names("deepfm", wdl, 8);
	check_names("dlrm", dlrm, 10);
}

static void test_model_shapes(void **state)
{
	(void)state;
	st_model_cfg_t c;
	make_cfg(&c, "dnn");
	st_model_t *m;
	assert_int_equal(st_model_create(&m, &c, 13, 26, 1), ST_OK);
	const st_tensor_info_t *t = st_model_tensor(m, st_model_find_tensor(m, "mlp.0.weight"));
	assert_int_equal(t->ndim, 2);
	assert_int_equal(t->shape[0], 6);
	assert_int_equal(t->shape[1], 26 * EMB + 13);   /* concat(e, x_dense) */
	t = st_model_tensor(m, st_model_find_tensor(m, "out.weight"));
	assert_int_equal(t->shape[0], 1);
	assert_int_equal(t->shape[1], 5);
	t = st_model_tensor(m, st_model_find_tensor(m, "out.bias"));
	assert_int_equal(t->ndim, 1);
	assert_int_equal(t->shape[0], 1);
	assert_int_equal(st_model_row_dim(m, 0), EMB);
	assert_int_equal(st_model_has_wide(m), 0);
	/* init: biases 0, weights within 1/sqrt(in) and not all equal */
	const float *p = st_model_params(m);
	t = st_model_tensor(m, st_model_find_tensor(m, "mlp.0.bias"));
	for (int i = 0; i < 6; i++)
		assert_true(p[t->offset + i] == 0.0f);
	t = st_model_tensor(m, st_model_find_tensor(m, "mlp.0.weight"));
	float bound = 1.0f / sqrtf(26 * EMB + 13);
	for (int i = 0; i < 6 * (26 * EMB + 13); i++)
		assert_true(fabsf(p[t->offset + i]) <= bound);
	assert_true(p[t->offset] != p[t->offset + 1]);
	st_model_destroy(m);

	make_cfg(&c, "dlrm");
	assert_int_equal(st_model_create(&m, &c, 13, 26, 1), ST_OK);
	t = st_model_tensor(m, st_model_find_tensor(m, "mlp.0.weight"));
	assert_int_equal(t->shape[1], EMB + 27 * 26 / 2);    /* z0 + pairs of 27 */
	t = st_model_tensor(m, st_model_find_tensor(m, "bot.0.weight"));
	assert_int_equal(t->shape[0], 7);
	assert_int_equal(t->shape[1], 13);
	st_model_destroy(m);

	make_cfg(&c, "wdl");
	assert_int_equal(st_model_create(&m, &c, 13, 26, 1), ST_OK);
	assert_int_equal(st_model_row_dim(m, 3), EMB + 1);   /* + wide weight */
	assert_int_equal(st_model_has_wide(m), 1);
	st_model_destroy(m);

	make_cfg(&c, "lr");
	assert_int_equal(st_model_create(&m, &c, 13, 26, 1), ST_OK);
	assert_int_equal(st_model_row_dim(m, 3), 1);         /* the wide weight only */
	assert_int_equal(st_model_max_row_dim(m), 1);
	st_model_destroy(m);

	/* Same seed, same params; another seed, other params. */
	st_model_t *a, *b2;
	make_cfg(&c, "deepfm");
	assert_int_equal(st_model_create(&a, &c, 13, 26, 7), ST_OK);
	assert_int_equal(st_model_create(&b2, &c, 13, 26, 7), ST_OK);
	assert_memory_equal(st_model_params(a), st_model_params(b2),
			    sizeof(float) * st_model_nparams(a));
	st_model_destroy(b2);
	assert_int_equal(st_model_create(&b2, &c, 13, 26, 8), ST_OK);
	assert_true(memcmp(st_model_params(a), st_model_params(b2),
			   sizeof(float) * st_model_nparams(a)) != 0);
	st_model_destroy(a);
	st_model_destroy(b2);
}

static void test_model_rejects_bad_shapes(void **state)
{
	(void)state;
	st_model_cfg_t c;
	st_model_t *m;
	int dims[NS] = { 4, 8, 4 };
	make_cfg(&c, "deepfm");
	c.slot_dims = dims;
	c.n_slot_dims = NS;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	make_cfg(&c, "dlrm");
	c.slot_dims = dims;
	c.n_slot_dims = NS;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	make_cfg(&c, "dlrm");
	c.bottom[1] = EMB + 1;   /* last bottom size != emb_dim */
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	make_cfg(&c, "dlrm");
	assert_int_equal(st_model_create(&m, &c, 0, NS, 1), ST_EINVAL);
	make_cfg(&c, "transformer");
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	make_cfg(&c, "dnn");
	c.activation = (char *)"gelu";
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	/* Per-slot dims are fine for dnn and wdl. */
	make_cfg(&c, "wdl");
	c.slot_dims = dims;
	c.n_slot_dims = NS;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_OK);
	assert_int_equal(st_model_row_dim(m, 1), 9);
	assert_int_equal(st_model_max_row_dim(m), 9);
	st_model_destroy(m);
}

/* Loss sum of the tiny batch in double, for finite differences. */
static double loss_of(const st_model_t *m, st_model_ws_t *ws, st_batch_t *b,
		      float *const *rows, const float *params)
{
	float logit[NEX];
	st_model_forward(m, ws, b, 0, NEX, rows, params, logit, NULL);
	double s = 0;
	for (int i = 0; i < NEX; i++) {
		double z = logit[i], y = b->labels[i];
		s += (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
	}
	return s;
}

/* Central differences on every dense parameter and every row float,
 * against st_model_step's analytic gradient. Tolerance: float forward
 * passes with h = 1e-2 leave O(h²·f''') ≈ 1e-4 truncation plus
 * O(ε_f·|loss|/h) ≈ 1e-5·5/1e-2 = 5e-3·... rounding; atol 2e-3 + rtol 2e-2
 * holds with margin, while a wrong term (missing factor, wrong index) is
 * off by O(|g|). */
static void fd_check(const char *type, const char *pooling, int per_slot_dims)
{
	st_model_cfg_t c;
	make_cfg(&c, type);
	/* "mixed": per-field pooling (model.slot_pooling), slots 0 and 2
	 * mean (2 and 3 keys in tiny_batch's example), slot 1 sum */
	int mixed[NS] = { ST_POOLING_MEAN, ST_POOLING_SUM, ST_POOLING_MODEL };
	if (!strcmp(pooling, "mixed")) {
		c.pooling = (char *)"mean";
		c.slot_pooling = mixed;
		c.n_slot_pooling = NS;
	} else {
		c.pooling = (char *)pooling;
	}
	int dims[NS] = { 3, 5, 2 };
	if (per_slot_dims) {
		c.slot_dims = dims;
		c.n_slot_dims = NS;
	}
	st_model_t *m;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 42), ST_OK);
	st_model_ws_t *ws;
	assert_int_equal(st_model_ws_create(&ws, m, NEX), ST_OK);
	uint32_t nu;
	st_batch_t *b = tiny_batch(&nu);
	const int gs = st_model_max_row_dim(m) + 1;   /* a stride wider than needed */
	static const int slot_of[7] = { 0, 0, 1, 1, 2, 2, 2 };
	float *rowbuf = calloc((size_t)nu * gs, sizeof(float));
	float *rows[7];
	uint64_t rng = 12345;
	for (uint32_t u = 0; u < nu; u++) {
		rows[u] = rowbuf + (size_t)u * gs;
		for (int j = 0; j < st_model_row_dim(m, slot_of[u]); j++) {
			rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
			rows[u][j] = (float)((double)(rng >> 40) / (double)(1ULL << 24) - 0.5);
		}
	}
	rows[6] = NULL;   /* a key without a row reads as zeros, gets gradient anyway */
	size_t np = st_model_nparams(m);
	float *params = malloc(sizeof(float) * np);
	memcpy(params, st_model_params(m), sizeof(float) * np);
	/* Nonzero biases exercise their gradients through the activations. */
	for (size_t i = 0; i < np; i++)
		if (params[i] == 0.0f)
			params[i] = 0.1f * ((float)(i % 5) - 2.0f);
	float *gp = calloc(np, sizeof(float));
	float *gu = calloc((size_t)nu * gs, sizeof(float));
	float prob[NEX];
	double L = st_model_step(m, ws, b, 0, NEX, rows, params, 1.0f, prob, gp, gu, gs);
	assert_true(fabs(L - loss_of(m, ws, b, rows, params)) < 1e-4 * (1 + fabs(L)));
	for (int i = 0; i < NEX; i++) {
		if (!(prob[i] > 0.0f && prob[i] < 1.0f))
			print_message("%s: prob[%d] = %g (loss %g)\n", type, i, prob[i], L);
		assert_true(prob[i] > 0.0f && prob[i] < 1.0f);
	}

	const double h = 1e-2;
	int bad = 0;
	for (size_t i = 0; i < np; i++) {
		float v = params[i];
		params[i] = (float)(v + h);
		double lp = loss_of(m, ws, b, rows, params);
		params[i] = (float)(v - h);
		double lm = loss_of(m, ws, b, rows, params);
		params[i] = v;
		double fd = (lp - lm) / (2 * h);
		if (fabs(fd - gp[i]) > 2e-3 + 2e-2 * fabs(fd)) {
			print_message("%s dense %zu: fd %g analytic %g\n", type, i, fd, gp[i]);
			bad++;
		}
	}
	for (uint32_t u = 0; u < 6; u++)
		for (int j = 0; j < st_model_row_dim(m, slot_of[u]); j++) {
			float v = rows[u][j];
			rows[u][j] = (float)(v + h);
			double lp = loss_of(m, ws, b, rows, params);
			rows[u][j] = (float)(v - h);
			double lm = loss_of(m, ws, b, rows, params);
			rows[u][j] = v;
			double fd = (lp - lm) / (2 * h);
			float an = gu[(size_t)u * gs + j];
			if (fabs(fd - an) > 2e-3 + 2e-2 * fabs(fd)) {
				print_message("%s row %u[%d]: fd %g analytic %g\n", type, u, j, fd, an);
				bad++;
			}
		}
	/* The padding column past a row's width is never written. */
	for (uint32_t u = 0; u < nu; u++)
		assert_true(gu[(size_t)u * gs + gs - 1] == 0.0f);
	assert_int_equal(bad, 0);
	/* Gradients accumulate (+=) and scale linearly. */
	float *gp2 = calloc(np, sizeof(float));
	memcpy(gp2, gp, sizeof(float) * np);
	st_model_step(m, ws, b, 0, NEX, rows, params, 0.5f, prob, gp2, gu, gs);
	for (size_t i = 0; i < np; i++)
		assert_true(fabsf(gp2[i] - 1.5f * gp[i]) <= 1e-5f + 1e-4f * fabsf(gp[i]));
	free(gp2);
	free(gp);
	free(gu);
	free(params);
	free(rowbuf);
	st_batch_destroy(b);
	st_model_ws_destroy(ws);
	st_model_destroy(m);
}

static void test_model_gradcheck_lr(void **state)
{
	(void)state;
	fd_check("lr", "sum", 0);
	fd_check("lr", "mixed", 0);   /* lr has no pooled part: a no-op */
}
static void test_model_gradcheck_dnn(void **state)
{
	(void)state;
	fd_check("dnn", "sum", 0);
	fd_check("dnn", "mean", 1);
	fd_check("dnn", "mixed", 1);
}
static void test_model_gradcheck_wdl(void **state)
{
	(void)state;
	fd_check("wdl", "sum", 0);
	fd_check("wdl", "sum", 1);   /* per-slot wide columns */
	fd_check("wdl", "mixed", 0);
}
static void test_model_gradcheck_deepfm(void **state)
{
	(void)state;
	fd_check("deepfm", "mean", 0);
	fd_check("deepfm", "mixed", 0);
}
static void test_model_gradcheck_dlrm(void **state)
{
	(void)state;
	fd_check("dlrm", "sum", 0);
	fd_check("dlrm", "mixed", 0);
}

/* Per-slot dims are fine for dcnv2 (no field pairs): full and low rank. */
static void test_model_gradcheck_dcnv2(void **state)
{
	(void)state;
	cross_rank = 0;
	fd_check("dcnv2", "sum", 0);
	fd_check("dcnv2", "mixed", 1);
	cross_rank = 2;
	fd_check("dcnv2", "sum", 0);
	fd_check("dcnv2", "mean", 1);
	cross_rank = 0;
}

/* Tensor names and shapes of both forms, and the bad cross fields. */
static void test_model_dcnv2_tensors(void **state)
{
	(void)state;
	static const char *full[] = { "cross.0.weight", "cross.0.bias", "cross.1.weight",
				      "cross.1.bias", "mlp.0.weight", "mlp.0.bias",
				      "mlp.1.weight", "mlp.1.bias", "out.weight", "out.bias" };
	check_names("dcnv2", full, 10);
	st_model_cfg_t c;
	st_model_t *m;
	make_cfg(&c, "dcnv2");
	c.cross_rank = 3;
	assert_int_equal(st_model_create(&m, &c, 13, 26, 1), ST_OK);
	const int d = 26 * EMB + 13;
	const st_tensor_info_t *t = st_model_tensor(m, 0);
	assert_string_equal(t->name, "cross.0.v.weight");
	assert_int_equal(t->shape[0], 3);
	assert_int_equal(t->shape[1], d);
	t = st_model_tensor(m, 1);
	assert_string_equal(t->name, "cross.0.u.weight");
	assert_int_equal(t->shape[0], d);
	assert_int_equal(t->shape[1], 3);
	assert_string_equal(st_model_tensor(m, 2)->name, "cross.0.u.bias");
	t = st_model_tensor(m, st_model_find_tensor(m, "mlp.0.weight"));
	assert_int_equal(t->shape[1], d);    /* the cross stack keeps the width */
	assert_int_equal(st_model_row_dim(m, 0), EMB);
	assert_int_equal(st_model_has_wide(m), 0);
	st_model_destroy(m);
	make_cfg(&c, "dcnv2");
	c.n_cross = 17;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	make_cfg(&c, "dcnv2");
	c.cross_rank = -1;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	make_cfg(&c, "dcnv2");
	c.n_cross = 0;                       /* no cross layers: dnn's graph */
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_OK);
	assert_int_equal(st_model_ntensors(m), 6);
	st_model_destroy(m);
}

/* ---- the graph against a hand-composed reference twin ----------------------
 * deepfm written out with nn.h's layers in the order the presets were
 * hand-written before the layer graph (logit = out + wide + linear + fm;
 * dP = MLP input gradient + FM gradient): st_model_step must agree bit for
 * bit, so a change to the executor that reorders arithmetic shows here. */

/* Parameters by tensor name. */
static const float *tp(const st_model_t *m, const float *p, const char *name)
{
	int i = st_model_find_tensor(m, name);
	assert_true(i >= 0);
	return p + st_model_tensor(m, i)->offset;
}

static float *tg(const st_model_t *m, float *g, const char *name)
{
	return g + st_model_tensor(m, st_model_find_tensor(m, name))->offset;
}

static void test_model_deepfm_matches_hand_composed(void **state)
{
	(void)state;
	st_model_cfg_t c;
	make_cfg(&c, "deepfm");
	c.activation = (char *)"relu";
	st_model_t *m;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 9), ST_OK);
	st_model_ws_t *ws;
	assert_int_equal(st_model_ws_create(&ws, m, NEX), ST_OK);
	uint32_t nu;
	st_batch_t *b = tiny_batch(&nu);
	const int R = EMB + 1, W = NS * EMB, IN = W + ND;
	float rowbuf[7 * (EMB + 1)], *rows[7];
	for (int u = 0; u < 7; u++) {
		rows[u] = rowbuf + u * R;
		for (int j = 0; j < R; j++)
			rows[u][j] = 0.05f * (float)((u * 7 + j * 3) % 11) - 0.25f;
	}
	const float *p = st_model_params(m);
	size_t np = st_model_nparams(m);
	float *gp = calloc(np, sizeof(float)), *gr = calloc(np, sizeof(float));
	float gu[7 * (EMB + 1)] = { 0 }, gur[7 * (EMB + 1)] = { 0 }, prob[NEX];
	double loss = st_model_step(m, ws, b, 0, NEX, rows, p, 0.2f, prob, gp, gu, R);

	/* The twin. */
	int dim[NS], off[NS];
	for (int s = 0; s < NS; s++) {
		dim[s] = EMB;
		off[s] = s * EMB;
	}
	st_pool_layout_t L = { .n_slots = NS, .dim = dim, .off = off, .width = W };
	float xd[NEX * ND], P[NEX * W], X0[NEX * IN], h0[NEX * 6], h1[NEX * 5];
	float logit[NEX], tmp[NEX], fm[NEX], dl[NEX], pr[NEX], d1[NEX * 5], d0[NEX * 6];
	float dX0[NEX * IN], dP[NEX * W], dFM[NEX * W];
	for (int i = 0; i < NEX * ND; i++)
		xd[i] = b->dense[i] > 0.0f ? log1pf(b->dense[i]) : 0.0f;
	st_pool_forward(&L, 0, NEX, b->row_off, b->key_slot, b->key_val, b->key_idx, rows, P);
	for (int i = 0; i < NEX; i++) {
		memcpy(X0 + i * IN, P + i * W, sizeof(float) * W);
		memcpy(X0 + i * IN + W, xd + i * ND, sizeof(float) * ND);
	}
	st_linear_forward(NEX, IN, 6, X0, tp(m, p, "mlp.0.weight"), tp(m, p, "mlp.0.bias"), h0);
	st_relu_forward(NEX * 6, h0, h0);
	st_linear_forward(NEX, 6, 5, h0, tp(m, p, "mlp.1.weight"), tp(m, p, "mlp.1.bias"), h1);
	st_relu_forward(NEX * 5, h1, h1);
	st_linear_forward(NEX, 5, 1, h1, tp(m, p, "out.weight"), tp(m, p, "out.bias"), logit);
	st_wide_forward(0, NEX, b->row_off, b->key_val, b->key_idx, rows, EMB, tmp);
	for (int i = 0; i < NEX; i++)
		logit[i] += tmp[i];
	st_linear_forward(NEX, ND, 1, xd, tp(m, p, "dense.weight"), tp(m, p, "dense.bias"), tmp);
	for (int i = 0; i < NEX; i++)
		logit[i] += tmp[i];
	st_fm_forward(NEX, NS, EMB, P, fm);
	for (int i = 0; i < NEX; i++)
		logit[i] += fm[i];
	double lr = st_logloss_forward_backward(NEX, logit, b->labels, 0.2f, pr, dl);
	st_wide_backward(0, NEX, b->row_off, b->key_val, b->key_idx, dl, gur, R, EMB);
	st_linear_backward(NEX, ND, 1, xd, tp(m, p, "dense.weight"), dl, NULL,
			   tg(m, gr, "dense.weight"), tg(m, gr, "dense.bias"));
	st_linear_backward(NEX, 5, 1, h1, tp(m, p, "out.weight"), dl, d1, tg(m, gr, "out.weight"),
			   tg(m, gr, "out.bias"));
	st_relu_backward(NEX * 5, h1, d1, d1);
	st_linear_backward(NEX, 6, 5, h0, tp(m, p, "mlp.1.weight"), d1, d0,
			   tg(m, gr, "mlp.1.weight"), tg(m, gr, "mlp.1.bias"));
	st_relu_backward(NEX * 6, h0, d0, d0);
	st_linear_backward(NEX, IN, 6, X0, tp(m, p, "mlp.0.weight"), d0, dX0,
			   tg(m, gr, "mlp.0.weight"), tg(m, gr, "mlp.0.bias"));
	for (int i = 0; i < NEX; i++)
		memcpy(dP + i * W, dX0 + i * IN, sizeof(float) * W);
	st_fm_backward(NEX, NS, EMB, P, dl, dFM);
	for (int j = 0; j < NEX * W; j++)
		dP[j] += dFM[j];
	st_pool_backward(&L, 0, NEX, b->row_off, b->key_slot, b->key_val, b->key_idx, dP, gur, R);

	assert_true(loss == lr);
	assert_memory_equal(prob, pr, sizeof prob);
	assert_memory_equal(gp, gr, np * sizeof(float));
	assert_memory_equal(gu, gur, sizeof gu);
	free(gp);
	free(gr);
	st_batch_destroy(b);
	st_model_ws_destroy(ws);
	st_model_destroy(m);
}

/* Two models built from a and b step bit for bit alike: same parameter
 * count and initial values, same loss, probabilities, dense and row
 * gradients on tiny_batch (rows EMB + 1 wide, so a wide column exists). */
static void assert_same_model(const st_model_cfg_t *ca, const st_model_cfg_t *cb)
{
	enum { RW = EMB + 1 };
	st_model_t *a, *d;
	assert_int_equal(st_model_create(&a, ca, ND, NS, 5), ST_OK);
	assert_int_equal(st_model_create(&d, cb, ND, NS, 5), ST_OK);
	size_t np = st_model_nparams(a);
	assert_int_equal(np, st_model_nparams(d));
	assert_int_equal(st_model_ntensors(a), st_model_ntensors(d));
	for (int t = 0; t < st_model_ntensors(a); t++)
		assert_string_equal(st_model_tensor(a, t)->name, st_model_tensor(d, t)->name);
	assert_int_equal(st_model_has_wide(a), st_model_has_wide(d));
	assert_int_equal(st_model_max_row_dim(a), st_model_max_row_dim(d));
	assert_memory_equal(st_model_params(a), st_model_params(d), np * sizeof(float));
	assert_true(st_model_flops_per_example(a) == st_model_flops_per_example(d));
	/* the nodes' shares (strata plan's lines) add up to the whole */
	const st_lgraph_t *gg = st_model_graph(d);
	size_t sp = 0;
	double sf = 0;
	for (int i = 0; i < st_lgraph_nnodes(gg); i++) {
		st_lgraph_node_info_t ni;
		assert_int_equal(st_lgraph_node_info(gg, i, &ni), ST_OK);
		assert_int_equal(ni.width, st_lgraph_width(gg, i));
		sp += ni.nparams;
		sf += ni.flops;
	}
	assert_int_equal(st_lgraph_node_info(gg, st_lgraph_nnodes(gg), &(st_lgraph_node_info_t){ 0 }),
			 ST_EINVAL);
	assert_int_equal(sp, np);
	assert_true(fabs(sf - st_model_flops_per_example(d)) <= 1e-9 * sf);
	st_model_ws_t *wa, *wd;
	assert_int_equal(st_model_ws_create(&wa, a, NEX), ST_OK);
	assert_int_equal(st_model_ws_create(&wd, d, NEX), ST_OK);
	uint32_t nu;
	st_batch_t *b = tiny_batch(&nu);
	float rowbuf[7 * RW], *rows[7];
	for (int u = 0; u < 7; u++) {
		rows[u] = rowbuf + u * RW;
		for (int j = 0; j < RW; j++)
			rows[u][j] = 0.03f * (float)((u * 5 + j) % 9) - 0.1f;
	}
	float *ga = calloc(np, sizeof(float)), *gd = calloc(np, sizeof(float));
	float ua[7 * RW] = { 0 }, ud[7 * RW] = { 0 }, pa[NEX], pd[NEX];
	double la = st_model_step(a, wa, b, 0, NEX, rows, st_model_params(a), 1.0f, pa, ga, ua, RW);
	double ld = st_model_step(d, wd, b, 0, NEX, rows, st_model_params(d), 1.0f, pd, gd, ud, RW);
	assert_true(la == ld);
	assert_memory_equal(pa, pd, sizeof pa);
	assert_memory_equal(ga, gd, np * sizeof(float));
	assert_memory_equal(ua, ud, sizeof ua);
	free(ga);
	free(gd);
	st_batch_destroy(b);
	st_model_ws_destroy(wa);
	st_model_ws_destroy(wd);
	st_model_destroy(a);
	st_model_destroy(d);
}

/* dcnv2 without cross layers is the dnn's graph: same tensors, same initial
 * values, same step, bit for bit. */
static void test_model_dcnv2_without_cross_is_dnn(void **state)
{
	(void)state;
	st_model_cfg_t c, d;
	make_cfg(&c, "dnn");
	make_cfg(&d, "dcnv2");
	d.n_cross = 0;
	assert_same_model(&c, &d);
}

/* Appends a node to a graph config; returns its index. in: -1 ends. */
static int node(st_model_cfg_t *c, int kind, const char *name, int a, int b, const int *in)
{
	st_model_node_t *nd = &c->nodes[c->n_nodes];
	nd->kind = kind;
	strcpy(nd->name, name);
	for (nd->n_in = 0; in && in[nd->n_in] >= 0; nd->n_in++)
		nd->in[nd->n_in] = in[nd->n_in];
	nd->a = a;
	nd->b = b;
	return c->n_nodes++;
}

static int mlp_node(st_model_cfg_t *c, const char *name, int in, int n, const int *sizes)
{
	int i = node(c, ST_NODE_MLP, name, ST_LGRAPH_ACT_SIGMOID, 0, (int[]){ in, -1 });
	c->nodes[i].n_sizes = n;
	memcpy(c->nodes[i].sizes, sizes, sizeof(int) * (size_t)n);
	return i;
}

/* The presets declared as graphs (what a job file's st.model.graph gives
 * lang.c) build the presets' models bit for bit: the graph path adds no
 * arithmetic of its own, only the order the layers are listed in. */
static void test_model_graph_matches_presets(void **state)
{
	(void)state;
	static const char *const presets[] = { "dnn", "deepfm", "dcnv2", "dlrm" };
	for (int r = 0; r < 2; r++)
		for (size_t p = 0; p < sizeof presets / sizeof *presets; p++) {
			cross_rank = r * 2;
			if (r && strcmp(presets[p], "dcnv2"))
				continue;
			st_model_cfg_t pc, gc;
			make_cfg(&pc, presets[p]);
			make_cfg(&gc, "graph");
			st_model_cfg_t *g = &gc;
			const char *t = presets[p];
			if (!strcmp(t, "dlrm")) {
				int x = node(g, ST_NODE_DENSE, "x", 1, 0, NULL);
				int z0 = mlp_node(g, "bot", x, pc.n_bottom, pc.bottom);
				int e = node(g, ST_NODE_EMBED, "e", 0, 0, NULL);
				int Z = node(g, ST_NODE_CONCAT, "Z", 0, 0, (int[]){ z0, e, -1 });
				int d = node(g, ST_NODE_DOT, "d", NS + 1, 0, (int[]){ Z, -1 });
				int top = node(g, ST_NODE_CONCAT, "top", 0, 0, (int[]){ z0, d, -1 });
				int h = mlp_node(g, "mlp", top, pc.n_hidden, pc.hidden);
				g->node_out = node(g, ST_NODE_LINEAR, "out", 1, 0, (int[]){ h, -1 });
			} else {
				int fm = !strcmp(t, "deepfm");
				int x = node(g, ST_NODE_DENSE, "x", 1, 0, NULL);
				int lin = fm ? node(g, ST_NODE_LINEAR, "dense", 1, 0, (int[]){ x, -1 }) : -1;
				int e = node(g, ST_NODE_EMBED, "e", 0, 0, NULL);
				int h = node(g, ST_NODE_CONCAT, "x0", 0, 0, (int[]){ e, x, -1 });
				if (!strcmp(t, "dcnv2"))
					h = node(g, ST_NODE_CROSS, "cross", pc.n_cross, pc.cross_rank,
						 (int[]){ h, -1 });
				h = mlp_node(g, "mlp", h, pc.n_hidden, pc.hidden);
				g->node_out = node(g, ST_NODE_LINEAR, "out", 1, 0, (int[]){ h, -1 });
				if (fm) {
					int w = node(g, ST_NODE_WIDE, "w", 0, 0, NULL);
					int f = node(g, ST_NODE_FM, "f", NS, 0, (int[]){ e, -1 });
					g->node_out = node(g, ST_NODE_ADD, "sum", 0, 0,
							   (int[]){ g->node_out, w, lin, f, -1 });
				}
			}
			assert_same_model(&pc, &gc);
		}
	cross_rank = 0;
}

/* A malformed node list (an input below its reader, an output past the
 * end) is refused at creation, not run. */
static void test_model_graph_bad_nodes(void **state)
{
	(void)state;
	st_model_cfg_t c;
	st_model_t *m;
	make_cfg(&c, "graph");
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);   /* no nodes */
	int e = node(&c, ST_NODE_EMBED, "e", 0, 0, NULL);
	node(&c, ST_NODE_LINEAR, "out", 1, 0, (int[]){ 2, -1 });   /* reads node 2 */
	c.node_out = 1;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	c.nodes[1].in[0] = e;
	c.node_out = 2;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	c.node_out = 0;                     /* the embeddings: not 1 wide */
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	c.node_out = 1;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_OK);
	st_model_destroy(m);
}

/* A sequence slot (pooling "none") is only for a graph's attention layer:
 * a preset refuses it; a graph with attention over it builds, its embed
 * leaves the slot out, and its tensors are the attention's then the rest. */
static void test_model_sequence_slot(void **state)
{
	(void)state;
	int pool[NS] = { ST_POOLING_MODEL, ST_POOLING_MODEL, ST_POOLING_NONE };
	st_model_cfg_t c;
	st_model_t *m = NULL;
	make_cfg(&c, "dnn");
	c.slot_pooling = pool;
	c.n_slot_pooling = NS;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	assert_null(m);
	make_cfg(&c, "graph");
	c.slot_pooling = pool;
	c.n_slot_pooling = NS;
	c.nodes[0] = (st_model_node_t){ .kind = ST_NODE_EMBED, .name = "e" };
	c.nodes[1] = (st_model_node_t){ .kind = ST_NODE_ATTENTION, .name = "din", .a = 0,
				       .b = 2, .c = 1, .n_sizes = 1, .sizes = { 6 } };
	c.nodes[2] = (st_model_node_t){ .kind = ST_NODE_CONCAT, .name = "h", .n_in = 2,
				       .in = { 0, 1 } };
	c.nodes[3] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "out", .n_in = 1,
				       .in = { 2 }, .a = 1 };
	c.n_nodes = 4;
	c.node_out = 3;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_OK);
	const st_lgraph_t *g = st_model_graph(m);
	assert_int_equal(st_lgraph_width(g, 0), 2 * EMB);   /* slots 0 and 1 */
	assert_int_equal(st_lgraph_width(g, 1), EMB);
	assert_string_equal(st_model_tensor(m, 0)->name, "din.att.0.weight");
	assert_string_equal(st_model_tensor(m, 3)->name, "din.att.1.bias");
	assert_string_equal(st_model_tensor(m, 4)->name, "out.weight");
	assert_int_equal(st_model_tensor(m, 4)->shape[1], 3 * EMB);
	st_model_destroy(m);
}

/* Σ_h w_h Σ_i logloss(z_ih, y_i,label_h), by hand from the forward's logits. */
static double two_head_loss(const st_model_t *m, st_model_ws_t *ws, const st_batch_t *b,
			    float *const *rows, const float *params, const double *w)
{
	float z[NEX * 2];
	st_model_forward(m, ws, b, 0, NEX, rows, params, z, NULL);
	double L = 0.0;
	for (int i = 0; i < NEX; i++)
		for (int h = 0; h < 2; h++) {
			double zz = z[i * 2 + h], y = b->labels[i * 2 + (1 - h)];   /* label 1 - h */
			L += w[h] * (log1p(exp(-fabs(zz))) + (zz > 0 ? zz : 0.0) - y * zz);
		}
	return L;
}

/* Two heads (model.heads): head "ctr" learns label 1 and head "cvr" label 0
 * (the heads' order need not be the labels'), with weights 1 and 0.5; cvr =
 * add(ctr, t), so one head's node also feeds the other and its gradient
 * sums both paths. The loss is the hand-computed Σ_h w_h Σ_i logloss, the
 * predictions are σ of each head's logit, and every dense and row gradient
 * matches finite differences of that loss. */
static void test_model_two_heads(void **state)
{
	(void)state;
	st_model_cfg_t c;
	make_cfg(&c, "graph");
	st_model_node_t *nd = c.nodes;
	nd[0] = (st_model_node_t){ .kind = ST_NODE_EMBED, .name = "e" };
	nd[1] = (st_model_node_t){ .kind = ST_NODE_DENSE, .name = "x", .a = 0 };
	nd[2] = (st_model_node_t){ .kind = ST_NODE_CONCAT, .name = "h", .n_in = 2, .in = { 0, 1 } };
	nd[3] = (st_model_node_t){ .kind = ST_NODE_MLP, .name = "mlp", .n_in = 1, .in = { 2 },
				   .n_sizes = 1, .sizes = { 6 }, .a = ST_LGRAPH_ACT_SIGMOID };
	nd[4] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "ctr", .n_in = 1, .in = { 3 },
				   .a = 1 };
	nd[5] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "t", .n_in = 1, .in = { 3 },
				   .a = 1 };
	nd[6] = (st_model_node_t){ .kind = ST_NODE_ADD, .name = "cvr", .n_in = 2, .in = { 4, 5 } };
	c.n_nodes = 7;
	c.node_out = 4;
	c.n_heads = 2;
	c.heads[0] = (st_model_head_t){ .node = 4, .label = 1, .weight = 1.0, .name = "click" };
	c.heads[1] = (st_model_head_t){ .node = 6, .label = 0, .weight = 0.5, .name = "conv" };
	const double w[2] = { 1.0, 0.5 };
	st_model_t *m;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 42), ST_OK);
	assert_int_equal(st_model_nheads(m), 2);
	assert_int_equal(st_model_head_label(m, 0), 1);
	assert_string_equal(st_model_head_name(m, 1), "conv");
	st_model_ws_t *ws;
	assert_int_equal(st_model_ws_create(&ws, m, NEX), ST_OK);
	uint32_t nu;
	st_batch_t *b = tiny_batch(&nu);
	b->n = 0;
	assert_int_equal(st_batch_set_labels(b, 2), ST_OK);
	b->n = NEX;
	for (int i = 0; i < NEX; i++) {
		b->labels[i * 2] = (float)(i % 2);
		b->labels[i * 2 + 1] = (float)(i % 3 == 0);
	}
	static const int slot_of[7] = { 0, 0, 1, 1, 2, 2, 2 };
	const int gs = st_model_max_row_dim(m);
	float *rowbuf = calloc((size_t)nu * gs, sizeof(float));
	float *rows[7];
	uint64_t rng = 777;
	for (uint32_t u = 0; u < nu; u++) {
		rows[u] = rowbuf + (size_t)u * gs;
		for (int j = 0; j < st_model_row_dim(m, slot_of[u]); j++) {
			rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
			rows[u][j] = (float)((double)(rng >> 40) / (double)(1ULL << 24) - 0.5);
		}
	}
	size_t np = st_model_nparams(m);
	float *params = malloc(sizeof(float) * np);
	memcpy(params, st_model_params(m), sizeof(float) * np);
	for (size_t i = 0; i < np; i++)
		if (params[i] == 0.0f)
			params[i] = 0.1f * ((float)(i % 5) - 2.0f);
	float *gp = calloc(np, sizeof(float));
	float *gu = calloc((size_t)nu * gs, sizeof(float));
	float prob[NEX * 2], z[NEX * 2];
	double L = st_model_step(m, ws, b, 0, NEX, rows, params, 1.0f, prob, gp, gu, gs);
	assert_true(fabs(L - two_head_loss(m, ws, b, rows, params, w)) < 1e-5 * (1 + fabs(L)));
	st_model_forward(m, ws, b, 0, NEX, rows, params, z, NULL);
	for (int k = 0; k < NEX * 2; k++)
		assert_true(fabs(prob[k] - 1.0 / (1.0 + exp(-(double)z[k]))) < 1e-6);
	/* cvr = ctr + t: the heads' logits differ (t is not 0) */
	assert_true(z[0] != z[1]);

	const double h = 1e-2;
	int bad = 0;
	for (size_t i = 0; i < np; i++) {
		float v = params[i];
		params[i] = (float)(v + h);
		double lp = two_head_loss(m, ws, b, rows, params, w);
		params[i] = (float)(v - h);
		double lm = two_head_loss(m, ws, b, rows, params, w);
		params[i] = v;
		double fd = (lp - lm) / (2 * h);
		if (fabs(fd - gp[i]) > 2e-3 + 2e-2 * fabs(fd)) {
			print_message("two heads dense %zu: fd %g analytic %g\n", i, fd, gp[i]);
			bad++;
		}
	}
	for (uint32_t u = 0; u < nu; u++)
		for (int j = 0; j < st_model_row_dim(m, slot_of[u]); j++) {
			float v = rows[u][j];
			rows[u][j] = (float)(v + h);
			double lp = two_head_loss(m, ws, b, rows, params, w);
			rows[u][j] = (float)(v - h);
			double lm = two_head_loss(m, ws, b, rows, params, w);
			rows[u][j] = v;
			double fd = (lp - lm) / (2 * h);
			float an = gu[(size_t)u * gs + j];
			if (fabs(fd - an) > 2e-3 + 2e-2 * fabs(fd)) {
				print_message("two heads row %u[%d]: fd %g analytic %g\n", u, j, fd, an);
				bad++;
			}
		}
	assert_int_equal(bad, 0);
	/* A config with two heads on one label, or on a preset, is refused. */
	c.heads[1].label = 1;
	st_model_t *m2;
	assert_int_equal(st_model_create(&m2, &c, ND, NS, 42), ST_EINVAL);
	c.heads[1].label = 0;
	c.heads[1].weight = 0.0;
	assert_int_equal(st_model_create(&m2, &c, ND, NS, 42), ST_EINVAL);
	free(gp);
	free(gu);
	free(params);
	free(rowbuf);
	st_batch_destroy(b);
	st_model_ws_destroy(ws);
	st_model_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_tensor_names),
		cmocka_unit_test(test_model_shapes),
		cmocka_unit_test(test_model_rejects_bad_shapes),
		cmocka_unit_test(test_model_gradcheck_lr),
		cmocka_unit_test(test_model_gradcheck_dnn),
		cmocka_unit_test(test_model_gradcheck_wdl),
		cmocka_unit_test(test_model_gradcheck_deepfm),
		cmocka_unit_test(test_model_gradcheck_dlrm),
		cmocka_unit_test(test_model_gradcheck_dcnv2),
		cmocka_unit_test(test_model_dcnv2_tensors),
		cmocka_unit_test(test_model_deepfm_matches_hand_composed),
		cmocka_unit_test(test_model_dcnv2_without_cross_is_dnn),
		cmocka_unit_test(test_model_graph_matches_presets),
		cmocka_unit_test(test_model_graph_bad_nodes),
		cmocka_unit_test(test_model_sequence_slot),
		cmocka_unit_test(test_model_two_heads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
