/*
 * mmoe.c — MMoE (mmoe.h; Ma et al. 2018, §4.2) and the column slice. The
 * experts' layers and the gates' logits are linear maps over all n
 * examples at once through nn.h's st_linear_* (sgemm); the softmax and the
 * gated sums are plain loops over E and h_K, a small share of the FLOPs
 * (E·h_K per task against the experts' E·Σ in_k·h_k).
 *
 * Two paths with one contract: st_mmoe_*_ref, the readable reference (one
 * st_linear_* per expert layer and per gate, input gradients summed), and
 * st_mmoe_forward/backward, which run every expert's first layer and every
 * gate as one map over x (E + T small sgemms over the same input were 0.77
 * of a dnn's speed per FLOP: x packed E + T times each way and E + T input
 * gradients zeroed and summed; docs/benchmarks.md, "MMoE").
 *
 * Scratch (one block, the caller's; parts carved for the call's n): every
 * expert's layer outputs H[e][k] [n × h_k] (k = K−1 is f_e), the gates
 * G[t] [n × E], then backward's dZ [n × E], two dH buffers [n × max h_k]
 * and dXt [n × d_in]; the fast path's gathered first maps W0 [M0 × d_in]
 * and b0 [M0] (M0 = E·h_1 + T·E), their output Z and its gradient dZ0
 * [n × M0], and dW0, db0. Each part starts on a 64-byte line.
 *
 * Rounding: a sum over experts or tasks starts from its first term (not
 * from 0.0f), so with E = 1 and T = 1 the gate is exactly 1, o = f_0
 * exactly and every gradient equals a plain MLP's bit for bit — the test
 * that pins the gate path (test_mmoe.c).
 */
#include "ops/nn/mmoe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/nn/nn.h"
#include "runtime/simd.h"

#define STR_(x) #x
#define ST_STR(x) STR_(x)

typedef struct parts {
	float *H[ST_MMOE_MAX_EXPERTS][ST_MMOE_MAX_LAYERS];
	float *G[ST_MMOE_MAX_TASKS];
	/* Where the mixing reads: expert e's output f_e (row stride fld) and
	 * gate t's logits, then softmax (row stride gld). The reference's are
	 * H[e][K-1] and G[t]; the fast path's may be columns of its Z. */
	const float *F[ST_MMOE_MAX_EXPERTS];
	float *Gv[ST_MMOE_MAX_TASKS];
	int fld, gld;
	float *dZ, *dH[2], *dXt;
	/* the fast path: the first maps as one (see st_mmoe_forward) */
	float *W0, *b0, *Z, *dZ0, *dW0, *db0;
} parts_t;

static size_t up16(size_t floats) { return (floats + 15) & ~(size_t)15; }

static int max_size(const st_mmoe_shape_t *s)
{
	int m = 1;
	for (int k = 0; k < s->n_layers; k++)
		m = s->sizes[k] > m ? s->sizes[k] : m;
	return m;
}

/* Lays the parts out from base (NULL: only counts). Returns floats used. */
static size_t carve(const st_mmoe_shape_t *s, size_t n, float *base, parts_t *p)
{
	const size_t E = (size_t)s->n_experts;
	size_t o = 0;
	n = n ? n : 1;
#define PART(dst, cnt) do { if (base) (dst) = base + o; o += up16(cnt); } while (0)
	for (int e = 0; e < s->n_experts; e++)
		for (int k = 0; k < s->n_layers; k++)
			PART(p->H[e][k], n * (size_t)s->sizes[k]);
	for (int t = 0; t < s->n_tasks; t++)
		PART(p->G[t], n * E);
	PART(p->dZ, n * E);
	PART(p->dH[0], n * (size_t)max_size(s));
	PART(p->dH[1], n * (size_t)max_size(s));
	PART(p->dXt, n * (size_t)s->d_in);
	const size_t M0 = (size_t)(s->n_experts * s->sizes[0] + s->n_tasks * s->n_experts);
	PART(p->W0, M0 * (size_t)s->d_in);
	PART(p->b0, M0);
	PART(p->Z, n * M0);
	PART(p->dZ0, n * M0);
	PART(p->dW0, M0 * (size_t)s->d_in);
	PART(p->db0, M0);
#undef PART
	if (base) {
		for (int e = 0; e < s->n_experts; e++)
			p->F[e] = p->H[e][s->n_layers - 1];
		for (int t = 0; t < s->n_tasks; t++)
			p->Gv[t] = p->G[t];
		p->fld = s->sizes[s->n_layers - 1];
		p->gld = s->n_experts;
	}
	return o;
}

