/*
 * lr.c — logistic regression as pull / train / push / dump stage ops.
 *
 * Threads: the ops run on the graph's stage threads ("st-pull-<n>",
 * "st-train-<n>", ...). Each op thread has private scratch in m->pull_t[i] or
 * m->train_t[i] (i = ctx->thread_idx), allocated on first use and only ever
 * touched by that thread, except for the progressive accumulators, which
 * readers merge lock-free (auc.h) and the eval vectors, read only when no
 * train stage runs.
 *
 * Shared weights (table rows, dense weights and their accumulators) are
 * updated Hogwild: every read and write of a shared float is a relaxed
 * __atomic access, so concurrent train threads never tear a value or invoke
 * undefined behaviour, but updates can be lost or interleaved (the "async"
 * policy). With one train thread the result is deterministic: rows start from
 * fixed values (weight 0, accumulator init_accum) and batches are trained in
 * the order they arrive.
 *
 * Gradients: per minibatch, the logloss gradient (p - y) summed over
 * examples, per unique key (times the key's value) and per dense feature;
 * l2 is added to the gradient of every touched weight (the bias excluded).
 * AdaGrad: acc += g^2; w -= lr * g / sqrt(acc).
 *
 * No lock is taken here besides the table's own shard locks.
 */
#include "ops/train/lr.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ops/metrics/auc.h"
#include "runtime/err.h"

#define AUC_REFRESH 65536   /* examples per train thread between metric refreshes */

typedef struct {
	/* pull: open-addressing dedup set of the batch's keys */
	uint64_t *hkeys;
	uint32_t *hidx;
	uint32_t hcap;
	/* train */
	float *grad;        /* [gcap] summed gradient per unique key */
	uint32_t *mark;     /* [gcap] minibatch stamp of the last touch */
	uint32_t *touched;  /* unique keys touched in this minibatch */
	uint32_t gcap;
	float *xd;          /* [minibatch * n_dense] transformed dense features */
	double *dgrad;      /* [n_dense + 1] */
	st_auc_acc_t *acc;  /* progressive metrics of this thread */
	uint64_t since;
	float *ev_pred, *ev_label;
	size_t ev_n, ev_cap;
} lr_thread_t;

struct st_lr {
	st_table_t *table;
	st_metrics_t *metrics;
	uint32_t n_dense;
	int log1p, sgd;
	float lr, lr_dense, l2, init_accum;
	uint32_t minibatch;
	float *dw;          /* [n_dense + 1] dense weights, bias last */
	float *dacc;        /* [n_dense + 1] their AdaGrad accumulators */
	lr_thread_t pull_t[ST_MAX_STAGE_THREADS];
	lr_thread_t train_t[ST_MAX_STAGE_THREADS];
};

static inline float ldf(const float *p)
{
	float v;
	__atomic_load(p, &v, __ATOMIC_RELAXED);
	return v;
}

static inline void stf(float *p, float v)
{
	__atomic_store(p, &v, __ATOMIC_RELAXED);
}

static inline float sigmoidf_(float z)
{
	return 1.0f / (1.0f + expf(-z));
}

/* Reports an op failure: through the graph when there is one, else logged
 * (tests call the ops with graph = NULL). Returns code. */
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

static void metrics_add(st_lr_t *m, const char *name, double v)
{
	if (m->metrics)
		st_metrics_add(m->metrics, name, v);
}

static void metrics_set(st_lr_t *m, const char *name, double v)
{
	if (m->metrics)
		st_metrics_set(m->metrics, name, v);
}

