/*
 * trainer.c — the trainer's orchestration: creating and destroying it
 * (model, optimizers, tables, workers, the first policy), swapping sync
 * policies (job phases, st.sync.auto's switches), the train stage op and
 * the trainer's metrics. The other files of ops/train do the rest
 * (trainer_internal.h lists them): the minibatch step is step.c, the
 * worker threads pool.c, the rows' coming and going pull.c and push.c.
 *
 * Threads:
 *  - pull: any number of graph threads, each with private dedup scratch
 *    (rows.pull_t[ctx->thread_idx]); tables are thread-safe.
 *  - train: ONE graph thread, worker 0, plus workers 1..N-1 of the pool
 *    (pool.c: "st-train-<n>", start handshake, per-batch start and end
 *    barriers, shutdown by sentinel). Per batch, worker 0 sizes every
 *    worker's scratch and publishes the batch; all N run it (one pool
 *    round, step.c); then worker 0 alone does the metrics and asks
 *    st.sync.auto.
 *
 * Policy switching (job phases, st.sync.auto): st_trainer_set_policy and
 * auto's switches run on worker 0's thread between batches, when every
 * other worker waits on the pool's start barrier and no worker is inside a
 * hook. The dense optimizer state and step count live here
 * (env.dense_state / dense_t), so a new policy continues Adam's moments
 * instead of restarting them: the GBA paper's case for switching is that
 * the same hyper-parameters keep working across modes (gba-global-batch-
 * aggregation.txt §1, "no hyper-parameter re-tuning"). Step numbers a
 * policy sees start at 0 at its creation (gstep_base / step_base), so
 * policies that compare workers' steps (bounded staleness) see no history.
 *
 * Locks: step.slow_mu (straggler sleeps, st_trainer_cancel) and
 * ckpt.gate_mu (st_trainer_cancel opens the checkpoint gate), one after
 * the other, never both held.
 */
#include <cblas.h>
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/dist/dist.h"
#include "ops/metrics/catalog.h"
#include "ops/sync/auto.h"
#include "ops/sync/registry.h"
#include "ops/train/trainer_internal.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"
#include "runtime/trace.h"

#define op_fail st__trainer_fail

int st__trainer_fail(st_stage_ctx_t *ctx, int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (ctx->graph)
		return st_stage_fail(ctx, code, "%s", msg);
	st_error("stage %s: %s", ctx->stage ? ctx->stage : "?", msg);
	return code;
}

/* ---- creation ------------------------------------------------------------ */

/* The optimizer settings of the job, or those of the legacy fields when the
 * job language did not fill the new ones. */
void st__trainer_optim_cfg(const st_model_cfg_t *mc, int dense, st_optim_cfg_t *c)
{
	const st_optim_cfg_t *src = dense ? &mc->dense_opt : &mc->sparse_opt;
	if (src->name) {
		*c = *src;
		return;
	}
	memset(c, 0, sizeof *c);
	c->name = mc->optimizer ? mc->optimizer : (char *)"adagrad";
	c->lr = dense ? mc->lr_dense : mc->lr;
	c->l2 = dense && !strcmp(mc->type, "lr") ? 0.0 : mc->l2;
	c->eps = !strcmp(c->name, "adam") ? 1e-8 : 1e-10;
	c->beta1 = 0.9;
	c->beta2 = 0.999;
	c->init_accum = mc->init_accum > 0 ? mc->init_accum : 0.1;
	c->beta = 1.0;
}

static void stats_add(st_sync_stats_t *acc, const st_sync_stats_t *s)
{
	acc->updates += s->updates;
	acc->steps += s->steps;
	acc->dropped += s->dropped;
	acc->bytes += s->bytes;
	for (int i = 0; i < ST_SYNC_HIST; i++)
		acc->staleness[i] += s->staleness[i];
}

void st_trainer_cancel(st_trainer_t *tr)
{
	pthread_mutex_lock(&tr->step.slow_mu);
	tr->step.cancel = 1;
	pthread_cond_broadcast(&tr->step.slow_cv);
	pthread_mutex_unlock(&tr->step.slow_mu);
	st__trainer_ckpt_open_gate(tr, 1);
}

