/*
 * shadow.c — ShadowSync ("shadow{algo, alpha, eta, every}"): Zheng et al.,
 * "ShadowSync: Performing Synchronization in the Background for Highly
 * Scalable Distributed Training" (shadowsync-background-sync.md), §3.3,
 * Algorithms 1-4.
 *
 * Mapping (Algorithm 1): worker w is trainer i = w with one Hogwild worker
 * thread; it trains its own dense replica w^(i) (MLP and interaction
 * layers) with its own dense optimizer state, and the embedding rows h are
 * shared by all workers and updated Hogwild (one copy, as on the paper's
 * embedding PSs; relaxed atomics, as async.c). One background thread,
 * "st-shadow-0", plays the shadow threads of all trainers: each round it
 * syncs every replica:
 *   easgd (Algorithm 2), per replica i in turn, with the central copy w^PS
 *         (the sync PS):  w^PS <- (1-a) w^PS + a w^(i);
 *                         w^(i) <- (1-a) w^(i) + a w^PS   (the new w^PS)
 *   ma    (Algorithm 3):  w^global <- AllReduce(w^(i)) / n (the mean of the
 *         replicas); then every w^(i) <- (1-a) w^(i) + a w^global
 *   bmuf  (Algorithm 4):  w^copy <- mean of the replicas;
 *         w^global_i <- w^global_i + eta (w^copy - w^global_i) (plain block
 *         step, no momentum: line 8's momentum is optional);
 *         w^(i) <- (1-a) w^(i) + a w^global_i
 * with a = alpha (default 0.5) and eta ("eta", default 1). The updates are
 * the core ops/algo/blend.h, which the ranks transport
 * (ops/sync/dist_shadow.c: one replica per rank) runs too; this file is
 * the threads transport (one replica per worker, the mean read from the
 * other replicas instead of allreduced).
 *
 * Never blocking a worker: workers never wait on the shadow thread. They
 * read their replica into a private snapshot with relaxed atomic loads
 * (begin_step) and write it tensor by tensor with relaxed loads/stores
 * (apply); the shadow thread reads and blends replicas element by element
 * with relaxed loads/stores too. The two race on purpose, as in the paper
 * (worker threads keep training while the shadow thread syncs): a blend
 * that lands between a worker's load and store of a tensor is lost, as is a
 * worker update that lands between the shadow thread's load and store of an
 * element — no torn values, no data race in the C11 sense (TSan-clean).
 * After each step a worker posts a semaphore (never blocks); the shadow
 * thread waits on it before a round, so it runs at most one round per
 * worker step and sleeps while nobody trains (one machine has no network
 * to pace it).
 *
 * Fixed-rate variant ("every = n", n >= 1): no thread; worker i syncs its
 * own replica in the foreground after every n of its steps, with the same
 * update rule (for ma/bmuf the "AllReduce" reads the other replicas as
 * they are at that moment). The central copies are then shared by the
 * workers and guarded by `mu`; the shadow thread never takes it.
 *
 * Sync gap (§4.1: worker steps between two syncs of a replica): at every
 * sync of replica i the gap since its previous sync is recorded in the
 * stats' staleness histogram (so "sync_staleness_mean" is the mean sync
 * gap for this policy) and exactly through st__sync_shadow_gap.
 *
 * At each batch end the last worker to finish writes the mean of the
 * replicas into env->params (what eval, dumps and checkpoints read; the
 * paper's "output the average of w^(i)").
 *
 * Bytes: per step a worker's rows (key + floats) to the embedding PS; per
 * sync of a replica, easgd sends w^(i) to the sync PS and w^PS back
 * (2 nparams floats), ma/bmuf a ring allreduce share 2 (N-1)/N nparams.
 *
 * Threads: N workers (FREE schedule) + "st-shadow-0" (started in create
 * when every = 0, stopped in destroy). One lock, `mu`, fixed-rate mode
 * only, never held while taking another.
 */
#include "ops/sync/sync.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/blend.h"
#include "runtime/err.h"
#include "runtime/trace.h"

enum { EASGD = ST_SHADOW_EASGD, MA = ST_SHADOW_MA, BMUF = ST_SHADOW_BMUF };

typedef struct {
	float *rep;           /* [nparams] replica w^(i): relaxed atomics */
	float *state;         /* dense optimizer state (worker-private) */
	float *snap;          /* [nparams] begin_step copy */
	float *tmp;           /* [nparams] apply scratch */
	float *trow;          /* one row + state */
	float *glob;          /* bmuf: w^global_i */
	uint64_t steps;       /* worker steps (atomic) */
	uint64_t last;        /* steps at the last sync (syncer only) */
	uint64_t t;           /* optimizer steps (worker only) */
} sworker_t;

