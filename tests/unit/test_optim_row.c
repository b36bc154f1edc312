/* test_optim_row.c — the sparse update of a stored row with compact values
 * (storage.row_precision): st_optim_row_update (one-owner policies) and
 * st_sync_row_update_relaxed (Hogwild policies) both equal "decode, fp32
 * st_optim_update, round to nearest even" bit for bit, for every optimizer
 * and for row widths around the relaxed update's 64-value chunks; the
 * state stays fp32, an odd row's pad half-word stays 0, and nothing after
 * the row is written. fp32 rows are updated as before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/optim/optim.h"
#include "ops/sync/sync.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"

static float frand(uint64_t *s)
{
	*s = *s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
	return (float)((*s >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

static void optim(st_optim_t *o, const char *name, int rowwise, int prec)
{
	st_optim_cfg_t c = { .name = (char *)name, .lr = 0.05, .l2 = 1e-4, .eps = 1e-8,
			     .beta1 = 0.9, .beta2 = 0.999, .init_accum = 0.1, .rowwise = rowwise,
			     .l1 = 0.01, .beta = 1.0 };
	assert_int_equal(st_optim_init(o, &c), ST_OK);
	assert_int_equal(o->row_prec, ST_ROW_FP32);
	o->row_prec = prec;
}

static void test_optim_row_compact_update_is_decode_update_round(void **state)
{
	(void)state;
	static const struct { const char *name; int rowwise; } kinds[] = {
		{ "sgd", 0 }, { "adagrad", 0 }, { "adagrad", 1 }, { "adam", 0 }, { "ftrl", 0 },
	};
	static const int dims[] = { 1, 7, 63, 64, 65, 128, 129, 200 };
	uint64_t seed = 99;
	for (int prec = ST_ROW_BF16; prec <= ST_ROW_FP16; prec++)
		for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
			for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
				st_optim_t o;
				optim(&o, kinds[k].name, kinds[k].rowwise, prec);
				const int dim = dims[d];
				const size_t ns = st_optim_state_floats(&o, (size_t)dim);
				const uint32_t ew = st_rowfmt_words(prec, (uint32_t)dim);
				const size_t words = ew + ns + 4;   /* + a guard after the row */
				float *a = calloc(words, sizeof(float)), *b = calloc(words, sizeof(float));
				float *w = malloc(sizeof(float) * (size_t)dim);
				float *st = malloc(sizeof(float) * (ns ? ns : 1));
				float *g = malloc(sizeof(float) * (size_t)dim);
				float *tmp = malloc(sizeof(float) * ((size_t)dim + ns));
				assert_true(a && b && w && st && g && tmp);
				for (int j = 0; j < dim; j++)
					w[j] = 0.1f * frand(&seed);
				st_optim_state_init(&o, st, (size_t)dim);
				st_rowfmt_encode(prec, w, a, (size_t)dim);
				memcpy(a + ew, st, sizeof(float) * ns);
				for (size_t j = ew + ns; j < words; j++)
					a[j] = 1234.5f;
				memcpy(b, a, sizeof(float) * words);
				for (uint64_t t = 1; t <= 5; t++) {
					for (int j = 0; j < dim; j++)
						g[j] = 0.5f * frand(&seed);
					/* The reference: decode, fp32 update, round. */
					st_rowfmt_decode(prec, a, w, (size_t)dim);
					st_optim_update(&o, w, st, g, (size_t)dim, t);
					st_optim_row_update(&o, a, g, (size_t)dim, t);
					st_sync_env_t env = { .sparse_opt = &o };
					st_sync_row_update_relaxed(&env, b, g, dim, t, tmp);
					float dec[256];
					st_rowfmt_decode(prec, a, dec, (size_t)dim);
					for (int j = 0; j < dim; j++) {
						uint16_t want = prec == ST_ROW_BF16
							? st_rowfmt_bf16_from_f32_ref(w[j])
							: st_rowfmt_fp16_from_f32_ref(w[j]);
						if (((const uint16_t *)(const void *)a)[j] != want)
							fail_msg("%s%s %s dim %d step %llu value %d",
								 kinds[k].name, kinds[k].rowwise ? " rowwise" : "",
								 st_rowfmt_name(prec), dim, (unsigned long long)t, j);
						/* the next step starts from the rounded value */
						w[j] = dec[j];
					}
					assert_memory_equal(a + ew, st, sizeof(float) * ns);
					assert_memory_equal(a, b, sizeof(float) * words);
				}
				if (dim & 1)
					assert_int_equal(((const uint16_t *)(const void *)a)[dim], 0);
				for (size_t j = ew + ns; j < words; j++)
					assert_true(a[j] == 1234.5f);
				free(a);
				free(b);
				free(w);
				free(st);
				free(g);
				free(tmp);
			}
}

/* fp32 rows: st_optim_row_update is st_optim_update on (row, row + dim). */
static void test_optim_row_fp32_unchanged(void **state)
{
	(void)state;
	st_optim_t o;
	optim(&o, "adagrad", 0, ST_ROW_FP32);
	enum { D = 9 };
	float a[2 * D], b[2 * D], g[D];
	uint64_t seed = 5;
	for (int j = 0; j < 2 * D; j++)
		a[j] = b[j] = j < D ? frand(&seed) : 0.1f;
	for (int j = 0; j < D; j++)
		g[j] = frand(&seed);
	st_optim_row_update(&o, a, g, D, 1);
	st_optim_update(&o, b, b + D, g, D, 1);
	assert_memory_equal(a, b, sizeof a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_optim_row_compact_update_is_decode_update_round),
		cmocka_unit_test(test_optim_row_fp32_unchanged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
