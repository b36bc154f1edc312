/*
 * model.c — the CTR model presets of model.h (lr, dnn, wdl, deepfm, dlrm)
 * composed from the layers of nn.h.
 *
 * A model is a layout: which tensors live where in one contiguous dense
 * parameter array, how the pooled embeddings are laid out, and which layers
 * run in which order. Forward and backward read the dense parameters from the
 * `params` pointer the caller passes (a sync policy may hand each worker its
 * own replica or snapshot) and never from m->params directly, so the model
 * itself holds no mutable state besides that array.
 *
 * Threads: none of its own. A model is shared read-only by all workers; each
 * worker owns one st_model_ws_t, which caches the activations of the last
 * forward for the backward of the same call (st_model_step).
 *
 * Invariants: tensor offsets are in creation order and cover [0, nparams)
 * without gaps; row layout per slot s is emb[dim_s] followed, for presets
 * with a wide part, by the wide weight at column dim_s (the last column).
 * The lr preset has no embedding: its row is the wide weight alone.
 *
 * Layouts (PyTorch nn.Linear: weight [out × in], bias [out]):
 *   dense.weight [1 × D], dense.bias [1]          lr, wdl, deepfm
 *   bot.<k>.weight/bias                            dlrm bottom MLP
 *   mlp.<k>.weight/bias                            hidden layers of the (top) MLP
 *   out.weight [1 × last], out.bias [1]            dnn, wdl, deepfm, dlrm
 * The MLP input is concat(e_1..e_S, x_dense) (embeddings first, then the
 * transformed dense features); for dlrm it is concat(z0, dot pairs) with the
 * pairs in nn.h's tril order over Z = [z0, e_1, ..., e_S] (DLRM's
 * interact_features with arch_interaction_itself = False, Naumov et al. 2019
 * §2.2).
 */
#include "ops/nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/nn/nn.h"
#include "runtime/err.h"

enum { M_LR, M_DNN, M_WDL, M_DEEPFM, M_DLRM };
enum { ACT_NONE, ACT_RELU, ACT_SIGMOID };

#define MAX_LAYERS 17          /* 16 hidden + the output layer */
#define MAX_TENSORS (2 * (2 * MAX_LAYERS + 1))

typedef struct layer {
	int in, out;
	size_t w, b;           /* offsets into params */
} layer_t;

struct st_model {
	int type, act, log1p, mean;
	int n_dense, n_slots;
	int *dim, *off, *row_dim;   /* [n_slots] */
	uint8_t *slot_mean;         /* NULL or [n_slots]: per-field pooling (nn.h) */
	int width;                  /* sum of embedding dims */
	int max_row_dim, has_wide, uniform_rows;
	int emb_d;                  /* common dim (deepfm, dlrm), else 0 */
	st_pool_layout_t pool;
	int has_lin;                /* linear(x_dense) term */
	size_t lin_w, lin_b;
	int n_top;                  /* hidden layers + out */
	layer_t top[MAX_LAYERS];
	int n_bot;
	layer_t bot[MAX_LAYERS];
	int in0;                    /* width of the top MLP input */
	int F, npairs;              /* dlrm: fields incl. z0, dot pairs */
	size_t nparams;
	float *params;
	int ntensors;
	st_tensor_info_t tensors[MAX_TENSORS];
	char names[MAX_TENSORS][24];
	double flops;
};

struct st_model_ws {
	uint32_t max_n;
	float *xd, *P, *dP, *X0, *dX0, *logit, *dlogit, *prob, *tmp, *fm, *dFM;
	float *h[MAX_LAYERS], *bh[MAX_LAYERS];
	float *dbuf[2];
	float *Z, *dZ, *D2, *dD2, *dz0;
	float *block;
};

/* ---- creation ---------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static void add_tensor(st_model_t *m, const char *name, int rows, int cols)
{
	int i = m->ntensors++;
	snprintf(m->names[i], sizeof m->names[i], "%s", name);
	st_tensor_info_t *t = &m->tensors[i];
	t->name = m->names[i];
	t->offset = m->nparams;
	t->ndim = cols < 0 ? 1 : 2;
	t->shape[0] = rows;
	t->shape[1] = cols < 0 ? 0 : cols;
	m->nparams += (size_t)rows * (size_t)(cols < 0 ? 1 : cols);
}

static layer_t add_linear(st_model_t *m, const char *prefix, int in, int out)
{
	char name[24];
	layer_t l = { .in = in, .out = out };
	snprintf(name, sizeof name, "%s.weight", prefix);
	l.w = m->nparams;
	add_tensor(m, name, out, in);
	snprintf(name, sizeof name, "%s.bias", prefix);
	l.b = m->nparams;
	add_tensor(m, name, out, -1);
	m->flops += 6.0 * in * out;   /* forward 2·in·out, backward twice that */
	return l;
}

