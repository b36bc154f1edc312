/*
 * gba.c — Global Batch gradients Aggregation ("gba{global_batch, tolerance}",
 * gba-global-batch-aggregation.txt §4.1, Fig. 5, Appendix B Algorithms 1-2),
 * in one process: the "PS" is this object, the workers are the trainer's N
 * threads on the FREE schedule (no worker waits for another).
 *
 * Token control (§4.1). A global step k is one aggregated update; k counts
 * those done so far. A worker that starts a minibatch (begin_step, the
 * paper's "pull the parameters and fetch a token from PS") gets the token
 * tau = k and a snapshot of the dense parameters after step k-1. The
 * paper's token list hands out floor(i / M) to the i-th pulled batch, its
 * stand-in on a PS cluster for "the global step when this batch is sent to
 * a worker"; in one process the exact step is known, so the token is that
 * step and k - tau is exactly the paper's data staleness.
 *
 * Gradient buffer (§4.1, Alg. 2 lines 14-23). apply pushes (token,
 * gradient) into a buffer of M = global_batch / local_batch slots (local
 * batch = env->minibatch, or the first gradient's n_examples while the
 * trainer leaves that 0; global_batch must be a multiple, else ST_EJOB). The
 * apply that brings the buffer to M performs global step k, holding the
 * lock:
 *   dense   f_m = 1 if k - tau_m <= iota else 0          (Eq. 1, iota =
 *           tolerance); g = sum_m f_m g_m / M  ("weighted sum ... divided
 *           by N_a", Alg. 2 l. 22; excluded gradients count as zeros); one
 *           dense optimizer step. k - tau_m > iota counts in `dropped`.
 *   sparse  every ID (shared row) carries the global step of its last
 *           update ("the global step of appearance tagged to each ID", Alg. 2
 *           l. 18), stored as seen = last step + 1 (0: not updated while it
 *           could matter). The row a worker read at token tau missed the
 *           ID's updates of steps tau .. seen-1, so the ID's staleness is
 *           s = seen - tau if seen > tau, else 0 — the same quantity as the
 *           dense one (dense params are updated every step, seen = k, s =
 *           k - tau), computed from "the tagged global step of each ID and
 *           the attached token" (Alg. 2 l. 21). Eq. 1 is applied to s, so a
 *           straggler's gradient still counts for IDs nobody updated since
 *           its read (Insight 2: sparse IDs suffer less from staleness). The
 *           ID's gradient = sum of f_m(ID) g_m(ID) over the buffered
 *           gradients that touched it, divided by how many touched it ("the
 *           number of workers that encountered the particular ID", Alg. 2
 *           l. 23); one sparse optimizer step; its tag becomes k (seen = k+1).
 *           Tags are read before any of them is set for step k, so a step's
 *           own update never counts as staleness of its own gradients.
 *   Gradients from the trainer are those of their minibatch's loss (mean
 *   for the neural presets), so the dense average over M full minibatches
 *   is the gradient of the global batch's loss: the update allreduce makes
 *   with the same global batch when no gradient is stale (§4.1, G_a = G_s).
 *
 * Partial buffer: at the end of every train batch, the last worker to call
 * end_batch applies what the buffer holds as a partial global step (its
 * dense average is over the gradients present). Never carried over: the
 * seam has no end-of-data hook, buffered rows belong to the batch's pull,
 * and a checkpoint, an export, an eval or a policy switch after a batch
 * must see every gradient of it. This is the paper's last step of an epoch
 * too (K = ceil(Q / M) updates: the last one aggregates Q mod M gradients).
 * Batches whose minibatch count is a multiple of M never have one.
 *
 * Reads: begin_step copies the dense parameters under the lock (a step is
 * applied under the same lock), so a worker's snapshot is exactly the
 * parameters after its token's step. Embedding rows are written by the step
 * with relaxed atomics and read by the trainer with relaxed atomics
 * (ST_SYNC_RELAXED_READS) when it computes; a row can thus be newer than
 * the token (never older), so s above is an upper bound for it.
 *
 * Tag map: shared row address -> seen. A tag with seen <= the smallest
 * token that a future or in-flight gradient can carry equals "no tag", so
 * after a step the map drops such entries when it is half full: it holds
 * only rows updated since the oldest outstanding read.
 *
 * Bytes (what a PS run would send, per gradient, counted at apply, dropped
 * gradients included since they were sent):
 *   pull = 8 (token) + 4 nparams + sum_rows (8 key + 4 dim)
 *   push = 8 (token) + 4 nparams + sum_rows (8 key + 4 dim).
 *
 * Threads: hooks on the N worker threads. One mutex `mu` guards everything
 * but each worker's spare slot (filled by its worker outside the lock,
 * handed over under it) and the statistics (relaxed atomics, report may
 * read them while workers run). Lock order: mu only (the rows take no
 * lock). Every slot is at each moment exactly one of: a worker's spare, in
 * the buffer, on the free list (M + N slots).
 */
