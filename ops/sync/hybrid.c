/*
 * hybrid.c — PERSIA's sync-async hybrid training ("hybrid{staleness}"):
 * Lian et al., "PERSIA: An Open, Hybrid System Scaling Deep Learning-based
 * Recommenders up to 100 Trillion Parameters" (persia-hybrid-training.md),
 * §3: the embedding layer is trained asynchronously (§3.2, Algorithm 1),
 * the dense network synchronously (§3.3, Algorithm 2), with bounded
 * staleness (§5, Assumption 1: t - D(t) <= tau).
 *
 * Dense: exactly allreduce.c's lockstep step. Every worker computes with
 * the one shared parameter array; at each step the gradients are summed in
 * worker order by tensor owners between barriers A and B and one optimizer
 * step is applied, so every worker reads the same dense parameters.
 *
 * Sparse: a worker does not apply its row gradients. It copies them into
 * one of its (staleness + 1) slots and queues them for the embedding
 * worker, the thread "st-hybrid-0", which applies queued updates one
 * worker-step at a time in arrival order (Algorithm 1's backward task: one
 * optimizer step per received gradient, nobody waits for the others'
 * gradients, no aggregation). Every worker queues exactly one entry per
 * step (empty when it had no minibatch), between the dense barriers A and
 * B, so all of step s's entries come before any of step s+1's and after
 * every read of step s, so the queue is in step order
 * and the steps fully applied are done = entries applied / N.
 *
 * What `staleness` (tau) bounds: begin_step(s) waits until every embedding
 * update of steps < s - tau has been applied (done >= s - tau). So the rows
 * that step s reads miss the updates of at most tau earlier steps (the
 * paper's t - D(t) <= tau counted in steps of N minibatches): a worker is at
 * most tau steps ahead of the oldest un-applied embedding update. tau = 0:
 * step s reads every update of steps < s — fully synchronous (each
 * worker's row gradient still gets its own optimizer step, as in Algorithm
 * 1, rather than one step on the sum). The measured read staleness s - done
 * goes to the stats' histogram. The window does not cross batches:
 * end_batch waits until the worker's updates are all applied, because the
 * row pointers are valid only during the batch (TTL eviction follows).
 *
 * Row reads and writes race on purpose (the embedding worker writes while
 * the NN workers read: ST_SYNC_RELAXED_READS; writes are relaxed atomics).
 * Only the embedding worker writes rows, so no update is lost.
 *
 * Bytes: per worker and step, its dense gradient and its rows (key +
 * floats), as allreduce.
 *
 * Threads: N lockstep workers + "st-hybrid-0" (started in create, stopped
 * in destroy). One lock, `mu` (queue, done count, condition variables),
 * never held while applying an update or at a barrier; no other lock.
 */
#include "ops/sync/sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/owner.h"
#include "runtime/err.h"
#include "runtime/trace.h"

typedef struct {
	uint32_t n, cap;           /* rows queued, capacity */
	float **row;               /* [cap] shared rows */
	uint16_t *dim;             /* [cap] */
	float *grad;               /* [cap * gstride] */
	int gstride;
} slot_t;

typedef struct {
	slot_t *slot;              /* [tau + 1] */
	uint64_t steps;            /* apply calls (worker only) */
	float *trow;
} hworker_t;

typedef struct {
	int w;
	uint32_t slot;
	uint64_t step;
} entry_t;

typedef struct {
	st_sync_env_t env;
	int N;
	uint64_t tau;
	pthread_barrier_t bar;
	st_sync_dense_t dense;     /* t: dense steps (worker 0 advances) */
	int *owner;                /* [ntensors] */
	st_sync_grads_t **g;
	hworker_t *w;
	/* queue, under mu */
	pthread_mutex_t mu;
	pthread_cond_t more, done_cv;
	entry_t *q;                /* ring [N * (tau + 1)] */
	uint32_t qcap, qhead, qlen;
	uint64_t applied;          /* entries applied */
	uint64_t done;             /* steps fully applied = applied / N */
	int stop;
	pthread_t th;
	int started;
	st_sync_stats_t st;        /* relaxed atomics */
} hybrid_t;

/* Test hooks, set before create: `apply_hook` runs on the embedding worker
 * before each entry is applied (worker, step); `block_hook` runs on a
 * worker about to wait in begin_step (worker, step), with `mu` held. */