int st_mmoe_check(const st_mmoe_shape_t *s, const char *prefix, size_t name_cap, char *err,
		  size_t len)
{
	const char *why = NULL;
	int got = 0;
	if (s->n_tasks < 1 || s->n_tasks > ST_MMOE_MAX_TASKS)
		why = "tasks must be >= 1 and <= " ST_STR(ST_MMOE_MAX_TASKS), got = s->n_tasks;
	else if (s->n_experts < 1 || s->n_experts > ST_MMOE_MAX_EXPERTS)
		why = "experts must be >= 1 and <= " ST_STR(ST_MMOE_MAX_EXPERTS), got = s->n_experts;
	else if (s->n_layers < 1 || s->n_layers > ST_MMOE_MAX_LAYERS)
		why = "an expert needs 1 to " ST_STR(ST_MMOE_MAX_LAYERS) " layer sizes",
		got = s->n_layers;
	else if (s->d_in < 1)
		why = "the input must be at least 1 wide", got = s->d_in;
	else if (s->act < 0 || s->act > 2)
		why = "the activation must be 0 (none), 1 (relu) or 2 (sigmoid)", got = s->act;
	for (int k = 0; !why && k < s->n_layers; k++)
		if (s->sizes[k] < 1)
			why = "every expert layer size must be >= 1", got = s->sizes[k];
	if (why) {
		snprintf(err, len, "mmoe %s: %s (got %d)", prefix, why, got);
		return -1;
	}
	char name[64];
	int din, dout;
	for (int i = 0; i < s->n_experts * s->n_layers + s->n_tasks; i++)
		if (st_mmoe_map(s, prefix, i, name, sizeof name, &din, &dout) < 0 ||
		    strlen(name) + sizeof ".weight" > name_cap) {
			snprintf(err, len, "mmoe %s: tensor %.40s.weight is over %zu characters; "
				 "give the layer a shorter name", prefix, name, name_cap - 1);
			return -1;
		}
	return 0;
}

int st_mmoe_width(const st_mmoe_shape_t *s)
{
	return s->n_tasks * s->sizes[s->n_layers - 1];
}

int st_mmoe_map(const st_mmoe_shape_t *s, const char *prefix, int i, char *name,
		size_t len, int *in, int *out)
{
	const int K = s->n_layers, E = s->n_experts;
	int w;
	if (i < 0 || i >= E * K + s->n_tasks)
		return -1;
	if (i < E * K) {
		int e = i / K, k = i % K;
		*in = k ? s->sizes[k - 1] : s->d_in;
		*out = s->sizes[k];
		w = snprintf(name, len, "%s.expert.%d.%d", prefix, e, k);
	} else {
		*in = s->d_in;
		*out = E;
		w = snprintf(name, len, "%s.gate.%d", prefix, i - E * K);
	}
	return w < 0 || (size_t)w >= len ? -1 : 0;
}

size_t st_mmoe_nparams(const st_mmoe_shape_t *s)
{
	size_t np = 0;
	for (int k = 0; k < s->n_layers; k++) {
		size_t in = (size_t)(k ? s->sizes[k - 1] : s->d_in);
		np += (size_t)s->sizes[k] * (in + 1);
	}
	np *= (size_t)s->n_experts;
	return np + (size_t)s->n_tasks * (size_t)s->n_experts * ((size_t)s->d_in + 1);
}

double st_mmoe_flops_mix(const st_mmoe_shape_t *s)
{
	const double E = s->n_experts, T = s->n_tasks, h = s->sizes[s->n_layers - 1];
	/* forward Σ_e g·f (2Eh per task); backward dg = dout·f and
	 * df += g·dout (4Eh); softmax and its backward (~8E) */
	return T * (6.0 * E * h + 8.0 * E);
}

size_t st_mmoe_scratch_bytes(const st_mmoe_shape_t *s, uint32_t max_n)
{
	parts_t p;
	return carve(s, max_n, NULL, &p) * sizeof(float);
}

