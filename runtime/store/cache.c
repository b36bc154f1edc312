/*
 * cache.c — the RAM tier of the host table as a cache over the SSD tier
 * (hierarchical-gpu-parameter-server.md, Section 5 "MEM-PS" and Appendix D
 * "Cache policy"; the SSD tier itself is runtime/store/ssd.c, Section 6).
 *
 * Every row a lookup returns goes to the head of its shard's LRU segment.
 * When the LRU segment outgrows its share of the shard's capacity, its
 * least recently used unpinned rows move to the LFU segment; when the shard
 * holds more rows than its capacity, the least frequently used rows of the
 * LFU segment are written to SSD and their RAM slots freed — "rows evicted
 * from the LRU cache go to an LFU cache; rows evicted from that are flushed
 * to SSD" (Appendix D). The LFU segment keeps one FIFO per log2(frequency),
 * so picking a victim is O(1) instead of a heap operation per access.
 *
 * Pins. Every row a lookup returns is pinned (a count in the 16 bytes before
 * the row) until the caller unpins it: the trainer pins a batch's rows from
 * pull-sparse to push, so the rows of batches in flight — the one training
 * and the prefetched next ones — are never evicted (Appendix D: "we pin the
 * working parameters of the current batch and the pre-fetched parameters of
 * next iterations"). A shard whose rows are all pinned may exceed its
 * capacity; the table counts it (over_budget) and the trainer refuses, up
 * front, budgets smaller than the rows of the batches it keeps in flight.
 *
 * Cold map. A key whose row is on SSD has an entry key -> st_ssd_loc_t in its
 * shard's cold map, under the same shard lock as the RAM index, so a key is
 * always in exactly one place: the RAM index, the cold map, or nowhere.
 * Loading: under the lock, a miss that finds the key in the cold map removes
 * the cold entry and inserts a pinned RAM row in state LOADING; after the
 * lock is released, the loader reads the SSD record into the row, releases
 * the SSD copy and marks the row READY. A concurrent lookup of the same key
 * finds the LOADING row and waits for it. The record's file cannot vanish in
 * between: the SSD tier deletes a file only once every record in it is
 * released, and only the loader releases this one.
 *
 * Exactness: a row's floats and metadata (last_step, freq) go to SSD and
 * come back bit for bit, and new rows are a function of (seed, key), so a
 * run with a small cache computes exactly what an all-in-RAM run computes.
 * Not done: TTL expiry of rows while they are on SSD (a cold row expires
 * when it is next loaded and then unused for the TTL).
 *
 * Lock order: a shard lock, then the SSD tier's internal locks (append and
 * release are called with the shard lock held). The SSD tier calls relocate
 * (which takes a shard lock) with none of its locks held.
 */
#include <sched.h>
#include <stdlib.h>

#include "runtime/err.h"
#include "runtime/store/table_internal.h"

/* Rows examined past pinned ones when looking for a victim. */
#define WALK 64

static inline cword_t *cw_r(const st_table_t *t, const shard_t *s, uint32_t r)
{
	return cw_of(row_ptr(t, s, r));
}

static void list_unlink(const st_table_t *t, shard_t *s, uint32_t r, uint32_t *head,
			uint32_t *tail)
{
	cword_t *c = cw_r(t, s, r);
	if (c->prev != EMPTY)
		cw_r(t, s, c->prev)->next = c->next;
	else
		*head = c->next;
	if (c->next != EMPTY)
		cw_r(t, s, c->next)->prev = c->prev;
	else
		*tail = c->prev;
	c->prev = c->next = EMPTY;
}

static void list_push_head(const st_table_t *t, shard_t *s, uint32_t r, uint32_t *head,
			   uint32_t *tail)
{
	cword_t *c = cw_r(t, s, r);
	c->prev = EMPTY;
	c->next = *head;
	if (*head != EMPTY)
		cw_r(t, s, *head)->prev = r;
	else
		*tail = r;
	*head = r;
}

