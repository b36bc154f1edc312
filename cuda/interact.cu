/*
 * interact.cu — CUDA twins of nn.c's FM and DLRM dot interactions, the
 * sigmoid cross-entropy loss, and the AUC histogram of ops/metrics/auc.c
 * (contract: gpu.h).
 *
 * Summation order, which is what parity depends on:
 *  - FM forward: field sums per coordinate in field order (as nn.c), then
 *    the coordinates are reduced across a warp: a different order from the
 *    CPU's running sum, so out differs in the last bits.
 *  - FM backward, dot forward and dot backward: one thread per output value
 *    summing in nn.c's order (dot backward visits the pairs of field f in
 *    nn.c's pair order: first (f, b) for b < f, then (a, f) for a > f), so
 *    they differ from the CPU only by fused multiply-adds.
 *  - Loss: per example in double with nn.c's formula; the sum over examples
 *    is reduced per block, then added with a double atomicAdd (order varies).
 *  - AUC histogram: integer counts, exact; bucket of nn's streaming
 *    accumulator computed in double.
 */
#include "cuda/gpu_internal.cuh"

#include <math.h>

/* ---- FM ------------------------------------------------------------------ */

__global__ static void k_fm_fwd(int n, int F, int d, const float *E, float *out)
{
	size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	unsigned lane = threadIdx.x & 31;
	if (i >= (size_t)n)
		return;
	const float *e = E + i * (size_t)F * d;
	float acc = 0.0f;
	for (int k = lane; k < d; k += 32) {
		float s = 0.0f, q = 0.0f;
		for (int f = 0; f < F; f++) {
			float v = e[(size_t)f * d + k];
			s += v;
			q += v * v;
		}
		acc += s * s - q;
	}
	for (int o = 16; o > 0; o >>= 1)
		acc += __shfl_xor_sync(0xffffffffu, acc, o);
	if (lane == 0)
		out[i] = 0.5f * acc;
}

/* One thread per (example, coordinate): the field sum, then F outputs. */
__global__ static void k_fm_bwd(int n, int F, int d, const float *E, const float *dout,
				float *dE)
{
	GRID_LOOP(t, (size_t)n * d) {
		size_t i = t / d, k = t % d;
		const float *e = E + i * (size_t)F * d + k;
		float *de = dE + i * (size_t)F * d + k;
		float s = 0.0f;
		for (int f = 0; f < F; f++)
			s += e[(size_t)f * d];
		float g = dout[i];
		for (int f = 0; f < F; f++)
			de[(size_t)f * d] = g * (s - e[(size_t)f * d]);
	}
}

/* ---- DLRM dot -------------------------------------------------------------- */

/* Pair p of the strictly lower triangle in row order: p = a(a-1)/2 + b. */
__device__ static inline void pair_of(size_t p, int *a, int *b)
{
	int x = (int)((1.0 + sqrt(1.0 + 8.0 * (double)p)) / 2.0);
	while ((size_t)x * (x - 1) / 2 > p)
		x--;
	while ((size_t)(x + 1) * x / 2 <= p)
		x++;
	*a = x;
	*b = (int)(p - (size_t)x * (x - 1) / 2);
}

__global__ static void k_dot_fwd(int n, int F, int d, const float *Z, float *out)
{
	const size_t np = (size_t)F * (F - 1) / 2;
	GRID_LOOP(t, (size_t)n * np) {
		size_t i = t / np;
		int a, b;
		pair_of(t % np, &a, &b);
		const float *za = Z + (i * F + a) * (size_t)d, *zb = Z + (i * F + b) * (size_t)d;
		float acc = 0.0f;
		for (int k = 0; k < d; k++)
			acc += za[k] * zb[k];
		out[t] = acc;
	}
}

__global__ static void k_dot_bwd(int n, int F, int d, const float *Z, const float *dout,
				 float *dZ)
{
	const size_t np = (size_t)F * (F - 1) / 2;
	GRID_LOOP(t, (size_t)n * F * d) {
		size_t i = t / ((size_t)F * d);
		int f = (int)(t / d % F), k = (int)(t % d);
		const float *z = Z + i * (size_t)F * d + k;
		const float *g = dout + i * np;
		float acc = 0.0f;
		/* Pairs (f, b), b < f: ∂(z_f·z_b)/∂z_f = z_b. */
		for (int b = 0; b < f; b++)
			acc += g[(size_t)f * (f - 1) / 2 + b] * z[(size_t)b * d];
		/* Pairs (a, f), a > f: ∂(z_a·z_f)/∂z_f = z_a. */
		for (int a = f + 1; a < F; a++)
			acc += g[(size_t)a * (a - 1) / 2 + f] * z[(size_t)a * d];
		dZ[t] = acc;
	}
}

