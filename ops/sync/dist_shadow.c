/*
 * dist_shadow.c — ShadowSync across processes ("shadow" in a multi-process
 * job; shadowsync-background-sync.md §3.3): each rank's workers train its
 * dense replica Hogwild and never wait; a background thread per rank
 * ("st-shadow-net") syncs the replicas across the ranks. Rows go to their
 * owners and are applied on arrival, as under async. dist_policies.c has
 * the overview of the multi-process policies.
 *
 *   ma  (Algorithm 3): each round allreduces the replica across ranks and
 *       blends it, w <- (1 - alpha) w + alpha mean(w). The rounds are
 *       collectives, so the threads carry a "still training" flag in the
 *       same allreduce and go on until every rank is done; the last round
 *       sets every replica to the mean (the paper's output average).
 */
#include "ops/sync/dist_sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/dist/dist.h"
#include "runtime/err.h"
#include "runtime/net/net.h"

typedef struct {
	st_sync_env_t env;
	int N;
	st_sync_dense_t dense;         /* the replica's optimizer state (the trainer's) */
	uint64_t version;              /* replica updates (relaxed atomic) */
	st_sync_hogwild_t *hw;         /* [N] */
	rowsend_t send;                /* row pushes */
	float alpha;
	float *buf;                    /* [nparams + 1]: the replica, then the flag */
	pthread_t th;
	int started;
	int done;                      /* this rank trained its last batch (atomic) */
	int err;                       /* the shadow thread's error (atomic) */
	uint64_t rounds;
	st_sync_stats_t st;
} dsh_t;

static void *shadow_main(void *arg)
{
	dsh_t *s = arg;
	pthread_setname_np(pthread_self(), "st-shadow-net");
	const st_sync_env_t *env = &s->env;
	st_net_t *net = st_dist_net(env->dist);
	const size_t np = env->nparams;
	const float inv = 1.0f / (float)st_net_size(net), a = s->alpha;
	uint64_t seen = 0;
	for (;;) {
		/* At most one round per replica update while training; a rank
		 * that is done keeps taking part, a little slower. */
		int done = __atomic_load_n(&s->done, __ATOMIC_ACQUIRE);
		uint64_t v = __atomic_load_n(&s->version, __ATOMIC_RELAXED);
		if (!done && v == seen) {
			struct timespec ts = { 0, 200 * 1000 };
			nanosleep(&ts, NULL);
			continue;
		}
		if (done && v == seen) {
			struct timespec ts = { 0, 2 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
		uint64_t gap = v - seen;
		seen = v;
		st_sync_load_relaxed(s->buf, env->params, np);
		s->buf[np] = done ? 0.0f : 1.0f;
		int rc = st_net_allreduce_f32(net, s->buf, np + 1);
		if (rc < 0) {
			__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
			return NULL;
		}
		const int last = s->buf[np] == 0.0f;   /* nobody trains any more */
		for (size_t j = 0; j < np; j++) {
			float mean = s->buf[j] * inv, w;
			st_sync_load_relaxed(&w, &env->params[j], 1);
			w = last ? mean : (1.0f - a) * w + a * mean;
			st_sync_store_relaxed(&env->params[j], &w, 1);
		}
		s->rounds++;
		st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(gap)], 1);
		st_sync_stat_add(&s->st.bytes, 2 * sizeof(float) * (uint64_t)np);
		if (last)
			return NULL;
	}
}

static void dsh_destroy(void *self)
{
	dsh_t *s = self;
	if (!s)
		return;
	if (s->started) {
		/* A failed job: the thread ends when its collective fails
		 * (the other ranks stop too) or when every rank is done. */
		__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
		pthread_join(s->th, NULL);
	}
	for (int w = 0; s->hw && w < s->N; w++)
		st_sync_hogwild_fini(&s->hw[w]);
	free(s->hw);
	free(s->buf);
	st_sync_dense_fini(&s->dense);
	st__rowsend_fini(&s->send);
	free(s);
}

static int dsh_create(void **self, const st_sync_env_t *env)
{
	if (!env->dist)
		return ST_EINVAL;
	const char *algo = NULL;
	for (int i = 0; i < env->cfg->n_params; i++)
		if (!strcmp(env->cfg->keys[i], "algo"))
			algo = env->cfg->strs[i];
	if (algo && strcmp(algo, "ma") != 0) {
		st_error("shadow{algo = \"%s\"} does not run across processes yet: use algo = "
			 "\"ma\" (model averaging)", algo);
		return ST_EINVAL;
	}
	if (st_sync_cfg_num(env->cfg, "every", 0) != 0) {
		st_error("shadow{every} (foreground syncs) does not run across processes yet");
		return ST_EINVAL;
	}
	dsh_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->alpha = (float)st_sync_cfg_num(env->cfg, "alpha", 0.5);
	st__rowsend_init(&s->send);
	s->hw = calloc((size_t)s->N, sizeof *s->hw);
	s->buf = malloc(sizeof(float) * (env->nparams + 1));
	int rc = s->hw && s->buf ? st_sync_dense_init(&s->dense, env) : ST_ENOMEM;
	for (int w = 0; rc >= 0 && w < s->N; w++)
		rc = st_sync_hogwild_init(&s->hw[w], env);
	if (rc >= 0 && pthread_create(&s->th, NULL, shadow_main, s) != 0)
		rc = ST_ENOMEM;
	if (rc < 0) {
		dsh_destroy(s);
		return rc;
	}
	s->started = 1;
	*self = s;
	return ST_OK;
}

static const float *dsh_begin_step(void *self, int w, uint64_t step)
{
	dsh_t *s = self;
	return st_sync_hogwild_read(&s->hw[w], &s->env, &s->version);
}

static int dsh_apply(void *self, int w, st_sync_grads_t *g)
{
	dsh_t *s = self;
	int rc = __atomic_load_n(&s->err, __ATOMIC_RELAXED);
	if (rc < 0 || !g->n_examples)
		return rc;
	/* The replica's step (Hogwild, dense tensors only: the batch's rows
	 * are private copies without optimizer state), then the rows to
	 * their owners. */
	st_sync_grads_t dense_only = *g;
	dense_only.n_rows = 0;
	st_sync_apply_hogwild(&s->env, &s->dense, &s->version, &s->hw[w], &dense_only, &s->st);
	uint64_t bytes = 0;
	rc = st__rowsend_push(&s->env, &s->send, g, *s->dense.t, NULL, &bytes);
	st_sync_stat_add(&s->st.bytes, bytes);
	return rc;
}

static int dsh_finish(void *self)
{
	dsh_t *s = self;
	if (!s->started)
		return ST_OK;
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	pthread_join(s->th, NULL);
	s->started = 0;
	st_info("shadow: %llu model-averaging rounds across the ranks",
		(unsigned long long)s->rounds);
	return s->err;
}

static void dsh_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((dsh_t *)self)->st, out);
}

const st_sync_ops_t st_sync_dist_shadow_ops = {
	.name = "shadow",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_RELAXED_READS,
	.create = dsh_create,
	.destroy = dsh_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dsh_begin_step,
	.apply = dsh_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dsh_report,
	.finish = dsh_finish,
};

