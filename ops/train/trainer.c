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
 * end barrier), so no worker is ever left waiting. The per-worker `mark`
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
 * No lock is taken here besides the tables' shard locks; the barriers are
 * the only synchronization of the worker pool.
 */
#include "ops/train/trainer.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/metrics/auc.h"
#include "ops/optim/optim.h"
#include "runtime/err.h"

#define AUC_REFRESH 65536
#define MAX_TABLES 16

typedef struct worker {
	struct st_trainer *tr;
	int idx;
	pthread_t tid;
	int cpu;                   /* OS cpu to pin to, -1 = none */
	st_model_ws_t *ws;
	float *gdense;             /* [nparams] */
	float *gu;                 /* [gcap * gstride] row gradients */
	float *prow_buf;           /* [gcap * gstride] private row copies (relaxed reads) */
	float **prow;              /* [gcap] */
	uint32_t *mark, *touched;  /* [gcap] */
	uint32_t gcap, stamp;
	st_auc_acc_t *acc;
	uint64_t steps;
} worker_t;

typedef struct pull_thread {
	uint64_t *hkeys;
	uint32_t *hidx;
	uint32_t hcap;
	uint64_t *tkeys;           /* per-table key list (several tables) */
	uint32_t *tpos;
	float **trows;
	uint32_t tcap;
} pull_thread_t;

struct st_trainer {
	st_model_t *model;
	st_optim_t sopt, dopt;
	int n_tables;
	st_table_t *tables[MAX_TABLES];
	uint32_t ttl;              /* batches; 0 = rows never expire */
	uint32_t evict_every;      /* batches between eviction sweeps */
	int *slot_table;           /* [n_slots] */
	int n_slots, n_dense, gstride;
	uint32_t minibatch;
	int mean_loss;
	const st_sync_ops_t *sops;
	void *sync;
	st_sync_env_t env;
	st_sync_cfg_t sync_cfg;
	st_metrics_t *metrics;

	int N;
	worker_t *w;
	pthread_barrier_t bar;
	int started, stop;
	st_batch_t *cur;
	uint32_t nmb;              /* minibatches of the current batch */
	uint32_t next_mb;          /* FREE schedule counter (atomic) */
	uint64_t gstep;            /* steps begun so far (LOCKSTEP base) */
	int err;                   /* first worker error (atomic) */

	float *ev_pred, *ev_label;
	size_t ev_n, ev_cap;
	uint64_t since;
	pull_thread_t pull_t[ST_MAX_STAGE_THREADS];
};

static int op_fail(st_stage_ctx_t *ctx, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int op_fail(st_stage_ctx_t *ctx, int code, const char *fmt, ...)
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
	st_auc_acc_destroy(w->acc);
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

void st_trainer_destroy(st_trainer_t *tr)
{
	if (!tr)
		return;
	stop_workers(tr);
	pthread_barrier_destroy(&tr->bar);
	if (tr->sync)
		tr->sops->destroy(tr->sync);
	for (int i = 0; tr->w && i < tr->N; i++)
		worker_free(&tr->w[i]);
	free(tr->w);
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++) {
		pull_thread_t *p = &tr->pull_t[i];
		free(p->hkeys);
		free(p->hidx);
		free(p->tkeys);
		free(p->tpos);
		free(p->trows);
	}
	for (int i = 0; i < tr->n_tables; i++)
		st_table_destroy(tr->tables[i]);
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
	const st_sync_ops_t *sops = st_sync_find(job->sync.name ? job->sync.name : "async");
	if (!sops) {
		st_error("sync policy '%s' is valid but not implemented in this version "
			 "(implemented: allreduce, async)", job->sync.name);
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
	tr->minibatch = (uint32_t)job->minibatch;
	tr->n_slots = job->train.n_slots;
	tr->n_dense = job->train.n_dense;
	tr->mean_loss = strcmp(type, "lr") != 0;
	tr->sops = sops;
	pthread_barrier_init(&tr->bar, NULL, (unsigned)N);

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
			st_table_opts_t to = {
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
			if ((rc = st_table_create(&tr->tables[t], &to)) < 0)
				goto fail;
			tdim[t] = rd;
			tr->n_tables++;
		}
		tr->slot_table[s] = t;
	}

	/* TTL (model.ttl) counts batches: the store's clock is the batch
	 * sequence number that pull stamps on every row it resolves. Rows of
	 * batches still in flight were stamped with a later or nearly equal
	 * number, so a TTL larger than the batches that can be in flight at once
	 * never evicts a row a batch still uses (push runs the sweep, in batch
	 * order). Sweeps scan every row, so they run every ttl/8 batches: a row
	 * goes between ttl and ttl + ttl/8 batches after its last use. */
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
		.n_workers = N, .cfg = &job->sync, .model = tr->model,
		.params = st_model_params(tr->model), .nparams = st_model_nparams(tr->model),
		.dense_opt = &tr->dopt, .sparse_opt = &tr->sopt,
	};
	/* The policy may keep env->cfg: the job is not kept, so it gets a
	 * view without parameters once created (policies read them in create). */
	if ((rc = sops->create(&tr->sync, &tr->env)) < 0) {
		tr->sync = NULL;
		goto fail;
	}
	tr->env.cfg = &tr->sync_cfg;

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

