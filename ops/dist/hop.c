/*
 * hop.c — the clock rule of hop_bs across processes (bounded staleness,
 * the Hop-BS baseline of gba-global-batch-aggregation.txt §2 and §5.1: "Bounded
 * staleness (Hop-BS) restricts the maximal differences of gradient version
 * between the fastest and the slowest workers, controlled by b1"; the
 * single-process ops/sync/hop_bs.c has the same rule over threads).
 *
 * Rank 0 keeps the dense parameters (as under async) and one clock per
 * worker of every rank: clock = gradients it has applied. A worker's DENSE
 * message (MSG_DENSE + WF_HOP, header `stamp` = b) applies its gradient at
 * once (Hogwild order, as async) and the reply — the parameters the worker
 * computes its next step with — is held back until
 *
 *     clock[w] - min(clock[v] : v active) <= b
 *
 * so a worker starts step k only once the slowest active worker finished
 * step k - b. Active: a worker joins at its first message; one that has
 * no minibatch left in its rank's batch says so (MSG_IDLE, at end_batch)
 * and no longer counts as the slowest until its next message, when it
 * rejoins at the slowest active clock (it idled, it was not slow); the
 * workers of a dead rank stop counting. So the slowest active worker never
 * waits and some worker always advances (hop_bs.c's progress argument).
 *
 * Held replies wait in a list and go out whenever a clock changes, a
 * worker idles or a rank dies (the service thread looks every 0.2 s).
 * Rank 0's own workers wait on st_dist.cv.
 *
 * All functions: st_dist.mu held, rank 0.
 */
#include <stdlib.h>
#include <string.h>

#include "ops/dist/dist_internal.h"
#include "runtime/err.h"

enum { UNSEEN = 0, ACTIVE = 1, IDLE = 2 };

void st__dist_hop_free(st_dist_t *d)
{
	free(d->hop.clock);
	free(d->hop.state);
	free(d->hop.held);
	memset(&d->hop, 0, sizeof d->hop);
}

static int hop_init(st_dist_t *d)
{
	hop_t *h = &d->hop;
	if (h->clock)
		return ST_OK;
	h->N = d->env->n_workers > 0 ? d->env->n_workers : 1;
	const size_t n = (size_t)d->P * (size_t)h->N;
	h->clock = calloc(n, sizeof *h->clock);
	h->state = calloc(n, 1);
	if (!h->clock || !h->state) {
		st__dist_hop_free(d);
		return ST_ENOMEM;
	}
	return ST_OK;
}

/* Whether rank r is alive (a store without a network: every rank). */
static int alive(const st_dist_t *d, int r)
{
	return !d->net || st_net_alive(d->net, r);
}

/* Workers of dead ranks no longer count. */
static void drop_dead(st_dist_t *d)
{
	hop_t *h = &d->hop;
	for (int r = 1; r < d->P; r++)
		if (!alive(d, r))
			for (int w = 0; w < h->N; w++)
				h->state[(size_t)r * h->N + w] = IDLE;
}

/* The slowest active clock (UINT64_MAX: none active). */
static uint64_t min_active(const st_dist_t *d)
{
	const hop_t *h = &d->hop;
	uint64_t m = UINT64_MAX;
	for (size_t i = 0; i < (size_t)d->P * h->N; i++)
		if (h->state[i] == ACTIVE && h->clock[i] < m)
			m = h->clock[i];
	return m;
}

int st__dist_hop_ready(st_dist_t *d, int from, uint32_t w)
{
	const hop_t *h = &d->hop;
	if (!h->clock)
		return 1;
	drop_dead(d);
	const size_t i = (size_t)from * h->N + w;
	const uint64_t m = min_active(d);
	return m == UINT64_MAX || h->clock[i] - m <= h->b;
}

int st__dist_hop_step(st_dist_t *d, const wire_hdr_t *hd, int from, int has_grad)
{
	int rc = hop_init(d);
	if (rc < 0)
		return rc;
	hop_t *h = &d->hop;
	if (hd->worker >= (uint32_t)h->N || (h->b_set && h->b != hd->stamp))
		return -1;
	h->b = hd->stamp;
	h->b_set = 1;
	const size_t i = (size_t)from * h->N + hd->worker;
	if (h->state[i] != ACTIVE) {
		/* Joining, or back from idling: at the slowest active clock. */
		uint64_t m = min_active(d);
		if (m != UINT64_MAX && m > h->clock[i])
			h->clock[i] = m;
		h->state[i] = ACTIVE;
	}
	if (has_grad)
		h->clock[i]++;
	pthread_cond_broadcast(&d->cv);
	return ST_OK;
}

int st__dist_hop_idle(st_dist_t *d, int from, uint32_t w)
{
	int rc = hop_init(d);
	if (rc < 0)
		return rc;
	hop_t *h = &d->hop;
	if (w >= (uint32_t)h->N)
		return -1;
	h->state[(size_t)from * h->N + w] = IDLE;
	pthread_cond_broadcast(&d->cv);
	return ST_OK;
}

int st__dist_hop_hold(st_dist_t *d, int from, uint32_t w, uint64_t req)
{
	hop_t *h = &d->hop;
	if (h->nheld == h->cap) {
		size_t c = h->cap ? 2 * h->cap : 16;
		held_t *p = realloc(h->held, c * sizeof *p);
		if (!p)
			return ST_ENOMEM;
		h->held = p;
		h->cap = c;
	}
	h->held[h->nheld++] = (held_t){ .from = from, .worker = w, .req = req };
	return ST_OK;
}

int st__dist_hop_release(st_dist_t *d, int (*reply)(st_dist_t *, int, uint32_t, uint64_t))
{
	hop_t *h = &d->hop;
	size_t k = 0;
	int rc = ST_OK;
	for (size_t i = 0; i < h->nheld; i++) {
		held_t x = h->held[i];
		if (alive(d, x.from) && !st__dist_hop_ready(d, x.from, x.worker)) {
			h->held[k++] = x;
			continue;
		}
		if (alive(d, x.from)) {
			int r = reply(d, x.from, x.worker, x.req);
			if (r < 0 && rc >= 0)
				rc = r;
		}
	}
	h->nheld = k;
	return rc;
}
