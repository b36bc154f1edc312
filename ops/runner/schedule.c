/*
 * schedule.c — what a run writes besides training, and when: the output
 * folders, resuming from the newest checkpoint that verifies, the
 * checkpoint and the serving export at the end of training (or of each
 * phase), and the verdict on them at the end of the job.
 *
 * Interval checkpoints are the trainer's (its dump stage writes them,
 * ops/train/checkpoint.h); this file sets them up and writes the ones a
 * pass does not: at its end, unless the last interval one already holds the
 * current state. After st_runner_cancel neither a final checkpoint nor an
 * export is written (one the trainer is copying is finished by it).
 *
 * A failed end-of-training checkpoint or export is reported where it
 * happens and the steps after it still run (the model is intact, as after a
 * failed interval checkpoint); st__runner_end_failed turns the count into
 * the run's FAILED status.
 */
#include "ops/runner/runner_internal.h"
#include "ops/dump/ckpt.h"
#include "runtime/trace.h"
#include "runtime/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p; returns 0 or -errno (errno set). */
static int mkdir_p(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof buf)
		return -(errno = ENAMETOOLONG);
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0777) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0777) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int mkdir_parent(const char *file)
{
	const char *slash = strrchr(file, '/');
	if (!slash || slash == file)
		return 0;
	char buf[4096];
	size_t n = (size_t)(slash - file);
	if (n >= sizeof buf)
		return -(errno = ENAMETOOLONG);
	memcpy(buf, file, n);
	buf[n] = 0;
	return mkdir_p(buf);
}

int st__runner_folders(st_runner_t *r)
{
	const st_job_t *job = r->job;
	if (job->out_dir && mkdir_p(job->out_dir) < 0) {
		int rc = -errno;
		st__runner_say(r, ST_LOG_ERROR, "cannot create output directory %s: %s",
			       job->out_dir, strerror(errno));
		return rc;
	}
	if (r->metrics_path && mkdir_parent(r->metrics_path) < 0) {
		int rc = -errno;
		st__runner_say(r, ST_LOG_ERROR, "cannot create the folder of %s: %s",
			       r->metrics_path, strerror(errno));
		return rc;
	}
	return ST_OK;
}

/* A folder the job writes into: made, and writable. ST_OK or a job error
 * (said: "<what> <dir>: <why>; nothing was trained"). */
static int usable_dir(st_runner_t *r, const char *what, const char *dir)
{
	if (mkdir_p(dir) < 0 || access(dir, W_OK | X_OK) != 0) {
		int rc = errno ? -errno : ST_EIO;
		st__runner_say(r, ST_LOG_ERROR, "%s %s: %s; nothing was trained", what, dir,
			       strerror(errno));
		r->job_error = 1;
		return rc;
	}
	return ST_OK;
}

int st__runner_outputs(st_runner_t *r)
{
	const st_job_t *job = r->job;
	int rc;
	r->model_desc = st_trainer_model_desc(job);
	st_trainer_job_hash(job, r->job_hash);
	r->ckpt = (st_trainer_ckpt_cfg_t){
		.dir = job->ckpt_dir, .keep = job->ckpt_keep, .job_name = job->name,
		.job_hash = r->job_hash, .model = r->model_desc,
		.paths = (const char *const *)job->train.paths, .n_paths = job->train.n_paths,
		.seed = job->seed, .batch_size = job->batch_size,
	};
	if (job->export_dir) {
		if ((rc = usable_dir(r, "export.dir", job->export_dir)) < 0)
			return rc;
		/* Exports are numbered after the ones already there. */
		st_ckpt_entry_t *ents = NULL;
		size_t ne = 0;
		char err[512];
		if (st_ckpt_list_exports(job->export_dir, 0, &ents, &ne, NULL, NULL, err,
					 sizeof err) >= 0) {
			for (size_t i = 0; i < ne; i++)
				if ((uint64_t)ents[i].num + 1 > r->export_seq)
					r->export_seq = (uint64_t)ents[i].num + 1;
			st_ckpt_entries_free(ents, ne);
		}
	}
	if (job->ckpt_dir && job->pull.threads > 1) {
		/* The checkpoint gate holds later batches at pull-sparse in batch
		 * order; with several pull threads a later batch can pass before
		 * the gate closes and its updates would leak into the checkpoint. */
		st__runner_say(r, ST_LOG_ERROR, "checkpoint needs stages.pull.threads = 1 (got %d): "
			       "a consistent checkpoint with several pull threads is not "
			       "implemented yet", job->pull.threads);
		r->job_error = 1;
		return ST_EJOB;
	}
	if (job->ckpt_dir) {
		if ((rc = usable_dir(r, "checkpoint.dir", job->ckpt_dir)) < 0)
			return rc;
		st_trainer_set_checkpoint(r->model, &r->ckpt, job->ckpt_every, job->ckpt_secs);
	}
	return ST_OK;
}

