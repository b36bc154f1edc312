/*
 * owner.c — key -> owner rank and tensor -> owner worker (owner.h).
 *
 * Threads: none; reentrant.
 */
#include "ops/algo/owner.h"

#include <stdlib.h>

#include "ops/algo/params.h"

/* A fixed salt: every rank must compute the same owner for a key, run
 * after run (checkpoints and digests compare shards across runs). */
#define OWNER_SALT UINT64_C(0x6a09e667f3bcc909)

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

uint64_t st_algo_owner_salt(void)
{
	return OWNER_SALT;
}

int st_algo_owner_key(uint64_t key, int owners)
{
	return (int)(mix64(key ^ OWNER_SALT) % (uint64_t)owners);
}

int *st_algo_owner_tensors(const st_model_t *m, int n_workers)
{
	const int nt = st_model_ntensors(m), N = n_workers > 0 ? n_workers : 1;
	int *owner = calloc((size_t)nt + 1, sizeof(int));
	int *order = calloc((size_t)nt + 1, sizeof(int));
	size_t *load = calloc((size_t)N, sizeof(size_t));
	if (!owner || !order || !load) {
		free(owner);
		free(order);
		free(load);
		return NULL;
	}
	/* Largest first (a stable insertion sort: equal sizes keep their
	 * order), so the big tensors spread before the small ones fill in. */
	for (int i = 0; i < nt; i++)
		order[i] = i;
	for (int i = 1; i < nt; i++)
		for (int j = i; j > 0 && st_algo_tensor_floats(m, order[j]) >
					 st_algo_tensor_floats(m, order[j - 1]); j--) {
			int x = order[j];
			order[j] = order[j - 1];
			order[j - 1] = x;
		}
	for (int k = 0; k < nt; k++) {
		int best = 0;
		for (int w = 1; w < N; w++)
			if (load[w] < load[best])
				best = w;
		owner[order[k]] = best;
		load[best] += st_algo_tensor_floats(m, order[k]) + 64;
	}
	free(order);
	free(load);
	return owner;
}