int st_lr_create(st_lr_t **out, const st_job_t *job, st_metrics_t *metrics)
{
	const st_model_cfg_t *mc = &job->model;
	const char *opt = mc->optimizer ? mc->optimizer : "adagrad";
	const char *tr = mc->dense_transform ? mc->dense_transform : "log1p";
	if (strcmp(opt, "adagrad") && strcmp(opt, "sgd")) {
		st_error("model lr: optimizer '%s' is not supported by this model "
			 "(use \"adagrad\" or \"sgd\")", opt);
		return ST_EJOB;
	}
	if (strcmp(tr, "log1p") && strcmp(tr, "none")) {
		st_error("model lr: dense_transform '%s' unknown (use \"log1p\" or \"none\")", tr);
		return ST_EJOB;
	}
	if (!(mc->lr > 0) || !(mc->lr_dense > 0) || !(mc->l2 >= 0) ||
	    !(mc->init_accum > 0) || job->minibatch < 1 || job->train.n_dense < 0) {
		st_error("model lr: need lr > 0, lr_dense > 0, l2 >= 0, init_accum > 0, "
			 "minibatch >= 1 (got %g, %g, %g, %g, %d)", mc->lr, mc->lr_dense,
			 mc->l2, mc->init_accum, job->minibatch);
		return ST_EJOB;
	}
	st_lr_t *m = calloc(1, sizeof *m);
	if (!m)
		return ST_ENOMEM;
	m->metrics = metrics;
	m->n_dense = (uint32_t)job->train.n_dense;
	m->log1p = !strcmp(tr, "log1p");
	m->sgd = !strcmp(opt, "sgd");
	m->lr = (float)mc->lr;
	m->lr_dense = (float)mc->lr_dense;
	m->l2 = (float)mc->l2;
	m->init_accum = (float)mc->init_accum;
	m->minibatch = (uint32_t)job->minibatch;
	m->dw = calloc(m->n_dense + 1, sizeof(float));
	m->dacc = malloc(sizeof(float) * (m->n_dense + 1));
	st_table_opts_t to = {
		.dim = 1, .state_dim = 1, .seed = job->seed,
		.init_scale = 0.0f, .state_init = m->init_accum, .n_shards = 64,
	};
	int rc = (m->dw && m->dacc) ? st_table_create(&m->table, &to) : ST_ENOMEM;
	if (rc < 0) {
		st_lr_destroy(m);
		return rc;
	}
	for (uint32_t d = 0; d <= m->n_dense; d++)
		m->dacc[d] = m->init_accum;
	*out = m;
	return ST_OK;
}

static void thread_free(lr_thread_t *t)
{
	free(t->hkeys);
	free(t->hidx);
	free(t->grad);
	free(t->mark);
	free(t->touched);
	free(t->xd);
	free(t->dgrad);
	st_auc_acc_destroy(t->acc);
	free(t->ev_pred);
	free(t->ev_label);
	memset(t, 0, sizeof *t);
}

void st_lr_destroy(st_lr_t *m)
{
	if (!m)
		return;
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++) {
		thread_free(&m->pull_t[i]);
		thread_free(&m->train_t[i]);
	}
	st_table_destroy(m->table);
	free(m->dw);
	free(m->dacc);
	free(m);
}

st_table_t *st_lr_table(st_lr_t *m)
{
	return m->table;
}

/* ---- pull ------------------------------------------------------------------ */

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Fills b->uniq (first-occurrence order), b->key_idx and b->n_uniq. */
static int dedup(lr_thread_t *t, st_batch_t *b)
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
	/* Probe in a table sized for this batch, not the (maybe larger) buffer,
	 * so clearing costs O(keys of this batch). */
	memset(t->hidx, 0xff, sizeof(uint32_t) * cap);
	uint64_t *uniq = realloc(b->uniq, sizeof(uint64_t) * (nk ? nk : 1));
	if (!uniq)
		return ST_ENOMEM;
	b->uniq = uniq;
	uint32_t *kidx = realloc(b->key_idx, sizeof(uint32_t) * (nk ? nk : 1));
	if (!kidx)
		return ST_ENOMEM;
	b->key_idx = kidx;
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
	return ST_OK;
}

