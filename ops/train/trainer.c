/*
 * trainer.c — pull / train / push / dump stage ops over a model preset, its
 * embedding tables, N worker threads and a sync policy.
 *
 * Threads:
 *  - pull: any number of graph threads, each with private dedup scratch
 *    (pull_t[ctx->thread_idx]); tables are thread-safe.
 *  - train: ONE graph thread, worker 0, plus workers 1..N-1 of the pool
 *    (ops/train/pool.c: "st-train-<n>", start handshake, per-batch start
 *    and end barriers, shutdown by sentinel). Per batch, worker 0 sizes
 *    every worker's scratch and publishes the batch; all N run it (one
 *    pool round); then worker 0 alone does the metrics.
 *  - Each worker touches only its own worker_t, the batch columns it
 *    writes (b->pred of its own minibatches) and, through the policy, the
 *    shared parameters (the policy says how that is synchronized).
 *
 * Invariants: every worker finishes its share of every batch, whatever
 * happens (an error is recorded in `err` and reported by worker 0 after the
 * round), so no worker is ever left waiting at the pool's barriers. The per-worker `mark`
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
 * locks; never both. The pool's barriers are the only synchronization of
 * the workers.
 */
#include "ops/dist/dist.h"
#include "ops/sync/auto.h"
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
	st_pool_fini(&tr->pool);
	st_dist_destroy(tr->dist);   /* its service thread uses the tables */
	if (tr->sync)
		tr->sops->destroy(tr->sync);
	st_auto_destroy(tr->autoc);
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
	tr->N = N;
	st_auto_transport_threads(&tr->auto_tp);
	tr->minibatch = (uint32_t)job->minibatch;
	tr->n_slots = job->train.n_slots;
	tr->n_dense = job->train.n_dense;
	tr->mean_loss = strcmp(type, "lr") != 0;
	if (st_pool_init(&tr->pool, N, "st-train") < 0) {
		st_trainer_destroy(tr);
		return ST_ENOMEM;
	}
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
	st_pool_pin(&tr->pool, cpus, n);
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
			 : (int64_t)st_sync_cfg_num(cfg, pol->lag_param, 0), __ATOMIC_RELEASE);
	tr->gstep_base = tr->gstep;
	for (int i = 0; i < tr->N; i++)
		tr->w[i].step_base = tr->w[i].steps;
	/* st.sync.auto decides on step times of the policy running now. */
	if (tr->autoc)
		st_auto_restart(tr->autoc);
	return ST_OK;
}

int st_trainer_set_policy(st_trainer_t *tr, const st_sync_cfg_t *cfg)
{
	if (!st_auto_is_meta(cfg)) {
		int rc = swap_policy(tr, cfg, 0);
		if (rc >= 0) {
			st_auto_destroy(tr->autoc);
			tr->autoc = NULL;
		}
		return rc;
	}
	if (tr->dist && !st_auto_dist_ok(cfg))
		return ST_EJOB;   /* the job's policy or a phase's */
	/* A new controller starts on its synchronous side; the old policy and
	 * controller stay when that policy cannot be made. */
	st_auto_t *a;
	int rc = st_auto_create(&a, cfg, tr->N, &tr->auto_tp);
	if (rc >= 0 && (rc = swap_policy(tr, st_auto_policy(a, 0), 0)) < 0)
		st_auto_destroy(a);
	if (rc < 0)
		return rc;
	st_auto_destroy(tr->autoc);
	tr->autoc = a;
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
	st_model_step(tr->model, w->ws, b, r0, n, relaxed || steprows ? w->prow : shared, params,
		      scale, b->pred + r0, w->gdense, w->gu, gs);
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
	if (tr->autoc) {
		if (tr->time_fn)
			t = tr->time_fn(tr->time_ud, w->idx, step, t);
		st_auto_record(tr->autoc, w->idx, t);
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

/* The pool's work for a batch: worker w's share of tr->cur. */
static void batch_work(void *arg, int w)
{
	st_trainer_t *tr = arg;
	run_batch(tr, &tr->w[w]);
}

static int train_thread_start(void *state, st_stage_ctx_t *ctx)
{
	st_trainer_t *tr = state;
	if (ctx->n_threads != 1)
		return op_fail(ctx, ST_EINVAL, "the train stage runs on one graph thread "
			       "(it starts its %d workers itself), got %d", tr->N, ctx->n_threads);
	return st_pool_start(&tr->pool);
}

static void train_thread_stop(void *state, st_stage_ctx_t *ctx)
{
	st_trainer_t *tr = state;
	st_pool_stop(&tr->pool);
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
	if (tr->autoc || tr->switches)
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

/* ---- st.sync.auto (ops/sync/auto.c decides; the trainer swaps) ---------- */

/* Acts on a verdict: swaps to the sub-policy it wants, if another. */
static int auto_act(st_trainer_t *tr, const st_auto_verdict_t *v)
{
	if (v->want == st_auto_current(tr->autoc))
		return ST_OK;
	const char *from = tr->sops->name;
	int rc = swap_policy(tr, st_auto_policy(tr->autoc, v->want), 1);
	if (rc < 0)
		return rc;
	st_auto_switched(tr->autoc, v, tr->batches, from, tr->sops->name);
	tr->switches++;
	if (tr->metrics)
		st_metrics_set(tr->metrics, "sync_switches", (double)tr->switches);
	return ST_OK;
}

/* After a train batch, or an empty step of a rank out of data (done). */
static int auto_tick(st_trainer_t *tr, int done)
{
	st_auto_verdict_t v;
	int rc = st_auto_tick(tr->autoc, done, tr->batches, tr->sops->name, &v);
	return rc < 0 ? rc : auto_act(tr, &v);
}

/* A vote now (a rank out of data); *all_done: every rank is. */
static int auto_vote(st_trainer_t *tr, int done, int *all_done)
{
	st_auto_verdict_t v;
	int rc = st_auto_vote(tr->autoc, done, tr->batches, tr->sops->name, &v);
	*all_done = v.all_done;
	return rc < 0 ? rc : auto_act(tr, &v);
}

/* Runs batch b (one step per worker schedule) on every worker. */
static void run_workers(st_trainer_t *tr, st_batch_t *b)
{
	tr->cur = b;
	tr->nmb = (b->n + tr->minibatch - 1) / tr->minibatch;
	tr->next_mb = 0;
	tr->err = 0;
	st_pool_run(&tr->pool, batch_work, tr);
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
	if (!tr->dist || (!tr->dist_lockstep && !tr->autoc) || tr->dist_drained)
		return ST_OK;
	for (;;) {
		int rc;
		if (!tr->dist_lockstep) {
			int all_done;
			if ((rc = auto_vote(tr, 1, &all_done)) < 0)
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
		if (tr->autoc && (rc = auto_tick(tr, 1)) < 0)
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
	if (tr->autoc && (rc = auto_tick(tr, 0)) < 0)
		return op_fail(ctx, rc, "batch %llu: st.sync.auto could not %s: %s",
			       (unsigned long long)b->seq,
			       st_auto_across(tr->autoc) ? "vote with the other ranks or switch"
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
	int rc = dist_drain(tr);
	if (rc >= 0 && tr->sops->finish)
		rc = tr->sops->finish(tr->sync);
	refresh_metrics(tr);
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
