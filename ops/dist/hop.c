/*
 * hop.c — Hop's rules across processes, the ranks transport of the core
 * ops/algo/hopclock.h (one process's threads run it in ops/sync/hop_bs.c
 * and hop_bw.c): bounded staleness (the Hop-BS baseline of
 * gba-global-batch-aggregation.txt §2 and §5.1: "Bounded staleness (Hop-BS)
 * restricts the maximal differences of gradient version between the
 * fastest and the slowest workers, controlled by b1") and backup workers
 * (Hop-BW). This file keeps the clocks on rank 0, holds and releases the
 * replies, and tells the core who is alive.
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
 * hop_bw across ranks (Hop-BW, the same paper: "ignores the pre-set
 * number b3 of gradients from the slowest workers during each gradient
 * aggregation"; ops/sync/hop_bw.c in one process). A rank's workers step
 * together, so the units are ranks (worker index 0): step k collects the
 * ranks' gradients computed on the parameters of step k; once all but b of
 * the active ranks have sent theirs (at least one), rank 0 applies their
 * mean as one optimizer step, closes the step and answers them with the
 * quorum size K (their rows then go to the owners as a step of K lists); a
 * gradient for a closed step is dropped and answered at once with the new
 * parameters. Active: as above (joined, not done, alive).
 *
 * All functions: st_dist.mu held, rank 0. They return ST_OK, ST_ENOMEM, or
 * ST_EINVAL for a message whose fields do not fit the job (a worker index
 * beyond it, another bound, a step not open yet); the service turns the
 * latter into a logged, dropped message from that rank.
 */
#include <stdlib.h>
#include <string.h>

#include "ops/dist/dist_internal.h"
#include "runtime/err.h"

void st__dist_hop_free(st_dist_t *d)
{
	st_algo_hopclock_fini(&d->hop.clk);
	free(d->hop.held);
	free(d->hop.sum);
	free(d->hop.lastK);
	memset(&d->hop, 0, sizeof d->hop);
}

/* The clocks of every worker of every rank, unseen (hop_bw's units are the
 * ranks: rank r's is worker 0's, r * N). */
