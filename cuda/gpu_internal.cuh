/*
 * gpu_internal.cuh — what the .cu files of cuda/ share: error checking of
 * every CUDA / cuBLAS / NCCL call, stream conversion, launch geometry.
 *
 * Every call that can fail goes through CU(), CUBLAS() or NCCL(): on failure
 * it logs "gpu: <call> failed at <file>:<line>: <reason>" and returns the
 * strata code from the enclosing function, which must return int (or a
 * wider signed integer). Kernel launches are checked with CU_LAUNCH() right
 * after the <<<>>>.
 */
#ifndef ST_GPU_INTERNAL_CUH
#define ST_GPU_INTERNAL_CUH

/* err.h is C11: C++ spells _Noreturn differently. */
#ifndef _Noreturn
#define _Noreturn __attribute__((noreturn))
#endif

#include <cuda_runtime.h>
#include <stdint.h>

/* strata's headers are C: their functions have C linkage. */
extern "C" {
#include "cuda/gpu.h"
#include "runtime/err.h"
}

/* Logs the failure and maps a cudaError_t to a strata code. */
int st__gpu_cuda_fail(cudaError_t e, const char *call, const char *file, int line);
/* The same for cuBLAS (cublasStatus_t) and NCCL (ncclResult_t) status codes,
 * passed as int so that this header needs neither library's header. */
int st__gpu_blas_fail(int status, const char *call, const char *file, int line);
int st__gpu_nccl_fail(int result, const char *call, const char *file, int line);

#define CU(call)                                                                   \
	do {                                                                       \
		cudaError_t e_ = (call);                                           \
		if (e_ != cudaSuccess)                                             \
			return st__gpu_cuda_fail(e_, #call, __FILE__, __LINE__);   \
	} while (0)

#define CU_LAUNCH() CU(cudaGetLastError())

#define CUBLAS(call)                                                               \
	do {                                                                       \
		int st_ = (int)(call);                                             \
		if (st_ != 0)                                                      \
			return st__gpu_blas_fail(st_, #call, __FILE__, __LINE__);  \
	} while (0)

#define NCCL(call)                                                                 \
	do {                                                                       \
		int r_ = (int)(call);                                              \
		if (r_ != 0)                                                       \
			return st__gpu_nccl_fail(r_, #call, __FILE__, __LINE__);   \
	} while (0)

/* The row-update kernel behind st_gpu_optim_rows and st_gpu_table_apply:
 * the gradient of row u is at g + (g_by_slot ? slot[u] : u) * gstride. */
int st__gpu_optim_rows(const st_optim_t *o, float *vals, uint32_t stride, uint32_t dim,
		       const int32_t *slot, uint32_t n, const float *g, int gstride,
		       int g_by_slot, uint64_t t, cudaStream_t s);

static inline cudaStream_t cu_stream(st_gpu_stream_t *s)
{
	return (cudaStream_t)(void *)s;
}

/* Blocks for a 1-D grid of n threads, at most 2^31-1 blocks (grid-stride
 * loops cover the rest). */
static inline unsigned blocks_for(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;
	if (b == 0)
		b = 1;
	return b > 0x7fffffffu ? 0x7fffffffu : (unsigned)b;
}

#define ST_GPU_THREADS 256

/* Grid-stride loop over i in [0, n). */
#define GRID_LOOP(i, n)                                                            \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n); \
	     i += (size_t)gridDim.x * blockDim.x)

#endif
