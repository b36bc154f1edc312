/* test_mmoe.c — MMoE (ops/nn/mmoe.h: the fast path and its reference) and its graph nodes (st_lgraph_mmoe,
 * st_lgraph_slice): a hand-computed forward, the layer against a plain-loop
 * reference written out below, finite-difference gradients of the layer
 * (every tensor and the input) and of a two-tower graph (every dense
 * parameter and every row float, through the slices), one expert with one
 * task equal to a plain MLP bit for bit (the gate is exactly 1 and its
 * gradient exactly 0), tensor names and order, and builder errors. */
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
#include "ops/nn/mmoe.h"
#include "runtime/simd.h"
#include "runtime/err.h"

static uint64_t lcg = 12345;
static float rnd(void)   /* uniform(-0.5, 0.5) */
{
	lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float)((double)(lcg >> 40) / (double)(1ULL << 24) - 0.5);
}

static void *scratch_for(const st_mmoe_shape_t *s, int n)
{
	size_t bytes = (st_mmoe_scratch_bytes(s, (uint32_t)n) + 63) & ~(size_t)63;
	void *p = aligned_alloc(64, bytes);
	assert_non_null(p);
	return p;
}

/* ---- the layer alone ------------------------------------------------------ */

/* E = 2, T = 2, one layer of 2 without activation, x = [1, 2]:
 *   f_0 = I x = [1, 2];  f_1 = [[0,1],[1,0]] x + [1, 0] = [3, 1]
 *   gate 0: logits [0, 0]    -> g = [1/2, 1/2] -> o_0 = [2, 1.5]
 *   gate 1: logits [ln 3, 0] -> g = [3/4, 1/4] -> o_1 = [1.5, 1.75] */
static void test_mmoe_forward_exact(void **state)
{
	(void)state;
	st_mmoe_shape_t s = { .d_in = 2, .n_experts = 2, .n_tasks = 2, .n_layers = 1,
			      .sizes = { 2 }, .act = 0 };
	const float P[] = {
		1, 0, 0, 1, 0, 0,          /* expert.0.0 weight, bias */
		0, 1, 1, 0, 1, 0,          /* expert.1.0 */
		0, 0, 0, 0, 0, 0,          /* gate.0 */
		0, 0, 0, 0, logf(3.0f), 0, /* gate.1 */
	};
	assert_int_equal(st_mmoe_nparams(&s), sizeof P / sizeof P[0]);
	const float X[2] = { 1, 2 }, want[4] = { 2, 1.5f, 1.5f, 1.75f };
	float out[4];
	void *sc = scratch_for(&s, 1);
	st_mmoe_forward(&s, 1, X, P, sc, out);
	for (int j = 0; j < 4; j++)
		assert_float_equal(out[j], want[j], 1e-6);
	free(sc);
}

/* The plain-loop reference: every sum in double, in the paper's order
 * (checks st_mmoe_forward; st_mmoe_forward_ref is pinned to it below). */
static void ref_forward(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
			double *out)
{
	const int E = s->n_experts, K = s->n_layers, h = s->sizes[K - 1];
	double f[8][64], a[64], b[64];
	for (int i = 0; i < n; i++) {
		const float *p = P;
		for (int e = 0; e < E; e++) {
			for (int j = 0; j < s->d_in; j++)
				a[j] = X[i * s->d_in + j];
			int in = s->d_in;
			for (int k = 0; k < K; k++) {
				const int o = s->sizes[k];
				for (int r = 0; r < o; r++) {
					double z = p[o * in + r];
					for (int c = 0; c < in; c++)
						z += (double)p[r * in + c] * a[c];
					b[r] = s->act == 1 ? (z > 0 ? z : 0)
					       : s->act == 2 ? 1 / (1 + exp(-z)) : z;
				}
				p += o * (in + 1);
				memcpy(a, b, sizeof(double) * o);
				in = o;
			}
			memcpy(f[e], a, sizeof(double) * h);
		}
		for (int t = 0; t < s->n_tasks; t++) {
			double z[8], mx = -1e300, sum = 0;
			for (int e = 0; e < E; e++) {
				z[e] = p[E * s->d_in + e];
				for (int c = 0; c < s->d_in; c++)
					z[e] += (double)p[e * s->d_in + c] * X[i * s->d_in + c];
				mx = z[e] > mx ? z[e] : mx;
			}
			for (int e = 0; e < E; e++)
				sum += exp(z[e] - mx);
			for (int j = 0; j < h; j++) {
				double o = 0;
				for (int e = 0; e < E; e++)
					o += exp(z[e] - mx) / sum * f[e][j];
				out[(size_t)i * s->n_tasks * h + t * h + j] = o;
			}
			p += E * (s->d_in + 1);
		}
	}
}

