/*
 * mmoe.c — MMoE (mmoe.h; Ma et al. 2018, §4.2) and the column slice: the
 * readable reference. The experts' layers and the gates' logits are linear
 * maps over all n examples at once through nn.h's st_linear_* (sgemm), so
 * the products are already blocked; the softmax and the gated sums are
 * plain loops over E and h_K, a small share of the FLOPs (E·h_K per task
 * against the experts' E·Σ in_k·h_k).
 *
 * Scratch (one block, the caller's; parts carved for the call's n): every
 * expert's layer outputs H[e][k] [n × h_k] (k = K−1 is f_e), the gates
 * G[t] [n × E], then backward's dZ [n × E], two dH buffers [n × max h_k]
 * and dXt [n × d_in]. Each part starts on a 64-byte line.
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

#define STR_(x) #x
#define ST_STR(x) STR_(x)

typedef struct parts {
	float *H[ST_MMOE_MAX_EXPERTS][ST_MMOE_MAX_LAYERS];
	float *G[ST_MMOE_MAX_TASKS];
	float *dZ, *dH[2], *dXt;
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
#undef PART
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

static void act_fwd(int act, size_t len, float *y)
{
	if (act == 1)
		st_relu_forward(len, y, y);
	else if (act == 2)
		st_sigmoid_forward(len, y, y);
}

static void act_bwd(int act, size_t len, const float *y, float *dy)
{
	if (act == 1)
		st_relu_backward(len, y, dy, dy);
	else if (act == 2)
		st_sigmoid_backward(len, y, dy, dy);
}

void st_mmoe_forward(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
		     void *scratch, float *out)
{
	const int E = s->n_experts, T = s->n_tasks, K = s->n_layers, h = s->sizes[K - 1];
	const int W = T * h;
	parts_t p;
	carve(s, (size_t)n, scratch, &p);

	/* Experts: f_e = MLP_e(X), every layer kept for backward. */
	for (int e = 0; e < E; e++) {
		const float *in = X;
		for (int k = 0; k < K; k++) {
			const int din = k ? s->sizes[k - 1] : s->d_in, dout = s->sizes[k];
			const float *Wk = P + expert_off(s, e, k);
			st_linear_forward(n, din, dout, in, Wk, Wk + (size_t)dout * din, p.H[e][k]);
			act_fwd(s->act, (size_t)n * dout, p.H[e][k]);
			in = p.H[e][k];
		}
	}
	for (int t = 0; t < T; t++) {
		/* Gate t: softmax over E of W_t x + b_t (max subtracted). */
		const float *Wg = P + gate_off(s, t);
		float *G = p.G[t];
		st_linear_forward(n, s->d_in, E, X, Wg, Wg + (size_t)E * s->d_in, G);
		for (int i = 0; i < n; i++) {
			float *g = G + (size_t)i * E, mx = g[0], sum = 0.0f;
			for (int e = 1; e < E; e++)
				mx = g[e] > mx ? g[e] : mx;
			for (int e = 0; e < E; e++) {
				g[e] = expf(g[e] - mx);
				sum += g[e];
			}
			for (int e = 0; e < E; e++)
				g[e] /= sum;
		}
		/* o_t = Σ_e g_t[e] f_e, starting from the first term. */
		for (int i = 0; i < n; i++) {
			const float *g = G + (size_t)i * E;
			float *o = out + (size_t)i * W + (size_t)t * h;
			const float *f0 = p.H[0][K - 1] + (size_t)i * h;
			for (int j = 0; j < h; j++)
				o[j] = g[0] * f0[j];
			for (int e = 1; e < E; e++) {
				const float *f = p.H[e][K - 1] + (size_t)i * h;
				for (int j = 0; j < h; j++)
					o[j] += g[e] * f[j];
			}
		}
	}
}

/* dst += src over len floats. */
static void add_into(float *dst, const float *src, size_t len)
{
	for (size_t j = 0; j < len; j++)
		dst[j] += src[j];
}

void st_mmoe_backward(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
		      const float *dout, void *scratch, float *dX, float *dP)
{
	const int E = s->n_experts, T = s->n_tasks, K = s->n_layers, h = s->sizes[K - 1];
	const int W = T * h;
	const size_t xlen = (size_t)n * (size_t)s->d_in;
	int have_dx = 0;   /* dX holds a first contribution */
	parts_t p;
	carve(s, (size_t)n, scratch, &p);

	/* Experts: df_e = Σ_t g_t[e] dout_t, then back through the MLP. The
	 * first expert's input gradient lands in dX, later ones are added. */
	for (int e = 0; e < E; e++) {
		float *cur = p.dH[0];
		for (int i = 0; i < n; i++) {
			float *d = cur + (size_t)i * h;
			for (int t = 0; t < T; t++) {
				const float g = p.G[t][(size_t)i * E + e];
				const float *dt = dout + (size_t)i * W + (size_t)t * h;
				if (t == 0)
					for (int j = 0; j < h; j++)
						d[j] = g * dt[j];
				else
					for (int j = 0; j < h; j++)
						d[j] += g * dt[j];
			}
		}
		int pp = 1;
		for (int k = K - 1; k >= 0; k--) {
			const int din = k ? s->sizes[k - 1] : s->d_in, dk = s->sizes[k];
			const size_t off = expert_off(s, e, k);
			act_bwd(s->act, (size_t)n * dk, p.H[e][k], cur);
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
	/* Gates: dg[e] = dout_t · f_e; softmax: dz[e] = g[e] (dg[e] − Σ g dg). */
	for (int t = 0; t < T; t++) {
		const float *G = p.G[t];
		for (int i = 0; i < n; i++) {
			const float *g = G + (size_t)i * E;
			const float *dt = dout + (size_t)i * W + (size_t)t * h;
			float *dz = p.dZ + (size_t)i * E, dot = 0.0f;
			for (int e = 0; e < E; e++) {
				const float *f = p.H[e][K - 1] + (size_t)i * h;
				float v = dt[0] * f[0];
				for (int j = 1; j < h; j++)
					v += dt[j] * f[j];
				dz[e] = v;
			}
			for (int e = 0; e < E; e++)
				dot += g[e] * dz[e];
			for (int e = 0; e < E; e++)
				dz[e] = g[e] * (dz[e] - dot);
		}
		const size_t off = gate_off(s, t);
		st_linear_backward(n, s->d_in, E, X, P + off, p.dZ, dX ? p.dXt : NULL, dP + off,
				   dP + off + (size_t)E * s->d_in);
		if (dX)
			add_into(dX, p.dXt, xlen);
	}
}

void st_slice_forward(int n, int in_w, int offset, int width, const float *X, float *Y)
{
	for (int i = 0; i < n; i++)
		memcpy(Y + (size_t)i * width, X + (size_t)i * in_w + offset,
		       sizeof(float) * (size_t)width);
}

void st_slice_backward(int n, int in_w, int offset, int width, const float *dY, float *dX)
{
	memset(dX, 0, sizeof(float) * (size_t)n * (size_t)in_w);
	for (int i = 0; i < n; i++)
		memcpy(dX + (size_t)i * in_w + offset, dY + (size_t)i * width,
		       sizeof(float) * (size_t)width);
}
