/* test_queue.c — bounded MPMC queue: order, capacity, stress, close, cancel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"
#include "runtime/queue.h"

#define ITEM(i) ((void *)(uintptr_t)(i))
#define ID(p) ((uintptr_t)(p))

/* Spins (yielding) until n threads are blocked on the given side. Polling a
 * counter the queue maintains under its lock tells us the thread is inside
 * pthread_cond_wait, which no sleep could guarantee. */
static void wait_blocked(st_queue_t *q, int pushers, int poppers)
{
	for (;;) {
		st_queue_stats_t s;
		st_queue_stats(q, &s);
		if (s.push_waiting == pushers && s.pop_waiting == poppers)
			return;
		sched_yield();
	}
}

static void test_queue_create_rejects_zero_cap(void **state)
{
	(void)state;
	st_queue_t *q = (st_queue_t *)1;
	assert_int_equal(st_queue_create(&q, 0), ST_EINVAL);
	assert_null(q);
	st_queue_destroy(NULL);
}

/* Fills to capacity, checks try_push refuses, then empties in FIFO order. */
static void fill_and_empty(size_t cap)
{
	st_queue_t *q;
	assert_int_equal(st_queue_create(&q, cap), ST_OK);
	assert_int_equal(st_queue_cap(q), cap);
	void *p;
	assert_int_equal(st_queue_try_pop(q, &p), ST_EAGAIN);
	for (size_t round = 0; round < 3; round++) {
		for (size_t i = 0; i < cap; i++)
			assert_int_equal(st_queue_try_push(q, ITEM(i + 1)), ST_OK);
		assert_int_equal(st_queue_len(q), cap);
		assert_int_equal(st_queue_try_push(q, ITEM(999999)), ST_EAGAIN);
		assert_int_equal(st_queue_len(q), cap);
		for (size_t i = 0; i < cap; i++) {
			assert_int_equal(st_queue_pop(q, &p), ST_OK);
			assert_int_equal(ID(p), i + 1);
		}
		assert_int_equal(st_queue_try_pop(q, &p), ST_EAGAIN);
		/* Interleave so head wraps around the ring at every offset. */
		assert_int_equal(st_queue_push(q, ITEM(7)), ST_OK);
		assert_int_equal(st_queue_pop(q, &p), ST_OK);
		assert_int_equal(ID(p), 7);
	}
	st_queue_destroy(q);
}

static void test_queue_capacity_1_2_1024(void **state)
{
	(void)state;
	fill_and_empty(1);
	fill_and_empty(2);
	fill_and_empty(1024);
}

#define FIFO_N 100000

static void *fifo_producer(void *arg)
{
	st_queue_t *q = arg;
	for (uintptr_t i = 1; i <= FIFO_N; i++)
		if (st_queue_push(q, ITEM(i)) != ST_OK)
			return ITEM(1);
	st_queue_close(q);
	return NULL;
}

static void test_queue_fifo_one_producer_one_consumer(void **state)
{
	(void)state;
	st_queue_t *q;
	assert_int_equal(st_queue_create(&q, 3), ST_OK);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, fifo_producer, q), 0);
	uintptr_t expect = 1;
	void *p;
	int rc;
	while ((rc = st_queue_pop(q, &p)) == ST_OK) {
		assert_int_equal(ID(p), expect);
		expect++;
	}
	assert_int_equal(rc, ST_EPIPE);
	assert_int_equal(expect, FIFO_N + 1);
	void *ret;
	pthread_join(t, &ret);
	assert_null(ret);
	st_queue_destroy(q);
}

#define MP_PRODUCERS 4
#define MP_CONSUMERS 4
#define MP_PER_PRODUCER 25000
#define MP_TOTAL (MP_PRODUCERS * MP_PER_PRODUCER)

struct mpmc {
	st_queue_t *q;
	int id;
	_Atomic unsigned *seen;     /* seen[item id] counts receptions */
	_Atomic int *producers_left;
	uintptr_t last[MP_PRODUCERS]; /* per consumer: last seq seen per producer */
	int order_ok;
};