void st_trainer_destroy(st_trainer_t *tr)
{
	if (!tr)
		return;
	st_trainer_cancel(tr);
	st_pool_fini(&tr->step.pool);
	/* The remote row source's reply channels go before the service, the
	 * service (whose thread reads the tables) before the tables. */
	if (tr->rows.src != tr->rows.local)
		st_rowsrc_destroy(tr->rows.src);
	st_dist_destroy(tr->dist.d);
	if (tr->pol.obj)
		tr->pol.ops->destroy(tr->pol.obj);
	st_auto_destroy(tr->pol.autoc);
	free(tr->pol.dstate);
	pthread_mutex_destroy(&tr->step.slow_mu);
	pthread_cond_destroy(&tr->step.slow_cv);
	pthread_mutex_destroy(&tr->ckpt.gate_mu);
	free(tr->ckpt.ended);
	pthread_mutex_destroy(&tr->track.mu);
	st__trainer_track_free(tr);
	pthread_cond_destroy(&tr->ckpt.gate_cv);
	for (int i = 0; tr->step.w && i < tr->N; i++)
		st__trainer_worker_free(&tr->step.w[i]);
	free(tr->step.w);
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		st__trainer_pull_free(&tr->rows.pull_t[i]);
	st_rowsrc_destroy(tr->rows.local);
	free(tr->rows.slot_table);
	st_model_destroy(tr->model);
	st__trainer_eval_free(tr);
	free(tr);
}

int st_trainer_create(st_trainer_t **out, const st_job_t *job, st_metrics_t *metrics)
{
	const st_model_cfg_t *mc = &job->model;
	const char *type = mc->type ? mc->type : "lr";
	/* A job with phases starts with its first phase's policy. */
	const st_sync_cfg_t *scfg = job->n_phases ? &job->phases[0].sync : &job->sync;
	const char *missing = st_trainer_policy_missing(scfg);
	if (missing) {
		st_error("sync policy '%s' is valid but not implemented in this version", missing);
		return ST_EJOB;
	}
	int N = job->train_stage.threads > 0 ? job->train_stage.threads : 1;
	if (N > ST_MAX_STAGE_THREADS || job->minibatch < 1 || job->train.n_slots < 1) {
		st_error("trainer: need 1..%d workers (got %d), minibatch >= 1 (got %d), "
			 "slots >= 1 (got %d)", ST_MAX_STAGE_THREADS, N, job->minibatch,
			 job->train.n_slots);
		return ST_EJOB;
	}
	/* strata runs its own worker threads; OpenBLAS's pool on top of them
	 * oversubscribes the cores (docs/benchmarks.md, "Dense GEMM on this
	 * CPU": 2 workers x 2 BLAS threads lost to 2 x 1 in 9 of 12 shapes).
	 * An explicit OPENBLAS_NUM_THREADS from the user wins. */
	if (!getenv("OPENBLAS_NUM_THREADS"))
		openblas_set_num_threads(1);
	st_trainer_t *tr = calloc(1, sizeof *tr);
	if (!tr)
		return ST_ENOMEM;
	tr->metrics = metrics;
	/* The progress line shows the trainer's metrics as it declares them;
	 * metrics never stop training. */
	if (metrics && st_catalog_declare_train(metrics) < 0)
		st_warn("trainer: its metrics could not be declared (the progress line shows "
			"them unformatted)");
	tr->N = N;
	st_auto_transport_threads(&tr->pol.auto_tp);
	tr->minibatch = (uint32_t)job->minibatch;
	tr->n_slots = job->train.n_slots;
	tr->n_dense = job->train.n_dense;
	tr->mean_loss = strcmp(type, "lr") != 0;
	tr->step.nf_fail = job->on_nonfinite != ST_NONFINITE_WARN;
	if (st_pool_init(&tr->step.pool, N, "st-train") < 0) {
		st_trainer_destroy(tr);
		return ST_ENOMEM;
	}
	pthread_mutex_init(&tr->step.slow_mu, NULL);
	pthread_mutex_init(&tr->ckpt.gate_mu, NULL);
	pthread_mutex_init(&tr->track.mu, NULL);
	pthread_cond_init(&tr->ckpt.gate_cv, NULL);
	tr->ckpt.gate = -1;
	tr->ckpt.phase = -1;
	tr->ckpt.step = -1;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&tr->step.slow_cv, &ca);
	pthread_condattr_destroy(&ca);
	tr->step.strag = job->stragglers;
	if (tr->step.strag.enabled && (tr->step.strag.slowdown < 1 || tr->step.strag.worker >= N ||
				  (!tr->step.strag.random && tr->step.strag.worker < 0))) {
		st_error("stragglers: worker %d of %d, slowdown %g: need a worker in 0..%d "
			 "and slowdown >= 1", tr->step.strag.worker, N, tr->step.strag.slowdown, N - 1);
		st_trainer_destroy(tr);
		return ST_EJOB;
	}

	st_model_cfg_t cfg = *mc;
	cfg.type = (char *)type;
	int rc = st_model_create(&tr->model, &cfg, tr->n_dense, tr->n_slots, job->seed);
	if (rc < 0)
		goto fail;
	st_optim_cfg_t oc;
	st__trainer_optim_cfg(mc, 0, &oc);
	if ((rc = st_optim_init(&tr->sopt, &oc)) >= 0) {
		/* Sparse updates decode, compute in fp32 and round back compact
		 * rows (storage.row_precision); the dense optimizer stays fp32. */
		tr->sopt.row_prec = job->row_prec;
		st__trainer_optim_cfg(mc, 1, &oc);
		rc = st_optim_init(&tr->dopt, &oc);
	}
	if (rc < 0) {
		st_error("model %s: unknown optimizer '%s' (sgd, adagrad, adam, ftrl)", type,
			 oc.name);
		goto fail;
	}
	tr->gstride = st_model_max_row_dim(tr->model);

	if ((rc = st__trainer_store_create(tr, job)) < 0)
		goto fail;

	tr->pol.env = (st_sync_env_t){
		.n_workers = N, .cfg = &tr->pol.cfg_view, .model = tr->model,
		.params = st_model_params(tr->model), .nparams = st_model_nparams(tr->model),
		.dense_opt = &tr->dopt, .sparse_opt = &tr->sopt, .dense_t = &tr->pol.dt,
		.minibatch = tr->minibatch,
	};
	size_t nst = st_sync_dense_state_floats(&tr->pol.env);
	if (!(tr->pol.dstate = malloc(sizeof(float) * (nst ? nst : 1)))) {
		rc = ST_ENOMEM;
		goto fail;
	}
	st_sync_dense_state_init(&tr->pol.env, tr->pol.dstate);
	tr->pol.env.dense_state = tr->pol.dstate;

	tr->step.w = calloc((size_t)N, sizeof *tr->step.w);
	if (!tr->step.w) {
		rc = ST_ENOMEM;
		goto fail;
	}
	for (int i = 0; i < N; i++)
		if ((rc = st__trainer_worker_init(tr, &tr->step.w[i], i)) < 0)
			goto fail;
	/* One rank of a multi-process job gets the multi-process twin of its
	 * policy from st_trainer_attach_dist (which checks its parameters:
	 * hop_bw's b, say, counts ranks there, not this rank's workers). */
	if (!job->dist_run && (rc = st_trainer_set_policy(tr, scfg)) < 0)
		goto fail;
	*out = tr;
	return ST_OK;
