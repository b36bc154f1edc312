/*
 * dist_policies.c — the sync policies of a multi-process job
 * (docs/distributed.md): each rank runs N local workers over its own share
 * of the batches, the sparse rows live with their owner ranks
 * (ops/dist/dist.h), and these policies join the ranks.
 *
 *   allreduce  lockstep across every worker of every rank: per step the
 *              local workers' gradients are summed as the single-process
 *              allreduce sums them (dense by tensor owner, rows by first
 *              toucher, in worker order), the dense sums are allreduced
 *              across ranks in rank order (st_net_allreduce_f32), and each
 *              rank's row sums go to the rows' owners, which sum them in
 *              rank order and apply one step (a synchronous PUSH). Every
 *              rank then takes the same dense optimizer step on its replica.
 *              With one worker per rank this is bit for bit the
 *              single-process run of P workers on the same global batch
 *              (gba-global-batch-aggregation.txt §2, the synchronous
 *              baseline).
 *   hybrid     PERSIA's hybrid (persia-hybrid-training.md Section 4.1):
 *              the dense part as allreduce, synchronously; the rows
 *              asynchronously with bounded staleness — a step's row sums are
 *              applied as in allreduce, but a pull only waits until the
 *              step `staleness` steps back is applied (the trainer's
 *              dist_lag), so rows may be up to `staleness` steps old.
 *   async      the dense parameters live on rank 0 (st_dist_dense): each
 *              worker sends its gradient and trains on the parameters that
 *              come back (a parameter server); rows applied on arrival by
 *              their owners. A worker rank that dies does not stop the
 *              others.
 *   shadow     ShadowSync in the background: dist_shadow.c.
 *
 *   kstep      kstep.c itself, which merges across processes when env->dist
 *              is set (its header says how).
 *
 *   gba, bsp   gradient buffers at the parameter servers (rank 0 dense,
 *              every owner its rows): ops/dist/psbuf.c has the algorithm.
 *   hop_bs     async with rank 0's clock rule (ops/dist/hop.c).
 *   hop_bw     each rank a lockstep unit; rank 0 closes a step with all
 *              but b of the active ranks and drops the rest (ops/dist/hop.c).
 *
 * auto switches between these (ops/train/trainer.c, "auto across
 * processes"); the registry gives it no multi-process ops.
 *
 * Threads: like allreduce.c — hooks on the N local worker threads with
 * barriers; between barriers each float is written by one worker. The
 * network calls of a step (push, dense allreduce) are made by worker 0 only
 * (st_dist_push and the collectives are one-thread-at-a-time); async's
 * workers push under a mutex.
 */
#include "ops/sync/dist_sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/dist/dist.h"
#include "ops/algo/owner.h"
#include "runtime/err.h"
#include "runtime/net/net.h"

/* ---- a step's row sums to their owners (allreduce, hybrid, kstep) ---------- */

typedef struct first {
	const st_sync_grads_t *g;      /* the first toucher's gradients (hold the sum) */
	uint32_t u;
} first_t;

struct st_sync_rowpush {
	int N;
	first_t **first;               /* [N] the row sums each worker made */
	uint32_t *n, *cap;
	uint64_t *keys;                /* the message arrays (worker 0) */
	uint8_t *tab;
	float *grad;
	size_t pcap;
};

st_sync_rowpush_t *st_sync_rowpush_create(int n_workers)
{
	st_sync_rowpush_t *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->N = n_workers;
	r->first = calloc((size_t)n_workers, sizeof *r->first);
	r->n = calloc((size_t)n_workers, sizeof *r->n);
	r->cap = calloc((size_t)n_workers, sizeof *r->cap);
	if (!r->first || !r->n || !r->cap) {
		st_sync_rowpush_destroy(r);
		return NULL;
	}
	return r;
}

void st_sync_rowpush_destroy(st_sync_rowpush_t *r)
{
	if (!r)
		return;
	for (int w = 0; r->first && w < r->N; w++)
		free(r->first[w]);
	free(r->first);
	free(r->n);
	free(r->cap);
	free(r->keys);
	free(r->tab);
	free(r->grad);
	free(r);
}

