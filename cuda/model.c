/*
 * model.c — the dnn preset of ops/nn/model.c on one GPU (contract: gpu.h,
 * "the dnn preset on one GPU"), composed from the kernels of gpu.h:
 *
 *   xd = log1p(max(dense, 0))            st_gpu_log1p_forward
 *   P  = pool(rows of the unique keys)   st_gpu_pool_forward
 *   X0 = concat(P, xd)                   st_gpu_copy2d (two column blocks)
 *   h_k = act(linear_k(h_{k-1})), logit = linear_out(h_last)   cuBLAS
 *   loss, prob, dlogit                   st_gpu_logloss
 * and the backward in model.c's order (mlp_backward, then the pooled part of
 * dX0 scattered into the unique keys' gradient rows).
 *
 * The dense parameters use model.c's layout for the dnn preset: in tensor
 * order mlp.0.weight [h0 × in0], mlp.0.bias [h0], ..., out.weight [1 × last],
 * out.bias [1], packed without gaps — so st_model_params of a CPU dnn model
 * uploads as is, and tests/gpu compares both steps on the same parameters.
 *
 * Plain C; all device work is queued on the BLAS handle's stream. The
 * workspace holds the activations of the last forward for its backward.
 */
#include "cuda/gpu.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

#define MAX_LAYERS 17

typedef struct layer {
	int in, out;
	size_t w, b;
} layer_t;

struct st_gpu_dnn {
	st_gpu_blas_t *blas;
	st_gpu_stream_t *s;
	st_gpu_pool_t *pool;
	int width, n_dense, in0, act, log1p, n_top;
	uint32_t max_n;
	layer_t top[MAX_LAYERS];
	size_t nparams;
	/* device workspace */
	float *xd, *P, *X0, *dX0, *dP, *logit, *dlogit, *tmp;
	float *h[MAX_LAYERS];
	float *dbuf[2];
};

static void free_ws(st_gpu_dnn_t *m)
{
	float **bufs[] = { &m->xd, &m->P, &m->X0, &m->dX0, &m->dP, &m->logit, &m->dlogit,
			   &m->tmp, &m->dbuf[0], &m->dbuf[1] };
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
		st_gpu_free(*bufs[i]);
		*bufs[i] = NULL;
	}
	for (int k = 0; k < MAX_LAYERS; k++) {
		st_gpu_free(m->h[k]);
		m->h[k] = NULL;
	}
}

void st_gpu_dnn_destroy(st_gpu_dnn_t *m)
{
	if (!m)
		return;
	free_ws(m);
	st_gpu_pool_destroy(m->pool);
	free(m);
}

static int alloc_ws(st_gpu_dnn_t *m)
{
	size_t n = m->max_n ? m->max_n : 1, maxw = (size_t)m->in0;
	for (int k = 0; k < m->n_top; k++)
		if ((size_t)m->top[k].out > maxw)
			maxw = (size_t)m->top[k].out;
	struct {
		float **p;
		size_t len;
	} b[] = {
		{ &m->xd, n * (size_t)(m->n_dense ? m->n_dense : 1) },
		{ &m->P, n * (size_t)m->width }, { &m->X0, n * (size_t)m->in0 },
		{ &m->dX0, n * (size_t)m->in0 }, { &m->dP, n * (size_t)m->width },
		{ &m->logit, n }, { &m->dlogit, n }, { &m->tmp, n },
		{ &m->dbuf[0], n * maxw }, { &m->dbuf[1], n * maxw },
	};
	int rc;
	for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
		if ((rc = st_gpu_alloc((void **)b[i].p, b[i].len * sizeof(float))) < 0)
			return rc;
	for (int k = 0; k + 1 < m->n_top; k++)
		if ((rc = st_gpu_alloc((void **)&m->h[k], n * (size_t)m->top[k].out *
							       sizeof(float))) < 0)
			return rc;
	return ST_OK;
}

int st_gpu_dnn_create(st_gpu_dnn_t **out, const st_gpu_dnn_cfg_t *cfg, st_gpu_blas_t *b)
{
	*out = NULL;
	if (cfg->n_hidden < 0 || cfg->n_hidden > MAX_LAYERS - 1 || cfg->n_dense < 0 ||
	    cfg->pool->width < 1) {
		st_error("gpu dnn: bad shape (%d hidden layers, %d dense, width %d)",
			 cfg->n_hidden, cfg->n_dense, cfg->pool->width);
		return ST_EINVAL;
	}
	st_gpu_dnn_t *m = calloc(1, sizeof *m);
	if (!m)
		return ST_ENOMEM;
	m->blas = b;
	m->s = st_gpu_blas_stream(b);
	m->width = cfg->pool->width;
	m->n_dense = cfg->n_dense;
	m->in0 = m->width + cfg->n_dense;
	m->act = cfg->act;
	m->log1p = cfg->log1p;
	m->max_n = cfg->max_n;
	/* model.c's add_linear order: weight then bias, layer after layer. */
	int in = m->in0;
	for (int k = 0; k <= cfg->n_hidden; k++) {
		int o = k < cfg->n_hidden ? cfg->hidden[k] : 1;
		m->top[k] = (layer_t){ .in = in, .out = o, .w = m->nparams,
				       .b = m->nparams + (size_t)in * o };
		m->nparams += (size_t)in * o + (size_t)o;
		in = o;
	}
	m->n_top = cfg->n_hidden + 1;
	int rc = st_gpu_pool_create(&m->pool, cfg->pool);
	if (rc == ST_OK)
		rc = alloc_ws(m);
	if (rc < 0) {
		st_gpu_dnn_destroy(m);
		return rc;
	}
	*out = m;
	return ST_OK;
}

