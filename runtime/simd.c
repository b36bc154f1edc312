/*
 * simd.c — run-time choice between AVX2 (or AVX-512) loops and their
 * references (simd.h).
 *
 * AVX2 and AVX-512 come from __builtin_cpu_supports, which both gcc and clang know
 * (unlike "f16c", see runtime/store/rowfmt.c); other architectures and
 * compilers answer 0 and run the references.
 */
#include "runtime/simd.h"

#include "runtime/err.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* -1: not read yet; 0: AVX2 loops allowed; 1: references forced. */
static int force_ref = -1;

enum { CPU_AVX2 = 1, CPU_AVX512F = 2 };

/* The CPU's features, read once (a racy first use is benign: every thread
 * computes the same value). */
static int cpu_features(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	static int v = -1;
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		__builtin_cpu_init();
		r = (__builtin_cpu_supports("avx2") ? CPU_AVX2 : 0) |
		    (__builtin_cpu_supports("avx512f") ? CPU_AVX512F : 0);
		__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	}
	return r;
#else
	return 0;
#endif
}

int st_simd_cpu_avx2(void)
{
	return (cpu_features() & CPU_AVX2) != 0;
}

int st_simd_cpu_avx512(void)
{
	return (cpu_features() & CPU_AVX512F) != 0;
}

void st_simd_set_ref(int on)
{
	__atomic_store_n(&force_ref, on ? 1 : 0, __ATOMIC_RELAXED);
}

int st_simd_avx2(void)
{
	int f = __atomic_load_n(&force_ref, __ATOMIC_RELAXED);
	if (f < 0) {
		const char *e = getenv("ST_SIMD");
		f = e && strcmp(e, "ref") == 0;
		__atomic_store_n(&force_ref, f, __ATOMIC_RELAXED);
	}
	return !f && st_simd_cpu_avx2();
}

int st_simd_avx512(void)
{
	return st_simd_avx2() && st_simd_cpu_avx512();
}

/*
 * OpenBLAS reads OPENBLAS_CORETYPE once, when the library loads, and picks
 * its sgemm kernels from it. On an AVX-512 CPU a core type without AVX-512
 * (Haswell and older, which some environments set) halves dense throughput,
 * and OpenBLAS 0.3.21 misdetects some AVX-512 CPUs (DESIGN.md). So when the
 * CPU has AVX-512 and the variable is unset or names a core type without it,
 * strata sets SkylakeX and re-executes itself once, before any work. Set
 * STRATA_KEEP_OPENBLAS_CORETYPE=1 to keep the environment as it is.
 */
void st_simd_openblas_coretype(char **argv)
{
	static const char *const avx512_cores[] = {
		"SkylakeX", "SKYLAKEX", "Cooperlake", "COOPERLAKE",
		"SapphireRapids", "SAPPHIRERAPIDS",
	};
	if (getenv("STRATA_KEEP_OPENBLAS_CORETYPE") || getenv("ST__OPENBLAS_REEXEC"))
		return;
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f"))
		return;
#else
	return;
#endif
	const char *ct = getenv("OPENBLAS_CORETYPE");
	if (ct)
		for (size_t i = 0; i < sizeof avx512_cores / sizeof avx512_cores[0]; i++)
			if (!strcmp(ct, avx512_cores[i]))
				return;
	if (ct)
		st_info("OPENBLAS_CORETYPE=%s has no AVX-512 kernels on this AVX-512 CPU; "
			"using SkylakeX (set STRATA_KEEP_OPENBLAS_CORETYPE=1 to keep it)", ct);
	setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
	setenv("ST__OPENBLAS_REEXEC", "1", 1);
	execv("/proc/self/exe", argv);
	/* exec failed: carry on with whatever OpenBLAS picks */
}
