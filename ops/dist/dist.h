/*
 * dist.h — the sharded parameter store of a multi-process job
 * (docs/distributed.md; PERSIA's embedding PS, persia-hybrid-training.md
 * Section 4.2).
 *
 * Every sparse key has one owner rank: mix64(key ^ salt) mod `owners` (the
 * first `owners` ranks hold rows; the others only train). A rank's own
 * shard is the trainer's tables, with their RAM and SSD tiers as on one
 * machine; a service thread per rank ("st-dist-svc") answers the other
 * ranks' requests on it:
 *
 *   PULL   unique keys (+ table index) -> the rows' emb+wide floats, or
 *          "not admitted". A batch's keys go to each owner in one flat
 *          message (keys, then table indices), as PERSIA does.
 *   PUSH   one step's row gradients (keys, tables, floats), applied by the
 *          owner with the job's sparse optimizer.
 *   DENSE  (asynchronous policies) a dense gradient for rank 0, which keeps
 *          the authoritative dense parameters and answers with them.
 *
 * Rows never leave their owner's tables: a batch trains on private copies
 * (st_batch_t.rowbuf), every rank's own keys included, and only the
 * service thread writes the tables, under one lock, so a train worker
 * never reads a row while it changes.
 *
 * Synchronous steps (allreduce): every rank pushes to every owner for every
 * step (an empty list if it has nothing for it). An owner applies step s
 * once it has all ranks' lists for s, summing each key's gradients in rank
 * order — the same order as the single-process allreduce policy sums its
 * workers, so P ranks of one worker train bit for bit like one process of
 * P workers. A pull for a step waits until the steps before it are applied
 * (need_step), so no batch reads a row an earlier step has yet to update.
 *
 * Asynchronous pushes (hybrid, async) are applied on arrival; a rank's
 * pulls may then see rows a few batches old (bounded by the batches in
 * flight), PERSIA's "asynchronous embedding" (Section 4.1). async,
 * hop_bs and shadow therefore train each minibatch on rows read right before it
 * (st_dist_pull_step), not on the batch's pulled copies, so a row misses
 * only the updates in flight at that moment (Section 5's bounded
 * staleness), whatever the read batch size. With dist.prefetch a worker
 * issues those reads a few minibatches ahead (st_dist_step_submit) and
 * collects them when it gets there (st_dist_step_wait), so the round trip
 * leaves the step's critical path and a row misses at most that many
 * more of the worker's own updates (steprows.c).
 *
 * Buffered pushes (GBA's buffers, ops/algo/gba.h; the gba and bsp
 * policies) fill per-owner gradient buffers applied every
 * M contributions (psbuf.c); rank 0 has every owner apply a partial buffer
 * once all ranks have finished.
 *
 * Failure: a request whose owner died returns ST_EPEER; st_dist_finish
 * tolerates non-owner ranks that died (asynchronous policies), and reports
 * them.
 */
#ifndef ST_DIST_H
#define ST_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "ops/algo/params.h"
#include "runtime/metrics.h"
#include "runtime/net/net.h"
#include "runtime/store/table.h"

#define ST_DIST_MAX_TABLES 16

typedef struct st_dist st_dist_t;

typedef struct st_dist_cfg {
	st_net_t *net;
	int owners;                       /* ranks 0..owners-1 own rows; 0 = all */
	int compress;                     /* fp16 rows + 16-bit indices on the wire */
	int n_tables;
	st_table_t *tables[ST_DIST_MAX_TABLES];
	uint32_t dim[ST_DIST_MAX_TABLES]; /* emb+wide floats per row of each table */
	/* What the store steps: every owner its rows with params.sparse_opt;
	 * rank 0, for the policies whose dense parameters it keeps (DENSE),
	 * params.params with params.dense_opt, dense_state and dense_t. The
	 * pointers outlive the store. */
	st_algo_params_t params;
	float *dense_state;               /* rank 0's dense optimizer state (DENSE) */
	uint64_t *dense_t;
	int n_workers;                    /* train workers per rank */
} st_dist_cfg_t;

int st_dist_create(st_dist_t **out, const st_dist_cfg_t *cfg);
/* Stops the service (NULL-safe). Call st_dist_finish first for a clean end. */
void st_dist_destroy(st_dist_t *d);

