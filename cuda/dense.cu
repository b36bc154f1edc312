/*
 * dense.cu — CUDA twins of the dense layers of ops/nn/nn.c (contract:
 * gpu.h): linear layers through cuBLAS, activations, the log1p dense
 * transform, and the small vector kernels the models need.
 *
 * Row-major on column-major cuBLAS: a row-major matrix A [r × c] is the
 * column-major matrix Aᵀ [c × r] with leading dimension c, so every product
 * is computed transposed (shapes in the comments are row-major, M × N with
 * inner K as nn.c writes them):
 *   forward  Y [n × out] = X · Wᵀ      ->  Yᵀ = W · Xᵀ     sgemm(T, N, out, n, in)
 *   dX       dX[n × in]  = dY · W      ->  dXᵀ = Wᵀ · dYᵀ  sgemm(N, N, in, n, out)
 *   dW       dW[out × in] += dYᵀ · X   ->  dWᵀ += Xᵀ · dY  sgemm(N, T, in, out, n)
 * The bias is seeded into Y before the forward sgemm (beta = 1), as nn.c
 * does, and db sums the columns of dY in row order, one thread per column,
 * the CPU's order: db is bit-identical. The sgemm sums in cuBLAS's own
 * blocked order, so Y, dX and dW differ from OpenBLAS in the last bits.
 *
 * Math mode: FP32 (CUBLAS_DEFAULT_MATH) unless the handle was created with
 * allow_tf32; TF32 is for speed runs only.
 */
#include "cuda/gpu_internal.cuh"

#include <cublas_v2.h>
#include <stdlib.h>

struct st_gpu_blas {
	cublasHandle_t h;
	st_gpu_stream_t *s;
};

int st__gpu_blas_fail(int status, const char *call, const char *file, int line)
{
	st_error("gpu: %s failed at %s:%d: %s", call, file, line,
		 cublasGetStatusString((cublasStatus_t)status));
	switch ((cublasStatus_t)status) {
	case CUBLAS_STATUS_ALLOC_FAILED:
		return ST_ENOMEM;
	case CUBLAS_STATUS_INVALID_VALUE:
		return ST_EINVAL;
	case CUBLAS_STATUS_NOT_INITIALIZED:
		return ST_GPU_ENODEV;
	default:
		return ST_EIO;
	}
}

extern "C" void st_gpu_blas_destroy(st_gpu_blas_t *b)
{
	if (!b)
		return;
	if (b->h)
		cublasDestroy(b->h);
	free(b);
}

static int blas_init(st_gpu_blas_t *b, int allow_tf32)
{
	CUBLAS(cublasCreate(&b->h));
	CUBLAS(cublasSetStream(b->h, cu_stream(b->s)));
	CUBLAS(cublasSetMathMode(b->h, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
					      : CUBLAS_DEFAULT_MATH));
	return ST_OK;
}

extern "C" int st_gpu_blas_create(st_gpu_blas_t **out, st_gpu_stream_t *s, int allow_tf32)
{
	*out = NULL;
	st_gpu_blas_t *b = (st_gpu_blas_t *)calloc(1, sizeof *b);
	if (!b)
		return ST_ENOMEM;
	b->s = s;
	int rc = blas_init(b, allow_tf32);
	if (rc < 0) {
		st_gpu_blas_destroy(b);
		return rc;
	}
	*out = b;
	return ST_OK;
}

extern "C" st_gpu_stream_t *st_gpu_blas_stream(st_gpu_blas_t *b)
{
	return b->s;
}

/* ---- elementwise kernels -------------------------------------------------- */

__global__ static void k_bias_rows(int n, int out, const float *b, float *Y)
{
	GRID_LOOP(i, (size_t)n * out)
		Y[i] = b ? b[i % out] : 0.0f;
}

/* db[o] += Σ_i dY[i, o], i ascending (nn.c's order). */
__global__ static void k_colsum(int n, int out, const float *dY, float *db)
{
	GRID_LOOP(o, out) {
		float acc = db[o];
		for (int i = 0; i < n; i++)
			acc += dY[(size_t)i * out + o];
		db[o] = acc;
	}
}

