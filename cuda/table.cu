/*
 * table.cu — the device hash table of the HBM tier (contract: gpu.h,
 * hierarchical-gpu-parameter-server.md §4.1 and Appendix C.1).
 *
 * Layout (all device memory, sized once at creation — the paper fixes the
 * capacity because dynamic allocation on the GPU is slow, and the working
 * set of the batches in flight is known):
 *   index  keys[S], ref[S]      S = st_gpu_index_slots(rows), a power of two;
 *                               open addressing with linear probing from
 *                               st_gpu_home(key); empty = ST_GPU_EMPTY_KEY
 *   pool   vals[rows × row_floats], pool_key[rows] (EMPTY when free),
 *          pins[rows]
 *   free   free_list[rows]: the free pool rows; inserts take them with an
 *          atomic cursor `taken`, eviction rebuilds the list
 *   grads  grad[rows × grad_cols], touched[rows], tlist[rows] (optional)
 *   ctl    counters (one small struct) mirrored to page-locked host memory
 *          when a result must be read back
 *
 * A key's slot is its pool row, not its index position: the index may be
 * rebuilt (eviction) while slots held by batches in flight stay valid.
 *
 * Concurrency: the kernels of one call run many threads at once. Inserts
 * claim an index entry with atomicCAS on its key, then a pool row with
 * atomicAdd on `taken`; lookups and gets only read; accumulate adds with
 * atomicAdd. Different calls are ordered by their stream: the table is used
 * from one host thread and one stream at a time (gpu.h), so no lookup ever
 * races an insert of the same call's keys except as documented (keys of one
 * insert are distinct).
 *
 * Eviction drops every unpinned row (pool_key = EMPTY), rebuilds the free
 * list from the empty pool rows and re-inserts the survivors' keys into a
 * cleared index, all in stream order.
 */
#include "cuda/gpu_internal.cuh"

#include <stdlib.h>

#define NO_REF 0xffffffffu

struct ctl {
	unsigned int nfree;      /* entries of free_list */
	unsigned int taken;      /* entries handed out since the last rebuild */
	unsigned int ntouched;   /* entries of tlist */
	unsigned int inserted;   /* rows created by the last insert */
	unsigned int full;       /* the last insert ran out of rows / index */
	unsigned int badkey;     /* the last insert saw ST_GPU_EMPTY_KEY */
	unsigned long long dropped;
};

struct st_gpu_table {
	uint64_t rows;
	uint32_t row_floats, grad_cols;
	uint32_t mask;
	uint64_t *keys;
	uint32_t *ref;
	float *vals;
	uint64_t *pool_key;
	uint32_t *pins;
	uint32_t *free_list;
	float *grad;
	uint32_t *touched, *tlist;
	struct ctl *ctl;         /* device */
	struct ctl *h_ctl;       /* page-locked mirror */
};

/* ---- device helpers ------------------------------------------------------ */

/* Pool row of key, or -1. The index is never full (load <= 1/2), so an empty
 * entry ends every probe; the bound only guards a corrupt table. */
__device__ static int32_t find_slot(const uint64_t *keys, const uint32_t *ref, uint32_t mask,
				    uint64_t key)
{
	uint32_t i = st_gpu_home(key, mask);
	for (uint32_t probes = 0; probes <= mask; probes++) {
		uint64_t k = keys[i];
		if (k == key)
			return ref[i] == NO_REF ? -1 : (int32_t)ref[i];
		if (k == ST_GPU_EMPTY_KEY)
			return -1;
		i = (i + 1) & mask;
	}
	return -1;
}

/* Claims (or finds) the index entry of key; returns its position or -1. */
__device__ static int64_t claim_entry(uint64_t *keys, uint32_t mask, uint64_t key)
{
	uint32_t i = st_gpu_home(key, mask);
	for (uint32_t probes = 0; probes <= mask; probes++) {
		uint64_t k = keys[i];
		if (k == ST_GPU_EMPTY_KEY) {
			unsigned long long old = atomicCAS((unsigned long long *)&keys[i],
							   (unsigned long long)ST_GPU_EMPTY_KEY,
							   (unsigned long long)key);
			if (old == ST_GPU_EMPTY_KEY || old == key)
				return i;
			k = old;
		}
		if (k == key)
			return i;
		i = (i + 1) & mask;
	}
	return -1;
}