fail:
	st_trainer_destroy(tr);
	return rc == ST_EINVAL ? ST_EJOB : rc;
}

st_model_t *st_trainer_model(st_trainer_t *tr) { return tr->model; }
int st_trainer_workers(const st_trainer_t *tr) { return tr->N; }

void st_trainer_pin_workers(st_trainer_t *tr, const int *cpus, int n)
{
	st_pool_pin(&tr->step.pool, cpus, n);
}

st_table_t *st_trainer_table_for_slot(st_trainer_t *tr, int slot)
{
	return slot >= 0 && slot < tr->n_slots ? st__trainer_table(tr, tr->rows.slot_table[slot])
					       : NULL;
}

int st_trainer_ntables(const st_trainer_t *tr) { return tr->rows.n_tables; }

st_table_t *st_trainer_table(st_trainer_t *tr, int k)
{
	return st__trainer_table(tr, k);
}

int st_trainer_set_row(st_trainer_t *tr, int slot, uint64_t key, const float *row)
{
	st_table_t *t = st_trainer_table_for_slot(tr, slot);
	if (!t)
		return ST_EINVAL;
	float *r;
	int rc = st_table_get_or_create(t, key, 0, &r);
	if (rc < 0)
		return rc;
	if (!r)
		return ST_EINVAL;   /* not admitted */
	/* Rounded to the table's precision (storage.row_precision). */
	st_rowfmt_encode(tr->rows.prec, row, r, (size_t)st_model_row_dim(tr->model, slot));
	st_table_unpin(t, &r, 1);
	return ST_OK;
}

