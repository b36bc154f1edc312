/*
 * gba.c — GBA's gradient buffers and token control (gba.h has the
 * algorithm and its paper sections). Two open-addressing maps keyed by
 * (table, key): the step's running sums and the tags.
 *
 * Threads: none; the caller serializes calls on one buffer.
 */
#include "ops/algo/gba.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static uint64_t id_hash(uint64_t key, uint8_t tab)
{
	return mix64(key ^ ((uint64_t)tab << 56) ^ UINT64_C(0x6a09e667f3bcc909));
}

/* ---- dense ------------------------------------------------------------------ */

int st_algo_gba_dense_init(st_algo_gba_dense_t *b, uint32_t M, uint32_t tol, size_t n)
{
	memset(b, 0, sizeof *b);
	if (!M || M > ST_ALGO_GBA_MAX_M)
		return ST_EINVAL;
	b->M = M;
	b->tol = tol;
	b->n = n;
	b->sum = calloc(n ? n : 1, sizeof(float));
	return b->sum ? ST_OK : ST_ENOMEM;
}

void st_algo_gba_dense_fini(st_algo_gba_dense_t *b)
{
	free(b->sum);
	memset(b, 0, sizeof *b);
}

int st_algo_gba_dense_add(st_algo_gba_dense_t *b, uint64_t token, const float *grad,
			  uint64_t *age, int *dropped)
{
	if (token > b->k)
		return ST_EINVAL;
	*age = b->k - token;
	*dropped = !st_algo_gba_keep(*age, b->tol);
	if (!*dropped) {
		for (size_t j = 0; j < b->n; j++)
			b->sum[j] += grad[j];
		b->kept++;
	}
	b->count++;
	return ST_OK;
}

const float *st_algo_gba_dense_mean(st_algo_gba_dense_t *b)
{
	if (!b->kept)
		return NULL;
	const float inv = 1.0f / (float)b->count;
	for (size_t j = 0; j < b->n; j++)
		b->sum[j] *= inv;
	return b->sum;
}

void st_algo_gba_dense_done(st_algo_gba_dense_t *b)
{
	memset(b->sum, 0, sizeof(float) * b->n);
	b->k++;
	b->count = 0;
	b->kept = 0;
}

/* ---- rows: tags ------------------------------------------------------------- */

static size_t tag_pos(const uint64_t *tkey, const uint8_t *ttab, const uint64_t *tseen,
		      size_t cap, uint64_t key, uint8_t tab)
{
	size_t i = (size_t)id_hash(key, tab) & (cap - 1);
	while (tseen[i] && (tkey[i] != key || ttab[i] != tab))
		i = (i + 1) & (cap - 1);
	return i;
}

static uint64_t tag_get(const st_algo_gba_rows_t *r, uint64_t key, uint8_t tab)
{
	return r->tcap ? r->tseen[tag_pos(r->tkey, r->ttab, r->tseen, r->tcap, key, tab)] : 0;
}

/* Room for n more tags (the map at most half full), forgetting those with
 * seen <= lo when it has to grow. ST_OK or ST_ENOMEM (map unchanged). */
static int tag_reserve(st_algo_gba_rows_t *r, size_t n, uint64_t lo)
{
	if (r->tcap && r->tn + n <= r->tcap / 2)
		return ST_OK;
	size_t live = 0;
	for (size_t i = 0; i < r->tcap; i++)
		live += r->tseen[i] > lo;
	size_t cap = 1024;
	while (live + n > cap / 4)
		cap *= 2;
	uint64_t *key = malloc(sizeof(uint64_t) * cap), *seen = calloc(cap, sizeof(uint64_t));
	uint8_t *tab = malloc(cap);
	if (!key || !seen || !tab) {
		free(key);
		free(seen);
		free(tab);
		return ST_ENOMEM;
	}
	size_t tn = 0;
	for (size_t i = 0; i < r->tcap; i++) {
		if (r->tseen[i] <= lo)
			continue;
		size_t j = tag_pos(key, tab, seen, cap, r->tkey[i], r->ttab[i]);
		key[j] = r->tkey[i];
		tab[j] = r->ttab[i];
		seen[j] = r->tseen[i];
		tn++;
	}
	free(r->tkey);
	free(r->ttab);
	free(r->tseen);
	r->tkey = key;
	r->ttab = tab;
	r->tseen = seen;
	r->tcap = cap;
	r->tn = tn;
	if (lo > r->forgot)
		r->forgot = lo;
	return ST_OK;
}

static void tag_set(st_algo_gba_rows_t *r, uint64_t key, uint8_t tab, uint64_t seen)
{
	size_t i = tag_pos(r->tkey, r->ttab, r->tseen, r->tcap, key, tab);
	if (!r->tseen[i]) {
		r->tkey[i] = key;
		r->ttab[i] = tab;
		r->tn++;
	}
	r->tseen[i] = seen;
}

/* ---- rows: the step's running sums ------------------------------------------- */

int st_algo_gba_rows_init(st_algo_gba_rows_t *r, uint32_t M, uint32_t tol, int perid,
			  uint32_t md)
{
	memset(r, 0, sizeof *r);
	if (!M || M > ST_ALGO_GBA_MAX_M || (!perid && tol != ST_ALGO_GBA_NO_TOL))
		return ST_EINVAL;
	r->M = M;
	r->tol = tol;
	r->perid = perid != 0;
	r->md = md ? md : 1;
	return ST_OK;
}

