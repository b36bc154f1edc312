/*
 * dist_buffered.c — gba and bsp across processes (dist_sync.h): gradient
 * buffers at the parameter servers (gba-global-batch-aggregation.txt §4.1,
 * Appendix B; the algorithm is ops/algo/gba.h, its ranks transport
 * ops/dist/psbuf.c). Every worker gradient is one contribution to rank 0's
 * dense buffer and to every owner's buffer of rows; each buffer applies a
 * global step per M contributions. A worker pulls its rows right before it
 * trains (ST_SYNC_FRESH_ROWS) and trains on the dense parameters and token
 * rank 0 answered its previous contribution with ("pull the parameters and
 * fetch a token from PS", Algorithm 1 line 16).
 *
 * gba and bsp differ in their create function only: gba's buffers keep
 * per-ID tags and the tolerance (M from global_batch), bsp's neither
 * (M = b).
 *
 * Threads: hooks on the N local worker threads; each worker its own reply
 * channel, parameter copy and token; row contributions take turns
 * (rowsend_t).
 */
#include "ops/sync/dist_sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/gba.h"
#include "ops/dist/dist.h"
#include "runtime/err.h"

typedef struct {
	st_sync_env_t env;
	int N;
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

/* The buffers of bsp{b}: M = b, no tolerance, no tags (as bsp.c). ST_OK
 * or ST_EJOB (logged). */
static int bsp_params(const st_sync_env_t *env, st_dist_buf_t *b)
{
	double v = st_sync_cfg_num(env->cfg, "b", -1);
	if (!(v >= 1) || v > ST_ALGO_GBA_MAX_M) {
		st_error("sync policy bsp: parameter b (gradients per update, 1 .. %u) is "
			 "missing or out of range", ST_ALGO_GBA_MAX_M);
		return ST_EJOB;
	}
	*b = (st_dist_buf_t){ .M = (uint32_t)v, .tol = ST_ALGO_GBA_NO_TOL, .perid = 0 };
	return ST_OK;
}

/* The buffers of gba{global_batch, tolerance}: M = global_batch /
 * minibatch over every worker of every rank, as in one process; tags.
 * ST_OK or ST_EJOB (logged). */
static int gba_params(const st_sync_env_t *env, st_dist_buf_t *b)
{
	const double gb = st_sync_cfg_num(env->cfg, "global_batch", -1);
	const double tol = st_sync_cfg_num(env->cfg, "tolerance", 1);
	const uint64_t local = env->minibatch;
	if (!(gb >= 1) || gb != (double)(uint64_t)gb) {
		st_error("sync gba: global_batch (examples per global step, an integer >= 1) "
			 "is required, e.g. st.sync.gba{global_batch = 4 * minibatch}");
		return ST_EJOB;
	}
	if (!(tol >= 0) || tol != (double)(uint32_t)tol || tol >= ST_ALGO_GBA_NO_TOL) {
		st_error("sync gba: tolerance must be an integer >= 0 (got %g)", tol);
		return ST_EJOB;
	}
	if (!local || (uint64_t)gb % local || (uint64_t)gb / local > ST_ALGO_GBA_MAX_M) {
		st_error("sync gba: global_batch = %.0f must be a multiple of the minibatch (%llu "
			 "examples per worker step), at most %u times it", gb,
			 (unsigned long long)local, ST_ALGO_GBA_MAX_M);
		return ST_EJOB;
	}
	*b = (st_dist_buf_t){ .M = (uint32_t)((uint64_t)gb / local), .tol = (uint32_t)tol,
			      .perid = 1 };
	return ST_OK;
}

/* The policy with buffers b (label: the policy, for the log). */
static int dbuf_create_with(void **self, const st_sync_env_t *env, const st_dist_buf_t *b,
			    const char *label)
{
	if (!env->dist)
		return ST_EINVAL;
	dbuf_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->b = *b;
	st__rowsend_init(&s->send);
	s->params = st__sync_worker_copies(env);
	s->token = calloc((size_t)s->N, sizeof(uint64_t));
	s->err = calloc((size_t)s->N, sizeof(int));
	if (!s->params || !s->token || !s->err) {
		dbuf_destroy(s);
		return ST_ENOMEM;
	}
	if (st_dist_rank(env->dist) == 0)
		st_info("sync %s across %d processes: every %u worker gradients make one global "
			"step%s", label, st_dist_size(env->dist), s->b.M,
			s->b.perid ? " (GBA token control, Appendix B)" : "");
	*self = s;
	return ST_OK;
}

static int dgba_create(void **self, const st_sync_env_t *env)
{
	st_dist_buf_t b;
	int rc = gba_params(env, &b);
	return rc < 0 ? rc : dbuf_create_with(self, env, &b, "gba");
}

static int dbsp_create(void **self, const st_sync_env_t *env)
{
	st_dist_buf_t b;
	int rc = bsp_params(env, &b);
	return rc < 0 ? rc : dbuf_create_with(self, env, &b, "bsp");
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