int st_trainer_set_row(st_trainer_t *tr, int slot, uint64_t key, const float *row)
{
	st_table_t *t = st_trainer_table_for_slot(tr, slot);
	if (!t)
		return ST_EINVAL;
	float *r;
	int rc = st_table_get_or_create(t, key, 0, &r);
	if (rc < 0)
		return rc;
	memcpy(r, row, sizeof(float) * (size_t)st_model_row_dim(tr->model, slot));
	return ST_OK;
}

void st_trainer_sync_stats(const st_trainer_t *tr, st_sync_stats_t *out)
{
	tr->sops->report(tr->sync, out);
}

/* ---- pull ------------------------------------------------------------------ */

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Fills b->uniq (first-occurrence order), b->key_idx, b->n_uniq, and
 * udim[u] = the slot of u's first occurrence (turned into a width later). */
static int dedup(pull_thread_t *t, st_batch_t *b, uint16_t **slot_out)
{
	uint32_t nk = st_batch_nkeys(b);
	uint32_t cap = 16;
	while (cap < 2 * (uint64_t)nk)
		cap *= 2;
	if (cap > t->hcap) {
		free(t->hkeys);
		free(t->hidx);
		t->hkeys = malloc(sizeof(uint64_t) * cap);
		t->hidx = malloc(sizeof(uint32_t) * cap);
		if (!t->hkeys || !t->hidx) {
			t->hcap = 0;
			return ST_ENOMEM;
		}
		t->hcap = cap;
	}
	memset(t->hidx, 0xff, sizeof(uint32_t) * cap);
	uint64_t *uniq = realloc(b->uniq, sizeof(uint64_t) * (nk ? nk : 1));
	if (!uniq)
		return ST_ENOMEM;
	b->uniq = uniq;
	uint32_t *kidx = realloc(b->key_idx, sizeof(uint32_t) * (nk ? nk : 1));
	if (!kidx)
		return ST_ENOMEM;
	b->key_idx = kidx;
	uint16_t *uslot = malloc(sizeof(uint16_t) * (nk ? nk : 1));
	if (!uslot)
		return ST_ENOMEM;
	uint32_t mask = cap - 1, nu = 0;
	for (uint32_t k = 0; k < nk; k++) {
		uint64_t key = b->keys[k];
		uint32_t i = (uint32_t)mix64(key) & mask;
		for (;;) {
			uint32_t u = t->hidx[i];
			if (u == UINT32_MAX) {
				t->hidx[i] = nu;
				t->hkeys[i] = key;
				uniq[nu] = key;
				uslot[nu] = b->key_slot[k];
				kidx[k] = nu++;
				break;
			}
			if (t->hkeys[i] == key) {
				kidx[k] = u;
				break;
			}
			i = (i + 1) & mask;
		}
	}
	b->n_uniq = nu;
	*slot_out = uslot;
	return ST_OK;
}