/* ---- loss ---------------------------------------------------------------------- */

__global__ static void k_logloss(int n, const float *logit, const float *label, float scale,
				 float *prob, float *dlogit, double *sum)
{
	__shared__ double part[ST_GPU_THREADS / 32];
	double acc = 0.0;
	GRID_LOOP(i, n) {
		double z = logit[i], y = label[i];
		double e = exp(-fabs(z));
		acc += (z > 0.0 ? z : 0.0) - z * y + log1p(e);
		double p = z >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
		if (prob)
			prob[i] = (float)p;
		if (dlogit)
			dlogit[i] = (float)((p - y) * (double)scale);
	}
	for (int o = 16; o > 0; o >>= 1)
		acc += __shfl_xor_sync(0xffffffffu, acc, o);
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x / 32] = acc;
	__syncthreads();
	if (threadIdx.x == 0 && sum) {
		double t = 0.0;
		for (unsigned w = 0; w < blockDim.x / 32; w++)
			t += part[w];
		atomicAdd(sum, t);
	}
}

/* ---- AUC histogram ------------------------------------------------------------- */

__global__ static void k_auc_hist(const float *pred, const float *label, size_t n, unsigned bits,
				  unsigned long long *hist)
{
	const size_t nb = (size_t)1 << bits;
	GRID_LOOP(i, n) {
		double p = pred[i];
		int y = label[i] > 0.5f;
		/* auc.c's bucket: !(p > 0) also catches NaN. */
		size_t b = !(p > 0.0) ? 0 : p >= 1.0 ? nb - 1 : (size_t)(p * (double)nb);
		atomicAdd(&hist[(size_t)y * nb + b], 1ull);
	}
}

/* ---- host wrappers ----------------------------------------------------------------- */

extern "C" int st_gpu_fm_forward(int n, int F, int d, const float *d_E, float *d_out,
				 st_gpu_stream_t *s)
{
	if (n <= 0)
		return ST_OK;
	k_fm_fwd<<<blocks_for((size_t)n * 32, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		n, F, d, d_E, d_out);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_fm_backward(int n, int F, int d, const float *d_E, const float *d_dout,
				  float *d_dE, st_gpu_stream_t *s)
{
	if (n <= 0 || d <= 0)
		return ST_OK;
	k_fm_bwd<<<blocks_for((size_t)n * d, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		n, F, d, d_E, d_dout, d_dE);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_dot_forward(int n, int F, int d, const float *d_Z, float *d_out,
				  st_gpu_stream_t *s)
{
	size_t len = (size_t)(n > 0 ? n : 0) * ((size_t)F * (F - 1) / 2);
	if (len == 0)
		return ST_OK;
	k_dot_fwd<<<blocks_for(len, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(n, F, d,
										  d_Z, d_out);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_dot_backward(int n, int F, int d, const float *d_Z, const float *d_dout,
				   float *d_dZ, st_gpu_stream_t *s)
{
	size_t len = (size_t)(n > 0 ? n : 0) * F * d;
	if (len == 0)
		return ST_OK;
	k_dot_bwd<<<blocks_for(len, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		n, F, d, d_Z, d_dout, d_dZ);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_logloss(int n, const float *d_logit, const float *d_label, float scale,
			      float *d_prob, float *d_dlogit, double *d_sum, st_gpu_stream_t *s)
{
	if (n <= 0)
		return ST_OK;
	/* Few blocks: each ends in one double atomicAdd. */
	unsigned blocks = blocks_for((size_t)n, ST_GPU_THREADS);
	if (blocks > 256)
		blocks = 256;
	k_logloss<<<blocks, ST_GPU_THREADS, 0, cu_stream(s)>>>(n, d_logit, d_label, scale, d_prob,
							       d_dlogit, d_sum);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_auc_hist(const float *d_pred, const float *d_label, size_t n,
			       unsigned bits, uint64_t *d_hist, st_gpu_stream_t *s)
{
	if (bits < 4 || bits > 24) {
		st_error("gpu auc: %u histogram bits (expected 4..24)", bits);
		return ST_EINVAL;
	}
	if (n == 0)
		return ST_OK;
	k_auc_hist<<<blocks_for(n, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		d_pred, d_label, n, bits, (unsigned long long *)d_hist);
	CU_LAUNCH();
	return ST_OK;
}
