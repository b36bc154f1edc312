/*
 * sync.c — the helpers every policy shares: dense
 * and sparse optimizer steps laid out per tensor / per row, the dense state
 * a policy updates (the trainer's or its own), relaxed-atomic copies and
 * the worker buffers of Hogwild policies, the lockstep reductions in
 * worker order, the gradient buffer of aggregating policies, statistics.
 *
 * Threads: none. Every helper is reentrant; the caller owns the memory it
 * passes (the relaxed variants exist precisely for memory others write).
 */
#include "ops/sync/sync.h"
#include "ops/algo/owner.h"
#include "ops/algo/params.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"

#include <stdio.h>
#include <stdlib.h>

#include <math.h>
#include <string.h>

/* The parameters an ops/algo core steps, as this env holds them. */
static st_algo_params_t env_params(const st_sync_env_t *env)
{
	return (st_algo_params_t){ .model = env->model, .params = env->params,
				   .nparams = env->nparams, .dense_opt = env->dense_opt,
				   .sparse_opt = env->sparse_opt };
}

size_t st_sync_dense_state_offset(const st_sync_env_t *env, int i)
{
	const st_algo_params_t p = env_params(env);
	return st_algo_dense_state_offset(&p, i);
}

size_t st_sync_dense_state_floats(const st_sync_env_t *env)
{
	const st_algo_params_t p = env_params(env);
	return st_algo_dense_state_floats(&p);
}

void st_sync_dense_state_init(const st_sync_env_t *env, float *state)
{
	const st_algo_params_t p = env_params(env);
	st_algo_dense_state_init(&p, state);
}

void st_sync_dense_update_tensor(const st_sync_env_t *env, float *w, float *state,
				 const float *g, int i, uint64_t t)
{
	const st_algo_params_t p = env_params(env);
	st_algo_dense_update_tensor(&p, w, state, g, i, t);
}

void st_sync_dense_update(const st_sync_env_t *env, float *w, float *state,
			  const float *g, uint64_t t)
{
	const st_algo_params_t p = env_params(env);
	st_algo_dense_update(&p, w, state, g, t);
}

void st_sync_row_update(const st_sync_env_t *env, float *row, const float *g, int dim,
			uint64_t t)
{
	const st_algo_params_t p = env_params(env);
	st_algo_row_update(&p, row, g, dim, t);
}

/*
 * Hogwild copies of shared floats. Under ThreadSanitizer every float is a
 * relaxed atomic access, so the deliberate races are visible to the tool as
 * atomics and the tests stay clean. Otherwise the copies are memcpy: on
 * x86-64 and AArch64 an aligned 4-byte float is never torn, also inside a
 * vector copy, and a relaxed-atomic loop cannot be vectorized — it cost a
 * quarter of GBA's training time (perf, 4 workers, docs/policies.md). The
 * copy goes into or out of a private buffer and each value is read once,
 * so no compiler assumption about the shared floats is relied on.
 */
#if defined(__SANITIZE_THREAD__)
#define ST_SYNC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ST_SYNC_TSAN 1
#endif
#endif

void st_sync_load_relaxed(float *dst, const float *src, size_t n)
{
#ifdef ST_SYNC_TSAN
	for (size_t i = 0; i < n; i++)
		__atomic_load(&src[i], &dst[i], __ATOMIC_RELAXED);
#else
	memcpy(dst, src, n * sizeof(float));
	__atomic_signal_fence(__ATOMIC_SEQ_CST);  /* keep the copy where it is */
#endif
}

void st_sync_store_relaxed(float *dst, const float *src, size_t n)
{
#ifdef ST_SYNC_TSAN
	for (size_t i = 0; i < n; i++)
		__atomic_store(&dst[i], (float *)&src[i], __ATOMIC_RELAXED);
#else
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	memcpy(dst, src, n * sizeof(float));
#endif
}

void st_sync_decode_relaxed(int prec, float *dst, const float *src, size_t n)
{
#ifdef ST_SYNC_TSAN
	enum { CH = 64 };
	float raw[CH / 2];
	for (size_t j = 0; j < n; j += CH) {
		size_t m = n - j < CH ? n - j : CH;
		st_sync_load_relaxed(raw, src + j / 2, (m + 1) / 2);
		st_rowfmt_decode(prec, raw, dst + j, m);
	}
#else
	st_rowfmt_decode(prec, src, dst, n);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);  /* keep the copy where it is */
#endif
}

