/*
 * gpu_part.h — the host-side logic of the GPU backend, which needs no GPU:
 * which GPU owns a key, where a key lands in a device hash table, how large
 * a device table must be for a working set, the stable per-destination
 * bucketing of Algorithm 2 (hierarchical-gpu-parameter-server.md §4.1) as a
 * host reference, and the AUC of a prediction histogram.
 *
 * Plain C, built on every configuration (with or without CUDA) and tested
 * by tests/unit/test_gpu_part.c everywhere. The inline functions are also
 * compiled into the CUDA kernels (ST_GPU_HD), so the host reference and the
 * device code hash keys with the very same instructions.
 *
 * Thread-safety: every function is pure.
 */
#ifndef ST_GPU_PART_H
#define ST_GPU_PART_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ST_GPU_HD __host__ __device__
#else
#define ST_GPU_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The key that marks an empty slot of a device table. A real key equal to
 * it (probability 2^-64 for xxh3 keys) is refused by the insert with
 * ST_EINVAL. */
#define ST_GPU_EMPTY_KEY UINT64_MAX

/* splitmix64's finalizer: the same mix the host tier (runtime/store) and the
 * pull stage hash keys with. */
static inline ST_GPU_HD uint64_t st_gpu_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* The GPU (or rank) among n that owns key: the high 32 bits of mix64(key)
 * scaled to [0, n) by a multiply-shift, which is the paper's "simple modulo
 * hash" (Appendix C.1) without a division and without bias for n not a
 * power of two. High bits on purpose: a device table picks the home slot
 * from the LOW bits of the same hash (st_gpu_home), and a partition taken
 * from those low bits (h % n with n even, say) would leave every GPU's table
 * using only the slots of its residue class. n >= 1. */
static inline ST_GPU_HD uint32_t st_gpu_part_of(uint64_t key, uint32_t n)
{
	return (uint32_t)(((st_gpu_mix64(key) >> 32) * (uint64_t)n) >> 32);
}

/* Home slot of key in an index of mask + 1 (a power of two) slots. */
static inline ST_GPU_HD uint32_t st_gpu_home(uint64_t key, uint32_t mask)
{
	return (uint32_t)st_gpu_mix64(key) & mask;
}

/* ---- sizing -------------------------------------------------------------
 * A device table has a pool of `rows` value rows (each row_floats floats,
 * plus grad_cols gradient floats when it keeps a gradient buffer) and an
 * index of index_slots (a power of two >= 2 × rows, so linear probing runs
 * at load <= 1/2 and probes stay short). */

/* Bytes of device memory a table of `rows` rows takes (index included). */
size_t st_gpu_table_bytes(uint64_t rows, uint32_t row_floats, uint32_t grad_cols);

/* Index slots for `rows` rows: the power of two >= 2 × rows (>= 64). */
uint64_t st_gpu_index_slots(uint64_t rows);

/* Rows of a device table for a working set of `working_set` unique keys per
 * batch with `in_flight` batches pinned at once (pulled, not yet pushed):
 * with budget_bytes == 0, exactly working_set × in_flight; else as many rows
 * as fit in budget_bytes (the rest of the budget caches rows of earlier
 * batches), which must be at least working_set × in_flight. ST_OK and
 * *rows, or ST_ENOSPC when the pinned working set does not fit the budget
 * (message logged: lower the batch size or raise the budget), ST_EINVAL
 * for a zero working set or in_flight. */
int st_gpu_table_rows(uint64_t working_set, uint32_t in_flight, size_t budget_bytes,
		      uint32_t row_floats, uint32_t grad_cols, uint64_t *rows);

/* ---- routing (Algorithm 2, host reference) ------------------------------
 * Stable bucketing of keys[0..n) by owner st_gpu_part_of(key, n_parts):
 * off[p] .. off[p+1] is bucket p (off has n_parts + 1 entries), and perm[j]
 * is the position in keys of the j-th key in bucket order; keys of one
 * bucket keep their input order. The CUDA kernel st_gpu_route_plan produces
 * exactly these arrays. */
void st_gpu_route_plan_host(const uint64_t *keys, uint32_t n, uint32_t n_parts,
			    uint32_t *off, uint32_t *perm);

/* Scratch words the device bucketing needs for n keys and n_parts parts
 * (one count per part and block of ST_GPU_ROUTE_BLOCK keys). */
#define ST_GPU_ROUTE_BLOCK 256
#define ST_GPU_ROUTE_MAX_PARTS 64
size_t st_gpu_route_scratch_words(uint32_t n, uint32_t n_parts);

/* ---- AUC of a histogram --------------------------------------------------
 * hist[0 .. 2^bits) counts negatives and hist[2^bits .. 2^(bits+1)) positives
 * per bucket, bucket b = floor(p × 2^bits) clamped to [0, 2^bits) (NaN and
 * p <= 0 in bucket 0), computed in double: the bucketing of
 * ops/metrics/auc.c's streaming accumulator, which st_gpu_auc_hist fills on
 * the device. Returns the AUC with each bucket's pairs counted as ties
 * (half), or NaN when a class is absent — the same number st_auc_acc_read
 * gives for the same predictions. */
double st_gpu_auc_from_hist(const uint64_t *hist, unsigned bits);

#ifdef __cplusplus
}
#endif

#endif
