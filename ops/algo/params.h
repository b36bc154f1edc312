/*
 * params.h — the parameters a sync algorithm updates, and one optimizer
 * step of them: the model's dense tensors laid out with their optimizer
 * state tensor by tensor (rows × state floats(cols), so rowwise AdaGrad
 * keeps one accumulator per row), and sparse rows (emb+wide floats followed
 * by the row's optimizer state). The cores of ops/algo and both transports
 * of a policy — the threads of one process (ops/sync) and the ranks of
 * many (ops/dist) — step parameters through these, so one process and many
 * lay out and update optimizer state alike (the bit-identical allreduce
 * runs of tests/e2e/dist.sh rely on it).
 *
 * Threads: none. Every function is reentrant; the caller owns every array
 * it passes and serializes access to it.
 */
#ifndef ST_ALGO_PARAMS_H
#define ST_ALGO_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/nn/model.h"
#include "ops/optim/optim.h"

/* What an algorithm steps; every pointer outlives its users. */
typedef struct st_algo_params {
	const st_model_t *model;     /* tensor shapes and offsets */
	float *params;               /* the dense parameters [nparams] */
	size_t nparams;
	const st_optim_t *dense_opt;
	const st_optim_t *sparse_opt;
} st_algo_params_t;

/* Floats of tensor i of the model (rows × cols, or the length of a 1-D one). */
size_t st_algo_tensor_floats(const st_model_t *m, int i);
/* Offset of tensor i's optimizer state in the dense state array
 * (i == ntensors: the array's length). */
size_t st_algo_dense_state_offset(const st_algo_params_t *p, int i);
/* Floats of dense optimizer state for the whole model. */
size_t st_algo_dense_state_floats(const st_algo_params_t *p);
/* Initial dense state (st_optim_state_init's value over the whole array). */
void st_algo_dense_state_init(const st_algo_params_t *p, float *state);
/* One optimizer step t >= 1 of the dense array w (layout of p->model),
 * tensor by tensor, with gradient g and state `state`. */
void st_algo_dense_update(const st_algo_params_t *p, float *w, float *state, const float *g,
			  uint64_t t);
/* The same for tensor i alone (its slice of w, g and state): the tensors'
 * steps together equal st_algo_dense_update, so a transport may split the
 * dense step among workers by tensor. */
void st_algo_dense_update_tensor(const st_algo_params_t *p, float *w, float *state,
				 const float *g, int i, uint64_t t);
/* One sparse optimizer step t of a row: row[0..dim) emb+wide, then its
 * optimizer state. */
void st_algo_row_update(const st_algo_params_t *p, float *row, const float *g, int dim,
			uint64_t t);

#endif