static const st_mmoe_shape_t shape3 = { .d_in = 5, .n_experts = 3, .n_tasks = 2,
					 .n_layers = 2, .sizes = { 4, 3 }, .act = 2 };

/* Float sums of at most 6 products of values below 1 against double:
 * a few 1e-7; 1e-5 is far below a wrong term (1e-2 and up). */
static void test_mmoe_matches_plain_loops(void **state)
{
	(void)state;
	for (int act = 0; act <= 2; act++) {
		st_mmoe_shape_t s = shape3;
		s.act = act;
		enum { N = 6 };
		size_t np = st_mmoe_nparams(&s);
		float *P = malloc(sizeof(float) * np), X[N * 5], out[N * 6];
		double ref[N * 6];
		for (size_t i = 0; i < np; i++)
			P[i] = 2 * rnd();
		for (int i = 0; i < N * 5; i++)
			X[i] = 2 * rnd();
		void *sc = scratch_for(&s, N);
		st_mmoe_forward(&s, N, X, P, sc, out);
		ref_forward(&s, N, X, P, ref);
		for (int j = 0; j < N * 6; j++)
			assert_true(fabs(out[j] - ref[j]) < 1e-5);
		free(sc);
		free(P);
	}
}

static int use_ref;   /* layer_gradcheck: the reference path instead */

static double layer_loss(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
			 const float *c, void *sc)
{
	float out[8 * 6];
	(use_ref ? st_mmoe_forward_ref : st_mmoe_forward)(s, n, X, P, sc, out);
	double l = 0;
	for (int j = 0; j < n * st_mmoe_width(s); j++)
		l += (double)c[j] * out[j];
	return l;
}

/* Central differences of Σ c·out over every parameter and every input
 * float, h = 1e-2 in float: with sigmoid experts the truncation is ~1e-4,
 * atol 2e-3 + rtol 2e-2 catches a dropped term or a sign (O(|g|)). */
static void layer_gradcheck(void)
{
	const st_mmoe_shape_t *s = &shape3;
	enum { N = 4 };
	const int W = st_mmoe_width(s);
	size_t np = st_mmoe_nparams(s);
	float *P = malloc(sizeof(float) * np), *dP = calloc(np, sizeof(float));
	float X[N * 5], dX[N * 5], c[N * 6];
	assert_non_null(P);
	assert_non_null(dP);
	for (size_t i = 0; i < np; i++)
		P[i] = 2 * rnd();
	for (int i = 0; i < N * 5; i++)
		X[i] = 2 * rnd();
	for (int i = 0; i < N * W; i++)
		c[i] = 2 * rnd();
	void *sc = scratch_for(s, N);
	layer_loss(s, N, X, P, c, sc);
	(use_ref ? st_mmoe_backward_ref : st_mmoe_backward)(s, N, X, P, c, sc, dX, dP);
	const double h = 1e-2;
	int bad = 0;
	for (size_t i = 0; i < np; i++) {
		float v = P[i];
		P[i] = (float)(v + h);
		double lp = layer_loss(s, N, X, P, c, sc);
		P[i] = (float)(v - h);
		double lm = layer_loss(s, N, X, P, c, sc);
		P[i] = v;
		double fd = (lp - lm) / (2 * h);
		if (fabs(fd - dP[i]) > 2e-3 + 2e-2 * fabs(fd)) {
			print_message("param %zu: fd %g analytic %g\n", i, fd, dP[i]);
			bad++;
		}
	}
	for (int i = 0; i < N * 5; i++) {
		float v = X[i];
		X[i] = (float)(v + h);
		double lp = layer_loss(s, N, X, P, c, sc);
		X[i] = (float)(v - h);
		double lm = layer_loss(s, N, X, P, c, sc);
		X[i] = v;
		double fd = (lp - lm) / (2 * h);
		if (fabs(fd - dX[i]) > 2e-3 + 2e-2 * fabs(fd)) {
			print_message("x %d: fd %g analytic %g\n", i, fd, dX[i]);
			bad++;
		}
	}
	/* The gates' gradients are not all zero (T, E > 1 and distinct experts). */
	size_t g0 = np - (size_t)s->n_tasks * s->n_experts * (s->d_in + 1);
	int nz = 0;
	for (size_t i = g0; i < np; i++)
		nz += dP[i] != 0.0f;
	assert_true(nz > (int)(np - g0) / 2);
	assert_int_equal(bad, 0);
	free(sc);
	free(P);
	free(dP);
}