int st_dist_rank(const st_dist_t *d);
int st_dist_size(const st_dist_t *d);
st_net_t *st_dist_net(const st_dist_t *d);
/* The owner rank of key. */
int st_dist_owner(const st_dist_t *d, uint64_t key);
/* The ranks that own rows (0 .. owners-1). */
int st_dist_owners(const st_dist_t *d);

/* Waits until sync steps 0..steps-1 are applied to this rank's own shard
 * (the pushes of every rank for them arrived and were summed), so that a
 * copy of the shard holds exactly those steps (multi-process checkpoints).
 * At once on a rank that owns no shard (rank >= owners). ST_OK, or
 * ST_EPEER when a rank died meanwhile. Any thread. */
int st_dist_wait_applied(st_dist_t *d, uint64_t steps);

/* Row copies of a batch: rows[i] = buf + i * stride floats for the keys
 * admitted (emb+wide floats filled, optimizer state zero), NULL for keys
 * not admitted. tokens (may be NULL): [size] each owner's buffered step
 * count when it served the pull (st_dist_push_buf), 0 for owners not
 * asked. need_step: wait until sync steps 0..need_step-1 are
 * applied at every owner (0: no wait). create: a train batch (rows are
 * created, subject to admission). stamp: the TTL clock. One thread at a
 * time (the pull stage). stop(stop_arg) (may be NULL) is asked while
 * waiting: nonzero gives up with ST_ECANCELED (the pipeline stopped, say
 * because this rank's train stage failed). ST_OK, ST_EPEER, ST_ENOMEM. */
int st_dist_pull(st_dist_t *d, const uint64_t *keys, const uint8_t *table, uint32_t n,
		 uint64_t need_step, int create, uint32_t stamp, float *buf, size_t stride,
		 float **rows, uint64_t *tokens, int (*stop)(void *arg), void *stop_arg);

/* A train worker's rows for one step (asynchronous policies with
 * ST_SYNC_STEP_ROWS; steprows.c has why): the current emb+wide floats of
 * keys[idx[q]] (table table[idx[q]]), q < n, into buf + idx[q] * stride,
 * ok[idx[q]] = 1; ok[idx[q]] = 0 (buf untouched) where the owner no longer
 * has the row. Never creates rows, never waits for steps; each owner
 * answers after applying the pushes this rank sent it before. stamp: the
 * TTL clock. Thread-safe: one caller per st_dist_stepbuf_t. ST_OK,
 * ST_EPEER (an owner died or sent a malformed answer), ST_ENOMEM. */
typedef struct st_dist_stepbuf st_dist_stepbuf_t;
int st_dist_pull_step(st_dist_t *d, st_dist_stepbuf_t *s, const uint64_t *keys,
		      const uint8_t *table, const uint32_t *idx, uint32_t n, uint32_t stamp,
		      float *buf, size_t stride, uint8_t *ok);
/* The scratch and reply channel of train worker w (0 <= w < 1024) for
 * st_dist_pull_step; the caller owns it and destroys it (NULL-safe) before
 * d. NULL when out of memory or w is out of range. */
st_dist_stepbuf_t *st_dist_stepbuf_create(const st_dist_t *d, int w);
void st_dist_stepbuf_destroy(st_dist_stepbuf_t *s);

/* Prefetched step reads (dist.prefetch; steprows.c has why): at most this
 * many reads of one worker in flight while it trains, besides the one it
 * waits for. */
#define ST_DIST_STEP_MAX_AHEAD 8

/* Issues a step read of keys[idx[q]] (table[idx[q]]), q < n, and returns
 * without waiting: the other owners answer while the caller trains. The
 * keys are copied (keys, table and idx need not outlive the call); buf
 * (q-th row at buf + q * stride) and ok[q] are the caller's and are
 * written by the st_dist_step_wait that completes this read, so they must
 * stay valid and unread until then. The row sees the pushes this rank
 * sent its owner before the submit (not those after: up to the reads in
 * flight of staleness more); keys this rank owns are read at the wait.
 * At most ST_DIST_STEP_MAX_AHEAD + 1 reads in flight per stepbuf (more is
 * misuse: an assert, ST_EINVAL). Not mixed with st_dist_pull_step on one
 * stepbuf while reads are in flight. ST_OK, ST_EPEER, ST_ENOMEM; on an
 * error call st_dist_step_cancel. One thread per stepbuf. */
