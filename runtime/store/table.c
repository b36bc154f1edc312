/*
 * table.c — sharded concurrent hash table from uint64 key to a row in slabs,
 * with feature admission and TTL eviction.
 *
 * Layout. A key goes to shard (mix(key) >> (64 - shard_bits)); the low bits
 * of the same hash pick the probe start inside the shard, so the two choices
 * are independent. A shard has:
 *   - a slab: rows live in chunks of chunk_rows rows; row r of the shard is at
 *     chunks[r >> chunk_bits] + (r & chunk_mask) * stride. Chunks are never
 *     moved or freed before destroy, so row pointers stay valid; only the small
 *     array of chunk pointers is reallocated, under the shard lock. A row ends
 *     with its metadata (last_step, freq) and its key.
 *   - an open-addressing index of `cap` 4-byte entries (linear probing): the
 *     low 24 bits are the row number, the high 8 bits a tag taken from the
 *     key's hash, so a probe reads a row (to compare its key) only when the
 *     tag matches. EMPTY (all ones) marks an empty entry; so a shard holds at
 *     most 2^24 - 1 rows. The index doubles when 3/4 full; rehashing touches
 *     the index and reads keys, never moves rows. Deletion shifts later
 *     entries of the probe run back (no tombstones).
 *   - a free list of evicted row numbers, threaded through the dead rows
 *     themselves (the first float of a free row holds the next one), so it
 *     costs no memory.
 *   - admission candidates: keys seen but not admitted, with their count and
 *     last step, in a small open-addressing map (only when min_count >= 2).
 *
 * Why 16 bytes of metadata plus the index, not less: the row needs its key
 * (8 bytes, for foreach, eviction and rehashing), last_step (4, TTL) and freq
 * (4, LFU); the index then costs 4 bytes / load factor (5.3 to 10.7 bytes,
 * load 0.375 to 0.75). Storing the key in the index instead costs 12 bytes /
 * load factor. With a full 64-bit key, a 32-bit last_step and a 32-bit row
 * number, 8 + 4 + 4 / load > 16 for any load < 1, so "16 bytes in all" needs
 * a smaller row number or last_step, or quotienting the key into the index
 * position (a possible follow-up; the lead decides).
 *
 * Threads: any number of callers. Each shard's mutex guards its index, slab
 * bookkeeping, free list, candidates and counters; one lock is held at a
 * time, never two. Row floats are not guarded (the caller's policy);
 * metadata is updated with relaxed atomics so readers never see a torn value.
 *
 * Determinism: a new row's values are a function of (seed, key) only;
 * probability admission is a function of (seed, key) only; count admission
 * depends only on how many creating lookups a key had.
 */
#include "runtime/store/table_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

int st_table_create(st_table_t **out, const st_table_opts_t *o)
{
	uint32_t ns = o->n_shards ? o->n_shards : 64;
	if (o->dim < 1 || o->dim > (1u << 20) || o->state_dim > (1u << 20) ||
	    (ns & (ns - 1)) || ns > (1u << 16) || !(o->init_scale >= 0.0f) ||
	    !(o->admit_prob >= 0.0) || o->row_prec < ST_ROW_FP32 || o->row_prec > ST_ROW_FP16)
		return ST_EINVAL;
	st_table_t *t = calloc(1, sizeof *t);
	if (!t)
		return ST_ENOMEM;
	t->o = *o;
	t->o.n_shards = ns;
	t->lead = o->cache_rows ? CACHE_WORDS : 0;
	t->ew = st_rowfmt_words(o->row_prec, o->dim);
	t->stride = t->lead + t->ew + o->state_dim + META_WORDS;
	if (o->cache_rows && !o->ssd) {
		free(t);
		return ST_EINVAL;
	}
	if (o->admit_prob > 0.0 && o->admit_prob < 1.0)
		t->prob_cut = (uint64_t)(o->admit_prob * 18446744073709551616.0);
	/* Chunks of about 16 KiB (at least 16 rows): the last, partly used chunk
	 * of each shard is the slab's only slack, so keep it small; the chunk
	 * pointer array stays small (8 bytes per chunk, under 0.2 bytes a row). */
	size_t row_b = (size_t)t->stride * sizeof(float);
	uint32_t bits = 4;
	while (bits < 20 && ((size_t)1 << (bits + 1)) * row_b <= (16u << 10))
		bits++;
	t->chunk_bits = bits;
	t->chunk_rows = 1u << bits;
	while ((1u << t->shard_bits) < ns)
		t->shard_bits++;
	t->shards = aligned_alloc(64, ((sizeof(shard_t) * ns + 63) / 64) * 64);
	if (!t->shards) {
		free(t);
		return ST_ENOMEM;
	}
	memset(t->shards, 0, sizeof(shard_t) * ns);
	for (uint32_t i = 0; i < ns; i++) {
		shard_t *s = &t->shards[i];
		pthread_mutex_init(&s->mu, NULL);
		s->free_head = EMPTY;
		s->cap = INIT_CAP;
		s->idx = malloc(sizeof(uint32_t) * INIT_CAP);
		if (!s->idx) {
			t->o.n_shards = i + 1;
			st_table_destroy(t);
			return ST_ENOMEM;
		}
		memset(s->idx, 0xff, sizeof(uint32_t) * INIT_CAP);
	}
	if (o->cache_rows) {
		int rc = st__cache_open(t);
		if (rc < 0) {
			st_table_destroy(t);
			return rc;
		}
	}
	*out = t;
	return ST_OK;
}