struct collect {
	st_sync_rowpush_t *r;
	int w;
};

/* st_sync_sum_rows' callback: remembers where worker w left a row sum. */
static int collect(void *arg, const st_sync_grads_t *gv, uint32_t u)
{
	struct collect *c = arg;
	st_sync_rowpush_t *r = c->r;
	const int w = c->w;
	if (r->n[w] == r->cap[w]) {
		uint32_t cap = r->cap[w] ? 2 * r->cap[w] : 1024;
		first_t *p = realloc(r->first[w], sizeof(first_t) * cap);
		if (!p)
			return ST_ENOMEM;
		r->first[w] = p;
		r->cap[w] = cap;
	}
	r->first[w][r->n[w]++] = (first_t){ gv, u };
	return ST_OK;
}

int st_sync_rowpush_sum(st_sync_rowpush_t *r, const st_sync_env_t *env,
			st_sync_grads_t *const *g, int w)
{
	r->n[w] = 0;
	struct collect c = { r, w };
	return st_sync_sum_rows(env, g, w, collect, &c);
}

/* The message arrays of a step's row sums, each scaled by `scale`: *nk
 * keys of *gs floats' stride. */
static int rowpush_fill(st_sync_rowpush_t *r, float scale, size_t *nk, int *gsp,
			uint64_t *bytes)
{
	size_t n = 0;
	int gs = 1;
	for (int w = 0; w < r->N; w++) {
		n += r->n[w];
		if (r->n[w])
			gs = r->first[w][0].g->gstride;
	}
	if (n > r->pcap) {
		free(r->keys);
		free(r->tab);
		free(r->grad);
		r->keys = malloc(sizeof(uint64_t) * n);
		r->tab = malloc(n);
		r->grad = malloc(sizeof(float) * n * (size_t)gs);
		r->pcap = r->keys && r->tab && r->grad ? n : 0;
		if (!r->pcap)
			return ST_ENOMEM;
	}
	size_t k = 0;
	for (int w = 0; w < r->N; w++)
		for (uint32_t i = 0; i < r->n[w]; i++) {
			const st_sync_grads_t *gv = r->first[w][i].g;
			const uint32_t u = r->first[w][i].u;
			if (!gv->rows[u])
				continue;   /* not admitted: no update, as in one process */
			r->keys[k] = gv->keys[u];
			r->tab[k] = gv->utable[u];
			float *dst = r->grad + k * (size_t)gs;
			const float *src = gv->grad + (size_t)u * gv->gstride;
			for (int j = 0; j < gv->row_dim[u]; j++)
				dst[j] = src[j] * scale;
			*bytes += 8 + sizeof(float) * (uint64_t)gv->row_dim[u];
			k++;
		}
	*nk = k;
	*gsp = gs;
	return ST_OK;
}

int st_sync_rowpush_send(st_sync_rowpush_t *r, const st_sync_env_t *env, uint64_t step,
			 uint64_t t, uint64_t *bytes)
{
	size_t k;
	int gs;
	int rc = rowpush_fill(r, 1.0f, &k, &gs, bytes);
	return rc < 0 ? rc : st_dist_push(env->dist, step, 1, t, r->keys, r->tab, r->grad,
					  (size_t)gs, (uint32_t)k);
}

/* hop_bw: the step's row sums of a kept rank, as means over the K kept
 * ranks (each rank's sum is over its own examples' mean loss). */
static int rowpush_send_quorum(st_sync_rowpush_t *r, const st_sync_env_t *env, uint64_t step,
			       uint64_t t, uint32_t K, uint64_t *bytes)
{
	size_t k;
	int gs;
	int rc = rowpush_fill(r, 1.0f / (float)K, &k, &gs, bytes);
	return rc < 0 ? rc : st_dist_push_quorum(env->dist, step, t, K, r->keys, r->tab,
						 r->grad, (size_t)gs, (uint32_t)k);
}

typedef struct {
	st_sync_env_t env;
	int N;
	pthread_barrier_t bar;
	st_sync_dense_t dense;         /* state and step (the trainer's) */
	uint64_t step;                 /* sync steps done by this policy (worker 0) */
	int *owner;                    /* [ntensors] local worker reducing tensor i */
	st_sync_grads_t **g;           /* [N] */
	st_sync_rowpush_t *rows;
	int err;                       /* first error of a step (relaxed atomic) */
	st_sync_stats_t st;
} dar_t;

