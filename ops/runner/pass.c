/*
 * pass.c — one pass of the stage graph over a data source: a training pass
 * (continuing mid-way after a resume), or an eval or slice pass whose
 * batches are only scored; and the scores of such a pass, collected from
 * every rank of a multi-process job on rank 0.
 *
 * Per pass: a read stage over the source (in a multi-process job only this
 * rank's share of the batches), the graph (stages.c), the metrics file's
 * progress reporter for a training pass, then the graph runs on the calling
 * thread's behalf until the data ends, a stage fails or st_runner_cancel
 * stops it. A pass stopped by a cancel is no error to report, but it did
 * not complete: its error stays ST_ECANCELED.
 */
#include "ops/runner/runner_internal.h"
#include "runtime/err.h"
#include "runtime/metrics.h"
#include "runtime/trace.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The read stage of a pass, at the resumed position for the first training
 * pass after a resume. */
static int open_reader(st_runner_t *r, st_read_stage_t **rs, const st_source_t *src,
		       int epochs, int eval)
{
	int rc = st_read_stage_create(rs, src, (uint32_t)r->job->batch_size, epochs, eval);
	if (rc < 0) {
		st__runner_say(r, ST_LOG_ERROR, "cannot start the read stage: %s", st_strerror(rc));
		return rc;
	}
	if (r->net && (rc = st_read_stage_shard(*rs, st_net_rank(r->net),
						st_net_size(r->net))) < 0)
		return rc;
	if (!eval && r->resumed &&
	    (rc = st_read_stage_seek(*rs, r->pos.file, r->pos.records, r->pos.pass_batches,
				     r->pos.pass_examples)) < 0) {
		st__runner_say(r, ST_LOG_ERROR, "%s: the checkpoint's data position (file %llu, "
			       "record %llu) is past the data", r->pos.dir,
			       (unsigned long long)r->pos.file, (unsigned long long)r->pos.records);
		return rc;
	}
	if (!eval)
		r->resumed = 0;   /* only the first training pass continues mid-way */
	return ST_OK;
}

int st__runner_pass(st_runner_t *r, st_runner_pass_kind_t kind, int phase,
		    const st_source_t *src, int epochs, const char *metrics_path,
		    double *secs, st_read_stats_t *rstats)
{
	const int eval = kind != ST_RUNNER_PASS_TRAIN;
	st_read_stage_t *rs = NULL;
	st_graph_t *g = NULL;
	st_progress_t *pr = NULL;
	*secs = 0;
	*rstats = (st_read_stats_t){ 0 };
	int rc = open_reader(r, &rs, src, epochs, eval);
	if (rc < 0)
		goto out;
	if (r->net)
		st_trainer_dist_pass(r->model, eval);
	if ((rc = st__runner_graph(r, &g, rs)) < 0)
		goto out;
	if (metrics_path &&
	    (rc = st_progress_start(&pr, g, r->metrics, r->job->progress_secs, metrics_path,
				    0)) < 0) {
		st__runner_say(r, ST_LOG_ERROR, "cannot write metrics to %s: %s", metrics_path,
			       st_strerror(rc));
		goto out;
	}
	st_runner_pass_t p = {
		.kind = kind, .phase = phase, .epochs = epochs, .graph = g, .metrics = r->metrics,
	};
	if (r->obs && r->obs->pass_begin)
		r->obs->pass_begin(r->ud, &p);
	st__runner_set_graph(r, g);
	double t0 = now_s();
	uint64_t tt0 = st_trace_now();
	rc = st_graph_run(g);
	*secs = now_s() - t0;
	/* The pass on the trace's main track (batch ids count per pass). */
	st_trace_span("pass", kind == ST_RUNNER_PASS_TRAIN ? "train pass"
		      : kind == ST_RUNNER_PASS_EVAL ? "eval pass" : "slice pass", NULL, tt0,
		      st_trace_now(), phase);
	st__runner_set_graph(r, NULL);
	st_read_stage_totals(rs, rstats);
	if (r->metrics) {
		/* The list and missing-value counts of the pass (ops/read). */
		st_metrics_add(r->metrics, "lists_truncated", (double)rstats->lists_truncated);
		st_metrics_add(r->metrics, "list_items_empty", (double)rstats->list_items_empty);
		st_metrics_add(r->metrics, "lists_empty", (double)rstats->lists_empty);
		st_metrics_add(r->metrics, "missing_keys", (double)rstats->missing_keys);
	}
	p.rc = rc;
	p.secs = *secs;
	p.read = *rstats;
	if (r->obs && r->obs->pass_end)
		r->obs->pass_end(r->ud, &p);
	if (st_progress_stop(pr) < 0)
		r->res.metrics_err = 1;
	if (rc < 0 && !(rc == ST_ECANCELED && st__runner_cancelled(r)))
		st__runner_say(r, ST_RUNNER_LINE, "strata: error: %s",
			       st_graph_error(g) ? st_graph_error(g) : st_strerror(rc));
	else if (rc >= 0)
		rc = st_read_stage_check_bad(rs, eval ? "eval" : "train");   /* logs */
out:
	st_graph_destroy(g);
	st_read_stage_destroy(rs);
	return rc;
}

void st__runner_progress_heads(st_runner_t *r, st_runner_heads_t *hs)
{
	const st_model_t *m = st_trainer_model(r->model);
	hs->n = st_model_nheads(m);
	for (int h = 0; h < hs->n; h++) {
		hs->name[h] = st_model_head_name(m, h);
		hs->calibration[h] = NAN;
		st_trainer_progress_head(r->model, h, &hs->auc[h], &hs->logloss[h], NULL);
	}
}

int st__runner_eval_heads(st_runner_t *r, st_runner_heads_t *hs)
{
	const st_model_t *m = st_trainer_model(r->model);
	hs->n = st_model_nheads(m);
	for (int h = 0; h < hs->n; h++) {
		hs->name[h] = st_model_head_name(m, h);
		int rc = st_trainer_eval_result_head(r->model, h, &hs->auc[h], &hs->logloss[h],
						     &hs->calibration[h], NULL);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}

int st__runner_score(st_runner_t *r, st_runner_pass_kind_t kind, int phase,
		     const st_source_t *src, st_runner_eval_t *e)
{
	st_read_stats_t es;
	*e = (st_runner_eval_t){ .kind = kind, .phase = phase, .auc = NAN, .logloss = NAN,
				 .calibration = NAN };
	st_trainer_reset_eval(r->model);
	int rc = st__runner_pass(r, kind, phase, src, 1, NULL, &e->secs, &es);
	if (rc >= 0 && r->net && (rc = st_trainer_dist_eval_gather(r->model)) < 0)
		st__runner_say(r, ST_LOG_ERROR, "cannot collect the eval results of the other ranks");
	if (rc < 0)
		return rc;
	if (!r->net || st_net_rank(r->net) == 0) {
		if ((rc = st_trainer_eval_result(r->model, &e->auc, &e->logloss, &e->calibration,
						 &e->examples)) < 0)
			return rc;
		e->nonfinite = st_trainer_eval_nonfinite(r->model);
		e->has_result = 1;
		if ((rc = st__runner_eval_heads(r, &e->heads)) < 0)
			return rc;
	}
	if (r->obs && r->obs->eval)
		r->obs->eval(r->ud, e);
	return ST_OK;
}