void st_table_destroy(st_table_t *t)
{
	if (!t)
		return;
	st__cache_close(t);
	for (uint32_t i = 0; i < t->o.n_shards; i++) {
		shard_t *s = &t->shards[i];
		st__cache_free_shard(s);
		for (uint32_t c = 0; c < s->n_chunks; c++)
			free(s->chunks[c]);
		free(s->chunks);
		free(s->idx);
		free(s->cand);
		free(s->cand_used);
		pthread_mutex_destroy(&s->mu);
	}
	free(t->shards);
	free(t);
}

int st__table_grow_index(const st_table_t *t, shard_t *s)
{
	uint32_t ncap = s->cap * 2;
	if (ncap == 0)
		return ST_ENOMEM;
	uint32_t *ni = malloc(sizeof(uint32_t) * ncap);
	if (!ni)
		return ST_ENOMEM;
	memset(ni, 0xff, sizeof(uint32_t) * ncap);
	uint32_t mask = ncap - 1;
	for (uint32_t j = 0; j < s->cap; j++) {
		uint32_t e = s->idx[j];
		if (e == EMPTY)
			continue;
		uint32_t i = (uint32_t)mix64(row_key(t, row_ptr(t, s, e & ROW_MASK))) & mask;
		while (ni[i] != EMPTY)
			i = (i + 1) & mask;
		ni[i] = e;
	}
	free(s->idx);
	s->idx = ni;
	s->cap = ncap;
	return ST_OK;
}

