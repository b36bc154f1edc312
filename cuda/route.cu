/*
 * route.cu — Algorithm 2's parallel_partition (hierarchical-gpu-parameter-
 * server.md §4.1) on the device: stable bucketing of keys by owner, and the
 * gathers that lay rows out in bucket order (contract: gpu.h; host
 * reference: st_gpu_route_plan_host in gpu_part.c, which it matches
 * exactly).
 *
 * Three kernels, in stream order:
 *   count  block b of ST_GPU_ROUTE_BLOCK keys counts its keys per owner:
 *          warps find equal owners with __match_any_sync and the lowest lane
 *          of each group writes the group's size; the block's totals go to
 *          scratch[p * nblocks + b] (owner-major)
 *   scan   one block turns scratch into an exclusive prefix sum, so
 *          scratch[p * nblocks + b] is where block b's keys of owner p
 *          start, and off[p] = scratch[p * nblocks]
 *   place  each key's position = its block's start for its owner + the
 *          keys of that owner in earlier warps of the block + its rank
 *          among equal owners of its warp; perm[pos] = key index
 * Positions follow input order within every bucket, so the result is
 * deterministic and identical to a counting sort.
 */
#include "cuda/gpu_internal.cuh"

#define WARPS (ST_GPU_ROUTE_BLOCK / 32)
#define SCAN_THREADS 1024

/* Per-warp counts of each owner in this block: cnt[w][p]. */
__device__ static void warp_counts(const uint64_t *keys, uint32_t n, uint32_t n_parts,
				   unsigned int cnt[WARPS][ST_GPU_ROUTE_MAX_PARTS],
				   uint32_t *part, unsigned *peers)
{
	for (unsigned t = threadIdx.x; t < WARPS * ST_GPU_ROUTE_MAX_PARTS; t += blockDim.x)
		cnt[t / ST_GPU_ROUTE_MAX_PARTS][t % ST_GPU_ROUTE_MAX_PARTS] = 0;
	__syncthreads();
	size_t i = (size_t)blockIdx.x * ST_GPU_ROUTE_BLOCK + threadIdx.x;
	uint32_t p = i < n ? st_gpu_part_of(keys[i], n_parts) : n_parts;
	unsigned m = __match_any_sync(0xffffffffu, p);
	unsigned lane = threadIdx.x & 31;
	if (p < n_parts && lane == (unsigned)(__ffs(m) - 1))
		cnt[threadIdx.x / 32][p] = __popc(m);
	__syncthreads();
	*part = p;
	*peers = m;
}

__global__ static void k_count(const uint64_t *keys, uint32_t n, uint32_t n_parts,
			       uint32_t *scratch)
{
	__shared__ unsigned int cnt[WARPS][ST_GPU_ROUTE_MAX_PARTS];
	uint32_t p;
	unsigned m;
	warp_counts(keys, n, n_parts, cnt, &p, &m);
	if (threadIdx.x < n_parts) {
		unsigned int tot = 0;
		for (int w = 0; w < WARPS; w++)
			tot += cnt[w][threadIdx.x];
		scratch[(size_t)threadIdx.x * gridDim.x + blockIdx.x] = tot;
	}
}

/* Exclusive scan of scratch[len] by one block: each thread scans a chunk,
 * thread 0 scans the chunk totals. */
__global__ static void k_scan(uint32_t *scratch, size_t len, uint32_t nblocks, uint32_t n_parts,
			      uint32_t n, uint32_t *off)
{
	__shared__ uint32_t base[SCAN_THREADS];
	size_t chunk = (len + SCAN_THREADS - 1) / SCAN_THREADS;
	size_t lo = threadIdx.x * chunk, hi = lo + chunk < len ? lo + chunk : len;
	uint32_t sum = 0;
	for (size_t j = lo; j < hi; j++)
		sum += scratch[j];
	base[threadIdx.x] = sum;
	__syncthreads();
	if (threadIdx.x == 0) {
		uint32_t run = 0;
		for (int t = 0; t < SCAN_THREADS; t++) {
			uint32_t v = base[t];
			base[t] = run;
			run += v;
		}
	}
	__syncthreads();
	uint32_t run = base[threadIdx.x];
	for (size_t j = lo; j < hi; j++) {
		uint32_t v = scratch[j];
		scratch[j] = run;
		run += v;
	}
	__syncthreads();
	if (threadIdx.x < n_parts)
		off[threadIdx.x] = scratch[(size_t)threadIdx.x * nblocks];
	if (threadIdx.x == 0)
		off[n_parts] = n;
}

