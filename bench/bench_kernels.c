/*
 * bench_kernels.c — the non-GEMM kernels of a training step, reference
 * against fast path, interleaved in one process (docs/benchmarks.md
 * "Cutting what is not the GEMM").
 *
 *   bench_kernels [ROUNDS]      (default 15)
 *
 * Shapes are the standard model's at one worker × 1024 examples: 26 slots
 * × 16, MLP 429 → 400 → 400 → 400 → 1, AdaGrad on the touched rows, Adam
 * on the dense tensors. Per kernel and round, the reference
 * (runtime/simd.h's st_simd_set_ref(1): the plain loops the step ran
 * before) and the fast path are each timed once, in alternating order, so
 * load from other processes on the shared machine hits both alike; the
 * median of ROUNDS per side and the ratio are printed. Both sides work in
 * the same buffers, reset to the same input before each run (separate
 * buffers per side measured their page and cache luck — huge pages or not
 * — as much as the code); after each run its output is copied aside,
 * untimed, and the two copies must be the same bits.
 *
 * Kernels:
 *   adam_dense    st_optim_update, Adam over the MLP's 493,201 parameters
 *   adagrad_rows  st_optim_update per row: 26,624 rows of 16 (+ their
 *                 accumulators) scattered over a 262,144-row table
 *   pool_fwd      st_pool_forward, 1024 examples × 26 keys, sum pooling
 *   pool_bwd      st_pool_backward into per-unique-key gradients
 *   relu_bias_bwd st_relu_bias_backward on 1024 × 400 (ref: the two passes)
 *   fwd_bias      the forward bias: sgemm with the bias pre-broadcast in
 *                 beta + ReLU pass (what st_linear_forward does) against
 *                 sgemm beta 0 + one fused bias+ReLU pass (1024×400×400);
 *                 prints whether the two give the same bits
 * Threads: one; OpenBLAS threads as the environment says.
 */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/nn/nn.h"
#include "ops/optim/optim.h"
#include "runtime/simd.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rs = 5;

