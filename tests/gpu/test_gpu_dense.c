/* test_gpu_dense.c — cuda/dense.cu and cuda/interact.cu against ops/nn/nn.c
 * and ops/metrics/auc.c: cuBLAS linear forward/backward, activations, the
 * log1p transform, FM and dot interactions, the loss, the AUC histogram.
 *
 * Tolerances (inputs uniform in [-1, 1]):
 *  - linear: sgemm sums K products in cuBLAS's blocked order, OpenBLAS in
 *    its own; reassociating K terms moves a sum by <= K · eps · Σ|a·b|, at
 *    most 300 · 6e-8 · 300 ≈ 5e-3 in the worst case for K = 300 but ~
 *    sqrt(K) · eps · sqrt(K) ≈ 2e-5 in practice (random signs): atol 2e-4 +
 *    rtol 1e-4. db is summed in the CPU's order: exact.
 *  - activations: relu exact; sigmoid and log1p use the device expf /
 *    log1pf (<= 2 ulp): atol 1e-6 + rtol 1e-6.
 *  - FM forward reduces coordinates across a warp (another order):
 *    atol 1e-5 + rtol 1e-5; FM backward and dot forward/backward sum in the
 *    CPU's order, fused multiply-adds only: atol 1e-6 + rtol 1e-5.
 *  - loss: per example in double with the same formula (the device exp and
 *    log1p are within 1 ulp of glibc's), then rounded to float: prob and
 *    dlogit atol 1e-7; the loss sum is a double sum in another order:
 *    rtol 1e-12.
 *  - AUC: the histogram is integer counts in the accumulator's buckets, so
 *    the AUC is exactly the streaming accumulator's. */
#include "gpu_test.h"

#include "ops/metrics/auc.h"
#include "ops/nn/nn.h"

static void test_gpu_dense_linear(void **state)
{
	const int n = 200, in = 300, out = 70;
	float *X = gt_rand((size_t)n * in), *W = gt_rand((size_t)out * in), *b = gt_rand(out);
	float *dY = gt_rand((size_t)n * out);
	float *Y = malloc((size_t)n * out * sizeof(float)), *dX = malloc((size_t)n * in * 4);
	float *dW = gt_rand((size_t)out * in), *db = gt_rand(out);   /* backward accumulates */
	float *d_X = gt_dev(X, (size_t)n * in * 4), *d_W = gt_dev(W, (size_t)out * in * 4);
	float *d_b = gt_dev(b, (size_t)out * 4), *d_Y = gt_dev(NULL, (size_t)n * out * 4);
	float *d_dY = gt_dev(dY, (size_t)n * out * 4), *d_dX = gt_dev(NULL, (size_t)n * in * 4);
	float *d_dW = gt_dev(dW, (size_t)out * in * 4), *d_db = gt_dev(db, (size_t)out * 4);
	st_gpu_blas_t *bl;
	assert_int_equal(st_gpu_blas_create(&bl, NULL, 0), ST_OK);

	st_linear_forward(n, in, out, X, W, b, Y);
	assert_int_equal(st_gpu_linear_forward(bl, n, in, out, d_X, d_W, d_b, d_Y), ST_OK);
	float *got = gt_host(d_Y, (size_t)n * out * 4);
	gt_close("linear Y", got, Y, (size_t)n * out, 2e-4, 1e-4);
	free(got);
	/* no bias */
	st_linear_forward(n, in, out, X, W, NULL, Y);
	assert_int_equal(st_gpu_linear_forward(bl, n, in, out, d_X, d_W, NULL, d_Y), ST_OK);
	got = gt_host(d_Y, (size_t)n * out * 4);
	gt_close("linear Y (no bias)", got, Y, (size_t)n * out, 2e-4, 1e-4);
	free(got);

	st_linear_backward(n, in, out, X, W, dY, dX, dW, db);
	assert_int_equal(st_gpu_linear_backward(bl, n, in, out, d_X, d_W, d_dY, d_dX, d_dW, d_db),
			 ST_OK);
	got = gt_host(d_dX, (size_t)n * in * 4);
	gt_close("linear dX", got, dX, (size_t)n * in, 2e-4, 1e-4);
	free(got);
	got = gt_host(d_dW, (size_t)out * in * 4);
	gt_close("linear dW", got, dW, (size_t)out * in, 2e-4, 1e-4);
	free(got);
	got = gt_host(d_db, (size_t)out * 4);
	gt_close("linear db", got, db, (size_t)out, 0, 0);
	free(got);

	st_gpu_blas_destroy(bl);
	free(X), free(W), free(b), free(dY), free(Y), free(dX), free(dW), free(db);
	st_gpu_free(d_X), st_gpu_free(d_W), st_gpu_free(d_b), st_gpu_free(d_Y);
	st_gpu_free(d_dY), st_gpu_free(d_dX), st_gpu_free(d_dW), st_gpu_free(d_db);
}

