/*
 * score.c — the scorer's whole life (score.h): a few workers that split a
 * batch into minibatches and run the model's forward pass on each.
 *
 * Per batch: the caller's thread looks the keys up (st_view_lookup),
 * publishes the batch as a new generation and computes minibatches itself
 * as worker 0; workers 1..N-1 wake on the generation, take minibatch
 * numbers from one atomic counter until none is left, and report back by
 * counting `active` down; the caller waits for 0, then unpins the rows.
 * A minibatch's scores do not depend on the worker that computed it.
 *
 * Shutdown: destroy sets `stop` and wakes every worker (the sentinel); each
 * returns at its next wait. A batch is never in flight then (one caller,
 * and run returns only once every worker is done with it).
 *
 * Locks: one mutex, `mu` (generation, active, stop); never held while
 * computing. Threads: "st-score-<n>", n = 1..N-1.
 */
#include "ops/view/score.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"
#include "runtime/graph.h"

typedef struct scorer_worker {
	struct st_scorer *s;
	int idx;
	pthread_t tid;
	st_model_ws_t *ws;
} scorer_worker_t;

struct st_scorer {
	const st_view_t *v;
	int N;
	uint32_t minibatch;
	scorer_worker_t *w;
	st_view_lookup_t look;     /* the caller's lookup scratch */

	pthread_mutex_t mu;
	pthread_cond_t work_cv;    /* a new generation, or stop */
	pthread_cond_t done_cv;    /* active reached 0 */
	uint64_t gen;              /* under mu */
	int active;                /* workers 1..N-1 still on gen; under mu */
	int stop;                  /* under mu */
	int started;               /* workers 1..started-1 run */

	st_batch_t *cur;           /* the batch of gen (read-only for workers) */
	uint32_t nmb;
	uint32_t next_mb;          /* atomic */
};

/* Scores minibatches of the current batch until none is left. */
static void score_minibatches(st_scorer_t *s, scorer_worker_t *w)
{
	st_batch_t *b = s->cur;
	const float *params = st_model_params(s->v->model);
	for (;;) {
		const uint32_t mb = __atomic_fetch_add(&s->next_mb, 1, __ATOMIC_RELAXED);
		if (mb >= s->nmb)
			return;
		const uint32_t r0 = mb * s->minibatch;
		const uint32_t n = b->n - r0 < s->minibatch ? b->n - r0 : s->minibatch;
		st_model_forward(s->v->model, w->ws, b, r0, n, b->rows, params, NULL,
				 b->pred + (size_t)r0 * st_model_nheads(s->v->model));
	}
}

static void *worker_main(void *arg)
{
	scorer_worker_t *w = arg;
	st_scorer_t *s = w->s;
	char name[16];
	snprintf(name, sizeof name, "st-score-%d", w->idx);
	pthread_setname_np(pthread_self(), name);
	uint64_t seen = 0;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->stop && s->gen == seen)
			pthread_cond_wait(&s->work_cv, &s->mu);
		if (s->stop)
			break;
		seen = s->gen;
		pthread_mutex_unlock(&s->mu);
		score_minibatches(s, w);
		pthread_mutex_lock(&s->mu);
		if (--s->active == 0)
			pthread_cond_signal(&s->done_cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int st_scorer_create(st_scorer_t **out, const st_view_t *v, int threads, int minibatch)
{
	*out = NULL;
	if (threads < 1 || threads > ST_MAX_STAGE_THREADS || minibatch < 1)
		return ST_EINVAL;
	st_scorer_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->v = v;
	s->N = threads;
	s->minibatch = (uint32_t)minibatch;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work_cv, NULL);
	pthread_cond_init(&s->done_cv, NULL);
	s->started = 1;
	int rc = (s->w = calloc((size_t)threads, sizeof *s->w)) ? ST_OK : ST_ENOMEM;
	for (int i = 0; i < threads && rc >= 0; i++) {
		s->w[i].s = s;
		s->w[i].idx = i;
		rc = st_model_ws_create(&s->w[i].ws, v->model, s->minibatch);
	}
	for (int i = 1; i < threads && rc >= 0; i++) {
		int e = pthread_create(&s->w[i].tid, NULL, worker_main, &s->w[i]);
		if (e)
			rc = -e;
		else
			s->started = i + 1;
	}
	if (rc < 0) {
		st_scorer_destroy(s);
		return rc;
	}
	*out = s;
	return ST_OK;
}

int st_scorer_run(st_scorer_t *s, st_batch_t *b)
{
	const st_view_t *v = s->v;
	if ((int)b->n_dense != v->n_dense || (int)b->n_slots > v->n_slots)
		return ST_EINVAL;
	int rc = st_view_lookup(v, &s->look, b);
	if (rc < 0)
		return rc;
	s->cur = b;
	s->nmb = (b->n + s->minibatch - 1) / s->minibatch;
	s->next_mb = 0;
	if (s->started > 1) {
		pthread_mutex_lock(&s->mu);
		s->active = s->started - 1;
		s->gen++;
		pthread_cond_broadcast(&s->work_cv);
		pthread_mutex_unlock(&s->mu);
	}
	score_minibatches(s, &s->w[0]);
	if (s->started > 1) {
		pthread_mutex_lock(&s->mu);
		while (s->active > 0)
			pthread_cond_wait(&s->done_cv, &s->mu);
		pthread_mutex_unlock(&s->mu);
	}
	s->cur = NULL;
	st_view_release(v, b);
	return ST_OK;
}

void st_scorer_destroy(st_scorer_t *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_broadcast(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
	for (int i = 1; i < s->started; i++)
		pthread_join(s->w[i].tid, NULL);
	for (int i = 0; s->w && i < s->N; i++)
		st_model_ws_destroy(s->w[i].ws);
	free(s->w);
	st_view_lookup_fini(&s->look);
	pthread_cond_destroy(&s->work_cv);
	pthread_cond_destroy(&s->done_cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
