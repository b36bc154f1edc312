/* test_gpu_model.c — one training step of the dnn preset on the GPU
 * (cuda/model.c) against st_model_step (ops/nn/model.c) on the same batch
 * and the same dense parameters: loss, predictions, dense gradients and the
 * gradients of the unique keys' rows.
 *
 * Tolerances: the step chains three cuBLAS sgemms forward and three
 * backward (each ~1e-6 relative from summation order, see test_gpu_dense.c)
 * with relu masks that agree unless a pre-activation lies within ~1e-6 of 0
 * (the seeded inputs have none); errors compound through the layers to a
 * few 1e-6 relative: loss rtol 1e-5, predictions atol 1e-5, gradients
 * atol 1e-6 + rtol 1e-3 (gradients are scaled by 1/n = 1/64, and the
 * rtol covers the small ones; a wrong layer or transposition is off by
 * O(1) relative). */
#include "gpu_test.h"

#include "ops/nn/model.h"

enum { N = 64, S = 3, D = 4, EMB = 8, U = 40 };

static void test_gpu_model_dnn_step(void **state)
{
	for (int pooling = 0; pooling < 2; pooling++) {
		st_model_cfg_t cfg = { .type = "dnn", .emb_dim = EMB, .n_hidden = 2,
				       .hidden = { 32, 16 }, .activation = "relu",
				       .pooling = pooling ? "mean" : "sum" };
		st_model_t *m;
		assert_int_equal(st_model_create(&m, &cfg, D, S, 42), ST_OK);
		st_model_ws_t *ws;
		assert_int_equal(st_model_ws_create(&ws, m, N), ST_OK);
		const int rd = st_model_row_dim(m, 0), gs = st_model_max_row_dim(m);
		const size_t np = st_model_nparams(m);

		st_batch_t *b;
		assert_int_equal(st_batch_create(&b, N, D, S, N * S * 2), ST_OK);
		b->n = N;
		b->row_off[0] = 0;
		/* key_idx is st_batch_dedup's column (NULL until a dedup): this
		 * batch's unique-key indices are drawn, so it is allocated here
		 * (st_batch_destroy frees it). */
		b->key_idx = malloc(sizeof(uint32_t) * b->key_cap);
		b->n_uniq = U;
		assert_non_null(b->key_idx);
		for (int i = 0; i < N; i++) {
			b->labels[i] = (float)(gt_rnd() % 2);
			for (int d = 0; d < D; d++)
				b->dense[i * D + d] = (float)(gt_rnd() % 100) * (d == 1 ? -1.0f : 1.0f);
			int nk = 1 + (int)(gt_rnd() % (2 * S - 1));
			for (int j = 0; j < nk; j++) {
				uint32_t k = b->row_off[i] + j;
				b->key_slot[k] = (uint16_t)(j % S);
				b->key_val[k] = 1.0f;
				b->key_idx[k] = (uint32_t)(gt_rnd() % U);
			}
			b->row_off[i + 1] = b->row_off[i] + nk;
		}
		const uint32_t nk = b->row_off[N];
		float *vals = gt_rand((size_t)U * rd), *rows[U];
		int32_t slot[U];
		for (int u = 0; u < U; u++) {
			rows[u] = vals + (size_t)u * rd;
			slot[u] = u;
		}

		float prob[N], *gp = calloc(np, sizeof(float)), *gu = calloc((size_t)U * gs, 4);
		double loss = st_model_step(m, ws, b, 0, N, rows, st_model_params(m), 1.0f / N, prob,
					    gp, gu, gs);

		st_gpu_blas_t *bl;
		assert_int_equal(st_gpu_blas_create(&bl, NULL, 0), ST_OK);
		int dims[S], offs[S];
		for (int s = 0; s < S; s++) {
			dims[s] = EMB;
			offs[s] = s * EMB;
		}
		st_pool_layout_t L = { .n_slots = S, .dim = dims, .off = offs, .width = S * EMB,
				       .mean = pooling };
		st_gpu_dnn_cfg_t gc = { .pool = &L, .n_dense = D, .n_hidden = 2,
					.hidden = cfg.hidden, .act = 1, .log1p = 1, .max_n = N };
		st_gpu_dnn_t *g;
		assert_int_equal(st_gpu_dnn_create(&g, &gc, bl), ST_OK);
		assert_int_equal(st_gpu_dnn_nparams(g), np);
		st_gpu_csr_t c = { .n = N, .row_off = gt_dev(b->row_off, (N + 1) * 4),
				   .key_slot = gt_dev(b->key_slot, nk * 2),
				   .key_val = gt_dev(b->key_val, nk * 4),
				   .key_idx = gt_dev(b->key_idx, nk * 4) };
		st_gpu_rows_t r = { .vals = gt_dev(vals, (size_t)U * rd * 4), .stride = (uint32_t)rd,
				    .slot = gt_dev(slot, sizeof slot) };
		float *d_dense = gt_dev(b->dense, N * D * 4), *d_label = gt_dev(b->labels, N * 4);
		float *d_params = gt_dev(st_model_params(m), np * 4);
		float *d_gp = gt_dev(NULL, np * 4), *d_gu = gt_dev(NULL, (size_t)U * gs * 4);
		float *d_prob = gt_dev(NULL, N * 4);
		double *d_loss = gt_dev(NULL, sizeof(double));
		assert_int_equal(st_gpu_dnn_step(g, &c, &r, d_dense, d_label, d_params, 1.0f / N,
						 d_prob, d_gp, d_gu, gs, d_loss), ST_OK);

		double *gl = gt_host(d_loss, sizeof(double));
		assert_true(fabs(*gl - loss) <= 1e-5 * fabs(loss));
		float *got = gt_host(d_prob, N * 4);
		gt_close("prob", got, prob, N, 1e-5, 0);
		free(got);
		got = gt_host(d_gp, np * 4);
		gt_close("dense gradients", got, gp, np, 1e-6, 1e-3);
		free(got);
		got = gt_host(d_gu, (size_t)U * gs * 4);
		gt_close("row gradients", got, gu, (size_t)U * gs, 1e-6, 1e-3);
		free(got);

		free(gl), free(vals), free(gp), free(gu);
		st_gpu_free((void *)c.row_off), st_gpu_free((void *)c.key_slot);
		st_gpu_free((void *)c.key_val), st_gpu_free((void *)c.key_idx);
		st_gpu_free((void *)r.vals), st_gpu_free((void *)r.slot);
		st_gpu_free(d_dense), st_gpu_free(d_label), st_gpu_free(d_params), st_gpu_free(d_gp);
		st_gpu_free(d_gu), st_gpu_free(d_prob), st_gpu_free(d_loss);
		st_gpu_dnn_destroy(g);
		st_gpu_blas_destroy(bl);
		st_batch_destroy(b);
		st_model_ws_destroy(ws);
		st_model_destroy(m);
	}
}

int main(void)
{
	int skip = gpu_test_skip();
	if (skip)
		return skip;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_model_dnn_step),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
