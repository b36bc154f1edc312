/*
 * inbox.c — where received messages wait for st_net_recv: one FIFO per
 * channel, allocated when first used, holding every sender's messages in
 * the order UCX matched them; and the peers' states (alive, left, dead).
 *
 * A message enters its channel when UCX matches it (net.c), possibly before
 * its payload has arrived (a large message in flight): it is then not
 * `ready`, and a receiver waiting for that sender waits for it rather than
 * skip it, which is what keeps each sender's messages in order. A message
 * whose frame fails its check is removed without ever being delivered.
 *
 * Threads: any thread may receive; each channel has a condition variable
 * signalled when one of its messages becomes ready. A change of a peer's
 * state or st_net_cancel wakes every channel.
 *
 * Lock: mu only (the UCX lock wmu, when held, is taken before it; see
 * net_internal.h).
 */
#include <assert.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/err.h"
#include "runtime/net/net_internal.h"

#define N_CHANS 65536u

int st__net_inbox_init(st_net_t *net)
{
	net->chans = calloc(N_CHANS, sizeof *net->chans);
	net->peers = calloc((size_t)net->size, sizeof *net->peers);
	if (!net->chans || !net->peers) {
		free(net->chans);
		free(net->peers);
		return ST_ENOMEM;
	}
	for (int r = 0; r < net->size; r++) {
		net->peers[r].rank = r;
		net->peers[r].net = net;
	}
	pthread_mutex_init(&net->mu, NULL);
	pthread_cond_init(&net->sent_cv, NULL);
	st__net_pool_init(net);
	return ST_OK;
}

static void free_msg(st__net_msg_t *m)
{
	free(m->head);
	free(m->buf);
	free(m);
}

void st__net_inbox_fini(st_net_t *net)
{
	if (!net->chans)
		return;
	for (st__net_chan_t *c = net->all_chans, *next; c; c = next) {
		next = c->next_alloc;
		for (st__net_msg_t *m = c->head, *mn; m; m = mn) {
			mn = m->next;
			free_msg(m);
		}
		pthread_cond_destroy(&c->cv);
		free(c);
	}
	free(net->chans);
	free(net->peers);
	net->chans = NULL;
	pthread_cond_destroy(&net->sent_cv);
	pthread_mutex_destroy(&net->mu);
	st__net_pool_fini(net);
}

static st__net_chan_t *chan_locked(st_net_t *net, uint32_t chan)
{
	st__net_chan_t *c = net->chans[chan];
	if (c)
		return c;
	c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);
	c->next_alloc = net->all_chans;
	net->all_chans = c;
	net->chans[chan] = c;
	return c;
}

int st__net_inbox_add_locked(st_net_t *net, st__net_msg_t *m)
{
	st__net_chan_t *c = chan_locked(net, m->chan);
	if (!c)
		return ST_ENOMEM;
	m->queued = 1;
	m->next = NULL;
	if (c->tail)
		c->tail->next = m;
	else
		c->head = m;
	c->tail = m;
	if (m->ready)
		pthread_cond_broadcast(&c->cv);
	return ST_OK;
}

static void unlink_msg(st__net_chan_t *c, st__net_msg_t *m)
{
	st__net_msg_t **pp = &c->head, *prev = NULL;
	while (*pp && *pp != m) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	assert(*pp == m);
	*pp = m->next;
	if (c->tail == m)
		c->tail = prev;
}

void st__net_inbox_drop_locked(st_net_t *net, st__net_msg_t *m)
{
	st__net_chan_t *c = net->chans[m->chan];
	unlink_msg(c, m);
	/* A receiver may be waiting behind this message for a later one from
	 * the same sender. */
	pthread_cond_broadcast(&c->cv);
	free_msg(m);
}

void st__net_wake_all_locked(st_net_t *net)
{
	for (st__net_chan_t *c = net->all_chans; c; c = c->next_alloc)
		pthread_cond_broadcast(&c->cv);
	pthread_cond_broadcast(&net->sent_cv);
}

int st__net_mark_gone(st_net_t *net, int r, int how, const char *why)
{
	pthread_mutex_lock(&net->mu);
	int changed = r != net->rank && net->peers[r].state == PEER_ALIVE;
	if (changed) {
		/* Atomic: net.c's peer_usable reads it without mu. */
		__atomic_store_n(&net->peers[r].state, how == PEER_LEFT ? PEER_LEFT : PEER_DEAD,
				 __ATOMIC_RELAXED);
		net->peers[r].stalled = how == PEER_STALLED;
		net->n_gone++;
		net->n_dead += how != PEER_LEFT;
		st__net_wake_all_locked(net);
	}
	pthread_mutex_unlock(&net->mu);
	if (changed && how == PEER_STALLED)
		st_error("net: rank %d %s: it counts as dead", r, why);
	else if (changed && how == PEER_DEAD)
		st_error("net: rank %d died (%s)", r, why);
	else if (changed)
		st_debug("net: rank %d left the job", r);
	return changed;
}

int st__net_stalled(st_net_t *net, int r)
{
	pthread_mutex_lock(&net->mu);
	int s = net->peers[r].stalled;
	pthread_mutex_unlock(&net->mu);
	return s;
}

/* The next message to deliver on c from src (or any sender), or NULL. A
 * sender whose oldest message is still arriving is skipped entirely. */
static st__net_msg_t *next_ready(const st_net_t *net, st__net_chan_t *c, int src)
{
	uint64_t blocked[ST_NET_MAX_RANKS / 64];
	int any_blocked = 0;
	for (st__net_msg_t *m = c->head; m; m = m->next) {
		if (src != ST_NET_ANY) {
			if (m->src == src)
				return m->ready ? m : NULL;
			continue;
		}
		if (any_blocked && (blocked[m->src / 64] >> (m->src % 64) & 1))
			continue;
		if (m->ready)
			return m;
		if (!any_blocked)
			memset(blocked, 0, sizeof(uint64_t) * (((size_t)net->size + 63) / 64));
		any_blocked = 1;
		blocked[m->src / 64] |= UINT64_C(1) << (m->src % 64);
	}
	return NULL;
}

