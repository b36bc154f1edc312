/*
 * queue.h — bounded multi-producer multi-consumer queue of pointers.
 *
 * The queue joins pipeline stages: a full queue blocks its producers
 * (back-pressure), an empty one blocks its consumers. Closing it lets the
 * consumers drain what is left and then see ST_EPIPE; canceling it wakes
 * everyone at once and makes every later call fail with ST_ECANCELED, leaving
 * the items inside for st_queue_drain so that their owner can free them.
 *
 * Library-grade: this header and queue.c include no runtime-wide header. Error
 * codes are negative errno values, equal to the ST_E* codes of err.h
 * (ST_EPIPE == -EPIPE, ST_ECANCELED == -ECANCELED, ST_EAGAIN == -EAGAIN,
 * ST_EINVAL == -EINVAL, ST_ENOMEM == -ENOMEM).
 *
 * Ownership: the queue never frees an item. An item pushed successfully
 * belongs to whoever pops (or drains) it; on any push error the item was not
 * taken and still belongs to the caller.
 *
 * Thread-safety: every function is thread-safe except st_queue_destroy, which
 * must not race with any other call on the same queue.
 */
#ifndef ST_QUEUE_H
#define ST_QUEUE_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_queue st_queue_t;

/* Creates an empty open queue holding at most cap items. ST_OK and *out;
 * ST_EINVAL if cap < 1; ST_ENOMEM. The caller destroys it. */
int st_queue_create(st_queue_t **out, size_t cap);

/* Frees the queue (NULL-safe). Items still inside are not freed: drain first
 * if they own memory. No thread may be blocked in the queue. */
void st_queue_destroy(st_queue_t *q);

/* Appends item, blocking while the queue is full. ST_OK; ST_EPIPE if the
 * queue is closed; ST_ECANCELED if it is (or becomes, while blocked)
 * canceled. On error the item was not taken. */
int st_queue_push(st_queue_t *q, void *item);

/* Like st_queue_push but never blocks: ST_EAGAIN if the queue is full. */
int st_queue_try_push(st_queue_t *q, void *item);

/* Removes the oldest item into *item, blocking while the queue is empty and
 * open. ST_OK; ST_EPIPE when closed and empty; ST_ECANCELED once canceled
 * (even if items remain: those are for st_queue_drain). */
int st_queue_pop(st_queue_t *q, void **item);

/* Like st_queue_pop but never blocks: ST_EAGAIN if empty and still open. */
int st_queue_try_pop(st_queue_t *q, void **item);

/* Refuses further pushes; pops drain the remaining items and then return
 * ST_EPIPE. Wakes every blocked thread. Idempotent. */
void st_queue_close(st_queue_t *q);

/* From now on every push and pop returns ST_ECANCELED; wakes every blocked
 * thread. Items stay inside for st_queue_drain. Idempotent. */
void st_queue_cancel(st_queue_t *q);

/* Removes every item in FIFO order and calls fn(item, arg) on each (fn may be
 * NULL). fn runs without the queue lock held. Returns the number removed.
 * Works on open, closed and canceled queues. */
size_t st_queue_drain(st_queue_t *q, void (*fn)(void *item, void *arg), void *arg);

/* Current number of items (a snapshot). */
size_t st_queue_len(st_queue_t *q);

/* Capacity given at creation. */
size_t st_queue_cap(const st_queue_t *q);

/* Counters for metrics and tests: threads blocked right now on each side, and
 * the total nanoseconds (CLOCK_MONOTONIC) each side spent blocked so far.
 * Only time spent actually waiting on a condition variable is counted. */
typedef struct st_queue_stats {
	size_t len, cap;
	int push_waiting;        /* producers blocked because the queue is full */
	int pop_waiting;         /* consumers blocked because it is empty */
	uint64_t push_wait_ns;
	uint64_t pop_wait_ns;
	uint64_t pushed, popped; /* items that went in / came out (drain included) */
} st_queue_stats_t;

void st_queue_stats(st_queue_t *q, st_queue_stats_t *out);

#endif
