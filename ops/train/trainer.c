/*
 * trainer.c — pull / train / push / dump stage ops over a model preset, its
 * embedding tables, N worker threads and a sync policy.
 *
 * Threads:
 *  - pull: any number of graph threads, each with private dedup scratch
 *    (pull_t[ctx->thread_idx]); tables are thread-safe.
 *  - train: ONE graph thread, worker 0, plus workers 1..N-1 started here
 *    ("st-train-<n>"). Per batch, worker 0 sizes every worker's scratch,
 *    publishes the batch and waits on `bar` (start); all N run the batch;
 *    all N wait on `bar` again (end); then worker 0 alone does the metrics.
 *    Shutdown: worker 0 sets `stop` and passes the start barrier once more;
 *    the workers see it and return; worker 0 joins them.
 *  - Each worker touches only its own worker_t, the batch columns it
 *    writes (b->pred of its own minibatches) and, through the policy, the
 *    shared parameters (the policy says how that is synchronized).
 *
 * Invariants: every worker reaches both barriers of every batch, whatever
 * happens (an error is recorded in `err` and reported by worker 0 after the
 * end barrier), so no worker is ever left waiting. A non-finite minibatch
 * loss is handled the same way: the worker records it (nf_count, the first
 * one in nf), and worker 0 acts on it after the end barrier
 * (check_nonfinite: fail the stage, or warn, per stages.train.on_nonfinite). The per-worker `mark`
 * stamps increase monotonically across batches, so the mark array needs no
 * clearing between minibatches or batches.
 *
 * Where sparse updates are applied: inside train, at every step, by the
 * policy — not in push. A minibatch must see the updates of the minibatches
 * before it, rows included, exactly as a PyTorch loop over minibatches does
 * (optimizer.step() after each backward); deferring the row updates of a
 * whole batch to push would make every minibatch of the batch read the
 * batch-start rows, i.e. a different (and batch-size-dependent) algorithm.
 * Push is left with bookkeeping (see docs/design-notes.md).
 *
 * Policy switching (job phases, st.sync.auto): st_trainer_set_policy and
 * the auto check run on worker 0's thread between batches, when every other
 * worker waits on the start barrier and no worker is inside a hook. The
 * dense optimizer state and step count live here (env.dense_state /
 * dense_t), so a new policy continues Adam's moments instead of restarting
 * them: the GBA paper's case for switching is that the same
 * hyper-parameters keep working across modes (gba-global-batch-
 * aggregation.txt §1, "no hyper-parameter re-tuning"). Step numbers a
 * policy sees start at 0 at its creation (gstep_base / step_base), so
 * policies that compare workers' steps (bounded staleness) see no history.
 *
 * Stragglers (st.stragglers): a slowed worker sleeps (slowdown - 1) * t
 * after computing a minibatch in t seconds, before apply. The sleep is a
 * real delay, emulating a slow machine — not synchronization — as a timed
 * wait on `slow_cv`, which st_trainer_cancel / destroy wake so shutdown
 * never waits one out.
 *
 * Locks: only `slow_mu` (the straggler sleep) besides the tables' shard
 * locks; never both. The barriers are the only synchronization of the
 * worker pool.
 */
#include "ops/dist/dist.h"
#include "ops/sync/registry.h"
#include "ops/train/trainer_internal.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/metrics/auc.h"
#include "ops/metrics/catalog.h"
#include "ops/optim/optim.h"
#include "runtime/err.h"

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
static void optim_cfg(const st_model_cfg_t *mc, int dense, st_optim_cfg_t *c)
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

static void worker_free(worker_t *w)
{
	st_model_ws_destroy(w->ws);
	free(w->gdense);
	free(w->gu);
	free(w->prow_buf);
	free(w->prow);
	free(w->mark);
	free(w->touched);
	free(w->ridx);
	free(w->rok);
	st_dist_stepbuf_destroy(w->dsb);
	st_auc_acc_destroy(w->acc);
	free(w->ring);
}

static void cfg_free(st_sync_cfg_t *c)
{
	for (int i = 0; i < c->n_params; i++) {
		free(c->keys[i]);
		free(c->strs[i]);
	}
	free(c->keys);
	free(c->strs);
	free(c->vals);
	free(c->name);
	memset(c, 0, sizeof *c);
}

/* Deep copy of a policy's name and parameters (not its sub-policies). */
static int cfg_copy(st_sync_cfg_t *dst, const st_sync_cfg_t *src)
{
	memset(dst, 0, sizeof *dst);
	int n = src->n_params;
	dst->name = strdup(src->name ? src->name : "async");
	dst->keys = calloc((size_t)n + 1, sizeof(char *));
	dst->strs = calloc((size_t)n + 1, sizeof(char *));
	dst->vals = calloc((size_t)n + 1, sizeof(double));
	if (!dst->name || !dst->keys || !dst->strs || !dst->vals) {
		cfg_free(dst);
		return ST_ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		dst->n_params++;
		dst->vals[i] = src->vals[i];
		if ((src->keys[i] && !(dst->keys[i] = strdup(src->keys[i]))) ||
		    (src->strs[i] && !(dst->strs[i] = strdup(src->strs[i])))) {
			cfg_free(dst);
			return ST_ENOMEM;
		}
	}
	return ST_OK;
}