void st_algo_gba_rows_fini(st_algo_gba_rows_t *r)
{
	free(r->akey);
	free(r->atab);
	free(r->adim);
	free(r->asum);
	free(r->acnt);
	free(r->akept);
	free(r->aslot);
	free(r->tkey);
	free(r->ttab);
	free(r->tseen);
	memset(r, 0, sizeof *r);
}

int st_algo_gba_rows_begin(st_algo_gba_rows_t *r, uint64_t token, size_t n)
{
	if (token > r->k)
		return ST_EINVAL;
	const size_t need = r->nacc + n;
	if (need > r->acap) {
		size_t c = r->acap ? r->acap : 1024;
		while (c < need)
			c *= 2;
		uint64_t *key = realloc(r->akey, sizeof(uint64_t) * c);
		if (key)
			r->akey = key;
		uint8_t *tab = realloc(r->atab, c);
		if (tab)
			r->atab = tab;
		uint32_t *dim = realloc(r->adim, sizeof(uint32_t) * c);
		if (dim)
			r->adim = dim;
		float *sum = realloc(r->asum, sizeof(float) * c * r->md);
		if (sum)
			r->asum = sum;
		uint32_t *cnt = realloc(r->acnt, sizeof(uint32_t) * c);
		if (cnt)
			r->acnt = cnt;
		uint32_t *kept = realloc(r->akept, sizeof(uint32_t) * c);
		if (kept)
			r->akept = kept;
		if (!key || !tab || !dim || !sum || !cnt || !kept)
			return ST_ENOMEM;
		r->acap = c;
	}
	if (2 * need > r->scap) {
		size_t c = r->scap ? r->scap : 2048;
		while (c < 2 * need)
			c *= 2;
		uint32_t *slot = malloc(sizeof(uint32_t) * c);
		if (!slot)
			return ST_ENOMEM;
		memset(slot, 0xff, sizeof(uint32_t) * c);
		for (size_t a = 0; a < r->nacc; a++) {
			size_t j = (size_t)id_hash(r->akey[a], r->atab[a]) & (c - 1);
			while (slot[j] != UINT32_MAX)
				j = (j + 1) & (c - 1);
			slot[j] = (uint32_t)a;
		}
		free(r->aslot);
		r->aslot = slot;
		r->scap = c;
	}
	return ST_OK;
}

/* The step's sum of (tab, key), created empty (room made by begin). */
static uint32_t acc_find(st_algo_gba_rows_t *r, uint64_t key, uint8_t tab, uint32_t dim)
{
	size_t j = (size_t)id_hash(key, tab) & (r->scap - 1);
	while (r->aslot[j] != UINT32_MAX) {
		uint32_t a = r->aslot[j];
		if (r->akey[a] == key && r->atab[a] == tab)
			return a;
		j = (j + 1) & (r->scap - 1);
	}
	uint32_t a = (uint32_t)r->nacc++;
	r->aslot[j] = a;
	r->akey[a] = key;
	r->atab[a] = tab;
	r->adim[a] = dim;
	r->acnt[a] = r->akept[a] = 0;
	memset(r->asum + (size_t)a * r->md, 0, sizeof(float) * dim);
	return a;
}

int st_algo_gba_rows_add(st_algo_gba_rows_t *r, uint64_t token, uint64_t key, uint8_t tab,
			 const float *g, uint32_t dim)
{
	const uint32_t a = acc_find(r, key, tab, dim);
	r->acnt[a]++;
	int keep = 1;
	if (r->perid && r->tol != ST_ALGO_GBA_NO_TOL) {
		/* A token so old that a forgotten tag could have decided it is
		 * dropped whole: the tags can no longer tell how stale it is. */
		const int lost = token + r->tol < r->forgot;
		keep = !lost && st_algo_gba_keep(st_algo_gba_id_staleness(tag_get(r, key, tab),
									    token),
						   r->tol);
	}
	if (!keep)
		return 0;
	r->akept[a]++;
	float *sum = r->asum + (size_t)a * r->md;
	for (uint32_t j = 0; j < dim; j++)
		sum[j] += g[j];
	return 1;
}

int st_algo_gba_rows_step(st_algo_gba_rows_t *r, uint64_t lo,
			  int (*update)(void *arg, uint64_t key, uint8_t tab, float *g,
					uint32_t dim),
			  void *arg)
{
	int rc = r->perid ? tag_reserve(r, r->nacc, lo) : ST_OK;
	if (rc < 0)
		return rc;
	const uint64_t seen = r->k + 1;   /* the tag of step k */
	for (size_t a = 0; a < r->nacc; a++) {
		if (!r->akept[a])
			continue;
		const uint32_t dim = r->adim[a];
		float *g = r->asum + a * r->md;
		const float inv = 1.0f / (float)(r->perid ? r->acnt[a] : r->count);
		for (uint32_t j = 0; j < dim; j++)
			g[j] *= inv;
		if ((rc = update(arg, r->akey[a], r->atab[a], g, dim)) < 0)
			return rc;
		if (r->perid)
			tag_set(r, r->akey[a], r->atab[a], seen);
	}
	r->k = seen;
	r->count = 0;
	r->nacc = 0;
	if (r->aslot)
		memset(r->aslot, 0xff, sizeof(uint32_t) * r->scap);
	return ST_OK;
}