void st_sync_row_update_relaxed(const st_sync_env_t *env, float *row, const float *g,
				int dim, uint64_t t, float *tmp)
{
	const int prec = env->sparse_opt->row_prec;
	const size_t ns = st_optim_state_floats(env->sparse_opt, (size_t)dim);
	if (prec == ST_ROW_FP32) {
		size_t nf = (size_t)dim + ns;
		st_sync_load_relaxed(tmp, row, nf);
		st_optim_update(env->sparse_opt, tmp, tmp + dim, g, (size_t)dim, t);
		st_sync_store_relaxed(row, tmp, nf);
		return;
	}
	/* A compact row (storage.row_precision): its 16-bit words go through a
	 * small buffer with the same relaxed copies, decoded into tmp (the
	 * row's values in fp32, then its state), updated in fp32, rounded back.
	 * A pair of values shares a word, and both are written back together;
	 * a concurrent writer of the other value of the pair may lose its
	 * update, the same loss Hogwild accepts for one value. */
	enum { CH = 64 };
	float raw[CH / 2];
	const size_t ew = st_rowfmt_words(prec, (uint32_t)dim);
	st_sync_decode_relaxed(prec, tmp, row, (size_t)dim);
	st_sync_load_relaxed(tmp + dim, row + ew, ns);
	st_optim_update(env->sparse_opt, tmp, tmp + dim, g, (size_t)dim, t);
	for (size_t j = 0; j < (size_t)dim; j += CH) {
		size_t n = (size_t)dim - j < CH ? (size_t)dim - j : CH;
		if (n & 1)
			raw[n / 2] = 0.0f;   /* the pad half of an odd row's last word */
		st_rowfmt_encode(prec, tmp + j, raw, n);
		st_sync_store_relaxed(row + j / 2, raw, (n + 1) / 2);
	}
	st_sync_store_relaxed(row + ew, tmp + dim, ns);
}

size_t st_sync_tensor_floats(const st_model_t *m, int i)
{
	return st_algo_tensor_floats(m, i);
}

int st_sync_dense_init(st_sync_dense_t *d, const st_sync_env_t *env)
{
	memset(d, 0, sizeof *d);
	if (pthread_mutex_init(&d->mu, NULL) != 0)
		return ST_ENOMEM;
	d->mu_ok = 1;
	d->t = env->dense_t ? env->dense_t : &d->own_t;
	d->state = env->dense_state;
	if (d->state)
		return ST_OK;
	size_t nst = st_sync_dense_state_floats(env);
	d->state = d->own_state = malloc(sizeof(float) * (nst ? nst : 1));
	if (!d->state)
		return ST_ENOMEM;
	st_sync_dense_state_init(env, d->state);
	return ST_OK;
}

void st_sync_dense_fini(st_sync_dense_t *d)
{
	free(d->own_state);
	d->own_state = d->state = NULL;
	if (d->mu_ok)
		pthread_mutex_destroy(&d->mu);
	d->mu_ok = 0;
}

int st_sync_hogwild_init(st_sync_hogwild_t *h, const st_sync_env_t *env)
{
	size_t maxt = 1, maxs = 1;
	for (int i = 0; i < st_model_ntensors(env->model); i++) {
		size_t len = st_sync_tensor_floats(env->model, i);
		size_t sl = st_sync_dense_state_offset(env, i + 1) - st_sync_dense_state_offset(env, i);
		maxt = len > maxt ? len : maxt;
		maxs = sl > maxs ? sl : maxs;
	}
	int rd = st_model_max_row_dim(env->model);
	size_t rowf = (size_t)rd + st_optim_state_floats(env->sparse_opt, (size_t)rd) + 1;
	memset(h, 0, sizeof *h);
	h->snap = malloc(sizeof(float) * (env->nparams ? env->nparams : 1));
	h->tw = malloc(sizeof(float) * maxt);
	h->ts = malloc(sizeof(float) * maxs);
	h->trow = malloc(sizeof(float) * rowf);
	return h->snap && h->tw && h->ts && h->trow ? ST_OK : ST_ENOMEM;
}

void st_sync_hogwild_fini(st_sync_hogwild_t *h)
{
	free(h->snap);
	free(h->tw);
	free(h->ts);
	free(h->trow);
	memset(h, 0, sizeof *h);
}

const float *st_sync_hogwild_read(st_sync_hogwild_t *h, const st_sync_env_t *env,
				  const uint64_t *version)
{
	h->v0 = __atomic_load_n(version, __ATOMIC_RELAXED);
	st_sync_load_relaxed(h->snap, env->params, env->nparams);
	return h->snap;
}