void st_trainer_sync_stats(const st_trainer_t *tr, st_sync_stats_t *out)
{
	tr->pol.ops->report(tr->pol.obj, out);
	stats_add(out, &tr->pol.past);
}

const char *st_trainer_policy_missing(const st_sync_cfg_t *cfg)
{
	if (st_auto_is_meta(cfg))
		return st_auto_missing(cfg);
	const char *name = cfg->name ? cfg->name : "async";
	return st_sync_find(name) ? NULL : name;
}

/* Replaces the current policy by a new one made from cfg on the same
 * parameters and dense optimizer state. The new one is created first, so
 * a failure leaves the old one in place. Worker 0's thread, between
 * batches. mid_pass (st.sync.auto): the ranks of a multi-process job hand
 * over between a lockstep and a free policy here ("auto across
 * processes"); between passes (phases) st_trainer_dist_phase did. */
static int swap_policy(st_trainer_t *tr, const st_sync_cfg_t *cfg, int mid_pass)
{
	const char *pname = cfg->name ? cfg->name : "async";
	const st_policy_t *pol = st_policy_find(pname);
	const st_sync_ops_t *ops = !pol ? NULL : tr->dist.d ? pol->dist : pol->local;
	if (!ops && tr->dist.d) {
		char names[256];
		st_error("sync policy '%s' does not run across processes yet (%s do)", pname,
			 st_policy_names(names, sizeof names, 0, 1));
		return ST_EJOB;
	}
	if (!ops) {
		st_error("sync policy '%s' is valid but not implemented in this version",
			 cfg->name);
		return ST_EJOB;
	}
	const int lockstep = tr->dist.d && ops->schedule == ST_SYNC_LOCKSTEP &&
			     !(ops->flags & ST_SYNC_RANK_LOCAL);
	int rc = ST_OK;
	const int hand = tr->dist.d && mid_pass;
	if (hand && tr->dist.lockstep && !lockstep)
		rc = st_dist_sync_end(tr->dist.d, tr->dist.clock.ssteps);
	else if (hand && !tr->dist.lockstep && lockstep)
		rc = st_dist_sync_begin(tr->dist.d);
	if (rc < 0)
		return rc;
	void *obj = NULL;
	tr->pol.env.cfg = cfg;
	tr->pol.env.dist_step0 = tr->dist.clock.ssteps;
	tr->pol.env.step0 = tr->step.gstep;
	rc = ops->create(&obj, &tr->pol.env);
	/* The policy may keep env->cfg: cfg may not outlive this call, so it
	 * gets a view without parameters (policies read them in create). */
	tr->pol.env.cfg = &tr->pol.cfg_view;
	if (rc < 0)
		return rc == ST_EINVAL ? ST_EJOB : rc;
	if (tr->pol.obj) {
		st_sync_stats_t s;
		tr->pol.ops->report(tr->pol.obj, &s);
		stats_add(&tr->pol.past, &s);
		tr->pol.ops->destroy(tr->pol.obj);
	}
	tr->pol.ops = ops;
	tr->pol.obj = obj;
	tr->dist.lockstep = lockstep;
	st_rowsrc_clock_t *clk = &tr->dist.clock;
	__atomic_store_n(&clk->fresh, tr->dist.d && (ops->flags & ST_SYNC_FRESH_ROWS),
			 __ATOMIC_RELAXED);
	/* How far a pull may run ahead of the applied steps: a lockstep
	 * policy's lag parameter (the registry's: hybrid's staleness bound,
	 * PERSIA's, persia-hybrid-training.md Section 4.1), else none
	 * (allreduce, kstep); async and shadow without bound. The pull thread
	 * reads them: the batches pulled from now on that are not trained yet
	 * are this policy's next sync steps. */
	const int64_t trained = (int64_t)__atomic_load_n(&clk->trained, __ATOMIC_ACQUIRE);
	__atomic_store_n(&clk->soff, (int64_t)clk->ssteps - trained, __ATOMIC_RELAXED);
	__atomic_store_n(&clk->lag, !tr->dist.lockstep ? -1
			 : !pol->lag_param ? 0
			 : (int64_t)st_sync_cfg_num(cfg, pol->lag_param, 0), __ATOMIC_RELEASE);
	tr->step.gstep_base = tr->step.gstep;
	for (int i = 0; i < tr->N; i++)
		tr->step.w[i].step_base = tr->step.w[i].steps;
	/* st.sync.auto decides on step times of the policy running now. */
	if (tr->pol.autoc)
		st_auto_restart(tr->pol.autoc);
	st_trace_instant("policy", "%s%s", pname, mid_pass ? " (auto switch)" : "");
	return ST_OK;
}