/* uniform(-1/sqrt(in), 1/sqrt(in)) for the weight, zeros for the bias; one
 * RNG stream in tensor order so the values depend on the seed alone. */
static void init_linear(float *p, const layer_t *l, uint64_t *rng)
{
	float a = l->in > 0 ? 1.0f / sqrtf((float)l->in) : 0.0f;
	for (size_t i = 0; i < (size_t)l->in * (size_t)l->out; i++) {
		double u = (double)(splitmix64(rng) >> 11) * 0x1.0p-53;
		p[l->w + i] = (float)((2.0 * u - 1.0) * a);
	}
	memset(p + l->b, 0, sizeof(float) * (size_t)l->out);
}

/* The preset's index, or ST_EINVAL for a name that is none. */
static int parse_type(const char *s)
{
	static const char *names[] = { "lr", "dnn", "wdl", "deepfm", "dlrm" };
	for (int i = 0; i < 5; i++)
		if (s && !strcmp(s, names[i]))
			return i;
	return ST_EINVAL;
}

int st_model_create(st_model_t **out, const st_model_cfg_t *cfg, int n_dense,
		    int n_slots, uint64_t seed)
{
	int type = parse_type(cfg->type);
	if (type < 0) {
		st_error("model: unknown type '%s' (lr, dnn, wdl, deepfm, dlrm)",
			 cfg->type ? cfg->type : "(null)");
		return ST_EINVAL;
	}
	const char *act = cfg->activation ? cfg->activation : "relu";
	const char *pool = cfg->pooling ? cfg->pooling : "sum";
	const char *tr = cfg->dense_transform ? cfg->dense_transform : "log1p";
	if ((strcmp(act, "relu") && strcmp(act, "sigmoid") && strcmp(act, "none")) ||
	    (strcmp(pool, "sum") && strcmp(pool, "mean")) ||
	    (strcmp(tr, "log1p") && strcmp(tr, "none"))) {
		st_error("model %s: activation '%s' (relu|sigmoid|none), pooling '%s' "
			 "(sum|mean), dense_transform '%s' (log1p|none)", cfg->type, act,
			 pool, tr);
		return ST_EINVAL;
	}
	if (n_dense < 0 || n_slots < 1 || n_slots > 65535 || cfg->n_hidden < 0 ||
	    cfg->n_hidden > 16 || cfg->n_bottom < 0 || cfg->n_bottom > 16 ||
	    (cfg->slot_dims && cfg->n_slot_dims != n_slots) ||
	    (cfg->slot_pooling && cfg->n_slot_pooling != n_slots)) {
		st_error("model %s: bad shape (%d dense, %d slots, %d hidden, %d bottom, "
			 "%d slot dims)", cfg->type, n_dense, n_slots, cfg->n_hidden,
			 cfg->n_bottom, cfg->slot_dims ? cfg->n_slot_dims : n_slots);
		return ST_EINVAL;
	}
	st_model_t *m = calloc(1, sizeof *m);
	if (!m)
		return ST_ENOMEM;
	m->type = type;
	m->act = !strcmp(act, "relu") ? ACT_RELU : !strcmp(act, "sigmoid") ? ACT_SIGMOID
								      : ACT_NONE;
	m->mean = !strcmp(pool, "mean");
	m->log1p = !strcmp(tr, "log1p");
	m->n_dense = n_dense;
	m->n_slots = n_slots;
	m->dim = calloc((size_t)n_slots, sizeof(int));
	m->off = calloc((size_t)n_slots, sizeof(int));
	m->row_dim = calloc((size_t)n_slots, sizeof(int));
	if (!m->dim || !m->off || !m->row_dim) {
		st_model_destroy(m);
		return ST_ENOMEM;
	}
	m->has_wide = type == M_LR || type == M_WDL || type == M_DEEPFM;
	m->has_lin = m->has_wide;
	int rc = ST_OK;
	for (int s = 0; s < n_slots; s++) {
		int d = type == M_LR ? 0 : cfg->slot_dims ? cfg->slot_dims[s] : cfg->emb_dim;
		if (type != M_LR && d < 1) {
			st_error("model %s: slot %d has embedding dim %d (need >= 1)",
				 cfg->type, s, d);
			rc = ST_EINVAL;
			break;
		}
		m->dim[s] = d;
		m->off[s] = m->width;
		m->width += d;
		m->row_dim[s] = d + m->has_wide;
		if (m->row_dim[s] > m->max_row_dim)
			m->max_row_dim = m->row_dim[s];
	}
	m->uniform_rows = 1;
	for (int s = 1; s < n_slots && rc == ST_OK; s++)
		m->uniform_rows &= m->row_dim[s] == m->row_dim[0];
	if (rc == ST_OK && (type == M_DEEPFM || type == M_DLRM)) {
		/* FM and the dot interaction pair up vectors coordinate by
		 * coordinate, so every field must have the same dimension. */
		for (int s = 1; s < n_slots; s++)
			if (m->dim[s] != m->dim[0]) {
				st_error("model %s: every slot needs the same embedding dim "
					 "(slot 0 has %d, slot %d has %d); set one emb_dim",
					 cfg->type, m->dim[0], s, m->dim[s]);
				rc = ST_EINVAL;
				break;
			}
		m->emb_d = m->dim[0];
	}
	if (rc == ST_OK && type == M_DLRM) {
		int nb = cfg->n_bottom;
		int last = nb ? cfg->bottom[nb - 1] : m->emb_d;
		if (n_dense < 1 || last != m->emb_d) {
			st_error("model dlrm: the bottom MLP needs dense features (have %d) "
				 "and its last size must equal emb_dim %d (got %d)", n_dense,
				 m->emb_d, last);
			rc = ST_EINVAL;
		}
	}
	for (int k = 0; k < cfg->n_hidden && rc == ST_OK; k++)
		if (cfg->hidden[k] < 1)
			rc = ST_EINVAL;
	for (int k = 0; k < cfg->n_bottom && rc == ST_OK; k++)
		if (cfg->bottom[k] < 1)
			rc = ST_EINVAL;
	if (rc < 0) {
		if (rc == ST_EINVAL)
			st_error("model %s: layer sizes must be >= 1", cfg->type);
		st_model_destroy(m);
		return rc;
	}
	if (cfg->slot_pooling) {
		/* A list field's own pooling (lang/job.h): 0 = model.pooling. */
		m->slot_mean = calloc((size_t)n_slots, 1);
		if (!m->slot_mean) {
			st_model_destroy(m);
			return ST_ENOMEM;
		}
		for (int s = 0; s < n_slots; s++) {
			int p = cfg->slot_pooling[s];
			m->slot_mean[s] = (uint8_t)(p == ST_POOLING_MODEL ? m->mean
									  : p == ST_POOLING_MEAN);
		}
	}
	m->pool = (st_pool_layout_t){ .n_slots = n_slots, .dim = m->dim, .off = m->off,
				      .width = m->width, .mean = m->mean,
				      .slot_mean = m->slot_mean };

	/* Tensors, in the order of their offsets. */
	char name[24];
	if (m->has_lin) {
		m->lin_w = m->nparams;
		add_tensor(m, "dense.weight", 1, n_dense);
		m->lin_b = m->nparams;
		add_tensor(m, "dense.bias", 1, -1);
		m->flops += 6.0 * n_dense;
	}
	if (type == M_DLRM) {
		/* No explicit bottom = one layer straight to emb_dim. */
		int nb = cfg->n_bottom ? cfg->n_bottom : 1;
		int in = n_dense;
		for (int k = 0; k < nb; k++) {
			int o = cfg->n_bottom ? cfg->bottom[k] : m->emb_d;
			snprintf(name, sizeof name, "bot.%d", k);
			m->bot[k] = add_linear(m, name, in, o);
			in = o;
		}
		m->n_bot = nb;
		m->F = n_slots + 1;
		m->npairs = m->F * (m->F - 1) / 2;
		m->in0 = m->emb_d + m->npairs;
		m->flops += 3.0 * m->npairs * m->emb_d * 2;
	} else if (type != M_LR) {
		m->in0 = m->width + n_dense;
	}
	if (type != M_LR) {
		int in = m->in0;
		for (int k = 0; k < cfg->n_hidden; k++) {
			snprintf(name, sizeof name, "mlp.%d", k);
			m->top[k] = add_linear(m, name, in, cfg->hidden[k]);
			in = cfg->hidden[k];
		}
		m->top[cfg->n_hidden] = add_linear(m, "out", in, 1);
		m->n_top = cfg->n_hidden + 1;
	}
	if (type == M_DEEPFM)
		m->flops += 3.0 * 3 * m->width;

	m->params = calloc(m->nparams ? m->nparams : 1, sizeof(float));
	if (!m->params) {
		st_model_destroy(m);
		return ST_ENOMEM;
	}
	uint64_t rng = seed ^ UINT64_C(0x6d6f64656c);   /* "model" */
	if (m->has_lin)
		init_linear(m->params, &(layer_t){ .in = n_dense, .out = 1, .w = m->lin_w,
						   .b = m->lin_b }, &rng);
	for (int k = 0; k < m->n_bot; k++)
		init_linear(m->params, &m->bot[k], &rng);
	for (int k = 0; k < m->n_top; k++)
		init_linear(m->params, &m->top[k], &rng);
	*out = m;
	return ST_OK;
}

