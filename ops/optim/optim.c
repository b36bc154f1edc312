/*
 * optim.c — update rules for sparse rows and dense tensors (contract: optim.h).
 *
 * Each rule is a loop over one parameter vector and its state; the same code
 * updates an embedding row or a whole dense tensor. No allocation, no global
 * state, no locking: the caller owns w and state for the duration of a call.
 *
 * State layouts (floats, in this order):
 *   sgd       —
 *   adagrad   acc[len]
 *   rowwise   acc          (one accumulator for the whole vector / row)
 *   adam      m[len], v[len]
 *   ftrl      z[len], n[len]
 *
 * Formulas follow PyTorch (torch.optim.SGD, Adagrad, Adam with L2
 * weight_decay) so that the golden fixtures of tests/reference match to
 * float rounding; Adam is written in torch's own arrangement,
 * w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), with the bias
 * corrections bc = 1 - beta^t taken in double because beta2^t for large t
 * loses most of its digits in float.
 *
 * The loops here are the readable references (st_optim_update_ref);
 * st_optim_update runs optim_avx2.c's 8-wide copies of them when the CPU
 * has AVX2 (runtime/simd.h), with the same bits (tests/unit/test_optim_simd.c).
 */
#include "ops/optim/optim.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "ops/optim/optim_internal.h"
#include "runtime/err.h"
#include "runtime/simd.h"
#include "runtime/store/rowfmt.h"

int st_optim_init(st_optim_t *o, const st_optim_cfg_t *cfg)
{
	const char *name = cfg->name;
	int kind;
	if (!name)
		return ST_EINVAL;
	if (strcmp(name, "sgd") == 0)
		kind = ST_OPT_SGD;
	else if (strcmp(name, "adagrad") == 0)
		kind = cfg->rowwise ? ST_OPT_ADAGRAD_ROW : ST_OPT_ADAGRAD;
	else if (strcmp(name, "adam") == 0)
		kind = ST_OPT_ADAM;
	else if (strcmp(name, "ftrl") == 0)
		kind = ST_OPT_FTRL;
	else
		return ST_EINVAL;
	o->kind = kind;
	o->lr = (float)cfg->lr;
	o->l2 = (float)cfg->l2;
	o->eps = (float)cfg->eps;
	o->beta1 = (float)cfg->beta1;
	o->beta2 = (float)cfg->beta2;
	o->init_accum = (float)cfg->init_accum;
	o->l1 = (float)cfg->l1;
	o->beta = (float)cfg->beta;
	o->row_prec = ST_ROW_FP32;
	return ST_OK;
}

void st_optim_row_update(const st_optim_t *o, float *row, const float *g, size_t dim,
			 uint64_t t)
{
	if (o->row_prec == ST_ROW_FP32) {
		st_optim_update(o, row, row + dim, g, dim, t);
		return;
	}
	assert(dim <= ST_OPTIM_ROW_MAX);
	float w[ST_OPTIM_ROW_MAX];
	st_rowfmt_decode(o->row_prec, row, w, dim);
	st_optim_update(o, w, row + st_rowfmt_words(o->row_prec, (uint32_t)dim), g, dim, t);
	st_rowfmt_encode(o->row_prec, w, row, dim);
}

size_t st_optim_state_floats(const st_optim_t *o, size_t len)
{
	switch (o->kind) {
	case ST_OPT_SGD:
		return 0;
	case ST_OPT_ADAGRAD:
		return len;
	case ST_OPT_ADAGRAD_ROW:
		return 1;
	case ST_OPT_ADAM:
	case ST_OPT_FTRL:
		return 2 * len;
	}
	assert(!"unknown optimizer kind");
	return 0;
}

void st_optim_state_init(const st_optim_t *o, float *state, size_t len)
{
	size_t nf = st_optim_state_floats(o, len);
	float v = (o->kind == ST_OPT_ADAGRAD || o->kind == ST_OPT_ADAGRAD_ROW)
		? o->init_accum : 0.0f;
	for (size_t i = 0; i < nf; i++)
		state[i] = v;
}

static void sgd(const st_optim_t *o, float *restrict w, const float *restrict g,
		size_t len)
{
	const float lr = o->lr, l2 = o->l2;
	for (size_t i = 0; i < len; i++)
		w[i] -= lr * (g[i] + l2 * w[i]);
}