static void test_mmoe_layer_gradcheck(void **state)
{
	(void)state;
	use_ref = 0;
	layer_gradcheck();
}

static void test_mmoe_layer_gradcheck_ref(void **state)
{
	(void)state;
	use_ref = 1;
	layer_gradcheck();
	use_ref = 0;
}

/* Inputs for one shape and two runs' outputs: the runs of a comparison. */
typedef struct pair {
	const st_mmoe_shape_t *s;
	int n;
	size_t np;
	float *P, *X, *dout, *o[2], *dX[2], *dP[2];
} pair_t;

static void pair_make(pair_t *q, const st_mmoe_shape_t *s, int n)
{
	const int W = st_mmoe_width(s), d = s->d_in;
	q->s = s;
	q->n = n;
	q->np = st_mmoe_nparams(s);
	q->P = malloc(sizeof(float) * q->np);
	q->X = malloc(sizeof(float) * n * d);
	q->dout = malloc(sizeof(float) * n * W);
	assert_true(q->P && q->X && q->dout);
	for (size_t i = 0; i < q->np; i++)
		q->P[i] = 2 * rnd();
	for (int i = 0; i < n * d; i++)
		q->X[i] = 2 * rnd();
	for (int i = 0; i < n * W; i++)
		q->dout[i] = 2 * rnd();
	for (int k = 0; k < 2; k++) {
		q->o[k] = malloc(sizeof(float) * n * W);
		q->dX[k] = malloc(sizeof(float) * n * d);
		q->dP[k] = malloc(sizeof(float) * q->np);
		assert_true(q->o[k] && q->dX[k] && q->dP[k]);
		for (size_t i = 0; i < q->np; i++)
			q->dP[k][i] = 0.25f * (float)(i % 7);
	}
}

/* Forward and backward into run k's outputs: the reference path or the fast. */
static void pair_run(pair_t *q, int k, int ref)
{
	void *sc = scratch_for(q->s, q->n);
	(ref ? st_mmoe_forward_ref : st_mmoe_forward)(q->s, q->n, q->X, q->P, sc, q->o[k]);
	(ref ? st_mmoe_backward_ref : st_mmoe_backward)(q->s, q->n, q->X, q->P, q->dout, sc,
							 q->dX[k], q->dP[k]);
	free(sc);
}

static void pair_free(pair_t *q)
{
	for (int k = 0; k < 2; k++) {
		free(q->o[k]);
		free(q->dX[k]);
		free(q->dP[k]);
	}
	free(q->P);
	free(q->X);
	free(q->dout);
}

/* The fast path (the first maps as one sgemm) against the reference on
 * several shapes: outputs, dX and dP (+= onto nonzero values). Both are
 * float sums over at most d_in + 1 = 10 terms in a different grouping;
 * 1e-5 + 1e-5·|ref| is ~100 float ulps, far below a wrong or missing
 * term (1e-2 and up with these values). */
