/*
 * step.c — one batch on the trainer's workers: the minibatch schedules
 * (LOCKSTEP, FREE), forward and backward of a minibatch (ops/nn), the loss
 * scale, the gradients handed to the sync policy, straggler delays and
 * step times for st.sync.auto. Orchestration (policy swaps, the stage op,
 * metrics) is trainer.c's; the threads are the pool's (pool.c).
 *
 * Threads: st__trainer_run on worker 0's thread (the train stage's graph
 * thread) runs one pool round; run_batch runs on every worker, each with
 * its own worker_t, writing only its own minibatches' predictions (b->pred)
 * and, through the policy, the shared parameters (the policy says how that
 * is synchronized). st__trainer_size_workers and the scratch it sizes are
 * worker 0's, between rounds.
 *
 * Where sparse updates are applied: here, at every step, by the policy —
 * not in push. A minibatch must see the updates of the minibatches before
 * it, rows included, exactly as a PyTorch loop over minibatches does
 * (optimizer.step() after each backward); deferring the row updates of a
 * whole batch to push would make every minibatch of the batch read the
 * batch-start rows, i.e. a different (and batch-size-dependent) algorithm
 * (docs/design-notes.md).
 *
 * Invariants: every worker finishes its share of every batch, whatever
 * happens (an error is recorded in tr->step.err and reported by worker 0
 * after the round), so no worker is ever left waiting at the pool's
 * barriers. A non-finite minibatch loss is handled the same way: the
 * worker records it (nf_count, the first one in nf), and worker 0 acts on
 * it after the round (trainer.c, check_nonfinite: fail the stage, or warn,
 * per stages.train.on_nonfinite). The per-worker `mark` stamps increase monotonically across
 * batches, so the mark array needs no clearing between minibatches or
 * batches.
 *
 * Step reads ahead (dist.prefetch; run_free_ahead): under a FREE policy
 * with ST_SYNC_STEP_ROWS from a remote source, a worker claims up to
 * `prefetch` minibatches beyond the one it trains and has their row reads
 * in flight meanwhile (its own ring of pslot_t), collecting each when it
 * gets there; 0 keeps the read right before each minibatch.
 *
 * Stragglers (st.stragglers): a slowed worker sleeps (slowdown - 1) * t
 * after computing a minibatch in t seconds, before apply. The sleep is a
 * real delay, emulating a slow machine — not synchronization — as a timed
 * wait on slow_cv, which st_trainer_cancel / destroy wake so shutdown never
 * waits one out.
 *
 * Locks: only slow_mu (the straggler sleep), never held with another.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/train/trainer_internal.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"
#include "runtime/trace.h"

int st__trainer_worker_init(st_trainer_t *tr, worker_t *w, int idx)
{
	w->idx = idx;
	w->gdense = malloc(sizeof(float) * (tr->pol.env.nparams ? tr->pol.env.nparams : 1));
	if (!w->gdense || st_model_ws_create(&w->ws, tr->model, tr->minibatch) < 0)
		return ST_ENOMEM;
	for (int h = 0; h < st_model_nheads(tr->model); h++)
		if (st_auc_acc_create(&w->acc[h], 16) < 0)
			return ST_ENOMEM;
	return ST_OK;
}

void st__trainer_worker_free(worker_t *w)
{
	st_model_ws_destroy(w->ws);
	free(w->gdense);
	free(w->gu);
	free(w->prow_buf);
	free(w->prow);
	free(w->mark);
	free(w->touched);
	free(w->ridx);
	free(w->rok);
	for (int i = 0; i < w->nps; i++) {
		free(w->ps[i].ridx);
		free(w->ps[i].rows);
		free(w->ps[i].ok);
	}
	free(w->ps);
	for (int h = 0; h < ST_MODEL_MAX_HEADS; h++)
		st_auc_acc_destroy(w->acc[h]);
}

void st_trainer_set_time_fn(st_trainer_t *tr, st_trainer_time_fn fn, void *ud)
{
	tr->step.time_fn = fn;
	tr->step.time_ud = ud;
}

void st_trainer_worker_stats(const st_trainer_t *tr, int w, uint64_t *minibatches,
			     uint64_t *examples, double *busy_s)
{
	const worker_t *x = &tr->step.w[w];
	if (minibatches)
		*minibatches = __atomic_load_n(&x->mbs, __ATOMIC_RELAXED);
	if (examples)
		*examples = __atomic_load_n(&x->examples, __ATOMIC_RELAXED);
	if (busy_s)
		*busy_s = x->busy;
}

/* ---- scratch --------------------------------------------------------------- */