static void test_gpu_dense_activations(void **state)
{
	enum { L = 5000 };
	float *x = gt_rand(L), *dy = gt_rand(L), y[L], dx[L];
	for (int i = 0; i < L; i++)
		x[i] *= 12.0f;   /* both sides of the sigmoid's branch, and saturation */
	float *d_x = gt_dev(x, sizeof y), *d_y = gt_dev(NULL, sizeof y);
	float *d_dy = gt_dev(dy, sizeof y), *d_dx = gt_dev(NULL, sizeof y);
	float *got;

	st_relu_forward(L, x, y);
	assert_int_equal(st_gpu_relu_forward(L, d_x, d_y, NULL), ST_OK);
	got = gt_host(d_y, sizeof y);
	gt_close("relu", got, y, L, 0, 0);
	free(got);
	st_relu_backward(L, y, dy, dx);
	assert_int_equal(st_gpu_relu_backward(L, d_y, d_dy, d_dx, NULL), ST_OK);
	got = gt_host(d_dx, sizeof y);
	gt_close("relu bwd", got, dx, L, 0, 0);
	free(got);

	st_sigmoid_forward(L, x, y);
	assert_int_equal(st_gpu_sigmoid_forward(L, d_x, d_y, NULL), ST_OK);
	got = gt_host(d_y, sizeof y);
	gt_close("sigmoid", got, y, L, 1e-6, 1e-6);
	free(got);
	assert_int_equal(st_gpu_upload(d_y, y, sizeof y, NULL), ST_OK);
	st_sigmoid_backward(L, y, dy, dx);
	assert_int_equal(st_gpu_sigmoid_backward(L, d_y, d_dy, d_dx, NULL), ST_OK);
	got = gt_host(d_dx, sizeof y);
	gt_close("sigmoid bwd", got, dx, L, 1e-6, 1e-6);
	free(got);

	for (int i = 0; i < L; i++)
		y[i] = x[i] > 0.0f ? log1pf(x[i]) : 0.0f;   /* model.c's transform */
	assert_int_equal(st_gpu_log1p_forward(L, d_x, d_dx, NULL), ST_OK);
	got = gt_host(d_dx, sizeof y);
	gt_close("log1p", got, y, L, 1e-6, 1e-6);
	free(got);
	free(x), free(dy);
	st_gpu_free(d_x), st_gpu_free(d_y), st_gpu_free(d_dy), st_gpu_free(d_dx);
}

static void test_gpu_dense_interactions(void **state)
{
	const int n = 150, F = 27, d = 40;   /* d > 32: two lane rounds */
	const size_t ne = (size_t)n * F * d, np = (size_t)F * (F - 1) / 2;
	float *E = gt_rand(ne), *g = gt_rand(n), *gp = gt_rand(n * np);
	float *out = malloc(n * np * sizeof(float)), *dE = malloc(ne * sizeof(float));
	float *d_E = gt_dev(E, ne * 4), *d_g = gt_dev(g, (size_t)n * 4);
	float *d_gp = gt_dev(gp, n * np * 4);
	float *d_out = gt_dev(NULL, n * np * 4), *d_dE = gt_dev(NULL, ne * 4);
	float *got;

	st_fm_forward(n, F, d, E, out);
	assert_int_equal(st_gpu_fm_forward(n, F, d, d_E, d_out, NULL), ST_OK);
	got = gt_host(d_out, (size_t)n * 4);
	gt_close("fm fwd", got, out, n, 1e-5, 1e-5);
	free(got);
	st_fm_backward(n, F, d, E, g, dE);
	assert_int_equal(st_gpu_fm_backward(n, F, d, d_E, d_g, d_dE, NULL), ST_OK);
	got = gt_host(d_dE, ne * 4);
	gt_close("fm bwd", got, dE, ne, 1e-6, 1e-5);
	free(got);

	st_dot_forward(n, F, d, E, out);
	assert_int_equal(st_gpu_dot_forward(n, F, d, d_E, d_out, NULL), ST_OK);
	got = gt_host(d_out, n * np * 4);
	gt_close("dot fwd", got, out, n * np, 1e-6, 1e-5);
	free(got);
	st_dot_backward(n, F, d, E, gp, dE);
	assert_int_equal(st_gpu_dot_backward(n, F, d, d_E, d_gp, d_dE, NULL), ST_OK);
	got = gt_host(d_dE, ne * 4);
	gt_close("dot bwd", got, dE, ne, 1e-6, 1e-5);
	free(got);

	free(E), free(g), free(gp), free(out), free(dE);
	st_gpu_free(d_E), st_gpu_free(d_g), st_gpu_free(d_gp), st_gpu_free(d_out), st_gpu_free(d_dE);
}