static void *mp_producer(void *arg)
{
	struct mpmc *a = arg;
	for (uintptr_t i = 0; i < MP_PER_PRODUCER; i++) {
		uintptr_t id = (uintptr_t)a->id * MP_PER_PRODUCER + i;
		/* Mix blocking and non-blocking pushes. */
		if (i % 3 == 0) {
			int rc;
			while ((rc = st_queue_try_push(a->q, ITEM(id + 1))) == ST_EAGAIN)
				sched_yield();
			if (rc != ST_OK)
				return ITEM(1);
		} else if (st_queue_push(a->q, ITEM(id + 1)) != ST_OK) {
			return ITEM(1);
		}
	}
	if (atomic_fetch_sub(a->producers_left, 1) == 1)
		st_queue_close(a->q);
	return NULL;
}

static void *mp_consumer(void *arg)
{
	struct mpmc *a = arg;
	void *p;
	int rc;
	a->order_ok = 1;
	for (int i = 0; i < MP_PRODUCERS; i++)
		a->last[i] = 0;
	while ((rc = st_queue_pop(a->q, &p)) == ST_OK) {
		uintptr_t id = ID(p) - 1;
		atomic_fetch_add(&a->seen[id], 1);
		/* Items of one producer reach any one consumer in push order. */
		uintptr_t prod = id / MP_PER_PRODUCER, seq = id % MP_PER_PRODUCER + 1;
		if (seq <= a->last[prod])
			a->order_ok = 0;
		a->last[prod] = seq;
	}
	return rc == ST_EPIPE ? NULL : ITEM(1);
}

static void test_queue_mpmc_every_item_exactly_once(void **state)
{
	(void)state;
	st_queue_t *q;
	assert_int_equal(st_queue_create(&q, 8), ST_OK);
	_Atomic unsigned *seen = calloc(MP_TOTAL, sizeof *seen);
	assert_non_null(seen);
	_Atomic int left = MP_PRODUCERS;
	struct mpmc prod[MP_PRODUCERS], cons[MP_CONSUMERS];
	pthread_t tp[MP_PRODUCERS], tc[MP_CONSUMERS];
	for (int i = 0; i < MP_CONSUMERS; i++) {
		cons[i] = (struct mpmc){ .q = q, .id = i, .seen = seen, .producers_left = &left };
		assert_int_equal(pthread_create(&tc[i], NULL, mp_consumer, &cons[i]), 0);
	}
	for (int i = 0; i < MP_PRODUCERS; i++) {
		prod[i] = (struct mpmc){ .q = q, .id = i, .seen = seen, .producers_left = &left };
		assert_int_equal(pthread_create(&tp[i], NULL, mp_producer, &prod[i]), 0);
	}
	void *ret;
	for (int i = 0; i < MP_PRODUCERS; i++) {
		pthread_join(tp[i], &ret);
		assert_null(ret);
	}
	for (int i = 0; i < MP_CONSUMERS; i++) {
		pthread_join(tc[i], &ret);
		assert_null(ret);
		assert_true(cons[i].order_ok);
	}
	for (size_t i = 0; i < MP_TOTAL; i++)
		if (seen[i] != 1)
			fail_msg("item %zu received %u times", i, (unsigned)seen[i]);
	st_queue_stats_t s;
	st_queue_stats(q, &s);
	assert_int_equal(s.pushed, MP_TOTAL);
	assert_int_equal(s.popped, MP_TOTAL);
	assert_int_equal(s.len, 0);
	free(seen);
	st_queue_destroy(q);
}

struct blocked {
	st_queue_t *q;
	pthread_barrier_t *bar;
	int rc;
	int got;         /* items popped before the final rc */
	uintptr_t item;
};