static int hop_init(st_dist_t *d)
{
	hop_t *h = &d->hop;
	if (h->clk.clock)
		return ST_OK;
	h->N = d->n_workers > 0 ? d->n_workers : 1;
	if (st_algo_hopclock_init(&h->clk, (size_t)d->P * (size_t)h->N, 0) < 0) {
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
				st_algo_hopclock_idle(&h->clk, (size_t)r * h->N + w);
}

/* The unit of worker w of rank `from`. */
static size_t unit(const hop_t *h, int from, uint32_t w)
{
	return (size_t)from * (size_t)h->N + w;
}

int st__dist_hop_ready(st_dist_t *d, int from, uint32_t w)
{
	if (!d->hop.clk.clock)
		return 1;
	drop_dead(d);
	return st_algo_hopclock_ready(&d->hop.clk, unit(&d->hop, from, w));
}

int st__dist_hop_step(st_dist_t *d, const wire_hdr_t *hd, int from, int has_grad)
{
	int rc = hop_init(d);
	if (rc < 0)
		return rc;
	hop_t *h = &d->hop;
	if (hd->worker >= (uint32_t)h->N || (h->b_set && h->b != hd->stamp))
		return ST_EINVAL;
	h->b = hd->stamp;
	h->b_set = 1;
	h->clk.b = h->b;
	const size_t i = unit(h, from, hd->worker);
	st_algo_hopclock_join(&h->clk, i);   /* joining, or back from idling */
	if (has_grad)
		st_algo_hopclock_tick(&h->clk, i);
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
		return ST_EINVAL;
	st_algo_hopclock_idle(&h->clk, unit(h, from, w));
	pthread_cond_broadcast(&d->cv);
	return ST_OK;
}

int st__dist_hop_hold(st_dist_t *d, int from, uint32_t w, uint64_t req)
{
	hop_t *h = &d->hop;
	if (st__dist_grow((void **)&h->held, &h->cap, h->nheld + 1, sizeof *h->held) < 0)
		return ST_ENOMEM;
	h->held[h->nheld++] = (held_t){ .from = from, .worker = w, .req = req };
	return ST_OK;
}

/* ---- hop_bw: backup workers across ranks ------------------------------------ */

int st__dist_bw_contrib(st_dist_t *d, const wire_hdr_t *hd, const float *grad, int from,
			int *late)
{
	int rc = hop_init(d);
	if (rc < 0)
		return rc;
	hop_t *h = &d->hop;
	const size_t np = d->p.nparams;
	if (!h->sum) {
		h->sum = calloc(np ? np : 1, sizeof(float));
		h->lastK = calloc((size_t)d->P, sizeof(uint32_t));
		if (!h->sum || !h->lastK)
			return ST_ENOMEM;
	}
	if (hd->step > h->q.k || (h->b_set && h->b != hd->stamp))
		return ST_EINVAL;
	h->b = hd->stamp;
	h->b_set = 1;
	h->q.b = h->b;
	h->bw = 1;
	st_algo_hopclock_join(&h->clk, unit(h, from, 0));
	if (!grad || st_algo_hopbw_arrive(&h->q, hd->step, 1) == ST_ALGO_BW_LATE) {
		*late = 1;   /* a fetch, or "ignores the gradients from the stragglers" */
		return ST_OK;
	}
	*late = 0;
	for (size_t j = 0; j < np; j++)
		h->sum[j] += grad[j];
	return ST_OK;
}

int st__dist_bw_close(st_dist_t *d, int (*reply)(st_dist_t *, int, uint32_t, uint64_t))
{
	hop_t *h = &d->hop;
	if (!h->sum || !h->q.kept)
		return ST_OK;
	drop_dead(d);
	uint32_t active = 0;
	for (int r = 0; r < d->P; r++)
		active += h->clk.state[unit(h, r, 0)] == ST_ALGO_HOP_ACTIVE;
	/* The quorum: the first active - b contributions (at least one). A
	 * rank that has finished its data or died no longer counts. */
	if (!st_algo_hopbw_closes(&h->q, active))
		return ST_OK;
	const size_t np = d->p.nparams;
	const float inv = 1.0f / (float)h->q.kept;   /* each rank's gradient is its mean */
	for (size_t j = 0; j < np; j++)
		h->sum[j] *= inv;
	st_algo_dense_update(&d->p, d->p.params, d->dense_state, h->sum, ++*d->dense_t);
	memset(h->sum, 0, sizeof(float) * np);
	const uint32_t K = st_algo_hopbw_close(&h->q);
	pthread_cond_broadcast(&d->cv);
	/* Every held answer belongs to the step just closed. */
	int rc = ST_OK;
	for (size_t i = 0; i < h->nheld; i++) {
		held_t x = h->held[i];
		h->lastK[x.from] = K;
		if (x.worker != UINT32_MAX && alive(d, x.from) && reply) {   /* MAX: rank 0's own */
			int r = reply(d, x.from, x.worker, x.req);
			if (r < 0 && rc >= 0)
				rc = r;
		}
	}
	h->nheld = 0;
	return rc;
}

int st__dist_hop_release(st_dist_t *d, int (*reply)(st_dist_t *, int, uint32_t, uint64_t))
{
	hop_t *h = &d->hop;
	size_t k = 0;
	int rc = ST_OK;
	if (!h->nheld)
		return ST_OK;
	drop_dead(d);   /* once: the slowest clock is the same for every held reply */
	const uint64_t m = st_algo_hopclock_slowest(&h->clk);
	for (size_t i = 0; i < h->nheld; i++) {
		held_t x = h->held[i];
		if (alive(d, x.from) &&
		    !st_algo_hopclock_ready_at(&h->clk, unit(h, x.from, x.worker), m)) {
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
