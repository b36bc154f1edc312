/*
 * smallgemm.c — small linear maps through libxsmm (smallgemm.h).
 */
#include "ops/nn/smallgemm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "st_config.h"

enum {
	ROWS = 64,         /* rows per kernel call; the rest in one tail call */
};

/* The rules of smallgemm.h: libxsmm wins while the inner dimension (the
 * sum's length) is short. */
static int fwd_small(int in, int out)
{
	return in <= 64 || (in <= 128 && (long)in * out <= 8192);
}

static int bwd_small(int in, int out)
{
	return out <= 64 || (out <= 128 && (long)in * out <= 8192);
}

static atomic_int enabled = -1;   /* -1: not read from the environment yet */

static int on(void)
{
	int e = atomic_load_explicit(&enabled, memory_order_relaxed);
	if (e < 0) {
		const char *v = getenv("STRATA_SMALL_GEMM");
		int want = !(v && !strcmp(v, "0"));
		int expect = -1;
		atomic_compare_exchange_strong(&enabled, &expect, want);
		e = atomic_load(&enabled);
	}
	return e;
}

int st_smallgemm_enable(int want)
{
	int was = on();
	atomic_store(&enabled, want ? 1 : 0);
	return was;
}

#if ST_HAVE_XSMM
#include <libxsmm.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t wt_key;   /* each thread's transposed-weight buffer */
static int wt_key_ok;

typedef struct wtbuf {
	size_t cap;
	float w[];
} wtbuf_t;

static void init(void)
{
	libxsmm_init();
	wt_key_ok = pthread_key_create(&wt_key, free) == 0;
}

/* This thread's buffer of at least len floats (freed when the thread
 * exits), or NULL. */
static float *wt_buf(size_t len)
{
	if (!wt_key_ok)
		return NULL;
	wtbuf_t *b = pthread_getspecific(wt_key);
	if (b && b->cap >= len)
		return b->w;
	wtbuf_t *nb = realloc(b, sizeof *nb + sizeof(float) * len);
	if (!nb)
		return NULL;   /* b is still this thread's */
	nb->cap = len;
	if (pthread_setspecific(wt_key, nb) != 0) {
		free(nb);
		return NULL;
	}
	return nb->w;
}

/* C (m × cols, ldc) = A (m × k, lda) · B (k × cols, ldb), column-major, in
 * blocks of ROWS columns: the kernels for ROWS and for the tail. 0 when
 * libxsmm gave no kernel (nothing was written). */
static int run(int m, int k, int cols, const float *A, int lda, const float *B, int ldb,
	       float beta, float *C, int ldc)
{
	const float alpha = 1.0f;
	const libxsmm_blasint M = m, K = k, LDA = lda, LDB = ldb, LDC = ldc;
	const int flags = beta == 0.0f ? LIBXSMM_GEMM_FLAG_BETA_0 : 0;
	const int full = cols / ROWS, tail = cols % ROWS;
	libxsmm_smmfunction fb = NULL, ft = NULL;
	if (full) {
		fb = libxsmm_smmdispatch(M, ROWS, K, &LDA, &LDB, &LDC, &alpha, &beta, &flags,
					 NULL);
		if (!fb)
			return 0;
	}
	if (tail) {
		ft = libxsmm_smmdispatch(M, tail, K, &LDA, &LDB, &LDC, &alpha, &beta, &flags,
					 NULL);
		if (!ft)
			return 0;
	}
	for (int j = 0; j < full; j++)
		fb(A, B + (size_t)j * ROWS * ldb, C + (size_t)j * ROWS * ldc);
	if (tail)
		ft(A, B + (size_t)full * ROWS * ldb, C + (size_t)full * ROWS * ldc);
	/* libxsmm 1.17's AVX2 kernels return with the upper halves of the ymm
	 * registers dirty, and every SSE instruction after them (the non-VEX
	 * loops of nn.c, mmoe.c) then paid for it: the MMoE step got 12%
	 * slower, its softmax 5x, until this vzeroupper. */
#if defined(__x86_64__)
	__asm__ volatile("vzeroupper" ::: "memory");
#endif
	return 1;
}

int st_smallgemm_forward(int n, int in, int out, const float *X, int ldx, const float *W,
			 float beta, float *Y, int ldy)
{
	if (n <= 0 || in <= 0 || out <= 0 || !fwd_small(in, out) || !on())
		return 0;
	pthread_once(&once, init);
	/* Wᵀ [in × out] row-major is the column-major [out × in] A. */
	float *wt = wt_buf((size_t)in * out);
	if (!wt)
		return 0;
	for (int o = 0; o < out; o++)
		for (int i = 0; i < in; i++)
			wt[(size_t)i * out + o] = W[(size_t)o * in + i];
	return run(out, in, n, wt, out, X, ldx, beta, Y, ldy);
}

int st_smallgemm_backward_dx(int n, int in, int out, const float *dY, int lddy,
			     const float *W, float *dX, int lddx)
{
	if (n <= 0 || in <= 0 || out <= 0 || !bwd_small(in, out) || !on())
		return 0;
	pthread_once(&once, init);
	/* W [out × in] row-major is the column-major [in × out] A. */
	return run(in, out, n, W, in, dY, lddy, 0.0f, dX, lddx);
}

int st_smallgemm_built(void)
{
	return 1;
}

#else

int st_smallgemm_forward(int n, int in, int out, const float *X, int ldx, const float *W,
			 float beta, float *Y, int ldy)
{
	(void)n, (void)in, (void)out, (void)X, (void)ldx, (void)W, (void)beta, (void)Y, (void)ldy;
	return 0;
}

int st_smallgemm_backward_dx(int n, int in, int out, const float *dY, int lddy,
			     const float *W, float *dX, int lddx)
{
	(void)n, (void)in, (void)out, (void)dY, (void)lddy, (void)W, (void)dX, (void)lddx;
	return 0;
}

int st_smallgemm_built(void)
{
	return 0;
}

#endif