typedef struct {
	st_sync_env_t env;
	int N, algo;
	float alpha, eta;
	uint64_t every;
	sworker_t *w;
	float **reps;         /* [N] w[i].rep, for the mean */
	float *ps;            /* easgd w^PS */
	float *avg;           /* ma/bmuf mean scratch */
	pthread_mutex_t mu;   /* fixed-rate only */
	sem_t kick;
	pthread_t th;
	int started, stop;    /* stop: atomic */
	uint64_t tsparse;     /* sparse step numbers (atomic) */
	int finished;         /* workers past end_batch this batch (atomic) */
	uint64_t syncs, gap_sum, rounds;   /* atomics */
	st_sync_stats_t st;   /* relaxed atomics */
} shadow_t;

/* Test hook: called by the shadow thread at the start of every round with
 * the round's index (rounds done so far). Set before create. */
void (*st__sync_shadow_hook)(void *arg, uint64_t round);
void *st__sync_shadow_hook_arg;

/* A numeric parameter of the job's policy, or def (lang/job.c has the
 * same, but ops does not link the job language). */
static inline float ld(const float *p)
{
	float v;
	__atomic_load(p, &v, __ATOMIC_RELAXED);
	return v;
}

static inline void sto(float *p, float v)
{
	__atomic_store(p, &v, __ATOMIC_RELAXED);
}

/* Records one sync of replica i: gap and bytes. */
static void note_sync(shadow_t *s, int i)
{
	sworker_t *a = &s->w[i];
	uint64_t now = __atomic_load_n(&a->steps, __ATOMIC_RELAXED);
	uint64_t gap = now - a->last;
	a->last = now;
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(gap)], 1);
	st_sync_stat_add(&s->gap_sum, gap);
	st_sync_stat_add(&s->syncs, 1);
	uint64_t n = s->env.nparams;
	st_sync_stat_add(&s->st.bytes, s->algo == EASGD ? 2 * sizeof(float) * n
			       : (uint64_t)(2 * (s->N - 1)) * sizeof(float) * n /
				 (uint64_t)s->N);
}

/* Algorithm 2 for replica i: the PS takes the replica in (line 4), the
 * replica moves toward the new w^PS (line 5). */
static void easgd(shadow_t *s, int i)
{
	st_algo_blend_ps(s->ps, s->w[i].rep, s->env.nparams, s->alpha);
	st_algo_blend_toward(s->w[i].rep, s->ps, 1.0f, s->env.nparams, s->alpha);
	note_sync(s, i);
}

/* w^global (ma) / w^copy (bmuf): the mean of the replicas as they are. */
static void mean(shadow_t *s)
{
	st_algo_blend_mean(s->avg, s->reps, s->N, s->env.nparams);
}

/* The blend of Algorithms 3-4 (line 7 / lines 7-10) for replica i. */
static void blend(shadow_t *s, int i)
{
	const float *c = s->avg;
	if (s->algo == BMUF) {
		st_algo_blend_bmuf_step(s->w[i].glob, s->avg, 1.0f, s->env.nparams, s->eta);
		c = s->w[i].glob;
	}
	st_algo_blend_toward(s->w[i].rep, c, 1.0f, s->env.nparams, s->alpha);
	note_sync(s, i);
}

static void round_all(shadow_t *s)
{
	if (s->algo == EASGD) {
		for (int i = 0; i < s->N; i++)
			easgd(s, i);
		return;
	}
	mean(s);
	for (int i = 0; i < s->N; i++)
		blend(s, i);
}

static void *shadow_main(void *arg)
{
	shadow_t *s = arg;
	pthread_setname_np(pthread_self(), "st-shadow-0");
	for (;;) {
		while (sem_wait(&s->kick) != 0 && errno == EINTR)
			;
		if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE))
			break;
		while (sem_trywait(&s->kick) == 0)
			;
		if (st__sync_shadow_hook)
			st__sync_shadow_hook(st__sync_shadow_hook_arg,
					     __atomic_load_n(&s->rounds, __ATOMIC_RELAXED));
		if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE))
			break;
		uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
		round_all(s);
		if (t0)
			st_trace_span("round", "sync round", NULL, t0, st_trace_now(),
				      (int64_t)__atomic_load_n(&s->rounds, __ATOMIC_RELAXED));
		st_sync_stat_add(&s->rounds, 1);
	}
	return NULL;
}

