/*
 * dist_ckpt.c — checkpoints of a multi-process job (docs/distributed.md,
 * "Checkpoints of multi-process jobs"; one process: checkpoint.c), under
 * every policy with the dist-checkpoint capability (today all of them).
 *
 * The cut. Every rank's pull gate closes on its batch of the same job step
 * s (the gate counts steps, not read batches, checkpoint.c), so when that
 * batch reaches the dump stage this rank has trained and pushed step s and
 * pulled nothing later. A rank then
 *   1. waits until step s is applied to its own shard (lockstep policies:
 *      the owner sums every rank's row gradients of a step once all have
 *      arrived);
 *   1b. (interval checkpoints, every policy) drains: its pushes applied at
 *      their owners, then DRAINED to rank 0, which waits for every rank —
 *      a policy that does not step in lockstep has ranks still training
 *      towards s — has GBA's buffers apply their partial steps, and answers
 *      COPY (drain(), below, also covers a rank that never reaches s);
 *   2. copies its state (dense replica, its shard of every table); under a
 *      policy whose ranks keep replicas of their own (shadow, kstep) rank 0
 *      stores the mean of the ranks' copies (mean_replicas());
 *   3. meets the others (COPIED to rank 0, GO back): no rank opens its gate
 *      before every rank has copied, so no pull or push of step s + 1 can
 *      touch a shard while its owner copies it (the owner would otherwise
 *      serve another rank's pull, creating rows, in the middle of the copy);
 *   4. opens its gate: training goes on while the copies are written.
 * Rank 0 begins the checkpoint directory (ckpt-<step>.tmp) before step 3,
 * so that it exists when the others join it. Where the dense parameters
 * live: every rank's replica is the same under allreduce, hybrid and kstep
 * at a merge; rank 0's are the parameter server's under async, hop_bs,
 * gba, bsp and hop_bw (its service thread updates them); the mean of the
 * replicas under shadow and kstep between merges. Rank 0 writes them.
 *
 * The commit (two phases, messages in dist_msg.h). Every rank writes and
 * fsyncs its shard files (table-<k>.rank-<r>-of-<P>.rows) into the one
 * .tmp directory — ranks share the file system — and reports them to rank
 * 0 (REPORT: names, sizes, XXH3, its data position and counters). Rank 0
 * writes the dense file and its own shard, and only when every rank
 * reported success writes the manifest listing every file and the world
 * (size, owner function, each rank's files) and renames the directory into
 * place; then it tells every rank the outcome (RESULT). A rank that fails,
 * or dies, leaves the .tmp unpublished (rank 0 removes it; the next
 * checkpoint's begin removes a leftover), and the previous checkpoint
 * stays the newest.
 *
 * Steps at which some rank has no batch (its data ended) are skipped: that
 * rank never reaches the dump of the step. Under a lockstep policy every
 * rank knows it from the step's allgather of example counts (dist_glue.c
 * marks the batch); otherwise from the ENDED message of the rank whose
 * pass ended (drain()).
 *
 * Messages: point to point on channels CH_UP (to rank 0) and CH_DOWN (from
 * it), not collectives, because the write overlaps training, whose
 * collectives run on the train thread. Every message carries the step; one
 * of another step (left over from an abandoned checkpoint) is dropped.
 * Waits re-check that the peer is alive, so a dead rank ends them with
 * ST_EPEER.
 *
 * Exports (dist_export.c) use the same commit on channels of their own,
 * between passes.
 *
 * Threads: the dump stage's thread (interval checkpoints) or the runner's
 * (the final one, st_trainer_dist_checkpoint, and exports), never two at
 * once; the train stage's thread sends ENDED.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/algo/owner.h"
#include "ops/dist/dist.h"
#include "ops/dump/ckpt.h"
#include "ops/train/checkpoint.h"
#include "ops/train/dist_msg.h"
#include "ops/train/trainer_internal.h"
#include "ops/train/view.h"
#include "ops/view/export.h"
#include "runtime/err.h"

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The step and training pass this rank's gate closed on (an interval
 * checkpoint) or ended at (M_ENDED). */
static void gate_pos(st_trainer_t *tr, uint64_t *step, uint64_t *pass)
{
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	*step = tr->ckpt.pulled;
	*pass = tr->ckpt.npass;
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
}