static void test_gpu_dense_loss_auc(void **state)
{
	enum { N = 30000, BITS = 16 };
	float *logit = gt_rand(N), *label = malloc(N * sizeof(float));
	float prob_scale = 1.0f / N;
	for (int i = 0; i < N; i++) {
		logit[i] *= 30.0f;   /* past float's exp range on both sides */
		label[i] = (float)(gt_rnd() % 4 == 0);
	}
	float *prob = malloc(N * 4), *dl = malloc(N * 4);
	double want = st_logloss_forward_backward(N, logit, label, prob_scale, prob, dl);
	float *d_logit = gt_dev(logit, N * 4), *d_label = gt_dev(label, N * 4);
	float *d_prob = gt_dev(NULL, N * 4), *d_dl = gt_dev(NULL, N * 4);
	double *d_sum = gt_dev(NULL, sizeof(double));
	/* two calls add into the same sum */
	assert_int_equal(st_gpu_logloss(N / 2, d_logit, d_label, prob_scale, d_prob, d_dl, d_sum,
					NULL), ST_OK);
	assert_int_equal(st_gpu_logloss(N - N / 2, d_logit + N / 2, d_label + N / 2, prob_scale,
					d_prob + N / 2, d_dl + N / 2, d_sum, NULL), ST_OK);
	double *sum = gt_host(d_sum, sizeof(double));
	assert_true(fabs(*sum - want) <= 1e-12 * fabs(want));
	float *got = gt_host(d_prob, N * 4);
	gt_close("prob", got, prob, N, 1e-7, 0);
	free(got);
	got = gt_host(d_dl, N * 4);
	gt_close("dlogit", got, dl, N, 1e-7, 0);
	free(got);

	/* AUC: the accumulator's buckets, exactly */
	st_auc_acc_t *acc;
	assert_int_equal(st_auc_acc_create(&acc, BITS), ST_OK);
	for (int i = 0; i < N; i++)
		st_auc_acc_add(acc, prob[i], label[i]);
	const st_auc_acc_t *accs[] = { acc };
	st_auc_stats_t s;
	st_auc_acc_read(accs, 1, &s);
	uint64_t *d_hist = gt_dev(NULL, ((size_t)2 << BITS) * sizeof(uint64_t));
	assert_int_equal(st_gpu_auc_hist(d_prob, d_label, N, BITS, d_hist, NULL), ST_OK);
	uint64_t *hist = gt_host(d_hist, ((size_t)2 << BITS) * sizeof(uint64_t));
	assert_true(st_gpu_auc_from_hist(hist, BITS) == s.auc);
	assert_int_equal(st_gpu_auc_hist(d_prob, d_label, N, 3, d_hist, NULL), ST_EINVAL);
	st_auc_acc_destroy(acc);
	free(hist), free(sum), free(logit), free(label), free(prob), free(dl);
	st_gpu_free(d_logit), st_gpu_free(d_label), st_gpu_free(d_prob), st_gpu_free(d_dl);
	st_gpu_free(d_sum), st_gpu_free(d_hist);
}

int main(void)
{
	int skip = gpu_test_skip();
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_dense_linear),
		cmocka_unit_test(test_gpu_dense_activations),
		cmocka_unit_test(test_gpu_dense_interactions),
		cmocka_unit_test(test_gpu_dense_loss_auc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
