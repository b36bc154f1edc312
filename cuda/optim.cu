/*
 * optim.cu — CUDA twins of ops/optim/optim.c (contract: gpu.h): the same
 * update rules in the same float arrangement over the same state layouts
 *   sgd —, adagrad acc[len], rowwise acc, adam m[len] v[len], ftrl z[len] n[len]
 * for embedding rows (state right after the row's weights, the host tier's
 * row layout) and for dense tensors (state[len] then state[len..2 len), as
 * st_optim_update over rows × cols).
 *
 * Adam's bias corrections are computed on the host in double with the very
 * expressions of optim.c, so both sides use bit-identical step factors.
 * What may differ from the CPU: nvcc contracts a*b + c into one fused
 * multiply-add (one rounding instead of two), and rowwise AdaGrad sums its
 * squares in a different order (warp shuffles, in double). No fast-math:
 * sqrtf and division are IEEE-rounded as on the CPU.
 *
 * Geometry: one warp per row (lanes stride over the row); dense tensors one
 * thread per element, or one warp per row for rowwise AdaGrad.
 */
#include "cuda/gpu_internal.cuh"

#include <math.h>

struct optk {
	int kind;
	float lr, l2, eps, b1, b2, l1, beta;
	float step, inv_sqrt_bc2;   /* adam, from t */
};

static struct optk make_optk(const st_optim_t *o, uint64_t t)
{
	struct optk k;
	k.kind = o->kind;
	k.lr = o->lr;
	k.l2 = o->l2;
	k.eps = o->eps;
	k.b1 = o->beta1;
	k.b2 = o->beta2;
	k.l1 = o->l1;
	k.beta = o->beta;
	k.step = 0.0f;
	k.inv_sqrt_bc2 = 0.0f;
	if (o->kind == ST_OPT_ADAM) {
		/* optim.c's adam(), verbatim. */
		const double bc1 = 1.0 - pow((double)o->beta1, (double)(t ? t : 1));
		const double bc2 = 1.0 - pow((double)o->beta2, (double)(t ? t : 1));
		k.step = (float)((double)o->lr / bc1);
		k.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
	}
	return k;
}

/* One coordinate of a per-coordinate rule; s1 = acc / m / z, s2 = v / n. */
__device__ static inline void elem(const struct optk &o, float *w, float *s1, float *s2,
				   float g)
{
	switch (o.kind) {
	case ST_OPT_SGD:
		*w -= o.lr * (g + o.l2 * *w);
		break;
	case ST_OPT_ADAGRAD: {
		float gi = g + o.l2 * *w;
		*s1 += gi * gi;
		*w -= o.lr * gi / (sqrtf(*s1) + o.eps);
		break;
	}
	case ST_OPT_ADAM: {
		float gi = g + o.l2 * *w;
		*s1 = o.b1 * *s1 + (1.0f - o.b1) * gi;
		*s2 = o.b2 * *s2 + (1.0f - o.b2) * gi * gi;
		*w -= o.step * *s1 / (sqrtf(*s2) * o.inv_sqrt_bc2 + o.eps);
		break;
	}
	case ST_OPT_FTRL: {
		float n_new = *s2 + g * g;
		float sigma = (sqrtf(n_new) - sqrtf(*s2)) / o.lr;
		*s1 += g - sigma * *w;
		*s2 = n_new;
		float z = *s1;
		*w = fabsf(z) <= o.l1 ? 0.0f
			: -(z - copysignf(o.l1, z)) / ((o.beta + sqrtf(n_new)) / o.lr + o.l2);
		break;
	}
	default:
		break;
	}
}

/* Rowwise AdaGrad of one row by one warp: acc += mean(g'^2) (in double, as
 * optim.c), then every coordinate steps by lr / (sqrt(acc) + eps). */
