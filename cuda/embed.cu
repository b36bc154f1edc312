/*
 * embed.cu — CUDA twins of the embedding layers of ops/nn/nn.c (contract:
 * gpu.h): gather + pool (sum or mean per slot), the scatter-add of pooled
 * gradients into per-unique-key gradient rows, and the wide (linear over
 * sparse keys) term.
 *
 * Geometry: one warp per example. For the forward, the warp walks the
 * example's keys in CSR order and lane j adds coordinate j (and j + 32, ...)
 * of each key's row into the slot's output, so every output float is summed
 * by one lane in the CPU's order: the sum is deterministic and differs from
 * the CPU only by fused multiply-adds. Each slot pools by sum or mean as the
 * layout says (st_pool_is_mean: slot_mean[s], else `mean`; the per-slot
 * modes go to the device as one byte per slot, mode[]). Mean pooling counts each slot's keys
 * lane-parallel (32 keys at a time, O(keys²) per example: CTR examples have
 * tens of keys) and scales by 1/count as the CPU does (multiply by the float
 * reciprocal; a slot with one key is left alone).
 *
 * The backward adds into gu rows that several examples share (one unique key
 * appears in many examples), so it uses atomicAdd: the order of the adds,
 * and so the last bits of gu, vary from run to run.
 */
#include "cuda/gpu_internal.cuh"

#include <stdlib.h>

struct st_gpu_pool {
	int n_slots, width, mean;   /* mean: some slot pools by mean */
	int *dim, *off;     /* device [n_slots] */
	uint8_t *mode;      /* device [n_slots]: 1 = mean, 0 = sum */
};

extern "C" void st_gpu_pool_destroy(st_gpu_pool_t *p)
{
	if (!p)
		return;
	st_gpu_free(p->dim);
	st_gpu_free(p->off);
	st_gpu_free(p->mode);
	free(p);
}

extern "C" int st_gpu_pool_create(st_gpu_pool_t **out, const st_pool_layout_t *L)
{
	*out = NULL;
	st_gpu_pool_t *p = (st_gpu_pool_t *)calloc(1, sizeof *p);
	if (!p)
		return ST_ENOMEM;
	p->n_slots = L->n_slots;
	p->width = L->width;
	p->mean = st_pool_any_mean(L);
	size_t bytes = sizeof(int) * (size_t)L->n_slots;
	uint8_t *mode = (uint8_t *)malloc((size_t)L->n_slots);
	if (!mode) {
		free(p);
		return ST_ENOMEM;
	}
	for (int s = 0; s < L->n_slots; s++)
		mode[s] = (uint8_t)st_pool_is_mean(L, s);
	int rc;
	if ((rc = st_gpu_alloc((void **)&p->dim, bytes)) < 0 ||
	    (rc = st_gpu_alloc((void **)&p->off, bytes)) < 0 ||
	    (rc = st_gpu_alloc((void **)&p->mode, (size_t)L->n_slots)) < 0 ||
	    (rc = st_gpu_upload(p->dim, L->dim, bytes, NULL)) < 0 ||
	    (rc = st_gpu_upload(p->off, L->off, bytes, NULL)) < 0 ||
	    (rc = st_gpu_upload(p->mode, mode, (size_t)L->n_slots, NULL)) < 0 ||
	    (rc = st_gpu_stream_sync(NULL)) < 0) {
		free(mode);
		st_gpu_pool_destroy(p);
		return rc;
	}
	free(mode);
	*out = p;
	return ST_OK;
}

/* Keys of slot s in [k0, k1), and whether k is the first of them. */
__device__ static inline int slot_count(const uint16_t *key_slot, uint32_t k0, uint32_t k1,
					uint32_t k, int s, int *first)
{
	int cnt = 0;
	*first = 1;
	for (uint32_t q = k0; q < k1; q++)
		if (key_slot[q] == s) {
			cnt++;
			if (q < k)
				*first = 0;
		}
	return cnt;
}

__global__ static void k_pool_fwd(int width, int mean, const uint8_t *mode, const int *dim,
				  const int *off, st_gpu_csr_t c, st_gpu_rows_t r, float *out)
{
	size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	unsigned lane = threadIdx.x & 31;
	if (i >= c.n)
		return;
	uint32_t k0 = c.row_off[i], k1 = c.row_off[i + 1];
	float *o = out + i * (size_t)width;
	for (int j = lane; j < width; j += 32)
		o[j] = 0.0f;
	__syncwarp();
	for (uint32_t k = k0; k < k1; k++) {
		int32_t sl = r.slot[c.key_idx[k]];
		if (sl < 0)
			continue;
		int s = c.key_slot[k];
		const float *row = r.vals + (size_t)sl * r.stride;
		float a = c.key_val[k];
		float *os = o + off[s];
		for (int j = lane; j < dim[s]; j += 32)
			os[j] += a * row[j];
	}
	if (!mean)
		return;
	__syncwarp();
	for (uint32_t kb = k0; kb < k1; kb += 32) {
		uint32_t k = kb + lane;
		int s = 0, cnt = 0, first = 0;
		if (k < k1) {
			s = c.key_slot[k];
			cnt = slot_count(c.key_slot, k0, k1, k, s, &first);
		}
		unsigned todo = __ballot_sync(0xffffffffu, k < k1 && first && cnt > 1 && mode[s]);
		while (todo) {
			int b = __ffs(todo) - 1;
			todo &= todo - 1;
			int sb = __shfl_sync(0xffffffffu, s, b);
			int cb = __shfl_sync(0xffffffffu, cnt, b);
			float inv = 1.0f / (float)cb;
			float *os = o + off[sb];
			for (int j = lane; j < dim[sb]; j += 32)
				os[j] *= inv;
		}
	}
}