void st__cache_unlink(const st_table_t *t, shard_t *s, uint32_t r)
{
	cword_t *c = cw_r(t, s, r);
	if (c->seg == SEG_LRU) {
		list_unlink(t, s, r, &s->lru_head, &s->lru_tail);
		s->n_lru--;
	} else if (c->seg == SEG_LFU) {
		list_unlink(t, s, r, &s->lfu_head[c->bucket], &s->lfu_tail[c->bucket]);
		s->n_lfu--;
	}
	c->seg = SEG_NONE;
}

static void lru_insert(const st_table_t *t, shard_t *s, uint32_t r)
{
	list_push_head(t, s, r, &s->lru_head, &s->lru_tail);
	cw_r(t, s, r)->seg = SEG_LRU;
	s->n_lru++;
}

static void lfu_insert(const st_table_t *t, shard_t *s, uint32_t r)
{
	uint32_t f = __atomic_load_n(&meta_of(t, row_ptr(t, s, r))->freq, __ATOMIC_RELAXED);
	uint32_t b = f ? 32u - (uint32_t)__builtin_clz(f) : 0;
	if (b >= LFU_BUCKETS)
		b = LFU_BUCKETS - 1;
	list_push_head(t, s, r, &s->lfu_head[b], &s->lfu_tail[b]);
	cword_t *c = cw_r(t, s, r);
	c->seg = SEG_LFU;
	c->bucket = (uint8_t)b;
	s->n_lfu++;
}

/* A row that must stay in RAM: pinned, or not (yet) holding valid data. */
static inline int held(cword_t *c)
{
	return __atomic_load_n(&c->pins, __ATOMIC_ACQUIRE) != 0 ||
	       __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != ROW_READY;
}

/* Walks a list from its tail past held rows; EMPTY if none within WALK. */
static uint32_t victim(const st_table_t *t, const shard_t *s, uint32_t r)
{
	for (int k = 0; r != EMPTY && k < WALK; k++) {
		cword_t *c = cw_r(t, s, r);
		if (!held(c))
			return r;
		r = c->prev;
	}
	return EMPTY;
}

/* ---- cold map: key -> SSD location ------------------------------------- */

static uint32_t cold_probe(const shard_t *s, uint64_t key, uint64_t h)
{
	uint32_t mask = s->cold_cap - 1, i = (uint32_t)h & mask;
	while (s->cold_loc[i] != ST_SSD_NOLOC && s->cold_key[i] != key)
		i = (i + 1) & mask;
	return i;
}

static int cold_grow(shard_t *s)
{
	uint32_t ncap = s->cold_cap ? s->cold_cap * 2 : 64;
	uint64_t *nk = malloc(sizeof(uint64_t) * ncap);
	uint64_t *nl = malloc(sizeof(uint64_t) * ncap);
	if (!nk || !nl || ncap == 0) {
		free(nk);
		free(nl);
		return ST_ENOMEM;
	}
	memset(nl, 0xff, sizeof(uint64_t) * ncap);
	for (uint32_t j = 0; j < s->cold_cap; j++) {
		if (s->cold_loc[j] == ST_SSD_NOLOC)
			continue;
		uint32_t i = (uint32_t)mix64(s->cold_key[j]) & (ncap - 1);
		while (nl[i] != ST_SSD_NOLOC)
			i = (i + 1) & (ncap - 1);
		nk[i] = s->cold_key[j];
		nl[i] = s->cold_loc[j];
	}
	free(s->cold_key);
	free(s->cold_loc);
	s->cold_key = nk;
	s->cold_loc = nl;
	s->cold_cap = ncap;
	return ST_OK;
}

/* Makes room for one more entry. ST_ENOMEM. */
static int cold_reserve(shard_t *s)
{
	if ((s->cold_n + 1) * 4 > s->cold_cap * 3)
		return cold_grow(s);
	return ST_OK;
}

static void cold_delete(shard_t *s, uint32_t i)
{
	uint32_t mask = s->cold_cap - 1, j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (s->cold_loc[j] == ST_SSD_NOLOC)
			break;
		uint32_t home = (uint32_t)mix64(s->cold_key[j]) & mask;
		int stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
		if (!stays) {
			s->cold_key[i] = s->cold_key[j];
			s->cold_loc[i] = s->cold_loc[j];
			i = j;
		}
	}
	s->cold_loc[i] = ST_SSD_NOLOC;
	s->cold_n--;
}