/* A numeric parameter of cfg, or def (ops do not link lang/job.c). */
static double cfg_param(const st_sync_cfg_t *cfg, const char *key, double def)
{
	for (int i = 0; i < cfg->n_params; i++)
		if (cfg->keys[i] && !strcmp(cfg->keys[i], key))
			return cfg->vals[i];
	return def;
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

static void stop_workers(st_trainer_t *tr)
{
	if (!tr->started)
		return;
	tr->stop = 1;
	pthread_barrier_wait(&tr->bar);
	for (int i = 1; i < tr->N; i++)
		pthread_join(tr->w[i].tid, NULL);
	tr->started = 0;
	tr->stop = 0;
}

void st_trainer_cancel(st_trainer_t *tr)
{
	pthread_mutex_lock(&tr->slow_mu);
	tr->cancel = 1;
	pthread_cond_broadcast(&tr->slow_cv);
	pthread_mutex_unlock(&tr->slow_mu);
	st__trainer_ckpt_open_gate(tr, 1);
}

void st_trainer_destroy(st_trainer_t *tr)
{
	if (!tr)
		return;
	st_trainer_cancel(tr);
	stop_workers(tr);
	st_dist_destroy(tr->dist);   /* its service thread uses the tables */
	pthread_barrier_destroy(&tr->bar);
	if (tr->sync)
		tr->sops->destroy(tr->sync);
	for (int i = 0; i < 2; i++)
		cfg_free(&tr->auto_sub[i]);
	free(tr->dstate);
	pthread_mutex_destroy(&tr->slow_mu);
	pthread_cond_destroy(&tr->slow_cv);
	pthread_mutex_destroy(&tr->gate_mu);
	pthread_mutex_destroy(&tr->track_mu);
	st__trainer_track_free(tr);
	pthread_cond_destroy(&tr->gate_cv);
	for (int i = 0; tr->w && i < tr->N; i++)
		worker_free(&tr->w[i]);
	free(tr->w);
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		st__trainer_pull_free(&tr->pull_t[i]);
	st__trainer_tables_destroy(tr);
	free(tr->slot_table);
	st_model_destroy(tr->model);
	free(tr->ev_pred);
	free(tr->ev_label);
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
	tr->minibatch = (uint32_t)job->minibatch;
	tr->n_slots = job->train.n_slots;
	tr->n_dense = job->train.n_dense;
	tr->mean_loss = strcmp(type, "lr") != 0;
	tr->nf_fail = job->on_nonfinite != ST_NONFINITE_WARN;
	pthread_barrier_init(&tr->bar, NULL, (unsigned)N);
	pthread_mutex_init(&tr->slow_mu, NULL);
	pthread_mutex_init(&tr->gate_mu, NULL);
	pthread_mutex_init(&tr->track_mu, NULL);
	pthread_cond_init(&tr->gate_cv, NULL);
	tr->gate = -1;
	tr->phase = -1;
	tr->ckpt_step = -1;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&tr->slow_cv, &ca);
	pthread_condattr_destroy(&ca);
	tr->strag = job->stragglers;
	if (tr->strag.enabled && (tr->strag.slowdown < 1 || tr->strag.worker >= N ||
				  (!tr->strag.random && tr->strag.worker < 0))) {
		st_error("stragglers: worker %d of %d, slowdown %g: need a worker in 0..%d "
			 "and slowdown >= 1", tr->strag.worker, N, tr->strag.slowdown, N - 1);
		st_trainer_destroy(tr);
		return ST_EJOB;
	}

	st_model_cfg_t cfg = *mc;
	cfg.type = (char *)type;
	int rc = st_model_create(&tr->model, &cfg, tr->n_dense, tr->n_slots, job->seed);
	if (rc < 0)
		goto fail;
	st_optim_cfg_t oc;
	optim_cfg(mc, 0, &oc);
	if ((rc = st_optim_init(&tr->sopt, &oc)) >= 0) {
		optim_cfg(mc, 1, &oc);
		rc = st_optim_init(&tr->dopt, &oc);
	}
	if (rc < 0) {
		st_error("model %s: unknown optimizer '%s' (sgd, adagrad, adam, ftrl)", type,
			 oc.name);
		goto fail;
	}
	tr->gstride = st_model_max_row_dim(tr->model);

	/* One table per distinct row width. New rows: uniform(-s, s) from
	 * (seed, key). The neural presets need nonzero embeddings to break
	 * symmetry; a job that leaves init_scale at 0 gets 0.05 there. */
	float scale = (float)mc->init_scale;
	if (!(scale > 0) && tr->mean_loss)
		scale = 0.05f;
	if (!strcmp(type, "lr") || tr->sopt.kind == ST_OPT_FTRL)
		scale = 0.0f;   /* FTRL's closed form assumes rows start at w = 0 */
	int tdim[MAX_TABLES];
	st_table_opts_t base[MAX_TABLES];
	tr->slot_table = calloc((size_t)tr->n_slots, sizeof(int));
	if (!tr->slot_table) {
		rc = ST_ENOMEM;
		goto fail;
	}
	for (int s = 0; s < tr->n_slots; s++) {
		int rd = st_model_row_dim(tr->model, s), t;
		for (t = 0; t < tr->n_tables && tdim[t] != rd; t++)
			;
		if (t == tr->n_tables) {
			if (t == MAX_TABLES) {
				st_error("model %s: at most %d distinct slot dims", type, MAX_TABLES);
				rc = ST_EJOB;
				goto fail;
			}
			base[t] = (st_table_opts_t){
				.dim = (uint32_t)rd,
				.state_dim = (uint32_t)st_optim_state_floats(&tr->sopt, (size_t)rd),
				.seed = job->seed + (uint64_t)t,
				.init_scale = scale,
				.state_init = (tr->sopt.kind == ST_OPT_ADAGRAD ||
					       tr->sopt.kind == ST_OPT_ADAGRAD_ROW) ? tr->sopt.init_accum
										 : 0.0f,
				.n_shards = 64,
				.admit_min_count = (uint32_t)(mc->admit_min_count > 0
							      ? mc->admit_min_count : 0),
				.admit_prob = mc->admit_prob,
			};
			tdim[t] = rd;
			tr->n_tables++;
		}
		tr->slot_table[s] = t;
	}
	if ((rc = st__trainer_tables_create(tr, job, tdim, base)) < 0)
		goto fail;

	/* TTL (model.ttl) counts batches: the store's clock is the batch
	 * sequence number that pull stamps on every row it resolves. Rows of
	 * batches still in flight were stamped with a later or nearly equal
	 * number, so a TTL larger than the batches that can be in flight at once
	 * never evicts a row a batch still uses (push runs the sweep, in batch
	 * order). Sweeps scan every row, so they run every ttl/8 batches: a row
	 * goes between ttl and ttl + ttl/8 batches after its last use. */
	tr->mem_budget = job->mem_bytes;
	if (mc->ttl_steps > 0) {
		uint64_t inflight = 8;
		const st_stage_cfg_t *sc[] = { &job->read, &job->pull, &job->train_stage,
					       &job->push, &job->dump };
		for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++)
			inflight += (uint64_t)(sc[i]->queue > 0 ? sc[i]->queue : 0) +
				    (uint64_t)(sc[i]->threads > 0 ? sc[i]->threads : 0);
		uint64_t ttl = mc->ttl_steps;
		if (ttl < inflight) {
			st_warn("model.ttl = %llu batches is shorter than the %llu batches that can "
				"be in flight; using %llu", (unsigned long long)ttl,
				(unsigned long long)inflight, (unsigned long long)inflight);
			ttl = inflight;
		}
		tr->ttl = ttl > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)ttl;
		tr->evict_every = tr->ttl / 8 ? tr->ttl / 8 : 1;
	}

	tr->env = (st_sync_env_t){
		.n_workers = N, .cfg = &tr->sync_cfg, .model = tr->model,
		.params = st_model_params(tr->model), .nparams = st_model_nparams(tr->model),
		.dense_opt = &tr->dopt, .sparse_opt = &tr->sopt, .dense_t = &tr->dt,
		.minibatch = tr->minibatch,
	};
	size_t nst = st_sync_dense_state_floats(&tr->env);
	if (!(tr->dstate = malloc(sizeof(float) * (nst ? nst : 1)))) {
		rc = ST_ENOMEM;
		goto fail;
	}
	st_sync_dense_state_init(&tr->env, tr->dstate);
	tr->env.dense_state = tr->dstate;

	tr->w = calloc((size_t)N, sizeof *tr->w);
	if (!tr->w) {
		rc = ST_ENOMEM;
		goto fail;
	}
	for (int i = 0; i < N; i++) {
		worker_t *w = &tr->w[i];
		w->tr = tr;
		w->idx = i;
		w->cpu = -1;
		w->gdense = malloc(sizeof(float) * (tr->env.nparams ? tr->env.nparams : 1));
		if (!w->gdense || (rc = st_model_ws_create(&w->ws, tr->model, tr->minibatch)) < 0 ||
		    (rc = st_auc_acc_create(&w->acc, 16)) < 0) {
			rc = ST_ENOMEM;
			goto fail;
		}
	}
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
	for (int i = 1; i < tr->N; i++)
		tr->w[i].cpu = i < n ? cpus[i] : -1;
}

