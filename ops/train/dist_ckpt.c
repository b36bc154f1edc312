/*
 * dist_ckpt.c — checkpoints of a multi-process job (docs/distributed.md,
 * "Checkpoints of multi-process jobs"; one process: checkpoint.c). Only
 * policies with the dist-checkpoint capability get here (the runner
 * refuses the others): today allreduce, whose ranks step in lockstep.
 *
 * The cut. Every rank's pull gate closes on its batch of the same job step
 * s (the gate counts steps, not read batches, checkpoint.c), so when that
 * batch reaches the dump stage every rank has trained and pushed step s
 * and pulled nothing later. A rank then
 *   1. waits until step s is applied to its own shard (the owner sums every
 *      rank's row gradients of a step once all have arrived),
 *   2. copies its state (dense replica, its shard of every table),
 *   3. meets the others (COPIED to rank 0, GO back): no rank opens its gate
 *      before every rank has copied, so no pull or push of step s + 1 can
 *      touch a shard while its owner copies it (the owner would otherwise
 *      serve another rank's pull, creating rows, in the middle of the copy);
 *   4. opens its gate: training goes on while the copies are written.
 * Rank 0 begins the checkpoint directory (ckpt-<step>.tmp) before step 3,
 * so that it exists when the others join it.
 *
 * The commit (two phases). Every rank writes and fsyncs its shard files
 * (table-<k>.rank-<r>-of-<P>.rows) into the one .tmp directory — ranks
 * share the file system — and reports them to rank 0 (REPORT: names,
 * sizes, XXH3, its data position and counters). Rank 0 writes the dense
 * file and its own shard, and only when every rank reported success writes
 * the manifest listing every file and the world (size, owner function,
 * each rank's files) and renames the directory into place; then it tells
 * every rank the outcome (RESULT). A rank that fails, or dies, leaves the
 * .tmp unpublished (rank 0 removes it; the next checkpoint's begin removes
 * a leftover), and the previous checkpoint stays the newest.
 *
 * Steps at which some rank has no batch (its data ended) are skipped: that
 * rank never reaches the dump of the step. Every rank knows it from the
 * step's allgather of example counts (dist_glue.c marks the batch).
 *
 * Messages: point to point on channels CH_UP (to rank 0) and CH_DOWN (from
 * it), not collectives, because the write overlaps training, whose
 * collectives run on the train thread. Every message carries the step; one
 * of another step (left over from an abandoned checkpoint) is dropped.
 * Waits re-check that the peer is alive, so a dead rank ends them with
 * ST_EPEER.
 *
 * Exports (st_trainer_dist_export, below) use the same commit on channels
 * of their own, between passes.
 *
 * Threads: the dump stage's thread (interval checkpoints) or the runner's
 * (the final one, st_trainer_dist_checkpoint, and exports), never two at
 * once.
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
#include "ops/train/trainer_internal.h"
#include "ops/train/view.h"
#include "ops/view/export.h"
#include "runtime/err.h"

enum { CH_UP = 0x4000, CH_DOWN = 0x4001 };
enum { M_COPIED = 1, M_GO, M_REPORT, M_RESULT };
enum { CK_NAME_MAX = 64 };

typedef struct ck_msg {
	uint32_t type;
	int32_t ok;            /* 1: this rank's part went well */
	int64_t step;          /* the checkpoint's step (rank 0's GO names it) */
	/* REPORT: what the manifest needs of this rank */
	uint64_t pass_seq;     /* global batches of the pass up to its last one */
	uint64_t file, rec;    /* its data position after that batch */
	uint64_t examples, pass_examples;
	uint32_t n_files, pad;
} ck_msg_t;

typedef struct ck_file {
	char name[CK_NAME_MAX];
	uint64_t bytes, xxh3;
} ck_file_t;

static int send_msg(st_net_t *net, int dst, uint32_t ch, const ck_msg_t *m,
		    const ck_file_t *f, size_t nf)
{
	int rc = st_net_send2(net, dst, ch, m, sizeof *m, f, sizeof *f * nf);
	if (rc < 0)
		st_error("checkpoint: cannot reach rank %d: %s", dst, st_strerror(rc));
	return rc;
}