/* Whether worker steps read their rows right before computing: the policy
 * asks for it (ST_SYNC_STEP_ROWS) and the row source has rows that change
 * elsewhere (remote; the local source's rows are the shared ones). */
static int step_rows(const st_trainer_t *tr)
{
	return (tr->pol.ops->flags & ST_SYNC_STEP_ROWS) && st_rowsrc_can_read_step(tr->rows.src);
}

/* The step reads a worker issues ahead of the minibatch it trains
 * (dist.prefetch): FREE policies with step rows from a source that can
 * (remote), not the policies that bound staleness themselves (hop_bs:
 * its clock rule counts steps, not rows read early), at most what the
 * source allows. 0: each minibatch reads its rows right before it. */
static int step_ahead(const st_trainer_t *tr)
{
	const st_sync_ops_t *ops = tr->pol.ops;
	if (!step_rows(tr) || ops->schedule != ST_SYNC_FREE ||
	    (ops->flags & ST_SYNC_BOUNDED_STALENESS))
		return 0;
	const int max = st_rowsrc_step_ahead_max(tr->rows.src);
	const int d = tr->dist.prefetch;
	return d < max ? d : max;
}

int st__trainer_size_workers(st_trainer_t *tr, uint32_t n_uniq)
{
	const int steprows = step_rows(tr);
	const int priv = (tr->pol.ops->flags & ST_SYNC_RELAXED_READS) || steprows ||
			 tr->rows.prec != ST_ROW_FP32;
	for (int i = 0; i < tr->N; i++) {
		worker_t *w = &tr->step.w[i];
		/* A policy switch may turn relaxed reads or step rows on after
		 * the scratch was sized without the private row copies. */
		if (n_uniq <= w->gcap && (!priv || w->prow) && (!steprows || w->ridx))
			continue;
		uint32_t cap = n_uniq + n_uniq / 2;
		free(w->gu);
		free(w->prow_buf);
		free(w->prow);
		free(w->mark);
		free(w->touched);
		free(w->ridx);
		free(w->rok);
		w->gu = malloc(sizeof(float) * cap * (size_t)tr->gstride);
		w->mark = calloc(cap, sizeof(uint32_t));
		w->touched = malloc(sizeof(uint32_t) * cap);
		w->prow_buf = priv ? malloc(sizeof(float) * cap * (size_t)tr->gstride) : NULL;
		w->prow = priv ? malloc(sizeof(float *) * cap) : NULL;
		w->ridx = steprows ? malloc(sizeof(uint32_t) * cap) : NULL;
		w->rok = steprows ? malloc(cap) : NULL;
		w->stamp = 0;
		if (!w->gu || !w->mark || !w->touched || (priv && (!w->prow_buf || !w->prow)) ||
		    (steprows && (!w->ridx || !w->rok))) {
			w->gcap = 0;
			return ST_ENOMEM;
		}
		w->gcap = cap;
	}
	return ST_OK;
}

static void set_err(st_trainer_t *tr, int rc)
{
	int zero = 0;
	__atomic_compare_exchange_n(&tr->step.err, &zero, rc, 0, __ATOMIC_RELAXED,
				    __ATOMIC_RELAXED);
}

static inline uint32_t mb_size(const st_trainer_t *tr, const st_batch_t *b, uint32_t mb)
{
	uint32_t r0 = mb * tr->minibatch;
	return b->n - r0 < tr->minibatch ? b->n - r0 : tr->minibatch;
}

