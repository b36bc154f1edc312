/*
 * ranks.c — a run as one rank of a multi-process job (docs/distributed.md):
 * what such a job refuses before anything runs, joining the other ranks,
 * and the totals over every rank at the end.
 *
 * Policy questions go to the registry (ops/sync/registry.h) by capability;
 * no policy is named here.
 */
#include "ops/runner/runner_internal.h"
#include "ops/dist/dist.h"
#include "ops/sync/registry.h"
#include "runtime/err.h"

#include <stdlib.h>
#include <string.h>

/* Checkpoints and resume across processes: under the policies whose cut
 * is implemented (registry capability dist-checkpoint), the job's and
 * every phase's. (checkpoint.every_secs: rank 0's clock names the step,
 * ops/train/dist_ckpt.c.) */
static int check_ckpt(st_runner_t *r, const char *what)
{
	const st_job_t *job = r->job;
	/* With phases, the phases' policies are the ones that train. */
	for (int i = job->n_phases ? 0 : -1; i < job->n_phases; i++) {
		const char *pol = i < 0 ? job->sync.name : job->phases[i].sync.name;
		pol = pol ? pol : "async";
		const st_policy_t *p = st_policy_find(pol);
		if (p && (p->caps & ST_POL_DIST_CKPT))
			continue;
		char names[256], where[160] = "";
		st_policy_names(names, sizeof names, ST_POL_DIST_CKPT, 1);
		if (i >= 0)
			snprintf(where, sizeof where, " (phase '%s')", job->phases[i].name);
		st__runner_say(r, ST_RUNNER_LINE, "strata: %s: %s of a multi-process "
			       "job under policy '%s'%s is not supported yet; %s %s", job->file, what, pol,
			       where, names, strchr(names, ' ') ? "are" : "is");
		return ST_EJOB;
	}
	return ST_OK;
}

int st__runner_dist_check(st_runner_t *r)
{
	st_job_t *job = r->job;
	job->dist_run = 1;
	if ((job->ckpt_dir || job->resume) && check_ckpt(r, "checkpoint/resume") < 0)
		return ST_EJOB;
	/* Exports take the cut of checkpoints (between passes, every rank's
	 * shard): the same policies. */
	if (job->export_dir && check_ckpt(r, "export") < 0)
		return ST_EJOB;
	/* The job's policy and every phase's, before anything trains. */
	const int workers = job->train_stage.threads > 0 ? job->train_stage.threads : 1;
	for (int i = -1; i < job->n_phases; i++) {
		const st_sync_cfg_t *c = i < 0 ? &job->sync : &job->phases[i].sync;
		const char *pol = c->name ? c->name : "async";
		const st_policy_t *p = st_policy_find(pol);
		if (p && (p->caps & ST_POL_META) && !st_trainer_auto_dist_ok(c))
			return ST_EJOB;
		if (!st_policy_dist(p)) {
			char names[256];
			st__runner_say(r, ST_RUNNER_LINE, "strata: %s: sync policy '%s'%s%s does not "
				       "run across processes yet (%s do)", job->file, pol,
				       i < 0 ? "" : " of phase ", i < 0 ? "" : job->phases[i].name,
				       st_policy_names(names, sizeof names, 0, 1));
			return ST_EJOB;
		}
		if ((p->caps & ST_POL_STEP_PER_BATCH) &&
		    job->batch_size > (int64_t)workers * job->minibatch) {
			st__runner_say(r, ST_RUNNER_LINE, "strata: %s: a multi-process %s trains one "
				       "step per batch: stages.read.batch_size (%d) must be at most "
				       "stages.train.workers x minibatch (%d x %d)", job->file, pol,
				       job->batch_size, workers, job->minibatch);
			return ST_EJOB;
		}
	}
	/* The ranks split the stream batch by batch, which needs batch numbers
	 * that do not depend on thread timing; and a batch's pull waits for
	 * the steps before it, in order. */
	if (job->read.threads > 1 || job->pull.threads > 1) {
		st__runner_say(r, ST_LOG_INFO, "multi-process job: one read thread and one pull "
			       "thread per rank (the job asks for %d and %d)", job->read.threads,
			       job->pull.threads);
		job->read.threads = 1;
		job->pull.threads = 1;
	}
	return ST_OK;
}

int st__runner_dist_join(st_runner_t *r)
{
	st_net_cfg_t cfg = r->ncfg;
	if (!r->opts.net_timeout_fixed)   /* the environment wins over the job */
		cfg.timeout_s = r->job->dist_timeout;
	int rc = st_net_open(&r->net, &cfg);
	if (rc < 0) {
		st__runner_say(r, ST_LOG_ERROR, "rank %d of %d (%s): cannot join the job at %s: %s",
			       cfg.rank, cfg.size, cfg.source, cfg.coordinator, st_strerror(rc));
		return rc;
	}
	rc = st_trainer_attach_dist(r->model, r->net, r->job);
	if (rc < 0)
		st__runner_say(r, ST_LOG_ERROR, "rank %d: cannot set up the sharded store: %s",
			       cfg.rank, st_strerror(rc));
	return rc;
}

typedef struct rank_sum {
	uint64_t examples, bytes, rows;
	uint64_t round_trips, steps;
	uint64_t digest;
	double secs;
} rank_sum_t;

int st__runner_dist_totals(st_runner_t *r, st_runner_totals_t *t)
{
	const int rank = st_net_rank(r->net), P = st_net_size(r->net);
	st_dist_stats_t ds;
	st_trainer_dist_stats(r->model, &ds);
	rank_sum_t me = { .examples = t->examples, .bytes = ds.bytes_sent, .secs = t->secs,
			  .round_trips = ds.round_trips, .steps = st_trainer_dist_steps(r->model) };
	if (r->opts.digest)
		me.digest = st_trainer_digest(r->model, rank == 0, &me.rows);
	t->rank = rank;
	t->ranks = P;
	t->lost = r->lost;
	if (r->lost)   /* no collective with a dead rank: each speaks for itself */
		return ST_OK;
	rank_sum_t *all = calloc((size_t)P, sizeof *all);
	if (!all)
		return ST_ENOMEM;
	int rc = st_net_allgather(r->net, &me, sizeof me, all);
	if (rc >= 0) {
		rank_sum_t s = { 0 };
		for (int i = 0; i < P; i++) {
			s.examples += all[i].examples;
			s.bytes += all[i].bytes;
			s.rows += all[i].rows;
			s.round_trips += all[i].round_trips;
			s.steps += all[i].steps;
			s.digest ^= all[i].digest;
			s.secs = all[i].secs > s.secs ? all[i].secs : s.secs;
		}
		t->all_examples = s.examples;
		t->all_secs = s.secs;
		t->all_bytes_sent = s.bytes;
		t->all_round_trips = s.round_trips;
		t->all_steps = s.steps;
		t->has_digest = r->opts.digest;
		t->digest = s.digest;
		t->digest_rows = s.rows;
	}
	free(all);
	return rc;
}