size_t st_gpu_dnn_nparams(const st_gpu_dnn_t *m)
{
	return m->nparams;
}

static int act_forward(const st_gpu_dnn_t *m, size_t len, float *y)
{
	if (m->act == 1)
		return st_gpu_relu_forward(len, y, y, m->s);
	if (m->act == 2)
		return st_gpu_sigmoid_forward(len, y, y, m->s);
	return ST_OK;
}

static int act_backward(const st_gpu_dnn_t *m, size_t len, const float *y, float *dy)
{
	if (m->act == 1)
		return st_gpu_relu_backward(len, y, dy, dy, m->s);
	if (m->act == 2)
		return st_gpu_sigmoid_backward(len, y, dy, dy, m->s);
	return ST_OK;
}

static int forward(st_gpu_dnn_t *m, const st_gpu_csr_t *c, const st_gpu_rows_t *r,
		   const float *d_dense, const float *params)
{
	const int n = (int)c->n, D = m->n_dense, W = m->width;
	const size_t nd = (size_t)n * (size_t)D;
	int rc;
	if ((rc = m->log1p ? st_gpu_log1p_forward(nd, d_dense, m->xd, m->s)
			   : st_gpu_copy(m->xd, d_dense, nd * sizeof(float), m->s)) < 0 ||
	    (rc = st_gpu_pool_forward(m->pool, c, r, m->P, m->s)) < 0 ||
	    (rc = st_gpu_copy2d(m->X0, (size_t)m->in0, m->P, (size_t)W, (size_t)W, (size_t)n,
				m->s)) < 0 ||
	    (rc = st_gpu_copy2d(m->X0 + W, (size_t)m->in0, m->xd, (size_t)D, (size_t)D,
				(size_t)n, m->s)) < 0)
		return rc;
	const float *X = m->X0;
	for (int k = 0; k < m->n_top; k++) {
		const layer_t *L = &m->top[k];
		float *Y = k + 1 < m->n_top ? m->h[k] : m->logit;
		if ((rc = st_gpu_linear_forward(m->blas, n, L->in, L->out, X, params + L->w,
						params + L->b, Y)) < 0)
			return rc;
		if (k + 1 < m->n_top && (rc = act_forward(m, (size_t)n * L->out, Y)) < 0)
			return rc;
		X = Y;
	}
	return ST_OK;
}

/* model.c's mlp_backward over the top MLP (last layer linear), then the
 * pooled columns of dX0 back into the unique keys' rows. */
static int backward(st_gpu_dnn_t *m, const st_gpu_csr_t *c, const float *params,
		    float *gparams, float *d_gu, int gstride)
{
	const int n = (int)c->n, W = m->width;
	int rc = st_gpu_copy(m->tmp, m->dlogit, (size_t)n * sizeof(float), m->s);
	float *cur = m->tmp;
	int pp = 0;
	for (int k = m->n_top - 1; k >= 0 && rc >= 0; k--) {
		const layer_t *L = &m->top[k];
		if (k + 1 < m->n_top && (rc = act_backward(m, (size_t)n * L->out, m->h[k], cur)) < 0)
			break;
		const float *in = k ? m->h[k - 1] : m->X0;
		float *dIn = k ? m->dbuf[pp] : m->dX0;
		rc = st_gpu_linear_backward(m->blas, n, L->in, L->out, in, params + L->w, cur, dIn,
					    gparams + L->w, gparams + L->b);
		cur = dIn;
		pp ^= 1;
	}
	if (rc < 0 ||
	    (rc = st_gpu_copy2d(m->dP, (size_t)W, m->dX0, (size_t)m->in0, (size_t)W, (size_t)n,
				m->s)) < 0)
		return rc;
	return st_gpu_pool_backward(m->pool, c, m->dP, d_gu, gstride, m->s);
}

int st_gpu_dnn_step(st_gpu_dnn_t *m, const st_gpu_csr_t *c, const st_gpu_rows_t *r,
		    const float *d_dense, const float *d_label, const float *d_params,
		    float scale, float *d_prob, float *d_gparams, float *d_gu, int gstride,
		    double *d_loss)
{
	if (c->n > m->max_n) {
		st_error("gpu dnn: step of %u examples, workspace sized for %u", c->n, m->max_n);
		return ST_EINVAL;
	}
	if (c->n == 0)
		return ST_OK;
	int rc = forward(m, c, r, d_dense, d_params);
	if (rc < 0 ||
	    (rc = st_gpu_logloss((int)c->n, m->logit, d_label, scale, d_prob,
				 d_gparams ? m->dlogit : NULL, d_loss, m->s)) < 0 ||
	    !d_gparams)
		return rc;
	return backward(m, c, d_params, d_gparams, d_gu, gstride);
}