static void dar_destroy(void *self)
{
	dar_t *s = self;
	if (!s)
		return;
	pthread_barrier_destroy(&s->bar);
	st_sync_rowpush_destroy(s->rows);
	free(s->owner);
	free(s->g);
	st_sync_dense_fini(&s->dense);
	free(s);
}

static int dar_create(void **self, const st_sync_env_t *env)
{
	if (!env->dist)
		return ST_EINVAL;
	dar_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->step = env->dist_step0;
	pthread_barrier_init(&s->bar, NULL, (unsigned)s->N);
	s->owner = st_algo_owner_tensors(env->model, env->n_workers);
	s->g = calloc((size_t)s->N, sizeof *s->g);
	s->rows = st_sync_rowpush_create(s->N);
	if (st_sync_dense_init(&s->dense, env) < 0 || !s->owner || !s->g || !s->rows) {
		dar_destroy(s);
		return ST_ENOMEM;
	}
	*self = s;
	return ST_OK;
}

int st__sync_noop_begin_batch(void *self, uint32_t n_uniq)
{
	return ST_OK;
}

void st__sync_noop_end_batch(void *self, int w)
{
}

static const float *dar_begin_step(void *self, int w, uint64_t step)
{
	dar_t *s = self;
	return s->env.params;
}

/* Worker 0: this rank's row sums to their owners, then the dense sum across
 * ranks. */
static int exchange(dar_t *s, float *acc, uint64_t t)
{
	const st_sync_env_t *env = &s->env;
	uint64_t bytes = sizeof(float) * (uint64_t)env->nparams;
	int rc = st_sync_rowpush_send(s->rows, env, s->step, t, &bytes);
	if (rc >= 0)
		rc = st_net_allreduce_f32(st_dist_net(env->dist), acc, env->nparams);
	st_sync_stat_add(&s->st.bytes, bytes);
	return rc;
}

static int dar_apply(void *self, int w, st_sync_grads_t *g)
{
	dar_t *s = self;
	const st_sync_env_t *env = &s->env;
	s->g[w] = g;
	pthread_barrier_wait(&s->bar);                          /* A */
	const uint64_t t = *s->dense.t + 1;
	/* This rank's sums, as the single-process allreduce makes them: dense
	 * by tensor owner into worker 0's buffer, rows into their first
	 * toucher's, in worker order. */
	st_sync_reduce_dense(env, s->g, s->owner, w, NULL, 0);
	int rc = st_sync_rowpush_sum(s->rows, env, s->g, w);
	if (rc < 0)
		__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	pthread_barrier_wait(&s->bar);                          /* B */
	float *acc = s->g[0]->dense;
	if (w == 0 && !__atomic_load_n(&s->err, __ATOMIC_RELAXED)) {
		rc = exchange(s, acc, t);
		if (rc < 0)
			__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	}
	pthread_barrier_wait(&s->bar);                          /* C */
	rc = __atomic_load_n(&s->err, __ATOMIC_RELAXED);
	if (rc >= 0) {
		/* The same optimizer step on every rank's replica. */
		for (int i = 0; i < st_model_ntensors(env->model); i++)
			if (s->owner[i] == w)
				st_sync_dense_update_tensor(env, env->params, s->dense.state, acc, i, t);
		if (g->n_examples) {
			st_sync_stat_add(&s->st.updates, 1);
			st_sync_stat_add(&s->st.staleness[0], 1);
		}
	}
	pthread_barrier_wait(&s->bar);                          /* D */
	if (w == 0 && rc >= 0) {
		*s->dense.t = t;
		s->step++;
		st_sync_stat_add(&s->st.steps, 1);
	}
	return rc;
}

static void dar_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((dar_t *)self)->st, out);
}

const st_sync_ops_t st_sync_dist_allreduce_ops = {
	.name = "allreduce",
	.schedule = ST_SYNC_LOCKSTEP,
	.create = dar_create,
	.destroy = dar_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dar_begin_step,
	.apply = dar_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dar_report,
};

