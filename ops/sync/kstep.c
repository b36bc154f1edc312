/*
 * kstep.c — k-step Adam model merging ("kstep{k}"): Zhao et al.,
 * "Communication-Efficient TeraByte-Scale Model Training Framework for
 * Online Advertising" (kstep-adam-terabyte-training.md), §4, Algorithm 2.
 *
 * Dense parameters. Every worker i keeps its own replica x_i with its own
 * Adam moments m_i, v_i (Algorithm 2 line 2; v starts at 0 like the
 * optimizer's Adam, whose eps plays the role of the paper's v_0 = eps).
 * At every step t the worker updates m_i and v_i with its gradient (lines
 * 5-6). Then:
 *   t mod k != 0 (lines 7-10): a local Adam step x_i -= a m_i / sqrt(v_i)
 *     with the bias corrections and eps of ops/optim (torch.optim.Adam).
 *     DEVIATION: line 8 freezes the denominator at the v of the last merge;
 *     with v_0 = eps that divides by sqrt(eps) until the first merge and
 *     diverges without the paper's hot start, so we use the worker's own
 *     running v_i — the "standard Adam updates" of §4's text.
 *   t mod k == 0 (lines 11-14, global averaging): v = (1/N) sum_i v_i;
 *     x_{t+1} = (1/N) sum_j (x_j - a m_j / sqrt(v)) — the merge step's
 *     update already uses the averaged v. The first moments m_i are NOT
 *     averaged (the algorithm averages x and v only); each worker keeps its
 *     own. After the merge every replica's x_i and v_i are set to the
 *     averages: because v is a linear moving average, the next merge's mean
 *     of the v_i is the same as Algorithm 2's (which never resets v_i),
 *     and the replicas are bit-identical right after each merge.
 * The step count t runs across batches (a batch end does not merge), so
 * the merge period is exactly k steps whatever the batch size; at the end
 * of every batch the mean of the replicas is written to env->params, the
 * model that eval, dumps and checkpoints read (a view: it changes no
 * replica and is not counted as traffic).
 * Gradients are the trainer's lockstep gradients (scaled by 1/examples of
 * the step's global minibatch for mean-loss models). Adam is invariant to
 * that constant factor except through eps and l2.
 * Dense optimizer: Algorithm 2 is defined for Adam only; any other dense
 * optimizer is refused with ST_EJOB.
 *
 * Sparse rows: §5 ("Setup"): sparse parameters use "a standard distributed
 * setting ... where the gradients are averaged for update in every
 * iteration". So rows are shared and updated synchronously every step,
 * exactly as allreduce.c does: the row gradients of the step are summed in
 * worker order by the owner of the key (u mod N) and one sparse optimizer
 * step is applied.
 *
 * Bytes ("what a distributed run would send", per worker): every step, its
 * rows (8-byte key + floats) like allreduce; every merge, a ring allreduce
 * of its params + v (2 nparams floats), of which each worker sends
 * 2 (N-1) / N of the buffer. The dense traffic falls as 1/k.
 *
 * Across processes (env->dist, docs/distributed.md): every worker of every
 * rank is a replica of Algorithm 2. A merge sums v over the rank's
 * replicas, allreduces the sums across ranks (rank order), and does the
 * same for the updated x with the merged v, so with one worker per rank the
 * merge is the single-process one bit for bit (the same sums in the same
 * order). Rows go to their owners as allreduce's do (st_sync_rowpush_*).
 * At the end (finish) env->params gets the mean over every rank's replicas.
 *
 * Threads: hooks on the N worker threads, lockstep. Per step: barrier A
 * after every worker has updated its own moments (and, off merge steps,
 * its replica); between A and B the owner of key u (u mod N) updates that
 * row, and on merge steps the owner of element range [lo_w, hi_w) reads
 * and writes that range of every replica's x and v; barrier B. Outside
 * A..B a worker touches only its own replica. No locks; stats are relaxed
 * atomics.
 */
#include "ops/sync/sync.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/algo/owner.h"
#include "ops/dist/dist.h"
#include "runtime/err.h"
#include "runtime/net/net.h"

