/* test_gpu_optim.c — cuda/optim.cu against ops/optim/optim.c: every rule
 * (sgd, adagrad, rowwise adagrad, adam, ftrl) on embedding rows addressed
 * by slot and on a dense tensor, several steps, weights and state compared.
 *
 * Tolerance atol 1e-6 + rtol 1e-5 on weights and state of magnitude ~1:
 * both sides evaluate the same float expressions (Adam's bias corrections
 * are even bit-identical, computed on the host); nvcc fuses a*b + c into
 * one rounding, which moves each of the ~6 operations of a step by at most
 * 1 ulp (6e-8 relative), and rowwise AdaGrad sums its squares in another
 * order (in double, then rounded once). Over STEPS = 5 steps of contracting
 * or bounded updates that stays below 1e-6 relative; a wrong formula is off
 * by > 1e-3 (see tests/unit/test_optim.c). */
#include "gpu_test.h"

#include "ops/optim/optim.h"

enum { U = 70, D = 37, STEPS = 5, ROWS = 9, COLS = 45 };

static st_optim_t make(const char *name, int rowwise)
{
	st_optim_cfg_t cfg = {
		.name = (char *)name, .rowwise = rowwise, .lr = 0.05, .l2 = 0.01,
		.eps = 1e-8, .beta1 = 0.9, .beta2 = 0.999, .init_accum = 0.1,
		.l1 = 0.01, .beta = 1.0,
	};
	st_optim_t o;
	assert_int_equal(st_optim_init(&o, &cfg), ST_OK);
	return o;
}

/* Rows in a pool of 2U rows at permuted slots (some rows not updated). */
static void check_rows(const st_optim_t *o)
{
	const size_t sf = st_optim_state_floats(o, D), stride = D + sf, pool = 2 * U;
	float *vals = malloc(pool * stride * sizeof(float));
	for (size_t r = 0; r < pool; r++) {
		float *w = vals + r * stride;
		for (int j = 0; j < D; j++)
			w[j] = o->kind == ST_OPT_FTRL ? 0.0f : gt_sym();
		st_optim_state_init(o, w + D, D);
	}
	int32_t slot[U];
	for (int u = 0; u < U; u++)
		slot[u] = (int32_t)((u * 37 + 11) % pool);   /* distinct, scattered */
	slot[3] = -1;                                        /* skipped */
	float *d_vals = gt_dev(vals, pool * stride * sizeof(float));
	int32_t *d_slot = gt_dev(slot, sizeof slot);
	const int gstride = D + 3;
	for (uint64_t t = 1; t <= STEPS; t++) {
		float *g = gt_rand((size_t)U * gstride);
		for (int u = 0; u < U; u++)
			if (slot[u] >= 0)
				st_optim_update(o, vals + (size_t)slot[u] * stride,
						vals + (size_t)slot[u] * stride + D,
						g + (size_t)u * gstride, D, t);
		float *d_g = gt_dev(g, (size_t)U * gstride * sizeof(float));
		assert_int_equal(st_gpu_optim_rows(o, d_vals, (uint32_t)stride, D, d_slot, U, d_g,
						   gstride, t, NULL), ST_OK);
		st_gpu_free(d_g);
		free(g);
	}
	float *got = gt_host(d_vals, pool * stride * sizeof(float));
	gt_close("rows (weights and state)", got, vals, pool * stride, 1e-6, 1e-5);
	free(got), free(vals);
	st_gpu_free(d_vals), st_gpu_free(d_slot);
}

static void check_dense(const st_optim_t *o)
{
	const size_t len = (size_t)ROWS * COLS, sf = ROWS * st_optim_state_floats(o, COLS);
	float *w = gt_rand(len), *state = malloc((sf ? sf : 1) * sizeof(float));
	if (o->kind == ST_OPT_FTRL)
		memset(w, 0, len * sizeof *w);
	if (o->kind == ST_OPT_ADAGRAD_ROW)
		for (size_t r = 0; r < ROWS; r++)
			st_optim_state_init(o, state + r, COLS);
	else
		st_optim_state_init(o, state, len);
	float *d_w = gt_dev(w, len * sizeof(float));
	float *d_state = sf ? gt_dev(state, sf * sizeof(float)) : NULL;
	for (uint64_t t = 1; t <= STEPS; t++) {
		float *g = gt_rand(len);
		st_optim_update_rows(o, w, state, g, ROWS, COLS, t);
		float *d_g = gt_dev(g, len * sizeof(float));
		assert_int_equal(st_gpu_optim_dense(o, d_w, d_state, d_g, ROWS, COLS, t, NULL), ST_OK);
		st_gpu_free(d_g);
		free(g);
	}
	float *got = gt_host(d_w, len * sizeof(float));
	gt_close("dense weights", got, w, len, 1e-6, 1e-5);
	free(got);
	if (sf) {
		got = gt_host(d_state, sf * sizeof(float));
		gt_close("dense state", got, state, sf, 1e-6, 1e-5);
		free(got);
	}
	free(w), free(state);
	st_gpu_free(d_w), st_gpu_free(d_state);
}

static void check(const char *name, int rowwise)
{
	st_optim_t o = make(name, rowwise);
	check_rows(&o);
	check_dense(&o);
}

static void test_gpu_optim_sgd(void **state)
{
	check("sgd", 0);
}

static void test_gpu_optim_adagrad(void **state)
{
	check("adagrad", 0);
}

static void test_gpu_optim_adagrad_rowwise(void **state)
{
	check("adagrad", 1);
}

static void test_gpu_optim_adam(void **state)
{
	check("adam", 0);
}

static void test_gpu_optim_ftrl(void **state)
{
	check("ftrl", 0);
}

int main(void)
{
	int skip = gpu_test_skip();
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_optim_sgd),
		cmocka_unit_test(test_gpu_optim_adagrad),
		cmocka_unit_test(test_gpu_optim_adagrad_rowwise),
		cmocka_unit_test(test_gpu_optim_adam),
		cmocka_unit_test(test_gpu_optim_ftrl),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