/* Step 1b of an interval cut, under every policy: nothing in flight.
 * This rank's pushes are applied (or buffered) at their owners
 * (st_dist_flush); it tells rank 0 (DRAINED), which waits for every rank,
 * has the gradient buffers' partial steps applied everywhere (gba, bsp:
 * st_dist_flush_buffers, as a checkpoint of one process applies a partial
 * buffer first) and answers COPY. Only then does any rank copy: a rank
 * that copied while another still trained towards the step would hold its
 * shard without that rank's last pushes.
 *
 * Not every rank reaches every step when the policy does not step in
 * lockstep: a rank whose data ended before the step says so (ENDED, sent
 * at the end of each training pass, st__trainer_dist_ckpt_ended), and the
 * checkpoint is skipped (*in = 0). Rank 0 has the most batches of a pass
 * (batch k goes to rank k mod P), but after a resume in the middle of a
 * round another rank may have one more; rank 0's ENDED then releases it.
 * A DRAINED of another step (the ranks' step counts diverged, which a job
 * of several passes can do) is answered "skip" too, so no rank waits
 * for a step the others will not take. */
/* What a rank last said on CH_END: its pass ended (ENDED: step count,
 * pass, last timed step it knew of), or it was past a timed step when told
 * of it (MISSED). These come from other threads than the cut's (the train
 * stage's, the pull stage's) at any moment, so they travel on a channel of
 * their own and are kept here until a cut needs them: a receive that
 * dropped them as leftovers (as the commit's receives drop other messages)
 * could leave a later cut waiting for a rank that will never come. The
 * dump thread's alone. */
typedef struct ck_end {
	int ended;
	uint64_t pass, step, seen;
	uint64_t missed;       /* the last timed step it missed; 0: none */
} ck_end_t;

/* Reads what src has sent on CH_END so far into the record. NULL: no
 * memory (then nothing is known; a wait re-polls). */
static ck_end_t *poll_end(st_trainer_t *tr, int src)
{
	st_net_t *net = st_dist_net(tr->dist.d);
	if (!tr->ckpt.ended)
		tr->ckpt.ended = calloc((size_t)st_dist_size(tr->dist.d), sizeof(ck_end_t));
	ck_end_t *e = tr->ckpt.ended;
	if (!e)
		return NULL;
	for (;;) {
		void *buf;
		size_t len;
		int from;
		if (st_net_recv(net, src, CH_END, &buf, &len, &from, 0) < 0)
			break;
		const ck_msg_t *m = buf;
		if (len == sizeof *m && m->type == M_ENDED) {
			e[src].ended = 1;
			e[src].pass = m->pass_seq;
			e[src].step = (uint64_t)m->step;
			e[src].seen = m->file;
		} else if (len == sizeof *m && m->type == M_MISSED) {
			e[src].missed = (uint64_t)m->step;
		}
		free(buf);
	}
	return e + src;
}

/* Step 1b of an interval cut, under every policy: nothing in flight.
 * This rank's pushes are applied (or buffered) at their owners
 * (st_dist_flush); it tells rank 0 (DRAINED), which waits for every rank,
 * has the gradient buffers' partial steps applied everywhere (gba, bsp:
 * st_dist_flush_buffers, as a checkpoint of one process applies a partial
 * buffer first) and answers COPY. Only then does any rank copy: a rank
 * that copied while another still trained towards the step would hold its
 * shard without that rank's last pushes.
 *
 * Not every rank reaches every step when the policy does not step in
 * lockstep: a rank whose data ended before the step says so (ENDED, sent
 * at the end of each training pass, st__trainer_dist_ckpt_ended), and the
 * checkpoint is skipped (*in = 0). Rank 0 has the most batches of a pass
 * (batch k goes to rank k mod P), but after a resume in the middle of a
 * round another rank may have one more; rank 0's ENDED then releases it.
 * A DRAINED of another step (the ranks' step counts diverged, which a job
 * of several passes can do) is answered "skip" too, so no rank waits
 * for a step the others will not take. A timed checkpoint's step (rank
 * 0's AT) is also skipped when a rank was past it when told (MISSED) or
 * ended before it was told (its ENDED names another step). Waits poll the
 * two channels in turn (20 ms each). */