static int pull_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			st_batch_t **out)
{
	st_lr_t *m = state;
	*out = b;
	lr_thread_t *t = &m->pull_t[ctx->thread_idx];
	int rc = dedup(t, b);
	if (rc < 0)
		return op_fail(ctx, rc, "batch %llu: out of memory deduplicating %u keys",
			       (unsigned long long)b->seq, st_batch_nkeys(b));
	float **rows = realloc(b->rows, sizeof(float *) * (b->n_uniq ? b->n_uniq : 1));
	if (!rows)
		return op_fail(ctx, ST_ENOMEM, "batch %llu: out of memory for rows",
			       (unsigned long long)b->seq);
	b->rows = rows;
	/* One call per batch: the table takes each shard lock once. */
	rc = st_table_resolve(m->table, b->uniq, b->n_uniq, (uint32_t)b->seq, !b->eval,
			      rows);
	if (rc < 0)
		return op_fail(ctx, rc, "batch %llu: out of memory growing the table "
			       "(%llu rows)", (unsigned long long)b->seq,
			       (unsigned long long)st_table_size(m->table));
	return ST_OK;
}

/* ---- train ----------------------------------------------------------------- */

static int train_scratch(st_lr_t *m, lr_thread_t *t, uint32_t n_uniq)
{
	if (!t->acc) {
		st_auc_acc_t *acc;
		int rc = st_auc_acc_create(&acc, 16);
		if (rc < 0)
			return rc;
		/* Published with release so st_lr_progress on another thread
		 * sees an initialized accumulator. */
		__atomic_store_n(&t->acc, acc, __ATOMIC_RELEASE);
		t->xd = malloc(sizeof(float) * ((size_t)m->minibatch * m->n_dense + 1));
		t->dgrad = malloc(sizeof(double) * (m->n_dense + 1));
		if (!t->xd || !t->dgrad)
			return ST_ENOMEM;
	}
	if (n_uniq > t->gcap) {
		uint32_t cap = n_uniq + n_uniq / 2;
		free(t->grad);
		free(t->mark);
		free(t->touched);
		t->grad = calloc(cap, sizeof(float));
		t->mark = malloc(sizeof(uint32_t) * cap);
		t->touched = malloc(sizeof(uint32_t) * cap);
		if (!t->grad || !t->mark || !t->touched) {
			t->gcap = 0;
			return ST_ENOMEM;
		}
		t->gcap = cap;
	}
	return ST_OK;
}

static inline float transform(const st_lr_t *m, float x)
{
	if (!m->log1p)
		return x;
	return x > 0.0f ? log1pf(x) : 0.0f;
}

/* Logit of one example from transformed dense features xd. */
static inline float logit(const st_lr_t *m, const st_batch_t *b, uint32_t i,
			  const float *xd)
{
	float *const *rows = b->rows;
	float z = ldf(&m->dw[m->n_dense]);
	for (uint32_t d = 0; d < m->n_dense; d++)
		z += ldf(&m->dw[d]) * xd[d];
	for (uint32_t k = b->row_off[i]; k < b->row_off[i + 1]; k++) {
		const float *r = rows[b->key_idx[k]];
		if (r)
			z += ldf(r) * b->key_val[k];
	}
	return z;
}

float st_lr_predict(const st_lr_t *m, const st_batch_t *b, uint32_t i)
{
	float xd[256];
	float *x = m->n_dense <= 256 ? xd : malloc(sizeof(float) * m->n_dense);
	if (!x)
		return NAN;
	const float *dense = b->dense + (size_t)i * b->n_dense;
	for (uint32_t d = 0; d < m->n_dense; d++)
		x[d] = transform(m, dense[d]);
	float p = sigmoidf_(logit(m, b, i, x));
	if (x != xd)
		free(x);
	return p;
}

