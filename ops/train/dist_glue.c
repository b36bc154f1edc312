/*
 * dist_glue.c — the trainer in a multi-process job (docs/distributed.md):
 * attaching the sharded store (ops/dist) and the multi-process twin of the
 * job's policy; a lockstep policy's per-batch collective (every rank's
 * examples of the step) and the drain at the end of a pass, when a rank
 * out of data takes part in the others' steps and st.sync.auto's votes;
 * the end of training; the network's metrics; and the model digest used
 * to compare runs.
 *
 * Threads: the train stage's thread, or no stage running.
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ops/dist/dist.h"
#include "ops/rowsrc/remote.h"
#include "ops/sync/auto.h"
#include "ops/sync/registry.h"
#include "ops/train/trainer_internal.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"

int st_trainer_auto_dist_ok(const st_sync_cfg_t *cfg)
{
	return st_auto_dist_ok(cfg);
}

int st_trainer_attach_dist(st_trainer_t *tr, st_net_t *net, const st_job_t *job)
{
	const st_sync_cfg_t *scfg = &job->sync;
	const char *name = scfg->name ? scfg->name : "async";
	if (!st_policy_dist(st_policy_find(name))) {
		char names[256];
		st_error("sync policy '%s' does not run across processes yet (%s do)", name,
			 st_policy_names(names, sizeof names, 0, 1));
		return ST_EJOB;
	}
	if (tr->rows.n_tables > ST_DIST_MAX_TABLES)
		return ST_EJOB;
	if (job->row_prec != ST_ROW_FP32) {
		/* strata check refuses it with the dist section; a job launched
		 * across processes without one is refused here. */
		st_error("storage.row_precision = '%s' is not supported with multi-process "
			 "training yet (the shard service keeps fp32 rows): use 'fp32' or run "
			 "in one process", st_rowfmt_name(job->row_prec));
		return ST_EJOB;
	}
	st_dist_cfg_t c = {
		.net = net, .owners = job->dist_owners, .compress = job->dist_compress,
		.n_tables = tr->rows.n_tables, .dense_state = tr->pol.dstate, .dense_t = &tr->pol.dt,
		.n_workers = tr->pol.env.n_workers,
		.params = { .model = tr->pol.env.model, .params = tr->pol.env.params,
			    .nparams = tr->pol.env.nparams, .dense_opt = tr->pol.env.dense_opt,
			    .sparse_opt = tr->pol.env.sparse_opt },
	};
	for (int k = 0; k < tr->rows.n_tables; k++) {
		c.tables[k] = st__trainer_table(tr, k);
		c.dim[k] = (uint32_t)tr->rows.tdim[k];
	}
	int rc = st_dist_create(&tr->dist.d, &c);
	if (rc < 0)
		return rc;
	/* From now on the rows come from their owners; this rank's tables are
	 * its shard, which the service thread answers from. */
	st_rowsrc_remote_cfg_t rc_cfg = {
		.dist = tr->dist.d, .shard = tr->rows.local, .n_workers = tr->N,
		.stride = (size_t)tr->gstride, .clock = &tr->dist.clock,
	};
	if ((rc = st_rowsrc_remote_create(&tr->rows.src, &rc_cfg)) < 0) {
		tr->rows.src = tr->rows.local;
		st_dist_destroy(tr->dist.d);
		tr->dist.d = NULL;
		return rc;
	}
	tr->pol.env.dist = tr->dist.d;
	/* Step reads issued ahead (step.c, run_free_ahead); the job says how
	 * many, or takes the default. */
	tr->dist.prefetch = job->dist_prefetch < 0 ? ST_TRAINER_PREFETCH_DEFAULT
						  : job->dist_prefetch;
	/* st.sync.auto's votes go to every rank from now on. */
	st_auto_transport_ranks(&tr->pol.auto_tp, net);
	rc = st_trainer_set_policy(tr, scfg);
	if (rc < 0) {
		st_rowsrc_destroy(tr->rows.src);
		tr->rows.src = tr->rows.local;
		st_dist_destroy(tr->dist.d);
		tr->dist.d = NULL;
		tr->pol.env.dist = NULL;
		st_auto_transport_threads(&tr->pol.auto_tp);
	}
	return rc;
}