static void adagrad(const st_optim_t *o, float *restrict w, float *restrict acc,
		    const float *restrict g, size_t len)
{
	const float lr = o->lr, l2 = o->l2, eps = o->eps;
	for (size_t i = 0; i < len; i++) {
		float gi = g[i] + l2 * w[i];
		acc[i] += gi * gi;
		w[i] -= lr * gi / (sqrtf(acc[i]) + eps);
	}
}

static void adagrad_row(const st_optim_t *o, float *restrict w, float *restrict acc,
			const float *restrict g, size_t len)
{
	const float lr = o->lr, l2 = o->l2, eps = o->eps;
	if (len == 0)
		return;
	/* The mean of squares in double: a row is summed in one pass and the
	 * order must not matter for the parity tests. */
	*acc += (float)(st__optim_row_sq(l2, w, g, len) / (double)len);
	const float step = lr / (sqrtf(*acc) + eps);
	for (size_t i = 0; i < len; i++)
		w[i] -= step * (g[i] + l2 * w[i]);
}

static void adam(const st_optim_t *o, float *restrict w, float *restrict m,
		 float *restrict v, const float *restrict g, size_t len, uint64_t t)
{
	assert(t >= 1);
	const float b1 = o->beta1, b2 = o->beta2, l2 = o->l2, eps = o->eps;
	float step, inv_sqrt_bc2;
	st__optim_adam_consts(o, t, &step, &inv_sqrt_bc2);
	/* One pass: moments, bias correction and update per coordinate, so
	 * w, g, m and v are each read once. */
	for (size_t i = 0; i < len; i++) {
		float gi = g[i] + l2 * w[i];
		m[i] = b1 * m[i] + (1.0f - b1) * gi;
		v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
		w[i] -= step * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
	}
}

static void ftrl(const st_optim_t *o, float *restrict w, float *restrict z,
		 float *restrict nacc, const float *restrict g, size_t len)
{
	const float lr = o->lr, l1 = o->l1, l2 = o->l2, beta = o->beta;
	for (size_t i = 0; i < len; i++) {
		float gi = g[i];
		float n_new = nacc[i] + gi * gi;
		float sigma = (sqrtf(n_new) - sqrtf(nacc[i])) / lr;
		z[i] += gi - sigma * w[i];
		nacc[i] = n_new;
		float az = fabsf(z[i]);
		/* The l1 threshold gives exact zeros: sparse models for free. */
		w[i] = az <= l1 ? 0.0f
			: -(z[i] - copysignf(l1, z[i])) / ((beta + sqrtf(n_new)) / lr + l2);
	}
}

void st_optim_update_ref(const st_optim_t *o, float *w, float *state, const float *g,
			 size_t len, uint64_t t)
{
	switch (o->kind) {
	case ST_OPT_SGD:
		sgd(o, w, g, len);
		return;
	case ST_OPT_ADAGRAD:
		adagrad(o, w, state, g, len);
		return;
	case ST_OPT_ADAGRAD_ROW:
		adagrad_row(o, w, state, g, len);
		return;
	case ST_OPT_ADAM:
		adam(o, w, state, state + len, g, len, t);
		return;
	case ST_OPT_FTRL:
		ftrl(o, w, state, state + len, g, len);
		return;
	}
	assert(!"unknown optimizer kind");
}

void st_optim_update(const st_optim_t *o, float *w, float *state, const float *g,
		     size_t len, uint64_t t)
{
#if ST_OPTIM_AVX2
	if (st_simd_avx2()) {
		st__optim_update_avx2(o, w, state, g, len, t);
		return;
	}
#endif
	st_optim_update_ref(o, w, state, g, len, t);
}

void st_optim_update_rows(const st_optim_t *o, float *w, float *state, const float *g,
			  size_t rows, size_t cols, uint64_t t)
{
	if (o->kind != ST_OPT_ADAGRAD_ROW) {
		/* Per-coordinate rules do not care about rows: one call keeps the
		 * state layout identical to st_optim_update over rows * cols. */
		st_optim_update(o, w, state, g, rows * cols, t);
		return;
	}
	for (size_t r = 0; r < rows; r++)
		st_optim_update(o, w + r * cols, state + r, g + r * cols, cols, t);
}