static inline void adagrad(float *w, float *acc, float g, float lr, int sgd)
{
	float wv = ldf(w);
	if (sgd) {
		stf(w, wv - lr * g);
		return;
	}
	float a = ldf(acc) + g * g;
	stf(acc, a);
	stf(w, wv - lr * g / sqrtf(a));
}

static int eval_keep(lr_thread_t *t, const float *pred, const float *label, uint32_t n)
{
	if (t->ev_n + n > t->ev_cap) {
		size_t cap = t->ev_cap ? t->ev_cap : 4096;
		while (cap < t->ev_n + n)
			cap *= 2;
		float *p = realloc(t->ev_pred, sizeof(float) * cap);
		if (!p)
			return ST_ENOMEM;
		t->ev_pred = p;
		float *l = realloc(t->ev_label, sizeof(float) * cap);
		if (!l)
			return ST_ENOMEM;
		t->ev_label = l;
		t->ev_cap = cap;
	}
	memcpy(t->ev_pred + t->ev_n, pred, sizeof(float) * n);
	memcpy(t->ev_label + t->ev_n, label, sizeof(float) * n);
	t->ev_n += n;
	return ST_OK;
}

static void refresh_metrics(st_lr_t *m)
{
	double auc, loss;
	st_lr_progress(m, &auc, &loss, NULL);
	metrics_set(m, "loss", loss);
	if (!isnan(auc))
		metrics_set(m, "auc", auc);
}

static int train_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			 st_batch_t **out)
{
	st_lr_t *m = state;
	*out = b;
	lr_thread_t *t = &m->train_t[ctx->thread_idx];
	if (b->n_dense != m->n_dense)
		return op_fail(ctx, ST_EINVAL, "batch %llu has %u dense features, model lr "
			       "expects %u", (unsigned long long)b->seq, b->n_dense, m->n_dense);
	if (b->n && (!b->rows || !b->key_idx))
		return op_fail(ctx, ST_EINVAL, "batch %llu was not pulled (no rows)",
			       (unsigned long long)b->seq);
	int rc = train_scratch(m, t, b->n_uniq);
	if (rc < 0)
		return op_fail(ctx, rc, "out of memory for train scratch (%u unique keys)",
			       b->n_uniq);
	float *const *rows = b->rows;
	const uint32_t nd = m->n_dense;
	memset(t->mark, 0, sizeof(uint32_t) * b->n_uniq);
	uint32_t stamp = 0;

	for (uint32_t i0 = 0; i0 < b->n; i0 += m->minibatch) {
		uint32_t i1 = i0 + m->minibatch < b->n ? i0 + m->minibatch : b->n;
		/* Predict the whole minibatch before any update of it. */
		for (uint32_t i = i0; i < i1; i++) {
			float *xd = t->xd + (size_t)(i - i0) * nd;
			const float *dense = b->dense + (size_t)i * nd;
			for (uint32_t d = 0; d < nd; d++)
				xd[d] = transform(m, dense[d]);
			b->pred[i] = sigmoidf_(logit(m, b, i, xd));
		}
		if (b->eval)
			continue;
		for (uint32_t i = i0; i < i1; i++)
			st_auc_acc_add(t->acc, b->pred[i], b->labels[i]);

		/* Gradients, aggregated per unique key of the minibatch. */
		stamp++;
		uint32_t n_touched = 0;
		for (uint32_t d = 0; d <= nd; d++)
			t->dgrad[d] = 0.0;
		for (uint32_t i = i0; i < i1; i++) {
			float g = b->pred[i] - b->labels[i];
			const float *xd = t->xd + (size_t)(i - i0) * nd;
			for (uint32_t d = 0; d < nd; d++)
				t->dgrad[d] += (double)(g * xd[d]);
			t->dgrad[nd] += g;
			for (uint32_t k = b->row_off[i]; k < b->row_off[i + 1]; k++) {
				uint32_t u = b->key_idx[k];
				if (t->mark[u] != stamp) {
					t->mark[u] = stamp;
					t->grad[u] = 0.0f;
					t->touched[n_touched++] = u;
				}
				t->grad[u] += g * b->key_val[k];
			}
		}
		for (uint32_t j = 0; j < n_touched; j++) {
			uint32_t u = t->touched[j];
			float *r = rows[u];
			float g = t->grad[u] + m->l2 * ldf(r);
			adagrad(r, r + 1, g, m->lr, m->sgd);
		}
		for (uint32_t d = 0; d <= nd; d++) {
			float g = (float)t->dgrad[d];
			if (d < nd)
				g += m->l2 * ldf(&m->dw[d]);
			adagrad(&m->dw[d], &m->dacc[d], g, m->lr_dense, m->sgd);
		}
	}

	if (b->eval) {
		rc = eval_keep(t, b->pred, b->labels, b->n);
		if (rc < 0)
			return op_fail(ctx, rc, "out of memory keeping eval predictions");
		metrics_add(m, "eval_examples", b->n);
		return ST_OK;
	}
	metrics_add(m, "examples", b->n);
	t->since += b->n;
	if (t->since >= AUC_REFRESH) {
		t->since = 0;
		refresh_metrics(m);
	}
	return ST_OK;
}