static void test_mmoe_fast_matches_reference(void **state)
{
	(void)state;
	static const st_mmoe_shape_t shapes[] = {
		{ .d_in = 5, .n_experts = 3, .n_tasks = 2, .n_layers = 2, .sizes = { 4, 3 }, .act = 1 },
		{ .d_in = 9, .n_experts = 1, .n_tasks = 1, .n_layers = 1, .sizes = { 6 }, .act = 2 },
		{ .d_in = 7, .n_experts = 4, .n_tasks = 3, .n_layers = 3, .sizes = { 5, 4, 2 },
		  .act = 0 },
		{ .d_in = 3, .n_experts = 2, .n_tasks = 4, .n_layers = 1, .sizes = { 8 }, .act = 1 },
	};
	for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
		const st_mmoe_shape_t *s = &shapes[c];
		const int W = st_mmoe_width(s), d = s->d_in, N = 7;
		pair_t q;
		pair_make(&q, s, N);
		pair_run(&q, 0, 0);
		pair_run(&q, 1, 1);
		int bad = 0;
#define CLOSE(a, b) (fabs((double)(a) - (b)) <= 1e-5 + 1e-5 * fabs((double)(b)))
		for (int i = 0; i < N * W; i++)
			bad += !CLOSE(q.o[0][i], q.o[1][i]);
		for (int i = 0; i < N * d; i++)
			bad += !CLOSE(q.dX[0][i], q.dX[1][i]);
		for (size_t i = 0; i < q.np; i++)
			bad += !CLOSE(q.dP[0][i], q.dP[1][i]);
#undef CLOSE
		if (bad)
			print_message("shape %zu: %d values differ\n", c, bad);
		assert_int_equal(bad, 0);
		pair_free(&q);
	}
}

/* ---- graph nodes ------------------------------------------------------------ */

/* Two slots of dim 3, one key each; 2 dense features. */
enum { ND = 2, NS = 2, DIM = 3, NEX = 5, NU = 6, RD = DIM };
static const int dims[NS] = { DIM, DIM }, offs[NS] = { 0, DIM };

static st_lgraph_sparse_t sparse(void)
{
	st_lgraph_sparse_t sp = { 0 };
	sp.pool = (st_pool_layout_t){ .n_slots = NS, .dim = dims, .off = offs,
				      .width = NS * DIM };
	return sp;
}

static st_batch_t *batch(void)
{
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, NEX, ND, NS, 16), ST_OK);
	b->key_idx = malloc(sizeof(uint32_t) * 16);
	assert_non_null(b->key_idx);
	uint32_t k = 0;
	for (int i = 0; i < NEX; i++) {
		b->labels[i] = (float)(i % 2);
		for (int d = 0; d < ND; d++)
			b->dense[i * ND + d] = (float)((i + 1) * (d + 2) % 4) - 1.0f;
		b->row_off[i] = k;
		for (int s = 0; s < NS; s++) {
			b->keys[k] = (uint64_t)(s * 3 + (i + s) % 3);
			b->key_slot[k] = (uint16_t)s;
			b->key_val[k] = 1.0f;
			b->key_idx[k] = (uint32_t)b->keys[k];
			k++;
		}
	}
	b->row_off[NEX] = k;
	b->n = NEX;
	return b;
}

static void fill_rows(float *rowbuf, float **rows)
{
	for (int u = 0; u < NU; u++) {
		rows[u] = rowbuf + u * RD;
		for (int j = 0; j < RD; j++)
			rows[u][j] = 2 * rnd();
	}
}

/* The parity test's graph: logit = out0(tower0(slice0(m))) +
 * out1(tower1(slice1(m))), m = mmoe(concat(embed, dense)). */