/* Parameter offsets of expert e's layer k and of gate t in the packed order. */
static size_t expert_off(const st_mmoe_shape_t *s, int e, int k)
{
	size_t per = 0, within = 0;
	for (int j = 0; j < s->n_layers; j++) {
		size_t in = (size_t)(j ? s->sizes[j - 1] : s->d_in);
		size_t sz = (size_t)s->sizes[j] * (in + 1);
		if (j < k)
			within += sz;
		per += sz;
	}
	return (size_t)e * per + within;
}

static size_t gate_off(const st_mmoe_shape_t *s, int t)
{
	return expert_off(s, s->n_experts, 0) +
	       (size_t)t * (size_t)s->n_experts * ((size_t)s->d_in + 1);
}

/* ---- shared by both paths --------------------------------------------------- */
/* The mixing loops (softmax and gated sum, the gates' gradient, an expert's
 * output gradient) are written once as always-inline bodies and compiled
 * twice: plain (SSE2, the default build's target) and for AVX2, chosen at
 * run time (runtime/simd.h) as nn.c's twins are. Same operations in the
 * same order either way (no FMA: this file builds with -ffp-contract=off;
 * dot8's lanes are explicit), so the same bits; test_mmoe pins it with
 * st_simd_set_ref. They were 4.4% of an MMoE step at SSE2 width. */
#define BODY static inline __attribute__((always_inline))


/* Gate t's logits in Gv[t] [n × E] (row stride gld) become the softmax
 * (max subtracted), then o_t = Σ_e g_t[e] f_e from the first term. */
BODY void gate_mix_body(const st_mmoe_shape_t *s, int n, const parts_t *p, int t,
			   float *out)
{
	const int E = s->n_experts, K = s->n_layers, h = s->sizes[K - 1];
	const int W = s->n_tasks * h;
	float *G = p->Gv[t];
	for (int i = 0; i < n; i++) {
		float *g = G + (size_t)i * p->gld, mx = g[0], sum = 0.0f;
		for (int e = 1; e < E; e++)
			mx = g[e] > mx ? g[e] : mx;
		for (int e = 0; e < E; e++) {
			g[e] = expf(g[e] - mx);
			sum += g[e];
		}
		for (int e = 0; e < E; e++)
			g[e] /= sum;
	}
	for (int i = 0; i < n; i++) {
		const float *g = G + (size_t)i * p->gld;
		float *restrict o = out + (size_t)i * W + (size_t)t * h;
		const float *restrict f0 = p->F[0] + (size_t)i * p->fld;
		const float g0 = g[0];
		for (int j = 0; j < h; j++)
			o[j] = g0 * f0[j];
		for (int e = 1; e < E; e++) {
			const float *restrict f = p->F[e] + (size_t)i * p->fld;
			const float ge = g[e];
			for (int j = 0; j < h; j++)
				o[j] += ge * f[j];
		}
	}
}

/* a · b over h floats, in eight running sums (lane l takes j ≡ l mod 8)
 * added at the end, then the tail: a fixed order the compiler keeps as
 * vector lanes (a single running sum is a chain it may not reorder). */
BODY float dot8(int h, const float *restrict a, const float *restrict b)
{
	float acc[8] = { 0 };
	int j = 0;
	for (; j + 8 <= h; j += 8)
		for (int l = 0; l < 8; l++)
			acc[l] += a[j + l] * b[j + l];
	float v = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
	for (; j < h; j++)
		v += a[j] * b[j];
	return v;
}

/* dz[i × ld + e] = gate t's logit gradient: dg[e] = dout_t · f_e, then the
 * softmax's g[e] (dg[e] − Σ g dg). */
BODY void gate_grad_body(const st_mmoe_shape_t *s, int n, const parts_t *p, int t,
		      const float *dout, float *dz, int ld)
{
	const int E = s->n_experts, K = s->n_layers, h = s->sizes[K - 1];
	const int W = s->n_tasks * h;
	for (int i = 0; i < n; i++) {
		const float *g = p->Gv[t] + (size_t)i * p->gld;
		const float *dt = dout + (size_t)i * W + (size_t)t * h;
		float *z = dz + (size_t)i * ld, dot = 0.0f;
		for (int e = 0; e < E; e++)
			z[e] = dot8(h, dt, p->F[e] + (size_t)i * p->fld);
		for (int e = 0; e < E; e++)
			dot += g[e] * z[e];
		for (int e = 0; e < E; e++)
			z[e] = g[e] * (z[e] - dot);
	}
}