__device__ static inline void row_adagrad(const struct optk &o, float *w, float *acc,
					  const float *g, uint32_t len, unsigned lane)
{
	double sq = 0.0;
	for (uint32_t j = lane; j < len; j += 32) {
		double gi = (double)(g[j] + o.l2 * w[j]);
		sq += gi * gi;
	}
	for (int off = 16; off > 0; off >>= 1)
		sq += __shfl_xor_sync(0xffffffffu, sq, off);
	float a = 0.0f;
	if (lane == 0) {
		a = *acc + (float)(sq / (double)len);
		*acc = a;
	}
	a = __shfl_sync(0xffffffffu, a, 0);
	const float step = o.lr / (sqrtf(a) + o.eps);
	for (uint32_t j = lane; j < len; j += 32)
		w[j] -= step * (g[j] + o.l2 * w[j]);
}

__global__ static void k_rows(struct optk o, float *vals, uint32_t stride, uint32_t dim,
			      const int32_t *slot, uint32_t n, const float *g, int gstride,
			      int g_by_slot)
{
	size_t u = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	unsigned lane = threadIdx.x & 31;
	if (u >= n)
		return;
	int32_t s = slot[u];
	if (s < 0)
		return;
	float *w = vals + (size_t)s * stride;
	float *st = w + dim;
	const float *gr = g + (size_t)(g_by_slot ? (size_t)s : u) * (size_t)gstride;
	if (o.kind == ST_OPT_ADAGRAD_ROW) {
		if (dim)
			row_adagrad(o, w, st, gr, dim, lane);
		return;
	}
	for (uint32_t j = lane; j < dim; j += 32)
		elem(o, &w[j], &st[j], &st[dim + j], gr[j]);
}

__global__ static void k_dense(struct optk o, float *w, float *state, const float *g, size_t len)
{
	GRID_LOOP(i, len) {
		float *s1 = state ? &state[i] : NULL, *s2 = state ? &state[len + i] : NULL;
		elem(o, &w[i], s1, s2, g[i]);
	}
}

__global__ static void k_dense_rowwise(struct optk o, float *w, float *acc, const float *g,
				       size_t rows, size_t cols)
{
	size_t r = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	if (r >= rows || cols == 0)
		return;
	row_adagrad(o, w + r * cols, acc + r, g + r * cols, (uint32_t)cols, threadIdx.x & 31);
}

int st__gpu_optim_rows(const st_optim_t *o, float *vals, uint32_t stride, uint32_t dim,
		       const int32_t *slot, uint32_t n, const float *g, int gstride,
		       int g_by_slot, uint64_t t, cudaStream_t s)
{
	if (n == 0)
		return ST_OK;
	k_rows<<<blocks_for((size_t)n * 32, ST_GPU_THREADS), ST_GPU_THREADS, 0, s>>>(
		make_optk(o, t), vals, stride, dim, slot, n, g, gstride, g_by_slot);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_optim_rows(const st_optim_t *o, float *d_vals, uint32_t stride,
				 uint32_t dim, const int32_t *d_slot, uint32_t n, const float *d_g,
				 int gstride, uint64_t t, st_gpu_stream_t *s)
{
	return st__gpu_optim_rows(o, d_vals, stride, dim, d_slot, n, d_g, gstride, 0, t,
				  cu_stream(s));
}

extern "C" int st_gpu_optim_dense(const st_optim_t *o, float *d_w, float *d_state,
				  const float *d_g, size_t rows, size_t cols, uint64_t t,
				  st_gpu_stream_t *s)
{
	size_t len = rows * cols;
	if (len == 0)
		return ST_OK;
	struct optk k = make_optk(o, t);
	if (o->kind == ST_OPT_ADAGRAD_ROW)
		k_dense_rowwise<<<blocks_for(rows * 32, ST_GPU_THREADS), ST_GPU_THREADS, 0,
				  cu_stream(s)>>>(k, d_w, d_state, d_g, rows, cols);
	else
		k_dense<<<blocks_for(len, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
			k, d_w, d_state, d_g, len);
	CU_LAUNCH();
	return ST_OK;
}