void st_sync_apply_hogwild(const st_sync_env_t *env, st_sync_dense_t *d, uint64_t *version,
			   st_sync_hogwild_t *h, const st_sync_grads_t *g,
			   st_sync_stats_t *st)
{
	uint64_t stale = __atomic_load_n(version, __ATOMIC_RELAXED) - h->v0;
	if (d->mu_ok)
		pthread_mutex_lock(&d->mu);
	uint64_t t = __atomic_add_fetch(d->t, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < st_model_ntensors(env->model); i++) {
		const st_tensor_info_t *ti = st_model_tensor(env->model, i);
		size_t len = st_sync_tensor_floats(env->model, i);
		size_t so = st_sync_dense_state_offset(env, i);
		size_t sl = st_sync_dense_state_offset(env, i + 1) - so;
		if (!len)
			continue;
		st_sync_load_relaxed(h->tw, env->params + ti->offset, len);
		st_sync_load_relaxed(h->ts, d->state + so, sl);
		st_optim_update_rows(env->dense_opt, h->tw, h->ts, g->dense + ti->offset,
				     ti->ndim == 2 ? (size_t)ti->shape[0] : 1,
				     ti->ndim == 2 ? (size_t)ti->shape[1] : (size_t)ti->shape[0], t);
		st_sync_store_relaxed(env->params + ti->offset, h->tw, len);
		st_sync_store_relaxed(d->state + so, h->ts, sl);
	}
	if (d->mu_ok)
		pthread_mutex_unlock(&d->mu);
	for (uint32_t k = 0; k < g->n_rows; k++) {
		uint32_t u = g->uidx[k];
		if (g->rows[u])
			st_sync_row_update_relaxed(env, g->rows[u], g->grad + (size_t)u * g->gstride,
						   g->row_dim[u], t, h->trow);
	}
	__atomic_fetch_add(version, 1, __ATOMIC_RELAXED);
	st_sync_stat_add(&st->updates, 1);
	st_sync_stat_add(&st->steps, 1);
	st_sync_stat_add(&st->staleness[st_sync_hist_bucket(stale)], 1);
	st_sync_stat_add(&st->bytes, st_sync_grad_bytes(env, g));
}

float **st_sync_snaps_create(const st_sync_env_t *env)
{
	size_t np = env->nparams ? env->nparams : 1;
	float **snap = calloc((size_t)env->n_workers, sizeof *snap);
	for (int i = 0; snap && i < env->n_workers; i++) {
		if (!(snap[i] = malloc(sizeof(float) * np))) {
			st_sync_snaps_destroy(snap, env->n_workers);
			return NULL;
		}
	}
	return snap;
}

void st_sync_snaps_destroy(float **snap, int n_workers)
{
	for (int i = 0; snap && i < n_workers; i++)
		free(snap[i]);
	free(snap);
}

uint64_t st_sync_grad_bytes(const st_sync_env_t *env, const st_sync_grads_t *g)
{
	uint64_t bytes = sizeof(float) * (uint64_t)env->nparams;
	for (uint32_t k = 0; k < g->n_rows; k++)
		bytes += 8 + sizeof(float) * (uint64_t)g->row_dim[g->uidx[k]];
	return bytes;
}

void st_sync_reduce_dense(const st_sync_env_t *env, st_sync_grads_t *const *g,
			  const int *owner, int w, float *state, uint64_t t)
{
	float *acc = g[0]->dense;
	for (int i = 0; i < st_model_ntensors(env->model); i++) {
		if (owner[i] != w)
			continue;
		const st_tensor_info_t *ti = st_model_tensor(env->model, i);
		size_t len = st_sync_tensor_floats(env->model, i);
		if (!g[0]->n_examples)   /* worker 0's buffer holds an old step's */
			memset(acc + ti->offset, 0, sizeof(float) * len);
		for (int v = 1; v < env->n_workers; v++) {
			if (!g[v]->n_examples)
				continue;
			const float *gv = g[v]->dense + ti->offset;
			float *a = acc + ti->offset;
			for (size_t j = 0; j < len; j++)
				a[j] += gv[j];
		}
		if (state)
			st_sync_dense_update_tensor(env, env->params, state, acc, i, t);
	}
}