/* The lowest dead rank, or -1 when every peer is alive: a rank, not an
 * error (st_net_dead's *first). Called with mu held. */
static int first_dead_locked(const st_net_t *net)
{
	for (int r = 0; r < net->size; r++)
		if (net->peers[r].state == PEER_DEAD)
			return r;
	return -1;
}

/* *ts = t0 + timeout_s. */
static void deadline_of(const struct timespec *t0, double timeout_s, struct timespec *ts)
{
	*ts = *t0;
	double whole = (double)(time_t)timeout_s;
	ts->tv_sec += (time_t)whole;
	ts->tv_nsec += (long)((timeout_s - whole) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int st__net_recv(st_net_t *net, int src, uint32_t chan, void **buf, size_t *len, int *from,
		 double timeout_s, int fail_any, int *gone)
{
	assert(net && buf && len);
	assert(chan < N_CHANS);
	assert(src == ST_NET_ANY || (src >= 0 && src < net->size));
	*buf = NULL;
	*len = 0;
	/* The clock is read once, and only if nothing is ready at once: a
	 * clock_gettime was a tenth of a small message's receive. */
	struct timespec t0, deadline;
	int rc, timed_out = 0, spin = 1;
	double poll_until = 0;
	pthread_mutex_lock(&net->mu);
	st__net_chan_t *c = chan_locked(net, chan);
	for (;;) {
		st__net_msg_t *m = c ? next_ready(net, c, src) : NULL;
		if (!c)
			rc = ST_ENOMEM;
		else if (net->canceled)
			rc = ST_ECANCELED;
		else if (m) {
			unlink_msg(c, m);
			*buf = m->buf;
			*len = m->len;
			if (from)
				*from = m->src;
			free(m);
			rc = ST_OK;
		} else if (fail_any && net->n_dead) {
			if (gone)
				*gone = first_dead_locked(net);
			rc = ST_EPEER;
		} else if (src != ST_NET_ANY && net->peers[src].state != PEER_ALIVE)
			rc = ST_EPEER;
		else if (src == ST_NET_ANY && net->size > 1 && net->n_gone == net->size - 1)
			rc = ST_EPEER;
		else if (timed_out)
			rc = ST_EAGAIN;
		else if (spin) {
			/* Progress the worker ourselves for a moment: an answer
			 * that is already on its way then needs no wake-up of
			 * the progress thread and no handoff. */
			pthread_mutex_unlock(&net->mu);
			if (!poll_until) {
				clock_gettime(CLOCK_MONOTONIC, &t0);
				poll_until = st__net_secs(&t0) + ST__NET_POLL_S;
				if (timeout_s >= 0)
					deadline_of(&t0, timeout_s > 1e9 ? 1e9 : timeout_s, &deadline);
			}
			spin = st__net_spin(net, poll_until);
			pthread_mutex_lock(&net->mu);
			continue;
		} else {
			st__net_kick(net);
			if (timeout_s < 0)
				pthread_cond_wait(&c->cv, &net->mu);
			else
				timed_out = pthread_cond_timedwait(&c->cv, &net->mu, &deadline) != 0;
			continue;
		}
		break;
	}
	pthread_mutex_unlock(&net->mu);
	return rc;
}

int st_net_recv(st_net_t *net, int src, uint32_t chan, void **buf, size_t *len, int *from,
		double timeout_s)
{
	return st__net_recv(net, src, chan, buf, len, from, timeout_s, 0, NULL);
}

void st_net_cancel(st_net_t *net)
{
	pthread_mutex_lock(&net->mu);
	net->canceled = 1;
	st__net_wake_all_locked(net);
	pthread_mutex_unlock(&net->mu);
}

int st_net_rank(const st_net_t *net)
{
	return net->rank;
}

int st_net_size(const st_net_t *net)
{
	return net->size;
}

int st_net_alive(const st_net_t *net, int r)
{
	assert(r >= 0 && r < net->size);
	st_net_t *n = (st_net_t *)net;   /* the lock, not the state, changes */
	pthread_mutex_lock(&n->mu);
	int alive = n->peers[r].state == PEER_ALIVE;
	pthread_mutex_unlock(&n->mu);
	return alive;
}

int st_net_dead(const st_net_t *net, int *first)
{
	st_net_t *n = (st_net_t *)net;
	pthread_mutex_lock(&n->mu);
	int count = n->n_dead, lowest = first_dead_locked(n);
	pthread_mutex_unlock(&n->mu);
	if (first)
		*first = lowest;
	return count;
}

uint64_t st_net_bytes_sent(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->bytes_sent);
}

uint64_t st_net_bytes_sent_coll(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->bytes_sent_coll);
}

uint64_t st_net_coll_rounds(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->coll_rounds);
}

uint64_t st_net_msgs_sent(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->msgs_sent);
}

uint64_t st__net_frames_dropped(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->frames_dropped);
}

uint64_t st__net_frames_unhashed(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->frames_unhashed);
}

uint64_t st__net_msgs_bare(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->msgs_bare);
}

uint64_t st__net_msgs_imm(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->msgs_imm);
}

uint64_t st__net_msgs_flat(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->msgs_flat);
}

uint64_t st__net_msgs_split(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->msgs_split);
}

uint64_t st__net_arms(const st_net_t *net)
{
	return atomic_load(&((st_net_t *)net)->arms);
}