void (*st__sync_hybrid_apply_hook)(void *arg, int w, uint64_t step);
void (*st__sync_hybrid_block_hook)(void *arg, int w, uint64_t step);
void *st__sync_hybrid_hook_arg;

static void *embedding_main(void *arg)
{
	hybrid_t *s = arg;
	pthread_setname_np(pthread_self(), "st-hybrid-0");
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->qlen && !s->stop)
			pthread_cond_wait(&s->more, &s->mu);
		if (!s->qlen)
			break;
		entry_t e = s->q[s->qhead];
		pthread_mutex_unlock(&s->mu);
		if (st__sync_hybrid_apply_hook)
			st__sync_hybrid_apply_hook(st__sync_hybrid_hook_arg, e.w, e.step);
		slot_t *sl = &s->w[e.w].slot[e.slot];
		uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
		for (uint32_t k = 0; k < sl->n; k++)
			st_sync_row_update_relaxed(&s->env, sl->row[k],
						   sl->grad + (size_t)k * sl->gstride, sl->dim[k],
						   e.step + 1, s->w[0].trow);
		/* One span per worker step applied (arg step). */
		if (t0)
			st_trace_span("step", "apply step", NULL, t0, st_trace_now(),
				      (int64_t)e.step);
		pthread_mutex_lock(&s->mu);
		s->qhead = (s->qhead + 1) % s->qcap;
		s->qlen--;
		s->applied++;
		uint64_t done = s->applied / (uint64_t)s->N;
		if (done != s->done) {
			s->done = done;
			pthread_cond_broadcast(&s->done_cv);
		}
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void hy_destroy(void *self)
{
	hybrid_t *s = self;
	if (!s)
		return;
	if (s->started) {
		pthread_mutex_lock(&s->mu);
		s->stop = 1;
		pthread_cond_signal(&s->more);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->th, NULL);
	}
	for (int i = 0; s->w && i < s->N; i++) {
		for (uint64_t k = 0; s->w[i].slot && k <= s->tau; k++) {
			free(s->w[i].slot[k].row);
			free(s->w[i].slot[k].dim);
			free(s->w[i].slot[k].grad);
		}
		free(s->w[i].slot);
		free(s->w[i].trow);
	}
	pthread_barrier_destroy(&s->bar);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->more);
	pthread_cond_destroy(&s->done_cv);
	free(s->w);
	free(s->q);
	free(s->g);
	free(s->owner);
	st_sync_dense_fini(&s->dense);
	free(s);
}

static int hy_create(void **self, const st_sync_env_t *env)
{
	double tau = st_sync_cfg_num(env->cfg, "staleness", -1);
	if (!(tau >= 0) || tau > 1e6 || tau != (double)(uint64_t)tau) {
		st_error("sync hybrid: staleness must be an integer >= 0 (got %g): the "
			 "steps a worker may run ahead of the oldest un-applied embedding "
			 "update", tau);
		return ST_EJOB;
	}
	hybrid_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->tau = (uint64_t)tau;
	pthread_barrier_init(&s->bar, NULL, (unsigned)s->N);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->more, NULL);
	pthread_cond_init(&s->done_cv, NULL);
	int rd = st_model_max_row_dim(env->model);
	size_t rowf = (size_t)rd + st_optim_state_floats(env->sparse_opt, (size_t)rd) + 1;
	s->qcap = (uint32_t)((uint64_t)s->N * (s->tau + 1));
	s->q = calloc(s->qcap, sizeof *s->q);
	s->owner = st_algo_owner_tensors(env->model, env->n_workers);
	s->g = calloc((size_t)s->N, sizeof *s->g);
	s->w = calloc((size_t)s->N, sizeof *s->w);
	int ok = st_sync_dense_init(&s->dense, env) == ST_OK && s->q && s->owner && s->g &&
		 s->w;
	for (int i = 0; ok && i < s->N; i++) {
		s->w[i].slot = calloc(s->tau + 1, sizeof(slot_t));
		s->w[i].trow = malloc(sizeof(float) * rowf);
		ok = s->w[i].slot && s->w[i].trow;
	}
	if (!ok) {
		hy_destroy(s);
		return ST_ENOMEM;
	}
	if (pthread_create(&s->th, NULL, embedding_main, s) != 0)
		st_die("sync hybrid: cannot start the embedding worker thread");
	s->started = 1;
	*self = s;
	return ST_OK;
}

static int hy_begin_batch(void *self, uint32_t n_uniq)
{
	(void)self;
	(void)n_uniq;
	return ST_OK;
}

