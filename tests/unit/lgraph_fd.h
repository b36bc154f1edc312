/*
 * lgraph_fd.h — the finite-difference check of a layer graph's backward
 * (ops/nn/graph.h) shared by test_lgraph.c, test_attention.c and
 * test_mmoe.c: central differences of Σ_i r_i · logit_i against
 * st_lgraph_backward's gradients with dlogit = r, over every dense
 * parameter and every float of the rows given.
 *
 * h = 1e-2 in float: truncation stays ~1e-4 on these small smooth graphs
 * (ReLU's kinks are met only when a pre-activation lies within h of 0,
 * which the tests' seeded values avoid; the check would flag it, not hide
 * it); atol 2e-3 + rtol 2e-2 catches a missing term or a wrong sign (those
 * are O(|g|)). Header-only with static functions; include after <cmocka.h>.
 */
#ifndef ST_TEST_LGRAPH_FD_H
#define ST_TEST_LGRAPH_FD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/nn/graph.h"

/* Σ_i r[i] · logit_i of a forward over examples 0 .. n-1. */
static inline double lgraph_probe(const st_lgraph_t *g, st_lgraph_ws_t *ws,
				  const st_batch_t *b, uint32_t n, float *const *rows,
				  const float *params, const float *r)
{
	const float *z = st_lgraph_forward(g, ws, b, 0, n, rows, params);
	double s = 0;
	for (uint32_t i = 0; i < n; i++)
		s += (double)r[i] * z[i];
	return s;
}

/* Compares gp[np] (dense) and gu[u * rd + j] (rows 0 .. n_rows-1, rd
 * floats each) with central differences of lgraph_probe, perturbing
 * params and rows in place (restored). Prints each mismatch and returns
 * their count; *nonzero (when not NULL) gets the number of row gradients
 * that are not 0, so a test can say the gradients reach the rows. */
static inline int lgraph_fd_check(const st_lgraph_t *g, st_lgraph_ws_t *ws,
				  const st_batch_t *b, uint32_t n, float **rows, int n_rows,
				  int rd, float *params, size_t np, const float *r,
				  const float *gp, const float *gu, int *nonzero)
{
	const double h = 1e-2;
	int bad = 0;
	for (size_t i = 0; i < np; i++) {
		float v = params[i];
		params[i] = (float)(v + h);
		double lp = lgraph_probe(g, ws, b, n, rows, params, r);
		params[i] = (float)(v - h);
		double lm = lgraph_probe(g, ws, b, n, rows, params, r);
		params[i] = v;
		double fd = (lp - lm) / (2 * h);
		if (fabs(fd - gp[i]) > 2e-3 + 2e-2 * fabs(fd)) {
			print_message("dense %zu: fd %g analytic %g\n", i, fd, gp[i]);
			bad++;
		}
	}
	if (nonzero)
		*nonzero = 0;
	for (int u = 0; u < n_rows; u++)
		for (int j = 0; j < rd; j++) {
			float v = rows[u][j];
			rows[u][j] = (float)(v + h);
			double lp = lgraph_probe(g, ws, b, n, rows, params, r);
			rows[u][j] = (float)(v - h);
			double lm = lgraph_probe(g, ws, b, n, rows, params, r);
			rows[u][j] = v;
			double fd = (lp - lm) / (2 * h);
			if (nonzero)
				*nonzero += gu[u * rd + j] != 0.0f;
			if (fabs(fd - gu[u * rd + j]) > 2e-3 + 2e-2 * fabs(fd)) {
				print_message("row %d[%d]: fd %g analytic %g\n", u, j, fd,
					      gu[u * rd + j]);
				bad++;
			}
		}
	return bad;
}

#endif