static void sh_destroy(void *self)
{
	shadow_t *s = self;
	if (!s)
		return;
	if (s->started) {
		__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
		sem_post(&s->kick);
		pthread_join(s->th, NULL);
	}
	for (int i = 0; s->w && i < s->N; i++) {
		sworker_t *a = &s->w[i];
		free(a->rep);
		free(a->state);
		free(a->snap);
		free(a->tmp);
		free(a->trow);
		free(a->glob);
	}
	sem_destroy(&s->kick);
	pthread_mutex_destroy(&s->mu);
	free(s->w);
	free(s->reps);
	free(s->ps);
	free(s->avg);
	free(s);
}

int st_sync_shadow_cfg(const st_sync_cfg_t *cfg, st_sync_shadow_cfg_t *out)
{
	const char *algo = st_sync_cfg_str(cfg, "algo");
	double alpha = st_sync_cfg_num(cfg, "alpha", 0.5);
	double eta = st_sync_cfg_num(cfg, "eta", 1.0);
	double every = st_sync_cfg_num(cfg, "every", 0);
	int kind = !algo || !strcmp(algo, "easgd") ? EASGD
		 : !strcmp(algo, "ma") ? MA : !strcmp(algo, "bmuf") ? BMUF : -1;
	if (kind < 0 || !(alpha > 0 && alpha <= 1) || !(eta > 0) || !(every >= 0) ||
	    every != (double)(uint64_t)every) {
		st_error("sync shadow: need algo = \"easgd\" | \"ma\" | \"bmuf\" (got \"%s\"), "
			 "0 < alpha <= 1 (got %g), eta > 0 (got %g), every = an integer >= 0 "
			 "(got %g; 0 = background sync)", algo ? algo : "", alpha, eta, every);
		return ST_EJOB;
	}
	*out = (st_sync_shadow_cfg_t){ .algo = kind, .alpha = alpha, .eta = eta,
				       .every = (uint64_t)every };
	return ST_OK;
}

static int sh_create(void **self, const st_sync_env_t *env)
{
	st_sync_shadow_cfg_t c;
	if (st_sync_shadow_cfg(env->cfg, &c) < 0)
		return ST_EJOB;
	shadow_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->algo = c.algo;
	s->alpha = (float)c.alpha;
	s->eta = (float)c.eta;
	s->every = c.every;
	pthread_mutex_init(&s->mu, NULL);
	sem_init(&s->kick, 0, 0);
	size_t n = env->nparams ? env->nparams : 1;
	size_t nst = st_sync_dense_state_floats(env);
	int rd = st_model_max_row_dim(env->model);
	size_t rowf = (size_t)rd + st_optim_state_floats(env->sparse_opt, (size_t)rd) + 1;
	s->w = calloc((size_t)s->N, sizeof *s->w);
	s->reps = calloc((size_t)s->N, sizeof *s->reps);
	s->ps = c.algo == EASGD ? malloc(sizeof(float) * n) : NULL;
	s->avg = c.algo != EASGD ? malloc(sizeof(float) * n) : NULL;
	int ok = s->w && s->reps && (s->ps || s->avg);
	for (int i = 0; ok && i < s->N; i++) {
		sworker_t *a = &s->w[i];
		a->rep = malloc(sizeof(float) * n);
		a->state = malloc(sizeof(float) * (nst ? nst : 1));
		a->snap = malloc(sizeof(float) * n);
		a->tmp = malloc(sizeof(float) * n);
		a->trow = malloc(sizeof(float) * rowf);
		a->glob = c.algo == BMUF ? malloc(sizeof(float) * n) : NULL;
		ok = a->rep && a->state && a->snap && a->tmp && a->trow &&
		     (c.algo != BMUF || a->glob);
		if (!ok)
			break;
		s->reps[i] = a->rep;
		/* Algorithm 1 line 5 (and 4 line 2): every copy starts at w_0. */
		memcpy(a->rep, env->params, sizeof(float) * env->nparams);
		if (a->glob)
			memcpy(a->glob, env->params, sizeof(float) * env->nparams);
		if (env->dense_state)   /* a policy switch keeps the moments */
			memcpy(a->state, env->dense_state, sizeof(float) * nst);
		else
			st_sync_dense_state_init(env, a->state);
		a->t = env->dense_t ? *env->dense_t : 0;
	}
	if (!ok) {
		sh_destroy(s);
		return ST_ENOMEM;
	}
	if (s->ps)   /* Algorithm 1 line 3 */
		memcpy(s->ps, env->params, sizeof(float) * env->nparams);
	if (!s->every) {
		if (pthread_create(&s->th, NULL, shadow_main, s) != 0)
			st_die("sync shadow: cannot start the shadow thread");
		s->started = 1;
	}
	*self = s;
	return ST_OK;
}

static int sh_begin_batch(void *self, uint32_t n_uniq)
{
	(void)self;
	(void)n_uniq;
	return ST_OK;
}