void st_model_destroy(st_model_t *m)
{
	if (!m)
		return;
	free(m->dim);
	free(m->off);
	free(m->row_dim);
	free(m->slot_mean);
	free(m->params);
	free(m);
}

size_t st_model_nparams(const st_model_t *m) { return m->nparams; }
float *st_model_params(st_model_t *m) { return m->params; }
int st_model_ntensors(const st_model_t *m) { return m->ntensors; }
int st_model_row_dim(const st_model_t *m, int slot) { return m->row_dim[slot]; }
int st_model_max_row_dim(const st_model_t *m) { return m->max_row_dim; }
int st_model_has_wide(const st_model_t *m) { return m->has_wide; }
double st_model_flops_per_example(const st_model_t *m) { return m->flops; }

const st_tensor_info_t *st_model_tensor(const st_model_t *m, int i)
{
	return i >= 0 && i < m->ntensors ? &m->tensors[i] : NULL;
}

int st_model_find_tensor(const st_model_t *m, const char *name)
{
	for (int i = 0; i < m->ntensors; i++)
		if (!strcmp(m->tensors[i].name, name))
			return i;
	return ST_ENOENT;
}

/* ---- workspace ----------------------------------------------------------- */

int st_model_ws_create(st_model_ws_t **out, const st_model_t *m, uint32_t max_n)
{
	st_model_ws_t *ws = calloc(1, sizeof *ws);
	if (!ws)
		return ST_ENOMEM;
	ws->max_n = max_n;
	size_t n = max_n ? max_n : 1;
	int maxw = m->in0 > 1 ? m->in0 : 1;
	for (int k = 0; k < m->n_top; k++)
		maxw = m->top[k].out > maxw ? m->top[k].out : maxw;
	for (int k = 0; k < m->n_bot; k++)
		maxw = m->bot[k].out > maxw ? m->bot[k].out : maxw;
	/* Sizes of every buffer, carved from one block. */
	size_t sz[64], tot = 0;
	float **dst[64];
	int nb = 0;
#define WS(ptr, cnt) (dst[nb] = &(ptr), sz[nb] = (cnt), tot += (cnt), nb++)
	WS(ws->xd, n * (size_t)(m->n_dense ? m->n_dense : 1));
	WS(ws->P, n * (size_t)(m->width ? m->width : 1));
	WS(ws->dP, n * (size_t)(m->width ? m->width : 1));
	WS(ws->X0, n * (size_t)(m->in0 ? m->in0 : 1));
	WS(ws->dX0, n * (size_t)(m->in0 ? m->in0 : 1));
	WS(ws->logit, n);
	WS(ws->dlogit, n);
	WS(ws->prob, n);
	WS(ws->tmp, n);
	WS(ws->fm, n);
	WS(ws->dFM, m->type == M_DEEPFM ? n * (size_t)m->width : 1);
	for (int k = 0; k + 1 < m->n_top; k++)
		WS(ws->h[k], n * (size_t)m->top[k].out);
	for (int k = 0; k < m->n_bot; k++)
		WS(ws->bh[k], n * (size_t)m->bot[k].out);
	WS(ws->dbuf[0], n * (size_t)maxw);
	WS(ws->dbuf[1], n * (size_t)maxw);
	size_t fz = m->type == M_DLRM ? n * (size_t)m->F * (size_t)m->emb_d : 1;
	size_t pz = m->type == M_DLRM ? n * (size_t)m->npairs : 1;
	WS(ws->Z, fz);
	WS(ws->dZ, fz);
	WS(ws->D2, pz);
	WS(ws->dD2, pz);
	WS(ws->dz0, m->type == M_DLRM ? n * (size_t)m->emb_d : 1);
#undef WS
	/* 16-float alignment per buffer keeps sgemm's operands on cache lines. */
	/* aligned_alloc wants a size that is a multiple of the alignment:
	 * whole 16-float (64-byte) units. */
	ws->block = aligned_alloc(64, ((tot + 16 * (size_t)nb + 15) & ~(size_t)15) *
				      sizeof(float));
	if (!ws->block) {
		free(ws);
		return ST_ENOMEM;
	}
	size_t o = 0;
	for (int i = 0; i < nb; i++) {
		*dst[i] = ws->block + o;
		o += (sz[i] + 15) & ~(size_t)15;
	}
	*out = ws;
	return ST_OK;
}

