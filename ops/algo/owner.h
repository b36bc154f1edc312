/*
 * owner.h — who owns what: the rank that holds a sparse key's row, the
 * worker that reduces a unique key or a dense tensor within a lockstep
 * step, and the slice of a flat array a worker merges. One process's
 * threads (ops/sync) and the ranks of many (ops/dist) ask these, so both
 * split work the same way.
 *
 * Keys to ranks follow PERSIA's embedding PS (persia-hybrid-training.md
 * Section 4.2.2: "an embedding worker first runs an identical global
 * hashing function to locate the embedding PS node"; Section 4.2.3's
 * workload balance: IDs "uniformly shuffled and then evenly distributed
 * across embedding PS nodes"): a 64-bit mix of the key, modulo the owners.
 * The splits among workers only share work: every sum a lockstep policy
 * makes runs in worker order whatever the split (ops/sync/sync.h), so they
 * never change a result.
 *
 * Threads: none; reentrant.
 */
#ifndef ST_ALGO_OWNER_H
#define ST_ALGO_OWNER_H

#include <stddef.h>
#include <stdint.h>

#include "ops/nn/model.h"

/* The owner rank of `key` among ranks 0 .. owners-1 (owners >= 1). */
int st_algo_owner_key(uint64_t key, int owners);
/* The salt st_algo_owner_key mixes into every key (a constant), recorded in
 * multi-process checkpoints so that a loader knows how the shards were cut. */
uint64_t st_algo_owner_salt(void);

/* The worker of n that reduces unique key u of a lockstep step. */
static inline int st_algo_owner_row(uint32_t u, int n)
{
	return (int)(u % (uint32_t)n);
}

/* The worker of n_workers that reduces each dense tensor: tensors, largest
 * first, each to the least-loaded worker (its floats + 64, a cost per
 * tensor). A malloc'd [ntensors + 1] array the caller frees, or NULL. */
int *st_algo_owner_tensors(const st_model_t *m, int n_workers);

/* The slice [*lo, *hi) of n floats that worker w of n_workers owns
 * (contiguous, in worker order, sizes differing by at most one). */
static inline void st_algo_owner_range(size_t n, int w, int n_workers, size_t *lo, size_t *hi)
{
	*lo = n * (size_t)w / (size_t)n_workers;
	*hi = n * (size_t)(w + 1) / (size_t)n_workers;
}

#endif