__global__ static void k_pool_bwd(int width, int mean, const uint8_t *mode, const int *dim,
				  const int *off, st_gpu_csr_t c, const float *dout, float *gu,
				  int gstride)
{
	size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	unsigned lane = threadIdx.x & 31;
	if (i >= c.n)
		return;
	uint32_t k0 = c.row_off[i], k1 = c.row_off[i + 1];
	const float *d = dout + i * (size_t)width;
	for (uint32_t kb = k0; kb < k1; kb += 32) {
		uint32_t k = kb + lane;
		int s = 0;
		uint32_t u = 0;
		float a = 0.0f;
		if (k < k1) {
			s = c.key_slot[k];
			u = c.key_idx[k];
			a = c.key_val[k];
			if (mean && mode[s]) {
				int first;
				/* nn.c: val / count, a division (not a reciprocal). */
				a = a / (float)slot_count(c.key_slot, k0, k1, k, s, &first);
			}
		}
		uint32_t nk = k1 - kb < 32 ? k1 - kb : 32;
		for (uint32_t b = 0; b < nk; b++) {
			int sb = __shfl_sync(0xffffffffu, s, b);
			uint32_t ub = __shfl_sync(0xffffffffu, u, b);
			float ab = __shfl_sync(0xffffffffu, a, b);
			float *g = gu + (size_t)ub * (size_t)gstride;
			const float *ds = d + off[sb];
			for (int j = lane; j < dim[sb]; j += 32)
				atomicAdd(&g[j], ab * ds[j]);
		}
	}
}

/* One thread per example, keys in order (the CPU's sum order). */
__global__ static void k_wide_fwd(const int *dim, st_gpu_csr_t c, st_gpu_rows_t r, int col,
				  float *out)
{
	GRID_LOOP(i, c.n) {
		float acc = 0.0f;
		for (uint32_t k = c.row_off[i]; k < c.row_off[i + 1]; k++) {
			int32_t sl = r.slot[c.key_idx[k]];
			if (sl >= 0)
				acc += c.key_val[k] *
				       r.vals[(size_t)sl * r.stride +
					      (col >= 0 ? col : dim[c.key_slot[k]])];
		}
		out[i] = acc;
	}
}

__global__ static void k_wide_bwd(const int *dim, st_gpu_csr_t c, const float *dout, float *gu,
				  int gstride, int col)
{
	GRID_LOOP(i, c.n) {
		for (uint32_t k = c.row_off[i]; k < c.row_off[i + 1]; k++)
			atomicAdd(&gu[(size_t)c.key_idx[k] * gstride +
				      (col >= 0 ? col : dim[c.key_slot[k]])],
				  dout[i] * c.key_val[k]);
	}
}

static unsigned warp_blocks(size_t n)
{
	return blocks_for(n * 32, ST_GPU_THREADS);
}

extern "C" int st_gpu_pool_forward(const st_gpu_pool_t *P, const st_gpu_csr_t *c,
				   const st_gpu_rows_t *r, float *d_out, st_gpu_stream_t *s)
{
	if (c->n == 0)
		return ST_OK;
	k_pool_fwd<<<warp_blocks(c->n), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		P->width, P->mean, P->mode, P->dim, P->off, *c, *r, d_out);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_pool_backward(const st_gpu_pool_t *P, const st_gpu_csr_t *c,
				    const float *d_dout, float *d_gu, int gstride,
				    st_gpu_stream_t *s)
{
	if (c->n == 0)
		return ST_OK;
	k_pool_bwd<<<warp_blocks(c->n), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		P->width, P->mean, P->mode, P->dim, P->off, *c, d_dout, d_gu, gstride);
	CU_LAUNCH();
	return ST_OK;
}

static int wide_args_ok(const st_gpu_pool_t *P, int col)
{
	if (col < 0 && !P) {
		st_error("gpu wide: a per-slot column (col < 0) needs the pooling layout");
		return 0;
	}
	return 1;
}

extern "C" int st_gpu_wide_forward(const st_gpu_pool_t *P, const st_gpu_csr_t *c,
				   const st_gpu_rows_t *r, int col, float *d_out,
				   st_gpu_stream_t *s)
{
	if (!wide_args_ok(P, col))
		return ST_EINVAL;
	if (c->n == 0)
		return ST_OK;
	k_wide_fwd<<<blocks_for(c->n, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		P ? P->dim : NULL, *c, *r, col, d_out);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_wide_backward(const st_gpu_pool_t *P, const st_gpu_csr_t *c,
				    const float *d_dout, float *d_gu, int gstride, int col,
				    st_gpu_stream_t *s)
{
	if (!wide_args_ok(P, col))
		return ST_EINVAL;
	if (c->n == 0)
		return ST_OK;
	k_wide_bwd<<<blocks_for(c->n, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		P ? P->dim : NULL, *c, d_dout, d_gu, gstride, col);
	CU_LAUNCH();
	return ST_OK;
}