/* The cold entry of key, or EMPTY. */
static uint32_t cold_find(const shard_t *s, uint64_t key, uint64_t h)
{
	if (!s->cold_n)
		return EMPTY;
	uint32_t i = cold_probe(s, key, h);
	return s->cold_loc[i] == ST_SSD_NOLOC ? EMPTY : i;
}

/* ---- eviction ---------------------------------------------------------- */

/* With the shard locked: writes row r to SSD and frees its RAM slot. */
static int spill(st_table_t *t, shard_t *s, uint32_t r)
{
	float *row = row_ptr(t, s, r);
	uint64_t key = row_key(t, row), h = mix64(key);
	int rc = cold_reserve(s);
	if (rc < 0)
		return rc;
	st_ssd_loc_t loc;
	/* The payload is the row's floats then last_step and freq: contiguous. */
	if ((rc = st_ssd_append(t->ssd, key, row, &loc)) < 0)
		return rc;
	uint32_t i = cold_probe(s, key, h);
	s->cold_key[i] = key;
	s->cold_loc[i] = loc;
	s->cold_n++;
	st__cache_unlink(t, s, r);
	st__table_index_delete(t, s, probe(t, s, key, h));
	st__table_free_row(t, s, r);
	s->spilled++;
	return ST_OK;
}

