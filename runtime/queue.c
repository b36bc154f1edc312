/*
 * queue.c — bounded MPMC queue: a ring buffer under one mutex, with one
 * condition variable for "not full" (producers wait on it) and one for "not
 * empty" (consumers wait on it).
 *
 * Threads: any number of producers and consumers; the queue starts none.
 *
 * Invariants (under mu): 0 <= len <= cap; the items are ring[head],
 * ring[(head+1) % cap], ... in push order; once closed or canceled a queue
 * never reopens; canceled takes precedence over closed.
 *
 * Ordering: one producer's items come out in the order it pushed them; with
 * several producers, items are ordered by the time each push took the lock.
 *
 * Waiting: a thread that must block measures the time it spent in
 * pthread_cond_wait, so a stage can report how long it was starved (empty
 * input) or back-pressured (full output). The clock is read only when a
 * thread actually blocks, so the fast path costs nothing extra.
 *
 * One lock only (mu); fn in st_queue_drain is called without it.
 */
#include "queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct st_queue {
	pthread_mutex_t mu;
	pthread_cond_t not_full;
	pthread_cond_t not_empty;
	size_t cap, head, len;
	int closed, canceled;
	int push_waiting, pop_waiting;
	uint64_t push_wait_ns, pop_wait_ns;
	uint64_t pushed, popped;
	void **ring;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int st_queue_create(st_queue_t **out, size_t cap)
{
	*out = NULL;
	if (cap < 1 || cap > SIZE_MAX / sizeof(void *))
		return -EINVAL;
	st_queue_t *q = calloc(1, sizeof *q);
	if (!q)
		return -ENOMEM;
	q->ring = malloc(cap * sizeof(void *));
	if (!q->ring) {
		free(q);
		return -ENOMEM;
	}
	q->cap = cap;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->not_full, NULL);
	pthread_cond_init(&q->not_empty, NULL);
	*out = q;
	return 0;
}

void st_queue_destroy(st_queue_t *q)
{
	if (!q)
		return;
	pthread_cond_destroy(&q->not_empty);
	pthread_cond_destroy(&q->not_full);
	pthread_mutex_destroy(&q->mu);
	free(q->ring);
	free(q);
}

/* Called with mu held and room in the ring. */
static void put_locked(st_queue_t *q, void *item)
{
	q->ring[(q->head + q->len) % q->cap] = item;
	q->len++;
	q->pushed++;
	/* One item frees one consumer; signal, not broadcast, avoids a herd. */
	pthread_cond_signal(&q->not_empty);
}

static void *take_locked(st_queue_t *q)
{
	void *item = q->ring[q->head];
	q->head = (q->head + 1) % q->cap;
	q->len--;
	q->popped++;
	pthread_cond_signal(&q->not_full);
	return item;
}

static int push_impl(st_queue_t *q, void *item, int block)
{
	int rc = 0;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		if (q->canceled) {
			rc = -ECANCELED;
			break;
		}
		if (q->closed) {
			rc = -EPIPE;
			break;
		}
		if (q->len < q->cap) {
			put_locked(q, item);
			break;
		}
		if (!block) {
			rc = -EAGAIN;
			break;
		}
		q->push_waiting++;
		uint64_t t0 = now_ns();
		pthread_cond_wait(&q->not_full, &q->mu);
		q->push_wait_ns += now_ns() - t0;
		q->push_waiting--;
	}
	pthread_mutex_unlock(&q->mu);
	return rc;
}

static int pop_impl(st_queue_t *q, void **item, int block)
{
	int rc = 0;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		if (q->canceled) {
			rc = -ECANCELED;
			break;
		}
		if (q->len > 0) {
			*item = take_locked(q);
			break;
		}
		if (q->closed) {
			rc = -EPIPE;
			break;
		}
		if (!block) {
			rc = -EAGAIN;
			break;
		}
		q->pop_waiting++;
		uint64_t t0 = now_ns();
		pthread_cond_wait(&q->not_empty, &q->mu);
		q->pop_wait_ns += now_ns() - t0;
		q->pop_waiting--;
	}
	pthread_mutex_unlock(&q->mu);
	return rc;
}

int st_queue_push(st_queue_t *q, void *item)
{
	return push_impl(q, item, 1);
}

int st_queue_try_push(st_queue_t *q, void *item)
{
	return push_impl(q, item, 0);
}

int st_queue_pop(st_queue_t *q, void **item)
{
	return pop_impl(q, item, 1);
}

int st_queue_try_pop(st_queue_t *q, void **item)
{
	return pop_impl(q, item, 0);
}

void st_queue_close(st_queue_t *q)
{
	pthread_mutex_lock(&q->mu);
	q->closed = 1;
	/* Every blocked thread must re-check: producers fail, consumers drain. */
	pthread_cond_broadcast(&q->not_full);
	pthread_cond_broadcast(&q->not_empty);
	pthread_mutex_unlock(&q->mu);
}

void st_queue_cancel(st_queue_t *q)
{
	pthread_mutex_lock(&q->mu);
	q->canceled = 1;
	pthread_cond_broadcast(&q->not_full);
	pthread_cond_broadcast(&q->not_empty);
	pthread_mutex_unlock(&q->mu);
}

size_t st_queue_drain(st_queue_t *q, void (*fn)(void *item, void *arg), void *arg)
{
	size_t n = 0;
	for (;;) {
		pthread_mutex_lock(&q->mu);
		if (q->len == 0) {
			pthread_mutex_unlock(&q->mu);
			break;
		}
		void *item = take_locked(q);
		pthread_mutex_unlock(&q->mu);
		/* fn may free memory or take other locks: never under mu. */
		if (fn)
			fn(item, arg);
		n++;
	}
	return n;
}

size_t st_queue_len(st_queue_t *q)
{
	pthread_mutex_lock(&q->mu);
	size_t n = q->len;
	pthread_mutex_unlock(&q->mu);
	return n;
}

size_t st_queue_cap(const st_queue_t *q)
{
	/* cap never changes after creation, so no lock is needed. */
	return q->cap;
}

void st_queue_stats(st_queue_t *q, st_queue_stats_t *out)
{
	pthread_mutex_lock(&q->mu);
	out->len = q->len;
	out->cap = q->cap;
	out->push_waiting = q->push_waiting;
	out->pop_waiting = q->pop_waiting;
	out->push_wait_ns = q->push_wait_ns;
	out->pop_wait_ns = q->pop_wait_ns;
	out->pushed = q->pushed;
	out->popped = q->popped;
	pthread_mutex_unlock(&q->mu);
}