int st_trainer_set_policy(st_trainer_t *tr, const st_sync_cfg_t *cfg)
{
	if (!st_auto_is_meta(cfg)) {
		int rc = swap_policy(tr, cfg, 0);
		if (rc >= 0) {
			st_auto_destroy(tr->pol.autoc);
			tr->pol.autoc = NULL;
		}
		return rc;
	}
	if (tr->dist.d && !st_auto_dist_ok(cfg))
		return ST_EJOB;   /* the job's policy or a phase's */
	/* A new controller starts on its synchronous side; the old policy and
	 * controller stay when that policy cannot be made. */
	st_auto_t *a;
	int rc = st_auto_create(&a, cfg, tr->N, &tr->pol.auto_tp);
	if (rc >= 0 && (rc = swap_policy(tr, st_auto_policy(a, 0), 0)) < 0)
		st_auto_destroy(a);
	if (rc < 0)
		return rc;
	st_auto_destroy(tr->pol.autoc);
	tr->pol.autoc = a;
	return ST_OK;
}

const char *st_trainer_policy_name(const st_trainer_t *tr)
{
	return tr->pol.ops->name;
}

uint64_t st_trainer_switches(const st_trainer_t *tr)
{
	return tr->pol.switches;
}

static int train_thread_start(void *state, st_stage_ctx_t *ctx)
{
	st_trainer_t *tr = state;
	if (ctx->n_threads != 1)
		return op_fail(ctx, ST_EINVAL, "the train stage runs on one graph thread "
			       "(it starts its %d workers itself), got %d", tr->N, ctx->n_threads);
	return st_pool_start(&tr->step.pool);
}

static void train_thread_stop(void *state, st_stage_ctx_t *ctx)
{
	st_trainer_t *tr = state;
	st_pool_stop(&tr->step.pool);
}

static void refresh_metrics(st_trainer_t *tr)
{
	if (!tr->metrics)
		return;
	double auc, loss;
	st_trainer_progress(tr, &auc, &loss, NULL);
	st_metrics_set(tr->metrics, "loss", loss);
	if (!isnan(auc))
		st_metrics_set(tr->metrics, "auc", auc);
	/* Heads after the first: auc_<label>, loss_<label> (head 0 keeps the
	 * names above, which every parser of a one-label job reads). */
	for (int h = 1; h < st_model_nheads(tr->model); h++) {
		char name[48];
		st_trainer_progress_head(tr, h, &auc, &loss, NULL);
		snprintf(name, sizeof name, "loss_%s", st_model_head_name(tr->model, h));
		st_metrics_set(tr->metrics, name, loss);
		snprintf(name, sizeof name, "auc_%s", st_model_head_name(tr->model, h));
		if (!isnan(auc))
			st_metrics_set(tr->metrics, name, auc);
	}
	st_sync_stats_t s;
	st_trainer_sync_stats(tr, &s);
	st_sync_stats_publish(&s, tr->metrics);
	if (tr->pol.autoc || tr->pol.switches)
		st_metrics_set(tr->metrics, "sync_switches", (double)tr->pol.switches);
	st__trainer_dist_metrics(tr);
	/* Each worker's own speed: examples over the seconds it spent
	 * computing and straggling (not waiting on others), so a slow worker
	 * shows even under allreduce, where every step takes the slowest
	 * worker's time. */
	for (int i = 0; i < tr->N; i++) {
		char name[32];
		snprintf(name, sizeof name, "worker_eps_%d", i);
		if (tr->step.w[i].busy > 0)
			st_metrics_set(tr->metrics, name,
				       (double)tr->step.w[i].examples / tr->step.w[i].busy);
	}
}

/* The policy's counters on the trace (runtime/trace.h), after every
 * trained batch while recording: on the train thread, which is also the
 * one that swaps policies (st.sync.auto), so the policy asked is the one
 * in place. The sums cover the policies of the run so far (pol.past). */