int st__runner_resume(st_runner_t *r)
{
	const st_job_t *job = r->job;
	if (r->opts.resume == ST_RUNNER_RESUME_AS_JOB && !job->resume)
		return ST_OK;
	if (!job->ckpt_dir) {
		st__runner_say(r, ST_RUNNER_LINE, "strata: %s: --resume needs checkpoint.dir in the "
			       "job", job->file);
		r->job_error = 1;
		return ST_EJOB;
	}
	char err[4096];
	int rc = st_trainer_resume(r->model, &r->ckpt, &r->pos, err, sizeof err);
	if (rc == ST_ECORRUPT && r->pos.none_verifies &&
	    r->opts.resume == ST_RUNNER_RESUME_FRESH_IF_DAMAGED) {
		/* Asked for: the damaged ones go aside (kept, and out of the
		 * way of retention, which prefers higher step numbers). */
		st__runner_say(r, ST_LOG_WARN, "cannot resume: %s", err);
		/* Across processes rank 0 alone moves them (the ranks share the
		 * folder); the others saw the same verdict. */
		if ((!r->net || st_net_rank(r->net) == 0) &&
		    (rc = st_trainer_set_aside_damaged(&r->ckpt, err, sizeof err)) < 0) {
			st__runner_say(r, ST_LOG_ERROR, "%s", err);
			return rc;
		}
		st__runner_say(r, ST_LOG_INFO, "starting from the beginning "
			       "(--resume=fresh-if-damaged)");
	} else if (rc == ST_ECORRUPT && r->pos.none_verifies) {
		/* Starting over would hide the damage and overwrite them. */
		st__runner_say(r, ST_LOG_ERROR, "cannot resume: %s", err);
		st__runner_say(r, ST_RUNNER_LINE, "strata: nothing was trained and %s was left as it "
			       "is; run with --resume=fresh-if-damaged to move the damaged "
			       "checkpoints aside and start from the beginning", job->ckpt_dir);
		return rc;
	} else if (rc == ST_ENOENT) {
		st__runner_say(r, ST_LOG_INFO, "no checkpoint to resume from in %s (%s): starting "
			       "from the beginning", job->ckpt_dir, err);
	} else if (rc < 0) {
		st__runner_say(r, ST_LOG_ERROR, "cannot resume: %s", err);
		r->job_error = rc == ST_EINVAL;   /* an incompatible job */
		return rc;
	} else {
		r->resumed = 1;
		r->res.resumed = 1;
		r->res.resumed_step = r->pos.step;
		st__runner_say(r, ST_LOG_INFO, "resuming from %s: step %llu, %llu examples done",
			       r->pos.dir, (unsigned long long)r->pos.step,
			       (unsigned long long)r->pos.examples);
		/* The policy was made before the checkpoint was loaded: one
		 * that copies the shared parameters at creation (kstep's and
		 * shadow's replicas, shadow's central copy across processes)
		 * would train on from the initial ones. A new one starts from
		 * what was loaded ("replicas restart from them",
		 * docs/policies.md). A job with phases makes each phase's
		 * policy when the phase starts, after this. */
		if (!job->n_phases && (rc = st_trainer_set_policy(r->model, &job->sync)) < 0) {
			st__runner_say(r, ST_LOG_ERROR, "resuming: cannot restart sync policy %s: %s",
				       job->sync.name ? job->sync.name : "async", st_strerror(rc));
			return rc;
		}
	}
	return ST_OK;
}

static void artifact(st_runner_t *r, const st_runner_artifact_t *a)
{
	st_trace_instant(a->kind == ST_RUNNER_CHECKPOINT ? "checkpoint" : "export",
			 "%s %lld%s", a->rc < 0 ? "failed" : "written", (long long)a->num,
			 a->phase >= 0 ? " (end of phase)" : " (end of training)");
	if (r->obs && r->obs->artifact)
		r->obs->artifact(r->ud, a);
}

/* Whether the final checkpoint is due; across processes rank 0's answer,
 * so that every rank takes part or none (the ranks' step counts differ
 * when some ran out of data first). */
static int final_due(st_runner_t *r)
{
	int due = r->job->ckpt_dir && !st__runner_cancelled(r) &&
		  !st_trainer_checkpoint_current(r->model);
	if (r->net && r->lost) {
		/* A lost rank's shard is gone with it: no checkpoint is whole. */
		if (due)
			st__runner_say(r, ST_LOG_WARN, "no final checkpoint: %d rank%s lost, and "
				       "with %s its shard of the rows", r->lost, r->lost == 1 ? "" : "s",
				       r->lost == 1 ? "it" : "them");
		return 0;
	}
	if (r->net) {
		int32_t d = due;
		if (st_net_bcast(r->net, 0, &d, sizeof d) < 0)
			return 0;   /* a rank is gone: the run fails on its own */
		due = d;
	}
	return due;
}