static st_lgraph_t *two_towers(int act)
{
	st_lgraph_sparse_t sp = sparse();
	st_lgraph_t *g;
	assert_int_equal(st_lgraph_create(&g, &sp, ND), ST_OK);
	int e = st_lgraph_embed(g), x = st_lgraph_dense(g, 0);
	int c = st_lgraph_concat(g, 2, (int[]){ e, x });
	int m = st_lgraph_mmoe(g, c, "m", 3, 2, (int[]){ 4, 3 }, act, 2);
	int s0 = st_lgraph_slice(g, m, 0, 3), s1 = st_lgraph_slice(g, m, 3, 3);
	int t0 = st_lgraph_mlp(g, s0, "tower0", 1, (int[]){ 2 }, ST_LGRAPH_ACT_SIGMOID);
	int o0 = st_lgraph_linear(g, t0, "out0", 1);
	int t1 = st_lgraph_mlp(g, s1, "tower1", 1, (int[]){ 2 }, ST_LGRAPH_ACT_SIGMOID);
	int o1 = st_lgraph_linear(g, t1, "out1", 1);
	int o = st_lgraph_add(g, 2, (int[]){ o0, o1 });
	assert_true(o >= 0);
	assert_int_equal(st_lgraph_finish(g, o, 3), ST_OK);
	return g;
}

/* As test_attention.c's gradcheck: every dense parameter and row float. */
static void graph_gradcheck(int act)
{
	st_lgraph_t *g = two_towers(act);
	st_lgraph_ws_t *ws;
	assert_int_equal(st_lgraph_ws_create(&ws, g, NEX), ST_OK);
	st_batch_t *b = batch();
	float rowbuf[NU * RD], *rows[NU];
	fill_rows(rowbuf, rows);
	size_t np = st_lgraph_nparams(g);
	float *params = malloc(sizeof(float) * np), *gp = calloc(np, sizeof(float));
	assert_true(params && gp);
	memcpy(params, st_lgraph_params(g), sizeof(float) * np);
	for (size_t i = 0; i < np; i++)
		if (params[i] == 0.0f)
			params[i] = 0.1f * ((float)(i % 5) - 2.0f);
	float r[NEX] = { 0.3f, -0.7f, 0.5f, 1.0f, -0.2f }, gu[NU * RD] = { 0 };
	lgraph_probe(g, ws, b, NEX, rows, params, r);
	memcpy(st_lgraph_dlogit(ws), r, sizeof r);
	st_lgraph_backward(g, ws, b, 0, NEX, params, gp, gu, RD);
	int nonzero = 0;
	int bad = lgraph_fd_check(g, ws, b, NEX, rows, NU, RD, params, np, r, gp, gu,
				  &nonzero);
	assert_int_equal(bad, 0);
	assert_true(nonzero > NU * RD / 2);
	free(params);
	free(gp);
	st_batch_destroy(b);
	st_lgraph_ws_destroy(ws);
	st_lgraph_destroy(g);
}

static void test_mmoe_graph_gradcheck_sigmoid(void **state)
{
	(void)state;
	graph_gradcheck(ST_LGRAPH_ACT_SIGMOID);
}

static void test_mmoe_graph_gradcheck_none(void **state)
{
	(void)state;
	graph_gradcheck(ST_LGRAPH_ACT_NONE);
}

/* mmoe(E = 1, T = 1) followed by a linear layer against mlp + linear with
 * the same expert weights: softmax over one expert is exactly 1, so the
 * logits, every shared gradient and the rows' gradients are equal bit for
 * bit and the gate's gradient is exactly 0. A gate path that scaled,
 * shifted or leaked into dX would break the equality. */