int st_dist_step_submit(st_dist_t *d, st_dist_stepbuf_t *s, const uint64_t *keys,
			const uint8_t *table, const uint32_t *idx, uint32_t n, uint32_t stamp,
			float *buf, size_t stride, uint8_t *ok);
/* Completes the oldest read in flight (FIFO): its own keys from this
 * rank's tables, the other owners' answers (waiting for those not yet
 * here: counted in stats.step_waits). ST_OK, ST_EPEER, ST_ENOMEM; the read
 * is no longer in flight either way (on an error, cancel the rest). */
int st_dist_step_wait(st_dist_t *d, st_dist_stepbuf_t *s);
/* Drops the reads in flight, receiving and discarding the answers they
 * are owed (so the next read does not take them for its own). Returns
 * once every owner answered, died, or the network was cancelled. */
void st_dist_step_cancel(st_dist_t *d, st_dist_stepbuf_t *s);
/* Reads in flight (submitted, not yet waited for). */
int st_dist_step_inflight(const st_dist_stepbuf_t *s);

/* One step's row gradients of this rank: grad + i * gstride for keys[i]
 * (dim of its table floats). sync: step `step` of a synchronous policy
 * (every rank calls this for every step, n may be 0); else applied on
 * arrival. t: the sparse optimizer's step number. One thread at a time. */
int st_dist_push(st_dist_t *d, uint64_t step, int sync, uint64_t t, const uint64_t *keys,
		 const uint8_t *table, const float *grad, size_t gstride, uint32_t n);

/* Asynchronous dense training (rank 0 keeps the parameters): sends a dense
 * gradient (n_examples > 0) to rank 0, which applies it, and receives the
 * current parameters into params. With grad NULL, only fetches. Thread-safe
 * per worker index w (its own reply channel). */
int st_dist_dense(st_dist_t *d, int w, const float *grad, float *params, uint64_t *version);

/* Gradient buffers (GBA, ops/algo/gba.h; ops/dist/psbuf.c runs them):
 * each worker gradient is one contribution to rank 0's dense buffer and to
 * every owner's row buffer; each buffer applies a global step per M
 * contributions. */
typedef struct st_dist_buf {
	uint32_t M;            /* contributions per global step */
	uint32_t tol;          /* staleness tolerance iota; ST_ALGO_GBA_NO_TOL: none */
	int perid;             /* per-ID tags, rows averaged over their touchers;
				* 0: rows averaged over the step (BSP) */
} st_dist_buf_t;

/* One worker gradient's rows to every owner (an empty message to owners
 * it has no keys of): tokens[o] as st_dist_pull gave it for the batch.
 * One thread at a time. */
int st_dist_push_buf(st_dist_t *d, const st_dist_buf_t *b, const uint64_t *tokens,
		     const uint64_t *keys, const uint8_t *table, const float *grad,
		     size_t gstride, uint32_t n);

/* One worker gradient's dense part to rank 0's buffer, with the token of
 * the parameters it was computed with (grad NULL: only a fetch); params =
 * rank 0's parameters after it, *next = the token they carry, *age = the
 * contribution's staleness, *dropped = 1 when beyond the tolerance.
 * Thread-safe per worker index w. */
int st_dist_dense_buf(st_dist_t *d, int w, const st_dist_buf_t *b, const float *grad,
		      uint64_t token, float *params, uint64_t *next, uint64_t *age, int *dropped);

/* Bounded staleness (Hop-BS; ops/algo/hopclock.h, ops/dist/hop.c): as
 * st_dist_dense, with rank 0's clock rule — the reply comes once this
 * worker is at most b gradients ahead of the slowest active worker of any
 * rank. */
int st_dist_dense_hop(st_dist_t *d, int w, uint32_t b, const float *grad, float *params,
		      uint64_t *version);
/* Under the clock rule (or, worker 0, the backup-worker quorum): worker w
 * has no minibatch left in this batch (it stops counting as the slowest
 * until its next st_dist_dense_hop). */
int st_dist_idle(st_dist_t *d, int w);

/* Backup workers across ranks (Hop-BW; ops/algo/hopclock.h, ops/dist/hop.c;
 * ranks are the units): this rank's gradient of the step whose parameters
 * it read (token) to rank 0, which closes a step once all but b of the
 * active ranks have sent theirs and drops those that come after. Returns
 * once the step closed (or at once when late: *late = 1); params = rank
 * 0's parameters then, *next = their token, *K = the ranks kept in the
 * step (0 when late). grad NULL: only a fetch. One thread at a time. */
