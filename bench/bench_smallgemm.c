/*
 * bench_smallgemm.c — the linear maps' products with and without the
 * small-GEMM path (ops/nn/smallgemm.h: libxsmm's JIT kernels), per shape,
 * through st_linear_forward_ld and st_linear_backward_ld's input gradient
 * (docs/benchmarks.md, "Small GEMMs"). Single-threaded: run with
 * OPENBLAS_NUM_THREADS=1, as a train worker runs.
 *
 *   bench_smallgemm [ROWS]        (default 512 rows, a minibatch)
 *
 * For each (in → out) shape: GFLOP/s (2 · rows · in · out per call) of the
 * forward and of dX with the path off (sgemm) and on, best of 5 rounds of
 * enough calls for ~20 ms, alternated off/on; "path" says whether the rule
 * sends the shape to libxsmm (fwd/dX), so rows where both columns ran
 * sgemm show the noise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/simd.h"
#include "ops/nn/nn.h"
#include "ops/nn/smallgemm.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *filled(size_t n)
{
	float *p = malloc(sizeof(float) * n);
	if (!p) {
		fprintf(stderr, "bench_smallgemm: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((i * 37) % 17) * 0.05f - 0.4f;
	return p;
}

/* Best seconds per call of fwd (what 0) or dX (what 1). */
static double best(int what, int n, int in, int out, const float *X, const float *W,
		   const float *dY, float *Y, float *dX, long calls)
{
	double b = 1e9;
	for (int r = 0; r < 5; r++) {
		double t = now_s();
		for (long c = 0; c < calls; c++) {
			if (what == 0)
				st_linear_forward_ld(n, in, out, X, in, W, NULL, Y, out);
			else
				st_linear_backward_ld(n, in, out, X, in, W, dY, out, dX, in, NULL,
						      NULL);
		}
		t = (now_s() - t) / (double)calls;
		b = t < b ? t : b;
	}
	return b;
}

int main(int argc, char **argv)
{
	/* the kernels `strata run` gets (runtime/simd.h), not the loader's guess */
	st_simd_openblas_coretype(argv);
	const int n = argc > 1 ? atoi(argv[1]) : 512;
	static const int shapes[][2] = {   /* in, out */
		{ 64, 32 }, { 32, 16 }, { 16, 1 }, { 32, 64 }, { 36, 80 }, { 80, 40 },
		{ 64, 64 }, { 128, 64 }, { 64, 128 }, { 128, 128 }, { 256, 64 }, { 64, 429 },
		{ 429, 64 }, { 221, 256 }, { 400, 400 },
	};
	if (n < 1) {
		fprintf(stderr, "usage: bench_smallgemm [ROWS >= 1]\n");
		return 2;
	}
	printf("bench_smallgemm: %d rows, libxsmm %s; GFLOP/s, sgemm | small path\n", n,
	       st_smallgemm_built() ? "built in" : "not built (both columns are sgemm)");
	printf("%5s %5s %4s %8s %8s %6s %8s %8s %6s\n", "in", "out", "path", "fwd_sg",
	       "fwd_sm", "x", "dX_sg", "dX_sm", "x");
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		const int in = shapes[s][0], out = shapes[s][1];
		float *X = filled((size_t)n * in), *W = filled((size_t)in * out);
		float *dY = filled((size_t)n * out), *Y = filled((size_t)n * out);
		float *dX = filled((size_t)n * in);
		const double fl = 2.0 * n * in * out;
		long calls = (long)(0.02 * 60e9 / fl) + 1;
		st_smallgemm_enable(1);
		int pf = st_smallgemm_forward(n, in, out, X, in, W, 0.0f, Y, out);
		int pb = st_smallgemm_backward_dx(n, in, out, dY, out, W, dX, in);
		double g[4];
		for (int what = 0; what < 2; what++) {
			st_smallgemm_enable(0);
			g[2 * what] = fl / best(what, n, in, out, X, W, dY, Y, dX, calls) * 1e-9;
			st_smallgemm_enable(1);
			g[2 * what + 1] = fl / best(what, n, in, out, X, W, dY, Y, dX, calls) * 1e-9;
		}
		printf("%5d %5d %c/%c  %8.1f %8.1f %6.2f %8.1f %8.1f %6.2f\n", in, out,
		       pf ? 'x' : '-', pb ? 'x' : '-', g[0], g[1], g[1] / g[0], g[2], g[3],
		       g[3] / g[2]);
		fflush(stdout);
		free(X);
		free(W);
		free(dY);
		free(Y);
		free(dX);
	}
	return 0;
}
