/*
 * run_dist.c — `strata run` as one rank of a multi-process job
 * (docs/distributed.md): what such a job refuses, joining the other ranks,
 * and the summary rank 0 prints for all of them.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dist/dist.h"
#include "ops/sync/registry.h"
#include "ops/train/trainer.h"
#include "runtime/err.h"
#include "runtime/net/net.h"

/* Features a multi-process job does not have yet: refused before anything
 * runs, with the reason. */
static int refuse(const st_job_t *job, const char *what, const char *why)
{
	fprintf(stderr, "strata: %s: %s is not supported in a multi-process job yet (%s)\n",
		job->file, what, why);
	return ST_EXIT_USAGE;
}

int st_cli_dist_check(st_job_t *job)
{
	job->dist_run = 1;
	if (job->ckpt_dir || job->resume)
		return refuse(job, "checkpoint/resume", "each rank would need its shard's part");
	if (job->export_dir)
		return refuse(job, "export", "each rank would need its shard's part");
	/* The job's policy and every phase's, before anything trains. */
	const int workers = job->train_stage.threads > 0 ? job->train_stage.threads : 1;
	for (int i = -1; i < job->n_phases; i++) {
		const st_sync_cfg_t *c = i < 0 ? &job->sync : &job->phases[i].sync;
		const char *pol = c->name ? c->name : "async";
		const st_policy_t *p = st_policy_find(pol);
		if (p && (p->caps & ST_POL_META) && !st_trainer_auto_dist_ok(c))
			return ST_EXIT_USAGE;
		if (!st_policy_dist(p)) {
			char names[256];
			fprintf(stderr, "strata: %s: sync policy '%s'%s%s does not run across "
				"processes yet (%s do)\n", job->file, pol,
				i < 0 ? "" : " of phase ", i < 0 ? "" : job->phases[i].name,
				st_policy_names(names, sizeof names, 0, 1));
			return ST_EXIT_USAGE;
		}
		if ((p->caps & ST_POL_STEP_PER_BATCH) &&
		    job->batch_size > (int64_t)workers * job->minibatch) {
			fprintf(stderr, "strata: %s: a multi-process %s trains one step per batch: "
				"stages.read.batch_size (%d) must be at most stages.train.workers x "
				"minibatch (%d x %d)\n", job->file, pol, job->batch_size, workers,
				job->minibatch);
			return ST_EXIT_USAGE;
		}
	}
	/* The ranks split the stream batch by batch, which needs batch numbers
	 * that do not depend on thread timing; and a batch's pull waits for
	 * the steps before it, in order. */
	if (job->read.threads > 1 || job->pull.threads > 1) {
		st_info("multi-process job: one read thread and one pull thread per rank "
			"(the job asks for %d and %d)", job->read.threads, job->pull.threads);
		job->read.threads = 1;
		job->pull.threads = 1;
	}
	return ST_EXIT_OK;
}

int st_cli_dist_join(st_net_t **net, const st_net_cfg_t *cfg0, const st_job_t *job,
		     st_trainer_t *tr)
{
	st_net_cfg_t cfg = *cfg0;
	if (!getenv("STRATA_NET_TIMEOUT"))   /* the environment wins over the job */
		cfg.timeout_s = job->dist_timeout;
	int rc = st_net_open(net, &cfg);
	if (rc < 0) {
		st_error("rank %d of %d (%s): cannot join the job at %s: %s", cfg.rank, cfg.size,
			 cfg.source, cfg.coordinator, st_strerror(rc));
		return rc;
	}
	rc = st_trainer_attach_dist(tr, *net, job);
	if (rc < 0)
		st_error("rank %d: cannot set up the sharded store: %s", cfg.rank,
			 st_strerror(rc));
	return rc;
}

typedef struct rank_sum {
	uint64_t examples, bytes, rows;
	uint64_t digest;
	double secs;
} rank_sum_t;

int st_cli_dist_summary(st_net_t *net, st_trainer_t *tr, const st_job_t *job, double secs,
			int lost, int digest)
{
	const int rank = st_net_rank(net), P = st_net_size(net);
	uint64_t n = 0;
	double auc = 0, ll = 0;
	st_trainer_progress(tr, &auc, &ll, &n);
	st_dist_stats_t ds;
	st_trainer_dist_stats(tr, &ds);
	rank_sum_t me = { .examples = n, .bytes = ds.bytes_sent, .secs = secs };
	if (digest)
		me.digest = st_trainer_digest(tr, rank == 0, &me.rows);
	if (lost) {
		/* No collective with a dead rank: rank 0 speaks for itself. */
		if (rank == 0)
			printf("%s: rank 0 trained %llu examples in %.2f s; %d rank%s lost "
			       "(see above)\n", job->name, (unsigned long long)n, secs, lost,
			       lost == 1 ? "" : "s");
		return ST_OK;
	}
	rank_sum_t *all = calloc((size_t)P, sizeof *all);
	if (!all)
		return ST_ENOMEM;
	int rc = st_net_allgather(net, &me, sizeof me, all);
	if (rc >= 0 && rank == 0) {
		rank_sum_t t = { 0 };
		for (int r = 0; r < P; r++) {
			t.examples += all[r].examples;
			t.bytes += all[r].bytes;
			t.rows += all[r].rows;
			t.digest ^= all[r].digest;
			t.secs = all[r].secs > t.secs ? all[r].secs : t.secs;
		}
		printf("%s: trained %llu examples on %d ranks in %.2f s (%.0f ex/s)\n", job->name,
		       (unsigned long long)t.examples, P, t.secs,
		       (double)t.examples / (t.secs > 0 ? t.secs : 1));
		printf("  progressive  auc %.4f  logloss %.4f  (rank 0's examples)\n", auc, ll);
		printf("  network      %.1f MB sent, %.0f bytes per example\n",
		       (double)t.bytes / 1e6, t.examples ? (double)t.bytes / (double)t.examples : 0);
		if (digest)
			printf("  model        digest %016llx  %llu rows\n",
			       (unsigned long long)t.digest, (unsigned long long)t.rows);
		fflush(stdout);
	}
	free(all);
	return rc;
}