const st_sync_ops_t st_sync_dist_hybrid_ops = {
	.name = "hybrid",
	.schedule = ST_SYNC_LOCKSTEP,
	.create = dar_create,   /* the pulls' staleness bound is the trainer's */
	.destroy = dar_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dar_begin_step,
	.apply = dar_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dar_report,
};

/* Each worker's private copy of the dense parameters, [N][nparams], filled
 * with env's (async, hop_bs, gba, bsp: rank 0's replies overwrite them), or
 * NULL. Free with st_sync_snaps_destroy. */
static float **worker_copies(const st_sync_env_t *env)
{
	float **p = st_sync_snaps_create(env);
	for (int w = 0; p && w < env->n_workers; w++)
		memcpy(p[w], env->params, sizeof(float) * env->nparams);
	return p;
}

/* ---- async and hop_bs: dense parameters on rank 0 --------------------------------- */

typedef struct {
	st_sync_env_t env;
	int N;
	int hop;                       /* hop_bs: rank 0's clock rule (ops/dist/hop.c) */
	uint32_t b;
	float **params;                /* [N] each worker's copy */
	uint64_t *version;             /* [N] rank 0's update count at the copy */
	uint8_t *idle;                 /* [N] hop_bs: idled since the copy */
	rowsend_t send;                /* row pushes */
	st_sync_stats_t st;
} das_t;

static void das_destroy(void *self)
{
	das_t *s = self;
	if (!s)
		return;
	st_sync_snaps_destroy(s->params, s->N);
	free(s->version);
	free(s->idle);
	st__rowsend_fini(&s->send);
	free(s);
}

static int das_create(void **self, const st_sync_env_t *env)
{
	if (!env->dist)
		return ST_EINVAL;
	const int hop = env->cfg && env->cfg->name && !strcmp(env->cfg->name, "hop_bs");
	const double b = hop ? st_sync_cfg_num(env->cfg, "b", -1) : 0;
	if (hop && (!(b >= 0) || b != (double)(uint32_t)b)) {
		st_error("sync policy hop_bs: parameter b (how many steps the fastest worker "
			 "may run ahead of the slowest, an integer >= 0) is missing or invalid");
		return ST_EJOB;
	}
	das_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->hop = hop;
	s->b = (uint32_t)b;
	st__rowsend_init(&s->send);
	s->params = worker_copies(env);
	s->version = calloc((size_t)s->N, sizeof(uint64_t));
	s->idle = calloc((size_t)s->N, 1);
	if (!s->params || !s->version || !s->idle) {
		das_destroy(s);
		return ST_ENOMEM;
	}
	*self = s;
	return ST_OK;
}

static const float *das_begin_step(void *self, int w, uint64_t step)
{
	das_t *s = self;
	if (step == 0 || s->idle[w]) {
		/* The first step of the policy, or (hop_bs) the first after
		 * idling: rank 0's current parameters (and, for hop_bs, the
		 * worker rejoins the clocks). */
		s->idle[w] = 0;
		uint64_t v;
		int rc = s->hop ? st_dist_dense_hop(s->env.dist, w, s->b, NULL, s->params[w], &v)
				: st_dist_dense(s->env.dist, w, NULL, s->params[w], &v);
		if (rc >= 0)
			s->version[w] = v;
	}
	return s->params[w];
}