/* With the shard locked: brings the shard back within its capacity. */
static int evict_locked(st_table_t *t, shard_t *s)
{
	while (s->n_lru > t->cap_lru) {
		uint32_t r = victim(t, s, s->lru_tail);
		if (r == EMPTY)
			break;
		st__cache_unlink(t, s, r);
		lfu_insert(t, s, r);
		s->lru_to_lfu++;
	}
	while (s->n_lru + s->n_lfu > t->cap_shard) {
		uint32_t r = EMPTY;
		for (uint32_t b = 0; b < LFU_BUCKETS && r == EMPTY; b++)
			r = victim(t, s, s->lfu_tail[b]);
		if (r == EMPTY)   /* LFU empty or held: the LRU tail goes directly */
			r = victim(t, s, s->lru_tail);
		if (r == EMPTY) {
			__atomic_add_fetch(&t->over_budget, 1, __ATOMIC_RELAXED);
			break;
		}
		int rc = spill(t, s, r);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}

/* ---- lookups ----------------------------------------------------------- */

/* touch() for a row not guarded by the lock (loaded or waited for). */
static void touch_atomic(st_table_meta_t *m, uint32_t step)
{
	__atomic_store_n(&m->last_step, step, __ATOMIC_RELAXED);
	uint32_t f = __atomic_load_n(&m->freq, __ATOMIC_RELAXED);
	while (f != UINT32_MAX && !__atomic_compare_exchange_n(&m->freq, &f, f + 1, 1,
							       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* With the shard locked: the row of key i, or NULL; see st__cache_resolve.
 * Adds i to the load list (*nl) or the wait list (*nw). Returns 1 if a row
 * was created, 0, or an error. */
static int lookup_locked(st_table_t *t, shard_t *s, uint64_t key, uint64_t h, uint32_t step,
			 int create, float **out, st_ssd_loc_t *loc, int *load, int *wait)
{
	*out = NULL;
	uint32_t pos = probe(t, s, key, h);
	uint32_t e = s->idx[pos];
	if (e != EMPTY) {
		uint32_t r = e & ROW_MASK;
		float *row = row_ptr(t, s, r);
		cword_t *c = cw_of(row);
		__atomic_add_fetch(&c->pins, 1, __ATOMIC_RELAXED);
		if (c->seg == SEG_LFU)
			s->hits_lfu++;
		else
			s->hits_lru++;
		st__cache_unlink(t, s, r);
		lru_insert(t, s, r);
		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == ROW_LOADING)
			*wait = 1;
		else if (create)
			touch(meta_of(t, row), step);
		*out = row;
		return 0;
	}
	uint32_t ci = cold_find(s, key, h);
	if (ci == EMPTY) {
		if (!create)
			return 0;
		int a = st__table_admit(t, s, key, h, step);
		if (a < 0)
			return a;
		if (a == 0) {
			s->rejected++;
			return 0;
		}
	}
	int64_t r = st__table_insert(t, s, h, &pos);
	if (r < 0)
		return (int)r;
	float *row = row_ptr(t, s, (uint32_t)r);
	cword_t *c = cw_of(row);
	memset(c, 0, sizeof *c);
	c->prev = c->next = EMPTY;
	c->pins = 1;
	int created = 0;
	if (ci != EMPTY) {
		set_row_key(t, row, key);
		c->state = ROW_LOADING;
		*loc = s->cold_loc[ci];
		*load = 1;
		cold_delete(s, ci);
		s->loads++;
	} else {
		st__table_init_row(t, key, row);
		touch(meta_of(t, row), step);
		s->admitted++;
		s->misses++;
		created = 1;
	}
	/* A new row starts in the LFU segment, at the head of the lowest
	 * bucket, and joins the LRU segment on its second use: most new keys
	 * of a Zipf stream never come back, and entering them at the LRU head
	 * (Appendix D: "whenever we visit a parameter, we add it into an LRU
	 * cache") pushes out rows that do. Measured on bench/storage.sh (10%
	 * budget, 10.9M rows): 7% fewer SSD loads, 3% more examples/s; a
	 * row loaded back from SSD has proven reuse and enters the LRU head. */
	if (created)
		lfu_insert(t, s, (uint32_t)r);
	else
		lru_insert(t, s, (uint32_t)r);
	*out = row;
	int rc = evict_locked(t, s);
	return rc < 0 ? rc : created;
}

int st__cache_resolve(st_table_t *t, const uint64_t *keys, uint32_t n, uint32_t step,
		      int create, float **rows)
{
	uint64_t *hs;
	uint32_t *order, *end;
	if (st__table_group(t, keys, n, &hs, &order, &end) < 0)
		return ST_ENOMEM;
	size_t m = n ? n : 1;
	uint32_t *lpos = malloc(sizeof(uint32_t) * m), *wpos = malloc(sizeof(uint32_t) * m);
	st_ssd_loc_t *lloc = malloc(sizeof(st_ssd_loc_t) * m);
	uint64_t *lkey = malloc(sizeof(uint64_t) * m);
	void **ldst = malloc(sizeof(void *) * m);
	int rc = (lpos && wpos && lloc && lkey && ldst) ? ST_OK : ST_ENOMEM;
	uint32_t nl = 0, nw = 0;
	int created = 0;
	for (uint32_t i = 0; i < n; i++)
		rows[i] = NULL;
	uint32_t a = 0;
	for (uint32_t sh = 0; sh < t->o.n_shards && rc >= 0; sh++) {
		uint32_t b = end[sh];
		if (a == b)
			continue;
		shard_t *s = &t->shards[sh];
		pthread_mutex_lock(&s->mu);
		for (uint32_t j = a; j < b; j++) {
			/* Both maps are probed at random places: fetch the slots of
			 * a key a few iterations ahead (as table.c's resolve does). */
			if (j + 8 < b) {
				uint64_t hp = hs[order[j + 8]];
				__builtin_prefetch(&s->idx[(uint32_t)hp & (s->cap - 1)]);
				if (s->cold_n) {
					uint32_t ci = (uint32_t)hp & (s->cold_cap - 1);
					__builtin_prefetch(&s->cold_loc[ci]);
					__builtin_prefetch(&s->cold_key[ci]);
				}
			}
			uint32_t i = order[j];
			int load = 0, wait = 0;
			int r = lookup_locked(t, s, keys[i], hs[i], step, create, &rows[i], &lloc[nl],
					      &load, &wait);
			if (load) {
				lpos[nl] = i;
				lkey[nl] = keys[i];
				ldst[nl++] = rows[i];
			}
			if (wait)
				wpos[nw++] = i;
			if (r < 0) {
				rc = r;
				break;
			}
			created += r;
		}
		pthread_mutex_unlock(&s->mu);
		a = b;
	}
	/* Load what this call claimed, also after an error: another thread may
	 * be waiting for these rows. */
	if (nl) {
		int lr = st_ssd_read(t->ssd, nl, lkey, lloc, ldst);
		for (uint32_t k = 0; k < nl; k++) {
			float *row = ldst[k];
			if (lr == ST_OK) {
				st_ssd_release(t->ssd, lloc[k]);
				if (create)
					touch_atomic(meta_of(t, row), step);
				__atomic_store_n(&cw_of(row)->state, ROW_READY, __ATOMIC_RELEASE);
			} else {
				/* Stays pinned by its state: never spilled, never
				 * returned as data; the job stops on the error. */
				__atomic_store_n(&cw_of(row)->state, ROW_BAD, __ATOMIC_RELEASE);
			}
		}
		if (lr < 0 && rc >= 0)
			rc = lr;
	}
	for (uint32_t k = 0; k < nw; k++) {
		float *row = rows[wpos[k]];
		uint8_t st;
		while ((st = __atomic_load_n(&cw_of(row)->state, __ATOMIC_ACQUIRE)) == ROW_LOADING)
			sched_yield();
		if (st == ROW_BAD) {
			if (rc >= 0)
				rc = ST_ECORRUPT;
		} else if (create) {
			touch_atomic(meta_of(t, row), step);
		}
	}
	free(hs);
	free(order);
	free(end);
	free(lpos);
	free(wpos);
	free(lloc);
	free(lkey);
	free(ldst);
	return rc < 0 ? rc : created;
}

void st_table_unpin(const st_table_t *t, float *const *rows, uint32_t n)
{
	if (!t->ssd)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (rows[i])
			__atomic_sub_fetch(&cw_of(rows[i])->pins, 1, __ATOMIC_RELEASE);
}

/* ---- whole-table operations -------------------------------------------- */

int st_table_spill_all(st_table_t *t)
{
	if (!t->ssd)
		return ST_OK;
	int rc = ST_OK;
	for (uint32_t sh = 0; sh < t->o.n_shards && rc >= 0; sh++) {
		shard_t *s = &t->shards[sh];
		pthread_mutex_lock(&s->mu);
		uint32_t *lists[1 + LFU_BUCKETS];
		lists[0] = &s->lru_head;
		for (uint32_t b = 0; b < LFU_BUCKETS; b++)
			lists[1 + b] = &s->lfu_head[b];
		for (uint32_t l = 0; l < 1 + LFU_BUCKETS && rc >= 0; l++) {
			uint32_t r = *lists[l];
			while (r != EMPTY && rc >= 0) {
				uint32_t next = cw_r(t, s, r)->next;
				if (!held(cw_r(t, s, r)))
					rc = spill(t, s, r);
				r = next;
			}
		}
		pthread_mutex_unlock(&s->mu);
	}
	int fr = st_ssd_flush(t->ssd);
	return rc < 0 ? rc : fr;
}

int st_table_foreach_all(st_table_t *t, void (*fn)(uint64_t key, float *row, void *arg),
			 void *arg)
{
	st_table_foreach(t, fn, arg);
	if (!t->ssd)
		return ST_OK;
	enum { CHUNK = 1024 };
	const size_t rowf = (size_t)t->ew + t->o.state_dim + META_WORDS;
	float *buf = malloc(sizeof(float) * rowf * CHUNK);
	uint64_t *keys = malloc(sizeof(uint64_t) * CHUNK);
	st_ssd_loc_t *locs = malloc(sizeof(st_ssd_loc_t) * CHUNK);
	void **dst = malloc(sizeof(void *) * CHUNK);
	int rc = (buf && keys && locs && dst) ? ST_OK : ST_ENOMEM;
	for (uint32_t k = 0; k < CHUNK && rc >= 0; k++)
		dst[k] = buf + k * rowf;
	/* Each shard's lock is held while its cold rows are read, so that a
	 * compaction cannot move them (relocate waits for the lock). */
	for (uint32_t sh = 0; sh < t->o.n_shards && rc >= 0; sh++) {
		shard_t *s = &t->shards[sh];
		pthread_mutex_lock(&s->mu);
		uint32_t j = 0;
		while (j < s->cold_cap && rc >= 0) {
			uint32_t m = 0;
			for (; j < s->cold_cap && m < CHUNK; j++)
				if (s->cold_loc[j] != ST_SSD_NOLOC) {
					keys[m] = s->cold_key[j];
					locs[m++] = s->cold_loc[j];
				}
			if (!m)
				break;
			rc = st_ssd_read(t->ssd, m, keys, locs, dst);
			for (uint32_t k = 0; k < m && rc >= 0; k++) {
				float *row = dst[k];
				set_row_key(t, row, keys[k]);
				fn(keys[k], row, arg);
			}
		}
		pthread_mutex_unlock(&s->mu);
	}
	free(buf);
	free(keys);
	free(locs);
	free(dst);
	return rc;
}

st_ssd_t *st_table_ssd(const st_table_t *t)
{
	return t->ssd;
}

/* ---- open / close ------------------------------------------------------ */

/* Compaction moved key's record: follow it if the cold map still points at
 * the old place (the SSD tier calls this with none of its locks held). */
static int relocate(void *arg, uint64_t key, st_ssd_loc_t from, st_ssd_loc_t to)
{
	st_table_t *t = arg;
	uint64_t h = mix64(key);
	shard_t *s = shard_of(t, h);
	pthread_mutex_lock(&s->mu);
	uint32_t i = cold_find(s, key, h);
	int moved = i != EMPTY && s->cold_loc[i] == from;
	if (moved)
		s->cold_loc[i] = to;
	pthread_mutex_unlock(&s->mu);
	return moved;
}

typedef struct {
	st_table_t *t;
	int err;
} recover_t;

static void recovered(void *arg, uint64_t key, st_ssd_loc_t loc)
{
	recover_t *rv = arg;
	uint64_t h = mix64(key);
	shard_t *s = shard_of(rv->t, h);
	if (cold_reserve(s) < 0) {
		rv->err = ST_ENOMEM;
		return;
	}
	uint32_t i = cold_probe(s, key, h);
	if (s->cold_loc[i] == ST_SSD_NOLOC)
		s->cold_n++;
	s->cold_key[i] = key;
	s->cold_loc[i] = loc;
}

int st__cache_open(st_table_t *t)
{
	uint32_t ns = t->o.n_shards;
	uint64_t per = t->o.cache_rows / ns;
	t->cap_shard = per < 1 ? 1 : per > MAX_ROWS ? MAX_ROWS : (uint32_t)per;
	double f = t->o.lru_frac > 0.0 && t->o.lru_frac < 1.0 ? t->o.lru_frac : 0.5;
	t->cap_lru = (uint32_t)(t->cap_shard * f);
	if (t->cap_lru < 1)
		t->cap_lru = 1;
	for (uint32_t i = 0; i < ns; i++) {
		shard_t *s = &t->shards[i];
		s->lru_head = s->lru_tail = EMPTY;
		for (uint32_t b = 0; b < LFU_BUCKETS; b++)
			s->lfu_head[b] = s->lfu_tail[b] = EMPTY;
	}
	st_ssd_opts_t so = *t->o.ssd;
	so.relocate = relocate;
	so.arg = t;
	recover_t rv = { .t = t };
	st_ssd_t *ssd;
	int rc = st_ssd_open(&ssd, &so, recovered, &rv);
	t->o.ssd = NULL;   /* the caller's struct; not kept */
	if (rc < 0)
		return rc;
	t->ssd = ssd;
	return rv.err;
}

void st__cache_close(st_table_t *t)
{
	if (t->ssd)
		st_ssd_close(t->ssd);
	t->ssd = NULL;
}

void st__cache_free_shard(shard_t *s)
{
	free(s->cold_key);
	free(s->cold_loc);
	s->cold_key = NULL;
	s->cold_loc = NULL;
}