typedef struct {
	float *x, *m, *v;          /* [nparams] replica and its Adam moments */
	uint64_t t;                /* local Adam steps done (bias correction) */
	uint64_t steps;            /* apply calls (the Algorithm 2 clock) */
	int upd;                   /* this step had a gradient */
	float step, isb;           /* this step's Adam coefficients */
} kworker_t;

typedef struct {
	st_sync_env_t env;
	int N;
	uint64_t k;
	pthread_barrier_t bar;
	kworker_t *w;
	st_sync_grads_t **g;       /* [N] this step's gradients */
	int merged_last;           /* the last step was a merge (read after B) */
	/* Across processes: */
	st_sync_rowpush_t *rows;
	float *vsum, *xsum;        /* [nparams] merge sums, allreduced */
	float inv_total;           /* 1 / replicas of the job */
	int err;                   /* first network error (relaxed atomic) */
	st_sync_stats_t st;        /* relaxed atomics */
	uint64_t merges;           /* relaxed atomic */
} kstep_t;

/* The slice of the flat parameter array worker w merges. */
static void range(const kstep_t *s, int w, size_t *lo, size_t *hi)
{
	st_algo_owner_range(s->env.nparams, w, s->N, lo, hi);
}

static void ks_destroy(void *self)
{
	kstep_t *s = self;
	if (!s)
		return;
	for (int i = 0; s->w && i < s->N; i++) {
		free(s->w[i].x);
		free(s->w[i].m);
		free(s->w[i].v);
	}
	if (s->w)
		pthread_barrier_destroy(&s->bar);
	free(s->w);
	free(s->g);
	st_sync_rowpush_destroy(s->rows);
	free(s->vsum);
	free(s->xsum);
	free(s);
}

static int ks_create(void **self, const st_sync_env_t *env)
{
	double k = st_sync_cfg_num(env->cfg, "k", 0);
	if (!(k >= 1) || k != floor(k)) {
		st_error("sync kstep: k must be an integer >= 1 (got %g)", k);
		return ST_EJOB;
	}
	if (env->dense_opt->kind != ST_OPT_ADAM) {
		st_error("sync kstep: k-step model merging (Algorithm 2 of the k-step Adam "
			 "paper) is defined for Adam; set the model's dense optimizer to "
			 "\"adam\" or choose another sync policy");
		return ST_EJOB;
	}
	kstep_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->k = (uint64_t)k;
	s->g = calloc((size_t)s->N, sizeof *s->g);
	s->w = calloc((size_t)s->N, sizeof *s->w);
	if (!s->g || !s->w) {
		free(s->g);
		free(s->w);
		free(s);
		return ST_ENOMEM;
	}
	pthread_barrier_init(&s->bar, NULL, (unsigned)s->N);
	size_t n = env->nparams ? env->nparams : 1;
	s->inv_total = 1.0f / (float)s->N;
	if (env->dist) {
		s->rows = st_sync_rowpush_create(s->N);
		s->vsum = malloc(sizeof(float) * n);
		s->xsum = malloc(sizeof(float) * n);
		if (!s->rows || !s->vsum || !s->xsum) {
			ks_destroy(s);
			return ST_ENOMEM;
		}
		s->inv_total = 1.0f / (float)(s->N * st_net_size(st_dist_net(env->dist)));
	}
	for (int i = 0; i < s->N; i++) {
		kworker_t *a = &s->w[i];
		a->x = malloc(sizeof(float) * n);
		a->m = calloc(n, sizeof(float));
		a->v = calloc(n, sizeof(float));
		if (!a->x || !a->m || !a->v) {
			ks_destroy(s);
			return ST_ENOMEM;
		}
		memcpy(a->x, env->params, sizeof(float) * env->nparams);
		/* A policy switch (env->dense_state) keeps Adam's moments: the
		 * optimizer lays them out per tensor as m[len] then v[len]. */
		for (int ti = 0; env->dense_state && ti < st_model_ntensors(env->model); ti++) {
			const st_tensor_info_t *inf = st_model_tensor(env->model, ti);
			size_t len = st_sync_tensor_floats(env->model, ti);
			const float *so = env->dense_state + st_sync_dense_state_offset(env, ti);
			memcpy(a->m + inf->offset, so, sizeof(float) * len);
			memcpy(a->v + inf->offset, so + len, sizeof(float) * len);
		}
		a->t = env->dense_t ? *env->dense_t : 0;
		a->steps = env->step0;
	}
	*self = s;
	return ST_OK;
}