static int das_apply(void *self, int w, st_sync_grads_t *g)
{
	das_t *s = self;
	const st_sync_env_t *env = &s->env;
	if (!g->n_examples)
		return ST_OK;
	uint64_t v0 = s->version[w], v;
	if (s->hop) {
		/* hop_bs: the rows first, since the dense reply may be held
		 * back by the clock rule (ops/dist/hop.c). */
		uint64_t bytes = sizeof(float) * (uint64_t)env->nparams * 2;
		int rc = st__rowsend_push(env, &s->send, g, v0 + 1, NULL, &bytes);
		st_sync_stat_add(&s->st.bytes, bytes);
		if (rc >= 0)
			rc = st_dist_dense_hop(env->dist, w, s->b, g->dense, s->params[w], &v);
		if (rc < 0)
			return rc;
		s->version[w] = v;
		uint64_t stale = v > v0 + 1 ? v - v0 - 1 : 0;
		st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(stale)], 1);
		st_sync_stat_add(&s->st.updates, 1);
		st_sync_stat_add(&s->st.steps, 1);
		return ST_OK;
	}
	int rc = st_dist_dense(env->dist, w, g->dense, s->params[w], &v);
	if (rc < 0)
		return rc;
	s->version[w] = v;
	uint64_t stale = v > v0 + 1 ? v - v0 - 1 : 0;
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(stale)], 1);
	st_sync_stat_add(&s->st.updates, 1);
	st_sync_stat_add(&s->st.steps, 1);
	/* Rows: this worker's gradients to their owners, applied on arrival
	 * (a batch's rows are private copies, so keys go once per worker). */
	uint64_t bytes = sizeof(float) * (uint64_t)env->nparams * 2;
	rc = st__rowsend_push(env, &s->send, g, v, NULL, &bytes);
	st_sync_stat_add(&s->st.bytes, bytes);
	return rc;
}

/* hop_bs: this worker has no minibatch left in the batch. */
static void das_end_batch(void *self, int w)
{
	das_t *s = self;
	if (!s->hop)
		return;
	s->idle[w] = 1;
	if (st_dist_idle(s->env.dist, w) < 0)
		st_warn("hop_bs: worker %d could not tell rank 0 it is idle", w);
}

static void das_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((das_t *)self)->st, out);
}

const st_sync_ops_t st_sync_dist_async_ops = {
	.name = "async",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_STEP_ROWS,
	.create = das_create,
	.destroy = das_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = das_begin_step,
	.apply = das_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = das_report,
};

const st_sync_ops_t st_sync_dist_hop_bs_ops = {
	.name = "hop_bs",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_STEP_ROWS,
	.create = das_create,
	.destroy = das_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = das_begin_step,
	.apply = das_apply,
	.end_batch = das_end_batch,
	.report = das_report,
};

/* ---- hop_bw: backup ranks ------------------------------------------------------ */

typedef struct {
	st_sync_env_t env;
	int N;
	uint32_t b;
	pthread_barrier_t bar;
	int *owner;                    /* [ntensors] local worker reducing tensor i */
	st_sync_grads_t **g;           /* [N] */
	st_sync_rowpush_t *rows;
	float *rep;                    /* [nparams] the parameters the workers read:
					* rank 0's env->params change under its
					* service thread when other ranks close steps */
	uint64_t token;                /* the step of the replica's parameters */
	int err;                       /* first error of a step (relaxed atomic) */
	st_sync_stats_t st;
} dbw_t;

static void dbw_destroy(void *self)
{
	dbw_t *s = self;
	if (!s)
		return;
	pthread_barrier_destroy(&s->bar);
	st_sync_rowpush_destroy(s->rows);
	free(s->owner);
	free(s->g);
	free(s->rep);
	free(s);
}

static int dbw_create(void **self, const st_sync_env_t *env)
{
	if (!env->dist)
		return ST_EINVAL;
	const int P = st_dist_size(env->dist);
	const double b = st_sync_cfg_num(env->cfg, "b", -1);
	if (!(b >= 0) || b >= P || b != (double)(uint32_t)b) {
		st_error("sync policy hop_bw across processes drops the b slowest ranks of each "
			 "step: b must be an integer >= 0 and below the number of ranks (%d); "
			 "got %g", P, b);
		return ST_EJOB;
	}
	dbw_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->b = (uint32_t)b;
	pthread_barrier_init(&s->bar, NULL, (unsigned)s->N);
	s->owner = st_algo_owner_tensors(env->model, env->n_workers);
	s->g = calloc((size_t)s->N, sizeof *s->g);
	s->rows = st_sync_rowpush_create(s->N);
	s->rep = malloc(sizeof(float) * (env->nparams ? env->nparams : 1));
	if (!s->owner || !s->g || !s->rows || !s->rep) {
		dbw_destroy(s);
		return ST_ENOMEM;
	}
	/* Join rank 0's steps now (so this rank counts in their quorum from
	 * the start) with its current parameters and step. */
	uint64_t tok;
	uint32_t K;
	int late;
	int rc = st_dist_dense_bw(env->dist, s->b, NULL, 0, s->rep, &tok, &K, &late);
	if (rc < 0) {
		dbw_destroy(s);
		return rc;
	}
	s->token = tok;
	*self = s;
	return ST_OK;
}