void st_model_ws_destroy(st_model_ws_t *ws)
{
	if (!ws)
		return;
	free(ws->block);
	free(ws);
}

/* ---- forward / backward -------------------------------------------------- */

static void act_forward(int act, size_t len, float *y)
{
	if (act == ACT_RELU)
		st_relu_forward(len, y, y);
	else if (act == ACT_SIGMOID)
		st_sigmoid_forward(len, y, y);
}

static void act_backward(int act, size_t len, const float *y, float *dy)
{
	if (act == ACT_RELU)
		st_relu_backward(len, y, dy, dy);
	else if (act == ACT_SIGMOID)
		st_sigmoid_backward(len, y, dy, dy);
}

/* Wide term: the last column of each key's row. nn.h's st_wide_* take one
 * column for all keys; with per-slot dims the column differs by slot, so
 * that (rare) case is a plain loop over the same CSR. */
static void wide_forward(const st_model_t *m, const st_batch_t *b, uint32_t r0,
			 uint32_t n, float *const *rows, float *out)
{
	if (m->uniform_rows) {
		st_wide_forward(r0, n, b->row_off, b->key_val, b->key_idx, rows,
				m->row_dim[0] - 1, out);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		float z = 0.0f;
		for (uint32_t k = b->row_off[r0 + i]; k < b->row_off[r0 + i + 1]; k++) {
			const float *r = rows[b->key_idx[k]];
			if (r)
				z += b->key_val[k] * r[m->dim[b->key_slot[k]]];
		}
		out[i] = z;
	}
}