static void trace_sync(st_trainer_t *tr)
{
	st_sync_stats_t s;
	double mean, max;
	st_trainer_sync_stats(tr, &s);
	st_sync_stats_staleness(&s, &mean, &max);
	st_trace_counter("sync staleness mean", mean);
	st_trace_counter("sync staleness max", max);
	st_trace_counter("sync dropped", (double)s.dropped);
	st_trace_counter("sync bytes", (double)s.bytes);
}

/* ---- st.sync.auto (ops/sync/auto.c decides; the trainer swaps) ---------- */

/* Acts on a verdict: swaps to the sub-policy it wants, if another. */
static int auto_act(st_trainer_t *tr, const st_auto_verdict_t *v)
{
	if (v->want == st_auto_current(tr->pol.autoc))
		return ST_OK;
	const char *from = tr->pol.ops->name;
	int rc = swap_policy(tr, st_auto_policy(tr->pol.autoc, v->want), 1);
	if (rc < 0)
		return rc;
	st_auto_switched(tr->pol.autoc, v, tr->batches, from, tr->pol.ops->name);
	tr->pol.switches++;
	if (tr->metrics)
		st_metrics_set(tr->metrics, "sync_switches", (double)tr->pol.switches);
	return ST_OK;
}

int st__trainer_auto_tick(st_trainer_t *tr, int done)
{
	st_auto_verdict_t v;
	int rc = st_auto_tick(tr->pol.autoc, done, tr->batches, tr->pol.ops->name, &v);
	return rc < 0 ? rc : auto_act(tr, &v);
}

int st__trainer_auto_vote(st_trainer_t *tr, int done, int *all_done)
{
	st_auto_verdict_t v;
	int rc = st_auto_vote(tr->pol.autoc, done, tr->batches, tr->pol.ops->name, &v);
	*all_done = v.all_done;
	return rc < 0 ? rc : auto_act(tr, &v);
}

/* After batch b trained: the job stops at the first non-finite loss (ST_ERANGE
 * with the step, the batch and the minibatch named) unless on_nonfinite =
 * "warn", which warns once and counts them in the metric "nonfinite_minibatches".
 * The workers recorded them (step.c, note_nonfinite); worker 0 acts here,
 * after the batch's round. */
static int check_nonfinite(st_trainer_t *tr, st_stage_ctx_t *ctx)
{
	struct tr_step *s = &tr->step;
	const uint64_t n = __atomic_load_n(&s->nf_count, __ATOMIC_RELAXED);
	if (n == s->nf_seen)
		return ST_OK;
	const int first = s->nf_seen == 0;
	s->nf_seen = n;
	if (tr->metrics)
		st_metrics_set(tr->metrics, "nonfinite_minibatches", (double)n);
	char where[256];
	snprintf(where, sizeof where, "the training loss is %s at step %llu, minibatch %u of %u "
		 "(read batch %llu, worker %d)", isnan(s->nf.loss) ? "NaN" :
		 s->nf.loss > 0 ? "+inf" : "-inf", (unsigned long long)s->nf.batch,
		 s->nf.mb + 1, s->nf.nmb, (unsigned long long)s->nf.seq, s->nf.worker);
	if (s->nf_fail)
		return op_fail(ctx, ST_ERANGE, "%s: the model diverged and training stopped there. "
			       "Lower the learning rate (model.optimizer.lr), or set "
			       "stages.train.on_nonfinite = \"warn\" to train on", where);
	if (first)
		st_warn("%s: training goes on (stages.train.on_nonfinite = \"warn\"); the "
			"metric nonfinite_minibatches counts them", where);
	return ST_OK;
}