static const float *dbw_begin_step(void *self, int w, uint64_t step)
{
	return ((dbw_t *)self)->rep;
}

/* Worker 0: this rank's step to rank 0; the rows to their owners if the
 * step kept it. */
static int dbw_exchange(dbw_t *s, float *dense, uint32_t n_examples)
{
	const st_sync_env_t *env = &s->env;
	if (!n_examples)
		return ST_OK;   /* no minibatch in this local step: nothing to send */
	uint64_t next, bytes = 2 * sizeof(float) * (uint64_t)env->nparams;
	uint32_t K;
	int late;
	int rc = st_dist_dense_bw(env->dist, s->b, dense, s->token, s->rep, &next, &K, &late);
	if (rc >= 0 && !late)
		rc = rowpush_send_quorum(s->rows, env, s->token, s->token + 1, K, &bytes);
	if (rc < 0)
		return rc;
	st_sync_stat_add(&s->st.bytes, bytes);
	st_sync_stat_add(late ? &s->st.dropped : &s->st.updates, 1);
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(late ? next - s->token : 0)], 1);
	__atomic_store_n(&s->st.steps, next, __ATOMIC_RELAXED);
	s->token = next;
	return ST_OK;
}

static int dbw_apply(void *self, int w, st_sync_grads_t *g)
{
	dbw_t *s = self;
	const st_sync_env_t *env = &s->env;
	s->g[w] = g;
	pthread_barrier_wait(&s->bar);                          /* A */
	/* This rank's step, summed as the single-process policies sum it. */
	st_sync_reduce_dense(env, s->g, s->owner, w, NULL, 0);
	int rc = st_sync_rowpush_sum(s->rows, env, s->g, w);
	if (rc < 0)
		__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	pthread_barrier_wait(&s->bar);                          /* B */
	if (w == 0 && !__atomic_load_n(&s->err, __ATOMIC_RELAXED)) {
		uint32_t n = 0;
		for (int v = 0; v < s->N; v++)
			n += s->g[v]->n_examples;
		/* Rank 0's parameters come back into the replica while the
		 * other workers wait at C (the eval and the end read rank 0's
		 * own, fetched by st_trainer_dist_finish on the other ranks). */
		if ((rc = dbw_exchange(s, s->g[0]->dense, n)) < 0)
			__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	}
	pthread_barrier_wait(&s->bar);                          /* C */
	return __atomic_load_n(&s->err, __ATOMIC_RELAXED);
}

static int dbw_finish(void *self)
{
	/* This rank has no more steps: the others' close without it. */
	return st_dist_idle(((dbw_t *)self)->env.dist, 0);
}

static void dbw_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((dbw_t *)self)->st, out);
}

const st_sync_ops_t st_sync_dist_hop_bw_ops = {
	.name = "hop_bw",
	.schedule = ST_SYNC_LOCKSTEP,
	.flags = ST_SYNC_RANK_LOCAL | ST_SYNC_FRESH_ROWS,
	.create = dbw_create,
	.destroy = dbw_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dbw_begin_step,
	.apply = dbw_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dbw_report,
	.finish = dbw_finish,
};

/* ---- gba and bsp: gradient buffers at the parameter servers ------------------- */

typedef struct {
	st_sync_env_t env;
	int N;
	const char *name;
	st_dist_buf_t b;
	float **params;                /* [N] each worker's copy */
	uint64_t *token;               /* [N] the token of that copy */
	int *err;                      /* [N] a failed first fetch, reported at apply */
	rowsend_t send;                /* row contributions */
	uint64_t steps;                /* the highest token seen (relaxed atomic) */
	st_sync_stats_t st;
} dbuf_t;