static const float *hy_begin_step(void *self, int w, uint64_t step)
{
	hybrid_t *s = self;
	const uint64_t st = s->w[w].steps;   /* this step's index */
	(void)step;
	pthread_mutex_lock(&s->mu);
	while (s->done + s->tau < st) {
		if (st__sync_hybrid_block_hook)
			st__sync_hybrid_block_hook(st__sync_hybrid_hook_arg, w, st);
		pthread_cond_wait(&s->done_cv, &s->mu);
	}
	uint64_t lag = st - (s->done < st ? s->done : st);
	pthread_mutex_unlock(&s->mu);
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(lag)], 1);
	return s->env.params;
}

/* Copies worker w's row gradients into its slot for this step. */
static int stash(hybrid_t *s, int w, const st_sync_grads_t *g, uint32_t *slot_out)
{
	hworker_t *a = &s->w[w];
	uint32_t k = (uint32_t)(a->steps % (s->tau + 1));
	slot_t *sl = &a->slot[k];
	*slot_out = k;
	sl->n = 0;
	if (!g->n_examples)
		return ST_OK;
	if (g->n_rows > sl->cap || g->gstride != sl->gstride) {
		uint32_t cap = g->n_rows > sl->cap ? g->n_rows + g->n_rows / 2 : sl->cap;
		free(sl->row);
		free(sl->dim);
		free(sl->grad);
		sl->row = malloc(sizeof(float *) * cap);
		sl->dim = malloc(sizeof(uint16_t) * cap);
		sl->grad = malloc(sizeof(float) * cap * (size_t)g->gstride);
		sl->gstride = g->gstride;
		sl->cap = cap;
		if (!sl->row || !sl->dim || !sl->grad) {
			sl->cap = 0;
			return ST_ENOMEM;
		}
	}
	for (uint32_t q = 0; q < g->n_rows; q++) {
		uint32_t u = g->uidx[q];
		if (!g->rows[u])
			continue;
		sl->row[sl->n] = g->rows[u];
		sl->dim[sl->n] = g->row_dim[u];
		memcpy(sl->grad + (size_t)sl->n * sl->gstride, g->grad + (size_t)u * g->gstride,
		       sizeof(float) * g->row_dim[u]);
		sl->n++;
	}
	return ST_OK;
}

static int hy_apply(void *self, int w, st_sync_grads_t *g)
{
	hybrid_t *s = self;
	const st_sync_env_t *env = &s->env;
	hworker_t *a = &s->w[w];
	uint32_t slot;
	int rc = stash(s, w, g, &slot);   /* on failure an empty entry is queued */
	s->g[w] = g;
	pthread_barrier_wait(&s->bar);                          /* A */
	/* Queued only after A: every worker has read its rows for step s, so
	 * no read of step s sees an update of step s (tau = 0 is exactly
	 * synchronous). */
	pthread_mutex_lock(&s->mu);
	s->q[(s->qhead + s->qlen) % s->qcap] = (entry_t){ .w = w, .slot = slot,
							  .step = a->steps };
	s->qlen++;
	pthread_cond_signal(&s->more);
	pthread_mutex_unlock(&s->mu);
	a->steps++;
	const uint64_t t = *s->dense.t + 1;
	st_sync_reduce_dense(env, s->g, s->owner, w, s->dense.state, t);
	if (g->n_examples) {
		st_sync_stat_add(&s->st.bytes, st_sync_grad_bytes(env, g));
		st_sync_stat_add(&s->st.updates, 1);
	}
	pthread_barrier_wait(&s->bar);                          /* B */
	if (w == 0) {
		*s->dense.t = t;
		st_sync_stat_add(&s->st.steps, 1);
	}
	return rc;
}

static void hy_end_batch(void *self, int w)
{
	hybrid_t *s = self;
	const uint64_t st = s->w[w].steps;
	pthread_mutex_lock(&s->mu);
	while (s->done < st)
		pthread_cond_wait(&s->done_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

static void hy_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((hybrid_t *)self)->st, out);
}

const st_sync_ops_t st_sync_hybrid_ops = {
	.name = "hybrid",
	.schedule = ST_SYNC_LOCKSTEP,
	.flags = ST_SYNC_RELAXED_READS,
	.create = hy_create,
	.destroy = hy_destroy,
	.begin_batch = hy_begin_batch,
	.begin_step = hy_begin_step,
	.apply = hy_apply,
	.end_batch = hy_end_batch,
	.report = hy_report,
};
