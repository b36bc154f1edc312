/*
 * simd.h — which vector instruction set the element-wise loops may use.
 *
 * The default build does not assume AVX2 (-Dnative_arch is off), so the hot
 * element-wise loops (ops/optim/optim_avx2.c, ops/nn/nn_avx2.c) are
 * compiled for AVX2 by target attribute and chosen at run time when the CPU
 * has it. Every such loop has a plain C reference beside it that gives the
 * same bits (no FMA: mul and add stay separate, in the reference's order),
 * so the choice changes speed, never results.
 *
 * Library-grade: no runtime-wide header. Thread-safe: the CPU check is
 * computed once (a racy first use is benign, every thread computes the same
 * value) and the override is an atomic int.
 */
#ifndef ST_SIMD_H
#define ST_SIMD_H

/* 1 when the AVX2 loops may run: the CPU has AVX2 and neither
 * st_simd_set_ref(1) nor the environment (ST_SIMD=ref, read once) asked
 * for the references. Cheap: one relaxed atomic load after the first call. */
int st_simd_avx2(void);

/* 1 when this CPU has AVX2 at all (whatever the override says). */
int st_simd_cpu_avx2(void);

/* 1 when AVX-512 (F) loops may run: as st_simd_avx2, for the few loops
 * where 64-byte vectors pay (runtime/net/coll.c's adds). */
int st_simd_avx512(void);
int st_simd_cpu_avx512(void);

/* force_ref != 0: every dispatching loop runs its reference until called
 * again with 0. For benchmarks that time old and new in one process and for
 * tests; the environment variable ST_SIMD=ref sets it at the first call. */
void st_simd_set_ref(int force_ref);

/*
 * OpenBLAS picks its sgemm kernels once, when it loads, from
 * OPENBLAS_CORETYPE or its own CPU detection; Debian's 0.3.21 sends some
 * AVX-512 CPUs (Sapphire/Emerald Rapids) to its SSE3 "Prescott" kernels, a
 * third of the speed, and some environments set Haswell. On an AVX-512 CPU
 * whose core type is unset or names one without AVX-512, this sets SkylakeX
 * and re-executes argv once (/proc/self/exe), before any work; otherwise it
 * returns. STRATA_KEEP_OPENBLAS_CORETYPE=1 keeps the environment. For
 * programs that multiply matrices: strata run/predict/eval and the dense
 * benchmarks, so they measure the kernels users get.
 */
void st_simd_openblas_coretype(char **argv);

#endif