int st_table_reserve(st_table_t *t, uint64_t rows)
{
	/* Rows per shard: the mean plus 4 standard deviations of a binomial
	 * and a little, for keys that hash unevenly. */
	const uint64_t S = t->o.n_shards;
	const uint64_t mean = rows / S;
	uint64_t sd = 1;
	while (sd * sd < mean)
		sd++;
	const uint64_t per = mean + 4 * sd + 64;
	for (uint64_t i = 0; i < S; i++) {
		shard_t *s = &t->shards[i];
		pthread_mutex_lock(&s->mu);
		int rc = ST_OK;
		while (rc >= 0 && ((uint64_t)s->n + per) * 4 > (uint64_t)s->cap * 3 &&
		       s->cap < (UINT32_C(1) << 31))
			rc = st__table_grow_index(t, s);
		pthread_mutex_unlock(&s->mu);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}

/* Removes the entry at position i, shifting later entries of its probe run
 * back so that every remaining key stays reachable from its home. */
void st__table_index_delete(const st_table_t *t, shard_t *s, uint32_t i)
{
	uint32_t mask = s->cap - 1, j = i;
	for (;;) {
		j = (j + 1) & mask;
		uint32_t e = s->idx[j];
		if (e == EMPTY)
			break;
		uint32_t home = (uint32_t)mix64(row_key(t, row_ptr(t, s, e & ROW_MASK))) & mask;
		/* Move e into the hole unless its home lies cyclically in (i, j]. */
		int stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
		if (!stays) {
			s->idx[i] = e;
			i = j;
		}
	}
	s->idx[i] = EMPTY;
}

/* Deterministic initial values of a new row from (seed, key). */
void st__table_init_row(const st_table_t *t, uint64_t key, float *row)
{
	uint64_t base = mix64(key ^ mix64(t->o.seed + UINT64_C(0x632be59bd9b4e019)));
	float a = t->o.init_scale;
	/* A compact row is drawn in fp32 as an fp32 row is, then rounded
	 * (a chunk at a time), so both start from the same values. */
	float tmp[64];
	for (uint32_t j0 = 0; j0 < t->o.dim; j0 += 64) {
		const uint32_t n = t->o.dim - j0 < 64 ? t->o.dim - j0 : 64;
		float *dst = t->o.row_prec == ST_ROW_FP32 ? row + j0 : tmp;
		for (uint32_t i = 0; i < n; i++) {
			const uint32_t j = j0 + i;
			if (a == 0.0f) {
				dst[i] = 0.0f;
				continue;
			}
			uint64_t h = mix64(base + (uint64_t)j * UINT64_C(0x9e3779b97f4a7c15));
			float u = (float)(h >> 40) * 0x1.0p-24f;   /* [0, 1) */
			dst[i] = (2.0f * u - 1.0f) * a;
		}
		if (t->o.row_prec != ST_ROW_FP32)
			st_rowfmt_encode(t->o.row_prec, tmp, (uint16_t *)(void *)row + j0, n);
	}
	if (t->ew * 2 > t->o.dim && t->o.row_prec != ST_ROW_FP32)
		((uint16_t *)(void *)row)[t->o.dim] = 0;   /* the pad: bytes on SSD stay defined */
	for (uint32_t j = 0; j < t->o.state_dim; j++)
		row[t->ew + j] = t->o.state_init;
	st_table_meta_t *m = meta_of(t, row);
	m->last_step = 0;
	m->freq = 0;
	set_row_key(t, row, key);
}

/* ---- admission candidates -------------------------------------------- */

static int cand_grow(shard_t *s)
{
	uint32_t ncap = s->cand_cap ? s->cand_cap * 2 : 64;
	cand_t *nc = malloc(sizeof(cand_t) * ncap);
	uint8_t *nu = calloc(ncap, 1);
	if (!nc || !nu) {
		free(nc);
		free(nu);
		return ST_ENOMEM;
	}
	for (uint32_t j = 0; j < s->cand_cap; j++) {
		if (!s->cand_used[j])
			continue;
		uint32_t i = (uint32_t)mix64(s->cand[j].key) & (ncap - 1);
		while (nu[i])
			i = (i + 1) & (ncap - 1);
		nc[i] = s->cand[j];
		nu[i] = 1;
	}
	free(s->cand);
	free(s->cand_used);
	s->cand = nc;
	s->cand_used = nu;
	s->cand_cap = ncap;
	return ST_OK;
}

static uint32_t cand_probe(const shard_t *s, uint64_t key, uint64_t h)
{
	uint32_t mask = s->cand_cap - 1, i = (uint32_t)h & mask;
	while (s->cand_used[i] && s->cand[i].key != key)
		i = (i + 1) & mask;
	return i;
}

static void cand_delete(shard_t *s, uint32_t i)
{
	uint32_t mask = s->cand_cap - 1, j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (!s->cand_used[j])
			break;
		uint32_t home = (uint32_t)mix64(s->cand[j].key) & mask;
		int stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
		if (!stays) {
			s->cand[i] = s->cand[j];
			i = j;
		}
	}
	s->cand_used[i] = 0;
	s->cand_n--;
}

/* With the shard locked: counts one occurrence of an absent key. Returns 1
 * when the key is admitted now, 0 when not (yet), ST_ENOMEM. */
int st__table_admit(const st_table_t *t, shard_t *s, uint64_t key, uint64_t h, uint32_t step)
{
	if (t->prob_cut) {
		uint64_t d = mix64(key ^ mix64(t->o.seed ^ UINT64_C(0xa0761d6478bd642f)));
		return d < t->prob_cut;
	}
	if (t->o.admit_min_count <= 1)
		return 1;
	if ((s->cand_n + 1) * 4 > s->cand_cap * 3 && cand_grow(s) < 0)
		return ST_ENOMEM;
	uint32_t i = cand_probe(s, key, h);
	if (!s->cand_used[i]) {
		s->cand_used[i] = 1;
		s->cand[i] = (cand_t){ .key = key, .count = 0 };
		s->cand_n++;
	}
	s->cand[i].step = step;
	if (++s->cand[i].count < t->o.admit_min_count)
		return 0;
	cand_delete(s, i);
	return 1;
}