int st_trainer_dist_finish(st_trainer_t *tr, int *lost)
{
	int rc = st_dist_finish(tr->dist.d, lost);
	/* Asynchronous policies keep the dense parameters on rank 0 (the
	 * workers trained on copies): the final ones, for eval and digests. */
	if (rc >= 0 && !tr->dist.lockstep && st_dist_rank(tr->dist.d) != 0) {
		uint64_t v;
		rc = st_dist_dense(tr->dist.d, 0, NULL, tr->pol.env.params, &v);
	}
	/* st.sync.auto: what it did, and a digest of this rank's final dense
	 * parameters — the same on every rank, whatever phase came last. */
	if (rc >= 0 && tr->pol.autoc)
		st_info("st.sync.auto: %llu switches, ended under %s; dense parameters digest "
			"%016llx", (unsigned long long)tr->pol.switches, tr->pol.ops->name,
			(unsigned long long)XXH3_64bits(tr->pol.env.params,
							sizeof(float) * tr->pol.env.nparams));
	return rc;
}

int st_trainer_dist_phase(st_trainer_t *tr)
{
	return st_dist_sync_begin(tr->dist.d);
}

void st_trainer_dist_pass(st_trainer_t *tr, int eval)
{
	tr->dist.drained = eval;
}

int st_trainer_dist_leave(st_trainer_t *tr, int *lost)
{
	return st_dist_finish(tr->dist.d, lost);
}

uint64_t st_trainer_digest(st_trainer_t *tr, int with_dense, uint64_t *rows)
{
	st_table_t *tables[MAX_TABLES];
	for (int k = 0; k < tr->rows.n_tables; k++)
		tables[k] = st__trainer_table(tr, k);
	uint64_t h = st_dist_rows_digest(tables, tr->rows.n_tables, rows);
	if (with_dense)
		h ^= XXH3_64bits(tr->pol.env.params, sizeof(float) * tr->pol.env.nparams);
	return h;
}

void st_trainer_dist_stats(const st_trainer_t *tr, st_dist_stats_t *out)
{
	st_dist_stats(tr->dist.d, out);
}

uint64_t st_trainer_dist_steps(const st_trainer_t *tr)
{
	return tr->dist.d ? __atomic_load_n(&tr->dist.steps, __ATOMIC_RELAXED) : 0;
}

/* ---- steps across ranks ------------------------------------------------- */

/* Multi-process lockstep: every rank's examples for the next step; *tot is
 * their sum (0: every rank is out of data), *all_in whether every rank has
 * some (may be NULL). */
static int dist_gather(st_trainer_t *tr, uint32_t n, uint32_t *tot, int *all_in)
{
	st_net_t *net = st_dist_net(tr->dist.d);
	const int P = st_net_size(net);
	uint32_t *all = malloc(sizeof(uint32_t) * (size_t)P);
	if (!all)
		return ST_ENOMEM;
	int rc = st_net_allgather(net, &n, sizeof n, all);
	uint64_t sum = 0;
	int in = 1;
	for (int r = 0; rc >= 0 && r < P; r++) {
		sum += all[r];
		in &= all[r] > 0;
	}
	if (all_in)
		*all_in = in;
	free(all);
	*tot = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
	return rc;
}

/* Multi-process lockstep, out of data: takes part in the steps of the
 * ranks that still have some (with no examples) until none has. Under
 * st.sync.auto, also in its votes until every rank is out of data. */
int st__trainer_dist_drain(st_trainer_t *tr)
{
	if (!tr->dist.d || (!tr->dist.lockstep && !tr->pol.autoc) || tr->dist.drained)
		return ST_OK;
	for (;;) {
		int rc;
		if (!tr->dist.lockstep) {
			int all_done;
			if ((rc = st__trainer_auto_vote(tr, 1, &all_done)) < 0)
				return rc;
			if (all_done)
				break;
			continue;
		}
		uint32_t tot = 0;
		if ((rc = dist_gather(tr, 0, &tot, NULL)) < 0)
			return rc;
		if (tot == 0)
			break;
		tr->dist.tot = tot;
		tr->dist.empty.eval = 0;
		tr->dist.empty.n = 0;
		st__trainer_run(tr, &tr->dist.empty);
		tr->step.cur = NULL;
		if (tr->step.err < 0)
			return tr->step.err;
		tr->dist.steps++;
		__atomic_store_n(&tr->dist.clock.ssteps, tr->dist.clock.ssteps + 1, __ATOMIC_RELAXED);
		if (tr->pol.autoc && (rc = st__trainer_auto_tick(tr, 1)) < 0)
			return rc;
	}
	tr->dist.drained = 1;
	return ST_OK;
}

