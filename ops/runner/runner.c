/*
 * runner.c — a run's life: what st_runner_create checks before anything
 * starts, the steps of st_runner_run in order (runner.h lists them), a
 * job without phases (one training pass, its final checkpoint, export and
 * eval), st_runner_cancel, and the run's status.
 *
 * Status: a failure the job is to blame for (an unusable setting, a folder
 * it cannot write, an incompatible checkpoint) is JOB_ERROR; any other
 * failure, a failed end-of-training checkpoint or export, or an incomplete
 * metrics file is FAILED; a cancelled run is INTERRUPTED whatever else
 * happened, so that a caller never takes a stopped run for a finished one.
 *
 * Messages go to the observer's message callback, or without one to
 * st_log and stderr: the lines a run prints on stderr are the runner's
 * (the result lines on stdout are the caller's to format from the
 * observer's structs).
 *
 * Threads: everything runs on the caller's thread but st_runner_cancel
 * (any thread) and the observer's batch_end (the dump stage's thread).
 * Lock order: st_runner.lock, then the graph's and the trainer's locks
 * inside st_graph_cancel / st_trainer_cancel; never the other way round.
 */
#include "ops/metrics/catalog.h"
#include "ops/runner/runner_internal.h"
#include "ops/sync/registry.h"
#include "runtime/err.h"

#include <assert.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void st__runner_say(st_runner_t *r, int level, const char *fmt, ...)
{
	char small[1024], *text = small;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof small && (text = malloc((size_t)n + 1))) {
		va_start(ap, fmt);
		vsnprintf(text, (size_t)n + 1, fmt, ap);
		va_end(ap);
	} else if (!text) {
		text = small;   /* out of memory: the message cut short */
	}
	if (r->obs && r->obs->message)
		r->obs->message(r->ud, level, text);
	else if (level == ST_RUNNER_LINE)
		fprintf(stderr, "%s\n", text);
	else
		st_log((enum st_log_level)level, "%s", text);
	if (text != small)
		free(text);
}

/* ---- cancel ------------------------------------------------------------- */

/* r->cancelled holds the first cancel's signal + 1 (0: not cancelled), in
 * one atomic so that a reader never sees the flag without its signal. */
int st__runner_cancelled(const st_runner_t *r)
{
	return atomic_load(&((st_runner_t *)r)->cancelled);
}

static const char *cancel_why(int signo)
{
	return signo == SIGINT ? "interrupted (SIGINT)"
	     : signo == SIGTERM ? "terminated (SIGTERM)" : "interrupted";
}

void st_runner_cancel(st_runner_t *r, int signo)
{
	int expected = 0;
	atomic_compare_exchange_strong(&r->cancelled, &expected, signo + 1);
	pthread_mutex_lock(&r->lock);
	if (r->graph)
		st_graph_cancel(r->graph, cancel_why(signo));
	if (r->cancel_trainer)
		st_trainer_cancel(r->cancel_trainer);
	pthread_mutex_unlock(&r->lock);
}

void st__runner_set_graph(st_runner_t *r, st_graph_t *g)
{
	pthread_mutex_lock(&r->lock);
	r->graph = g;
	pthread_mutex_unlock(&r->lock);
	if (g && st__runner_cancelled(r))
		st_graph_cancel(g, "interrupted");
}

void st__runner_set_trainer(st_runner_t *r, st_trainer_t *tr)
{
	pthread_mutex_lock(&r->lock);
	r->cancel_trainer = tr;
	pthread_mutex_unlock(&r->lock);
	if (tr && st__runner_cancelled(r))
		st_trainer_cancel(tr);
}

/* ---- create ------------------------------------------------------------- */

/* Every sync policy the job names is implemented in this version (the
 * registry knows names lang/ validates but this version does not run). */
static int check_implemented(st_runner_t *r)
{
	const st_job_t *job = r->job;
	for (int i = job->n_phases ? 0 : -1; i < job->n_phases; i++) {
		const char *m = st_trainer_policy_missing(i < 0 ? &job->sync : &job->phases[i].sync);
		if (!m)
			continue;
		char names[256];
		st__runner_say(r, ST_RUNNER_LINE, "%s: sync policy '%s' is valid but not implemented "
			       "in this version; implemented: %s", job->file, m,
			       st_policy_names(names, sizeof names, 0, 0));
		return ST_EJOB;
	}
	return ST_OK;
}