static const float *sh_begin_step(void *self, int w, uint64_t step)
{
	shadow_t *s = self;
	sworker_t *a = &s->w[w];
	(void)step;
	st_sync_load_relaxed(a->snap, a->rep, s->env.nparams);
	return a->snap;
}

/* Foreground sync of replica i (fixed-rate variant). */
static void sync_one(shadow_t *s, int i)
{
	pthread_mutex_lock(&s->mu);
	if (s->algo == EASGD) {
		easgd(s, i);
	} else {
		mean(s);
		blend(s, i);
	}
	pthread_mutex_unlock(&s->mu);
}

static int sh_apply(void *self, int w, st_sync_grads_t *g)
{
	shadow_t *s = self;
	sworker_t *a = &s->w[w];
	const st_sync_env_t *env = &s->env;
	if (!g->n_examples)
		return ST_OK;
	const uint64_t t = ++a->t;
	/* Tensor by tensor: reload the replica (the shadow thread may have
	 * blended it since begin_step), step, store. */
	for (int i = 0; i < st_model_ntensors(env->model); i++) {
		size_t off = st_model_tensor(env->model, i)->offset, len = st_sync_tensor_floats(env->model, i);
		if (!len)
			continue;
		st_sync_load_relaxed(a->tmp + off, a->rep + off, len);
		st_sync_dense_update_tensor(env, a->tmp, a->state, g->dense, i, t);
		st_sync_store_relaxed(a->rep + off, a->tmp + off, len);
	}
	uint64_t ts = __atomic_add_fetch(&s->tsparse, 1, __ATOMIC_RELAXED);
	uint64_t bytes = 0;
	for (uint32_t k = 0; k < g->n_rows; k++) {
		uint32_t u = g->uidx[k];
		int dim = g->row_dim[u];
		bytes += 8 + sizeof(float) * (uint64_t)dim;
		if (g->rows[u])
			st_sync_row_update_relaxed(env, g->rows[u], g->grad + (size_t)u * g->gstride,
						   dim, ts, a->trow);
	}
	st_sync_stat_add(&s->st.bytes, bytes);
	st_sync_stat_add(&s->st.updates, 1);
	st_sync_stat_add(&s->st.steps, 1);
	uint64_t n = __atomic_add_fetch(&a->steps, 1, __ATOMIC_RELAXED);
	if (s->every) {
		if (n % s->every == 0)
			sync_one(s, w);
	} else {
		sem_post(&s->kick);
	}
	return ST_OK;
}

static void sh_end_batch(void *self, int w)
{
	shadow_t *s = self;
	(void)w;
	if (__atomic_add_fetch(&s->finished, 1, __ATOMIC_ACQ_REL) < s->N)
		return;
	/* The last worker of the batch: the others are done with it. */
	__atomic_store_n(&s->finished, 0, __ATOMIC_RELAXED);
	const float inv = 1.0f / (float)s->N;
	for (size_t j = 0; j < s->env.nparams; j++) {
		float sum = 0.0f;
		for (int i = 0; i < s->N; i++)
			sum += ld(&s->w[i].rep[j]);
		sto(&s->env.params[j], sum * inv);
	}
}

static void sh_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((shadow_t *)self)->st, out);
}

/* Test and bench access. Syncs of replicas so far and the sum of their
 * gaps (mean sync gap = gap_sum / syncs); returns the rounds done. */
uint64_t st__sync_shadow_gap(void *self, uint64_t *syncs, uint64_t *gap_sum);
/* Replica w (relaxed reads into out[nparams]). */
void st__sync_shadow_replica(void *self, int w, float *out);

uint64_t st__sync_shadow_gap(void *self, uint64_t *syncs, uint64_t *gap_sum)
{
	shadow_t *s = self;
	if (syncs)
		*syncs = __atomic_load_n(&s->syncs, __ATOMIC_RELAXED);
	if (gap_sum)
		*gap_sum = __atomic_load_n(&s->gap_sum, __ATOMIC_RELAXED);
	return __atomic_load_n(&s->rounds, __ATOMIC_RELAXED);
}

void st__sync_shadow_replica(void *self, int w, float *out)
{
	shadow_t *s = self;
	st_sync_load_relaxed(out, s->w[w].rep, s->env.nparams);
}

const st_sync_ops_t st_sync_shadow_ops = {
	.name = "shadow",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_RELAXED_READS,
	.create = sh_create,
	.destroy = sh_destroy,
	.begin_batch = sh_begin_batch,
	.begin_step = sh_begin_step,
	.apply = sh_apply,
	.end_batch = sh_end_batch,
	.report = sh_report,
};
