/*
 * smallgemm.h — the products of small linear maps through libxsmm's JIT
 * kernels, where OpenBLAS's sgemm is slow: narrow layers (an MMoE
 * expert's 64 → 32, a tower's 32 → 16, DIN's attention unit) spend more of
 * OpenBLAS's time packing operands and walking edge tiles than multiplying.
 * Measured on one core of the 2-core AVX2 VM (docs/benchmarks.md, "Small
 * GEMMs"), GFLOP/s OpenBLAS → libxsmm at 512 rows: forward 64 → 32 62 → 98,
 * 32 → 16 44 → 82, 32 → 64 55 → 93; input gradient 32 → 64 56 → 93; but
 * 221 → 256 forward 88 → 59, so large maps stay with OpenBLAS.
 *
 * nn.c's st_linear_forward_ld / st_linear_backward_ld call these first
 * and fall back to cblas_sgemm when they return 0: a map too large for the
 * rule below, a build without libxsmm (-Dxsmm=disabled), a kernel libxsmm
 * could not generate (no executable memory), or st_smallgemm_enable(0).
 * The cblas path is the readable reference twin; tests/unit/test_nn.c pins
 * the two together on many shapes (results agree to rounding: both sum
 * over the inner dimension in order, but fuse multiply-adds differently).
 *
 * Which maps, from bench/bench_smallgemm's measurements (libxsmm wins
 * while the sum it computes is short, and loses to OpenBLAS's blocking on
 * long ones):
 *   forward         Y = X Wᵀ (+ b), a sum over in:   in ≤ 64, or in ≤ 128
 *                                                    and in · out ≤ 8192
 *   input gradient  dX = dY W, a sum over out:       out ≤ 64, or out ≤ 128
 *                                                    and in · out ≤ 8192
 * The weight gradient dW += dYᵀ X stays with OpenBLAS at every size (its
 * reduction over the rows was 0.6–0.9× with libxsmm's transposed-B kernels).
 *
 * Row-major operands map onto libxsmm's column-major C = A B with no
 * copy of X or Y: a row-major [n × in] X with stride ldx is a column-major
 * [in × n] matrix with leading dimension ldx. Forward needs Wᵀ as A, which
 * libxsmm 1.17 cannot transpose itself (no TRANS_A kernels), so the
 * weight is transposed first, into a buffer each thread keeps (freed
 * when it exits); backward reads W as it is. Rows go in blocks of 64 (plus one tail block), so a
 * shape needs at most two kernels whatever the minibatch size.
 *
 * Thread-safe (libxsmm's kernel registry is); allocates only a thread's
 * transposed-weight buffer, when it grows.
 */
#ifndef ST_NN_SMALLGEMM_H
#define ST_NN_SMALLGEMM_H

/* Y[n × out] (row stride ldy) = X[n × in] (ldx) · Wᵀ, W [out × in] packed;
 * beta 0 overwrites Y, beta 1 adds to it (a bias seeded there). Returns 1
 * when done, 0 when the caller must use sgemm instead. */
int st_smallgemm_forward(int n, int in, int out, const float *X, int ldx, const float *W,
			 float beta, float *Y, int ldy);

/* dX[n × in] (lddx) = dY[n × out] (lddy) · W, overwriting dX. Returns 1
 * when done, 0 when the caller must use sgemm instead. */
int st_smallgemm_backward_dx(int n, int in, int out, const float *dY, int lddy,
			     const float *W, float *dX, int lddx);

/* Turns the small-GEMM path on (the default where built) or off for the
 * whole process; returns the previous setting. For tests; in a job or a
 * benchmark, STRATA_SMALL_GEMM=0 in the environment turns it off. */
int st_smallgemm_enable(int on);

/* 1 when strata was built with libxsmm. */
int st_smallgemm_built(void);

#endif