/* The next message of `type` and `step` from src (the caller frees *out);
 * others are leftovers of an abandoned checkpoint and go. */
static int recv_msg(st_net_t *net, int src, uint32_t ch, uint32_t type, int64_t step,
		    ck_msg_t **out)
{
	for (;;) {
		void *buf;
		size_t len;
		int from;
		int rc = st_net_recv(net, src, ch, &buf, &len, &from, 0.5);
		if (rc == ST_EAGAIN) {
			if (!st_net_alive(net, src))
				rc = ST_EPEER;
			else
				continue;
		}
		if (rc < 0) {
			st_error("checkpoint: waiting for rank %d: %s", src, st_strerror(rc));
			return rc;
		}
		ck_msg_t *m = buf;
		if (len >= sizeof *m && m->type == type && (step < 0 || m->step == step) &&
		    len == sizeof *m + sizeof(ck_file_t) * (size_t)m->n_files) {
			*out = m;
			return ST_OK;
		}
		free(buf);
	}
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
		if ((rc = send_msg(net, 0, CH_UP, &m, NULL, 0)) < 0 ||
		    (rc = recv_msg(net, 0, CH_DOWN, M_GO, -1, &go)) < 0)
			return rc;
		*ok = mine && go->ok;
		*step = go->step;
		free(go);
		return ST_OK;
	}
	int all = mine;
	for (int r = 1; r < P; r++) {
		ck_msg_t *c;
		if ((rc = recv_msg(net, r, CH_UP, M_COPIED, -1, &c)) < 0)
			return rc;
		all &= c->ok;
		free(c);
	}
	m = (ck_msg_t){ .type = M_GO, .ok = all, .step = *step };
	for (int r = 1; r < P; r++)
		if ((rc = send_msg(net, r, CH_DOWN, &m, NULL, 0)) < 0)
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

/* Rank 0's view of the world it records: each rank's files (a part per
 * rank, in rank order) and the names they point to. */
typedef struct world {
	st_manifest_t m;
	char **names;          /* every part's file names (one allocation each) */
	size_t n_names;
} world_t;

static void world_free(world_t *wd)
{
	for (size_t i = 0; i < wd->n_names; i++)
		free(wd->names[i]);
	free(wd->names);
	for (size_t i = 0; i < wd->m.n_parts; i++)
		free(wd->m.parts[i].files);
	free(wd->m.parts);
}

