/*
 * dist_sync.h — the sync policies of a multi-process job, and the helpers
 * they share (private to ops/sync). Each rank runs N local workers over
 * its own share of the batches, the sparse rows live with their owner
 * ranks (ops/dist/dist.h), and these policies join the ranks; each is the
 * ranks transport of a policy whose threads transport is ops/sync/<name>.c,
 * over the same ops/algo core where the paper's algorithm has one
 * (docs/design-notes.md, "One core per algorithm"). One file per concept:
 *
 *   dist_lockstep.c  allreduce and hybrid: every worker of every rank in
 *                    lockstep; dense sums allreduced in rank order, row sums
 *                    to their owners as a synchronous step (with one worker
 *                    per rank, bit for bit one process of P workers).
 *                    hybrid's rows may be `staleness` steps old (PERSIA,
 *                    persia-hybrid-training.md Section 4.1): the pulls'
 *                    bound is the trainer's.
 *   dist_async.c     async and hop_bs: the dense parameters live on rank 0
 *                    (a parameter server), rows applied on arrival by their
 *                    owners; hop_bs adds rank 0's clock rule
 *                    (ops/algo/hopclock.h, ops/dist/hop.c).
 *   dist_buffered.c  gba and bsp: gradient buffers at the parameter servers
 *                    (ops/algo/gba.h, ops/dist/psbuf.c).
 *   dist_hop_bw.c    hop_bw: each rank a lockstep unit; rank 0 closes a step
 *                    with all but b of the active ranks (ops/algo/hopclock.h).
 *   dist_shadow.c    ShadowSync in the background (ops/algo/blend.h).
 *   dist_rows.c      rows to their owners: a lockstep step's row sums
 *                    (allreduce, hybrid, kstep, hop_bw) and one worker's
 *                    gradients applied on arrival or buffered (async,
 *                    hop_bs, shadow, gba, bsp).
 *   kstep            kstep.c itself, which merges across processes when
 *                    env->dist is set.
 *
 * auto switches between these (ops/train, "auto across processes"); the
 * registry gives it no multi-process ops. Threads: like allreduce.c —
 * hooks on the N local worker threads, with barriers for the lockstep
 * ones; the network calls of a lockstep step are made by worker 0 only
 * (st_dist_push and the collectives are one thread at a time); the others'
 * workers push under a mutex (rowsend_t).
 */
#ifndef ST_DIST_SYNC_H
#define ST_DIST_SYNC_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/sync/sync.h"
#include "runtime/err.h"

/* One worker's row gradients to their owners, applied on arrival (async,
 * shadow, hop_bs): the workers take turns (st_dist_push is one thread at a
 * time) and share the message arrays, grown once. */
typedef struct rowsend {
	pthread_mutex_t mu;
	uint64_t *keys;
	uint8_t *tab;
	float *grad;
	size_t cap;
} rowsend_t;

void st__rowsend_init(rowsend_t *r);
void st__rowsend_fini(rowsend_t *r);
struct st_dist_buf;
/* g's admitted rows to their owners: applied on arrival with optimizer
 * step t (st_dist_push), or with buf set a contribution to the owners'
 * gradient buffers (st_dist_push_buf, with g->owner_token). *bytes grows
 * by what the rows take. ST_OK or an error. */
int st__rowsend_push(const st_sync_env_t *env, rowsend_t *r, const st_sync_grads_t *g,
		     uint64_t t, const struct st_dist_buf *buf, uint64_t *bytes);

/* hop_bw: a kept rank's row sums of step `step` to their owners, as means
 * over the K kept ranks (each rank's sum is over its own examples' mean
 * loss), a step of K lists (st_dist_push_quorum). As
 * st_sync_rowpush_send otherwise. */
int st__rowpush_send_quorum(st_sync_rowpush_t *r, const st_sync_env_t *env, uint64_t step,
			    uint64_t t, uint32_t K, uint64_t *bytes);

/* Hooks the multi-process policies often do not need. */
static inline int st__sync_noop_begin_batch(void *self, uint32_t n_uniq)
{
	(void)self;
	(void)n_uniq;
	return ST_OK;
}

static inline void st__sync_noop_end_batch(void *self, int w)
{
	(void)self;
	(void)w;
}

/* Each worker's private copy of the dense parameters, [N][nparams], filled
 * with env's (async, hop_bs, gba, bsp: rank 0's replies overwrite them), or
 * NULL. Free with st_sync_snaps_destroy. */
static inline float **st__sync_worker_copies(const st_sync_env_t *env)
{
	float **p = st_sync_snaps_create(env);
	for (int w = 0; p && w < env->n_workers; w++)
		memcpy(p[w], env->params, sizeof(float) * env->nparams);
	return p;
}

#endif