st_table_t *st_trainer_table_for_slot(st_trainer_t *tr, int slot)
{
	return slot >= 0 && slot < tr->n_slots ? tr->tables[tr->slot_table[slot]] : NULL;
}

int st_trainer_ntables(const st_trainer_t *tr) { return tr->n_tables; }

st_table_t *st_trainer_table(st_trainer_t *tr, int k)
{
	return k >= 0 && k < tr->n_tables ? tr->tables[k] : NULL;
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
	memcpy(r, row, sizeof(float) * (size_t)st_model_row_dim(tr->model, slot));
	st_table_unpin(t, &r, 1);
	return ST_OK;
}

void st_trainer_sync_stats(const st_trainer_t *tr, st_sync_stats_t *out)
{
	tr->sops->report(tr->sync, out);
	stats_add(out, &tr->past);
}

/* Whether cfg names a meta policy (st.sync.auto: two sub-policies). */
static int is_meta(const st_sync_cfg_t *cfg)
{
	const st_policy_t *p = st_policy_find(cfg->name);
	return p && (p->caps & ST_POL_META);
}

const char *st_trainer_policy_missing(const st_sync_cfg_t *cfg)
{
	const char *name = cfg->name ? cfg->name : "async";
	if (is_meta(cfg)) {
		for (int i = 0; i < 2; i++) {
			const char *m = cfg->sub[i] ? st_trainer_policy_missing(cfg->sub[i])
						    : (i ? "async" : "allreduce");
			if (m && (cfg->sub[i] || !st_sync_find(m)))
				return m;
		}
		return NULL;
	}
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
	const st_sync_ops_t *ops = !pol ? NULL : tr->dist ? pol->dist : pol->local;
	if (!ops && tr->dist) {
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
	const int lockstep = tr->dist && ops->schedule == ST_SYNC_LOCKSTEP &&
			     !(ops->flags & ST_SYNC_RANK_LOCAL);
	int rc = ST_OK;
	const int hand = tr->dist && mid_pass;
	if (hand && tr->dist_lockstep && !lockstep)
		rc = st_dist_sync_end(tr->dist, tr->dist_ssteps);
	else if (hand && !tr->dist_lockstep && lockstep)
		rc = st_dist_sync_begin(tr->dist);
	if (rc < 0)
		return rc;
	void *obj = NULL;
	tr->env.cfg = cfg;
	tr->env.dist_step0 = tr->dist_ssteps;
	rc = ops->create(&obj, &tr->env);
	/* The policy may keep env->cfg: cfg may not outlive this call, so it
	 * gets a view without parameters (policies read them in create). */
	tr->env.cfg = &tr->sync_cfg;
	if (rc < 0)
		return rc == ST_EINVAL ? ST_EJOB : rc;
	if (tr->sync) {
		st_sync_stats_t s;
		tr->sops->report(tr->sync, &s);
		stats_add(&tr->past, &s);
		tr->sops->destroy(tr->sync);
	}
	tr->sops = ops;
	tr->sync = obj;
	tr->dist_lockstep = lockstep;
	__atomic_store_n(&tr->dist_fresh, tr->dist && (ops->flags & ST_SYNC_FRESH_ROWS),
			 __ATOMIC_RELAXED);
	/* How far a pull may run ahead of the applied steps: a lockstep
	 * policy's lag parameter (the registry's: hybrid's staleness bound,
	 * PERSIA's, persia-hybrid-training.md Section 4.1), else none
	 * (allreduce, kstep); async and shadow without bound. The pull thread
	 * reads them: the batches pulled from now on that are not trained yet
	 * are this policy's next sync steps. */
	const int64_t trained = (int64_t)__atomic_load_n(&tr->dist_trained, __ATOMIC_ACQUIRE);
	__atomic_store_n(&tr->dist_soff, (int64_t)tr->dist_ssteps - trained, __ATOMIC_RELAXED);
	__atomic_store_n(&tr->dist_lag, !tr->dist_lockstep ? -1
			 : !pol->lag_param ? 0
			 : (int64_t)cfg_param(cfg, pol->lag_param, 0), __ATOMIC_RELEASE);
	tr->gstep_base = tr->gstep;
	for (int i = 0; i < tr->N; i++) {
		tr->w[i].step_base = tr->w[i].steps;
		tr->w[i].ring_n = 0;
	}
	return ST_OK;
}

int st_trainer_set_policy(st_trainer_t *tr, const st_sync_cfg_t *cfg)
{
	if (!is_meta(cfg)) {
		int rc = swap_policy(tr, cfg, 0);
		if (rc >= 0)
			tr->auto_on = 0;
		return rc;
	}
	if (tr->dist && !st_trainer_auto_dist_ok(cfg))
		return ST_EJOB;   /* the job's policy or a phase's */
	st_sync_cfg_t sub[2] = { { 0 }, { 0 } };
	static const char *const defaults[2] = { "allreduce", "async" };
	int rc = ST_OK;
	for (int i = 0; i < 2 && rc >= 0; i++) {
		st_sync_cfg_t d = { .name = (char *)defaults[i] };
		rc = cfg_copy(&sub[i], cfg->sub[i] ? cfg->sub[i] : &d);
	}
	uint32_t window = (uint32_t)cfg_param(cfg, "window", 20);
	window = window < 1 ? 1 : window > 1024 ? 1024 : window;
	for (int i = 0; i < tr->N && rc >= 0; i++) {
		double *r = realloc(tr->w[i].ring, sizeof(double) * window);
		if (!r)
			rc = ST_ENOMEM;
		else
			tr->w[i].ring = r;
	}
	if (rc >= 0)
		rc = swap_policy(tr, &sub[0], 0);
	if (rc < 0) {
		cfg_free(&sub[0]);
		cfg_free(&sub[1]);
		return rc;
	}
	for (int i = 0; i < 2; i++) {
		cfg_free(&tr->auto_sub[i]);
		tr->auto_sub[i] = sub[i];
	}
	tr->auto_on = 1;
	tr->auto_cur = 0;
	tr->auto_window = window;
	tr->auto_threshold = cfg_param(cfg, "threshold", 1.5);
	return ST_OK;
}

const char *st_trainer_policy_name(const st_trainer_t *tr)
{
	return tr->sops->name;
}

uint64_t st_trainer_switches(const st_trainer_t *tr)
{
	return tr->switches;
}

void st_trainer_set_time_fn(st_trainer_t *tr, st_trainer_time_fn fn, void *ud)
{
	tr->time_fn = fn;
	tr->time_ud = ud;
}

void st_trainer_worker_stats(const st_trainer_t *tr, int w, uint64_t *minibatches,
			     uint64_t *examples, double *busy_s)
{
	const worker_t *x = &tr->w[w];
	if (minibatches)
		*minibatches = __atomic_load_n(&x->mbs, __ATOMIC_RELAXED);
	if (examples)
		*examples = __atomic_load_n(&x->examples, __ATOMIC_RELAXED);
	if (busy_s)
		*busy_s = x->busy;
}

/* ---- pull ------------------------------------------------------------------ */

/* Whether worker steps read their rows from the owners (ST_SYNC_STEP_ROWS
 * in a multi-process job). */
static int step_rows(const st_trainer_t *tr)
{
	return tr->dist && (tr->sops->flags & ST_SYNC_STEP_ROWS);
}

static int size_workers(st_trainer_t *tr, uint32_t n_uniq)
{
	const int steprows = step_rows(tr);
	const int priv = (tr->sops->flags & ST_SYNC_RELAXED_READS) || steprows;
	for (int i = 0; i < tr->N; i++) {
		worker_t *w = &tr->w[i];
		if (steprows && !w->dsb && !(w->dsb = st_dist_stepbuf_create(tr->dist, i)))
			return ST_ENOMEM;
		/* A policy switch may turn relaxed reads or step rows on after
		 * the scratch was sized without the private row copies. */
		if (n_uniq <= w->gcap && (!priv || w->prow) && (!steprows || w->ridx))
			continue;
		uint32_t cap = n_uniq + n_uniq / 2;
		free(w->gu);
		free(w->prow_buf);
		free(w->prow);
		free(w->mark);
		free(w->touched);
		free(w->ridx);
		free(w->rok);
		w->gu = malloc(sizeof(float) * cap * (size_t)tr->gstride);
		w->mark = calloc(cap, sizeof(uint32_t));
		w->touched = malloc(sizeof(uint32_t) * cap);
		w->prow_buf = priv ? malloc(sizeof(float) * cap * (size_t)tr->gstride) : NULL;
		w->prow = priv ? malloc(sizeof(float *) * cap) : NULL;
		w->ridx = steprows ? malloc(sizeof(uint32_t) * cap) : NULL;
		w->rok = steprows ? malloc(cap) : NULL;
		w->stamp = 0;
		if (!w->gu || !w->mark || !w->touched || (priv && (!w->prow_buf || !w->prow)) ||
		    (steprows && (!w->ridx || !w->rok))) {
			w->gcap = 0;
			return ST_ENOMEM;
		}
		w->gcap = cap;
	}
	return ST_OK;
}

static void set_err(st_trainer_t *tr, int rc)
{
	int zero = 0;
	__atomic_compare_exchange_n(&tr->err, &zero, rc, 0, __ATOMIC_RELAXED,
				    __ATOMIC_RELAXED);
}

static inline uint32_t mb_size(const st_trainer_t *tr, const st_batch_t *b, uint32_t mb)
{
	uint32_t r0 = mb * tr->minibatch;
	return b->n - r0 < tr->minibatch ? b->n - r0 : tr->minibatch;
}

/* ST_SYNC_STEP_ROWS: the current values of the minibatch's admitted rows
 * (w->touched[0..nt)) from their owners into w->prow; a row its owner no
 * longer has trains on the batch's copy (its update is dropped there, as
 * for any row that expired). The batch's copies (b->rows) only say which
 * keys are admitted. */
static int read_step_rows(st_trainer_t *tr, worker_t *w, const st_batch_t *b, uint32_t nt)
{
	float *const *shared = b->rows;
	const int gs = tr->gstride;
	uint32_t m = 0;
	for (uint32_t i = 0; i < nt; i++) {
		const uint32_t u = w->touched[i];
		if (shared[u])
			w->ridx[m++] = u;
		w->prow[u] = NULL;
	}
	const dist_rowbuf_t *rb = b->rowbuf;
	int rc = st_dist_pull_step(tr->dist, w->dsb, b->uniq, rb->utable, w->ridx, m,
				   (uint32_t)b->seq, w->prow_buf, (size_t)gs, w->rok);
	for (uint32_t q = 0; rc >= 0 && q < m; q++) {
		const uint32_t u = w->ridx[q];
		w->prow[u] = w->rok[u] ? w->prow_buf + (size_t)u * gs : shared[u];
	}
	return rc;
}

/* A minibatch's training loss was NaN or infinite (worker w, any thread):
 * counted, and the first one recorded for the message (train_process). */
static void note_nonfinite(st_trainer_t *tr, const worker_t *w, const st_batch_t *b,
			   uint32_t mb, double loss)
{
	__atomic_fetch_add(&tr->nf_count, 1, __ATOMIC_RELAXED);
	int zero = 0;
	if (!__atomic_compare_exchange_n(&tr->nf_first, &zero, 1, 0, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;
	tr->nf.loss = loss;
	tr->nf.batch = tr->batches + 1;
	tr->nf.seq = b->seq;
	tr->nf.mb = mb;
	tr->nf.nmb = tr->nmb;
	tr->nf.worker = w->idx;
}

/* After batch b trained: the job stops at the first non-finite loss (ST_ERANGE
 * with the step, the batch and the minibatch named) unless on_nonfinite =
 * "warn", which warns once and counts them in the metric "nonfinite_minibatches". */
static int check_nonfinite(st_trainer_t *tr, st_stage_ctx_t *ctx)
{
	const uint64_t n = __atomic_load_n(&tr->nf_count, __ATOMIC_RELAXED);
	if (n == tr->nf_seen)
		return ST_OK;
	const int first = tr->nf_seen == 0;
	tr->nf_seen = n;
	if (tr->metrics)
		st_metrics_set(tr->metrics, "nonfinite_minibatches", (double)n);
	char where[256];
	snprintf(where, sizeof where, "the training loss is %s at step %llu, minibatch %u of %u "
		 "(read batch %llu, worker %d)", isnan(tr->nf.loss) ? "NaN" :
		 tr->nf.loss > 0 ? "+inf" : "-inf", (unsigned long long)tr->nf.batch,
		 tr->nf.mb + 1, tr->nf.nmb, (unsigned long long)tr->nf.seq, tr->nf.worker);
	if (tr->nf_fail)
		return op_fail(ctx, ST_ERANGE, "%s: the model diverged and training stopped there. "
			       "Lower the learning rate (model.optimizer.lr), or set "
			       "stages.train.on_nonfinite = \"warn\" to train on", where);
	if (first)
		st_warn("%s: training goes on (stages.train.on_nonfinite = \"warn\"); the "
			"metric nonfinite_minibatches counts them", where);
	return ST_OK;
}

/* Forward + backward of minibatch mb on worker w; fills g. ST_OK, or the
 * error of reading the step's rows (ST_SYNC_STEP_ROWS; g is then unset). */
static int compute(st_trainer_t *tr, worker_t *w, st_batch_t *b, uint32_t mb,
		   const float *params, float scale, st_sync_grads_t *g)
{
	const uint32_t r0 = mb * tr->minibatch, n = mb_size(tr, b, mb);
	const uint16_t *rdim = b->aux;
	float *const *shared = b->rows;
	const int relaxed = tr->sops->flags & ST_SYNC_RELAXED_READS;
	const int steprows = step_rows(tr);
	const int gs = tr->gstride;
	uint32_t stamp = ++w->stamp, nt = 0;
	for (uint32_t k = b->row_off[r0]; k < b->row_off[r0 + n]; k++) {
		uint32_t u = b->key_idx[k];
		if (w->mark[u] == stamp)
			continue;
		w->mark[u] = stamp;
		w->touched[nt++] = u;
		float *gu = w->gu + (size_t)u * gs;
		memset(gu, 0, sizeof(float) * rdim[u]);
		if (relaxed && !steprows) {
			float *p = shared[u] ? w->prow_buf + (size_t)u * gs : NULL;
			if (p)
				st_sync_load_relaxed(p, shared[u], rdim[u]);
			w->prow[u] = p;
		}
	}
	if (steprows) {
		int rc = read_step_rows(tr, w, b, nt);
		if (rc < 0)
			return rc;
	}
	memset(w->gdense, 0, sizeof(float) * tr->env.nparams);
	double loss = st_model_step(tr->model, w->ws, b, r0, n, relaxed || steprows ? w->prow : shared,
				    params, scale, b->pred + r0, w->gdense, w->gu, gs);
	if (!isfinite(loss))
		note_nonfinite(tr, w, b, mb, loss);
	for (uint32_t i = r0; i < r0 + n; i++)
		st_auc_acc_add(w->acc, b->pred[i], b->labels[i]);
	*g = (st_sync_grads_t){
		.n_examples = n, .dense = w->gdense, .n_rows = nt, .uidx = w->touched,
		.rows = shared, .row_dim = rdim, .grad = w->gu, .gstride = gs,
		.mark = w->mark, .stamp = stamp, .keys = b->uniq,
		.utable = b->rowbuf ? ((const dist_rowbuf_t *)b->rowbuf)->utable : NULL,
		.owner_token = b->rowbuf ? ((const dist_rowbuf_t *)b->rowbuf)->tokens : NULL,
	};
	return ST_OK;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether worker w's minibatch number `step` is slowed: the fixed worker,
 * or a draw deterministic in (seed, worker, step). */
static int slowed(const st_trainer_t *tr, int w, uint64_t step)
{
	const st_straggler_cfg_t *c = &tr->strag;
	if (!c->enabled || !(c->slowdown > 1) || (c->steps && step >= c->steps))
		return 0;
	if (!c->random)
		return w == c->worker;
	uint64_t h = mix64(c->seed ^ mix64(((uint64_t)w << 40) ^ step ^ UINT64_C(0x9e3779b97f4a7c15)));
	return (double)(h >> 11) * 0x1.0p-53 < c->probability;
}

/* Sleeps secs unless the trainer is cancelled (then returns at once). */
static void straggle(st_trainer_t *tr, double secs)
{
	double until = mono_s() + secs;
	struct timespec ts;
	ts.tv_sec = (time_t)until;
	ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&tr->slow_mu);
	while (!tr->cancel &&
	       pthread_cond_timedwait(&tr->slow_cv, &tr->slow_mu, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&tr->slow_mu);
}

/* After worker w computed a minibatch of n examples since t0: the straggler
 * delay, the per-worker speed counters and auto's step-time sample. */
static void after_compute(st_trainer_t *tr, worker_t *w, double t0, uint32_t n)
{
	double t = mono_s() - t0;
	uint64_t step = w->mbs;
	if (slowed(tr, w->idx, step)) {
		double d = (tr->strag.slowdown - 1.0) * t;
		straggle(tr, d);
		t += d;
	}
	w->busy += t;
	__atomic_store_n(&w->mbs, step + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&w->examples, w->examples + n, __ATOMIC_RELAXED);
	if (tr->auto_on) {
		if (tr->time_fn)
			t = tr->time_fn(tr->time_ud, w->idx, step, t);
		w->ring[w->ring_n % tr->auto_window] = t;
		w->ring_n++;
	}
}

static void run_batch(st_trainer_t *tr, worker_t *w)
{
	st_batch_t *b = tr->cur;
	const uint32_t nmb = tr->nmb;
	const int N = tr->N;
	const st_sync_ops_t *ops = tr->sops;
	if (b->eval) {
		/* Scoring only: nothing writes parameters meanwhile. */
		const float *params = st_model_params(tr->model);
		for (;;) {
			uint32_t mb = __atomic_fetch_add(&tr->next_mb, 1, __ATOMIC_RELAXED);
			if (mb >= nmb)
				break;
			st_model_forward(tr->model, w->ws, b, mb * tr->minibatch,
					 mb_size(tr, b, mb), b->rows, params, NULL,
					 b->pred + mb * tr->minibatch);
		}
		return;
	}
	st_sync_grads_t g;
	if (ops->schedule == ST_SYNC_LOCKSTEP) {
		/* A multi-process batch is one step of every rank (also with no
		 * data here), over the examples of all the ranks' batches. */
		const uint32_t nsteps = tr->dist_lockstep ? 1 : (nmb + (uint32_t)N - 1) / (uint32_t)N;
		for (uint32_t s = 0; s < nsteps; s++) {
			const uint32_t mb = s * (uint32_t)N + (uint32_t)w->idx;
			uint32_t tot = 0;
			for (uint32_t v = s * (uint32_t)N; v < (s + 1) * (uint32_t)N && v < nmb; v++)
				tot += mb_size(tr, b, v);
			if (tr->dist_lockstep)
				tot = tr->dist_tot;
			float scale = tr->mean_loss ? 1.0f / (float)tot : 1.0f;
			const float *params = ops->begin_step(tr->sync, w->idx,
							      tr->gstep - tr->gstep_base + s);
			if (mb < nmb) {
				double t0 = mono_s();
				int rc = compute(tr, w, b, mb, params, scale, &g);
				if (rc < 0) {
					/* Still take part in the step (its barriers),
					 * with nothing to give. */
					set_err(tr, rc);
					g = (st_sync_grads_t){ .n_examples = 0, .dense = w->gdense,
							       .gstride = tr->gstride };
				}
				after_compute(tr, w, t0, g.n_examples);
			} else
				g = (st_sync_grads_t){ .n_examples = 0, .dense = w->gdense,
						       .gstride = tr->gstride };
			int rc = ops->apply(tr->sync, w->idx, &g);
			if (rc < 0)
				set_err(tr, rc);
			w->steps += mb < nmb;
		}
	} else {
		for (;;) {
			uint32_t mb = __atomic_fetch_add(&tr->next_mb, 1, __ATOMIC_RELAXED);
			if (mb >= nmb)
				break;
			const float *params = ops->begin_step(tr->sync, w->idx,
							      w->steps - w->step_base);
			float scale = tr->mean_loss ? 1.0f / (float)mb_size(tr, b, mb) : 1.0f;
			double t0 = mono_s();
			int rc = compute(tr, w, b, mb, params, scale, &g);
			if (rc < 0) {
				set_err(tr, rc);
				break;
			}
			after_compute(tr, w, t0, g.n_examples);
			rc = ops->apply(tr->sync, w->idx, &g);
			if (rc < 0)
				set_err(tr, rc);
			w->steps++;
		}
	}
	ops->end_batch(tr->sync, w->idx);
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	st_trainer_t *tr = w->tr;
	char name[16];
	snprintf(name, sizeof name, "st-train-%d", w->idx);
	pthread_setname_np(pthread_self(), name);
	for (;;) {
		pthread_barrier_wait(&tr->bar);        /* start */
		if (tr->stop)
			return NULL;
		run_batch(tr, w);
		pthread_barrier_wait(&tr->bar);        /* end */
	}
}

static int start_workers(st_trainer_t *tr)
{
	if (tr->started)
		return ST_OK;
	for (int i = 1; i < tr->N; i++) {
		if (pthread_create(&tr->w[i].tid, NULL, worker_main, &tr->w[i]) != 0)
			st_die("cannot start train worker %d", i);
		if (tr->w[i].cpu >= 0) {
			cpu_set_t set;
			CPU_ZERO(&set);
			CPU_SET(tr->w[i].cpu, &set);
			if (pthread_setaffinity_np(tr->w[i].tid, sizeof set, &set) != 0)
				st_debug("train worker %d: cannot pin to cpu %d", i, tr->w[i].cpu);
		}
	}
	tr->started = 1;
	return ST_OK;
}

static int train_thread_start(void *state, st_stage_ctx_t *ctx)
{
	st_trainer_t *tr = state;
	if (ctx->n_threads != 1)
		return op_fail(ctx, ST_EINVAL, "the train stage runs on one graph thread "
			       "(it starts its %d workers itself), got %d", tr->N, ctx->n_threads);
	return start_workers(tr);
}

static void train_thread_stop(void *state, st_stage_ctx_t *ctx)
{
	stop_workers(state);
}

static int eval_keep(st_trainer_t *tr, const st_batch_t *b)
{
	if (tr->ev_n + b->n > tr->ev_cap) {
		size_t cap = tr->ev_cap ? tr->ev_cap : 4096;
		while (cap < tr->ev_n + b->n)
			cap *= 2;
		float *p = realloc(tr->ev_pred, sizeof(float) * cap);
		if (!p)
			return ST_ENOMEM;
		tr->ev_pred = p;
		float *l = realloc(tr->ev_label, sizeof(float) * cap);
		if (!l)
			return ST_ENOMEM;
		tr->ev_label = l;
		tr->ev_cap = cap;
	}
	memcpy(tr->ev_pred + tr->ev_n, b->pred, sizeof(float) * b->n);
	memcpy(tr->ev_label + tr->ev_n, b->labels, sizeof(float) * b->n);
	tr->ev_n += b->n;
	return ST_OK;
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
	st_sync_stats_t s;
	st_trainer_sync_stats(tr, &s);
	st_sync_stats_publish(&s, tr->metrics);
	if (tr->auto_on || tr->switches)
		st_metrics_set(tr->metrics, "sync_switches", (double)tr->switches);
	if (tr->dist) {
		/* What the network really carried (frames included), not the
		 * policy's estimate. */
		st_dist_stats_t ds;
		st_dist_stats(tr->dist, &ds);
		st_metrics_set(tr->metrics, "net_bytes_sent", (double)ds.bytes_sent);
		st_metrics_set(tr->metrics, "net_msgs_sent", (double)ds.msgs_sent);
		st_metrics_set(tr->metrics, "dist_keys_remote", (double)ds.keys_remote);
		st_metrics_set(tr->metrics, "dist_keys_local", (double)ds.keys_local);
		st_metrics_set(tr->metrics, "dist_rows_pushed", (double)ds.rows_pushed);
		if (ds.buf_steps) {
			/* gba, bsp: this owner's buffered global steps and the
			 * row gradients it dropped as too stale. */
			st_metrics_set(tr->metrics, "dist_buf_steps", (double)ds.buf_steps);
			st_metrics_set(tr->metrics, "dist_buf_rows_dropped",
				       (double)ds.buf_rows_dropped);
		}
	}
	/* Each worker's own speed: examples over the seconds it spent
	 * computing and straggling (not waiting on others), so a slow worker
	 * shows even under allreduce, where every step takes the slowest
	 * worker's time. */
	for (int i = 0; i < tr->N; i++) {
		char name[32];
		snprintf(name, sizeof name, "worker_eps_%d", i);
		if (tr->w[i].busy > 0)
			st_metrics_set(tr->metrics, name,
				       (double)tr->w[i].examples / tr->w[i].busy);
	}
}

/* st.sync.auto, after a batch: with `window` step times from every worker
 * since the last switch, compares the slowest worker's mean step time to
 * the fastest one's. Above threshold the lockstep policy would make every
 * worker wait for the slowest (the GBA paper's motivation for moving to
 * asynchronous aggregation when workers are unequal, gba-global-batch-
 * aggregation.txt §1-2); below threshold * 0.8 — hysteresis, so a ratio
 * hovering at the threshold does not flip every window — it goes back to
 * the synchronous policy, whose updates are exact. */
/* The fastest and slowest workers' mean step times over the window; 0 when
 * some worker has fewer than `window` samples since the last switch. */
static int auto_spread(const st_trainer_t *tr, double *lo, double *hi)
{
	const uint32_t win = tr->auto_window;
	*lo = INFINITY;
	*hi = 0;
	for (int i = 0; i < tr->N; i++) {
		const worker_t *w = &tr->w[i];
		if (w->ring_n < win)
			return 0;
		double sum = 0;
		for (uint32_t k = 0; k < win; k++)
			sum += w->ring[k];
		double mean = sum / win;
		*lo = mean < *lo ? mean : *lo;
		*hi = mean > *hi ? mean : *hi;
	}
	return 1;
}

/* The policy auto wants at this spread (with hysteresis). */
static int auto_want(const st_trainer_t *tr, double ratio)
{
	if (tr->auto_cur == 0 && ratio > tr->auto_threshold)
		return 1;
	if (tr->auto_cur == 1 && ratio < tr->auto_threshold * 0.8)
		return 0;
	return tr->auto_cur;
}

static int auto_switch(st_trainer_t *tr, int want, double ratio)
{
	const char *from = tr->sops->name;
	int rc = swap_policy(tr, &tr->auto_sub[want], 1);
	if (rc < 0)
		return rc;
	st_info("batch %llu: worker speeds %s (%.1fx): %s -> %s",
		(unsigned long long)tr->batches, want ? "diverge" : "converge", ratio, from,
		tr->sops->name);
	tr->auto_cur = want;
	tr->switches++;
	if (tr->metrics)
		st_metrics_set(tr->metrics, "sync_switches", (double)tr->switches);
	return ST_OK;
}

static int auto_check(st_trainer_t *tr)
{
	double lo, hi;
	if (!auto_spread(tr, &lo, &hi))
		return ST_OK;
	const double ratio = lo > 0 ? hi / lo : 1.0;
	const int want = auto_want(tr, ratio);
	return want == tr->auto_cur ? ST_OK : auto_switch(tr, want, ratio);
}

/* ---- auto across processes --------------------------------------------------
 *
 * Every rank must switch at the same point, so the ranks vote: an
 * allgather of each rank's spread (and whether it is out of data), from
 * which every rank makes the same decision — the slowest worker of any
 * rank against the fastest of any rank, the one-process rule over all the
 * job's workers. When:
 *
 *  - synchronous phase (lockstep): after every `window` steps. Every rank
 *    takes part in every step (a rank out of data with empty steps,
 *    dist_drain), so the ranks count the same steps and vote together.
 *  - asynchronous phase: a rank votes after every `window` of its own
 *    batches, and once when it is out of data; a rank out of data then
 *    keeps voting until every rank is (the vote that finds them all out of
 *    data ends training) or the vote switches back to the synchronous
 *    policy. So the ranks meet every `window` batches: ranks drift apart by
 *    at most that much, and a straggling rank is waited for there.
 *
 * The switch (swap_policy): synchronous -> asynchronous leaves the
 * replicas as they are (they are identical) and releases pulls that were
 * waiting for steps that will not come (st_dist_sync_end);
 * asynchronous -> synchronous drains every rank's updates and gives every
 * rank rank 0's dense parameters and optimizer state (st_dist_sync_begin).
 * A rank that dies makes the next vote fail: under auto the job stops,
 * naming it, in either phase. */

typedef struct vote {
	uint32_t done;             /* out of data */
	uint32_t ready;            /* every worker has a full window */
	double lo, hi;
} vote_t;

/* One vote; *all_done = every rank is out of data. */
static int dist_vote(st_trainer_t *tr, int done, int *all_done)
{
	st_net_t *net = st_dist_net(tr->dist);
	const int P = st_net_size(net);
	vote_t me = { .done = (uint32_t)done };
	me.ready = !done && auto_spread(tr, &me.lo, &me.hi);
	vote_t *all = malloc(sizeof(vote_t) * (size_t)P);
	if (!all)
		return ST_ENOMEM;
	int rc = st_net_allgather(net, &me, sizeof me, all);
	double lo = INFINITY, hi = 0;
	int ready = 0, out = 1;
	for (int r = 0; rc >= 0 && r < P; r++) {
		out &= all[r].done != 0;
		if (!all[r].ready)
			continue;
		ready = 1;
		lo = all[r].lo < lo ? all[r].lo : lo;
		hi = all[r].hi > hi ? all[r].hi : hi;
	}
	free(all);
	tr->auto_tick = 0;
	*all_done = out;
	if (rc < 0) {
		st_error("st.sync.auto: the vote with the other ranks failed: %s", st_strerror(rc));
		return rc;
	}
	if (out || !ready)
		return ST_OK;
	const double ratio = lo > 0 ? hi / lo : 1.0;
	st_debug("st.sync.auto: vote after batch %llu: slowest / fastest worker %.2f (%s)",
		 (unsigned long long)tr->batches, ratio, tr->sops->name);
	const int want = auto_want(tr, ratio);
	return want == tr->auto_cur ? ST_OK : auto_switch(tr, want, ratio);
}

/* After a step (synchronous phase) or a batch (asynchronous phase). */
static int dist_auto_tick(st_trainer_t *tr, int done)
{
	int all_done;
	if (++tr->auto_tick < tr->auto_window)
		return ST_OK;
	return dist_vote(tr, done, &all_done);
}

/* Runs batch b (one step per worker schedule) on every worker. */
static void run_workers(st_trainer_t *tr, st_batch_t *b)
{
	if (tr->N > 1 && !tr->started)
		start_workers(tr);
	tr->cur = b;
	tr->nmb = (b->n + tr->minibatch - 1) / tr->minibatch;
	tr->next_mb = 0;
	tr->err = 0;
	if (tr->N > 1)
		pthread_barrier_wait(&tr->bar);        /* start */
	run_batch(tr, &tr->w[0]);
	if (tr->N > 1)
		pthread_barrier_wait(&tr->bar);        /* end */
}

/* Multi-process lockstep: every rank's examples for the next step; *tot is
 * their sum (0: every rank is out of data). */
static int dist_gather(st_trainer_t *tr, uint32_t n, uint32_t *tot)
{
	st_net_t *net = st_dist_net(tr->dist);
	const int P = st_net_size(net);
	uint32_t *all = malloc(sizeof(uint32_t) * (size_t)P);
	if (!all)
		return ST_ENOMEM;
	int rc = st_net_allgather(net, &n, sizeof n, all);
	uint64_t sum = 0;
	for (int r = 0; rc >= 0 && r < P; r++)
		sum += all[r];
	free(all);
	*tot = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
	return rc;
}

/* Multi-process lockstep, out of data: takes part in the steps of the
 * ranks that still have some (with no examples) until none has. Under
 * st.sync.auto, also in its votes until every rank is out of data. */
static int dist_drain(st_trainer_t *tr)
{
	if (!tr->dist || (!tr->dist_lockstep && !tr->auto_on) || tr->dist_drained)
		return ST_OK;
	for (;;) {
		int rc;
		if (!tr->dist_lockstep) {
			int all_done;
			if ((rc = dist_vote(tr, 1, &all_done)) < 0)
				return rc;
			if (all_done)
				break;
			continue;
		}
		uint32_t tot = 0;
		if ((rc = dist_gather(tr, 0, &tot)) < 0)
			return rc;
		if (tot == 0)
			break;
		tr->dist_tot = tot;
		tr->dist_empty.eval = 0;
		tr->dist_empty.n = 0;
		run_workers(tr, &tr->dist_empty);
		tr->cur = NULL;
		if (tr->err < 0)
			return tr->err;
		tr->dist_steps++;
		__atomic_store_n(&tr->dist_ssteps, tr->dist_ssteps + 1, __ATOMIC_RELAXED);
		if (tr->auto_on && (rc = dist_auto_tick(tr, 1)) < 0)
			return rc;
	}
	tr->dist_drained = 1;
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
	if (b->n && (!b->rows || !b->key_idx || !b->aux))
		return op_fail(ctx, ST_EINVAL, "batch %llu was not pulled (no rows)",
			       (unsigned long long)b->seq);
	if (b->n == 0) {
		if (tr->dist && !b->eval)
			__atomic_fetch_add(&tr->dist_trained, 1, __ATOMIC_RELEASE);
		return ST_OK;
	}
	int rc = size_workers(tr, b->n_uniq);
	if (rc >= 0)
		rc = tr->sops->begin_batch(tr->sync, b->n_uniq);
	if (rc < 0)
		return op_fail(ctx, rc, "out of memory for train scratch (%u unique keys, "
			       "%d workers)", b->n_uniq, tr->N);
	const uint32_t nmb = (b->n + tr->minibatch - 1) / tr->minibatch;
	if (tr->dist && tr->dist_lockstep && !b->eval) {
		if (nmb > (uint32_t)tr->N)
			return op_fail(ctx, ST_EINVAL, "a multi-process %s trains one step per "
				       "batch: batch_size (%u) must be at most workers x minibatch "
				       "(%d x %u)", tr->sops->name, b->n, tr->N, tr->minibatch);
		if ((rc = dist_gather(tr, b->n, &tr->dist_tot)) < 0)
			return op_fail(ctx, rc, "batch %llu: the other ranks: %s",
				       (unsigned long long)b->seq, st_strerror(rc));
	}
	run_workers(tr, b);
	if (tr->dist && !b->eval)
		__atomic_fetch_add(&tr->dist_trained, 1, __ATOMIC_RELEASE);
	if (!b->eval && tr->sops->schedule == ST_SYNC_LOCKSTEP)
		tr->gstep += (tr->nmb + (uint32_t)tr->N - 1) / (uint32_t)tr->N;
	if (!b->eval && tr->dist)
		tr->dist_steps++;
	if (!b->eval && tr->dist && tr->dist_lockstep)
		__atomic_store_n(&tr->dist_ssteps, tr->dist_ssteps + 1, __ATOMIC_RELAXED);
	tr->cur = NULL;
	if (tr->err < 0)
		return op_fail(ctx, tr->err, "batch %llu: sync policy %s failed: %s",
			       (unsigned long long)b->seq, tr->sops->name, st_strerror(tr->err));
	if (!b->eval && (rc = check_nonfinite(tr, ctx)) < 0)
		return rc;
	if (b->eval) {
		if ((rc = eval_keep(tr, b)) < 0)
			return op_fail(ctx, rc, "out of memory keeping eval predictions");
		if (tr->metrics)
			st_metrics_add(tr->metrics, "eval_examples", b->n);
		return ST_OK;
	}
	if (tr->metrics)
		st_metrics_add(tr->metrics, "examples", b->n);
	tr->batches++;
	if (tr->auto_on && (rc = tr->dist ? dist_auto_tick(tr, 0) : auto_check(tr)) < 0)
		return op_fail(ctx, rc, "batch %llu: st.sync.auto could not %s: %s",
			       (unsigned long long)b->seq,
			       tr->dist ? "vote with the other ranks or switch" : "switch policy",
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
	int rc = dist_drain(tr);
	if (rc >= 0 && tr->sops->finish)
		rc = tr->sops->finish(tr->sync);
	refresh_metrics(tr);
	if (tr->nf_seen && !tr->nf_fail)
		st_warn("%llu minibatch%s had a non-finite training loss in this pass",
			(unsigned long long)tr->nf_seen, tr->nf_seen == 1 ? "" : "es");
	if (rc < 0)
		return op_fail(ctx, rc, "the last steps with the other ranks: %s (sync policy %s)",
			       st_strerror(rc), tr->sops->name);
	return ST_OK;
}

void st_trainer_progress(const st_trainer_t *tr, double *auc, double *logloss,
			 uint64_t *n)
{
	const st_auc_acc_t *accs[ST_MAX_STAGE_THREADS];
	for (int i = 0; i < tr->N; i++)
		accs[i] = tr->w[i].acc;
	st_auc_stats_t s;
	st_auc_acc_read(accs, tr->N, &s);
	if (auc)
		*auc = s.auc;
	if (logloss)
		*logloss = s.logloss;
	if (n)
		*n = s.n;
}

void st_trainer_reset_eval(st_trainer_t *tr)
{
	tr->ev_n = 0;
}

int st_trainer_eval_result(st_trainer_t *tr, double *auc, double *logloss,
			   double *calib, uint64_t *n)
{
	double a = NAN;
	size_t nf = 0;
	int rc = st_auc_exact_finite(tr->ev_pred, tr->ev_label, tr->ev_n, &a, &nf);
	if (rc < 0)
		return rc;
	if (nf)
		st_warn("eval: %zu of %zu scores are not finite (NaN or infinite): the model "
			"diverged; the AUC ranks the finite ones only", nf, tr->ev_n);
	if (auc)
		*auc = a;
	if (logloss)
		*logloss = st_logloss(tr->ev_pred, tr->ev_label, tr->ev_n);
	if (calib)
		*calib = st_calibration(tr->ev_pred, tr->ev_label, tr->ev_n);
	if (n)
		*n = tr->ev_n;
	return ST_OK;
}

uint64_t st_trainer_eval_nonfinite(const st_trainer_t *tr)
{
	uint64_t nf = 0;
	for (size_t i = 0; i < tr->ev_n; i++)
		nf += !isfinite(tr->ev_pred[i]);
	return nf;
}

int st_trainer_dist_eval_gather(st_trainer_t *tr)
{
	enum { CH_EVAL = 5 };
	st_net_t *net = st_dist_net(tr->dist);
	const int rank = st_net_rank(net), P = st_net_size(net);
	if (rank != 0) {
		uint64_t n = tr->ev_n;
		int rc = st_net_send2(net, 0, CH_EVAL, &n, sizeof n, tr->ev_pred,
				      sizeof(float) * tr->ev_n);
		if (rc >= 0)
			rc = st_net_send(net, 0, CH_EVAL, tr->ev_label, sizeof(float) * tr->ev_n);
		return rc;
	}
	for (int r = 1; r < P; r++) {
		if (!st_net_alive(net, r))
			continue;
		void *a = NULL, *l = NULL;
		size_t alen, llen;
		int from;
		int rc = st_net_recv(net, r, CH_EVAL, &a, &alen, &from, -1);
		if (rc >= 0)
			rc = st_net_recv(net, r, CH_EVAL, &l, &llen, &from, -1);
		uint64_t n = 0;
		if (rc >= 0 && alen >= sizeof n)
			memcpy(&n, a, sizeof n);
		if (rc >= 0 && (alen != sizeof n + sizeof(float) * n || llen != sizeof(float) * n)) {
			st_error("rank %d sent a malformed eval result (%zu + %zu bytes)", r, alen,
				 llen);
			rc = ST_EPEER;
		}
		if (rc >= 0) {
			st_batch_t b = { .n = (uint32_t)n, .pred = (float *)((uint8_t *)a + sizeof n),
					 .labels = l };
			rc = n > UINT32_MAX ? ST_EINVAL : eval_keep(tr, &b);
		}
		free(a);
		free(l);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}

const st_stage_ops_t st_trainer_train_ops = {
	.name = "train",
	.process = train_process,
	.thread_start = train_thread_start,
	.thread_stop = train_thread_stop,
	.finish = train_finish,
};