__global__ static void k_place(const uint64_t *keys, uint32_t n, uint32_t n_parts,
			       const uint32_t *scratch, uint32_t *perm)
{
	__shared__ unsigned int cnt[WARPS][ST_GPU_ROUTE_MAX_PARTS];
	uint32_t p;
	unsigned m;
	warp_counts(keys, n, n_parts, cnt, &p, &m);
	size_t i = (size_t)blockIdx.x * ST_GPU_ROUTE_BLOCK + threadIdx.x;
	if (i >= n)
		return;
	unsigned lane = threadIdx.x & 31, warp = threadIdx.x / 32;
	uint32_t pos = scratch[(size_t)p * gridDim.x + blockIdx.x];
	for (unsigned w = 0; w < warp; w++)
		pos += cnt[w][p];
	pos += __popc(m & ((1u << lane) - 1));
	perm[pos] = (uint32_t)i;
}

__global__ static void k_gather_keys(const uint64_t *src, const uint32_t *perm, uint32_t n,
				     uint64_t *dst)
{
	GRID_LOOP(j, n)
		dst[j] = src[perm[j]];
}

/* Rows of ncols floats: dst[j] = src[perm[j]] (gather), or dst[perm[j]] =
 * src[j] (scatter). */
__global__ static void k_move_rows(const float *src, uint32_t ncols, const uint32_t *perm,
				   uint32_t n, float *dst, int scatter)
{
	GRID_LOOP(t, (size_t)n * ncols) {
		size_t p = (size_t)perm[t / ncols] * ncols + t % ncols;
		if (scatter)
			dst[p] = src[t];
		else
			dst[t] = src[p];
	}
}

static int move_rows(const float *src, uint32_t ncols, const uint32_t *perm, uint32_t n,
		     float *dst, int scatter, st_gpu_stream_t *s)
{
	size_t len = (size_t)n * ncols;
	if (len == 0)
		return ST_OK;
	k_move_rows<<<blocks_for(len, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		src, ncols, perm, n, dst, scatter);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_route_plan(const uint64_t *d_keys, uint32_t n, uint32_t n_parts,
				 uint32_t *d_scratch, uint32_t *d_off, uint32_t *d_perm,
				 st_gpu_stream_t *s)
{
	if (n_parts < 1 || n_parts > ST_GPU_ROUTE_MAX_PARTS) {
		st_error("gpu route: %u owners (expected 1..%d)", n_parts, ST_GPU_ROUTE_MAX_PARTS);
		return ST_EINVAL;
	}
	cudaStream_t cs = cu_stream(s);
	if (n == 0) {
		CU(cudaMemsetAsync(d_off, 0, sizeof *d_off * ((size_t)n_parts + 1), cs));
		return ST_OK;
	}
	uint32_t nblocks = (n + ST_GPU_ROUTE_BLOCK - 1) / ST_GPU_ROUTE_BLOCK;
	k_count<<<nblocks, ST_GPU_ROUTE_BLOCK, 0, cs>>>(d_keys, n, n_parts, d_scratch);
	CU_LAUNCH();
	k_scan<<<1, SCAN_THREADS, 0, cs>>>(d_scratch, (size_t)nblocks * n_parts, nblocks, n_parts,
					   n, d_off);
	CU_LAUNCH();
	k_place<<<nblocks, ST_GPU_ROUTE_BLOCK, 0, cs>>>(d_keys, n, n_parts, d_scratch, d_perm);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_gather_keys(const uint64_t *d_src, const uint32_t *d_perm, uint32_t n,
				  uint64_t *d_dst, st_gpu_stream_t *s)
{
	if (n == 0)
		return ST_OK;
	k_gather_keys<<<blocks_for(n, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		d_src, d_perm, n, d_dst);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_gather_rows(const float *d_src, uint32_t ncols, const uint32_t *d_perm,
				  uint32_t n, float *d_dst, st_gpu_stream_t *s)
{
	return move_rows(d_src, ncols, d_perm, n, d_dst, 0, s);
}

extern "C" int st_gpu_scatter_rows(const float *d_src, uint32_t ncols, const uint32_t *d_perm,
				   uint32_t n, float *d_dst, st_gpu_stream_t *s)
{
	return move_rows(d_src, ncols, d_perm, n, d_dst, 1, s);
}