static void wide_backward(const st_model_t *m, const st_batch_t *b, uint32_t r0,
			  uint32_t n, const float *dout, float *gu, int gstride)
{
	if (m->uniform_rows) {
		st_wide_backward(r0, n, b->row_off, b->key_val, b->key_idx, dout, gu,
				 gstride, m->row_dim[0] - 1);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t k = b->row_off[r0 + i]; k < b->row_off[r0 + i + 1]; k++)
			gu[(size_t)b->key_idx[k] * gstride + m->dim[b->key_slot[k]]] +=
				dout[i] * b->key_val[k];
}

/* logit[i] += x_dense · w + b (the dense linear term). */
static void lin_forward(const st_model_t *m, st_model_ws_t *ws, int n,
			const float *params, float *logit)
{
	if (m->n_dense > 0)
		st_linear_forward(n, m->n_dense, 1, ws->xd, params + m->lin_w,
				  params + m->lin_b, ws->tmp);
	else
		for (int i = 0; i < n; i++)
			ws->tmp[i] = params[m->lin_b];
	for (int i = 0; i < n; i++)
		logit[i] += ws->tmp[i];
}

/* Runs the MLP `L[0..nl-1]` (the last layer without activation when
 * `last_linear`) from X; outputs of layer k in H[k] (H[nl-1] may be the
 * caller's output). */