static int ks_begin_batch(void *self, uint32_t n_uniq)
{
	(void)self;
	(void)n_uniq;
	return ST_OK;
}

static const float *ks_begin_step(void *self, int w, uint64_t step)
{
	kstep_t *s = self;
	(void)step;
	return s->w[w].x;
}

/* Adam's bias-corrected step size and 1/sqrt(1 - b2^t), as ops/optim. */
static void adam_coef(const st_optim_t *o, uint64_t t, float *step, float *isb)
{
	const double bc1 = 1.0 - pow((double)o->beta1, (double)t);
	const double bc2 = 1.0 - pow((double)o->beta2, (double)t);
	*step = (float)((double)o->lr / bc1);
	*isb = (float)(1.0 / sqrt(bc2));
}

/* Lines 5-6 and, off merge steps, line 9, on worker w's own replica. */
static void local_step(kstep_t *s, kworker_t *a, const float *g, int merge)
{
	const st_optim_t *o = s->env.dense_opt;
	const float b1 = o->beta1, b2 = o->beta2, l2 = o->l2, eps = o->eps;
	const size_t n = s->env.nparams;
	adam_coef(o, a->t, &a->step, &a->isb);
	const float step = a->step, isb = a->isb;
	float *restrict x = a->x, *restrict m = a->m, *restrict v = a->v;
	for (size_t j = 0; j < n; j++) {
		float gj = g[j] + l2 * x[j];
		m[j] = b1 * m[j] + (1.0f - b1) * gj;
		v[j] = b2 * v[j] + (1.0f - b2) * gj * gj;
		if (!merge)
			x[j] -= step * m[j] / (sqrtf(v[j]) * isb + eps);
	}
}

/* Lines 12-13 over elements [lo, hi) of every replica. */
static void merge_range(kstep_t *s, size_t lo, size_t hi)
{
	const int N = s->N;
	const float eps = s->env.dense_opt->eps, inv_n = s->inv_total;
	for (size_t j = lo; j < hi; j++) {
		float vs = 0.0f, xs = 0.0f;
		for (int i = 0; i < N; i++)
			vs += s->w[i].v[j];
		const float vbar = vs * inv_n;
		for (int i = 0; i < N; i++) {
			const kworker_t *a = &s->w[i];
			float xi = a->x[j];
			if (a->upd)
				xi -= a->step * a->m[j] / (sqrtf(vbar) * a->isb + eps);
			xs += xi;
		}
		const float xbar = xs * inv_n;
		for (int i = 0; i < N; i++) {
			s->w[i].x[j] = xbar;
			s->w[i].v[j] = vbar;
		}
	}
}

/* A network step of worker 0 between two barriers; errors are kept. */
static void net_sum(kstep_t *s, int w, float *buf)
{
	if (w == 0 && !__atomic_load_n(&s->err, __ATOMIC_RELAXED)) {
		int rc = st_net_allreduce_f32(st_dist_net(s->env.dist), buf, s->env.nparams);
		if (rc < 0)
			__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	}
}

/* Lines 12-13 across processes, worker w's range [lo, hi): the sums of v
 * and of the updated x over this rank's replicas, allreduced in rank
 * order, then the means into every local replica. */