static int world_add(world_t *wd, int rank, const ck_file_t *f, size_t nf)
{
	st_manifest_part_t *pt = &wd->m.parts[rank];
	pt->rank = rank;
	pt->files = calloc(nf ? nf : 1, sizeof *pt->files);
	char **nn = realloc(wd->names, sizeof *nn * (wd->n_names + nf + 1));
	if (!pt->files || !nn)
		return ST_ENOMEM;
	wd->names = nn;
	for (size_t i = 0; i < nf; i++) {
		char *n = strndup(f[i].name, CK_NAME_MAX - 1);
		if (!n)
			return ST_ENOMEM;
		wd->names[wd->n_names++] = n;
		pt->files[pt->n_files++] = n;
	}
	return ST_OK;
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

/* The files this rank wrote, as a message's list (malloc'ed). */
static ck_file_t *files_of(st_ckpt_writer_t *w, size_t *nf)
{
	size_t n;
	const st_manifest_file_t *f = st_ckpt_writer_files(w, &n);
	ck_file_t *out = calloc(n ? n : 1, sizeof *out);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		snprintf(out[i].name, sizeof out[i].name, "%s", f[i].name);
		out[i].bytes = f[i].bytes;
		out[i].xxh3 = f[i].xxh3;
	}
	*nf = n;
	return out;
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
	ck_file_t *files = ok ? files_of(w, &nf) : NULL;
	if (ok && !files)
		ok = 0;
	if (rank != 0) {
		ck_msg_t m = report_of(s, ok, step, nf);
		ck_msg_t *res = NULL;
		rc = send_msg(net, 0, CH_UP, &m, files, nf);
		if (rc >= 0)
			rc = recv_msg(net, 0, CH_DOWN, M_RESULT, step, &res);
		if (rc >= 0)
			*published = res->ok;
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
		ok = world_add(&wd, 0, files, nf) >= 0;
	}
	rc = ST_OK;
	for (int r = 1; r < P && rc >= 0; r++) {
		ck_msg_t *rep;
		if ((rc = recv_msg(net, r, CH_UP, M_REPORT, step, &rep)) < 0)
			break;
		const ck_file_t *rf = (const ck_file_t *)(rep + 1);
		if (!rep->ok) {
			st_error("checkpoint %" PRId64 ": rank %d could not write its shard; the "
				 "checkpoint is not published", step, r);
			ok = 0;
		}
		if (ok) {
			fold(s, rep, 0);
			ok = world_add(&wd, r, rf, rep->n_files) >= 0;
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
		rc = send_msg(net, r, CH_DOWN, &res, NULL, 0);
	world_free(&wd);
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
	if (rc >= 0 && ok)
		rc = write_part(tr, s, w, step, &published);
	double t2 = mono();
	st_ckpt_writer_destroy(w);
	st_trainer_snap_release(tr, s);
	if (tr->metrics) {
		st_metrics_add(tr->metrics, "ckpt.stall_s", t1 - t0);
		st_metrics_add(tr->metrics, "ckpt.write_s", t2 - t1);
		st_metrics_add(tr->metrics, published ? "ckpt.written" : "ckpt.failed", 1);
	}
	if (!published) {
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
	if (rc >= 0 && ok)
		rc = write_part(tr, s, w, *step, &published);
	st_ckpt_writer_destroy(w);
	st_trainer_snap_destroy(s);
	if (rc < 0)
		snprintf(err, errlen, "a rank is gone: %s", st_strerror(rc));
	else if (!published)
		snprintf(err, errlen, "a rank could not copy or write its part (see above)");
	return rc < 0 ? rc : published ? ST_OK : ST_EIO;
}

/* ---- exports (docs/distributed.md, "Exports of multi-process jobs") ------
 *
 * The same two-phase commit as checkpoints, on channels of its own (an
 * export never waits behind a checkpoint's messages): rank 0 checks the
 * lineage and begins export-<seq>-full.tmp, and names seq to every rank
 * (GO; the ranks' own numbering may differ if one listed the folder at
 * another moment, rank 0's wins); every rank writes its shard of every
 * table, table-<k>.rank-<r>-of-<P>.rows, embedding part only, and reports
 * it; rank 0 writes dense.safetensors and, once every rank reported
 * success, the manifest with the world, and publishes; RESULT tells every
 * rank. No rank trains meanwhile: exports are written between passes
 * (after st_trainer_dist_finish), and a rank goes on only once RESULT
 * came, i.e. once every rank wrote its shard, so no push of the next pass
 * reaches a shard while its owner writes it. */
enum { CH_XUP = 0x4002, CH_XDOWN = 0x4003, CH_XKEYS = 0x4004 };

/* Delta exports: a rank tracks the keys IT pulled for training (store.c),
 * but a row changes at its owner, which also serves the other ranks'
 * pulls and pushes. So each rank sends every other rank the tracked keys
 * that rank owns (one message per pair: a count per table, then the keys),
 * and a rank's delta covers its own tracked keys that it owns plus those
 * it received. Evicted keys need no exchange: TTL sweeps run on the
 * owner's shard (the local store's hook records them there). Every rank
 * takes part even when its own copy failed (it sends empty lists), so no
 * rank waits forever; such a rank then reports failure. keys[] is replaced
 * by this rank's owned lists, in *own (malloc'ed per table, the caller
 * frees the n_tables entries). ST_OK, ST_ENOMEM, or a network error. */
static int exchange_keys(st_trainer_t *tr, int nt, st_export_keys_t *keys, int have,
			 uint64_t **own)
{
	st_dist_t *d = tr->dist.d;
	st_net_t *net = st_dist_net(d);
	const int rank = st_dist_rank(d), P = st_dist_size(d), O = st_dist_owners(d);
	int rc = ST_OK;
	uint64_t *cnt = calloc((size_t)P * (size_t)nt, sizeof *cnt);     /* [dst][k] */
	uint64_t **out = calloc((size_t)P, sizeof *out);                 /* [dst] */
	for (int k = 0; k < nt; k++)
		own[k] = NULL;
	if (!cnt || !out) {
		rc = ST_ENOMEM;
		goto out;
	}
	/* Count, then fill, each destination's keys table by table. */
	for (int k = 0; have && k < nt; k++)
		for (size_t i = 0; i < keys[k].n_touched; i++)
			cnt[(size_t)st_algo_owner_key(keys[k].touched[i], O) * (size_t)nt + (size_t)k]++;
	size_t *fill = calloc((size_t)P * (size_t)nt, sizeof *fill);
	if (!fill) {
		rc = ST_ENOMEM;
		goto out;
	}
	for (int r = 0; r < P && rc >= 0; r++) {
		size_t tot = 0;
		for (int k = 0; k < nt; k++) {
			fill[(size_t)r * (size_t)nt + (size_t)k] = tot;
			tot += cnt[(size_t)r * (size_t)nt + (size_t)k];
		}
		if (!(out[r] = malloc(sizeof(uint64_t) * (tot ? tot : 1))))
			rc = ST_ENOMEM;
	}
	for (int k = 0; rc >= 0 && have && k < nt; k++)
		for (size_t i = 0; i < keys[k].n_touched; i++) {
			const uint64_t key = keys[k].touched[i];
			const size_t r = (size_t)st_algo_owner_key(key, O);
			out[r][fill[r * (size_t)nt + (size_t)k]++] = key;
		}
	free(fill);
	if (rc < 0) {   /* still take part: empty lists */
		memset(cnt, 0, sizeof *cnt * (size_t)P * (size_t)nt);
		rc = ST_OK;
		have = 0;
	}
	for (int r = 0; r < P && rc >= 0; r++) {
		if (r == rank)
			continue;
		size_t tot = 0;
		for (int k = 0; k < nt; k++)
			tot += cnt[(size_t)r * (size_t)nt + (size_t)k];
		rc = st_net_send2(net, r, CH_XKEYS, cnt + (size_t)r * (size_t)nt,
				  sizeof *cnt * (size_t)nt, out[r], sizeof(uint64_t) * tot);
	}
	/* Receive: each table's received keys appended to its own list. */
	void **got = calloc((size_t)P, sizeof *got);
	if (!got && rc >= 0)
		rc = ST_ENOMEM;
	for (int r = 0; r < P && rc >= 0; r++) {
		if (r == rank)
			continue;
		for (;;) {
			size_t len;
			int from;
			rc = st_net_recv(net, r, CH_XKEYS, &got[r], &len, &from, 0.5);
			if (rc == ST_EAGAIN) {
				if (st_net_alive(net, r))
					continue;
				rc = ST_EPEER;
			}
			if (rc >= 0) {
				const uint64_t *c = got[r];
				size_t tot = 0;
				for (int k = 0; len >= sizeof *c * (size_t)nt && k < nt; k++)
					tot += c[k];
				if (len != sizeof *c * ((size_t)nt + tot)) {
					st_error("export: a malformed key list from rank %d", r);
					rc = ST_ECORRUPT;
				}
			}
			break;
		}
	}
	for (int k = 0; rc >= 0 && k < nt; k++) {
		size_t n = have ? cnt[(size_t)rank * (size_t)nt + (size_t)k] : 0;
		for (int r = 0; r < P; r++)
			if (r != rank)
				n += ((const uint64_t *)got[r])[k];
		if (!(own[k] = malloc(sizeof(uint64_t) * (n ? n : 1)))) {
			rc = ST_ENOMEM;
			break;
		}
		size_t o = 0;
		if (have) {
			size_t at = 0;
			for (int j = 0; j < k; j++)
				at += cnt[(size_t)rank * (size_t)nt + (size_t)j];
			memcpy(own[k], out[rank] + at,
			       sizeof(uint64_t) * cnt[(size_t)rank * (size_t)nt + (size_t)k]);
			o = cnt[(size_t)rank * (size_t)nt + (size_t)k];
		}
		for (int r = 0; r < P; r++) {
			if (r == rank)
				continue;
			const uint64_t *c = got[r];
			size_t at = (size_t)nt;
			for (int j = 0; j < k; j++)
				at += c[j];
			memcpy(own[k] + o, c + at, sizeof(uint64_t) * c[k]);
			o += c[k];
		}
		keys[k].touched = own[k];
		keys[k].n_touched = o;
		if (!have) {
			keys[k].deleted = NULL;
			keys[k].n_deleted = 0;
		}
	}
	for (int r = 0; got && r < P; r++)
		free(got[r]);
	free(got);
out:
	for (int r = 0; out && r < P; r++)
		free(out[r]);
	free(out);
	free(cnt);
	return rc;
}

/* ---- exports (docs/distributed.md, "Exports of multi-process jobs") ------
 *
 * The same two-phase commit as checkpoints, on channels of its own (an
 * export never waits behind a checkpoint's messages): rank 0 checks the
 * lineage and begins export-<seq>-full|delta.tmp, and names seq to every
 * rank (GO; the ranks' own numbering may differ if one listed the folder
 * at another moment, rank 0's wins); every rank writes its shard of every
 * table, table-<k>.rank-<r>-of-<P>.rows, embedding part only (a delta: the
 * current state of the keys it owns that changed, exchange_keys), and
 * reports it; rank 0 writes dense.safetensors and, once every rank
 * reported success, the manifest with the world, and publishes; RESULT
 * tells every rank. No rank trains meanwhile: exports are written between
 * passes (after st_trainer_dist_finish), and a rank goes on only once
 * RESULT came, i.e. once every rank wrote its shard, so no push of the
 * next pass reaches a shard while its owner writes it. Whether an export
 * is a delta (tracking was on, i.e. an export came before) is the same on
 * every rank, since every export is written by all of them. */
int st_trainer_dist_export(st_trainer_t *tr, const st_job_t *job, const char *root,
			   uint64_t *seq, int delta, int keep, char *err, size_t errlen)
{
	st_dist_t *d = tr->dist.d;
	st_net_t *net = st_dist_net(d);
	const int rank = st_dist_rank(d), P = st_dist_size(d), nt = tr->rows.n_tables;
	char why[1024] = "";
	st_ckpt_writer_t *w = NULL;
	st_view_t v;
	st_export_keys_t keys[MAX_TABLES];
	uint64_t *arr[2 * MAX_TABLES], *own[MAX_TABLES];
	ck_file_t *files = NULL;
	int ok = 1, published = 0, as_delta = 0;
	for (int k = 0; k < nt; k++)
		own[k] = arr[2 * k] = arr[2 * k + 1] = NULL;
	int rc = st_dist_wait_applied(d, __atomic_load_n(&tr->dist.clock.ssteps,
							 __ATOMIC_RELAXED));
	if (rc < 0)
		goto out;
	if (st__trainer_track_take(tr, delta, &as_delta, keys, arr, why, sizeof why) < 0)
		ok = 0;
	if (as_delta && (rc = exchange_keys(tr, nt, keys, ok, own)) < 0) {
		if (rc != ST_ENOMEM)
			goto out;
		snprintf(why, sizeof why, "out of memory gathering the changed keys");
		ok = 0;
		rc = ST_OK;
	}
	if (ok && st_trainer_view(tr, job, &v) < 0) {
		snprintf(why, sizeof why, "export %llu: the job's shape is not the trainer's",
			 (unsigned long long)*seq);
		ok = 0;
	}
	/* Phase one: rank 0 begins the directory and names it. */
	if (rank == 0) {
		if (ok && st_export_begin(&v, root, *seq, as_delta, &w, why, sizeof why) < 0)
			ok = 0;
		ck_msg_t go = { .type = M_GO, .ok = ok, .step = (int64_t)*seq };
		for (int r = 1; r < P && rc >= 0; r++)
			rc = send_msg(net, r, CH_XDOWN, &go, NULL, 0);
	} else {
		ck_msg_t *go = NULL;
		rc = recv_msg(net, 0, CH_XDOWN, M_GO, -1, &go);
		if (rc >= 0) {
			*seq = (uint64_t)go->step;
			if (!go->ok && ok) {
				snprintf(why, sizeof why, "rank 0 could not begin it (see its "
					 "messages)");
				ok = 0;
			}
		}
		free(go);
		if (rc >= 0 && ok && st_ckpt_export_join(root, (int64_t)*seq, as_delta, &w, why,
							 sizeof why) < 0)
			ok = 0;
	}
	if (rc < 0)
		goto out;
	/* Phase two: every rank's shard; rank 0's dense file. */
	st_export_delta_t dl = { .n_tables = nt, .tables = keys };
	if (ok && st_export_write_tables(&v, w, *seq, as_delta ? &dl : NULL, rank, P, why,
					 sizeof why) < 0)
		ok = 0;
	if (ok && rank == 0 && st_export_write_dense(&v, w, *seq, why, sizeof why) < 0)
		ok = 0;
	size_t nf = 0;
	if (ok && !(files = files_of(w, &nf))) {
		snprintf(why, sizeof why, "out of memory");
		ok = 0;
	}
	if (!ok)
		st_error("export %llu: rank %d: %s", (unsigned long long)*seq, rank, why);
	ck_msg_t me = { .type = M_REPORT, .ok = ok, .step = (int64_t)*seq, .n_files = (uint32_t)nf };
	if (rank != 0) {
		ck_msg_t *res = NULL;
		rc = send_msg(net, 0, CH_XUP, &me, files, nf);
		if (rc >= 0)
			rc = recv_msg(net, 0, CH_XDOWN, M_RESULT, (int64_t)*seq, &res);
		published = rc >= 0 && res->ok;
		free(res);
		if (rc >= 0 && !published && ok)
			snprintf(why, sizeof why, "another rank could not write its part (see "
				 "rank 0's messages)");
	} else {
		world_t wd = { .m = { .world_size = P, .owners = st_dist_owners(d),
				      .owner_salt = st_algo_owner_salt() } };
		wd.m.parts = calloc((size_t)P, sizeof *wd.m.parts);
		wd.m.n_parts = (size_t)P;
		if (ok && (!wd.m.parts || world_add(&wd, 0, files, nf) < 0)) {
			snprintf(why, sizeof why, "out of memory");
			ok = 0;
		}
		for (int r = 1; r < P && rc >= 0; r++) {
			ck_msg_t *rep;
			if ((rc = recv_msg(net, r, CH_XUP, M_REPORT, (int64_t)*seq, &rep)) < 0)
				break;
			const ck_file_t *rf = (const ck_file_t *)(rep + 1);
			if (!rep->ok && ok) {
				snprintf(why, sizeof why, "rank %d could not write its shard (see its "
					 "messages); the export is not published", r);
				ok = 0;
			}
			if (ok && world_add(&wd, r, rf, rep->n_files) < 0) {
				snprintf(why, sizeof why, "out of memory");
				ok = 0;
			}
			for (uint32_t i = 0; ok && i < rep->n_files; i++)
				if (st_ckpt_add_entry(w, rf[i].name, rf[i].bytes, rf[i].xxh3) < 0) {
					snprintf(why, sizeof why, "%s", st_ckpt_error(w));
					ok = 0;
				}
			free(rep);
		}
		if (rc >= 0 && ok)
			published = st_export_commit(&v, w, *seq, (int64_t)tr->batches, keep, &wd.m,
						     why, sizeof why) >= 0;
		ck_msg_t res = { .type = M_RESULT, .ok = published, .step = (int64_t)*seq };
		for (int r = 1; r < P && rc >= 0; r++)
			rc = send_msg(net, r, CH_XDOWN, &res, NULL, 0);
		world_free(&wd);
	}
	/* Published: the next delta starts from here, on every rank. */
	if (published)
		st__trainer_track_reset(tr);
out:
	free(files);
	for (int k = 0; k < nt; k++) {
		free(arr[2 * k]);
		free(arr[2 * k + 1]);
		free(own[k]);
	}
	/* A joined writer never removes the .tmp; rank 0's removes it unless
	 * published. */
	st_ckpt_writer_destroy(w);
	if (rc < 0) {
		snprintf(err, errlen, "a rank is gone: %s", st_strerror(rc));
		return rc;
	}
	if (!published) {
		snprintf(err, errlen, "%s", why[0] ? why : "not published");
		return ST_EIO;
	}
	return ST_OK;
}