static void mlp_forward(const st_model_t *m, const layer_t *L, int nl, int n,
			const float *X, float **H, const float *params, int last_linear)
{
	for (int k = 0; k < nl; k++) {
		st_linear_forward(n, L[k].in, L[k].out, X, params + L[k].w, params + L[k].b,
				  H[k]);
		if (!(last_linear && k == nl - 1))
			act_forward(m->act, (size_t)n * (size_t)L[k].out, H[k]);
		X = H[k];
	}
}

/* Backward through the MLP: dY is the gradient of the last layer's output
 * (overwritten by the activation backward where there is one); dX, when
 * non-NULL, receives the gradient of the input X. Uses ws->dbuf. */
static void mlp_backward(const st_model_t *m, st_model_ws_t *ws, const layer_t *L,
			 int nl, int n, const float *X, float *const *H, float *dY,
			 float *dX, const float *params, float *gparams, int last_linear)
{
	float *cur = dY;
	int pp = 0;
	for (int k = nl - 1; k >= 0; k--) {
		if (!(last_linear && k == nl - 1))
			act_backward(m->act, (size_t)n * (size_t)L[k].out, H[k], cur);
		const float *in = k ? H[k - 1] : X;
		float *dIn = k ? ws->dbuf[pp] : dX;
		st_linear_backward(n, L[k].in, L[k].out, in, params + L[k].w, cur, dIn,
				   gparams + L[k].w, gparams + L[k].b);
		cur = dIn;
		pp ^= 1;
	}
}

/* The forward pass; leaves every activation in ws for backward. */
static void forward(const st_model_t *m, st_model_ws_t *ws, const st_batch_t *b,
		    uint32_t r0, uint32_t n, float *const *rows, const float *params)
{
	const int D = m->n_dense, nn_ = (int)n;
	for (uint32_t i = 0; i < n; i++) {
		const float *x = b->dense + (size_t)(r0 + i) * b->n_dense;
		float *y = ws->xd + (size_t)i * D;
		for (int d = 0; d < D; d++)
			y[d] = m->log1p ? (x[d] > 0.0f ? log1pf(x[d]) : 0.0f) : x[d];
	}
	float *logit = ws->logit;
	if (m->width > 0)
		st_pool_forward(&m->pool, r0, n, b->row_off, b->key_slot, b->key_val,
				b->key_idx, rows, ws->P);
	if (m->type == M_DLRM) {
		const int d = m->emb_d, F = m->F;
		mlp_forward(m, m->bot, m->n_bot, nn_, ws->xd, ws->bh, params, 0);
		const float *z0 = ws->bh[m->n_bot - 1];
		for (uint32_t i = 0; i < n; i++) {
			float *z = ws->Z + (size_t)i * F * d;
			memcpy(z, z0 + (size_t)i * d, sizeof(float) * d);
			memcpy(z + d, ws->P + (size_t)i * m->width, sizeof(float) * m->width);
		}
		st_dot_forward(nn_, F, d, ws->Z, ws->D2);
		for (uint32_t i = 0; i < n; i++) {
			float *t = ws->X0 + (size_t)i * m->in0;
			memcpy(t, z0 + (size_t)i * d, sizeof(float) * d);
			memcpy(t + d, ws->D2 + (size_t)i * m->npairs, sizeof(float) * m->npairs);
		}
	} else if (m->type != M_LR) {
		for (uint32_t i = 0; i < n; i++) {
			float *t = ws->X0 + (size_t)i * m->in0;
			memcpy(t, ws->P + (size_t)i * m->width, sizeof(float) * m->width);
			memcpy(t + m->width, ws->xd + (size_t)i * D, sizeof(float) * D);
		}
	}
	if (m->type == M_LR) {
		memset(logit, 0, sizeof(float) * n);
	} else {
		float *H[MAX_LAYERS];
		for (int k = 0; k + 1 < m->n_top; k++)
			H[k] = ws->h[k];
		H[m->n_top - 1] = logit;
		mlp_forward(m, m->top, m->n_top, nn_, ws->X0, H, params, 1);
	}
	if (m->has_wide) {
		wide_forward(m, b, r0, n, rows, ws->tmp);
		for (uint32_t i = 0; i < n; i++)
			logit[i] += ws->tmp[i];
		lin_forward(m, ws, nn_, params, logit);
	}
	if (m->type == M_DEEPFM) {
		st_fm_forward(nn_, m->n_slots, m->emb_d, ws->P, ws->fm);
		for (uint32_t i = 0; i < n; i++)
			logit[i] += ws->fm[i];
	}
}