static void merge_dist(kstep_t *s, int w)
{
	const int N = s->N;
	const float eps = s->env.dense_opt->eps, inv = s->inv_total;
	size_t lo, hi;
	range(s, w, &lo, &hi);
	for (size_t j = lo; j < hi; j++) {
		float vs = 0.0f;
		for (int i = 0; i < N; i++)
			vs += s->w[i].v[j];
		s->vsum[j] = vs;
	}
	pthread_barrier_wait(&s->bar);
	net_sum(s, w, s->vsum);
	pthread_barrier_wait(&s->bar);
	for (size_t j = lo; j < hi; j++) {
		const float vbar = s->vsum[j] * inv;
		float xs = 0.0f;
		for (int i = 0; i < N; i++) {
			const kworker_t *a = &s->w[i];
			float xi = a->x[j];
			if (a->upd)
				xi -= a->step * a->m[j] / (sqrtf(vbar) * a->isb + eps);
			xs += xi;
		}
		s->vsum[j] = vbar;
		s->xsum[j] = xs;
	}
	pthread_barrier_wait(&s->bar);
	net_sum(s, w, s->xsum);
	pthread_barrier_wait(&s->bar);
	for (size_t j = lo; j < hi; j++) {
		const float xbar = s->xsum[j] * inv;
		for (int i = 0; i < N; i++) {
			s->w[i].x[j] = xbar;
			s->w[i].v[j] = s->vsum[j];
		}
	}
}

static int ks_apply(void *self, int w, st_sync_grads_t *g)
{
	kstep_t *s = self;
	const int N = s->N;
	const st_sync_env_t *env = &s->env;
	kworker_t *a = &s->w[w];
	const uint64_t step = ++a->steps;
	const int merge = step % s->k == 0;
	a->upd = g->n_examples > 0;
	if (a->upd) {
		a->t++;
		local_step(s, a, g->dense, merge);
	}
	s->g[w] = g;
	pthread_barrier_wait(&s->bar);                          /* A */

	/* Sparse, as allreduce.c: rows u with u mod N == w; the first toucher
	 * (lowest worker index) holds the sum; across processes the sums go
	 * to the rows' owners (sent after barrier B). */
	if (env->dist) {
		int rc = st_sync_rowpush_sum(s->rows, env, s->g, w);
		if (rc < 0)
			__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	} else {
		st_sync_reduce_rows(env, s->g, w, step);
	}
	uint64_t bytes = 0;
	if (g->n_examples) {
		for (uint32_t q = 0; q < g->n_rows; q++)
			bytes += 8 + sizeof(float) * (uint64_t)g->row_dim[g->uidx[q]];
		st_sync_stat_add(&s->st.updates, 1);
		st_sync_stat_add(&s->st.staleness[0], 1);
	}
	if (merge && env->dist) {
		merge_dist(s, w);
		bytes += 2 * sizeof(float) * (uint64_t)env->nparams;
	} else if (merge) {
		size_t lo, hi;
		range(s, w, &lo, &hi);
		merge_range(s, lo, hi);
		/* Ring allreduce of params + v: 2 (N-1)/N of 2 nparams floats. */
		bytes += (uint64_t)(2 * (N - 1)) * 2 * sizeof(float) * (uint64_t)env->nparams /
			 (uint64_t)N;
	}
	st_sync_stat_add(&s->st.bytes, bytes);
	if (a->upd)
		st_sync_stat_add(&s->st.steps, 1);
	pthread_barrier_wait(&s->bar);                          /* B */
	if (w == 0) {
		s->merged_last = merge;   /* read by others only after a barrier */
		if (merge)
			st_sync_stat_add(&s->merges, 1);
	}
	if (env->dist) {
		/* Worker 0 sends the row sums (the store's sync step index: the
		 * steps of this policy so far after those the ranks made before
		 * it, the same on every rank; its k-step clock `step` starts at
		 * env->step0); nobody reuses a gradient buffer before C. */
		if (w == 0 && !__atomic_load_n(&s->err, __ATOMIC_RELAXED)) {
			uint64_t rb = 0;
			int rc = st_sync_rowpush_send(s->rows, env,
						      env->dist_step0 + (step - env->step0) - 1, step,
						      &rb);
			if (rc < 0)
				__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
			st_sync_stat_add(&s->st.bytes, rb);
		}
		pthread_barrier_wait(&s->bar);                  /* C */
		return __atomic_load_n(&s->err, __ATOMIC_RELAXED);
	}
	return ST_OK;
}

/* The mean of the replicas' Adam moments into the trainer's dense
 * optimizer state (env->dense_state, the optimizer's layout: per tensor m
 * then v) and worker 0's step count into env->dense_t, for elements
 * [lo, hi): what a checkpoint stores and the next policy of a switch
 * starts from, so that neither restarts Adam from zero moments (a resumed
 * kstep's first steps would otherwise divide by a second moment of 0, a
 * loss spike). v is the same on every replica right after a merge; m is
 * each worker's own (Algorithm 2 never averages it). */