static void dbuf_destroy(void *self)
{
	dbuf_t *s = self;
	if (!s)
		return;
	st_sync_snaps_destroy(s->params, s->N);
	free(s->token);
	free(s->err);
	st__rowsend_fini(&s->send);
	free(s);
}

/* The buffer's parameters from the job: gba{global_batch, tolerance}
 * (M = global_batch / minibatch over every worker of every rank, as in one
 * process) or bsp{b}. ST_OK or ST_EJOB (logged). */
static int dbuf_params(const st_sync_env_t *env, const char *name, st_dist_buf_t *b)
{
	if (!strcmp(name, "bsp")) {
		double v = st_sync_cfg_num(env->cfg, "b", -1);
		if (!(v >= 1) || v > (1u << 20)) {
			st_error("sync policy bsp: parameter b (gradients per update, 1 .. %u) is "
				 "missing or out of range", 1u << 20);
			return ST_EJOB;
		}
		*b = (st_dist_buf_t){ .M = (uint32_t)v, .tol = UINT32_MAX, .perid = 0 };
		return ST_OK;
	}
	const double gb = st_sync_cfg_num(env->cfg, "global_batch", -1);
	const double tol = st_sync_cfg_num(env->cfg, "tolerance", 1);
	const uint64_t local = env->minibatch;
	if (!(gb >= 1) || gb != (double)(uint64_t)gb) {
		st_error("sync gba: global_batch (examples per global step, an integer >= 1) "
			 "is required, e.g. st.sync.gba{global_batch = 4 * minibatch}");
		return ST_EJOB;
	}
	if (!(tol >= 0) || tol != (double)(uint32_t)tol || tol >= UINT32_MAX) {
		st_error("sync gba: tolerance must be an integer >= 0 (got %g)", tol);
		return ST_EJOB;
	}
	if (!local || (uint64_t)gb % local || (uint64_t)gb / local > (1u << 20)) {
		st_error("sync gba: global_batch = %.0f must be a multiple of the minibatch (%llu "
			 "examples per worker step), at most %u times it", gb,
			 (unsigned long long)local, 1u << 20);
		return ST_EJOB;
	}
	*b = (st_dist_buf_t){ .M = (uint32_t)((uint64_t)gb / local), .tol = (uint32_t)tol,
			      .perid = 1 };
	return ST_OK;
}

static int dbuf_create_named(void **self, const st_sync_env_t *env, const char *name)
{
	if (!env->dist)
		return ST_EINVAL;
	dbuf_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->name = name;
	st__rowsend_init(&s->send);
	int rc = dbuf_params(env, name, &s->b);
	if (rc < 0) {
		dbuf_destroy(s);
		return rc;
	}
	s->params = worker_copies(env);
	s->token = calloc((size_t)s->N, sizeof(uint64_t));
	s->err = calloc((size_t)s->N, sizeof(int));
	rc = s->params && s->token && s->err ? ST_OK : ST_ENOMEM;
	if (rc < 0) {
		dbuf_destroy(s);
		return rc;
	}
	if (st_dist_rank(env->dist) == 0)
		st_info("sync %s across %d processes: every %u worker gradients make one global "
			"step%s", name, st_dist_size(env->dist), s->b.M,
			s->b.perid ? " (GBA token control, Appendix B)" : "");
	*self = s;
	return ST_OK;
}

static int dgba_create(void **self, const st_sync_env_t *env)
{
	return dbuf_create_named(self, env, "gba");
}

static int dbsp_create(void **self, const st_sync_env_t *env)
{
	return dbuf_create_named(self, env, "bsp");
}

static const float *dbuf_begin_step(void *self, int w, uint64_t step)
{
	dbuf_t *s = self;
	if (step == 0) {
		/* The policy's first step: rank 0's parameters and a token
		 * ("pull the parameters and fetch a token from PS", Alg. 1). */
		uint64_t age;
		int dropped;
		s->err[w] = st_dist_dense_buf(s->env.dist, w, &s->b, NULL, 0, s->params[w],
					      &s->token[w], &age, &dropped);
	}
	return s->params[w];
}