void st_model_forward(const st_model_t *m, st_model_ws_t *ws, const st_batch_t *b,
		      uint32_t r0, uint32_t n, float *const *rows,
		      const float *params, float *logit, float *prob)
{
	forward(m, ws, b, r0, n, rows, params);
	st_logloss_forward_backward((int)n, ws->logit, b->labels + r0, 0.0f, prob, NULL);
	if (logit)
		memcpy(logit, ws->logit, sizeof(float) * n);
}

double st_model_step(const st_model_t *m, st_model_ws_t *ws, const st_batch_t *b,
		     uint32_t r0, uint32_t n, float *const *rows,
		     const float *params, float scale, float *prob,
		     float *gparams, float *gu, int gstride)
{
	const int nn_ = (int)n, D = m->n_dense;
	forward(m, ws, b, r0, n, rows, params);
	double loss = st_logloss_forward_backward(nn_, ws->logit, b->labels + r0, scale,
						  prob ? prob : ws->prob, ws->dlogit);
	float *dl = ws->dlogit;
	if (m->has_wide) {
		wide_backward(m, b, r0, n, dl, gu, gstride);
		if (D > 0)
			st_linear_backward(nn_, D, 1, ws->xd, params + m->lin_w, dl, NULL,
					   gparams + m->lin_w, gparams + m->lin_b);
		else
			for (int i = 0; i < nn_; i++)
				gparams[m->lin_b] += dl[i];
	}
	if (m->type == M_LR)
		return loss;
	/* The MLP backward works in place on its dY, so it gets a copy:
	 * the FM term below still needs dlogit. */
	float *H[MAX_LAYERS];
	for (int k = 0; k + 1 < m->n_top; k++)
		H[k] = ws->h[k];
	H[m->n_top - 1] = ws->logit;
	memcpy(ws->tmp, dl, sizeof(float) * n);
	mlp_backward(m, ws, m->top, m->n_top, nn_, ws->X0, H, ws->tmp, ws->dX0, params,
		     gparams, 1);
	const int W = m->width;
	if (m->type == M_DLRM) {
		const int d = m->emb_d, F = m->F;
		for (int i = 0; i < nn_; i++)
			memcpy(ws->dD2 + (size_t)i * m->npairs, ws->dX0 + (size_t)i * m->in0 + d,
			       sizeof(float) * m->npairs);
		st_dot_backward(nn_, F, d, ws->Z, ws->dD2, ws->dZ);
		/* dz0 = direct path (top MLP input) + interaction path (Z[0]). */
		float *dz0b = ws->dz0;
		for (int i = 0; i < nn_; i++) {
			const float *zi = ws->dZ + (size_t)i * F * d;
			const float *ti = ws->dX0 + (size_t)i * m->in0;
			for (int j = 0; j < d; j++)
				dz0b[(size_t)i * d + j] = ti[j] + zi[j];
			memcpy(ws->dP + (size_t)i * W, zi + d, sizeof(float) * W);
		}
		st_pool_backward(&m->pool, r0, n, b->row_off, b->key_slot, b->key_val,
				 b->key_idx, ws->dP, gu, gstride);
		mlp_backward(m, ws, m->bot, m->n_bot, nn_, ws->xd, ws->bh, dz0b, NULL, params,
			     gparams, 0);
		return loss;
	}
	for (int i = 0; i < nn_; i++)
		memcpy(ws->dP + (size_t)i * W, ws->dX0 + (size_t)i * m->in0, sizeof(float) * W);
	if (m->type == M_DEEPFM) {
		st_fm_backward(nn_, m->n_slots, m->emb_d, ws->P, dl, ws->dFM);
		for (size_t j = 0; j < (size_t)nn_ * W; j++)
			ws->dP[j] += ws->dFM[j];
	}
	st_pool_backward(&m->pool, r0, n, b->row_off, b->key_slot, b->key_val, b->key_idx,
			 ws->dP, gu, gstride);
	return loss;
}