/* Whether worker gradients g touched unique key u this step. */
static inline int touched(const st_sync_grads_t *g, uint32_t u)
{
	return g->n_examples && g->mark[u] == g->stamp;
}

int st_sync_sum_rows(const st_sync_env_t *env, st_sync_grads_t *const *g, int w,
		     int (*fn)(void *arg, const st_sync_grads_t *gv, uint32_t u), void *arg)
{
	const int N = env->n_workers;
	for (int v = 0; v < N; v++) {
		const st_sync_grads_t *gv = g[v];
		if (!gv->n_examples)
			continue;
		for (uint32_t k = 0; k < gv->n_rows; k++) {
			uint32_t u = gv->uidx[k];
			if (st_algo_owner_row(u, N) != w)
				continue;
			int first = 1;
			for (int p = 0; p < v && first; p++)
				first = !touched(g[p], u);
			if (!first)
				continue;
			float *sum = gv->grad + (size_t)u * gv->gstride;
			const int dim = gv->row_dim[u];
			for (int q = v + 1; q < N; q++) {
				if (!touched(g[q], u))
					continue;
				const float *gq = g[q]->grad + (size_t)u * g[q]->gstride;
				for (int j = 0; j < dim; j++)
					sum[j] += gq[j];
			}
			int rc = fn(arg, gv, u);
			if (rc < 0)
				return rc;
		}
	}
	return ST_OK;
}

struct row_step {
	const st_sync_env_t *env;
	uint64_t t;
};

static int row_step(void *arg, const st_sync_grads_t *gv, uint32_t u)
{
	const struct row_step *r = arg;
	if (gv->rows[u])
		st_sync_row_update(r->env, gv->rows[u], gv->grad + (size_t)u * gv->gstride,
				   gv->row_dim[u], r->t);
	return ST_OK;
}

void st_sync_reduce_rows(const st_sync_env_t *env, st_sync_grads_t *const *g, int w,
			 uint64_t t)
{
	struct row_step r = { env, t };
	st_sync_sum_rows(env, g, w, row_step, &r);
}

int st_sync_gradbuf_init(st_sync_gradbuf_t *b, const st_sync_env_t *env)
{
	memset(b, 0, sizeof *b);
	b->maxdim = st_model_max_row_dim(env->model);
	size_t rowf = (size_t)b->maxdim +
		      st_optim_state_floats(env->sparse_opt, (size_t)b->maxdim) + 1;
	b->dense = calloc(env->nparams ? env->nparams : 1, sizeof(float));
	b->trow = malloc(sizeof(float) * rowf);
	return b->dense && b->trow ? ST_OK : ST_ENOMEM;
}

int st_sync_gradbuf_reserve(st_sync_gradbuf_t *b, uint32_t n_uniq)
{
	if (n_uniq <= b->cap)
		return ST_OK;
	size_t n = n_uniq;
	float *sum = realloc(b->sum, sizeof(float) * n * (size_t)(b->maxdim ? b->maxdim : 1));
	if (sum)
		b->sum = sum;
	float **row = realloc(b->row, sizeof *row * n);
	if (row)
		b->row = row;
	uint16_t *dim = realloc(b->dim, sizeof *dim * n);
	if (dim)
		b->dim = dim;
	uint8_t *in = realloc(b->in, n);
	if (in)
		b->in = in;
	uint32_t *list = realloc(b->list, sizeof *list * n);
	if (list)
		b->list = list;
	if (!sum || !row || !dim || !in || !list)
		return ST_ENOMEM;
	memset(b->in, 0, n);
	b->cap = n_uniq;
	return ST_OK;
}

void st_sync_gradbuf_add(st_sync_gradbuf_t *b, const st_sync_env_t *env,
			 const st_sync_grads_t *g)
{
	for (size_t i = 0; i < env->nparams; i++)
		b->dense[i] += g->dense[i];
	for (uint32_t k = 0; k < g->n_rows; k++) {
		uint32_t u = g->uidx[k];
		const int dim = g->row_dim[u];
		const float *gu = g->grad + (size_t)u * g->gstride;
		float *a = b->sum + (size_t)u * b->maxdim;
		if (!b->in[u]) {
			b->in[u] = 1;
			b->list[b->ns++] = u;
			b->row[u] = g->rows[u];
			b->dim[u] = (uint16_t)dim;
			memcpy(a, gu, sizeof(float) * (size_t)dim);
		} else {
			for (int j = 0; j < dim; j++)
				a[j] += gu[j];
		}
	}
}

