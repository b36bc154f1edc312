/*
 * simd.c — run-time choice between AVX2 loops and their references (simd.h).
 *
 * AVX2 comes from __builtin_cpu_supports, which both gcc and clang know
 * (unlike "f16c", see runtime/store/rowfmt.c); other architectures and
 * compilers answer 0 and run the references.
 */
#include "runtime/simd.h"

#include <stdlib.h>
#include <string.h>

/* -1: not read yet; 0: AVX2 loops allowed; 1: references forced. */
static int force_ref = -1;

int st_simd_cpu_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	static int v = -1;
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		__builtin_cpu_init();
		r = __builtin_cpu_supports("avx2") ? 1 : 0;
		__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	}
	return r;
#else
	return 0;
#endif
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