static int pull_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			st_batch_t **out)
{
	st_trainer_t *tr = state;
	*out = b;
	pull_thread_t *t = &tr->pull_t[ctx->thread_idx];
	if ((int)b->n_slots > tr->n_slots)
		return op_fail(ctx, ST_EINVAL, "batch %llu has %u slots, the model has %d",
			       (unsigned long long)b->seq, b->n_slots, tr->n_slots);
	uint16_t *uslot = NULL;
	int rc = dedup(t, b, &uslot);
	if (rc < 0)
		return op_fail(ctx, rc, "batch %llu: out of memory deduplicating %u keys",
			       (unsigned long long)b->seq, st_batch_nkeys(b));
	uint32_t nu = b->n_uniq;
	float **rows = realloc(b->rows, sizeof(float *) * (nu ? nu : 1));
	if (!rows) {
		free(uslot);
		return op_fail(ctx, ST_ENOMEM, "batch %llu: out of memory for rows",
			       (unsigned long long)b->seq);
	}
	b->rows = rows;
	const uint32_t step = (uint32_t)b->seq;
	if (tr->n_tables == 1) {
		rc = st_table_resolve(tr->tables[0], b->uniq, nu, step, !b->eval, rows);
	} else {
		if (nu > t->tcap) {
			free(t->tkeys);
			free(t->tpos);
			free(t->trows);
			t->tkeys = malloc(sizeof(uint64_t) * nu);
			t->tpos = malloc(sizeof(uint32_t) * nu);
			t->trows = malloc(sizeof(float *) * nu);
			t->tcap = (t->tkeys && t->tpos && t->trows) ? nu : 0;
		}
		rc = t->tcap >= nu ? ST_OK : ST_ENOMEM;
		for (int k = 0; k < tr->n_tables && rc >= 0; k++) {
			uint32_t m = 0;
			for (uint32_t u = 0; u < nu; u++)
				if (tr->slot_table[uslot[u]] == k) {
					t->tkeys[m] = b->uniq[u];
					t->tpos[m++] = u;
				}
			rc = st_table_resolve(tr->tables[k], t->tkeys, m, step, !b->eval, t->trows);
			for (uint32_t i = 0; i < m && rc >= 0; i++)
				rows[t->tpos[i]] = t->trows[i];
		}
	}
	if (rc < 0) {
		free(uslot);
		return op_fail(ctx, rc, "batch %llu: out of memory growing the tables",
			       (unsigned long long)b->seq);
	}
	/* The row width of every unique key, for train (b->aux, freed with the
	 * batch). The slot array is reused in place. */
	for (uint32_t u = 0; u < nu; u++)
		uslot[u] = (uint16_t)st_model_row_dim(tr->model, uslot[u]);
	free(b->aux);
	b->aux = uslot;
	return ST_OK;
}

/* ---- train ------------------------------------------------------------------ */

/* Grows every worker's per-unique-key scratch to n_uniq. Worker 0's thread,
 * before the batch is published. */