static int drain(st_trainer_t *tr, int *in)
{
	st_dist_t *d = tr->dist.d;
	st_net_t *net = st_dist_net(d);
	const int rank = st_dist_rank(d), P = st_dist_size(d);
	uint64_t step, pass;
	gate_pos(tr, &step, &pass);
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	const uint64_t seen = tr->ckpt.at_seen;
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	/* rank 0 named this step on its clock, and no batch count chose it */
	const int timed = tr->ckpt.secs > 0 && seen == step &&
			  !(tr->ckpt.every && step % tr->ckpt.every == 0);
	*in = 0;
	/* hop_bw: a rank at its gate sends no gradient; the others' steps
	 * close without it (it rejoins with its next one, ops/dist/hop.c). */
	if ((tr->pol.ops->flags & ST_SYNC_RANK_LOCAL) && st_dist_idle(d, 0) < 0)
		st_warn("checkpoint: could not tell rank 0 this rank is idle");
	int rc = st_dist_flush(d);
	if (rc < 0)
		return rc;
	ck_msg_t m = { .type = M_DRAINED, .ok = 1, .step = (int64_t)step, .pass_seq = pass };
	if (rank != 0) {
		if ((rc = st__ck_send(net, 0, CH_UP, &m, NULL, 0)) < 0)
			return rc;
		for (;;) {
			const ck_end_t *e = poll_end(tr, 0);
			if (e && e->ended && e->pass == pass && e->step < step)
				return ST_OK;   /* rank 0's pass ended before the step */
			ck_msg_t *a;
			rc = st__ck_try_recv(net, 0, CH_DOWN, 0.02, &a);
			if (rc == ST_EAGAIN)
				continue;
			if (rc < 0)
				return rc;
			int done = a->type == M_COPY && a->step == (int64_t)step;
			if (done)
				*in = a->ok;
			free(a);
			if (done)
				return ST_OK;
		}
	}
	int all = 1;
	int64_t *theirs = malloc(sizeof *theirs * (size_t)P);   /* -1: no answer owed */
	if (!theirs)
		return ST_ENOMEM;
	for (int r = 1; r < P && rc >= 0; r++) {
		theirs[r] = -1;
		for (;;) {
			const ck_end_t *e = poll_end(tr, r);
			if (e && ((e->ended && e->pass == pass &&
				   (e->step < step || (timed && e->seen != step))) ||
				  (timed && e->missed == step))) {
				all = 0;   /* it will not take this step */
				break;
			}
			ck_msg_t *a;
			rc = st__ck_try_recv(net, r, CH_UP, 0.02, &a);
			if (rc == ST_EAGAIN) {
				rc = ST_OK;
				continue;
			}
			if (rc < 0)
				break;
			int done = a->type == M_DRAINED;
			if (done) {
				theirs[r] = a->step;
				all &= a->step == (int64_t)step && a->pass_seq == pass;
			}
			free(a);
			if (done)
				break;
		}
	}
	if (rc >= 0 && all && (rc = st_dist_flush_buffers(d)) < 0)
		st_error("checkpoint: applying the gradient buffers' partial steps: %s",
			 st_strerror(rc));
	for (int r = 1; r < P && rc >= 0; r++) {
		if (theirs[r] < 0)
			continue;
		ck_msg_t c = { .type = M_COPY, .ok = all, .step = theirs[r] };
		rc = st__ck_send(net, r, CH_DOWN, &c, NULL, 0);
	}
	free(theirs);
	*in = all;
	return rc;
}

void st__trainer_dist_ckpt_ended(st_trainer_t *tr)
{
	st_dist_t *d = tr->dist.d;
	if (!d || !tr->ckpt.cfg || (!tr->ckpt.every && !(tr->ckpt.secs > 0)))
		return;
	st_net_t *net = st_dist_net(d);
	const int rank = st_dist_rank(d), P = st_dist_size(d);
	uint64_t step, pass;
	gate_pos(tr, &step, &pass);
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	const uint64_t seen = tr->ckpt.at_seen;
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	/* .file: the last timed checkpoint step this rank knew of */
	ck_msg_t m = { .type = M_ENDED, .ok = 1, .step = (int64_t)step, .pass_seq = pass,
		       .file = seen };
	/* A rank that is gone ends the waits by itself (the receives check). */
	if (rank != 0)
		st__ck_send(net, 0, CH_END, &m, NULL, 0);
	for (int r = 1; rank == 0 && r < P; r++)
		if (st_net_alive(net, r))
			st__ck_send(net, r, CH_END, &m, NULL, 0);
}