int st__trainer_dist_before(st_trainer_t *tr, st_stage_ctx_t *ctx, st_batch_t *b)
{
	if (!tr->dist.d || !tr->dist.lockstep || b->eval)
		return ST_OK;
	const uint32_t nmb = (b->n + tr->minibatch - 1) / tr->minibatch;
	if (nmb > (uint32_t)tr->N)
		return st__trainer_fail(ctx, ST_EINVAL, "a multi-process %s trains one step per "
					"batch: batch_size (%u) must be at most workers x minibatch "
					"(%d x %u)", tr->pol.ops->name, b->n, tr->N, tr->minibatch);
	int all_in = 1;
	int rc = dist_gather(tr, b->n, &tr->dist.tot, &all_in);
	if (rc < 0)
		return st__trainer_fail(ctx, rc, "batch %llu: the other ranks: %s",
					(unsigned long long)b->seq, st_strerror(rc));
	/* A rank without data for this step never reaches its dump: no rank
	 * checkpoints after it (every rank saw the same counts). */
	if (b->ckpt && !all_in)
		b->ckpt = ST__CKPT_SKIP;
	return ST_OK;
}

void st__trainer_dist_after(st_trainer_t *tr, const st_batch_t *b)
{
	if (!tr->dist.d || b->eval)
		return;
	__atomic_fetch_add(&tr->dist.clock.trained, 1, __ATOMIC_RELEASE);
	if (b->n == 0)
		return;
	tr->dist.steps++;
	if (tr->dist.lockstep)
		__atomic_store_n(&tr->dist.clock.ssteps, tr->dist.clock.ssteps + 1, __ATOMIC_RELAXED);
}

void st__trainer_dist_metrics(st_trainer_t *tr)
{
	if (!tr->dist.d || !tr->metrics)
		return;
	/* What the network really carried (frames included), not the
	 * policy's estimate. */
	st_dist_stats_t ds;
	st_dist_stats(tr->dist.d, &ds);
	st_metrics_set(tr->metrics, "net_bytes_sent", (double)ds.bytes_sent);
	st_metrics_set(tr->metrics, "net_bytes_coll", (double)ds.bytes_coll);
	st_metrics_set(tr->metrics, "net_msgs_sent", (double)ds.msgs_sent);
	/* The latency side of a step (docs/benchmarks.md, "Scaling model"). */
	st_metrics_set(tr->metrics, "net_round_trips", (double)ds.round_trips);
	if (tr->dist.steps)
		st_metrics_set(tr->metrics, "net_round_trips_per_step",
			       (double)ds.round_trips / (double)tr->dist.steps);
	/* Step reads (async, hop_bs, shadow): how many went to another rank,
	 * how many were issued ahead (dist.prefetch) and how many the worker
	 * still had to wait for: the round trips left on the critical path. */
	if (ds.step_reads) {
		st_metrics_set(tr->metrics, "net_step_reads", (double)ds.step_reads);
		st_metrics_set(tr->metrics, "net_step_reads_ahead", (double)ds.step_reads_ahead);
		st_metrics_set(tr->metrics, "net_step_waits", (double)ds.step_waits);
	}
	st_metrics_set(tr->metrics, "dist_keys_remote", (double)ds.keys_remote);
	st_metrics_set(tr->metrics, "dist_keys_local", (double)ds.keys_local);
	st_metrics_set(tr->metrics, "dist_rows_pushed", (double)ds.rows_pushed);
	if (ds.buf_steps) {
		/* gba, bsp: this owner's buffered global steps and the row
		 * gradients it dropped as too stale. */
		st_metrics_set(tr->metrics, "dist_buf_steps", (double)ds.buf_steps);
		st_metrics_set(tr->metrics, "dist_buf_rows_dropped", (double)ds.buf_rows_dropped);
	}
}