/* ---- lookups ---------------------------------------------------------- */

/* With the shard locked: a row number for a new row, from the free list or
 * the end of the slab. Returns ST_ENOMEM. */
int64_t st__table_alloc_row(const st_table_t *t, shard_t *s)
{
	if (s->free_head != EMPTY) {
		uint32_t r = s->free_head;
		uint32_t next;
		memcpy(&next, row_ptr(t, s, r), sizeof next);
		s->free_head = next;
		s->n_free--;
		return r;
	}
	if (s->used >= MAX_ROWS)
		return ST_ENOMEM;
	uint32_t r = s->used;
	if ((r >> t->chunk_bits) >= s->n_chunks) {
		if (s->n_chunks == s->chunks_cap) {
			uint32_t nc = s->chunks_cap ? s->chunks_cap * 2 : 8;
			float **cp = realloc(s->chunks, sizeof(float *) * nc);
			if (!cp)
				return ST_ENOMEM;
			s->chunks = cp;
			s->chunks_cap = nc;
		}
		float *c = malloc(sizeof(float) * t->stride * t->chunk_rows);
		if (!c)
			return ST_ENOMEM;
		s->chunks[s->n_chunks++] = c;
	}
	s->used = r + 1;
	return r;
}

int64_t st__table_insert(st_table_t *t, shard_t *s, uint64_t h, uint32_t *pos)
{
	if ((s->n + 1) * 4 > s->cap * 3) {
		if (st__table_grow_index(t, s) < 0)
			return ST_ENOMEM;
		/* The key is not in the index yet: its place is the first
		 * empty entry of its probe run in the grown index. */
		uint32_t mask = s->cap - 1, i = (uint32_t)h & mask;
		while (s->idx[i] != EMPTY)
			i = (i + 1) & mask;
		*pos = i;
	}
	int64_t r = st__table_alloc_row(t, s);
	if (r < 0)
		return r;
	s->idx[*pos] = (tag_of(h) << ROW_BITS) | (uint32_t)r;
	__atomic_store_n(&s->n, s->n + 1, __ATOMIC_RELAXED);
	return r;
}

/* With the shard locked: the row of key, created when absent and admitted.
 * Returns 1 if created, 0 if it existed or the key is not admitted (*row =
 * NULL), ST_ENOMEM. */
static int get_or_create_locked(st_table_t *t, shard_t *s, uint64_t key, uint64_t h,
				uint32_t step, float **row)
{
	int created = 0;
	uint32_t pos = probe(t, s, key, h);
	if (s->idx[pos] == EMPTY) {
		int a = st__table_admit(t, s, key, h, step);
		if (a <= 0) {
			if (a == 0)
				s->rejected++;
			*row = NULL;
			return a;
		}
		int64_t r = st__table_insert(t, s, h, &pos);
		if (r < 0)
			return (int)r;
		st__table_init_row(t, key, row_ptr(t, s, (uint32_t)r));
		s->admitted++;
		created = 1;
	}
	float *p = row_ptr(t, s, s->idx[pos] & ROW_MASK);
	/* Under the lock, so counts are exact; atomics for lock-free readers. */
	touch(meta_of(t, p), step);
	*row = p;
	return created;
}

