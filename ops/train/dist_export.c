/*
 * dist_export.c — serving exports of a multi-process job
 * (docs/distributed.md, "Exports of multi-process jobs"): every rank its
 * shard of the rows, rank 0 the dense parameters and the manifest, with
 * the two-phase commit of checkpoints (dist_msg.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/owner.h"
#include "ops/dist/dist.h"
#include "ops/dump/ckpt.h"
#include "ops/train/checkpoint.h"
#include "ops/train/dist_msg.h"
#include "ops/train/trainer_internal.h"
#include "ops/train/view.h"
#include "ops/view/export.h"
#include "runtime/err.h"

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
			rc = st__ck_send(net, r, CH_XDOWN, &go, NULL, 0);
	} else {
		ck_msg_t *go = NULL;
		rc = st__ck_recv(net, 0, CH_XDOWN, M_GO, -1, &go);
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
	if (ok && !(files = st__ck_files_of(w, &nf))) {
		snprintf(why, sizeof why, "out of memory");
		ok = 0;
	}
	if (!ok)
		st_error("export %llu: rank %d: %s", (unsigned long long)*seq, rank, why);
	ck_msg_t me = { .type = M_REPORT, .ok = ok, .step = (int64_t)*seq, .n_files = (uint32_t)nf };
	if (rank != 0) {
		ck_msg_t *res = NULL;
		rc = st__ck_send(net, 0, CH_XUP, &me, files, nf);
		if (rc >= 0)
			rc = st__ck_recv(net, 0, CH_XDOWN, M_RESULT, (int64_t)*seq, &res);
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
		if (ok && (!wd.m.parts || st__ck_world_add(&wd, 0, files, nf) < 0)) {
			snprintf(why, sizeof why, "out of memory");
			ok = 0;
		}
		for (int r = 1; r < P && rc >= 0; r++) {
			ck_msg_t *rep;
			if ((rc = st__ck_recv(net, r, CH_XUP, M_REPORT, (int64_t)*seq, &rep)) < 0)
				break;
			const ck_file_t *rf = (const ck_file_t *)(rep + 1);
			if (!rep->ok && ok) {
				snprintf(why, sizeof why, "rank %d could not write its shard (see its "
					 "messages); the export is not published", r);
				ok = 0;
			}
			if (ok && st__ck_world_add(&wd, r, rf, rep->n_files) < 0) {
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
			rc = st__ck_send(net, r, CH_XDOWN, &res, NULL, 0);
		st__ck_world_free(&wd);
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
