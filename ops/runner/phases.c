/*
 * phases.c — a job's phases, in order, on one trainer (model, rows,
 * optimizer state): before each the trainer switches to the phase's policy
 * (st_trainer_set_policy; in a multi-process job every rank first takes
 * rank 0's model, st_trainer_dist_phase); the phase reads its own `data` or
 * the job's train source, at most `rows` rows of it. With `validate` the
 * slice is scored first by the model trained on every earlier slice, before
 * it learns from it (progressive validation, kstep-adam-terabyte-training.md
 * Section 5). After the training pass: an export, the phase's checkpoint,
 * the eval data scored, the observer's phase_end and a {"phase": ...} line
 * in the metrics file.
 *
 * Resume: the phases that ended before the checkpoint are skipped; the one
 * it was taken in continues from its data position (no slice score then:
 * part of the slice was already learnt).
 *
 * Metrics file: truncated at the start; each training pass writes its
 * progress records to PATH.phase, appended to PATH after the pass.
 */
#include "ops/runner/runner_internal.h"
#include "runtime/err.h"
#include "runtime/trace.h"

#include <math.h>
#include <stdio.h>

/* The phase's data: its own or the train source, cut to `rows`. */
static st_source_t phase_source(const st_job_t *job, const st_phase_t *ph)
{
	st_source_t src = ph->has_data ? ph->data : job->train;
	if (ph->rows >= 0)
		src.limit = src.limit >= 0 && src.limit < ph->rows ? src.limit : ph->rows;
	return src;
}

/* Trains phase i (partial: it continues from the resumed checkpoint) and
 * fills p. ST_OK or the error. */
static int run_one(st_runner_t *r, int i, int partial, const char *tmp, double *total_secs,
		   uint64_t *n_before)
{
	const st_job_t *job = r->job;
	const st_phase_t *ph = &job->phases[i];
	st_runner_phase_result_t *p = &r->phases[i];
	int rc = r->net ? st_trainer_dist_phase(r->model) : ST_OK;
	if (rc >= 0)
		rc = st_trainer_set_policy(r->model, &ph->sync);
	if (rc < 0) {
		st__runner_say(r, ST_LOG_ERROR, "phase %s: cannot start sync policy %s: %s",
			       ph->name, ph->sync.name, st_strerror(rc));
		return rc;
	}
	st_source_t src = phase_source(job, ph);
	char rows[32] = "all";
	if (src.limit >= 0)
		snprintf(rows, sizeof rows, "%lld", (long long)src.limit);
	st__runner_say(r, ST_LOG_INFO, "phase %d/%d '%s': sync %s, %s rows of %s", i + 1,
		       job->n_phases, ph->name, ph->sync.name, rows,
		       ph->has_data ? "its own data" : "data.train");
	st_trace_instant("phase", "%d '%s': sync %s", i + 1, ph->name, ph->sync.name);
	p->ran = 1;
	st_trainer_begin_pass(r->model, i, i == partial ? r->pos.pass_batches : 0,
			      i == partial ? r->pos.pass_examples : 0);
	if (ph->validate && i != partial) {
		st_runner_eval_t e;
		if ((rc = st__runner_score(r, ST_RUNNER_PASS_SLICE, i, &src, &e)) < 0)
			return rc;
		p->has_slice = 1;
		p->slice_auc = e.auc;
		p->slice_logloss = e.logloss;
		p->slice_examples = e.examples;
	}
	double secs = 0;
	st_read_stats_t rs;
	rc = st__runner_pass(r, ST_RUNNER_PASS_TRAIN, i, &src, job->epochs, tmp, &secs, &rs);
	if (tmp && st__runner_metrics_append(r->metrics_path, tmp) < 0)
		r->res.metrics_err = 1;
	if (rc < 0)
		return rc;
	st_trainer_end_pass(r->model);
	*total_secs += secs;
	int lost = 0;
	if (r->net && (rc = st_trainer_dist_finish(r->model, &lost)) < 0)
		return rc;
	/* Both run whatever the other did, and the next phases train: the
	 * model is intact (as after a failed interval checkpoint). */
	st__runner_export(r, i);
	st__runner_final_checkpoint(r, i);
	uint64_t n = 0;
	st_trainer_progress(r->model, &p->auc, &p->logloss, &n);
	st__runner_progress_heads(r, &p->heads);
	if (job->has_eval) {
		st_runner_eval_t e;
		if ((rc = st__runner_score(r, ST_RUNNER_PASS_EVAL, i, &job->eval, &e)) < 0)
			return rc;
		p->has_eval = 1;
		p->eval_auc = e.auc;
		p->eval_logloss = e.logloss;
		p->eval_calibration = e.calibration;
		p->eval_examples = e.examples;
		p->eval_heads = e.heads;
	}
	snprintf(p->sync, sizeof p->sync, "%s", st_trainer_policy_name(r->model));
	p->examples = n - *n_before;
	p->secs = secs;
	p->switches = st_trainer_switches(r->model);
	if (r->obs && r->obs->phase_end)
		r->obs->phase_end(r->ud, p);
	if (r->metrics_path && st__runner_metrics_phase(r->metrics_path, p) < 0)
		r->res.metrics_err = 1;
	*n_before = n;
	return ST_OK;
}

int st__runner_phases(st_runner_t *r, double *total_secs)
{
	const st_job_t *job = r->job;
	char tmp[4200];
	*total_secs = 0;
	if (r->metrics_path) {
		int rc = st__runner_metrics_truncate(r->metrics_path);   /* phases append */
		if (rc < 0)
			return rc;
		snprintf(tmp, sizeof tmp, "%s.phase", r->metrics_path);
	}
	int first = 0, partial = -1;
	if (r->resumed && r->pos.phase >= 0) {
		first = (int)r->pos.phase + (r->pos.pass_done ? 1 : 0);
		if (!r->pos.pass_done)
			partial = (int)r->pos.phase;
		else
			r->resumed = 0;
		st__runner_say(r, ST_LOG_INFO, "resuming at phase %d/%d%s", first + 1, job->n_phases,
			       partial >= 0 ? " (mid-phase)" : "");
	}
	uint64_t n_before = 0;
	for (int i = first; i < job->n_phases; i++) {
		int rc = run_one(r, i, partial, r->metrics_path ? tmp : NULL, total_secs, &n_before);
		if (rc < 0)
			return rc;
	}
	if (r->obs && r->obs->phases_end)
		r->obs->phases_end(r->ud, r->phases, job->n_phases);
	return ST_OK;
}