static void *blocked_popper(void *arg)
{
	struct blocked *b = arg;
	pthread_barrier_wait(b->bar);
	void *p;
	b->got = 0;
	while ((b->rc = st_queue_pop(b->q, &p)) == ST_OK)
		b->got++;
	return NULL;
}

static void *blocked_pusher(void *arg)
{
	struct blocked *b = arg;
	pthread_barrier_wait(b->bar);
	b->rc = st_queue_push(b->q, ITEM(b->item));
	return NULL;
}

/* Consumers blocked on an empty queue: the items pushed before close are all
 * delivered, then every consumer sees ST_EPIPE. */
static void test_queue_close_wakes_blocked_consumers(void **state)
{
	(void)state;
	enum { N = 3 };
	st_queue_t *q;
	assert_int_equal(st_queue_create(&q, 4), ST_OK);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, N + 1);
	struct blocked b[N];
	pthread_t t[N];
	for (int i = 0; i < N; i++) {
		b[i] = (struct blocked){ .q = q, .bar = &bar };
		assert_int_equal(pthread_create(&t[i], NULL, blocked_popper, &b[i]), 0);
	}
	pthread_barrier_wait(&bar);
	wait_blocked(q, 0, N);
	/* Items pushed just before close must still be delivered, whether the
	 * woken consumers took them before or after the close; then EPIPE. */
	assert_int_equal(st_queue_push(q, ITEM(1)), ST_OK);
	assert_int_equal(st_queue_push(q, ITEM(2)), ST_OK);
	st_queue_close(q);
	int got = 0;
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(b[i].rc, ST_EPIPE);
		got += b[i].got;
	}
	assert_int_equal(got, 2);
	assert_int_equal(st_queue_push(q, ITEM(3)), ST_EPIPE);
	assert_int_equal(st_queue_try_push(q, ITEM(3)), ST_EPIPE);
	void *p;
	assert_int_equal(st_queue_try_pop(q, &p), ST_EPIPE);
	st_queue_stats_t s;
	st_queue_stats(q, &s);
	assert_true(s.pop_wait_ns > 0);
	pthread_barrier_destroy(&bar);
	st_queue_destroy(q);
}

/* Producers blocked on a full queue get ST_EPIPE and keep their item; the
 * items already inside can still be popped. */
static void test_queue_close_wakes_blocked_producers(void **state)
{
	(void)state;
	enum { N = 3 };
	st_queue_t *q;
	assert_int_equal(st_queue_create(&q, 2), ST_OK);
	assert_int_equal(st_queue_push(q, ITEM(1)), ST_OK);
	assert_int_equal(st_queue_push(q, ITEM(2)), ST_OK);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, N + 1);
	struct blocked b[N];
	pthread_t t[N];
	for (int i = 0; i < N; i++) {
		b[i] = (struct blocked){ .q = q, .bar = &bar, .item = 100 + (uintptr_t)i };
		assert_int_equal(pthread_create(&t[i], NULL, blocked_pusher, &b[i]), 0);
	}
	pthread_barrier_wait(&bar);
	wait_blocked(q, N, 0);
	st_queue_close(q);
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(b[i].rc, ST_EPIPE);
	}
	void *p;
	assert_int_equal(st_queue_pop(q, &p), ST_OK);
	assert_int_equal(ID(p), 1);
	assert_int_equal(st_queue_pop(q, &p), ST_OK);
	assert_int_equal(ID(p), 2);
	assert_int_equal(st_queue_pop(q, &p), ST_EPIPE);
	st_queue_stats_t s;
	st_queue_stats(q, &s);
	assert_true(s.push_wait_ns > 0);
	pthread_barrier_destroy(&bar);
	st_queue_destroy(q);
}

/* Cancel wakes blocked consumers (on an empty queue) and blocked producers
 * (on a full one); both sides get ST_ECANCELED, items stay for drain. */
