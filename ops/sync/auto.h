/*
 * auto.h — st.sync.auto's controller: which of two policies a job should
 * train with while its workers' speeds agree or diverge (the GBA paper's
 * tuning-free switch between synchronous and asynchronous training,
 * gba-global-batch-aggregation.txt §1 and §5.2; docs/distributed.md,
 * "auto across processes").
 *
 * The controller only decides. The trainer records every worker's step
 * times (st_auto_record), asks after each train batch, and after each
 * empty step of a multi-process drain (st_auto_tick), and swaps the policy
 * when the answer differs from the current one (st_auto_switched then
 * logs it). It knows no policy by name: its two sub-policies come from
 * the job, and which ones may be used across processes is a capability of
 * the registry (ST_POL_AUTO_SYNC / ST_POL_AUTO_ASYNC).
 *
 * One core, two transports. The decision is a vote: every voter gives the
 * fastest and slowest of its workers' mean step times over the last
 * `window` minibatches of each (and whether it is out of data); the
 * slowest of any voter against the fastest of any voter decides. In one
 * process there is one voter — the threads transport, whose vote is the
 * process's own and is taken after every batch. Across processes every
 * rank is a voter — the ranks transport, an allgather over the job's
 * network, taken every `window` batches or steps so that ranks meet at the
 * same points.
 *
 * Threads: st_auto_record from worker w's thread (worker w only, each
 * sample belongs to its worker); everything else from the one thread that
 * runs the trainer's batches (worker 0), between batches, when no worker
 * records: the trainer's batch barriers order the samples before the
 * decision.
 */
#ifndef ST_SYNC_AUTO_H
#define ST_SYNC_AUTO_H

#include <stddef.h>
#include <stdint.h>

#include "lang/job.h"

struct st_net;

/* How the voters of a decision exchange their votes. */
typedef struct st_auto_transport {
	/* Voters (1: this process alone). */
	int n;
	/* Every voter's len bytes, mine included: out[r * len ..] gets voter
	 * r's. Called by every voter in the same order, one thread per voter.
	 * ST_OK, or an error (a voter died: ST_EPEER). */
	int (*allgather)(void *ctx, const void *mine, size_t len, void *out);
	void *ctx;
	/* 1: the voters meet every `window` ticks (ranks must vote at the same
	 * points); 0: every tick decides (one voter, nothing to wait for). */
	int per_window;
	/* Ticks since the voters last met. The meeting schedule belongs to
	 * the transport, not to one controller: it goes on across the
	 * controllers of successive phases, as every rank counts the same
	 * ticks whatever phase it is in. */
	uint32_t tick;
} st_auto_transport_t;

/* One process: the voter is this process, deciding after every batch. */
void st_auto_transport_threads(st_auto_transport_t *out);
/* Across processes: every rank of net votes (st_net_allgather) every
 * `window` ticks. net must outlive the controllers using it. */
void st_auto_transport_ranks(st_auto_transport_t *out, struct st_net *net);

typedef struct st_auto st_auto_t;

/* 1 when cfg names a meta policy (ST_POL_META: st.sync.auto), else 0. */
int st_auto_is_meta(const st_sync_cfg_t *cfg);

/* The first policy name of a meta cfg's sub-policies (their defaults
 * included) that st_sync_find does not know, or NULL. */
const char *st_auto_missing(const st_sync_cfg_t *cfg);

/* Whether meta cfg can run across processes: its synchronous side has
 * ST_POL_AUTO_SYNC and its asynchronous side ST_POL_AUTO_ASYNC; logs why
 * not. */
int st_auto_dist_ok(const st_sync_cfg_t *cfg);

/* A controller for meta cfg over n_workers workers: deep copies of its two
 * sub-policies (defaults "allreduce" and "async"), window (default 20,
 * clamped to 1..1024) and threshold (default 1.5). The current policy is
 * sub-policy 0. tp is borrowed (it must outlive the controller; successive
 * controllers may share it). ST_OK or ST_ENOMEM; the caller destroys
 * (NULL-safe). */
int st_auto_create(st_auto_t **out, const st_sync_cfg_t *cfg, int n_workers,
		   st_auto_transport_t *tp);
void st_auto_destroy(st_auto_t *a);

/* Sub-policy i (0: while speeds agree, 1: while they diverge), owned by a. */
const st_sync_cfg_t *st_auto_policy(const st_auto_t *a, int i);
/* The sub-policy the controller runs now (0 or 1). */
int st_auto_current(const st_auto_t *a);
/* 1 when the voters are ranks (st_auto_transport_ranks). */
int st_auto_across(const st_auto_t *a);

/* Forgets every worker's samples: after any policy swap, so a decision
 * sees only step times of the policy running now. */
void st_auto_restart(st_auto_t *a);

/* Records one step time (seconds) of worker w. Worker w's thread. */
void st_auto_record(st_auto_t *a, int w, double secs);

/* A decision: want (0 or 1) differs from st_auto_current when the policy
 * should switch; ratio = slowest / fastest mean step time; all_done = every
 * voter said it is out of data (then training is over). */
typedef struct st_auto_verdict {
	int want;
	double ratio;
	int all_done;
} st_auto_verdict_t;

/* After a train batch (done = 0) or an empty drain step of a rank out of
 * data (done = 1): counts a tick and votes when one is due (threads: every
 * tick; ranks: every window-th). batch and now (the current policy's name)
 * are for the log. ST_OK and *v (want = current when no vote was due);
 * an error when the vote failed (logged). */
int st_auto_tick(st_auto_t *a, int done, uint64_t batch, const char *now,
		 st_auto_verdict_t *v);
/* Votes now, whatever the count (a rank out of data in an asynchronous
 * phase votes until every rank is). As st_auto_tick. */
int st_auto_vote(st_auto_t *a, int done, uint64_t batch, const char *now,
		 st_auto_verdict_t *v);

/* The trainer switched from policy `from` to `to` on v's word after batch
 * `batch`: logs it and makes v->want the current sub-policy. */
void st_auto_switched(st_auto_t *a, const st_auto_verdict_t *v, uint64_t batch,
		      const char *from, const char *to);

#endif