static int dbuf_apply(void *self, int w, st_sync_grads_t *g)
{
	dbuf_t *s = self;
	const st_sync_env_t *env = &s->env;
	if (s->err[w] < 0)
		return s->err[w];
	if (!g->n_examples)
		return ST_OK;
	/* Rows to every owner's buffer with the tokens of the batch's pull,
	 * then the dense gradient to rank 0's with the parameters' token; the
	 * reply is the next parameters and token (Alg. 1 lines 16-18: send,
	 * then pull and fetch for the next batch). */
	uint64_t bytes = 2 * (8 + sizeof(float) * (uint64_t)env->nparams);
	int rc = st__rowsend_push(env, &s->send, g, 0, &s->b, &bytes);
	st_sync_stat_add(&s->st.bytes, bytes);
	if (rc < 0)
		return rc;
	uint64_t next, age;
	int dropped;
	rc = st_dist_dense_buf(env->dist, w, &s->b, g->dense, s->token[w], s->params[w], &next,
			       &age, &dropped);
	if (rc < 0)
		return rc;
	s->token[w] = next;
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(age)], 1);
	st_sync_stat_add(dropped ? &s->st.dropped : &s->st.updates, 1);
	uint64_t seen = __atomic_load_n(&s->steps, __ATOMIC_RELAXED);
	while (next > seen && !__atomic_compare_exchange_n(&s->steps, &seen, next, 0,
							    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	return ST_OK;
}

static void dbuf_report(void *self, st_sync_stats_t *out)
{
	dbuf_t *s = self;
	st_sync_stats_read(&s->st, out);
	out->steps = __atomic_load_n(&s->steps, __ATOMIC_RELAXED);
}

const st_sync_ops_t st_sync_dist_gba_ops = {
	.name = "gba",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_FRESH_ROWS,
	.create = dgba_create,
	.destroy = dbuf_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dbuf_begin_step,
	.apply = dbuf_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dbuf_report,
};

const st_sync_ops_t st_sync_dist_bsp_ops = {
	.name = "bsp",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_FRESH_ROWS,
	.create = dbsp_create,
	.destroy = dbuf_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dbuf_begin_step,
	.apply = dbuf_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dbuf_report,
};

/* ---- rows applied on arrival (dist_sync.h) ---------------------------------- */

void st__rowsend_init(rowsend_t *r)
{
	memset(r, 0, sizeof *r);
	pthread_mutex_init(&r->mu, NULL);
}

void st__rowsend_fini(rowsend_t *r)
{
	pthread_mutex_destroy(&r->mu);
	free(r->keys);
	free(r->tab);
	free(r->grad);
}

int st__rowsend_push(const st_sync_env_t *env, rowsend_t *r, const st_sync_grads_t *g,
		     uint64_t t, const st_dist_buf_t *buf, uint64_t *bytes)
{
	const size_t gs = (size_t)g->gstride;
	int rc = ST_OK;
	pthread_mutex_lock(&r->mu);
	if (g->n_rows > r->cap) {
		free(r->keys);
		free(r->tab);
		free(r->grad);
		r->keys = malloc(sizeof(uint64_t) * g->n_rows);
		r->tab = malloc(g->n_rows);
		r->grad = malloc(sizeof(float) * gs * g->n_rows);
		r->cap = r->keys && r->tab && r->grad ? g->n_rows : 0;
		if (!r->cap)
			rc = ST_ENOMEM;
	}
	uint32_t k = 0;
	for (uint32_t i = 0; rc >= 0 && i < g->n_rows; i++) {
		uint32_t u = g->uidx[i];
		if (!g->rows[u])
			continue;
		r->keys[k] = g->keys[u];
		r->tab[k] = g->utable[u];
		memcpy(r->grad + (size_t)k * gs, g->grad + (size_t)u * gs,
		       sizeof(float) * g->row_dim[u]);
		*bytes += 8 + sizeof(float) * (uint64_t)g->row_dim[u];
		k++;
	}
	if (rc >= 0 && buf)
		rc = st_dist_push_buf(env->dist, buf, g->owner_token, r->keys, r->tab, r->grad, gs,
				      k);
	else if (rc >= 0)
		rc = st_dist_push(env->dist, 0, 0, t, r->keys, r->tab, r->grad, gs, k);
	pthread_mutex_unlock(&r->mu);
	return rc;
}
