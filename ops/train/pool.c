/*
 * pool.c — the trainer's worker pool, its whole life in one file (libuv's
 * src/threadpool.c habit; the API and the ordering it promises are in
 * pool.h).
 *
 * Life:
 *  - init: storage only; no thread runs.
 *  - start (the first round, or the train stage's thread_start): workers
 *    1..n-1 are created; each names itself "<name>-<w>", pins itself to
 *    its cpu when it has one, and posts `ready` — the start handshake:
 *    start returns once every worker runs, so a round never waits on a
 *    thread the OS has yet to schedule for the first time, and a pinning
 *    failure is reported before training, not in the middle of it.
 *  - a round: the caller (worker 0) publishes fn/arg, passes the start
 *    barrier, runs fn(arg, 0), passes the end barrier. Each worker thread
 *    waits at the start barrier, runs fn(arg, w), waits at the end
 *    barrier, and loops. Every worker reaches both barriers of every round
 *    whatever fn does (fn reports errors through its own state), so no
 *    worker is ever left waiting.
 *  - stop: the caller publishes the exit sentinel as the round's work and
 *    passes the start barrier once more; each worker sees the sentinel,
 *    returns without touching the end barrier, and is joined.
 *  - fini: stop, then free.
 *
 * Ordering: a barrier is a full memory barrier for the threads passing it,
 * so what the caller wrote before the start barrier (the batch, its
 * scratch) is visible to every worker in the round, and what workers wrote
 * (predictions, gradients, statistics) is visible to the caller after the
 * end barrier. fn/arg are written only between rounds.
 *
 * Lock order: the pool takes no lock of its own (barriers and one
 * semaphore); fn may take the trainer's and the tables' locks, never while
 * another worker waits on it at a barrier (a policy that blocks workers
 * must let every worker reach the end of its share, sync.h).
 */
#include "ops/train/pool.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"
#include "runtime/trace.h"

/* The round's work that tells a worker thread to return. */
static void pool_exit(void *arg, int w)
{
	(void)arg;
	(void)w;
}

int st_pool_init(st_pool_t *p, int n, const char *name)
{
	memset(p, 0, sizeof *p);
	p->n = n;
	snprintf(p->name, sizeof p->name, "%s", name);
	p->t = calloc((size_t)n, sizeof *p->t);
	if (!p->t)
		return ST_ENOMEM;
	for (int i = 0; i < n; i++)
		p->t[i] = (st_pool_thread_t){ .pool = p, .idx = i, .cpu = -1 };
	pthread_barrier_init(&p->bar, NULL, (unsigned)n);
	sem_init(&p->ready, 0, 0);
	return ST_OK;
}

void st_pool_fini(st_pool_t *p)
{
	if (!p->t)
		return;
	st_pool_stop(p);
	pthread_barrier_destroy(&p->bar);
	sem_destroy(&p->ready);
	free(p->t);
	p->t = NULL;
}

void st_pool_pin(st_pool_t *p, const int *cpus, int ncpus)
{
	for (int i = 1; i < p->n; i++)
		p->t[i].cpu = i < ncpus ? cpus[i] : -1;
}

/* One worker's share of a round; a "train worker" span with the batch id
 * on the worker's trace track when recording (runtime/trace.h). */
static void run_traced(st_pool_t *p, int w)
{
	if (!st_trace_enabled()) {
		p->fn(p->arg, w);
		return;
	}
	uint64_t t0 = st_trace_now();
	p->fn(p->arg, w);
	st_trace_span("work", "train worker", NULL, t0, st_trace_now(), p->trace_id);
}

static void *worker_main(void *arg)
{
	st_pool_thread_t *t = arg;
	st_pool_t *p = t->pool;
	char name[16];
	snprintf(name, sizeof name, "%s-%d", p->name, t->idx);
	pthread_setname_np(pthread_self(), name);
	if (t->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(t->cpu, &set);
		if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
			st_debug("train worker %d: cannot pin to cpu %d", t->idx, t->cpu);
	}
	sem_post(&p->ready);
	for (;;) {
		pthread_barrier_wait(&p->bar);         /* start */
		if (p->fn == pool_exit)
			return NULL;
		run_traced(p, t->idx);
		pthread_barrier_wait(&p->bar);         /* end */
	}
}

int st_pool_start(st_pool_t *p)
{
	if (p->started)
		return ST_OK;
	for (int i = 1; i < p->n; i++)
		if (pthread_create(&p->t[i].tid, NULL, worker_main, &p->t[i]) != 0)
			st_die("cannot start train worker %d", i);
	for (int i = 1; i < p->n; i++)
		while (sem_wait(&p->ready) != 0)
			;   /* EINTR */
	p->started = 1;
	return ST_OK;
}

void st_pool_stop(st_pool_t *p)
{
	if (!p->started)
		return;
	p->fn = pool_exit;
	p->arg = NULL;
	pthread_barrier_wait(&p->bar);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->t[i].tid, NULL);
	p->fn = NULL;
	p->started = 0;
}

void st_pool_run(st_pool_t *p, st_pool_fn fn, void *arg)
{
	if (p->n > 1 && !p->started)
		st_pool_start(p);
	p->fn = fn;
	p->arg = arg;
	if (p->n > 1)
		pthread_barrier_wait(&p->bar);         /* start */
	run_traced(p, 0);
	if (p->n > 1)
		pthread_barrier_wait(&p->bar);         /* end */
}
