/*
 * history.c — the behaviour history of strata gen (history.h). Pure
 * functions of (seed, row): a splitmix64 stream of its own, so adding a
 * history leaves every other field of a row unchanged.
 */
#include "ops/gen/history.h"

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static inline uint64_t next(uint64_t *s)
{
	*s += UINT64_C(0x9e3779b97f4a7c15);
	return mix64(*s);
}

/* Uniform in [0, 1). */
static inline double unif(uint64_t *s)
{
	return (double)(next(s) >> 11) * 0x1.0p-53;
}

double st__gen_history_term(int n, const uint16_t *cat, uint16_t cand)
{
	if (n == 0)
		return 0.0;
	int m = 0;
	for (int t = 0; t < n; t++)
		m += cat[t] == cand;
	return ST_GEN_HIST_BETA * (double)m / (double)n;
}

double st__gen_history(uint64_t seed, uint64_t row, int max_len, uint8_t *n,
		       uint16_t *cat, uint16_t *cand)
{
	uint64_t s = mix64(seed ^ UINT64_C(0x68697374 /* "hist" */)) ^ mix64(row + 1);
	uint16_t u = (uint16_t)(next(&s) % ST_GEN_HIST_CATS);
	int len = (int)(next(&s) % (uint64_t)(max_len + 1));
	for (int t = 0; t < len; t++)
		cat[t] = unif(&s) < 0.5 ? u : (uint16_t)(next(&s) % ST_GEN_HIST_CATS);
	*cand = unif(&s) < 0.35 ? u : (uint16_t)(next(&s) % ST_GEN_HIST_CATS);
	*n = (uint8_t)len;
	return st__gen_history_term(len, cat, *cand);
}

uint32_t st__gen_history_value(uint64_t seed, int col, uint16_t c)
{
	return (uint32_t)mix64(mix64(seed ^ UINT64_C(0x63617465 /* "cate" */) ^
				     ((uint64_t)col << 32)) ^ c);
}