static int train_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			 st_batch_t **out)
{
	st_trainer_t *tr = state;
	*out = b;
	if ((int)b->n_dense != tr->n_dense || (int)b->n_slots > tr->n_slots)
		return op_fail(ctx, ST_EINVAL, "batch %llu has %u dense features and %u slots, "
			       "the model expects %d and %d", (unsigned long long)b->seq,
			       b->n_dense, b->n_slots, tr->n_dense, tr->n_slots);
	if (b->n && (uint32_t)st_model_nheads(tr->model) > b->n_labels)
		return op_fail(ctx, ST_EINVAL, "batch %llu has %u label%s per example, the model "
			       "%d heads", (unsigned long long)b->seq, b->n_labels,
			       b->n_labels == 1 ? "" : "s", st_model_nheads(tr->model));
	if (b->n && (!b->rows || !b->key_idx || !b->aux))
		return op_fail(ctx, ST_EINVAL, "batch %llu was not pulled (no rows)",
			       (unsigned long long)b->seq);
	if (b->n == 0) {
		st__trainer_dist_after(tr, b);
		return ST_OK;
	}
	int rc = st__trainer_size_workers(tr, b->n_uniq);
	if (rc >= 0)
		rc = tr->pol.ops->begin_batch(tr->pol.obj, b->n_uniq);
	if (rc < 0)
		return op_fail(ctx, rc, "out of memory for train scratch (%u unique keys, "
			       "%d workers)", b->n_uniq, tr->N);
	if ((rc = st__trainer_dist_before(tr, ctx, b)) < 0)
		return rc;
	st__trainer_run(tr, b);
	st__trainer_dist_after(tr, b);
	if (!b->eval && tr->pol.ops->schedule == ST_SYNC_LOCKSTEP)
		tr->step.gstep += (tr->step.nmb + (uint32_t)tr->N - 1) / (uint32_t)tr->N;
	tr->step.cur = NULL;
	if (tr->step.err < 0)
		return op_fail(ctx, tr->step.err, "batch %llu: sync policy %s failed: %s",
			       (unsigned long long)b->seq, tr->pol.ops->name, st_strerror(tr->step.err));
	if (!b->eval && (rc = check_nonfinite(tr, ctx)) < 0)
		return rc;
	if (b->eval) {
		if ((rc = st__trainer_eval_keep(tr, b)) < 0)
			return op_fail(ctx, rc, "out of memory keeping eval predictions");
		if (tr->metrics)
			st_metrics_add(tr->metrics, "eval_examples", b->n);
		return ST_OK;
	}
	if (tr->metrics)
		st_metrics_add(tr->metrics, "examples", b->n);
	tr->batches++;
	if (st_trace_enabled())
		trace_sync(tr);
	if (tr->pol.autoc && (rc = st__trainer_auto_tick(tr, 0)) < 0)
		return op_fail(ctx, rc, "batch %llu: st.sync.auto could not %s: %s",
			       (unsigned long long)b->seq,
			       st_auto_across(tr->pol.autoc) ? "vote with the other ranks or switch"
							 : "switch policy",
			       st_strerror(rc));
	tr->since += b->n;
	if (tr->since >= AUC_REFRESH) {
		tr->since = 0;
		refresh_metrics(tr);
	}
	return ST_OK;
}

static int train_finish(void *state, st_stage_ctx_t *ctx)
{
	st_trainer_t *tr = state;
	if (!tr->dist.drained)   /* a training pass (eval passes start drained) */
		st__trainer_dist_ckpt_ended(tr);
	int rc = st__trainer_dist_drain(tr);
	if (rc >= 0 && tr->pol.ops->finish)
		rc = tr->pol.ops->finish(tr->pol.obj);
	refresh_metrics(tr);
	if (tr->step.nf_seen && !tr->step.nf_fail)
		st_warn("%llu minibatch%s had a non-finite training loss in this pass",
			(unsigned long long)tr->step.nf_seen, tr->step.nf_seen == 1 ? "" : "es");
	if (rc < 0)
		return op_fail(ctx, rc, "the last steps with the other ranks: %s (sync policy %s)",
			       st_strerror(rc), tr->pol.ops->name);
	return ST_OK;
}

void st_trainer_progress(const st_trainer_t *tr, double *auc, double *logloss,
			 uint64_t *n)
{
	st_trainer_progress_head(tr, 0, auc, logloss, n);
}

void st_trainer_progress_head(const st_trainer_t *tr, int h, double *auc, double *logloss,
			      uint64_t *n)
{
	assert(h >= 0 && h < st_model_nheads(tr->model));
	const st_auc_acc_t *accs[ST_MAX_STAGE_THREADS];
	for (int i = 0; i < tr->N; i++)
		accs[i] = tr->step.w[i].acc[h];
	st_auc_stats_t s;
	st_auc_acc_read(accs, tr->N, &s);
	if (auc)
		*auc = s.auc;
	if (logloss)
		*logloss = s.logloss;
	if (n)
		*n = s.n;
}

const st_stage_ops_t st_trainer_train_ops = {
	.name = "train",
	.process = train_process,
	.thread_start = train_thread_start,
	.thread_stop = train_thread_stop,
	.finish = train_finish,
};
