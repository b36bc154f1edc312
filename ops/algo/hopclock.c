/*
 * hopclock.c — Hop's clock rule and backup-worker quorum (hopclock.h).
 *
 * Threads: none; the caller serializes calls on one clock set.
 */
#include "ops/algo/hopclock.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

int st_algo_hopclock_init(st_algo_hopclock_t *c, size_t n, uint64_t b)
{
	memset(c, 0, sizeof *c);
	c->n = n;
	c->b = b;
	c->clock = calloc(n ? n : 1, sizeof *c->clock);
	c->state = calloc(n ? n : 1, 1);
	return c->clock && c->state ? ST_OK : ST_ENOMEM;
}

void st_algo_hopclock_fini(st_algo_hopclock_t *c)
{
	free(c->clock);
	free(c->state);
	memset(c, 0, sizeof *c);
}

void st_algo_hopclock_reset(st_algo_hopclock_t *c, int active)
{
	memset(c->clock, 0, sizeof *c->clock * c->n);
	memset(c->state, active ? ST_ALGO_HOP_ACTIVE : ST_ALGO_HOP_UNSEEN, c->n);
}

uint64_t st_algo_hopclock_slowest(const st_algo_hopclock_t *c)
{
	uint64_t m = UINT64_MAX;
	for (size_t i = 0; i < c->n; i++)
		if (c->state[i] == ST_ALGO_HOP_ACTIVE && c->clock[i] < m)
			m = c->clock[i];
	return m;
}

void st_algo_hopclock_join(st_algo_hopclock_t *c, size_t i)
{
	if (c->state[i] == ST_ALGO_HOP_ACTIVE)
		return;
	uint64_t m = st_algo_hopclock_slowest(c);
	if (m != UINT64_MAX && m > c->clock[i])
		c->clock[i] = m;
	c->state[i] = ST_ALGO_HOP_ACTIVE;
}

int st_algo_hopbw_arrive(st_algo_hopbw_t *q, uint64_t step, int has_grad)
{
	if (step > q->k)
		return ST_EINVAL;
	if (step < q->k)
		return ST_ALGO_BW_LATE;
	q->arrived++;
	if (!has_grad)
		return ST_ALGO_BW_EMPTY;
	q->kept++;
	return ST_ALGO_BW_KEPT;
}

uint32_t st_algo_hopbw_close(st_algo_hopbw_t *q)
{
	const uint32_t K = q->kept;
	q->k++;
	q->kept = 0;
	q->arrived = 0;
	return K;
}