/* Steps a timed checkpoint is named ahead of rank 0's current one: the
 * other ranks' pulls may be ahead of rank 0's by the batches in flight
 * (lockstep policies) or more (asynchronous ones; a rank past the step
 * misses it and the checkpoint is skipped, the next one named at once). */
enum { AT_LEAD = 16 };

int st__trainer_dist_ckpt_timed(st_trainer_t *tr, uint64_t step, double now)
{
	st_dist_t *d = tr->dist.d;
	st_net_t *net = st_dist_net(d);
	const int rank = st_dist_rank(d), P = st_dist_size(d);
	if (rank == 0) {
		if (!tr->ckpt.at && now - tr->ckpt.last >= tr->ckpt.secs) {
			tr->ckpt.at = tr->ckpt.at_seen = step + AT_LEAD;
			ck_msg_t m = { .type = M_AT, .ok = 1, .step = (int64_t)tr->ckpt.at,
				       .pass_seq = tr->ckpt.npass };
			for (int r = 1; r < P; r++)
				if (st_net_alive(net, r))
					st__ck_send(net, r, CH_AT, &m, NULL, 0);
		}
	} else {
		for (;;) {   /* what rank 0 named since the last batch */
			void *buf;
			size_t len;
			int from;
			if (st_net_recv(net, 0, CH_AT, &buf, &len, &from, 0) < 0)
				break;
			const ck_msg_t *m = buf;
			if (len == sizeof *m && m->type == M_AT && m->pass_seq == tr->ckpt.npass) {
				tr->ckpt.at = tr->ckpt.at_seen = (uint64_t)m->step;
				if (tr->ckpt.at < step) {
					/* Past it already: rank 0 skips it. */
					ck_msg_t x = { .type = M_MISSED, .ok = 0, .step = m->step,
						       .pass_seq = tr->ckpt.npass };
					st__ck_send(net, 0, CH_END, &x, NULL, 0);
					tr->ckpt.at = 0;
				}
			}
			free(buf);
		}
	}
	if (tr->ckpt.at && step == tr->ckpt.at) {
		tr->ckpt.at = 0;
		return 1;
	}
	if (rank == 0 && tr->ckpt.at && step > tr->ckpt.at)
		tr->ckpt.at = 0;   /* cannot happen: rank 0 names steps ahead */
	return 0;
}

/* Step 2b of an interval cut under a policy whose ranks train replicas of
 * their own (ST_SYNC_RANK_REPLICAS: shadow, kstep between merges): the
 * checkpoint's dense parameters are the mean over the ranks of the copied
 * replicas, summed in rank order — the model the policy itself gives at
 * the end of training (shadow: "output the average of w^(i)",
 * shadowsync-background-sync.md §3.3; kstep: a merge's average). Each
 * rank's dense optimizer state stays its own; rank 0's is stored. With
 * *all = 0 (some rank did not copy) nothing is exchanged. */
static int mean_replicas(st_trainer_t *tr, st_trainer_snap_t *s, int mine, int all)
{
	st_dist_t *d = tr->dist.d;
	st_net_t *net = st_dist_net(d);
	const int rank = st_dist_rank(d), P = st_dist_size(d);
	const size_t n = s ? s->nparams : 0;
	if (rank != 0) {
		if (!mine)
			return ST_OK;
		ck_msg_t m = { .type = M_DENSE, .ok = 1, .step = -1, .n_floats = (uint32_t)n };
		int rc = st_net_send2(net, 0, CH_UP, &m, sizeof m, s->params, sizeof(float) * n);
		if (rc < 0)
			st_error("checkpoint: cannot reach rank 0: %s", st_strerror(rc));
		return rc;
	}
	if (!all)
		return ST_OK;
	for (int r = 1; r < P; r++) {
		ck_msg_t *m;
		int rc = st__ck_recv(net, r, CH_UP, M_DENSE, -1, &m);
		if (rc < 0)
			return rc;
		if (m->n_floats == n) {
			const float *f = (const float *)(m + 1);
			for (size_t j = 0; j < n; j++)
				s->params[j] += f[j];
		}
		int same = m->n_floats == n;
		free(m);
		if (!same) {
			st_error("checkpoint: rank %d's dense replica has another size", r);
			return ST_EINVAL;
		}
	}
	const float inv = 1.0f / (float)P;
	for (size_t j = 0; j < n; j++)
		s->params[j] *= inv;
	return ST_OK;
}