#include "ops/sync/sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

typedef struct {
	uint64_t token;
	uint32_t n_examples;
	float *dense;            /* [nparams] */
	uint32_t n_rows, cap_rows;
	float **row;             /* [cap_rows] shared rows touched */
	uint16_t *dim;           /* [cap_rows] */
	size_t *off;             /* [cap_rows] offset of row k's gradient in g */
	float *g;                /* packed row gradients [cap_g] */
	size_t cap_g;
} slot_t;

typedef struct {
	uintptr_t key;           /* row address; 0 = empty */
	uint64_t seen;           /* last update step + 1 */
	uint32_t stamp, acc;     /* step scratch: accumulator of this step */
} tag_t;

typedef struct {
	float *row;              /* the shared row */
	uint32_t tag;            /* its entry in the tag map */
	uint16_t dim;
	uint32_t cnt;            /* buffered gradients that touched it */
	uint32_t kept;           /* of which within the tolerance */
} acc_t;

typedef struct {
	st_sync_env_t env;
	int N;
	int M;                   /* gradients per global step; 0 until known */
	int ready;               /* M and the slots set (atomic acquire) */
	uint64_t global_batch, tol;
	pthread_mutex_t mu;
	/* ---- under mu ---- */
	uint64_t k;              /* global steps done */
	st_sync_dense_t dense;
	slot_t *slots;           /* [M + N] */
	slot_t **buf;            /* [M] the gradient buffer */
	int nbuf;
	slot_t **freel;          /* [M + N] */
	int nfree;
	slot_t **spare;          /* [N] */
	uint64_t *token;         /* [N] token of worker w's current minibatch */
	uint8_t *inflight;       /* [N] between begin_step and apply */
	float **snap;            /* [N] dense snapshot [nparams] */
	int ended;               /* end_batch calls this batch */
	int err;                 /* failure of a step run by end_batch */
	tag_t *tags;
	uint32_t tcap, tn, stamp;
	float *agg;              /* [nparams] dense aggregate */
	float *ag;               /* [acap * gs] per-ID aggregates */
	acc_t *acc;              /* [acap] */
	uint32_t acap;
	int gs;                  /* max row dim */
	float *trow;             /* row + state, relaxed update */
	/* ---- relaxed atomics ---- */
	st_sync_stats_t st;
} gba_t;

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static const double *cfg_param(const st_sync_cfg_t *c, const char *key)
{
	for (int i = 0; c && i < c->n_params; i++)
		if (c->keys[i] && !strcmp(c->keys[i], key))
			return &c->vals[i];
	return NULL;
}

/* ---- tag map (open addressing, linear probing) -------------------------- */

static uint32_t tag_slot(const tag_t *tags, uint32_t cap, uintptr_t key)
{
	uint32_t i = (uint32_t)mix64((uint64_t)key) & (cap - 1);
	while (tags[i].key && tags[i].key != key)
		i = (i + 1) & (cap - 1);
	return i;
}

/* Rebuilds the map with capacity cap (a power of two), keeping the entries
 * with seen > keep_above. ST_OK or ST_ENOMEM (old map kept). */
