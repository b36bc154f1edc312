/*
 * bench_step.c — the model step (forward + backward, no optimizer) of two
 * jobs' models in one process, alternated (A B B A ...), as GFLOP/s: how
 * fast a layer graph runs per FLOP against another (issue 19: the new
 * models at least as fast per FLOP as dnn). docs/benchmarks.md, "MMoE".
 *
 *   bench_step JOB_A JOB_B [STEPS]        (default 40 steps of each)
 *
 * Loads both jobs (data paths are not checked; only the format's shape is
 * used), builds each model from its config and seed, and times
 * st_model_step on one synthetic minibatch of each job's minibatch size:
 * one key per slot, every key its own row (bench_presets.c's batch). Prints
 * min and median milliseconds per step, FLOPs per example
 * (st_model_flops_per_example) and GFLOP/s at the minimum, the least
 * disturbed run on a shared machine. Single-threaded (OPENBLAS_NUM_THREADS
 * as set by the caller).
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

/* One job's model, workspace and synthetic minibatch. */
typedef struct side {
	st_job_t *job;
	st_model_t *m;
	st_model_ws_t *ws;
	st_batch_t *b;
	float *rowbuf, **rows, *gu, *gp, *prob;
	int rw;
	uint32_t n;
} side_t;

static int side_open(side_t *s, const char *path)
{
	st_load_opts_t lo = { .check_paths = 0 };
	st_diag_t diag;
	memset(s, 0, sizeof *s);
	if (st_job_load(path, &lo, &s->job, &diag) < 0) {
		for (int i = 0; i < diag.n; i++)
			fprintf(stderr, "%s\n", diag.msg[i]);
		st_diag_free(&diag);
		return -1;
	}
	int nd = s->job->train.n_dense, ns = s->job->train.n_slots;
	uint32_t n = s->n = (uint32_t)s->job->minibatch;
	if (st_model_create(&s->m, &s->job->model, nd, ns, s->job->seed) < 0 ||
	    st_model_ws_create(&s->ws, s->m, n) < 0)
		return -1;
	uint32_t nk = n * (uint32_t)ns;
	if (st_batch_create(&s->b, n, (uint32_t)nd, (uint32_t)ns, nk) < 0)
		return -1;
	st_batch_t *b = s->b;
	s->rw = st_model_max_row_dim(s->m);
	b->key_idx = malloc(sizeof(uint32_t) * nk);
	s->rowbuf = malloc(sizeof(float) * nk * (size_t)s->rw);
	s->rows = malloc(sizeof(float *) * nk);
	s->gu = calloc((size_t)nk * (size_t)s->rw, sizeof(float));
	s->gp = calloc(st_model_nparams(s->m), sizeof(float));
	s->prob = malloc(sizeof(float) * n);
	if (!b->key_idx || !s->rowbuf || !s->rows || !s->gu || !s->gp || !s->prob)
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		b->labels[i] = (float)(i % 4 == 0);
		for (int d = 0; d < nd; d++)
			b->dense[i * (uint32_t)nd + (uint32_t)d] = (float)((i * 7 + (uint32_t)d) % 10);
		b->row_off[i] = i * (uint32_t)ns;
		for (int k = 0; k < ns; k++) {
			uint32_t j = i * (uint32_t)ns + (uint32_t)k;
			b->keys[j] = j;
			b->key_slot[j] = (uint16_t)k;
			b->key_val[j] = 1.0f;
			b->key_idx[j] = j;
		}
	}
	b->row_off[n] = nk;
	b->n = n;
	b->n_uniq = nk;
	for (size_t j = 0; j < (size_t)nk * (size_t)s->rw; j++)
		s->rowbuf[j] = 0.01f * (float)((j * 13) % 21) - 0.1f;
	for (uint32_t k = 0; k < nk; k++)
		s->rows[k] = s->rowbuf + (size_t)k * (size_t)s->rw;
	return 0;
}

static void side_step(side_t *s)
{
	st_model_step(s->m, s->ws, s->b, 0, s->n, s->rows, st_model_params(s->m),
		      1.0f / (float)s->n, s->prob, s->gp, s->gu, s->rw);
}

static void side_close(side_t *s)
{
	free(s->rowbuf);
	free(s->rows);
	free(s->gu);
	free(s->gp);
	free(s->prob);
	st_batch_destroy(s->b);
	st_model_ws_destroy(s->ws);
	st_model_destroy(s->m);
	st_job_free(s->job);
}

int main(int argc, char **argv)
{
	/* the kernels `strata run` gets (runtime/simd.h), not the loader's guess */
	st_simd_openblas_coretype(argv);
	printf("OPENBLAS_CORETYPE=%s\n", getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
	if (argc < 3) {
		fprintf(stderr, "usage: bench_step JOB_A JOB_B [STEPS]\n");
		return 2;
	}
	int steps = argc > 3 ? atoi(argv[3]) : 40;
	if (steps < 1)
		steps = 1;
	side_t s[2];
	for (int p = 0; p < 2; p++)
		if (side_open(&s[p], argv[1 + p]) < 0) {
			fprintf(stderr, "bench_step: cannot set up %s\n", argv[1 + p]);
			return 1;
		}
	for (int p = 0; p < 2; p++)   /* warm-up */
		for (int w = 0; w < 3; w++)
			side_step(&s[p]);
	double *t[2] = { malloc(sizeof(double) * (size_t)steps),
			 malloc(sizeof(double) * (size_t)steps) };
	if (!t[0] || !t[1])
		return 1;
	for (int k = 0; k < steps; k++)
		for (int q = 0; q < 2; q++) {
			int p = k % 2 ? 1 - q : q;   /* A B, B A, ... */
			double t0 = now_ms();
			side_step(&s[p]);
			t[p][k] = now_ms() - t0;
		}
	double gf[2];
	for (int p = 0; p < 2; p++) {
		qsort(t[p], (size_t)steps, sizeof(double), cmp_d);
		double fl = st_model_flops_per_example(s[p].m) * s[p].n;
		gf[p] = fl / t[p][0] / 1e6;
		printf("%c %-24s minibatch %u, %zu dense params, %.0f FLOP/example: min %.2f ms "
		       "median %.2f ms, %.1f GFLOP/s at min\n", 'A' + p, s[p].job->name, s[p].n,
		       st_model_nparams(s[p].m), st_model_flops_per_example(s[p].m), t[p][0],
		       t[p][steps / 2], gf[p]);
	}
	printf("A/B GFLOP/s at min: %.3f\n", gf[0] / gf[1]);
	free(t[0]);
	free(t[1]);
	for (int p = 0; p < 2; p++)
		side_close(&s[p]);
	return 0;
}