int st_runner_create(st_runner_t **out, st_job_t *job, const st_runner_opts_t *opts,
		     const st_runner_observer_t *obs, void *ud)
{
	assert(out && job && opts);
	assert(!obs || obs->version == ST_RUNNER_OBSERVER_VERSION);
	*out = NULL;
	st_runner_t *r = calloc(1, sizeof *r);
	if (!r)
		return ST_ENOMEM;
	r->job = job;
	r->opts = *opts;
	r->obs = obs;
	r->ud = ud;
	pthread_mutex_init(&r->lock, NULL);
	int rc = check_implemented(r);
	if (rc >= 0 && opts->net) {
		r->dist = 1;
		r->ncfg = *opts->net;
		r->opts.net = &r->ncfg;
		rc = st__runner_dist_check(r);
	}
	if (rc >= 0 && job->n_phases &&
	    !(r->phases = calloc((size_t)job->n_phases, sizeof *r->phases)))
		rc = ST_ENOMEM;
	if (rc < 0) {
		st_runner_destroy(r);
		return rc;
	}
	r->talk = !r->dist || r->ncfg.rank == 0;
	r->metrics_path = opts->metrics_path ? opts->metrics_path : job->metrics_path;
	if (r->dist && r->ncfg.rank != 0 && r->metrics_path) {
		/* One metrics file per rank: FILE for rank 0, FILE.rank<r> for the others. */
		snprintf(r->rank_metrics, sizeof r->rank_metrics, "%s.rank%d", r->metrics_path,
			 r->ncfg.rank);
		r->metrics_path = r->rank_metrics;
	}
	for (int i = 0; i < job->n_phases; i++) {
		st_runner_phase_result_t *p = &r->phases[i];
		p->index = i;
		p->name = job->phases[i].name;
		p->validate = job->phases[i].validate;
		p->reported = r->talk;
		p->dist = r->dist;
		p->auc = p->logloss = NAN;
		p->eval_auc = p->eval_logloss = p->eval_calibration = NAN;
		p->slice_auc = p->slice_logloss = NAN;
	}
	r->res.n_phases = job->n_phases;
	r->res.phases = r->phases;
	*out = r;
	return ST_OK;
}