/* ---- kernels --------------------------------------------------------------- */

__global__ static void k_init_pool(uint64_t *pool_key, uint32_t *pins, uint32_t *free_list,
				   uint64_t rows)
{
	GRID_LOOP(p, rows) {
		pool_key[p] = ST_GPU_EMPTY_KEY;
		pins[p] = 0;
		free_list[p] = (uint32_t)p;
	}
}

__global__ static void k_lookup(const uint64_t *keys, const uint32_t *ref, uint32_t mask,
				uint32_t *pins, const uint64_t *q, uint32_t n, int32_t *slots,
				int pin)
{
	GRID_LOOP(i, n) {
		int32_t s = find_slot(keys, ref, mask, q[i]);
		if (pin && s >= 0)
			atomicAdd(&pins[s], 1u);
		slots[i] = s;
	}
}

/* Phase 1 of insert: one thread per key claims an index entry and, for a new
 * key, a pool row. A new row's slot is written as -(p + 2) so that phase 2
 * knows to initialize it. */
__global__ static void k_insert_claim(uint64_t *keys, uint32_t *ref, uint32_t mask,
				      uint64_t *pool_key, uint32_t *pins,
				      const uint32_t *free_list, struct ctl *ctl,
				      const uint64_t *q, uint32_t n, int32_t *slots, int pin)
{
	GRID_LOOP(i, n) {
		uint64_t key = q[i];
		int32_t s = -1;
		if (key == ST_GPU_EMPTY_KEY) {
			atomicOr(&ctl->badkey, 1u);
			slots[i] = -1;
			continue;
		}
		int64_t e = claim_entry(keys, mask, key);
		if (e < 0) {
			atomicOr(&ctl->full, 1u);
			slots[i] = -1;
			continue;
		}
		/* An entry without a row (a claim that found no free row earlier)
		 * gets one now; keys of one call are distinct, so no other thread
		 * of this launch touches ref[e]. */
		if (ref[e] != NO_REF) {
			s = (int32_t)ref[e];
		} else {
			unsigned int k = atomicAdd(&ctl->taken, 1u);
			if (k >= ctl->nfree) {
				atomicOr(&ctl->full, 1u);
				slots[i] = -1;
				continue;
			}
			uint32_t p = free_list[k];
			pool_key[p] = key;
			ref[e] = p;
			atomicAdd(&ctl->inserted, 1u);
			if (pin)
				atomicAdd(&pins[p], 1u);
			slots[i] = -(int32_t)p - 2;
			continue;
		}
		if (pin)
			atomicAdd(&pins[s], 1u);
		slots[i] = s;
	}
}

/* Phase 2: one warp per key initializes new rows and fixes their slots. */
__global__ static void k_insert_init(float *vals, uint32_t row_floats, const float *rows,
				     uint32_t n, int32_t *slots)
{
	size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	unsigned lane = threadIdx.x & 31;
	if (w >= n)
		return;
	int32_t s = slots[w];
	if (s > -2)
		return;
	uint32_t p = (uint32_t)(-s - 2);
	float *dst = vals + (size_t)p * row_floats;
	const float *src = rows ? rows + w * row_floats : NULL;
	for (uint32_t j = lane; j < row_floats; j += 32)
		dst[j] = src ? src[j] : 0.0f;
	__syncwarp();
	if (lane == 0)
		slots[w] = (int32_t)p;
}

__global__ static void k_unpin(uint32_t *pins, const int32_t *slots, uint32_t n)
{
	GRID_LOOP(i, n) {
		int32_t s = slots[i];
		if (s >= 0)
			atomicSub(&pins[s], 1u);
	}
}

