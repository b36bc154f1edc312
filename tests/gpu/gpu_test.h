/* gpu_test.h — what the GPU parity tests share: the skip when there is no
 * device (exit 77, "no CUDA device: skipped"), seeded random inputs, device
 * copies that fail the test on error, and the atol + rtol·|ref| comparison
 * of STYLE.md §9. Header-only: each test is one program. */
#ifndef ST_GPU_TEST_H
#define ST_GPU_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/gpu.h"
#include "runtime/err.h"

/* Call first in main(): returns 77 to pass on when there is no usable GPU. */
static inline int gpu_test_skip(void)
{
	if (st_gpu_device_count() < 1) {
		printf("no CUDA device: skipped\n");
		return 77;
	}
	assert_int_equal(st_gpu_use(0), ST_OK);
	return 0;
}

static uint64_t gt_rs = 12345;

static inline uint64_t gt_rnd(void)
{
	uint64_t z = (gt_rs += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float gt_sym(void)
{
	return (float)(2.0 * ((double)(gt_rnd() >> 11) * 0x1.0p-53) - 1.0);
}

static inline float *gt_rand(size_t n)
{
	float *p = malloc((n ? n : 1) * sizeof *p);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = gt_sym();
	return p;
}

/* A device copy of bytes of host memory (NULL -> zeroed device memory). */
static inline void *gt_dev(const void *h, size_t bytes)
{
	void *d = NULL;
	assert_int_equal(st_gpu_alloc(&d, bytes ? bytes : 8), ST_OK);
	if (h)
		assert_int_equal(st_gpu_upload(d, h, bytes, NULL), ST_OK);
	else
		assert_int_equal(st_gpu_zero(d, bytes ? bytes : 8, NULL), ST_OK);
	assert_int_equal(st_gpu_stream_sync(NULL), ST_OK);
	return d;
}

/* A malloc'd host copy of bytes of device memory (waits for the stream). */
static inline void *gt_host(const void *d, size_t bytes)
{
	void *h = malloc(bytes ? bytes : 8);
	assert_non_null(h);
	assert_int_equal(st_gpu_stream_sync(NULL), ST_OK);
	assert_int_equal(st_gpu_download(h, d, bytes, NULL), ST_OK);
	assert_int_equal(st_gpu_stream_sync(NULL), ST_OK);
	return h;
}

/* Fails unless |got - want| <= atol + rtol * |want| everywhere; prints the
 * first few differences. */
static inline void gt_close(const char *what, const float *got, const float *want, size_t n,
			    double atol, double rtol)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		double err = fabs((double)got[i] - (double)want[i]);
		if (!(err <= atol + rtol * fabs((double)want[i]))) {
			if (bad < 5)
				fprintf(stderr, "%s[%zu]: gpu %.9g cpu %.9g\n", what, i,
					(double)got[i], (double)want[i]);
			bad++;
		}
	}
	if (bad)
		fprintf(stderr, "%s: %zu of %zu values differ\n", what, bad, n);
	assert_int_equal(bad, 0);
}

#endif