static void test_mmoe_one_expert_is_mlp(void **state)
{
	(void)state;
	st_lgraph_sparse_t sp = sparse();
	st_lgraph_t *ga, *gb;
	const int sizes[2] = { 6, 4 };
	assert_int_equal(st_lgraph_create(&ga, &sp, ND), ST_OK);
	assert_int_equal(st_lgraph_create(&gb, &sp, ND), ST_OK);
	int ca = st_lgraph_concat(ga, 2, (int[]){ st_lgraph_embed(ga), st_lgraph_dense(ga, 0) });
	int ma = st_lgraph_mmoe(ga, ca, "m", 1, 2, sizes, ST_LGRAPH_ACT_RELU, 1);
	assert_int_equal(st_lgraph_finish(ga, st_lgraph_linear(ga, ma, "out", 1), 1), ST_OK);
	int cb = st_lgraph_concat(gb, 2, (int[]){ st_lgraph_embed(gb), st_lgraph_dense(gb, 0) });
	int mb = st_lgraph_mlp(gb, cb, "m", 2, sizes, ST_LGRAPH_ACT_RELU);
	assert_int_equal(st_lgraph_finish(gb, st_lgraph_linear(gb, mb, "out", 1), 1), ST_OK);
	/* a: expert.0.0.{weight,bias}, expert.0.1.*, gate.0.*, out.*;
	 * b: m.0.*, m.1.*, out.* — the same floats but for the gate. */
	assert_int_equal(st_lgraph_ntensors(ga), 8);
	assert_int_equal(st_lgraph_ntensors(gb), 6);
	float *pa = st_lgraph_params(ga), *pb = st_lgraph_params(gb);
	const st_tensor_info_t *gate_w = st_lgraph_tensor(ga, 4), *out_a = st_lgraph_tensor(ga, 6);
	assert_string_equal(gate_w->name, "m.gate.0.weight");
	size_t n_exp = gate_w->offset, n_gate = out_a->offset - n_exp;
	size_t n_out = st_lgraph_nparams(gb) - n_exp;
	assert_int_equal(st_lgraph_nparams(ga), n_exp + n_gate + n_out);
	for (size_t i = 0; i < st_lgraph_nparams(gb); i++)
		pb[i] = 2 * rnd();
	memcpy(pa, pb, sizeof(float) * n_exp);
	memcpy(pa + n_exp + n_gate, pb + n_exp, sizeof(float) * n_out);
	for (size_t i = 0; i < n_gate; i++)
		pa[n_exp + i] = 2 * rnd();   /* any gate: its softmax is 1 */

	st_batch_t *b = batch();
	float rowbuf[NU * RD], *rows[NU];
	fill_rows(rowbuf, rows);
	st_lgraph_ws_t *wa, *wb;
	assert_int_equal(st_lgraph_ws_create(&wa, ga, NEX), ST_OK);
	assert_int_equal(st_lgraph_ws_create(&wb, gb, NEX), ST_OK);
	const float *za = st_lgraph_forward(ga, wa, b, 0, NEX, rows, pa);
	const float *zb = st_lgraph_forward(gb, wb, b, 0, NEX, rows, pb);
	assert_memory_equal(za, zb, sizeof(float) * NEX);
	const float r[NEX] = { 0.3f, -0.7f, 0.5f, 1.0f, -0.2f };
	memcpy(st_lgraph_dlogit(wa), r, sizeof r);
	memcpy(st_lgraph_dlogit(wb), r, sizeof r);
	float *ga_p = calloc(st_lgraph_nparams(ga), sizeof(float));
	float *gb_p = calloc(st_lgraph_nparams(gb), sizeof(float));
	float gua[NU * RD] = { 0 }, gub[NU * RD] = { 0 };
	assert_true(ga_p && gb_p);
	st_lgraph_backward(ga, wa, b, 0, NEX, pa, ga_p, gua, RD);
	st_lgraph_backward(gb, wb, b, 0, NEX, pb, gb_p, gub, RD);
	assert_memory_equal(ga_p, gb_p, sizeof(float) * n_exp);
	assert_memory_equal(ga_p + n_exp + n_gate, gb_p + n_exp, sizeof(float) * n_out);
	for (size_t i = 0; i < n_gate; i++)
		assert_true(ga_p[n_exp + i] == 0.0f);
	assert_memory_equal(gua, gub, sizeof gua);
	int nz = 0;
	for (int j = 0; j < NU * RD; j++)
		nz += gua[j] != 0.0f;
	assert_true(nz > 0);
	free(ga_p);
	free(gb_p);
	st_batch_destroy(b);
	st_lgraph_ws_destroy(wa);
	st_lgraph_ws_destroy(wb);
	st_lgraph_destroy(ga);
	st_lgraph_destroy(gb);
}