/* Eviction, step 1: drop unpinned rows and rebuild the free list. */
__global__ static void k_evict_rows(uint64_t *pool_key, const uint32_t *pins,
				    uint32_t *free_list, struct ctl *ctl, uint64_t rows)
{
	GRID_LOOP(p, rows) {
		if (pool_key[p] != ST_GPU_EMPTY_KEY && pins[p] == 0)
			pool_key[p] = ST_GPU_EMPTY_KEY;
		if (pool_key[p] == ST_GPU_EMPTY_KEY)
			free_list[atomicAdd(&ctl->nfree, 1u)] = (uint32_t)p;
	}
}

/* Eviction, step 2: the surviving rows back into the cleared index. */
__global__ static void k_reindex(uint64_t *keys, uint32_t *ref, uint32_t mask,
				 const uint64_t *pool_key, uint64_t rows)
{
	GRID_LOOP(p, rows) {
		uint64_t key = pool_key[p];
		if (key == ST_GPU_EMPTY_KEY)
			continue;
		int64_t e = claim_entry(keys, mask, key);
		if (e >= 0)
			ref[e] = (uint32_t)p;
	}
}

/* One warp per key: copy the row out, zeros when absent. */
__global__ static void k_get(const uint64_t *keys, const uint32_t *ref, uint32_t mask,
			     const float *vals, uint32_t row_floats, const uint64_t *q,
			     uint32_t n, float *out)
{
	size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	unsigned lane = threadIdx.x & 31;
	if (w >= n)
		return;
	int32_t s = lane == 0 ? find_slot(keys, ref, mask, q[w]) : 0;
	s = __shfl_sync(0xffffffffu, s, 0);
	float *o = out + w * row_floats;
	for (uint32_t j = lane; j < row_floats; j += 32)
		o[j] = s >= 0 ? vals[(size_t)s * row_floats + j] : 0.0f;
}

/* One warp per key: add the key's values into its row (or gradient). */
__global__ static void k_accumulate(const uint64_t *keys, const uint32_t *ref, uint32_t mask,
				    float *dst, uint32_t dst_stride, uint32_t *touched,
				    uint32_t *tlist, struct ctl *ctl, const uint64_t *q,
				    const float *v, uint32_t n, uint32_t ncols)
{
	size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	unsigned lane = threadIdx.x & 31;
	if (w >= n)
		return;
	int32_t s = 0;
	if (lane == 0) {
		s = find_slot(keys, ref, mask, q[w]);
		if (s < 0)
			atomicAdd(&ctl->dropped, 1ull);
		else if (touched && atomicExch(&touched[s], 1u) == 0)
			tlist[atomicAdd(&ctl->ntouched, 1u)] = (uint32_t)s;
	}
	s = __shfl_sync(0xffffffffu, s, 0);
	if (s < 0)
		return;
	for (uint32_t j = lane; j < ncols; j += 32)
		atomicAdd(&dst[(size_t)s * dst_stride + j], v[w * ncols + j]);
}

/* After apply: clear the gradients and marks of the touched rows. */
__global__ static void k_clear_touched(float *grad, uint32_t grad_cols, uint32_t *touched,
				       const uint32_t *tlist, uint32_t nt)
{
	GRID_LOOP(i, (size_t)nt * grad_cols) {
		uint32_t p = tlist[i / grad_cols];
		grad[(size_t)p * grad_cols + i % grad_cols] = 0.0f;
		if (i % grad_cols == 0)
			touched[p] = 0;
	}
}

/* ---- host side --------------------------------------------------------------- */

static unsigned warp_blocks(size_t n)
{
	return blocks_for(n * 32, ST_GPU_THREADS);
}

/* Copies the control block to its host mirror and waits. */
static int read_ctl(st_gpu_table_t *t, cudaStream_t s)
{
	CU(cudaMemcpyAsync(t->h_ctl, t->ctl, sizeof *t->ctl, cudaMemcpyDeviceToHost, s));
	CU(cudaStreamSynchronize(s));
	return ST_OK;
}