/* Steps 1-3 of the cut (training must not run on this rank): *s the copy
 * (NULL when this rank failed), *w rank 0's writer, *step the checkpoint's
 * step and *ok whether every rank copied and rank 0 began the directory.
 * ST_OK, or a network error (then the checkpoint is abandoned). */
static int cut(st_trainer_t *tr, const st_batch_t *last, st_trainer_snap_t **s,
	       st_ckpt_writer_t **w, int64_t *step, int *ok)
{
	st_dist_t *d = tr->dist.d;
	st_net_t *net = st_dist_net(d);
	const int rank = st_dist_rank(d), P = st_dist_size(d);
	*s = NULL;
	*w = NULL;
	int mine = 1, rc;
	char err[512] = "";
	uint64_t steps = __atomic_load_n(&tr->dist.clock.ssteps, __ATOMIC_RELAXED);
	if ((rc = st_dist_wait_applied(d, steps)) < 0)
		return rc;
	if (last) {
		int in;
		if ((rc = drain(tr, &in)) < 0)
			return rc;
		if (!in) {
			*ok = -1;   /* skipped: some rank has no batch for this step */
			return ST_OK;
		}
	}
	const int replicas = last && (tr->pol.ops->flags & ST_SYNC_RANK_REPLICAS);
	*step = (int64_t)tr->batches;
	if (rank == 0 && (rc = st_ckpt_begin(tr->ckpt.cfg->dir, *step, w, err, sizeof err)) < 0) {
		st_error("checkpoint after step %" PRId64 ": %s", *step, err);
		mine = 0;
	}
	if (mine && (rc = st_trainer_snapshot(tr, last, s)) < 0) {
		st_error("checkpoint after step %" PRId64 ": cannot copy this rank's state: %s",
			 *step, st_strerror(rc));
		mine = 0;
	}
	ck_msg_t m = { .type = M_COPIED, .ok = mine, .step = -1 };
	if (rank != 0) {
		ck_msg_t *go;
		if ((rc = st__ck_send(net, 0, CH_UP, &m, NULL, 0)) < 0 ||
		    (replicas && (rc = mean_replicas(tr, *s, mine, 0)) < 0) ||
		    (rc = st__ck_recv(net, 0, CH_DOWN, M_GO, -1, &go)) < 0)
			return rc;
		*ok = mine && go->ok;
		*step = go->step;
		free(go);
		return ST_OK;
	}
	int all = mine;
	for (int r = 1; r < P; r++) {
		ck_msg_t *c;
		if ((rc = st__ck_recv(net, r, CH_UP, M_COPIED, -1, &c)) < 0)
			return rc;
		all &= c->ok;
		free(c);
	}
	if (replicas && mean_replicas(tr, *s, mine, all) < 0)
		all = 0;   /* the others still get GO (not ok): no rank waits */
	m = (ck_msg_t){ .type = M_GO, .ok = all, .step = *step };
	for (int r = 1; r < P; r++)
		if ((rc = st__ck_send(net, r, CH_DOWN, &m, NULL, 0)) < 0)
			return rc;
	*ok = all;
	return ST_OK;
}

/* A rank's REPORT: its files and its counters. */
static ck_msg_t report_of(const st_trainer_snap_t *s, int ok, int64_t step, size_t nf)
{
	return (ck_msg_t){ .type = M_REPORT, .ok = ok, .step = step, .pass_seq = s->pass_seq,
			   .file = s->src_file, .rec = s->src_rec, .examples = s->examples,
			   .pass_examples = s->pass_examples, .n_files = (uint32_t)nf };
}

/* Rank 0: the job's counters from a rank's report into s (first: its
 * own, which starts the sums): examples summed; the data position of the
 * rank whose batch came last in the stream, which is where the job
 * stands, and the job's read batches up to it. */