void st__runner_final_checkpoint(st_runner_t *r, int phase)
{
	if (!r->job->ckpt_dir || !final_due(r))
		return;
	/* The write is a span on the caller's track (main): the time between
	 * a pass and the next that the pipeline's tracks leave empty. */
	const uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
	st_trainer_snap_t *s = NULL;
	char err[1024] = "";
	int64_t step = -1;
	int rc;
	if (r->net) {
		/* Every rank its shard, rank 0 the rest (ops/train/dist_ckpt.c). */
		rc = st_trainer_dist_checkpoint(r->model, &step, err, sizeof err);
	} else {
		rc = st_trainer_snapshot(r->model, NULL, &s);
		if (rc >= 0)
			rc = st_trainer_snap_write(r->model, s, &r->ckpt, err, sizeof err);
		else
			snprintf(err, sizeof err, "%s", st_strerror(rc));
		step = s ? st_trainer_snap_step(s) : -1;
	}
	st_runner_artifact_t a = {
		.kind = ST_RUNNER_CHECKPOINT, .phase = phase, .rc = rc, .dir = r->ckpt.dir,
		.num = step, .error = rc < 0 ? err : NULL,
	};
	if (rc >= 0) {
		if (r->talk)   /* rank 0 published it: one line for the job */
			st__runner_say(r, ST_LOG_INFO, "checkpoint %s/ckpt-%012lld written",
				       r->ckpt.dir, (long long)a.num);
		r->res.ckpts_written++;
	} else {
		/* A rank whose rank 0 went after its report cannot know: err says so. */
		st__runner_say(r, ST_LOG_ERROR, "final checkpoint %s: %s",
			       strstr(err, "before saying whether") ? "outcome unknown" : "not written", err);
		r->res.ckpt_failed++;
	}
	if (t0)
		st_trace_span("work", "checkpoint", NULL, t0, st_trace_now(), -1);
	artifact(r, &a);
	st_trainer_snap_destroy(s);
}

/* Whether the export is due, decided by rank 0 for every rank in a
 * multi-process job (a collective, like final_due). */
static int export_due(st_runner_t *r)
{
	int due = r->job->export_dir && !st__runner_cancelled(r);
	if (!r->net)
		return due;
	if (r->lost) {
		/* A lost rank's shard is gone with it: no export is whole. */
		if (due)
			st__runner_say(r, ST_LOG_WARN, "no export: %d rank%s lost, and with %s "
				       "its shard of the rows", r->lost, r->lost == 1 ? "" : "s",
				       r->lost == 1 ? "it" : "them");
		return 0;
	}
	int32_t d = due;
	if (st_net_bcast(r->net, 0, &d, sizeof d) < 0)
		return 0;   /* a rank is gone: the run fails on its own */
	return d;
}

void st__runner_export(st_runner_t *r, int phase)
{
	const st_job_t *job = r->job;
	if (!job->export_dir || !export_due(r))
		return;
	char err[1024] = "";
	int rc;
	const uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
	if (r->net)   /* every rank its shard, rank 0 the rest (ops/train/dist_ckpt.c) */
		rc = st_trainer_dist_export(r->model, job, job->export_dir, &r->export_seq,
					    job->export_delta, job->export_keep, err, sizeof err);
	else
		rc = st_trainer_export(r->model, job, job->export_dir, r->export_seq,
				       job->export_delta, job->export_keep, err, sizeof err);
	st_runner_artifact_t a = {
		.kind = ST_RUNNER_EXPORT, .phase = phase, .rc = rc, .dir = job->export_dir,
		.num = (int64_t)r->export_seq, .error = rc < 0 ? err : NULL,
	};
	if (rc < 0) {
		st__runner_say(r, ST_LOG_ERROR, "export %llu not written: %s",
			       (unsigned long long)r->export_seq, err);
		r->res.export_failed++;
	} else {
		if (r->talk)   /* rank 0 published it: one line for the job */
			st__runner_say(r, ST_LOG_INFO, "export %s/export-%012llu written",
				       job->export_dir, (unsigned long long)r->export_seq);
		r->res.exports_written++;
		r->export_seq++;
	}
	if (t0)
		st_trace_span("work", "export", NULL, t0, st_trace_now(), -1);
	artifact(r, &a);
}

int st__runner_end_failed(st_runner_t *r)
{
	const int c = r->res.ckpt_failed, e = r->res.export_failed;
	if (!c && !e)
		return 0;
	char what[128];
	if (c && e)
		snprintf(what, sizeof what, "%d checkpoint%s and %d export%s were", c,
			 c == 1 ? "" : "s", e, e == 1 ? "" : "s");
	else if (c)
		snprintf(what, sizeof what, "%d checkpoint%s %s", c, c == 1 ? "" : "s",
			 c == 1 ? "was" : "were");
	else
		snprintf(what, sizeof what, "%d export%s %s", e, e == 1 ? "" : "s",
			 e == 1 ? "was" : "were");
	st__runner_say(r, ST_LOG_ERROR, "the job ran to its end, but %s not written (see above)",
		       what);
	return 1;
}