extern "C" void st_gpu_table_destroy(st_gpu_table_t *t)
{
	if (!t)
		return;
	st_gpu_free(t->keys);
	st_gpu_free(t->ref);
	st_gpu_free(t->vals);
	st_gpu_free(t->pool_key);
	st_gpu_free(t->pins);
	st_gpu_free(t->free_list);
	st_gpu_free(t->grad);
	st_gpu_free(t->touched);
	st_gpu_free(t->tlist);
	st_gpu_free(t->ctl);
	st_gpu_host_free(t->h_ctl);
	free(t);
}

static int table_alloc(st_gpu_table_t *t)
{
	uint64_t slots = st_gpu_index_slots(t->rows);
	size_t R = (size_t)t->rows;
	int rc;
	if ((rc = st_gpu_alloc((void **)&t->keys, slots * sizeof *t->keys)) < 0 ||
	    (rc = st_gpu_alloc((void **)&t->ref, slots * sizeof *t->ref)) < 0 ||
	    (rc = st_gpu_alloc((void **)&t->vals, R * t->row_floats * sizeof(float))) < 0 ||
	    (rc = st_gpu_alloc((void **)&t->pool_key, R * sizeof *t->pool_key)) < 0 ||
	    (rc = st_gpu_alloc((void **)&t->pins, R * sizeof *t->pins)) < 0 ||
	    (rc = st_gpu_alloc((void **)&t->free_list, R * sizeof *t->free_list)) < 0 ||
	    (rc = st_gpu_alloc((void **)&t->ctl, sizeof *t->ctl)) < 0 ||
	    (rc = st_gpu_host_alloc((void **)&t->h_ctl, sizeof *t->h_ctl)) < 0)
		return rc;
	if (t->grad_cols &&
	    ((rc = st_gpu_alloc((void **)&t->grad, R * t->grad_cols * sizeof(float))) < 0 ||
	     (rc = st_gpu_alloc((void **)&t->touched, R * sizeof *t->touched)) < 0 ||
	     (rc = st_gpu_alloc((void **)&t->tlist, R * sizeof *t->tlist)) < 0))
		return rc;
	return ST_OK;
}

static int table_init(st_gpu_table_t *t)
{
	uint64_t slots = st_gpu_index_slots(t->rows);
	CU(cudaMemset(t->keys, 0xff, slots * sizeof *t->keys));
	CU(cudaMemset(t->ref, 0xff, slots * sizeof *t->ref));
	CU(cudaMemset(t->vals, 0, (size_t)t->rows * t->row_floats * sizeof(float)));
	k_init_pool<<<blocks_for(t->rows, ST_GPU_THREADS), ST_GPU_THREADS>>>(
		t->pool_key, t->pins, t->free_list, t->rows);
	CU_LAUNCH();
	if (t->grad_cols) {
		CU(cudaMemset(t->grad, 0, (size_t)t->rows * t->grad_cols * sizeof(float)));
		CU(cudaMemset(t->touched, 0, (size_t)t->rows * sizeof *t->touched));
	}
	struct ctl c = {};
	c.nfree = (unsigned int)t->rows;
	CU(cudaMemcpy(t->ctl, &c, sizeof c, cudaMemcpyHostToDevice));
	CU(cudaDeviceSynchronize());
	return ST_OK;
}

extern "C" int st_gpu_table_create(st_gpu_table_t **out, uint64_t rows, uint32_t row_floats,
				   uint32_t grad_cols)
{
	*out = NULL;
	if (rows < 1 || rows > INT32_MAX || row_floats < 1 || grad_cols > row_floats) {
		st_error("gpu table: bad shape (%llu rows of %u floats, %u gradient columns)",
			 (unsigned long long)rows, row_floats, grad_cols);
		return ST_EINVAL;
	}
	st_gpu_table_t *t = (st_gpu_table_t *)calloc(1, sizeof *t);
	if (!t)
		return ST_ENOMEM;
	t->rows = rows;
	t->row_floats = row_floats;
	t->grad_cols = grad_cols;
	t->mask = (uint32_t)(st_gpu_index_slots(rows) - 1);
	int rc = table_alloc(t);
	if (rc == ST_OK)
		rc = table_init(t);
	if (rc < 0) {
		if (rc == ST_ENOMEM)
			st_error("gpu table: %zu bytes of device memory for %llu rows of %u "
				 "floats are not available; lower the GPU memory budget",
				 st_gpu_table_bytes(rows, row_floats, grad_cols),
				 (unsigned long long)rows, row_floats);
		st_gpu_table_destroy(t);
		return rc;
	}
	*out = t;
	return ST_OK;
}

