/*
 * bench_presets.c — the model step of a preset built from its Lua layers
 * (stdlib/strata/presets.lua, what a job builds) against the same preset
 * built by its C reference twin (ops/nn/model.c), in one process, the two
 * alternated (A B B A ...). docs/benchmarks.md, "Presets as Lua".
 *
 *   bench_presets JOB [STEPS]        (default 40 steps of each)
 *
 * Loads the job (data paths are not checked; only the format's shape is
 * used), builds both models from its model config and seed, and times
 * st_model_step (forward + backward, no optimizer) on one synthetic
 * minibatch of the job's minibatch size: one key per slot, every key its
 * own row. Prints the min and median milliseconds per step of each and
 * their ratio; the minimum is the run least disturbed by other processes
 * on a shared machine. Both models must give the same loss on the first
 * step (they are bit-identical; tests/unit/test_presets.c pins that), or it
 * exits 1. Single-threaded (OPENBLAS_NUM_THREADS as set by the caller).
 */
#include "runtime/simd.h"
#include "lang/lang.h"
#include "ops/nn/model.h"
#include "runtime/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	st_simd_openblas_coretype(argv);   /* the kernels `strata run` gets */
	if (argc < 2) {
		fprintf(stderr, "usage: bench_presets JOB [STEPS]\n");
		return 2;
	}
	int steps = argc > 2 ? atoi(argv[2]) : 40;
	if (steps < 1)
		steps = 1;
	st_load_opts_t lo = { .check_paths = 0 };
	st_job_t *job;
	st_diag_t diag;
	if (st_job_load(argv[1], &lo, &job, &diag) < 0) {
		for (int i = 0; i < diag.n; i++)
			fprintf(stderr, "%s\n", diag.msg[i]);
		st_diag_free(&diag);
		return 1;
	}
	if (!job->model.n_preset_nodes) {
		fprintf(stderr, "bench_presets: model '%s' is no preset\n", job->model.type);
		return 2;
	}
	st_model_cfg_t twin = job->model;
	twin.n_preset_nodes = 0;   /* lang/job.h: 0 = the C twin */
	int nd = job->train.n_dense, ns = job->train.n_slots;
	uint32_t n = (uint32_t)job->minibatch;
	st_model_t *m[2];
	st_model_ws_t *ws[2];
	if (st_model_create(&m[0], &job->model, nd, ns, job->seed) < 0 ||
	    st_model_create(&m[1], &twin, nd, ns, job->seed) < 0 ||
	    st_model_ws_create(&ws[0], m[0], n) < 0 || st_model_ws_create(&ws[1], m[1], n) < 0)
		return 1;

	/* The minibatch: dense values 0..9, one key per slot, own rows. */
	st_batch_t *b;
	uint32_t nk = n * (uint32_t)ns;
	if (st_batch_create(&b, n, (uint32_t)nd, (uint32_t)ns, nk) < 0)
		return 1;
	b->key_idx = malloc(sizeof(uint32_t) * nk);
	int rw = st_model_max_row_dim(m[0]);
	float *rowbuf = malloc(sizeof(float) * nk * (size_t)rw);
	float **rows = malloc(sizeof(float *) * nk);
	float *gu = calloc((size_t)nk * (size_t)rw, sizeof(float));
	size_t np = st_model_nparams(m[0]);
	float *gp = calloc(np, sizeof(float));
	float *prob = malloc(sizeof(float) * n);
	if (!b->key_idx || !rowbuf || !rows || !gu || !gp || !prob)
		return 1;
	for (uint32_t i = 0; i < n; i++) {
		b->labels[i] = (float)(i % 4 == 0);
		for (int d = 0; d < nd; d++)
			b->dense[i * (uint32_t)nd + (uint32_t)d] = (float)((i * 7 + (uint32_t)d) % 10);
		b->row_off[i] = i * (uint32_t)ns;
		for (int s = 0; s < ns; s++) {
			uint32_t k = i * (uint32_t)ns + (uint32_t)s;
			b->keys[k] = k;
			b->key_slot[k] = (uint16_t)s;
			b->key_val[k] = 1.0f;
			b->key_idx[k] = k;
		}
	}
	b->row_off[n] = nk;
	b->n = n;
	b->n_uniq = nk;
	for (size_t j = 0; j < (size_t)nk * (size_t)rw; j++)
		rowbuf[j] = 0.01f * (float)((j * 13) % 21) - 0.1f;
	for (uint32_t k = 0; k < nk; k++)
		rows[k] = rowbuf + (size_t)k * (size_t)rw;

	double loss[2];
	for (int p = 0; p < 2; p++)   /* warm-up, and the same loss */
		for (int w = 0; w < 3; w++)
			loss[p] = st_model_step(m[p], ws[p], b, 0, n, rows, st_model_params(m[p]),
						1.0f / (float)n, prob, gp, gu, rw);
	if (loss[0] != loss[1]) {
		fprintf(stderr, "bench_presets: losses differ (%.9g, %.9g)\n", loss[0], loss[1]);
		return 1;
	}
	double *t[2] = { malloc(sizeof(double) * (size_t)steps),
			 malloc(sizeof(double) * (size_t)steps) };
	for (int s = 0; s < steps; s++)
		for (int q = 0; q < 2; q++) {
			int p = s % 2 ? 1 - q : q;   /* A B, B A, ... */
			double t0 = now_ms();
			st_model_step(m[p], ws[p], b, 0, n, rows, st_model_params(m[p]),
				      1.0f / (float)n, prob, gp, gu, rw);
			t[p][s] = now_ms() - t0;
		}
	double mn[2], med[2];
	for (int p = 0; p < 2; p++) {
		qsort(t[p], (size_t)steps, sizeof(double), cmp_d);
		mn[p] = t[p][0];
		med[p] = t[p][steps / 2];
	}
	double fl = st_model_flops_per_example(m[0]) * n;
	printf("bench_presets: %s, minibatch %u, %d steps each, %.1f MFLOP per step\n",
	       job->model.type, n, steps, fl / 1e6);
	printf("  lua   min %.2f ms  median %.2f ms  (%.1f GFLOP/s at min)\n", mn[0], med[0],
	       fl / mn[0] / 1e6);
	printf("  twin  min %.2f ms  median %.2f ms  (%.1f GFLOP/s at min)\n", mn[1], med[1],
	       fl / mn[1] / 1e6);
	printf("  lua/twin time: min %.3f, median %.3f\n", mn[0] / mn[1], med[0] / med[1]);
	free(t[0]);
	free(t[1]);
	free(rowbuf);
	free(rows);
	free(gu);
	free(gp);
	free(prob);
	st_batch_destroy(b);
	for (int p = 0; p < 2; p++) {
		st_model_ws_destroy(ws[p]);
		st_model_destroy(m[p]);
	}
	st_job_free(job);
	return 0;
}