static int tag_rebuild(gba_t *s, uint32_t cap, uint64_t keep_above)
{
	tag_t *nt = calloc(cap, sizeof *nt);
	if (!nt)
		return ST_ENOMEM;
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->tcap; i++) {
		const tag_t *e = &s->tags[i];
		if (!e->key || e->seen <= keep_above)
			continue;
		nt[tag_slot(nt, cap, e->key)] = *e;
		n++;
	}
	free(s->tags);
	s->tags = nt;
	s->tcap = cap;
	s->tn = n;
	return ST_OK;
}

/* ---- setup ---------------------------------------------------------------- */

static void slot_free(slot_t *sl)
{
	free(sl->dense);
	free(sl->row);
	free(sl->dim);
	free(sl->off);
	free(sl->g);
}

static void gba_destroy(void *self)
{
	gba_t *s = self;
	if (!s)
		return;
	for (int i = 0; s->slots && i < s->M + s->N; i++)
		slot_free(&s->slots[i]);
	free(s->slots);
	free(s->buf);
	free(s->freel);
	free(s->spare);
	free(s->token);
	free(s->inflight);
	st_sync_snaps_destroy(s->snap, s->N);
	free(s->tags);
	free(s->agg);
	free(s->ag);
	free(s->acc);
	free(s->trow);
	st_sync_dense_fini(&s->dense);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

/* Sets M from the local batch and allocates the buffer and the slots.
 * Under mu (or in create). ST_OK, ST_EJOB (logged), ST_ENOMEM. */
static int setup(gba_t *s, uint64_t local)
{
	if (s->slots)
		return ST_ENOMEM;   /* an earlier attempt failed half way */
	if (!local || s->global_batch % local) {
		st_error("sync gba: global_batch = %llu must be a multiple of the local batch "
			 "(the job's minibatch, %llu examples per worker step); use e.g. "
			 "global_batch = %llu", (unsigned long long)s->global_batch,
			 (unsigned long long)local,
			 (unsigned long long)(local ? local * (uint64_t)s->N : 0));
		return ST_EJOB;
	}
	uint64_t M = s->global_batch / local;
	if (M > 1u << 20) {
		st_error("sync gba: global_batch / minibatch = %llu gradients per global step "
			 "is too many (at most %u)", (unsigned long long)M, 1u << 20);
		return ST_EJOB;
	}
	if ((int)M != s->N)
		st_info("sync gba: %d workers aggregate M = %llu gradients per global step "
			"(the paper uses as many workers as M)", s->N, (unsigned long long)M);
	int n = (int)M + s->N;
	s->slots = calloc((size_t)n, sizeof *s->slots);
	s->buf = calloc(M, sizeof *s->buf);
	s->freel = calloc((size_t)n, sizeof *s->freel);
	if (!s->slots || !s->buf || !s->freel)
		return ST_ENOMEM;
	s->M = (int)M;   /* from here destroy frees the slots */
	size_t np = s->env.nparams ? s->env.nparams : 1;
	for (int i = 0; i < n; i++)
		if (!(s->slots[i].dense = malloc(sizeof(float) * np)))
			return ST_ENOMEM;
	for (int w = 0; w < s->N; w++)
		s->spare[w] = &s->slots[w];
	s->nfree = 0;
	for (int i = s->N; i < n; i++)
		s->freel[s->nfree++] = &s->slots[i];
	__atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
	return ST_OK;
}

static int gba_create(void **self, const st_sync_env_t *env)
{
	const double *gb = cfg_param(env->cfg, "global_batch");
	const double *tol = cfg_param(env->cfg, "tolerance");
	if (!gb || !(*gb >= 1) || *gb != (double)(uint64_t)*gb) {
		st_error("sync gba: global_batch (examples per global step, an integer >= 1) "
			 "is required, e.g. st.sync.gba{global_batch = 4 * minibatch}");
		return ST_EJOB;
	}
	if (tol && (!(*tol >= 0) || *tol != (double)(uint64_t)*tol)) {
		st_error("sync gba: tolerance must be an integer >= 0 (got %g)", *tol);
		return ST_EJOB;
	}
	gba_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	pthread_mutex_init(&s->mu, NULL);
	s->env = *env;
	s->N = env->n_workers;
	s->global_batch = (uint64_t)*gb;
	s->tol = tol ? (uint64_t)*tol : 1;
	s->gs = st_model_max_row_dim(env->model);
	size_t np = env->nparams ? env->nparams : 1;
	s->spare = calloc((size_t)s->N, sizeof *s->spare);
	s->token = calloc((size_t)s->N, sizeof *s->token);
	s->inflight = calloc((size_t)s->N, 1);
	s->snap = st_sync_snaps_create(env);
	s->agg = malloc(sizeof(float) * np);
	s->trow = malloc(sizeof(float) * ((size_t)s->gs + 1 +
		st_optim_state_floats(env->sparse_opt, (size_t)s->gs)));
	int rc = st_sync_dense_init(&s->dense, env) == ST_OK && s->spare && s->token &&
		 s->inflight && s->snap && s->agg && s->trow ? ST_OK : ST_ENOMEM;
	if (rc >= 0)
		rc = tag_rebuild(s, 1024, 0);
	if (rc >= 0 && env->minibatch)
		rc = setup(s, env->minibatch);
	if (rc < 0) {
		gba_destroy(s);
		return rc;
	}
	*self = s;
	return ST_OK;
}

static int gba_begin_batch(void *self, uint32_t n_uniq)
{
	(void)self;
	(void)n_uniq;
	return ST_OK;
}

static const float *gba_begin_step(void *self, int w, uint64_t step)
{
	gba_t *s = self;
	(void)step;   /* the token is the global step, not the worker's count */
	pthread_mutex_lock(&s->mu);
	s->token[w] = s->k;
	s->inflight[w] = 1;
	memcpy(s->snap[w], s->env.params, sizeof(float) * s->env.nparams);
	pthread_mutex_unlock(&s->mu);
	return s->snap[w];
}

/* ---- the global step -------------------------------------------------------- */

/* Aggregates and applies the nbuf buffered gradients as global step k. Under
 * mu. ST_OK or ST_ENOMEM (nothing applied, buffer kept). */
static int global_step(gba_t *s)
{
	const st_sync_env_t *env = &s->env;
	const int n = s->nbuf;
	const uint64_t k = s->k;
	const int gs = s->gs;

	/* Capacity first, so that a failure leaves everything as it was. */
	uint64_t nr = 0;
	for (int m = 0; m < n; m++)
		nr += s->buf[m]->n_rows;
	uint32_t cap = s->tcap;
	while ((uint64_t)s->tn + nr > cap / 2)
		cap *= 2;
	if (cap != s->tcap && tag_rebuild(s, cap, 0) < 0)
		return ST_ENOMEM;
	if (nr > s->acap) {
		uint32_t ac = (uint32_t)(nr + nr / 2);
		float *ag = malloc(sizeof(float) * (size_t)ac * (size_t)gs);
		acc_t *acc = malloc(sizeof(acc_t) * ac);
		if (!ag || !acc) {
			free(ag);
			free(acc);
			return ST_ENOMEM;
		}
		free(s->ag);
		free(s->acc);
		s->ag = ag;
		s->acc = acc;
		s->acap = ac;
	}
	const uint64_t t = *s->dense.t + 1;

	/* Dense: Eq. 1 on the token; sum of the kept gradients over all n. */
	memset(s->agg, 0, sizeof(float) * env->nparams);
	int kept = 0;
	for (int m = 0; m < n; m++) {
		const slot_t *sl = s->buf[m];
		uint64_t age = k - sl->token;
		st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(age)], 1);
		if (age > s->tol) {
			st_sync_stat_add(&s->st.dropped, 1);
			continue;
		}
		kept++;
		for (size_t j = 0; j < env->nparams; j++)
			s->agg[j] += sl->dense[j];
	}
	if (kept) {
		const float inv = 1.0f / (float)n;
		for (size_t j = 0; j < env->nparams; j++)
			s->agg[j] *= inv;
		st_sync_dense_update(env, env->params, s->dense.state, s->agg, t);
	}
	st_sync_stat_add(&s->st.updates, (uint64_t)kept);

	/* Sparse: per ID, Eq. 1 on the ID's staleness; sum of the kept
	 * gradients over the buffered gradients that touched the ID. Tags are
	 * read as they were before this step (set in the second loop). */
	const uint32_t stamp = ++s->stamp;
	uint32_t nacc = 0;
	for (int m = 0; m < n; m++) {
		const slot_t *sl = s->buf[m];
		for (uint32_t e = 0; e < sl->n_rows; e++) {
			uintptr_t key = (uintptr_t)sl->row[e];
			uint32_t ti = tag_slot(s->tags, s->tcap, key);
			tag_t *tg = &s->tags[ti];
			if (!tg->key) {
				*tg = (tag_t){ .key = key };
				s->tn++;
			}
			if (tg->stamp != stamp) {
				tg->stamp = stamp;
				tg->acc = nacc;
				s->acc[nacc] = (acc_t){ .row = sl->row[e], .tag = ti,
							.dim = sl->dim[e] };
				memset(s->ag + (size_t)nacc * gs, 0, sizeof(float) * sl->dim[e]);
				nacc++;
			}
			acc_t *a = &s->acc[tg->acc];
			a->cnt++;
			uint64_t sid = tg->seen > sl->token ? tg->seen - sl->token : 0;
			if (sid > s->tol)
				continue;
			a->kept++;
			float *dst = s->ag + (size_t)tg->acc * gs;
			const float *src = sl->g + sl->off[e];
			for (int j = 0; j < a->dim; j++)
				dst[j] += src[j];
		}
	}
	for (uint32_t i = 0; i < nacc; i++) {
		const acc_t *a = &s->acc[i];
		if (!a->kept)
			continue;
		float *ga = s->ag + (size_t)i * gs;
		const float inv = 1.0f / (float)a->cnt;
		for (int j = 0; j < a->dim; j++)
			ga[j] *= inv;
		st_sync_row_update_relaxed(env, a->row, ga, a->dim, t, s->trow);
		s->tags[a->tag].seen = k + 1;
	}

	*s->dense.t = t;
	s->k = k + 1;
	st_sync_stat_add(&s->st.steps, 1);
	for (int m = 0; m < n; m++)
		s->freel[s->nfree++] = s->buf[m];
	s->nbuf = 0;

	/* Forget tags no outstanding or future read can be older than: the
	 * buffer is empty, future tokens are >= k + 1. */
	if (s->tn > s->tcap / 2) {
		uint64_t lo = s->k;
		for (int w = 0; w < s->N; w++)
			if (s->inflight[w] && s->token[w] < lo)
				lo = s->token[w];
		uint32_t live = 0;
		for (uint32_t i = 0; i < s->tcap; i++)
			live += s->tags[i].key && s->tags[i].seen > lo;
		uint32_t nc = s->tcap;
		while (live > nc / 4)
			nc *= 2;
		(void)tag_rebuild(s, nc, lo);   /* on failure the full map stays */
	}
	return ST_OK;
}

