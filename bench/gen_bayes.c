/*
 * gen_bayes.c — the ceiling for models trained on `strata gen --history`
 * data (bench/din.sh): the eval AUC of the generator's true logit (the
 * Bayes-optimal score) and of the true logit without the history's term
 * (what a model that ignores the candidate-history match can reach at
 * best). Same options as the gen command that wrote the files. With CROSS
 * (gen --cross, bench/cross.sh) it also prints the AUC of the true logit
 * without the planted cross terms (the same features scored by the
 * generator without --cross): a model of per-field terms gets about that.
 *
 *   bench_gen_bayes EVAL_ROWS VOCAB HISTORY [SEED [CROSS]]
 */
#include <stdio.h>
#include <stdlib.h>

#include "ops/gen/gen.h"
#include "ops/gen/history.h"
#include "ops/metrics/auc.h"
#include "runtime/err.h"

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: bench_gen_bayes EVAL_ROWS VOCAB HISTORY [SEED [CROSS]]\n");
		return 2;
	}
	long n = atol(argv[1]);
	st_gen_opts_t o = { .rows = 1, .eval_rows = n, .files = 1, .zipf = 1.1,
			    .vocab = strtoull(argv[2], NULL, 10), .history = atoi(argv[3]),
			    .seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 1,
			    .cross = argc > 5 ? atoi(argv[5]) : 0 };
	st_gen_opts_t o0 = o;
	o0.cross = 0;
	st_gen_t *g, *g0;
	if (n < 1 || st_gen_create(&g, &o) < 0 || st_gen_create(&g0, &o0) < 0)
		return 1;
	float *flat = malloc(sizeof(float) * (size_t)n);
	float *full = malloc(sizeof(float) * (size_t)n), *blind = malloc(sizeof(float) * (size_t)n);
	float *y = malloc(sizeof(float) * (size_t)n);
	if (!full || !blind || !y || !flat)
		return 1;
	st_gen_row_t r = { 0 };
	for (long i = 0; i < n; i++) {
		st_gen_row(g, ST_GEN_EVAL_BASE + (uint64_t)i, &r);
		full[i] = (float)r.logit;
		blind[i] = (float)(r.logit - (r.has_hist ? st__gen_history_term(r.n_hist, r.hist_cat,
									     r.cand_cat) : 0.0));
		flat[i] = (float)st_gen_logit(g0, 0, &r);
		y[i] = (float)r.label;
	}
	double a_full, a_blind;
	st_auc_exact(full, y, (size_t)n, &a_full);
	st_auc_exact(blind, y, (size_t)n, &a_blind);
	printf("bayes auc %.4f  without the history term %.4f  (%ld eval rows)\n", a_full,
	       a_blind, n);
	if (o.cross) {
		double a_flat;
		st_auc_exact(flat, y, (size_t)n, &a_flat);
		printf("without the %d cross terms %.4f\n", o.cross, a_flat);
	}
	free(full);
	free(blind);
	free(y);
	free(flat);
	st_gen_destroy(g0);
	st_gen_destroy(g);
	return 0;
}