static int size_workers(st_trainer_t *tr, uint32_t n_uniq)
{
	const int relaxed = tr->sops->flags & ST_SYNC_RELAXED_READS;
	for (int i = 0; i < tr->N; i++) {
		worker_t *w = &tr->w[i];
		if (n_uniq <= w->gcap)
			continue;
		uint32_t cap = n_uniq + n_uniq / 2;
		free(w->gu);
		free(w->prow_buf);
		free(w->prow);
		free(w->mark);
		free(w->touched);
		w->gu = malloc(sizeof(float) * cap * (size_t)tr->gstride);
		w->mark = calloc(cap, sizeof(uint32_t));
		w->touched = malloc(sizeof(uint32_t) * cap);
		w->prow_buf = relaxed ? malloc(sizeof(float) * cap * (size_t)tr->gstride) : NULL;
		w->prow = relaxed ? malloc(sizeof(float *) * cap) : NULL;
		w->stamp = 0;
		if (!w->gu || !w->mark || !w->touched || (relaxed && (!w->prow_buf || !w->prow))) {
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

/* Forward + backward of minibatch mb on worker w; fills g. */
static void compute(st_trainer_t *tr, worker_t *w, st_batch_t *b, uint32_t mb,
		    const float *params, float scale, st_sync_grads_t *g)
{
	const uint32_t r0 = mb * tr->minibatch, n = mb_size(tr, b, mb);
	const uint16_t *rdim = b->aux;
	float *const *shared = b->rows;
	const int relaxed = tr->sops->flags & ST_SYNC_RELAXED_READS;
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
		if (relaxed) {
			float *p = shared[u] ? w->prow_buf + (size_t)u * gs : NULL;
			if (p)
				st_sync_load_relaxed(p, shared[u], rdim[u]);
			w->prow[u] = p;
		}
	}
	memset(w->gdense, 0, sizeof(float) * tr->env.nparams);
	st_model_step(tr->model, w->ws, b, r0, n, relaxed ? w->prow : shared, params, scale,
		      b->pred + r0, w->gdense, w->gu, gs);
	for (uint32_t i = r0; i < r0 + n; i++)
		st_auc_acc_add(w->acc, b->pred[i], b->labels[i]);
	*g = (st_sync_grads_t){
		.n_examples = n, .dense = w->gdense, .n_rows = nt, .uidx = w->touched,
		.rows = shared, .row_dim = rdim, .grad = w->gu, .gstride = gs,
		.mark = w->mark, .stamp = stamp,
	};
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
		const uint32_t nsteps = (nmb + (uint32_t)N - 1) / (uint32_t)N;
		for (uint32_t s = 0; s < nsteps; s++) {
			const uint32_t mb = s * (uint32_t)N + (uint32_t)w->idx;
			uint32_t tot = 0;
			for (uint32_t v = s * (uint32_t)N; v < (s + 1) * (uint32_t)N && v < nmb; v++)
				tot += mb_size(tr, b, v);
			float scale = tr->mean_loss ? 1.0f / (float)tot : 1.0f;
			const float *params = ops->begin_step(tr->sync, w->idx, tr->gstep + s);
			if (mb < nmb)
				compute(tr, w, b, mb, params, scale, &g);
			else
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
			const float *params = ops->begin_step(tr->sync, w->idx, w->steps);
			float scale = tr->mean_loss ? 1.0f / (float)mb_size(tr, b, mb) : 1.0f;
			compute(tr, w, b, mb, params, scale, &g);
			int rc = ops->apply(tr->sync, w->idx, &g);
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
	tr->sops->report(tr->sync, &s);
	st_sync_stats_publish(&s, tr->metrics);
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
	if (b->n == 0)
		return ST_OK;
	int rc = size_workers(tr, b->n_uniq);
	if (rc >= 0)
		rc = tr->sops->begin_batch(tr->sync, b->n_uniq);
	if (rc < 0)
		return op_fail(ctx, rc, "out of memory for train scratch (%u unique keys, "
			       "%d workers)", b->n_uniq, tr->N);
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
	if (!b->eval && tr->sops->schedule == ST_SYNC_LOCKSTEP)
		tr->gstep += (tr->nmb + (uint32_t)tr->N - 1) / (uint32_t)tr->N;
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
	tr->since += b->n;
	if (tr->since >= AUC_REFRESH) {
		tr->since = 0;
		refresh_metrics(tr);
	}
	return ST_OK;
}

static int train_finish(void *state, st_stage_ctx_t *ctx)
{
	refresh_metrics(state);
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
	int rc = st_auc_exact(tr->ev_pred, tr->ev_label, tr->ev_n, &a);
	if (rc < 0)
		return rc;
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

/* ---- push and dump --------------------------------------------------------- */

static int push_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			st_batch_t **out)
{
	st_trainer_t *tr = state;
	if (tr->ttl && !b->eval && b->seq > tr->ttl && b->seq % tr->evict_every == 0) {
		uint64_t ev = 0;
		for (int i = 0; i < tr->n_tables; i++)
			ev += st_table_evict_older(tr->tables[i], (uint32_t)b->seq, tr->ttl);
		if (tr->metrics)
			st_metrics_add(tr->metrics, "evicted", (double)ev);
	}
	if (tr->metrics) {
		uint64_t rows = 0, rejected = 0;
		for (int i = 0; i < tr->n_tables; i++) {
			st_table_stats_t ts;
			st_table_stats(tr->tables[i], &ts);
			rows += ts.rows;
			rejected += ts.rejected;
		}
		st_metrics_set(tr->metrics, "rows", (double)rows);
		if (rejected)
			st_metrics_set(tr->metrics, "not_admitted", (double)rejected);
	}
	*out = b;
	return ST_OK;
}

static int dump_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			st_batch_t **out)
{
	st_batch_destroy(b);
	*out = NULL;
	return ST_OK;
}

const st_stage_ops_t st_trainer_pull_ops = {
	.name = "pull",
	.process = pull_process,
};

const st_stage_ops_t st_trainer_train_ops = {
	.name = "train",
	.process = train_process,
	.thread_start = train_thread_start,
	.thread_stop = train_thread_stop,
	.finish = train_finish,
};

const st_stage_ops_t st_trainer_push_ops = {
	.name = "push",
	.process = push_process,
};

const st_stage_ops_t st_trainer_dump_ops = {
	.name = "dump",
	.process = dump_process,
};