/* Copies worker w's gradients into its spare slot (outside the lock: the
 * spare is the worker's own). ST_OK or ST_ENOMEM. */
static int slot_fill(gba_t *s, slot_t *sl, int w, const st_sync_grads_t *g,
		     uint64_t *bytes)
{
	const st_sync_env_t *env = &s->env;
	sl->token = s->token[w];
	sl->n_examples = g->n_examples;
	memcpy(sl->dense, g->dense, sizeof(float) * env->nparams);
	if (g->n_rows > sl->cap_rows) {
		uint32_t c = g->n_rows + g->n_rows / 2;
		float **row = realloc(sl->row, sizeof(float *) * c);
		if (row)
			sl->row = row;
		uint16_t *dim = realloc(sl->dim, sizeof(uint16_t) * c);
		if (dim)
			sl->dim = dim;
		size_t *off = realloc(sl->off, sizeof(size_t) * c);
		if (off)
			sl->off = off;
		if (!row || !dim || !off)
			return ST_ENOMEM;
		sl->cap_rows = c;
	}
	size_t need = 0;
	uint64_t b = 8 + sizeof(float) * (uint64_t)env->nparams;
	for (uint32_t e = 0; e < g->n_rows; e++) {
		uint32_t u = g->uidx[e];
		b += 8 + sizeof(float) * (uint64_t)g->row_dim[u];
		if (g->rows[u])
			need += g->row_dim[u];
	}
	*bytes = 2 * b;   /* pull and push (file comment) */
	if (need > sl->cap_g) {
		size_t c = need + need / 2;
		float *ng = realloc(sl->g, sizeof(float) * c);
		if (!ng)
			return ST_ENOMEM;
		sl->g = ng;
		sl->cap_g = c;
	}
	uint32_t nr = 0;
	size_t off = 0;
	for (uint32_t e = 0; e < g->n_rows; e++) {
		uint32_t u = g->uidx[e];
		if (!g->rows[u])
			continue;   /* not admitted: no row, no update */
		sl->row[nr] = g->rows[u];
		sl->dim[nr] = g->row_dim[u];
		sl->off[nr] = off;
		memcpy(sl->g + off, g->grad + (size_t)u * g->gstride,
		       sizeof(float) * g->row_dim[u]);
		off += g->row_dim[u];
		nr++;
	}
	sl->n_rows = nr;
	return ST_OK;
}

