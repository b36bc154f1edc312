/*
 * params.c — optimizer steps of a model's dense tensors and of sparse rows
 * (params.h). A 1-D tensor (a bias) is one row of cols floats, so a
 * rowwise optimizer treats it as one row.
 *
 * Threads: none; reentrant.
 */
#include "ops/algo/params.h"

static void tensor_shape(const st_tensor_info_t *ti, size_t *rows, size_t *cols)
{
	*rows = ti->ndim == 2 ? (size_t)ti->shape[0] : 1;
	*cols = ti->ndim == 2 ? (size_t)ti->shape[1] : (size_t)ti->shape[0];
}

size_t st_algo_tensor_floats(const st_model_t *m, int i)
{
	const st_tensor_info_t *ti = st_model_tensor(m, i);
	return (size_t)ti->shape[0] * (size_t)(ti->ndim == 2 ? ti->shape[1] : 1);
}

size_t st_algo_dense_state_offset(const st_algo_params_t *p, int i)
{
	size_t off = 0;
	for (int k = 0; k < i; k++) {
		size_t r, c;
		tensor_shape(st_model_tensor(p->model, k), &r, &c);
		off += r * st_optim_state_floats(p->dense_opt, c);
	}
	return off;
}

size_t st_algo_dense_state_floats(const st_algo_params_t *p)
{
	return st_algo_dense_state_offset(p, st_model_ntensors(p->model));
}

void st_algo_dense_state_init(const st_algo_params_t *p, float *state)
{
	/* Every state float starts at the same value, so one loop covers all
	 * tensors whatever their layout. */
	size_t n = st_algo_dense_state_floats(p);
	float v = (p->dense_opt->kind == ST_OPT_ADAGRAD || p->dense_opt->kind == ST_OPT_ADAGRAD_ROW)
			  ? p->dense_opt->init_accum
			  : 0.0f;
	for (size_t i = 0; i < n; i++)
		state[i] = v;
}

void st_algo_dense_update_tensor(const st_algo_params_t *p, float *w, float *state,
				 const float *g, int i, uint64_t t)
{
	const st_tensor_info_t *ti = st_model_tensor(p->model, i);
	size_t r, c;
	tensor_shape(ti, &r, &c);
	if (!r || !c)
		return;
	st_optim_update_rows(p->dense_opt, w + ti->offset,
			     state + st_algo_dense_state_offset(p, i), g + ti->offset, r, c, t);
}

void st_algo_dense_update(const st_algo_params_t *p, float *w, float *state, const float *g,
			  uint64_t t)
{
	size_t off = 0;
	for (int i = 0; i < st_model_ntensors(p->model); i++) {
		const st_tensor_info_t *ti = st_model_tensor(p->model, i);
		size_t r, c;
		tensor_shape(ti, &r, &c);
		if (r && c)
			st_optim_update_rows(p->dense_opt, w + ti->offset, state + off,
					     g + ti->offset, r, c, t);
		off += r * st_optim_state_floats(p->dense_opt, c);
	}
}

void st_algo_row_update(const st_algo_params_t *p, float *row, const float *g, int dim,
			uint64_t t)
{
	st_optim_row_update(p->sparse_opt, row, g, (size_t)dim, t);
}