extern "C" uint32_t st_gpu_table_row_floats(const st_gpu_table_t *t)
{
	return t->row_floats;
}

extern "C" uint64_t st_gpu_table_capacity(const st_gpu_table_t *t)
{
	return t->rows;
}

extern "C" float *st_gpu_table_values(st_gpu_table_t *t)
{
	return t->vals;
}

extern "C" int st_gpu_table_lookup(st_gpu_table_t *t, const uint64_t *d_keys, uint32_t n,
				   int32_t *d_slots, int pin, st_gpu_stream_t *s)
{
	if (n == 0)
		return ST_OK;
	k_lookup<<<blocks_for(n, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		t->keys, t->ref, t->mask, t->pins, d_keys, n, d_slots, pin);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_table_insert(st_gpu_table_t *t, const uint64_t *d_keys, const float *d_rows,
				   uint32_t n, int32_t *d_slots, int pin, st_gpu_stream_t *s)
{
	if (n == 0)
		return 0;
	cudaStream_t cs = cu_stream(s);
	/* Clear the outcome words (inserted, full, badkey) of the control block. */
	CU(cudaMemsetAsync(&t->ctl->inserted, 0, 3 * sizeof(unsigned int), cs));
	k_insert_claim<<<blocks_for(n, ST_GPU_THREADS), ST_GPU_THREADS, 0, cs>>>(
		t->keys, t->ref, t->mask, t->pool_key, t->pins, t->free_list, t->ctl, d_keys, n,
		d_slots, pin);
	CU_LAUNCH();
	k_insert_init<<<warp_blocks(n), ST_GPU_THREADS, 0, cs>>>(t->vals, t->row_floats, d_rows,
								 n, d_slots);
	CU_LAUNCH();
	int rc = read_ctl(t, cs);
	if (rc < 0)
		return rc;
	if (t->h_ctl->badkey) {
		st_error("gpu table: insert of the reserved key 0x%llx (ST_GPU_EMPTY_KEY)",
			 (unsigned long long)ST_GPU_EMPTY_KEY);
		return ST_EINVAL;
	}
	if (t->h_ctl->full)
		return ST_ENOSPC;
	return (int)t->h_ctl->inserted;
}

extern "C" int st_gpu_table_unpin(st_gpu_table_t *t, const int32_t *d_slots, uint32_t n,
				  st_gpu_stream_t *s)
{
	if (n == 0)
		return ST_OK;
	k_unpin<<<blocks_for(n, ST_GPU_THREADS), ST_GPU_THREADS, 0, cu_stream(s)>>>(t->pins,
										  d_slots, n);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int64_t st_gpu_table_evict(st_gpu_table_t *t, st_gpu_stream_t *s)
{
	cudaStream_t cs = cu_stream(s);
	int rc = read_ctl(t, cs);
	if (rc < 0)
		return rc;
	if (t->h_ctl->ntouched) {
		/* Dropping a touched row would lose its summed gradient. */
		st_error("gpu table: evict with %u rows of unapplied gradients; call "
			 "st_gpu_table_apply first", t->h_ctl->ntouched);
		return ST_EINVAL;
	}
	uint64_t slots = (uint64_t)t->mask + 1;
	CU(cudaMemsetAsync(&t->ctl->nfree, 0, 2 * sizeof(unsigned int), cs));
	k_evict_rows<<<blocks_for(t->rows, ST_GPU_THREADS), ST_GPU_THREADS, 0, cs>>>(
		t->pool_key, t->pins, t->free_list, t->ctl, t->rows);
	CU_LAUNCH();
	CU(cudaMemsetAsync(t->keys, 0xff, slots * sizeof *t->keys, cs));
	CU(cudaMemsetAsync(t->ref, 0xff, slots * sizeof *t->ref, cs));
	k_reindex<<<blocks_for(t->rows, ST_GPU_THREADS), ST_GPU_THREADS, 0, cs>>>(
		t->keys, t->ref, t->mask, t->pool_key, t->rows);
	CU_LAUNCH();
	if ((rc = read_ctl(t, cs)) < 0)
		return rc;
	return t->h_ctl->nfree;
}

extern "C" int64_t st_gpu_table_free_rows(st_gpu_table_t *t, st_gpu_stream_t *s)
{
	int rc = read_ctl(t, cu_stream(s));
	if (rc < 0)
		return rc;
	const struct ctl *c = t->h_ctl;
	return c->taken >= c->nfree ? 0 : (int64_t)(c->nfree - c->taken);
}

extern "C" int st_gpu_table_get(st_gpu_table_t *t, const uint64_t *d_keys, uint32_t n,
				float *d_out, st_gpu_stream_t *s)
{
	if (n == 0)
		return ST_OK;
	k_get<<<warp_blocks(n), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		t->keys, t->ref, t->mask, t->vals, t->row_floats, d_keys, n, d_out);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int st_gpu_table_accumulate(st_gpu_table_t *t, const uint64_t *d_keys,
				       const float *d_vals, uint32_t n, uint32_t ncols, int mode,
				       st_gpu_stream_t *s)
{
	int grad = mode == ST_GPU_ACC_GRAD;
	if ((grad && (!t->grad_cols || ncols != t->grad_cols)) ||
	    (!grad && ncols > t->row_floats)) {
		st_error("gpu table: accumulate of %u columns into %s of %u", ncols,
			 grad ? "a gradient buffer" : "rows", grad ? t->grad_cols : t->row_floats);
		return ST_EINVAL;
	}
	if (n == 0)
		return ST_OK;
	k_accumulate<<<warp_blocks(n), ST_GPU_THREADS, 0, cu_stream(s)>>>(
		t->keys, t->ref, t->mask, grad ? t->grad : t->vals,
		grad ? t->grad_cols : t->row_floats, grad ? t->touched : NULL, t->tlist, t->ctl,
		d_keys, d_vals, n, ncols);
	CU_LAUNCH();
	return ST_OK;
}

extern "C" int64_t st_gpu_table_apply(st_gpu_table_t *t, const st_optim_t *o, uint64_t step,
				      st_gpu_stream_t *s)
{
	if (!t->grad_cols)
		return 0;
	cudaStream_t cs = cu_stream(s);
	int rc = read_ctl(t, cs);
	if (rc < 0)
		return rc;
	uint32_t nt = t->h_ctl->ntouched;
	if (nt == 0)
		return 0;
	/* tlist holds pool rows < 2^31, so it reads as int32 slots; the
	 * gradient of a row is at grad + slot * grad_cols. */
	rc = st__gpu_optim_rows(o, t->vals, t->row_floats, t->grad_cols,
				(const int32_t *)t->tlist, nt, t->grad, (int)t->grad_cols, 1,
				step, cs);
	if (rc < 0)
		return rc;
	k_clear_touched<<<blocks_for((size_t)nt * t->grad_cols, ST_GPU_THREADS), ST_GPU_THREADS,
			  0, cs>>>(t->grad, t->grad_cols, t->touched, t->tlist, nt);
	CU_LAUNCH();
	CU(cudaMemsetAsync(&t->ctl->ntouched, 0, sizeof(unsigned int), cs));
	CU(cudaStreamSynchronize(cs));
	return nt;
}

extern "C" int64_t st_gpu_table_dropped(st_gpu_table_t *t, st_gpu_stream_t *s)
{
	int rc = read_ctl(t, cu_stream(s));
	if (rc < 0)
		return rc;
	return (int64_t)t->h_ctl->dropped;
}