int st_table_get_or_create(st_table_t *t, uint64_t key, uint32_t step, float **row)
{
	if (t->ssd)
		return st__cache_resolve(t, &key, 1, step, 1, row);
	uint64_t h = mix64(key);
	shard_t *s = shard_of(t, h);
	pthread_mutex_lock(&s->mu);
	int rc = get_or_create_locked(t, s, key, h, step, row);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

#define PREFETCH_AHEAD 8

int st__table_group(const st_table_t *t, const uint64_t *keys, uint32_t n, uint64_t **hs_out,
		    uint32_t **order_out, uint32_t **end_out)
{
	uint32_t ns = t->o.n_shards;
	uint64_t *hs = malloc(sizeof(uint64_t) * (n ? n : 1));
	uint32_t *order = malloc(sizeof(uint32_t) * (n ? n : 1));
	uint32_t *start = calloc((size_t)ns + 1, sizeof(uint32_t));
	if (!hs || !order || !start) {
		free(hs);
		free(order);
		free(start);
		return ST_ENOMEM;
	}
	/* Counting sort of key positions by shard; stable, so results and
	 * creation order within a shard follow the caller's order. */
	for (uint32_t i = 0; i < n; i++) {
		hs[i] = mix64(keys[i]);
		start[(t->shard_bits ? hs[i] >> (64 - t->shard_bits) : 0) + 1]++;
	}
	for (uint32_t i = 0; i < ns; i++)
		start[i + 1] += start[i];
	for (uint32_t i = 0; i < n; i++) {
		uint32_t sh = t->shard_bits ? (uint32_t)(hs[i] >> (64 - t->shard_bits)) : 0;
		order[start[sh]++] = i;
	}
	/* start[i] is now the end of shard i's run. */
	*hs_out = hs;
	*order_out = order;
	*end_out = start;
	return ST_OK;
}

int st_table_resolve(st_table_t *t, const uint64_t *keys, uint32_t n, uint32_t step,
		     int create, float **rows)
{
	if (t->ssd)
		return st__cache_resolve(t, keys, n, step, create, rows);
	uint64_t *hs;
	uint32_t *order, *start;
	if (st__table_group(t, keys, n, &hs, &order, &start) < 0)
		return ST_ENOMEM;
	uint32_t ns = t->o.n_shards;
	int created = 0, rc = 0;
	uint32_t a = 0;
	for (uint32_t sh = 0; sh < ns && rc >= 0; sh++) {
		uint32_t b = start[sh];
		if (a == b)
			continue;
		shard_t *s = &t->shards[sh];
		pthread_mutex_lock(&s->mu);
		for (uint32_t j = a; j < b; j++) {
			if (j + PREFETCH_AHEAD < b) {
				uint64_t hp = hs[order[j + PREFETCH_AHEAD]];
				__builtin_prefetch(&s->idx[(uint32_t)hp & (s->cap - 1)]);
			}
			uint32_t i = order[j];
			if (create) {
				rc = get_or_create_locked(t, s, keys[i], hs[i], step, &rows[i]);
				if (rc < 0)
					break;
				created += rc;
			} else {
				uint32_t pos = probe(t, s, keys[i], hs[i]);
				uint32_t e = s->idx[pos];
				rows[i] = e == EMPTY ? NULL : row_ptr(t, s, e & ROW_MASK);
			}
		}
		pthread_mutex_unlock(&s->mu);
		a = b;
	}
	free(hs);
	free(order);
	free(start);
	return rc < 0 ? rc : created;
}

float *st_table_find(st_table_t *t, uint64_t key)
{
	uint64_t h = mix64(key);
	shard_t *s = shard_of(t, h);
	float *p = NULL;
	pthread_mutex_lock(&s->mu);
	uint32_t e = s->idx[probe(t, s, key, h)];
	if (e != EMPTY)
		p = row_ptr(t, s, e & ROW_MASK);
	pthread_mutex_unlock(&s->mu);
	return p;
}

st_table_meta_t *st_table_meta(const st_table_t *t, float *row)
{
	return meta_of(t, row);
}

/* ---- eviction ---------------------------------------------------------- */

static inline int stale(uint32_t now, uint32_t last, uint32_t ttl)
{
	return (int64_t)now - (int64_t)last > (int64_t)ttl;
}

uint64_t st_table_evict_older(st_table_t *t, uint32_t now_step, uint32_t ttl)
{
	uint64_t total = 0;
	for (uint32_t sh = 0; sh < t->o.n_shards; sh++) {
		shard_t *s = &t->shards[sh];
		pthread_mutex_lock(&s->mu);
		/* A deletion shifts later entries back into position i, so i is
		 * examined again; an entry that wraps from the end to the front
		 * may be seen twice, which is harmless (it is then fresh or gone). */
		for (uint32_t i = 0; i < s->cap;) {
			uint32_t e = s->idx[i];
			if (e == EMPTY) {
				i++;
				continue;
			}
			uint32_t r = e & ROW_MASK;
			float *row = row_ptr(t, s, r);
			if (!stale(now_step, meta_of(t, row)->last_step, ttl) ||
			    (t->ssd && __atomic_load_n(&cw_of(row)->pins, __ATOMIC_ACQUIRE))) {
				i++;
				continue;
			}
			if (t->ssd)
				st__cache_unlink(t, s, r);
			if (t->o.on_evict)
				t->o.on_evict(t->o.evict_arg, row_key(t, row));
			st__table_index_delete(t, s, i);
			st__table_free_row(t, s, r);
			s->evicted++;
			total++;
		}
		for (uint32_t i = 0; i < s->cand_cap;) {
			if (s->cand_used[i] && stale(now_step, s->cand[i].step, ttl))
				cand_delete(s, i);
			else
				i++;
		}
		pthread_mutex_unlock(&s->mu);
	}
	return total;
}

int st_table_clear(st_table_t *t)
{
	/* The SSD tier's records and cold map would have to go too; nothing
	 * needs that (resume clears only tables it hashed while loading, and
	 * those are in RAM). */
	if (t->ssd)
		return ST_EINVAL;
	for (uint32_t sh = 0; sh < t->o.n_shards; sh++) {
		shard_t *s = &t->shards[sh];
		pthread_mutex_lock(&s->mu);
		/* The index keeps its size and the slab its chunks: a reload of
		 * about as many rows (an older checkpoint) reuses both. Rows are
		 * handed out from 0 again, so slots fill as in a new table. */
		memset(s->idx, 0xff, sizeof(uint32_t) * s->cap);
		s->used = 0;
		s->free_head = EMPTY;
		s->n_free = 0;
		if (s->cand_used)
			memset(s->cand_used, 0, s->cand_cap);
		s->cand_n = 0;
		s->admitted = s->rejected = s->evicted = 0;
		__atomic_store_n(&s->n, 0, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&s->mu);
	}
	return ST_OK;
}

void st__table_free_row(const st_table_t *t, shard_t *s, uint32_t r)
{
	memcpy(row_ptr(t, s, r), &s->free_head, sizeof s->free_head);
	s->free_head = r;
	s->n_free++;
	__atomic_store_n(&s->n, s->n - 1, __ATOMIC_RELAXED);
}

/* ---- counters ---------------------------------------------------------- */

uint64_t st_table_size(const st_table_t *t)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < t->o.n_shards; i++)
		n += __atomic_load_n(&t->shards[i].n, __ATOMIC_RELAXED);
	return n;
}