static int gba_apply(void *self, int w, st_sync_grads_t *g)
{
	gba_t *s = self;
	int rc = ST_OK;
	if (!g->n_examples) {
		pthread_mutex_lock(&s->mu);
		s->inflight[w] = 0;
		pthread_mutex_unlock(&s->mu);
		return ST_OK;
	}
	if (!__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE)) {
		/* No local batch in the env: the first gradient's is the job's
		 * minibatch (a batch's only short minibatch is its last). */
		pthread_mutex_lock(&s->mu);
		if (!s->ready)
			rc = setup(s, g->n_examples);
		pthread_mutex_unlock(&s->mu);
		if (rc < 0)
			return rc;
	}
	uint64_t bytes = 0;
	slot_t *sl = s->spare[w];
	if ((rc = slot_fill(s, sl, w, g, &bytes)) < 0)
		return rc;
	st_sync_stat_add(&s->st.bytes, bytes);
	pthread_mutex_lock(&s->mu);
	s->inflight[w] = 0;
	if (s->err < 0) {
		rc = s->err;
		s->err = 0;
	}
	if (s->nbuf == s->M && (rc = global_step(s)) < 0) {
		/* An earlier step failed for memory and still holds the buffer. */
		pthread_mutex_unlock(&s->mu);
		return rc;
	}
	s->buf[s->nbuf++] = sl;
	s->spare[w] = s->freel[--s->nfree];
	if (s->nbuf == s->M) {
		int r2 = global_step(s);
		if (r2 < 0)
			rc = r2;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static void gba_end_batch(void *self, int w)
{
	gba_t *s = self;
	(void)w;
	pthread_mutex_lock(&s->mu);
	if (++s->ended == s->N) {
		/* Last worker of the batch: nobody is computing; flush. */
		s->ended = 0;
		if (s->nbuf) {
			int rc = global_step(s);
			if (rc < 0) {
				st_error("sync gba: out of memory applying the last %d gradients "
					 "of a batch (kept for the next step)", s->nbuf);
				s->err = rc;
			}
		}
	}
	pthread_mutex_unlock(&s->mu);
}

static void gba_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((gba_t *)self)->st, out);
}

const st_sync_ops_t st_sync_gba_ops = {
	.name = "gba",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_RELAXED_READS,
	.create = gba_create,
	.destroy = gba_destroy,
	.begin_batch = gba_begin_batch,
	.begin_step = gba_begin_step,
	.apply = gba_apply,
	.end_batch = gba_end_batch,
	.report = gba_report,
};