__global__ static void k_relu_fwd(size_t len, const float *x, float *y)
{
	GRID_LOOP(i, len)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ static void k_relu_bwd(size_t len, const float *y, const float *dy, float *dx)
{
	GRID_LOOP(i, len)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ static void k_sigmoid_fwd(size_t len, const float *x, float *y)
{
	GRID_LOOP(i, len) {
		float e = expf(-fabsf(x[i]));
		float r = 1.0f / (1.0f + e);
		y[i] = x[i] >= 0.0f ? r : e * r;
	}
}

__global__ static void k_sigmoid_bwd(size_t len, const float *y, const float *dy, float *dx)
{
	GRID_LOOP(i, len)
		dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

__global__ static void k_log1p(size_t len, const float *x, float *y)
{
	GRID_LOOP(i, len)
		y[i] = x[i] > 0.0f ? log1pf(x[i]) : 0.0f;
}

__global__ static void k_add(size_t len, const float *x, float *y)
{
	GRID_LOOP(i, len)
		y[i] += x[i];
}

__global__ static void k_scale(size_t len, float a, float *x)
{
	GRID_LOOP(i, len)
		x[i] *= a;
}

__global__ static void k_gather_i32(const int32_t *src, const uint32_t *idx, uint32_t n,
				    int32_t *dst)
{
	GRID_LOOP(i, n)
		dst[i] = src[idx[i]];
}

#define LAUNCH_1D(kern, len, s, ...)                                                   \
	do {                                                                           \
		if ((len) == 0)                                                        \
			return ST_OK;                                                  \
		kern<<<blocks_for((len), ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>( \
			__VA_ARGS__);                                                  \
		CU_LAUNCH();                                                           \
		return ST_OK;                                                          \
	} while (0)

extern "C" int st_gpu_relu_forward(size_t len, const float *d_x, float *d_y, st_gpu_stream_t *s)
{
	LAUNCH_1D(k_relu_fwd, len, s, len, d_x, d_y);
}

extern "C" int st_gpu_relu_backward(size_t len, const float *d_y, const float *d_dy,
				    float *d_dx, st_gpu_stream_t *s)
{
	LAUNCH_1D(k_relu_bwd, len, s, len, d_y, d_dy, d_dx);
}

extern "C" int st_gpu_sigmoid_forward(size_t len, const float *d_x, float *d_y,
				      st_gpu_stream_t *s)
{
	LAUNCH_1D(k_sigmoid_fwd, len, s, len, d_x, d_y);
}

extern "C" int st_gpu_sigmoid_backward(size_t len, const float *d_y, const float *d_dy,
				       float *d_dx, st_gpu_stream_t *s)
{
	LAUNCH_1D(k_sigmoid_bwd, len, s, len, d_y, d_dy, d_dx);
}

extern "C" int st_gpu_log1p_forward(size_t len, const float *d_x, float *d_y, st_gpu_stream_t *s)
{
	LAUNCH_1D(k_log1p, len, s, len, d_x, d_y);
}

extern "C" int st_gpu_add(size_t len, const float *d_x, float *d_y, st_gpu_stream_t *s)
{
	LAUNCH_1D(k_add, len, s, len, d_x, d_y);
}

extern "C" int st_gpu_scale(size_t len, float a, float *d_x, st_gpu_stream_t *s)
{
	LAUNCH_1D(k_scale, len, s, len, a, d_x);
}

extern "C" int st_gpu_gather_i32(const int32_t *d_src, const uint32_t *d_idx, uint32_t n,
				 int32_t *d_dst, st_gpu_stream_t *s)
{
	LAUNCH_1D(k_gather_i32, n, s, d_src, d_idx, n, d_dst);
}

/* ---- linear ----------------------------------------------------------------- */

extern "C" int st_gpu_linear_forward(st_gpu_blas_t *b, int n, int in, int out, const float *d_X,
				     const float *d_W, const float *d_b, float *d_Y)
{
	if (n <= 0 || out <= 0)
		return ST_OK;
	const size_t len = (size_t)n * (size_t)out;
	if (d_b || in <= 0) {
		k_bias_rows<<<blocks_for(len, ST_GPU_THREADS), ST_GPU_THREADS, 0,
			      cu_stream(b->s)>>>(n, out, d_b, d_Y);
		CU_LAUNCH();
	}
	if (in <= 0)
		return ST_OK;
	const float one = 1.0f, beta = d_b ? 1.0f : 0.0f;
	CUBLAS(cublasSgemm(b->h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, d_W, in, d_X, in,
			   &beta, d_Y, out));
	return ST_OK;
}

extern "C" int st_gpu_linear_backward(st_gpu_blas_t *b, int n, int in, int out, const float *d_X,
				      const float *d_W, const float *d_dY, float *d_dX, float *d_dW,
				      float *d_db)
{
	if (n <= 0 || out <= 0)
		return ST_OK;
	const float one = 1.0f, zero = 0.0f;
	if (in > 0) {
		if (d_dX)
			CUBLAS(cublasSgemm(b->h, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, d_W, in,
					   d_dY, out, &zero, d_dX, in));
		if (d_dW)
			CUBLAS(cublasSgemm(b->h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, d_X, in,
					   d_dY, out, &one, d_dW, in));
	}
	if (d_db) {
		k_colsum<<<blocks_for((size_t)out, ST_GPU_THREADS), ST_GPU_THREADS, 0,
			   cu_stream(b->s)>>>(n, out, d_dY, d_db);
		CU_LAUNCH();
	}
	return ST_OK;
}