/* ---- one minibatch ------------------------------------------------------------ */

/* ST_SYNC_STEP_ROWS: the current values of the minibatch's admitted rows
 * (w->touched[0..nt)) from the row source into w->prow; a row the source
 * no longer has trains on the batch's copy (its update is dropped there,
 * as for any row that expired). The batch's copies (b->rows) only say
 * which keys are admitted. */
static int read_step_rows(st_trainer_t *tr, worker_t *w, const st_batch_t *b, uint32_t nt)
{
	float *const *shared = b->rows;
	const int gs = tr->gstride;
	uint32_t m = 0;
	for (uint32_t i = 0; i < nt; i++) {
		const uint32_t u = w->touched[i];
		if (shared[u])
			w->ridx[m++] = u;
		w->prow[u] = NULL;
	}
	int rc = st_rowsrc_read_step(tr->rows.src, w->idx, b, st__batch_table(b), w->ridx, m,
				     w->prow_buf, (size_t)gs, w->rok);
	for (uint32_t q = 0; rc >= 0 && q < m; q++) {
		const uint32_t u = w->ridx[q];
		w->prow[u] = w->rok[u] ? w->prow_buf + (size_t)u * gs : shared[u];
	}
	return rc;
}

/* Prefetch: issues minibatch mb's step read into ps (its admitted rows,
 * found as compute() finds them: first occurrence, key order) without
 * waiting. Uses the worker's mark with a stamp of its own; no submit
 * comes between a compute() and its apply, whose gradients carry mark. */
static int submit_read(st_trainer_t *tr, worker_t *w, st_batch_t *b, uint32_t mb, pslot_t *ps)
{
	const uint32_t r0 = mb * tr->minibatch, n = mb_size(tr, b, mb);
	const uint32_t occ = b->row_off[r0 + n] - b->row_off[r0];
	const int gs = tr->gstride;
	if (occ > ps->cap) {
		const uint32_t cap = occ + occ / 2;
		free(ps->ridx);
		free(ps->rows);
		free(ps->ok);
		ps->ridx = malloc(sizeof(uint32_t) * cap);
		ps->rows = malloc(sizeof(float) * cap * (size_t)gs);
		ps->ok = malloc(cap);
		ps->cap = ps->ridx && ps->rows && ps->ok ? cap : 0;
		if (!ps->cap)
			return ST_ENOMEM;
	}
	float *const *shared = b->rows;
	const uint32_t stamp = ++w->stamp;
	uint32_t m = 0;
	for (uint32_t k = b->row_off[r0]; k < b->row_off[r0 + n]; k++) {
		const uint32_t u = b->key_idx[k];
		if (w->mark[u] == stamp)
			continue;
		w->mark[u] = stamp;
		if (shared[u])
			ps->ridx[m++] = u;
	}
	ps->mb = mb;
	ps->m = m;
	return st_rowsrc_step_submit(tr->rows.src, w->idx, b, st__batch_table(b), ps->ridx, m,
				     ps->rows, (size_t)gs, ps->ok);
}

/* Prefetch: the answers of the read issued for this minibatch (ps) into
 * w->prow, as read_step_rows does for a read made now. */
static int wait_read(st_trainer_t *tr, worker_t *w, const st_batch_t *b, uint32_t nt,
		     const pslot_t *ps)
{
	float *const *shared = b->rows;
	int rc = st_rowsrc_step_wait(tr->rows.src, w->idx);
	for (uint32_t i = 0; i < nt; i++)
		w->prow[w->touched[i]] = NULL;
	for (uint32_t q = 0; rc >= 0 && q < ps->m; q++) {
		const uint32_t u = ps->ridx[q];
		w->prow[u] = ps->ok[q] ? ps->rows + (size_t)q * tr->gstride : shared[u];
	}
	return rc;
}

/* A minibatch's training loss was NaN or infinite (worker w, any thread):
 * counted, and the first one recorded for the message (trainer.c,
 * check_nonfinite, after the round). */