static uint64_t next(void)
{
	uint64_t z = (rs += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static float sym(void)
{
	return (float)((double)(next() >> 11) * 0x1.0p-52 - 1.0);
}

static float *randv(size_t n)
{
	float *x = malloc(n * sizeof *x);
	if (!x) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		x[i] = sym();
	return x;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_d);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { N = 1024, SLOTS = 26, DIM = 16, WIDTH = SLOTS * DIM, TABLE = 262144,
       UNIQ = N * SLOTS, H = 400, IN0 = WIDTH + 13 };

/* One kernel: prepare() resets the shared buffers to the input, run(side)
 * does the work (side 0: reference, 1: fast path), out() is what to
 * compare, out_bytes long. */
typedef struct kernel {
	const char *name;
	void (*prepare)(void);
	void (*run)(int side);
	size_t out_bytes;
	const void *(*out)(void);
} kernel_t;

/* ---- adam over the dense parameters ---- */
#define DENSE ((size_t)IN0 * H + H + 2 * ((size_t)H * H + H) + H + 1)
static float *aw0, *as0, *ag, *aw, *as;
static st_optim_t adam_o, ada_o;

static void adam_prep(void)
{
	memcpy(aw, aw0, DENSE * sizeof(float));
	memcpy(as, as0, 2 * DENSE * sizeof(float));
}
static void adam_run(int s)
{
	(s ? st_optim_update : st_optim_update_ref)(&adam_o, aw, as, ag, DENSE, 7);
}
static const void *adam_out(void) { return aw; }

/* ---- adagrad on touched rows of a big table ---- */
static float *tab0, *tab, *rg;
static uint32_t *ridx;

static void ada_prep(void)
{
	/* Copying the whole table also leaves both sides the same cache state. */
	memcpy(tab, tab0, (size_t)TABLE * (DIM + 1) * sizeof(float));
}
static void ada_run(int s)
{
	for (size_t u = 0; u < UNIQ; u++) {
		float *row = tab + (size_t)ridx[u] * (DIM + 1);
		(s ? st_optim_update : st_optim_update_ref)(&ada_o, row, row + DIM,
							   rg + u * DIM, DIM, 1);
	}
}
static const void *ada_out(void) { return tab; }

/* ---- pooling ---- */
static int pdim[SLOTS], poff[SLOTS];
static st_pool_layout_t PL;
static uint32_t prow_off[N + 1], pkidx[N * SLOTS];
static uint16_t pslot[N * SLOTS];
static float pval[N * SLOTS], *prow_store, *prows_f[UNIQ];
static float *pout, *pdout, *pgu;

static void pf_prep(void) { }
static void pf_run(int s)
{
	(s ? st_pool_forward : st_pool_forward_ref)(&PL, 0, N, prow_off, pslot, pval, pkidx,
						   prows_f, pout);
}
static const void *pf_out(void) { return pout; }

static void pb_prep(void) { memset(pgu, 0, (size_t)UNIQ * (DIM + 1) * sizeof(float)); }
static void pb_run(int s)
{
	(s ? st_pool_backward : st_pool_backward_ref)(&PL, 0, N, prow_off, pslot, pval, pkidx,
						     pdout, pgu, DIM + 1);
}
static const void *pb_out(void) { return pgu; }

/* ---- relu + bias backward ---- */
static float *rY, *rdY0, *rdY, *rdb;

static void rb_prep(void)
{
	memcpy(rdY, rdY0, (size_t)N * H * sizeof(float));
	memset(rdb, 0, H * sizeof(float));
}
static void rb_run(int s)
{
	(s ? st_relu_bias_backward : st_relu_bias_backward_ref)(N, H, rY, rdY, rdb);
}
static const void *rb_out(void) { return rdb; }

/* ---- forward bias ---- */
static float *fX, *fW, *fb, *fY;

static void fb_prep(void) { }
static void fb_run(int s)
{
	if (!s) {
		st_linear_forward(N, H, H, fX, fW, fb, fY);
		st_relu_forward((size_t)N * H, fY, fY);
		return;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, H, H, 1.0f, fX, H, fW, H,
		    0.0f, fY, H);
	for (int i = 0; i < N; i++) {
		float *y = fY + (size_t)i * H;
		for (int o = 0; o < H; o++) {
			float v = y[o] + fb[o];
			y[o] = v > 0.0f ? v : 0.0f;
		}
	}
}
static const void *fb_out(void) { return fY; }

static void setup(void)
{
	st_optim_cfg_t ac = { .name = "adam", .lr = 1e-3, .eps = 1e-8, .beta1 = 0.9,
			      .beta2 = 0.999 };
	st_optim_cfg_t gc = { .name = "adagrad", .lr = 0.05, .eps = 1e-10,
			      .init_accum = 0.1 };
	st_optim_init(&adam_o, &ac);
	st_optim_init(&ada_o, &gc);
	aw0 = randv(DENSE);
	as0 = randv(2 * DENSE);
	for (size_t i = DENSE; i < 2 * DENSE; i++)
		as0[i] = as0[i] * as0[i];
	ag = randv(DENSE);
	aw = randv(DENSE);
	as = randv(2 * DENSE);
	tab0 = randv((size_t)TABLE * (DIM + 1));
	for (size_t r = 0; r < TABLE; r++)
		tab0[r * (DIM + 1) + DIM] = 0.1f;
	tab = randv((size_t)TABLE * (DIM + 1));
	rg = randv((size_t)UNIQ * DIM);
	/* Distinct rows in random order (a step's unique keys). */
	uint32_t *perm = malloc(TABLE * sizeof *perm);
	for (uint32_t i = 0; i < TABLE; i++)
		perm[i] = i;
	for (uint32_t i = TABLE - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(next() % (i + 1)), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	ridx = perm;

	for (int s = 0; s < SLOTS; s++) {
		pdim[s] = DIM;
		poff[s] = s * DIM;
	}
	PL = (st_pool_layout_t){ .n_slots = SLOTS, .dim = pdim, .off = poff, .width = WIDTH };
	prow_store = randv((size_t)UNIQ * (DIM + 1));
	for (uint32_t u = 0; u < UNIQ; u++)
		prows_f[u] = prow_store + (size_t)u * (DIM + 1);
	for (uint32_t i = 0; i <= N; i++)
		prow_off[i] = i * SLOTS;
	for (uint32_t k = 0; k < N * SLOTS; k++) {
		pslot[k] = (uint16_t)(k % SLOTS);
		pval[k] = 1.0f;
		pkidx[k] = (uint32_t)(next() % UNIQ);
	}
	pout = randv((size_t)N * WIDTH);
	pgu = randv((size_t)UNIQ * (DIM + 1));
	rdY = randv((size_t)N * H);
	rdb = randv(H);
	fY = randv((size_t)N * H);
	pdout = randv((size_t)N * WIDTH);
	rY = randv((size_t)N * H);
	rdY0 = randv((size_t)N * H);
	fX = randv((size_t)N * H);
	fW = randv((size_t)H * H);
	fb = randv(H);
}

int main(int argc, char **argv)
{
	st_simd_openblas_coretype(argv);   /* the kernels `strata run` gets */
	int rounds = argc > 1 ? atoi(argv[1]) : 15;
	if (rounds < 1)
		rounds = 1;
	setup();
	const kernel_t ks[] = {
		{ "adam_dense", adam_prep, adam_run, DENSE * sizeof(float), adam_out },
		{ "adagrad_rows", ada_prep, ada_run, (size_t)TABLE * (DIM + 1) * sizeof(float),
		  ada_out },
		{ "pool_fwd", pf_prep, pf_run, (size_t)N * WIDTH * sizeof(float), pf_out },
		{ "pool_bwd", pb_prep, pb_run, (size_t)UNIQ * (DIM + 1) * sizeof(float), pb_out },
		{ "relu_bias_bwd", rb_prep, rb_run, H * sizeof(float), rb_out },
		{ "fwd_bias", fb_prep, fb_run, (size_t)N * H * sizeof(float), fb_out },
	};
	const int nk = (int)(sizeof ks / sizeof ks[0]);
	printf("cpu avx2: %d; rounds %d; times are medians in microseconds\n",
	       st_simd_cpu_avx2(), rounds);
	printf("%-14s %10s %10s %7s  %s\n", "kernel", "ref_us", "fast_us", "ref/fast",
	       "same bits");
	double *t = malloc(sizeof(double) * 2 * (size_t)rounds);
	size_t maxout = 0;
	for (int k = 0; k < nk; k++)
		if (ks[k].out_bytes > maxout)
			maxout = ks[k].out_bytes;
	char *res[2] = { malloc(maxout), malloc(maxout) };
	for (int k = 0; k < nk; k++) {
		const kernel_t *K = &ks[k];
		int same = 1;
		for (int r = 0; r < rounds; r++) {
			for (int q = 0; q < 2; q++) {
				/* AB, then BA: alternate which side goes first. */
				int s = (q + r) & 1;
				K->prepare();
				st_simd_set_ref(s == 0);
				double t0 = now_s();
				K->run(s);
				t[s * rounds + r] = now_s() - t0;
				memcpy(res[s], K->out(), K->out_bytes);
			}
			same &= memcmp(res[0], res[1], K->out_bytes) == 0;
		}
		st_simd_set_ref(0);
		double a = median(t, rounds) * 1e6, b = median(t + rounds, rounds) * 1e6;
		printf("%-14s %10.1f %10.1f %7.2fx  %s\n", K->name, a, b, a / b,
		       same ? "yes" : "NO");
	}
	free(t);
	free(res[0]);
	free(res[1]);
	return 0;
}