static int train_finish(void *state, st_stage_ctx_t *ctx)
{
	refresh_metrics(state);
	return ST_OK;
}

void st_lr_progress(const st_lr_t *m, double *auc, double *logloss, uint64_t *n)
{
	const st_auc_acc_t *accs[ST_MAX_STAGE_THREADS];
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		accs[i] = __atomic_load_n(&m->train_t[i].acc, __ATOMIC_ACQUIRE);
	st_auc_stats_t s;
	st_auc_acc_read(accs, ST_MAX_STAGE_THREADS, &s);
	if (auc)
		*auc = s.auc;
	if (logloss)
		*logloss = s.logloss;
	if (n)
		*n = s.n;
}

void st_lr_reset_eval(st_lr_t *m)
{
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		m->train_t[i].ev_n = 0;
}

int st_lr_eval_result(st_lr_t *m, double *auc, double *logloss, double *calib,
		      uint64_t *n)
{
	size_t tot = 0;
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		tot += m->train_t[i].ev_n;
	float *p = malloc(sizeof(float) * (tot ? tot : 1));
	float *y = malloc(sizeof(float) * (tot ? tot : 1));
	if (!p || !y) {
		free(p);
		free(y);
		return ST_ENOMEM;
	}
	size_t o = 0;
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++) {
		lr_thread_t *t = &m->train_t[i];
		if (!t->ev_n)
			continue;
		memcpy(p + o, t->ev_pred, sizeof(float) * t->ev_n);
		memcpy(y + o, t->ev_label, sizeof(float) * t->ev_n);
		o += t->ev_n;
	}
	double a = NAN;
	int rc = st_auc_exact(p, y, tot, &a);
	if (rc >= 0) {
		if (auc)
			*auc = a;
		if (logloss)
			*logloss = st_logloss(p, y, tot);
		if (calib)
			*calib = st_calibration(p, y, tot);
		if (n)
			*n = tot;
	}
	free(p);
	free(y);
	return rc;
}

/* ---- push and dump --------------------------------------------------------- */

static int push_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			st_batch_t **out)
{
	st_lr_t *m = state;
	metrics_set(m, "rows", (double)st_table_size(m->table));
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

const st_stage_ops_t st_lr_pull_ops = {
	.name = "lr-pull",
	.process = pull_process,
};

const st_stage_ops_t st_lr_train_ops = {
	.name = "lr-train",
	.process = train_process,
	.finish = train_finish,
};

const st_stage_ops_t st_lr_push_ops = {
	.name = "lr-push",
	.process = push_process,
};

const st_stage_ops_t st_lr_dump_ops = {
	.name = "lr-dump",
	.process = dump_process,
};