static void fold(st_trainer_snap_t *s, const ck_msg_t *r, int first)
{
	if (first) {
		s->examples = s->pass_examples = 0;
		s->pass_seq = 0;
	}
	s->examples += r->examples;
	s->pass_examples += r->pass_examples;
	if (first || r->pass_seq > s->pass_seq) {
		s->pass_seq = r->pass_seq;
		s->src_file = r->file;
		s->src_rec = r->rec;
	}
	s->pass_batches = s->pass_seq;
}

/* Phase two: writes this rank's part of the checkpoint cut() made, and on
 * rank 0 commits it once every rank reported. *published: the outcome,
 * the same on every rank. ST_OK or a network error. */
static int write_part(st_trainer_t *tr, st_trainer_snap_t *s, st_ckpt_writer_t *w0,
		      int64_t step, int *published)
{
	st_dist_t *d = tr->dist.d;
	st_net_t *net = st_dist_net(d);
	const int rank = st_dist_rank(d), P = st_dist_size(d);
	const st_trainer_ckpt_cfg_t *cfg = tr->ckpt.cfg;
	char err[512] = "";
	int rc, ok = 1;
	*published = 0;
	st_ckpt_writer_t *w = w0;
	if (rank != 0 && st_ckpt_join(cfg->dir, step, &w, err, sizeof err) < 0) {
		st_error("checkpoint %" PRId64 ": %s", step, err);
		ok = 0;
	}
	if (ok) {
		s->step = step;
		rc = st__trainer_snap_rows(s, w, rank, P);
		if (rc >= 0 && rank == 0)
			rc = st__trainer_snap_dense(tr, s, w);
		if (rc < 0) {
			st_error("checkpoint %" PRId64 ": rank %d's files: %s", step, rank,
				 st_ckpt_error(w)[0] ? st_ckpt_error(w) : st_strerror(rc));
			ok = 0;
		}
	}
	size_t nf = 0;
	ck_file_t *files = ok ? st__ck_files_of(w, &nf) : NULL;
	if (ok && !files)
		ok = 0;
	if (rank != 0) {
		ck_msg_t m = report_of(s, ok, step, nf);
		ck_msg_t *res = NULL;
		rc = st__ck_send(net, 0, CH_UP, &m, files, nf);
		if (rc >= 0)
			rc = st__ck_recv(net, 0, CH_DOWN, M_RESULT, step, &res);
		else if (ok)
			ok = 0;
		if (rc >= 0)
			*published = res->ok;
		else if (ok)
			*published = -1;   /* reported, then rank 0 went: unknown here */
		if (*published)
			tr->ckpt.step = step;
		free(res);
		free(files);
		st_ckpt_writer_destroy(w);
		return rc;
	}
	/* Rank 0: every rank's report, then the manifest, then the outcome. */
	world_t wd = { .m = { .world_size = P, .owners = st_dist_owners(d),
			      .owner_salt = st_algo_owner_salt() } };
	wd.m.parts = calloc((size_t)P, sizeof *wd.m.parts);
	wd.m.n_parts = (size_t)P;
	if (!wd.m.parts)
		ok = 0;
	ck_msg_t me = report_of(s, ok, step, nf);
	if (ok) {
		fold(s, &me, 1);
		ok = st__ck_world_add(&wd, 0, files, nf) >= 0;
	}
	rc = ST_OK;
	for (int r = 1; r < P && rc >= 0; r++) {
		ck_msg_t *rep;
		if ((rc = st__ck_recv(net, r, CH_UP, M_REPORT, step, &rep)) < 0)
			break;
		const ck_file_t *rf = (const ck_file_t *)(rep + 1);
		if (!rep->ok) {
			st_error("checkpoint %" PRId64 ": rank %d could not write its shard; the "
				 "checkpoint is not published", step, r);
			ok = 0;
		}
		if (ok) {
			fold(s, rep, 0);
			ok = st__ck_world_add(&wd, r, rf, rep->n_files) >= 0;
			for (uint32_t i = 0; ok && i < rep->n_files; i++)
				ok = st_ckpt_add_entry(w, rf[i].name, rf[i].bytes, rf[i].xxh3) >= 0;
		}
		free(rep);
	}
	if (rc >= 0 && ok) {
		int c = st__trainer_snap_commit(tr, s, cfg, w, &wd.m);
		if (c < 0)
			st_error("checkpoint %" PRId64 " not written: %s", step, st_ckpt_error(w));
		*published = c >= 0;
	} else if (rc >= 0 && st_ckpt_error(w)[0]) {
		st_error("checkpoint %" PRId64 " not written: %s", step, st_ckpt_error(w));
	}
	ck_msg_t res = { .type = M_RESULT, .ok = *published, .step = step };
	for (int r = 1; r < P && rc >= 0; r++)
		rc = st__ck_send(net, r, CH_DOWN, &res, NULL, 0);
	st__ck_world_free(&wd);
	free(files);
	/* The caller destroys w0 (an unpublished .tmp goes with it). */
	return rc;
}