void st_runner_destroy(st_runner_t *r)
{
	if (!r)
		return;
	st_trainer_destroy(r->model);
	st_net_close(r->net);
	st_metrics_destroy(r->metrics);
	st_topo_destroy(r->topo);
	free(r->model_desc);
	free(r->phases);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

const st_runner_result_t *st_runner_result(const st_runner_t *r)
{
	return &r->res;
}

/* ---- run ---------------------------------------------------------------- */

static void train_end(st_runner_t *r, const st_runner_totals_t *t)
{
	r->res.trained = 1;
	r->res.totals = *t;
	if (r->obs && r->obs->train_end)
		r->obs->train_end(r->ud, t);
}

/* The model's digest of one process (opts.digest). */
static void digest(st_runner_t *r, st_runner_totals_t *t)
{
	if (!r->opts.digest)
		return;
	t->has_digest = 1;
	t->digest = st_trainer_digest(r->model, 1, &t->digest_rows);
}

/* A job with phases, then the totals. */
static int run_phases(st_runner_t *r)
{
	const st_job_t *job = r->job;
	st__runner_say(r, ST_LOG_INFO, "%s: %d phases, %d train worker%s, model %s", job->name,
		       job->n_phases, job->train_stage.threads,
		       job->train_stage.threads == 1 ? "" : "s", job->model.type);
	st_runner_totals_t t = { .phases = 1, .ranks = 1 };
	int rc = st__runner_phases(r, &t.secs);
	if (rc < 0)
		return rc;
	st_trainer_progress(r->model, &t.auc, &t.logloss, &t.examples);
	st__runner_progress_heads(r, &t.heads);
	/* Multi-process: the whole job's totals, then a clean end. */
	if (r->net) {
		if ((rc = st__runner_dist_totals(r, &t)) < 0)
			return rc;
		train_end(r, &t);
		return st_trainer_dist_leave(r->model, &r->lost);
	}
	digest(r, &t);
	train_end(r, &t);
	return ST_OK;
}

/* A job without phases: one training pass, the final checkpoint and
 * export, the eval. */
static int run_plain(st_runner_t *r)
{
	const st_job_t *job = r->job;
	if (r->net)
		st__runner_say(r, ST_LOG_INFO, "rank %d of %d: trains batches %d, %d + %d, ... of "
			       "the stream", st_net_rank(r->net), st_net_size(r->net),
			       st_net_rank(r->net), st_net_rank(r->net), st_net_size(r->net));
	st__runner_say(r, ST_LOG_INFO, "%s: training on %d file%s (%s), %d epoch%s, batch %d, "
		       "minibatch %d, %d read threads, %d train worker%s, sync %s, model %s",
		       job->name, job->train.n_paths, job->train.n_paths == 1 ? "" : "s",
		       job->train.format, job->epochs, job->epochs == 1 ? "" : "s",
		       job->batch_size, job->minibatch, job->read.threads,
		       job->train_stage.threads, job->train_stage.threads == 1 ? "" : "s",
		       job->sync.name, job->model.type);
	st_runner_totals_t t = { .ranks = 1 };
	st_trainer_begin_pass(r->model, -1, r->resumed ? r->pos.pass_batches : 0,
			      r->resumed ? r->pos.pass_examples : 0);
	int rc = st__runner_pass(r, ST_RUNNER_PASS_TRAIN, -1, &job->train, job->epochs,
				 r->metrics_path, &t.secs, &t.read);
	if (rc < 0)
		return rc;
	st_trainer_end_pass(r->model);
	if (r->net && (rc = st_trainer_dist_finish(r->model, &r->lost)) < 0)
		return rc;
	st_trainer_progress(r->model, &t.auc, &t.logloss, &t.examples);
	st__runner_progress_heads(r, &t.heads);
	if (r->net) {
		if ((rc = st__runner_dist_totals(r, &t)) < 0)
			return rc;
		train_end(r, &t);
		st__runner_final_checkpoint(r, -1);   /* collectives: every rank */
		st__runner_export(r, -1);
	} else {
		digest(r, &t);
		train_end(r, &t);
		/* Each reports its own failure; the eval still runs. */
		st__runner_final_checkpoint(r, -1);
		st__runner_export(r, -1);
	}
	if (job->has_eval) {
		if ((rc = st__runner_score(r, ST_RUNNER_PASS_EVAL, -1, &job->eval, &r->res.eval)) < 0)
			return rc;
		r->res.has_eval = r->res.eval.has_result;
	}
	/* A clean end of a multi-process job: nobody leaves while another
	 * rank may still pull from it (a second round of the finish). */
	if (r->net && (rc = st_trainer_dist_leave(r->model, &r->lost)) < 0)
		return rc;
	return ST_OK;
}

/* Everything up to the first training pass. */
static int prepare(st_runner_t *r)
{
	st_job_t *job = r->job;
	int rc;
	/* Ranks of one machine share the data folder: rank 0 alone generates
	 * it, before it joins, so the others (waiting to join) read complete
	 * files. */
	if ((!r->dist || r->ncfg.rank == 0) && (rc = st__runner_generate(r)) < 0)
		return rc;
	if (st__runner_cancelled(r))   /* the generator does not stop on a cancel */
		return ST_ECANCELED;
	if ((rc = st__runner_folders(r)) < 0)
		return rc;
	st__runner_placement(r);
	if ((rc = st_metrics_create(&r->metrics)) < 0 ||
	    (rc = st_catalog_declare_read(r->metrics)) < 0) {
		st__runner_say(r, ST_LOG_ERROR, "cannot create the metrics: out of memory");
		return rc;
	}
	if ((rc = st_trainer_create(&r->model, job, r->metrics)) < 0) {
		/* A setting only the model or policy can check (a global batch
		 * that is not a multiple of the minibatch, k-step without Adam):
		 * a job error like the others, reported before any training. */
		if (rc == ST_EJOB || rc == ST_EINVAL) {
			st__runner_say(r, ST_RUNNER_LINE, "strata: %s: the job's model or sync "
				       "settings are invalid (see above); nothing was trained",
				       job->file);
			r->job_error = 1;
		} else {
			st__runner_say(r, ST_LOG_ERROR, "cannot create the model: %s",
				       st_strerror(rc));
		}
		return rc;
	}
	if (r->dist && (rc = st__runner_dist_join(r)) < 0)
		return rc;
	/* Rank 0 generated the data before it joined: the others find the
	 * files now. */
	if (r->dist && r->ncfg.rank != 0 && job->gen.enabled &&
	    (rc = st__runner_refresh_paths(r)) < 0)
		return rc;
	if (r->pin)
		st_trainer_pin_workers(r->model, r->place[ST__RUNNER_TRAIN_STAGE].cpus,
				       r->place[ST__RUNNER_TRAIN_STAGE].n_threads);
	st__runner_set_trainer(r, r->model);
	if ((rc = st__runner_outputs(r)) < 0)
		return rc;
	return st__runner_resume(r);
}

int st_runner_run(st_runner_t *r)
{
	assert(!r->ran);
	r->ran = 1;
	st_runner_result_t *res = &r->res;
	int rc = prepare(r);
	if (rc >= 0)
		rc = r->job->n_phases ? run_phases(r) : run_plain(r);
	if (rc >= 0 && st__runner_end_failed(r))
		rc = ST_EIO;
	st__runner_set_trainer(r, NULL);
	res->status = r->job_error ? ST_RUNNER_JOB_ERROR : rc < 0 ? ST_RUNNER_FAILED : ST_RUNNER_OK;
	if (res->status == ST_RUNNER_OK && res->metrics_err) {
		st__runner_say(r, ST_LOG_ERROR, "the job ran, but the metrics file %s is incomplete "
			       "(see above)", r->metrics_path);
		res->status = ST_RUNNER_FAILED;
		rc = ST_EIO;
	}
	int c = st__runner_cancelled(r);
	if (c) {
		/* Stopped, or finished while stopping: either way the caller
		 * must not take it for a run that simply succeeded. */
		res->status = ST_RUNNER_INTERRUPTED;
		res->signo = c - 1;
		rc = ST_ECANCELED;
	}
	res->rc = rc < 0 ? rc : ST_OK;
	return res->status == ST_RUNNER_OK ? ST_OK
	     : res->status == ST_RUNNER_JOB_ERROR ? ST_EJOB : res->rc;
}