static void note_nonfinite(st_trainer_t *tr, const worker_t *w, const st_batch_t *b,
			   uint32_t mb, double loss)
{
	struct tr_step *s = &tr->step;
	__atomic_fetch_add(&s->nf_count, 1, __ATOMIC_RELAXED);
	int zero = 0;
	if (!__atomic_compare_exchange_n(&s->nf_first, &zero, 1, 0, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;
	s->nf.loss = loss;
	s->nf.batch = tr->batches + 1;
	s->nf.seq = b->seq;
	s->nf.mb = mb;
	s->nf.nmb = s->nmb;
	s->nf.worker = w->idx;
}

/* Compact rows (storage.row_precision): the model reads fp32 rows, so a
 * worker decodes each row its minibatch touches into its private copy right
 * before computing — where a Hogwild worker copies its rows anyway, so the
 * values it trains on are as fresh as an fp32 run's. Each row is decoded
 * once per minibatch, not once per occurrence as a decoding pooling loop
 * would. The shared values are read as relaxed loads (a Hogwild writer may
 * change them meanwhile). NULL (no row) stays NULL. */
static float *decode_row(worker_t *w, const float *row, uint32_t u, int dim, int gs, int prec)
{
	if (!row)
		return NULL;
	float *p = w->prow_buf + (size_t)u * gs;
	st_sync_decode_relaxed(prec, p, row, (size_t)dim);
	return p;
}

/* An eval minibatch's rows, decoded (compact rows only; see decode_row). */
static float *const *eval_rows(st_trainer_t *tr, worker_t *w, const st_batch_t *b, uint32_t mb)
{
	const uint32_t r0 = mb * tr->minibatch, n = mb_size(tr, b, mb);
	const uint16_t *rdim = st__batch_row_dim(b);
	float *const *shared = b->rows;
	const uint32_t stamp = ++w->stamp;
	for (uint32_t k = b->row_off[r0]; k < b->row_off[r0 + n]; k++) {
		uint32_t u = b->key_idx[k];
		if (w->mark[u] == stamp)
			continue;
		w->mark[u] = stamp;
		w->prow[u] = decode_row(w, shared[u], u, rdim[u], tr->gstride, tr->rows.prec);
	}
	return w->prow;
}

/* Forward + backward of minibatch mb on worker w; fills g. ST_OK, or the
 * error of reading the step's rows (ST_SYNC_STEP_ROWS; g is then unset).
 * ps: the step read issued ahead for mb (prefetch), or NULL (read now). */
static int compute(st_trainer_t *tr, worker_t *w, st_batch_t *b, uint32_t mb,
		   const float *params, float scale, st_sync_grads_t *g, const pslot_t *ps)
{
	const uint32_t r0 = mb * tr->minibatch, n = mb_size(tr, b, mb);
	const uint16_t *rdim = st__batch_row_dim(b);
	float *const *shared = b->rows;
	const int relaxed = tr->pol.ops->flags & ST_SYNC_RELAXED_READS;
	const int steprows = step_rows(tr);
	const int prec = tr->rows.prec;
	const int gs = tr->gstride;
	uint32_t stamp = ++w->stamp, nt = 0;
	for (uint32_t k = b->row_off[r0]; k < b->row_off[r0 + n]; k++) {
		uint32_t u = b->key_idx[k];
		if (w->mark[u] == stamp)
			continue;
		w->mark[u] = stamp;
		w->touched[nt++] = u;
		float *gu = w->gu + (size_t)u * gs;
		memset(gu, 0, sizeof(float) * rdim[u]);
		if (prec != ST_ROW_FP32 && !steprows) {
			w->prow[u] = decode_row(w, shared[u], u, rdim[u], gs, prec);
		} else if (relaxed && !steprows) {
			float *p = shared[u] ? w->prow_buf + (size_t)u * gs : NULL;
			if (p)
				st_sync_load_relaxed(p, shared[u], rdim[u]);
			w->prow[u] = p;
		}
	}
	if (steprows) {
		const uint64_t tr0 = st_trace_enabled() ? st_trace_now() : 0;
		int rc = ps ? wait_read(tr, w, b, nt, ps) : read_step_rows(tr, w, b, nt);
		if (tr0)
			st_trace_span("work", "step rows", NULL, tr0, st_trace_now(), -1);
		if (rc < 0)
			return rc;
	}
	memset(w->gdense, 0, sizeof(float) * tr->pol.env.nparams);
	double loss = st_model_step(tr->model, w->ws, b, r0, n,
				    relaxed || steprows || prec != ST_ROW_FP32 ? w->prow : shared,
				    params, scale, b->pred + (size_t)r0 * st_model_nheads(tr->model),
				    w->gdense, w->gu, gs);
	if (!isfinite(loss))
		note_nonfinite(tr, w, b, mb, loss);
	/* Progressive metrics per head: head h predicted pred[i * H + h] for
	 * its label (one head, one label: pred[i] for labels[i]). */
	const int H = st_model_nheads(tr->model);
	const uint32_t L = b->n_labels;
	for (int h = 0; h < H; h++) {
		const uint32_t l = (uint32_t)st_model_head_label(tr->model, h);
		for (uint32_t i = r0; i < r0 + n; i++)
			st_auc_acc_add(w->acc[h], b->pred[(size_t)i * H + h],
				       b->labels[(size_t)i * L + l]);
	}
	*g = (st_sync_grads_t){
		.n_examples = n, .dense = w->gdense, .n_rows = nt, .uidx = w->touched,
		.rows = shared, .row_dim = rdim, .grad = w->gu, .gstride = gs,
		.mark = w->mark, .stamp = stamp, .keys = b->uniq,
		.utable = st__batch_table(b),
		.owner_token = st_rowsrc_versions(tr->rows.src, b),
	};
	return ST_OK;
}

/* ---- stragglers and step times ------------------------------------------------ */

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether worker w's minibatch number `step` is slowed: the fixed worker,
 * or a draw deterministic in (seed, worker, step). */
static int slowed(const st_trainer_t *tr, int w, uint64_t step)
{
	const st_straggler_cfg_t *c = &tr->step.strag;
	if (!c->enabled || !(c->slowdown > 1) || (c->steps && step >= c->steps))
		return 0;
	if (!c->random)
		return w == c->worker;
	uint64_t h = mix64(c->seed ^ mix64(((uint64_t)w << 40) ^ step ^ UINT64_C(0x9e3779b97f4a7c15)));
	return (double)(h >> 11) * 0x1.0p-53 < c->probability;
}

/* Sleeps secs unless the trainer is cancelled (then returns at once). */
static void straggle(st_trainer_t *tr, double secs)
{
	double until = mono_s() + secs;
	struct timespec ts;
	ts.tv_sec = (time_t)until;
	ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&tr->step.slow_mu);
	while (!tr->step.cancel &&
	       pthread_cond_timedwait(&tr->step.slow_cv, &tr->step.slow_mu, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&tr->step.slow_mu);
}

/* After worker w computed a minibatch of n examples since t0: the straggler
 * delay, the per-worker speed counters and auto's step-time sample. */
static void after_compute(st_trainer_t *tr, worker_t *w, double t0, uint32_t n)
{
	double t = mono_s() - t0;
	uint64_t step = w->mbs;
	if (slowed(tr, w->idx, step)) {
		double d = (tr->step.strag.slowdown - 1.0) * t;
		straggle(tr, d);
		t += d;
	}
	w->busy += t;
	__atomic_store_n(&w->mbs, step + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&w->examples, w->examples + n, __ATOMIC_RELAXED);
	if (tr->pol.autoc) {
		if (tr->step.time_fn)
			t = tr->step.time_fn(tr->step.time_ud, w->idx, step, t);
		st_auto_record(tr->pol.autoc, w->idx, t);
	}
}

/* ---- one batch: the schedules --------------------------------------------------- */

/* ops->apply, as a "sync apply" span on the worker's track when recording
 * (the policy's share of a step: barriers, exchanges, optimizer steps). */
static int traced_apply(const st_sync_ops_t *ops, void *obj, int w, st_sync_grads_t *g)
{
	if (!st_trace_enabled())
		return ops->apply(obj, w, g);
	const uint64_t t0 = st_trace_now();
	int rc = ops->apply(obj, w, g);
	st_trace_span("work", "sync apply", NULL, t0, st_trace_now(), -1);
	return rc;
}

/* FREE with step reads issued ahead (dist.prefetch = ahead > 0): worker w
 * claims minibatches from the shared counter up to `ahead` beyond the one
 * it trains and has their step reads in flight meanwhile, so the owners
 * answer while it computes. Issued after the previous minibatch's push,
 * a read misses this worker's updates of the (at most `ahead`)
 * minibatches between it and its own: the staleness the setting buys
 * (docs/distributed.md, "Prefetched step reads"). The reads end with the
 * batch (its rows and keys go with it); an error cancels those in flight. */
static void run_free_ahead(st_trainer_t *tr, worker_t *w, st_batch_t *b, int ahead)
{
	const uint32_t nmb = tr->step.nmb;
	const st_sync_ops_t *ops = tr->pol.ops;
	const int R = ahead + 1;
	if (w->nps < R) {
		pslot_t *p = realloc(w->ps, sizeof *p * (size_t)R);
		if (!p) {
			set_err(tr, ST_ENOMEM);
			return;
		}
		memset(p + w->nps, 0, sizeof *p * (size_t)(R - w->nps));
		w->ps = p;
		w->nps = R;
	}
	uint32_t head = 0, len = 0;
	int more = 1;
	st_sync_grads_t g;
	for (;;) {
		while (more && len < (uint32_t)R) {
			uint32_t mb = __atomic_fetch_add(&tr->step.next_mb, 1, __ATOMIC_RELAXED);
			if (mb >= nmb) {
				more = 0;
				break;
			}
			int rc = submit_read(tr, w, b, mb, &w->ps[(head + len) % (uint32_t)R]);
			if (rc < 0) {
				set_err(tr, rc);
				st_rowsrc_step_cancel(tr->rows.src, w->idx);
				return;
			}
			len++;
		}
		if (!len)
			break;
		const pslot_t *ps = &w->ps[head];
		head = (head + 1) % (uint32_t)R;
		len--;
		const uint32_t mb = ps->mb;
		const float *params = ops->begin_step(tr->pol.obj, w->idx, w->steps - w->step_base);
		float scale = tr->mean_loss ? 1.0f / (float)mb_size(tr, b, mb) : 1.0f;
		double t0 = mono_s();
		int rc = compute(tr, w, b, mb, params, scale, &g, ps);
		if (rc < 0) {
			set_err(tr, rc);
			st_rowsrc_step_cancel(tr->rows.src, w->idx);
			return;
		}
		after_compute(tr, w, t0, g.n_examples);
		rc = traced_apply(ops, tr->pol.obj, w->idx, &g);
		if (rc < 0)
			set_err(tr, rc);
		w->steps++;
	}
}

/* Worker w's share of batch tr->step.cur. Eval batches are only scored
 * (FREE order). LOCKSTEP: step s gives minibatch s*N + w to worker w, and
 * every worker calls begin_step / apply for every step (with nothing to
 * give when it has no minibatch); a multi-process lockstep batch is one
 * step of every rank over all the ranks' examples. FREE: the next
 * minibatch from a shared counter. Gradients are scaled here (sync.h):
 * 1 / the step's global examples for LOCKSTEP, 1 / the minibatch's for
 * FREE, for mean-loss models. */
static void run_batch(st_trainer_t *tr, worker_t *w)
{
	st_batch_t *b = tr->step.cur;
	const uint32_t nmb = tr->step.nmb;
	const int N = tr->N;
	const st_sync_ops_t *ops = tr->pol.ops;
	if (b->eval) {
		/* Scoring only: nothing writes parameters meanwhile. */
		const float *params = st_model_params(tr->model);
		for (;;) {
			uint32_t mb = __atomic_fetch_add(&tr->step.next_mb, 1, __ATOMIC_RELAXED);
			if (mb >= nmb)
				break;
			float *const *rows = tr->rows.prec != ST_ROW_FP32
						     ? eval_rows(tr, w, b, mb) : b->rows;
			st_model_forward(tr->model, w->ws, b, mb * tr->minibatch,
					 mb_size(tr, b, mb), rows, params, NULL,
					 b->pred + (size_t)mb * tr->minibatch *
							   st_model_nheads(tr->model));
		}
		return;
	}
	st_sync_grads_t g;
	if (ops->schedule == ST_SYNC_LOCKSTEP) {
		/* A multi-process batch is one step of every rank (also with no
		 * data here), over the examples of all the ranks' batches. */
		const uint32_t nsteps = tr->dist.lockstep ? 1 : (nmb + (uint32_t)N - 1) / (uint32_t)N;
		for (uint32_t s = 0; s < nsteps; s++) {
			const uint32_t mb = s * (uint32_t)N + (uint32_t)w->idx;
			uint32_t tot = 0;
			for (uint32_t v = s * (uint32_t)N; v < (s + 1) * (uint32_t)N && v < nmb; v++)
				tot += mb_size(tr, b, v);
			if (tr->dist.lockstep)
				tot = tr->dist.tot;
			float scale = tr->mean_loss ? 1.0f / (float)tot : 1.0f;
			const float *params = ops->begin_step(tr->pol.obj, w->idx,
							      tr->step.gstep - tr->step.gstep_base + s);
			if (mb < nmb) {
				double t0 = mono_s();
				int rc = compute(tr, w, b, mb, params, scale, &g, NULL);
				if (rc < 0) {
					/* Still take part in the step (its barriers),
					 * with nothing to give. */
					set_err(tr, rc);
					g = (st_sync_grads_t){ .n_examples = 0, .dense = w->gdense,
							       .gstride = tr->gstride };
				}
				after_compute(tr, w, t0, g.n_examples);
			} else
				g = (st_sync_grads_t){ .n_examples = 0, .dense = w->gdense,
						       .gstride = tr->gstride };
			int rc = traced_apply(ops, tr->pol.obj, w->idx, &g);
			if (rc < 0)
				set_err(tr, rc);
			w->steps += mb < nmb;
		}
	} else if (step_ahead(tr) > 0) {
		run_free_ahead(tr, w, b, step_ahead(tr));
	} else {
		for (;;) {
			uint32_t mb = __atomic_fetch_add(&tr->step.next_mb, 1, __ATOMIC_RELAXED);
			if (mb >= nmb)
				break;
			const float *params = ops->begin_step(tr->pol.obj, w->idx,
							      w->steps - w->step_base);
			float scale = tr->mean_loss ? 1.0f / (float)mb_size(tr, b, mb) : 1.0f;
			double t0 = mono_s();
			int rc = compute(tr, w, b, mb, params, scale, &g, NULL);
			if (rc < 0) {
				set_err(tr, rc);
				break;
			}
			after_compute(tr, w, t0, g.n_examples);
			rc = traced_apply(ops, tr->pol.obj, w->idx, &g);
			if (rc < 0)
				set_err(tr, rc);
			w->steps++;
		}
	}
	ops->end_batch(tr->pol.obj, w->idx);
}

/* The pool's work for a batch: worker w's share of tr->step.cur. */
static void batch_work(void *arg, int w)
{
	st_trainer_t *tr = arg;
	run_batch(tr, &tr->step.w[w]);
}

void st__trainer_run(st_trainer_t *tr, st_batch_t *b)
{
	tr->step.cur = b;
	tr->step.nmb = (b->n + tr->minibatch - 1) / tr->minibatch;
	tr->step.next_mb = 0;
	tr->step.err = 0;
	tr->step.pool.trace_id = (int64_t)b->seq;
	st_pool_run(&tr->step.pool, batch_work, tr);
}