void st_table_stats(st_table_t *t, st_table_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	out->over_budget = __atomic_load_n(&t->over_budget, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < t->o.n_shards; i++) {
		shard_t *s = &t->shards[i];
		pthread_mutex_lock(&s->mu);
		out->rows += s->n;
		out->admitted += s->admitted;
		out->rejected += s->rejected;
		out->candidates += s->cand_n;
		out->evicted += s->evicted;
		out->free_rows += s->n_free;
		out->hits_lru += s->hits_lru;
		out->hits_lfu += s->hits_lfu;
		out->misses += s->misses;
		out->loads += s->loads;
		out->lru_to_lfu += s->lru_to_lfu;
		out->spilled += s->spilled;
		out->cold_rows += s->cold_n;
		out->lru_rows += s->n_lru;
		out->lfu_rows += s->n_lfu;
		pthread_mutex_unlock(&s->mu);
	}
}

uint32_t st_table_row_floats(const st_table_t *t)
{
	return t->ew + t->o.state_dim;
}

int st_table_row_prec(const st_table_t *t)
{
	return t->o.row_prec;
}

size_t st_table_row_bytes(const st_table_t *t)
{
	size_t stride_b = (size_t)t->stride * sizeof(float);
	uint64_t rows = 0;
	size_t bytes = sizeof(*t) + sizeof(shard_t) * t->o.n_shards;
	for (uint32_t i = 0; i < t->o.n_shards; i++) {
		shard_t *s = &t->shards[i];
		pthread_mutex_lock(&s->mu);
		rows += s->n;
		bytes += sizeof(uint32_t) * s->cap + sizeof(float *) * s->chunks_cap +
			 (size_t)s->n_chunks * t->chunk_rows * stride_b +
			 (sizeof(cand_t) + 1) * s->cand_cap;
		pthread_mutex_unlock(&s->mu);
	}
	return rows ? (size_t)(bytes / rows) : stride_b;
}

void st_table_foreach(st_table_t *t, void (*fn)(uint64_t key, float *row, void *arg),
		      void *arg)
{
	for (uint32_t i = 0; i < t->o.n_shards; i++) {
		shard_t *s = &t->shards[i];
		pthread_mutex_lock(&s->mu);
		for (uint32_t j = 0; j < s->cap; j++) {
			uint32_t e = s->idx[j];
			if (e != EMPTY) {
				float *row = row_ptr(t, s, e & ROW_MASK);
				fn(row_key(t, row), row, arg);
			}
		}
		pthread_mutex_unlock(&s->mu);
	}
}