static void moments_out(kstep_t *s, int w, size_t lo, size_t hi)
{
	const st_sync_env_t *env = &s->env;
	if (!env->dense_state)
		return;
	const float inv_n = 1.0f / (float)s->N;
	for (int ti = 0; ti < st_model_ntensors(env->model); ti++) {
		const st_tensor_info_t *inf = st_model_tensor(env->model, ti);
		const size_t len = st_sync_tensor_floats(env->model, ti);
		const size_t a = inf->offset > lo ? inf->offset : lo;
		const size_t b = inf->offset + len < hi ? inf->offset + len : hi;
		float *m = env->dense_state + st_sync_dense_state_offset(env, ti);
		float *v = m + len;
		for (size_t j = a; j < b; j++) {
			float ms = 0.0f, vs = 0.0f;
			for (int i = 0; i < s->N; i++) {
				ms += s->w[i].m[j];
				vs += s->w[i].v[j];
			}
			m[j - inf->offset] = ms * inv_n;
			v[j - inf->offset] = vs * inv_n;
		}
	}
	if (w == 0 && env->dense_t)
		*env->dense_t = s->w[0].t;
}

static void ks_end_batch(void *self, int w)
{
	kstep_t *s = self;
	/* Every replica is final for this batch once all workers are here;
	 * w == 0 wrote merged_last before its own arrival. */
	pthread_barrier_wait(&s->bar);
	size_t lo, hi;
	range(s, w, &lo, &hi);
	float *p = s->env.params;
	moments_out(s, w, lo, hi);
	if (s->merged_last || s->N == 1) {
		memcpy(p + lo, s->w[0].x + lo, sizeof(float) * (hi - lo));
		return;
	}
	const float inv_n = 1.0f / (float)s->N;
	for (size_t j = lo; j < hi; j++) {
		float xs = 0.0f;
		for (int i = 0; i < s->N; i++)
			xs += s->w[i].x[j];
		p[j] = xs * inv_n;
	}
}

/* Across processes, after the last step: env->params = the mean of every
 * rank's replicas (the last step merged them already, or one allreduce). */
static int ks_finish(void *self)
{
	kstep_t *s = self;
	const st_sync_env_t *env = &s->env;
	if (!env->dist || s->merged_last)
		return ST_OK;
	for (size_t j = 0; j < env->nparams; j++) {
		float xs = 0.0f;
		for (int i = 0; i < s->N; i++)
			xs += s->w[i].x[j];
		s->xsum[j] = xs;
	}
	int rc = st_net_allreduce_f32(st_dist_net(env->dist), s->xsum, env->nparams);
	for (size_t j = 0; rc >= 0 && j < env->nparams; j++)
		env->params[j] = s->xsum[j] * s->inv_total;
	return rc;
}

static void ks_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((kstep_t *)self)->st, out);
}

/* Test and bench access: worker w's replica and second moment, and the
 * number of merges so far (no worker inside a hook). */
const float *st__sync_kstep_replica(void *self, int w, const float **v);
uint64_t st__sync_kstep_merges(void *self);

const float *st__sync_kstep_replica(void *self, int w, const float **v)
{
	kstep_t *s = self;
	if (v)
		*v = s->w[w].v;
	return s->w[w].x;
}

uint64_t st__sync_kstep_merges(void *self)
{
	kstep_t *s = self;
	return __atomic_load_n(&s->merges, __ATOMIC_RELAXED);
}

const st_sync_ops_t st_sync_kstep_ops = {
	.name = "kstep",
	.schedule = ST_SYNC_LOCKSTEP,
	.flags = ST_SYNC_RANK_REPLICAS,   /* across processes; one process ignores it */
	.create = ks_create,
	.destroy = ks_destroy,
	.begin_batch = ks_begin_batch,
	.begin_step = ks_begin_step,
	.apply = ks_apply,
	.end_batch = ks_end_batch,
	.report = ks_report,
	.finish = ks_finish,
};
