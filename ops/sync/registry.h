/*
 * registry.h — the table of sync policies and what each can do
 * (policies.def). Job validation, st.sync.auto, `strata help policies`
 * and error messages read it; callers test capabilities, never names.
 *
 * Thread-safety: the table is constant; every function is reentrant.
 */
#ifndef ST_SYNC_REGISTRY_H
#define ST_SYNC_REGISTRY_H

#include <stddef.h>
#include <stdio.h>

#include "ops/sync/sync.h"

/* Capabilities of a policy. */
enum {
	/* May be a phase's policy (job phases). */
	ST_POL_PHASE = 1 << 0,
	/* Runs a background thread of its own (shadow's sync thread). */
	ST_POL_THREAD = 1 << 1,
	/* Across processes, may be st.sync.auto's synchronous side. */
	ST_POL_AUTO_SYNC = 1 << 2,
	/* Across processes, may be st.sync.auto's asynchronous side. */
	ST_POL_AUTO_ASYNC = 1 << 3,
	/* Across processes, every rank takes one step per read batch together,
	 * so a read batch must fit in one step: batch_size <= workers x
	 * minibatch. */
	ST_POL_STEP_PER_BATCH = 1 << 4,
	/* No ops of its own: switches between two policies (ops/sync/auto.c). */
	ST_POL_META = 1 << 5,
	/* Across processes, its checkpoints have a consistent cut and resume on
	 * any world size (docs/distributed.md, "Checkpoints of multi-process
	 * jobs"): every rank at the same step, nothing in flight. */
	ST_POL_DIST_CKPT = 1 << 6,
};

typedef struct st_policy {
	const char *name;
	const st_sync_ops_t *local;   /* one process; NULL for a meta policy */
	const st_sync_ops_t *dist;    /* one rank of several; NULL: not across processes */
	unsigned caps;                /* ST_POL_* */
	const char *lag_param;        /* see policies.def; NULL: none */
	const char *checkpoint;       /* what a checkpoint holds of it */
	const char *summary;
} st_policy_t;

/* The table, in policies.def order, and its length. */
extern const st_policy_t st_policies[];
extern const size_t st_n_policies;

/* The policy named `name` (NULL: the default, "async"), or NULL. */
const st_policy_t *st_policy_find(const char *name);

/* Whether the policy runs across processes (a meta policy does when its
 * sub-policies do). */
int st_policy_dist(const st_policy_t *p);

/* Writes the names of the policies whose caps include every bit of `all`
 * (0: every policy), and that run across processes when `dist`, as
 * "a, b and c" into buf; returns buf. */
const char *st_policy_names(char *buf, size_t len, unsigned all, int dist);

/* The one-process ops of the policy named `name` (registry.h), or NULL (a
 * meta policy such as auto, or a name the registry does not know). */
const st_sync_ops_t *st_sync_find(const char *name);

/* The multi-process twin of policy `name` (ops/sync/dist_*.c), or
 * NULL when that policy does not run across processes yet. */
const st_sync_ops_t *st_sync_find_dist(const char *name);

/* Prints the table as Markdown (docs/policies.md, "The policy table", is
 * this output; `strata help policies`). */
void st_policy_print_table(FILE *f);

#endif