/* The mixing loops' AVX2 compilation gives the plain one's bits
 * (st_simd_set_ref(1) forces the plain one): outputs, dX and dP of the fast
 * path, on shapes whose hidden widths are and are not multiples of 8. */
static void test_mmoe_avx2_twins_same_bits(void **state)
{
	(void)state;
	if (!st_simd_cpu_avx2())
		skip();
	static const st_mmoe_shape_t shapes[] = {
		{ .d_in = 21, .n_experts = 4, .n_tasks = 2, .n_layers = 2, .sizes = { 16, 32 }, .act = 1 },
		{ .d_in = 9, .n_experts = 3, .n_tasks = 3, .n_layers = 1, .sizes = { 13 }, .act = 2 },
	};
	for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
		const st_mmoe_shape_t *s = &shapes[c];
		const int W = st_mmoe_width(s), d = s->d_in, N = 37;
		pair_t q;
		pair_make(&q, s, N);
		for (int k = 0; k < 2; k++) {
			st_simd_set_ref(k);
			pair_run(&q, k, 0);
		}
		st_simd_set_ref(0);
		assert_memory_equal(q.o[0], q.o[1], sizeof(float) * N * W);
		assert_memory_equal(q.dX[0], q.dX[1], sizeof(float) * N * d);
		assert_memory_equal(q.dP[0], q.dP[1], sizeof(float) * q.np);
		pair_free(&q);
	}
}

/* A slice's backward zeroes the input gradient outside its columns; a
 * second slice's adds into its own columns only, so overlapping slices sum
 * (the graph's path for a node read by several slices). */
static void test_slice_backward_add_sums_overlaps(void **state)
{
	(void)state;
	enum { N = 3, IN_W = 6 };
	float dY1[N * 4], dY2[N * 3], dX[N * IN_W];
	for (int i = 0; i < N * 4; i++)
		dY1[i] = (float)(i + 1);
	for (int i = 0; i < N * 3; i++)
		dY2[i] = 0.5f * (float)(i + 1);
	st_slice_backward(N, IN_W, 1, 4, dY1, dX);         /* columns 1..4 */
	st_slice_backward_add(N, IN_W, 3, 3, dY2, dX);     /* columns 3..5 */
	for (int i = 0; i < N; i++)
		for (int c = 0; c < IN_W; c++) {
			float want = 0.0f;
			if (c >= 1 && c <= 4)
				want += dY1[i * 4 + c - 1];
			if (c >= 3)
				want += dY2[i * 3 + c - 3];
			assert_true(dX[i * IN_W + c] == want);
		}
}

