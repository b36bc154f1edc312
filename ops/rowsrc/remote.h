/*
 * remote.h — the remote row source (ops/rowsrc/remote.c): the rows of a
 * multi-process job, sharded by key over the owner ranks (ops/dist/dist.h;
 * PERSIA's embedding PS, persia-hybrid-training.md Section 4.2). The
 * contract is rowsrc.h's; rows are private copies (no ST_ROWSRC_SHARED).
 */
#ifndef ST_ROWSRC_REMOTE_H
#define ST_ROWSRC_REMOTE_H

#include <stddef.h>

#include "ops/rowsrc/rowsrc.h"

struct st_dist;

typedef struct st_rowsrc_remote_cfg {
	/* The job's parameter service (borrowed: it outlives the source). */
	struct st_dist *dist;
	/* This rank's own shard of the rows, a local source (borrowed): the
	 * service thread answers the other ranks from it, and the remote
	 * source hands it maintain and metrics. */
	st_rowsrc_t *shard;
	int n_workers;                    /* read_step's w < n_workers */
	size_t stride;                    /* floats per row copy (the widest emb+wide) */
	/* How far training went (borrowed; the trainer writes it): a train
	 * batch's pull waits for the steps before it (lag), and with fresh
	 * for the previous batch to be trained. */
	const st_rowsrc_clock_t *clock;
} st_rowsrc_remote_cfg_t;

/* ST_OK and *out (destroy it with st_rowsrc_destroy before cfg->dist), or
 * ST_ENOMEM. cfg is not kept.
 *
 * Threads: resolve from ONE pull thread (st_dist_pull's rule: the count of
 * train batches pulled is that thread's); read_step from each worker with
 * its own w; release, maintain and metrics from the push thread. */
int st_rowsrc_remote_create(st_rowsrc_t **out, const st_rowsrc_remote_cfg_t *cfg);

#endif