/* d[n × h] (row stride ld) = Σ_t g_t[e] dout_t, expert e's output
 * gradient, from the first task's term. */
BODY void expert_dout_body(const st_mmoe_shape_t *s, int n, const parts_t *p, int e,
			const float *dout, float *d, int ld)
{
	const int T = s->n_tasks, h = s->sizes[s->n_layers - 1];
	const int W = T * h;
	for (int i = 0; i < n; i++) {
		float *restrict r = d + (size_t)i * ld;
		for (int t = 0; t < T; t++) {
			const float g = p->Gv[t][(size_t)i * p->gld + e];
			const float *restrict dt = dout + (size_t)i * W + (size_t)t * h;
			if (t == 0)
				for (int j = 0; j < h; j++)
					r[j] = g * dt[j];
			else
				for (int j = 0; j < h; j++)
					r[j] += g * dt[j];
		}
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#define MMOE_AVX2 1
#define AVX2_FN __attribute__((target("avx2")))
#else
#define MMOE_AVX2 0   /* the "AVX2" twin is then a second plain build, never called */
#define AVX2_FN
#endif

/* Each body's plain and AVX2 compilation, and the dispatch between them. */
#define TWINS(name, params, args)                                                      \
	static void name##_plain params { name##_body args; }                            \
	AVX2_FN static void name##_avx2 params { name##_body args; }                    \
	static void name params                                                          \
	{                                                                                \
		if (MMOE_AVX2 && st_simd_avx2())                                         \
			name##_avx2 args;                                                \
		else                                                                     \
			name##_plain args;                                               \
	}

TWINS(gate_mix, (const st_mmoe_shape_t *s, int n, const parts_t *p, int t, float *out),
      (s, n, p, t, out))
TWINS(gate_grad, (const st_mmoe_shape_t *s, int n, const parts_t *p, int t, const float *dout,
		  float *dz, int ld), (s, n, p, t, dout, dz, ld))
TWINS(expert_dout, (const st_mmoe_shape_t *s, int n, const parts_t *p, int e,
		    const float *dout, float *d, int ld), (s, n, p, e, dout, d, ld))

/* dst += src over len floats. */
static void add_into(float *dst, const float *src, size_t len)
{
	for (size_t j = 0; j < len; j++)
		dst[j] += src[j];
}

/* ---- the reference: one st_linear_* per map ----------------------------------- */

void st_mmoe_forward_ref(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
			 void *scratch, float *out)
{
	const int E = s->n_experts, K = s->n_layers;
	parts_t p;
	carve(s, (size_t)n, scratch, &p);
	/* Experts: f_e = MLP_e(X), every layer kept for backward. */
	for (int e = 0; e < E; e++) {
		const float *in = X;
		for (int k = 0; k < K; k++) {
			const int din = k ? s->sizes[k - 1] : s->d_in, dout = s->sizes[k];
			const float *Wk = P + expert_off(s, e, k);
			st_linear_forward(n, din, dout, in, Wk, Wk + (size_t)dout * din, p.H[e][k]);
			st_act_forward(s->act, (size_t)n * dout, p.H[e][k]);
			in = p.H[e][k];
		}
	}
	for (int t = 0; t < s->n_tasks; t++) {
		const float *Wg = P + gate_off(s, t);
		st_linear_forward(n, s->d_in, E, X, Wg, Wg + (size_t)E * s->d_in, p.G[t]);
		gate_mix(s, n, &p, t, out);
	}
}

void st_mmoe_backward_ref(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
			  const float *dout, void *scratch, float *dX, float *dP)
{
	const int E = s->n_experts, K = s->n_layers;
	const size_t xlen = (size_t)n * (size_t)s->d_in;
	int have_dx = 0;   /* dX holds a first contribution */
	parts_t p;
	carve(s, (size_t)n, scratch, &p);
	/* Experts back through their MLPs; the first expert's input gradient
	 * lands in dX, later ones are added. */
	for (int e = 0; e < E; e++) {
		float *cur = p.dH[0];
		expert_dout(s, n, &p, e, dout, cur, s->sizes[K - 1]);
		int pp = 1;
		for (int k = K - 1; k >= 0; k--) {
			const int din = k ? s->sizes[k - 1] : s->d_in, dk = s->sizes[k];
			const size_t off = expert_off(s, e, k);
			st_act_backward(s->act, (size_t)n * dk, p.H[e][k], cur);
			const float *in = k ? p.H[e][k - 1] : X;
			float *dIn = k ? p.dH[pp] : !dX ? NULL : have_dx ? p.dXt : dX;
			st_linear_backward(n, din, dk, in, P + off, cur, dIn, dP + off,
					   dP + off + (size_t)dk * din);
			cur = dIn;
			pp ^= 1;
		}
		if (dX && have_dx)
			add_into(dX, p.dXt, xlen);
		have_dx = dX != NULL;
	}
	for (int t = 0; t < s->n_tasks; t++) {
		gate_grad(s, n, &p, t, dout, p.dZ, E);
		const size_t off = gate_off(s, t);
		st_linear_backward(n, s->d_in, E, X, P + off, p.dZ, dX ? p.dXt : NULL, dP + off,
				   dP + off + (size_t)E * s->d_in);
		if (dX)
			add_into(dX, p.dXt, xlen);
	}
}

/* ---- the fast path: the maps over x as one -------------------------------------
 * Every expert's first layer and every gate read the same x, so they run as
 * one linear map of M0 = E·h_1 + T·E outputs (W0 gathered from the packed
 * tensors: expert rows, then gate rows): x is packed for sgemm once instead
 * of E + T times each way, and backward's dX is one product, not E + T
 * products summed. The experts' first layers and the gates are then read
 * where they are, as columns of that output Z (row stride M0): the next
 * layer's sgemm takes them as a strided operand, the softmax runs on the
 * gate columns in place, and backward writes their gradients into the same
 * columns of dZ0 (copying them out and back was 5% of a step; benchmarks.md,
 * "MMoE"). */

static int m0_of(const st_mmoe_shape_t *s)
{
	return s->n_experts * s->sizes[0] + s->n_tasks * s->n_experts;
}

/* Offsets in P of the first maps' weights, in W0's row order: expert e's
 * layer 0 (rows), then gate t (E rows). */
static void first_maps(const st_mmoe_shape_t *s, int i, size_t *off, int *rows)
{
	const int E = s->n_experts;
	*off = i < E ? expert_off(s, i, 0) : gate_off(s, i - E);
	*rows = i < E ? s->sizes[0] : E;
}

/* The fast path's views into Z: gates always, experts' outputs when they
 * have one layer (f_e is then its columns of Z). */
static void fast_views(const st_mmoe_shape_t *s, parts_t *p)
{
	const int E = s->n_experts, h1 = s->sizes[0], M0 = m0_of(s);
	for (int t = 0; t < s->n_tasks; t++)
		p->Gv[t] = p->Z + E * h1 + t * E;
	p->gld = M0;
	if (s->n_layers == 1) {
		for (int e = 0; e < E; e++)
			p->F[e] = p->Z + e * h1;
		p->fld = M0;
	}
}

void st_mmoe_forward(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
		     void *scratch, float *out)
{
	const int E = s->n_experts, K = s->n_layers, h1 = s->sizes[0], d = s->d_in;
	const int M0 = m0_of(s);
	parts_t p;
	carve(s, (size_t)n, scratch, &p);
	fast_views(s, &p);
	int r0 = 0;
	for (int i = 0; i < E + s->n_tasks; i++) {
		size_t off;
		int rows;
		first_maps(s, i, &off, &rows);
		memcpy(p.W0 + (size_t)r0 * d, P + off, sizeof(float) * (size_t)rows * d);
		memcpy(p.b0 + r0, P + off + (size_t)rows * d, sizeof(float) * (size_t)rows);
		r0 += rows;
	}
	st_linear_forward(n, d, M0, X, p.W0, p.b0, p.Z);
	if (s->act != ST_ACT_NONE)
		for (int i = 0; i < n; i++)   /* the experts' columns, not the gates' */
			st_act_forward(s->act, (size_t)E * h1, p.Z + (size_t)i * M0);
	for (int e = 0; e < E; e++)
		for (int k = 1; k < K; k++) {
			const int din = s->sizes[k - 1], dout = s->sizes[k];
			const float *Wk = P + expert_off(s, e, k);
			const float *in = k == 1 ? p.Z + e * h1 : p.H[e][k - 1];
			st_linear_forward_ld(n, din, dout, in, k == 1 ? M0 : din, Wk,
					     Wk + (size_t)dout * din, p.H[e][k], dout);
			st_act_forward(s->act, (size_t)n * dout, p.H[e][k]);
		}
	for (int t = 0; t < s->n_tasks; t++)
		gate_mix(s, n, &p, t, out);
}

void st_mmoe_backward(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
		      const float *dout, void *scratch, float *dX, float *dP)
{
	const int E = s->n_experts, K = s->n_layers, h1 = s->sizes[0], d = s->d_in;
	const int M0 = m0_of(s);
	parts_t p;
	carve(s, (size_t)n, scratch, &p);
	fast_views(s, &p);
	/* dZ0 [n × M0]: each expert's first-layer gradient, then the gates'. */
	for (int t = 0; t < s->n_tasks; t++)
		gate_grad(s, n, &p, t, dout, p.dZ0 + E * h1 + t * E, M0);
	for (int e = 0; e < E; e++) {
		if (K == 1) {
			expert_dout(s, n, &p, e, dout, p.dZ0 + e * h1, M0);
			continue;
		}
		float *cur = p.dH[0];
		expert_dout(s, n, &p, e, dout, cur, s->sizes[K - 1]);
		int pp = 1;
		for (int k = K - 1; k >= 1; k--) {
			const int din = s->sizes[k - 1], dk = s->sizes[k];
			const size_t off = expert_off(s, e, k);
			/* ReLU's mask and the bias gradient in one pass (nn.h: the
			 * same sums in the same order as st_linear_backward's). */
			float *db = st_act_bias_backward(s->act, n, dk, p.H[e][k], cur,
							 dP + off + (size_t)dk * din);
			const int first = k == 1;
			float *dIn = first ? p.dZ0 + e * h1 : p.dH[pp];
			st_linear_backward_ld(n, din, dk, first ? p.Z + e * h1 : p.H[e][k - 1],
					      first ? M0 : din, P + off, cur, dk, dIn,
					      first ? M0 : din, dP + off, db);
			cur = dIn;
			pp ^= 1;
		}
	}
	if (s->act != ST_ACT_NONE)
		for (int i = 0; i < n; i++)
			st_act_backward(s->act, (size_t)E * h1, p.Z + (size_t)i * M0,
					p.dZ0 + (size_t)i * M0);
	/* One map back: dX = dZ W0 (overwrites), dW0 and db0 in scratch, then
	 * added into each tensor's place in dP. */
	memset(p.dW0, 0, sizeof(float) * (size_t)M0 * d);
	memset(p.db0, 0, sizeof(float) * (size_t)M0);
	st_linear_backward(n, d, M0, X, p.W0, p.dZ0, dX, p.dW0, p.db0);
	int r0 = 0;
	for (int i = 0; i < E + s->n_tasks; i++) {
		size_t off;
		int rows;
		first_maps(s, i, &off, &rows);
		add_into(dP + off, p.dW0 + (size_t)r0 * d, (size_t)rows * d);
		add_into(dP + off + (size_t)rows * d, p.db0 + r0, (size_t)rows);
		r0 += rows;
	}
}

void st_slice_forward(int n, int in_w, int offset, int width, const float *X, float *Y)
{
	for (int i = 0; i < n; i++)
		memcpy(Y + (size_t)i * width, X + (size_t)i * in_w + offset,
		       sizeof(float) * (size_t)width);
}

void st_slice_backward_add(int n, int in_w, int offset, int width, const float *dY,
			   float *dX)
{
	for (int i = 0; i < n; i++)
		add_into(dX + (size_t)i * in_w + offset, dY + (size_t)i * width, (size_t)width);
}

void st_slice_backward(int n, int in_w, int offset, int width, const float *dY, float *dX)
{
	memset(dX, 0, sizeof(float) * (size_t)n * (size_t)in_w);
	for (int i = 0; i < n; i++)
		memcpy(dX + (size_t)i * in_w + offset, dY + (size_t)i * width,
		       sizeof(float) * (size_t)width);
}
