/*
 * hopclock.h — the two rules of Hop (Luo et al., ref. [22] of
 * gba-global-batch-aggregation.txt), the GBA paper's Hop-BS and Hop-BW
 * baselines, written once for both transports: one process's threads
 * (ops/sync/hop_bs.c, hop_bw.c) and the ranks of many (ops/dist/hop.c).
 *
 * Bounded staleness (Hop-BS, §2 and §5.1: "restricts the maximal
 * differences of gradient version between the fastest and the slowest
 * workers, controlled by b1"; the stale-synchronous rule of Ho et al.
 * 2013). Every unit (a worker) has a clock, the gradients it has applied,
 * and a state: unseen, active or idle. A unit may start its next step only
 * while
 *
 *     clock[i] - min(clock[v] : v active) <= b,
 *
 * so it starts step k only once the slowest active unit has finished step
 * k - b (b = 0 is BSP). An idle unit (no minibatch left for now) and one
 * not seen yet do not count as the slowest; a unit that joins, or comes
 * back from idling, does so at the slowest active clock (it idled, it was
 * not slow) unless its own is higher. The slowest active unit never waits,
 * so some unit always advances. Who is a member is the transport's
 * knowledge: one process starts every batch with all its workers active at
 * clock 0 (the trainer's barrier brings them together); across processes a
 * worker joins at its first message and rank deaths make units idle.
 *
 * Backup workers (Hop-BW, §2: "ignores the gradients from the stragglers";
 * §5.1: "ignores the pre-set number b3 of gradients from the slowest
 * workers during each gradient aggregation"; Chen et al. 2016). Step k
 * collects the contributions computed on the parameters of step k. It
 * closes once all but b of the `active` units have contributed a gradient
 * (at least one), or once every active unit has arrived (some may have had
 * no minibatch); a contribution for a step already closed is late and
 * dropped. What counts as active — the workers of a lockstep step in one
 * process, the ranks still training across processes — and how the kept
 * gradients are scaled into their mean are the transport's.
 *
 * Threads: none. No function takes a lock; the caller serializes every
 * call on one clock set.
 */
#ifndef ST_ALGO_HOPCLOCK_H
#define ST_ALGO_HOPCLOCK_H

#include <stddef.h>
#include <stdint.h>

enum { ST_ALGO_HOP_UNSEEN = 0, ST_ALGO_HOP_ACTIVE = 1, ST_ALGO_HOP_IDLE = 2 };

/* ---- Hop-BS: clocks --------------------------------------------------------- */

typedef struct st_algo_hopclock {
	size_t n;                  /* units */
	uint64_t b;                /* the bound */
	uint64_t *clock;           /* [n] gradients applied */
	uint8_t *state;            /* [n] ST_ALGO_HOP_* */
} st_algo_hopclock_t;

/* n units, unseen at clock 0. ST_OK or ST_ENOMEM; fini is safe after
 * either, and on a zeroed struct. */
int st_algo_hopclock_init(st_algo_hopclock_t *c, size_t n, uint64_t b);
void st_algo_hopclock_fini(st_algo_hopclock_t *c);

/* Every clock 0, every unit active (a common start) or unseen. */
void st_algo_hopclock_reset(st_algo_hopclock_t *c, int active);

/* The slowest active clock, UINT64_MAX when no unit is active. */
uint64_t st_algo_hopclock_slowest(const st_algo_hopclock_t *c);

/* Unit i becomes active; joining or back from idling, its clock rises to
 * the slowest active one. */
void st_algo_hopclock_join(st_algo_hopclock_t *c, size_t i);

/* Unit i applied a gradient. */
static inline void st_algo_hopclock_tick(st_algo_hopclock_t *c, size_t i)
{
	c->clock[i]++;
}

/* Unit i has no minibatch for now: it stops counting as the slowest. */
static inline void st_algo_hopclock_idle(st_algo_hopclock_t *c, size_t i)
{
	c->state[i] = ST_ALGO_HOP_IDLE;
}

/* The clock rule for unit i against the slowest active clock `slowest`
 * (st_algo_hopclock_slowest; taking it once serves many units). */
static inline int st_algo_hopclock_ready_at(const st_algo_hopclock_t *c, size_t i,
					    uint64_t slowest)
{
	return slowest == UINT64_MAX || c->clock[i] - slowest <= c->b;
}

/* Whether unit i may start its next step. */
static inline int st_algo_hopclock_ready(const st_algo_hopclock_t *c, size_t i)
{
	return st_algo_hopclock_ready_at(c, i, st_algo_hopclock_slowest(c));
}

/* ---- Hop-BW: the quorum of a step --------------------------------------------- */

typedef struct st_algo_hopbw {
	uint32_t b;                /* gradients each step ignores */
	uint64_t k;                /* steps closed: the step open now */
	uint32_t kept, arrived;    /* of step k: gradients kept, contributions */
} st_algo_hopbw_t;

enum { ST_ALGO_BW_LATE = 0, ST_ALGO_BW_KEPT = 1, ST_ALGO_BW_EMPTY = 2 };

/* A contribution for step `step` (the step of the parameters it was
 * computed on), with a gradient or, has_grad 0, an empty minibatch:
 * ST_ALGO_BW_LATE (the step has closed: dropped), ST_ALGO_BW_KEPT or
 * ST_ALGO_BW_EMPTY (counted in step k); ST_EINVAL for a step not open yet
 * (nothing changes). */
int st_algo_hopbw_arrive(st_algo_hopbw_t *q, uint64_t step, int has_grad);

/* Gradients that close a step of `active` units: all but b, at least one. */
static inline uint32_t st_algo_hopbw_quorum(const st_algo_hopbw_t *q, uint32_t active)
{
	return active > q->b + 1 ? active - q->b : 1;
}

/* Whether step k closes now with `active` units. */
static inline int st_algo_hopbw_closes(const st_algo_hopbw_t *q, uint32_t active)
{
	return q->arrived && (q->kept >= st_algo_hopbw_quorum(q, active) || q->arrived >= active);
}

/* Closes step k: returns K, the gradients it kept (the caller applies
 * their mean), and opens step k + 1. */
uint32_t st_algo_hopbw_close(st_algo_hopbw_t *q);

#endif
