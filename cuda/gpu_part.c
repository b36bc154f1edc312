/*
 * gpu_part.c — host-side logic of the GPU backend (contract: gpu_part.h):
 * device-table sizing, the host reference of Algorithm 2's bucketing, and
 * the AUC of a prediction histogram. Pure functions, no GPU, no allocation
 * except a small count array on the stack.
 */
#include "cuda/gpu_part.h"

#include <math.h>
#include <string.h>

#include "runtime/err.h"

/* Per pool row: the values, the row's key (8), its pin count (4) and its
 * free-list entry (4); with a gradient buffer also grad_cols floats, a
 * touched flag (4) and a touched-list entry (4). Per index slot: key (8)
 * and pool row (4). Must match the allocations of cuda/table.cu. */
size_t st_gpu_table_bytes(uint64_t rows, uint32_t row_floats, uint32_t grad_cols)
{
	size_t per_row = (size_t)row_floats * 4 + 8 + 4 + 4;
	if (grad_cols)
		per_row += (size_t)grad_cols * 4 + 4 + 4;
	return (size_t)rows * per_row + (size_t)st_gpu_index_slots(rows) * 12;
}

uint64_t st_gpu_index_slots(uint64_t rows)
{
	uint64_t s = 64;
	while (s < 2 * rows)
		s <<= 1;
	return s;
}

int st_gpu_table_rows(uint64_t working_set, uint32_t in_flight, size_t budget_bytes,
		      uint32_t row_floats, uint32_t grad_cols, uint64_t *rows)
{
	if (working_set == 0 || in_flight == 0 || row_floats == 0)
		return ST_EINVAL;
	uint64_t need = working_set * in_flight;
	if (budget_bytes == 0) {
		*rows = need;
		return ST_OK;
	}
	if (st_gpu_table_bytes(need, row_floats, grad_cols) > budget_bytes) {
		st_error("gpu: the pinned working set (%llu keys x %u batches in flight, "
			 "%zu bytes) does not fit the device budget of %zu bytes; lower "
			 "the batch size or raise the GPU memory budget",
			 (unsigned long long)working_set, in_flight,
			 st_gpu_table_bytes(need, row_floats, grad_cols), budget_bytes);
		return ST_ENOSPC;
	}
	/* Largest row count that fits: bytes grow with rows but the index
	 * doubles in steps, so bisect instead of dividing. */
	uint64_t lo = need, hi = need;
	while (st_gpu_table_bytes(hi * 2, row_floats, grad_cols) <= budget_bytes &&
	       hi < (UINT64_C(1) << 40))
		hi *= 2;
	hi *= 2;
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (st_gpu_table_bytes(mid, row_floats, grad_cols) <= budget_bytes)
			lo = mid;
		else
			hi = mid;
	}
	/* Pool rows are addressed by int32 slots on the device. */
	*rows = lo > INT32_MAX ? INT32_MAX : lo;
	return ST_OK;
}

void st_gpu_route_plan_host(const uint64_t *keys, uint32_t n, uint32_t n_parts,
			    uint32_t *off, uint32_t *perm)
{
	/* A counting sort: count, exclusive scan, place in input order. off[p]
	 * doubles as the cursor of bucket p and is restored afterwards. */
	memset(off, 0, sizeof *off * ((size_t)n_parts + 1));
	for (uint32_t i = 0; i < n; i++)
		off[st_gpu_part_of(keys[i], n_parts) + 1]++;
	for (uint32_t p = 0; p < n_parts; p++)
		off[p + 1] += off[p];
	for (uint32_t i = 0; i < n; i++)
		perm[off[st_gpu_part_of(keys[i], n_parts)]++] = i;
	for (uint32_t p = n_parts; p > 0; p--)
		off[p] = off[p - 1];
	off[0] = 0;
}

size_t st_gpu_route_scratch_words(uint32_t n, uint32_t n_parts)
{
	size_t blocks = ((size_t)n + ST_GPU_ROUTE_BLOCK - 1) / ST_GPU_ROUTE_BLOCK;
	return (blocks ? blocks : 1) * n_parts;
}

double st_gpu_auc_from_hist(const uint64_t *hist, unsigned bits)
{
	/* Buckets in increasing prediction: each positive scores the negatives
	 * of lower buckets and half of those in its own (Mann-Whitney U with
	 * ties), summed in double as auc.c does, so the two agree exactly. */
	size_t nb = (size_t)1 << bits;
	const uint64_t *neg = hist, *pos = hist + nb;
	double num = 0.0, below = 0.0, npos = 0.0;
	for (size_t b = 0; b < nb; b++) {
		double ng = (double)neg[b], ps = (double)pos[b];
		num += ps * (below + 0.5 * ng);
		below += ng;
		npos += ps;
	}
	return (npos > 0.0 && below > 0.0) ? num / (npos * below) : NAN;
}