int st__trainer_dist_checkpoint_after(st_trainer_t *tr, const st_batch_t *b)
{
	if (b->ckpt == ST__CKPT_SKIP) {
		/* Some rank has no batch in this step: it never gets here. */
		st__trainer_ckpt_open_gate(tr, 0);
		st_info("checkpoint after step %llu skipped: not every rank had data for it",
			(unsigned long long)tr->batches);
		return ST_OK;
	}
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	int broken = tr->ckpt.gate_broken;
	tr->ckpt.snap_copying = !broken;
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	if (broken) {
		/* Stopping: the other ranks' waits end when this one leaves. */
		st__trainer_ckpt_open_gate(tr, 0);
		return ST_OK;
	}
	double t0 = mono();
	st_trainer_snap_t *s = NULL;
	st_ckpt_writer_t *w = NULL;
	int64_t step = (int64_t)tr->batches;   /* cut() names it */
	int ok = 0, published = 0;
	int rc = cut(tr, b, &s, &w, &step, &ok);
	double t1 = mono();
	pthread_mutex_lock(&tr->ckpt.gate_mu);
	tr->ckpt.snap_copying = 0;
	pthread_mutex_unlock(&tr->ckpt.gate_mu);
	st__trainer_ckpt_open_gate(tr, 0);   /* every rank copied: training goes on */
	if (rc >= 0 && ok < 0) {
		st_info("checkpoint after step %lld skipped: not every rank had data for it",
			(long long)step);
		st_ckpt_writer_destroy(w);
		st_trainer_snap_release(tr, s);
		return ST_OK;
	}
	if (rc >= 0 && ok > 0)
		rc = write_part(tr, s, w, step, &published);
	double t2 = mono();
	st_ckpt_writer_destroy(w);
	st_trainer_snap_release(tr, s);
	if (tr->metrics) {
		st_metrics_add(tr->metrics, "ckpt.stall_s", t1 - t0);
		st_metrics_add(tr->metrics, "ckpt.write_s", t2 - t1);
		st_metrics_add(tr->metrics, published > 0 ? "ckpt.written" : "ckpt.failed", 1);
	}
	if (published < 0) {
		st_error("checkpoint after step %lld: rank 0 is gone before saying whether it "
			 "published it (this rank's shard was written); --resume takes it if it is "
			 "complete", (long long)step);
	} else if (!published) {
		st_error("checkpoint after step %lld not written; training goes on, the previous "
			 "checkpoint in %s is intact", (long long)step, tr->ckpt.cfg->dir);
		tr->ckpt.errors++;
	}
	/* A network error is a dead rank: training fails on its own. */
	return ST_OK;
}

int st_trainer_dist_checkpoint(st_trainer_t *tr, int64_t *step, char *err, size_t errlen)
{
	st_trainer_snap_t *s = NULL;
	st_ckpt_writer_t *w = NULL;
	int ok = 0, published = 0;
	*step = (int64_t)tr->batches;
	int rc = cut(tr, NULL, &s, &w, step, &ok);
	if (rc >= 0 && ok > 0)
		rc = write_part(tr, s, w, *step, &published);
	st_ckpt_writer_destroy(w);
	st_trainer_snap_destroy(s);
	if (rc < 0 && published < 0)
		snprintf(err, errlen, "rank 0 is gone before saying whether it published the "
			 "checkpoint of step %lld (this rank's shard was written): --resume takes it "
			 "if it is complete", (long long)*step);
	else if (rc < 0)
		snprintf(err, errlen, "a rank is gone: %s", st_strerror(rc));
	else if (!published)
		snprintf(err, errlen, "a rank could not copy or write its part (see above)");
	return rc < 0 ? rc : published ? ST_OK : ST_EIO;
}