void st_sync_gradbuf_apply(st_sync_gradbuf_t *b, const st_sync_env_t *env, float *state,
			   float scale, uint64_t t)
{
	for (size_t i = 0; i < env->nparams; i++)
		b->dense[i] *= scale;
	st_sync_dense_update(env, env->params, state, b->dense, t);
	memset(b->dense, 0, sizeof(float) * env->nparams);
	for (uint32_t k = 0; k < b->ns; k++) {
		uint32_t u = b->list[k];
		float *g = b->sum + (size_t)u * b->maxdim;
		for (int j = 0; j < b->dim[u]; j++)
			g[j] *= scale;
		if (b->row[u])
			st_sync_row_update_relaxed(env, b->row[u], g, b->dim[u], t, b->trow);
		b->in[u] = 0;
	}
	b->ns = 0;
}

void st_sync_gradbuf_fini(st_sync_gradbuf_t *b)
{
	free(b->dense);
	free(b->sum);
	free(b->row);
	free(b->dim);
	free(b->in);
	free(b->list);
	free(b->trow);
	memset(b, 0, sizeof *b);
}

double st_sync_cfg_num(const st_sync_cfg_t *cfg, const char *key, double def)
{
	for (int i = 0; cfg && i < cfg->n_params; i++)
		if (cfg->keys[i] && !strcmp(cfg->keys[i], key))
			return cfg->vals ? cfg->vals[i] : def;
	return def;
}

const char *st_sync_cfg_str(const st_sync_cfg_t *cfg, const char *key)
{
	for (int i = 0; cfg && i < cfg->n_params; i++)
		if (cfg->keys[i] && !strcmp(cfg->keys[i], key))
			return cfg->strs ? cfg->strs[i] : NULL;
	return NULL;
}

void st_sync_stats_read(const st_sync_stats_t *st, st_sync_stats_t *out)
{
	const uint64_t *src = (const uint64_t *)st;
	uint64_t *dst = (uint64_t *)out;
	for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

int st_sync_hist_bucket(uint64_t s)
{
	if (s == 0)
		return 0;
	int b = 64 - __builtin_clzll(s);   /* s in [2^(b-1), 2^b) */
	return b < ST_SYNC_HIST ? b : ST_SYNC_HIST - 1;
}

void st_sync_stats_staleness(const st_sync_stats_t *s, double *mean, double *max)
{
	uint64_t n = 0;
	double sum = 0;
	int top = 0;
	for (int k = 0; k < ST_SYNC_HIST; k++) {
		n += s->staleness[k];
		/* A bucket's midpoint stands for its values in the mean. */
		double mid = k == 0 ? 0.0 : 1.5 * (double)(UINT64_C(1) << (k - 1)) - 0.5;
		sum += mid * (double)s->staleness[k];
		if (s->staleness[k])
			top = k;
	}
	*mean = n ? sum / (double)n : 0.0;
	*max = top ? (double)((UINT64_C(1) << top) - 1) : 0.0;
}

void st_sync_stats_publish(const st_sync_stats_t *s, st_metrics_t *m)
{
	if (!m)
		return;
	double mean, max;
	st_sync_stats_staleness(s, &mean, &max);
	st_metrics_set(m, "sync_updates", (double)s->updates);
	st_metrics_set(m, "sync_staleness_mean", mean);
	st_metrics_set(m, "sync_staleness_max", max);
	st_metrics_set(m, "sync_dropped", (double)s->dropped);
	st_metrics_set(m, "sync_bytes", (double)s->bytes);
	/* The staleness histogram itself, one metric per non-empty bucket:
	 * "hist.sync_staleness.0", ".1", ".2-3", ".4-7", ... (JSON only). */
	for (int k = 0; k < ST_SYNC_HIST; k++) {
		if (!s->staleness[k])
			continue;
		char name[48];
		uint64_t lo = k ? UINT64_C(1) << (k - 1) : 0, hi = k ? (UINT64_C(1) << k) - 1 : 0;
		if (k == ST_SYNC_HIST - 1)
			snprintf(name, sizeof name, "hist.sync_staleness.%llu+", (unsigned long long)lo);
		else if (lo == hi)
			snprintf(name, sizeof name, "hist.sync_staleness.%llu", (unsigned long long)lo);
		else
			snprintf(name, sizeof name, "hist.sync_staleness.%llu-%llu",
				 (unsigned long long)lo, (unsigned long long)hi);
		st_metrics_set(m, name, (double)s->staleness[k]);
	}
}
