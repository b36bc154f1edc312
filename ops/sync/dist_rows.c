/*
 * dist_rows.c — rows to their owners in a multi-process job
 * (dist_sync.h): the row sums of a lockstep step, made by the workers as
 * the single-process reductions make them (first toucher, worker order) and
 * sent by worker 0 as a synchronous step (allreduce, hybrid, kstep) or a
 * step of K kept ranks (hop_bw); and one worker's row gradients, applied on
 * arrival by their owners (async, hop_bs, shadow) or as a contribution to
 * their gradient buffers (gba, bsp).
 *
 * Threads: st_sync_rowpush_sum on every worker between two barriers, each
 * on its own share; the sends on worker 0 alone. rowsend_t takes turns
 * under its mutex (st_dist_push is one thread at a time).
 */
#include "ops/sync/dist_sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dist/dist.h"
#include "runtime/err.h"

/* ---- a step's row sums to their owners (allreduce, hybrid, kstep, hop_bw) -- */

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

int st__rowpush_send_quorum(st_sync_rowpush_t *r, const st_sync_env_t *env, uint64_t step,
			    uint64_t t, uint32_t K, uint64_t *bytes)
{
	size_t k;
	int gs;
	int rc = rowpush_fill(r, 1.0f / (float)K, &k, &gs, bytes);
	return rc < 0 ? rc : st_dist_push_quorum(env->dist, step, t, K, r->keys, r->tab,
						 r->grad, (size_t)gs, (uint32_t)k);
}

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