int st_dist_dense_bw(st_dist_t *d, uint32_t b, const float *grad, uint64_t token,
		     float *params, uint64_t *next, uint32_t *K, int *late);
/* A kept rank's row gradients of backup-worker step `step` to every owner
 * (the owner applies the step once the step's K kept ranks' lists are in,
 * summed in rank order). One thread at a time. */
int st_dist_push_quorum(st_dist_t *d, uint64_t step, uint64_t t, uint32_t K,
			const uint64_t *keys, const uint8_t *table, const float *grad,
			size_t gstride, uint32_t n);

/* Every push this rank sent is applied (or, buffered, in its owner's
 * buffer): a FLUSH to each other owner comes back after the pushes sent
 * before it. A multi-process checkpoint's cut under a policy whose pushes
 * are applied on arrival (dist_ckpt.c). ST_OK, or ST_EPEER when an owner
 * died. One thread at a time, not the service thread. */
int st_dist_flush(st_dist_t *d);
/* Rank 0, once every rank's contributions have arrived (every rank has
 * flushed): the gradient buffers' partial steps (GBA, psbuf.c), here and at
 * every other owner. ST_OK at once when nothing is buffered. */
int st_dist_flush_buffers(st_dist_t *d);

/* End of training: waits until this rank's pushes are applied, tells rank
 * 0, and keeps serving until every live rank has done the same. Returns
 * ST_OK (and *lost = ranks that died so far, all non-owners), or ST_EPEER
 * if an owner died. Called again at the end of the job (each call is a
 * round), so that no rank leaves while another may still pull from it. */
int st_dist_finish(st_dist_t *d, int *lost);

/* st.sync.auto across processes (every rank calls these at the same batch,
 * after the same vote):
 *
 * st_dist_sync_end: a synchronous phase ended after `steps` sync steps
 * (the same on every rank). A pull made for a later step — prefetched
 * before the switch, it trains under the asynchronous policy — no longer
 * waits for steps that will not come: it is answered once step steps-1 is
 * applied. Local; no message.
 *
 * st_dist_sync_begin: an asynchronous phase ends (a collective): every
 * rank's pushes are applied, rank 0 applies the gradient buffers' partial
 * steps at every owner and resets the hop clocks, then broadcasts its
 * dense parameters, dense optimizer state and step count — the
 * authoritative ones of the asynchronous policies — to every rank's
 * replica, and pulls wait for sync steps again. A rank that died makes it
 * fail (ST_EPEER). */
int st_dist_sync_end(st_dist_t *d, uint64_t steps);
int st_dist_sync_begin(st_dist_t *d);

/* An order-independent digest of the rows this rank owns (XOR of XXH3 of
 * key + floats) and their count, for comparing runs. */
uint64_t st_dist_rows_digest(st_table_t *const *tables, int n_tables, uint64_t *rows);

typedef struct st_dist_stats {
	uint64_t bytes_sent, msgs_sent;
	uint64_t bytes_coll;              /* of bytes_sent: the collectives' (dense) */
	uint64_t pulls_remote, keys_remote, keys_local;
	/* Round trips on a step's critical path: pulls that asked at least
	 * one other rank (one round trip, however many owners answer in
	 * parallel), dense exchanges with rank 0 (async, gba, bsp, hop_*:
	 * gradient out, parameters back; rank 0's own workers none) plus the
	 * collectives' rounds (st_net_coll_rounds). One-way pushes are not
	 * counted. */
	uint64_t round_trips;
	uint64_t pushes, rows_pushed;     /* received and applied by this owner */
	uint64_t buf_steps;               /* buffered global steps applied here */
	uint64_t buf_rows_dropped;        /* row gradients dropped as too stale here */
	/* Train workers' step reads that asked another rank (each one of
	 * the round trips above); of them, those issued while an earlier
	 * read of the same worker was in flight (prefetched, dist.prefetch),
	 * and those whose answer the worker had to wait for (not there within
	 * the network's ~50 us poll when it reached the minibatch; without
	 * prefetch, every one). */
	uint64_t step_reads, step_reads_ahead, step_waits;
} st_dist_stats_t;
void st_dist_stats(const st_dist_t *d, st_dist_stats_t *out);

#endif