static void test_mmoe_names_widths_counts(void **state)
{
	(void)state;
	st_lgraph_t *g = two_towers(ST_LGRAPH_ACT_RELU);
	static const char *const want[] = {
		"m.expert.0.0.weight", "m.expert.0.0.bias", "m.expert.0.1.weight",
		"m.expert.0.1.bias", "m.expert.1.0.weight", "m.expert.1.0.bias",
		"m.expert.1.1.weight", "m.expert.1.1.bias", "m.expert.2.0.weight",
		"m.expert.2.0.bias", "m.expert.2.1.weight", "m.expert.2.1.bias",
		"m.gate.0.weight", "m.gate.0.bias", "m.gate.1.weight", "m.gate.1.bias",
		"tower0.0.weight",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		assert_string_equal(st_lgraph_tensor(g, (int)i)->name, want[i]);
	const st_tensor_info_t *gw = st_lgraph_tensor(g, 12);
	assert_int_equal(gw->shape[0], 3);                 /* E */
	assert_int_equal(gw->shape[1], NS * DIM + ND);      /* d_in */
	st_lgraph_node_info_t mi, si;
	assert_int_equal(st_lgraph_node_info(g, 3, &mi), ST_OK);
	assert_string_equal(mi.kind, "mmoe");
	assert_int_equal(mi.width, 6);
	/* d_in 8: experts (4·(8+1) + 3·(4+1)) each, gates 3·(8+1) each */
	assert_int_equal(mi.nparams, (4 * 9 + 3 * 5) * 3 + 2 * 3 * 9);
	/* the maps' 6·in·out plus the gated sums and softmax (mmoe.h) */
	double f = 3 * 6.0 * (8 * 4 + 4 * 3) + 2 * 6.0 * 8 * 3 + 2 * (6.0 * 3 * 3 + 8.0 * 3);
	assert_float_equal(mi.flops, f, 1e-9);
	assert_int_equal(st_lgraph_node_info(g, 5, &si), ST_OK);
	assert_string_equal(si.kind, "slice");
	assert_int_equal(si.width, 3);
	assert_int_equal(si.nparams, 0);
	st_lgraph_destroy(g);
}

static void test_mmoe_builder_errors(void **state)
{
	(void)state;
	st_lgraph_sparse_t sp = sparse();
	st_lgraph_t *g;
	const int sz[2] = { 4, 3 };
	assert_int_equal(st_lgraph_create(&g, &sp, ND), ST_OK);
	int x = st_lgraph_dense(g, 0);
	assert_int_equal(st_lgraph_mmoe(g, x, "m", 2, 2, sz, 1, 0), ST_EINVAL);   /* tasks */
	assert_int_equal(st_lgraph_mmoe(g, x, "m", 0, 2, sz, 1, 2), ST_EINVAL);   /* experts */
	assert_int_equal(st_lgraph_mmoe(g, x, "m", 2, 0, sz, 1, 2), ST_EINVAL);   /* layers */
	assert_int_equal(st_lgraph_mmoe(g, x, "m", 2, 2, (int[]){ 4, 0 }, 1, 2), ST_EINVAL);
	assert_int_equal(st_lgraph_mmoe(g, x, "m", 2, 2, sz, 3, 2), ST_EINVAL);   /* act */
	assert_int_equal(st_lgraph_mmoe(g, 7, "m", 2, 2, sz, 1, 2), ST_EINVAL);   /* input */
	assert_int_equal(st_lgraph_mmoe(g, ST_ENOMEM, "m", 2, 2, sz, 1, 2), ST_ENOMEM);
	/* "abcdefghijklmn.expert.10.1.weight" is 33 characters */
	assert_int_equal(st_lgraph_mmoe(g, x, "abcdefghijklmn", 11, 2, sz, 1, 2), ST_EINVAL);
	assert_int_equal(st_lgraph_nnodes(g), 1);   /* nothing half-built */
	int m = st_lgraph_mmoe(g, x, "m", 2, 2, sz, 1, 2);
	assert_true(m >= 0);
	assert_int_equal(st_lgraph_slice(g, m, 4, 3), ST_EINVAL);   /* past the end */
	assert_int_equal(st_lgraph_slice(g, m, -1, 3), ST_EINVAL);
	assert_int_equal(st_lgraph_slice(g, m, 0, 0), ST_EINVAL);
	assert_true(st_lgraph_slice(g, m, 3, 3) >= 0);
	st_lgraph_destroy(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mmoe_forward_exact),
		cmocka_unit_test(test_mmoe_matches_plain_loops),
		cmocka_unit_test(test_mmoe_layer_gradcheck),
		cmocka_unit_test(test_mmoe_layer_gradcheck_ref),
		cmocka_unit_test(test_mmoe_fast_matches_reference),
		cmocka_unit_test(test_mmoe_graph_gradcheck_sigmoid),
		cmocka_unit_test(test_mmoe_graph_gradcheck_none),
		cmocka_unit_test(test_mmoe_one_expert_is_mlp),
		cmocka_unit_test(test_mmoe_avx2_twins_same_bits),
		cmocka_unit_test(test_slice_backward_add_sums_overlaps),
		cmocka_unit_test(test_mmoe_names_widths_counts),
		cmocka_unit_test(test_mmoe_builder_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
