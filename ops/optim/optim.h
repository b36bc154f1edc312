/*
 * optim.h — optimizers for sparse rows and dense tensors.
 *
 * One update rule per kind, applied to a parameter vector w[len] with its
 * gradient g[len] and its state. The same function serves a sparse row
 * (only the rows a step touched are updated) and a dense tensor. Formulas
 * follow PyTorch's so that the golden fixtures of tests/reference match:
 *
 *   l2:       g' = g + l2 * w                       (weight_decay)
 *   sgd:      w -= lr * g'
 *   adagrad:  acc += g'²;  w -= lr * g' / (sqrt(acc) + eps)     (torch.optim.Adagrad)
 *   adagrad rowwise: acc += mean(g'²) over the row; w -= lr * g' / (sqrt(acc) + eps)
 *   adam:     m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'²;
 *             w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)   (torch.optim.Adam;
 *             sparse rows use the step count t of their table, as torch.optim.SparseAdam)
 *   ftrl:     FTRL-proximal (McMahan et al. 2013, Algorithm 1), per coordinate
 *             with state z, n:  σ = (sqrt(n + g²) − sqrt(n)) / lr;  z += g − σ w;
 *             n += g²;  w = 0 if |z| <= l1 else −(z − sign(z) l1) / ((beta + sqrt(n)) / lr + l2)
 *             (l2 is the proximal term here, not added to g)
 *
 * Thread-safety: none needed — the caller owns w/state for the call (a sync
 * policy decides who updates what).
 */
#ifndef ST_OPTIM_H
#define ST_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "lang/job.h"

enum st_optim_kind {
	ST_OPT_SGD = 0,
	ST_OPT_ADAGRAD,
	ST_OPT_ADAGRAD_ROW,
	ST_OPT_ADAM,
	ST_OPT_FTRL,
};

typedef struct st_optim {
	int kind;              /* enum st_optim_kind */
	float lr, l2, eps, beta1, beta2, init_accum, l1, beta;
	/* Sparse rows only: the precision their emb part is stored in (enum
	 * st_row_prec, runtime/store/rowfmt.h; storage.row_precision). 0 =
	 * fp32. st_optim_init sets 0; the trainer sets its sparse optimizer's.
	 * Updates of a compact row decode it, compute in fp32 and round back
	 * (st_optim_row_update); the state stays fp32. */
	int row_prec;
} st_optim_t;

/* Fills o from the job's settings. ST_OK or ST_EINVAL (unknown name). */
int st_optim_init(st_optim_t *o, const st_optim_cfg_t *cfg);

/* Floats of state for a vector of len parameters (sgd 0, adagrad len,
 * rowwise 1, adam 2*len, ftrl 2*len). */
size_t st_optim_state_floats(const st_optim_t *o, size_t len);

/* Initial state (adagrad: init_accum; others: 0). For ftrl, w must then be
 * consistent with z = n = 0, i.e. the row starts at w = 0. */
void st_optim_state_init(const st_optim_t *o, float *state, size_t len);

/* One update of w[len] with g[len]; t >= 1 is the step number for Adam's
 * bias correction (ignored by the others). Runs the AVX2 loops
 * (ops/optim/optim_avx2.c) when runtime/simd.h's st_simd_avx2() allows,
 * else st_optim_update_ref; both give the same bits. */
void st_optim_update(const st_optim_t *o, float *w, float *state, const float *g,
		     size_t len, uint64_t t);

/* The readable reference of st_optim_update: plain loops over the formulas
 * above, whatever the CPU. Tests and benchmarks compare the two. */
void st_optim_update_ref(const st_optim_t *o, float *w, float *state, const float *g,
			 size_t len, uint64_t t);

/* Largest row (emb + wide floats) st_optim_row_update takes for a compact
 * row (model.emb_dim's limit, 4096, plus the wide weight). */
#define ST_OPTIM_ROW_MAX 4160

/* One update of a stored sparse row: row is emb[dim] in o->row_prec (fp32:
 * as st_optim_update(o, row, row + dim, ...)), then its fp32 state at
 * st_rowfmt_words(o->row_prec, dim) words. A compact row's values are
 * decoded, updated in fp32 and rounded to nearest even; dim <=
 * ST_OPTIM_ROW_MAX (asserted). Not for rows other threads write meanwhile
 * (st_sync_row_update_relaxed is). */
void st_optim_row_update(const st_optim_t *o, float *row, const float *g, size_t dim,
			 uint64_t t);

/* A dense tensor of rows × cols updated row by row (rowwise adagrad keeps
 * one accumulator per row; other kinds equal one st_optim_update over
 * rows*cols). State has rows * st_optim_state_floats(o, cols) floats. */
void st_optim_update_rows(const st_optim_t *o, float *w, float *state, const float *g,
			  size_t rows, size_t cols, uint64_t t);

#endif