static void test_queue_cancel_wakes_both_sides(void **state)
{
	(void)state;
	enum { N = 2 };
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, N + 1);
	struct blocked b[N];
	pthread_t t[N];

	st_queue_t *empty;
	assert_int_equal(st_queue_create(&empty, 1), ST_OK);
	for (int i = 0; i < N; i++) {
		b[i] = (struct blocked){ .q = empty, .bar = &bar };
		assert_int_equal(pthread_create(&t[i], NULL, blocked_popper, &b[i]), 0);
	}
	pthread_barrier_wait(&bar);
	wait_blocked(empty, 0, N);
	st_queue_cancel(empty);
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(b[i].rc, ST_ECANCELED);
		assert_int_equal(b[i].got, 0);
	}
	st_queue_destroy(empty);

	st_queue_t *full;
	assert_int_equal(st_queue_create(&full, 1), ST_OK);
	assert_int_equal(st_queue_push(full, ITEM(1)), ST_OK);
	for (int i = 0; i < N; i++) {
		b[i] = (struct blocked){ .q = full, .bar = &bar, .item = 50 };
		assert_int_equal(pthread_create(&t[i], NULL, blocked_pusher, &b[i]), 0);
	}
	pthread_barrier_wait(&bar);
	wait_blocked(full, N, 0);
	st_queue_cancel(full);
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(b[i].rc, ST_ECANCELED);
	}
	/* Canceled beats everything, even with an item inside and after close. */
	void *p;
	assert_int_equal(st_queue_pop(full, &p), ST_ECANCELED);
	assert_int_equal(st_queue_try_pop(full, &p), ST_ECANCELED);
	st_queue_close(full);
	assert_int_equal(st_queue_push(full, ITEM(2)), ST_ECANCELED);
	assert_int_equal(st_queue_try_push(full, ITEM(2)), ST_ECANCELED);
	assert_int_equal(st_queue_len(full), 1);
	assert_int_equal(st_queue_drain(full, NULL, NULL), 1);
	st_queue_destroy(full);
	pthread_barrier_destroy(&bar);
}

static void sum_items(void *item, void *arg)
{
	*(uintptr_t *)arg += ID(item);
}

static void test_queue_drain_removes_everything(void **state)
{
	(void)state;
	st_queue_t *q;
	assert_int_equal(st_queue_create(&q, 5), ST_OK);
	uintptr_t sum = 0;
	assert_int_equal(st_queue_drain(q, sum_items, &sum), 0);
	for (uintptr_t i = 1; i <= 5; i++)
		assert_int_equal(st_queue_push(q, ITEM(i)), ST_OK);
	void *p;
	assert_int_equal(st_queue_pop(q, &p), ST_OK); /* head moves off 0 */
	assert_int_equal(st_queue_push(q, ITEM(6)), ST_OK);
	assert_int_equal(st_queue_drain(q, sum_items, &sum), 5);
	assert_int_equal(sum, 2 + 3 + 4 + 5 + 6);
	assert_int_equal(st_queue_len(q), 0);
	assert_int_equal(st_queue_try_pop(q, &p), ST_EAGAIN);
	/* Draining an open queue leaves it usable. */
	assert_int_equal(st_queue_push(q, ITEM(9)), ST_OK);
	st_queue_close(q);
	sum = 0;
	assert_int_equal(st_queue_drain(q, sum_items, &sum), 1);
	assert_int_equal(sum, 9);
	assert_int_equal(st_queue_pop(q, &p), ST_EPIPE);
	st_queue_destroy(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_queue_create_rejects_zero_cap),
		cmocka_unit_test(test_queue_capacity_1_2_1024),
		cmocka_unit_test(test_queue_fifo_one_producer_one_consumer),
		cmocka_unit_test(test_queue_mpmc_every_item_exactly_once),
		cmocka_unit_test(test_queue_close_wakes_blocked_consumers),
		cmocka_unit_test(test_queue_close_wakes_blocked_producers),
		cmocka_unit_test(test_queue_cancel_wakes_both_sides),
		cmocka_unit_test(test_queue_drain_removes_everything),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
