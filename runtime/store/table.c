/*
 * table.c — sharded concurrent hash table from uint64 key to a row in slabs.
 *
 * Layout. A key goes to shard (mix(key) >> (64 - shard_bits)); the low bits
 * of the same hash pick the probe start inside the shard, so the two choices
 * are independent. A shard has:
 *   - an open-addressing index of `cap` slots (linear probing), each slot a
 *     (key, row number) pair; row number UINT32_MAX marks an empty slot, so
 *     every uint64 key (0 included) is storable. The index doubles when it is
 *     half full; rehashing touches only the index, never rows.
 *   - a slab: rows live in chunks of chunk_rows rows; row r of the shard is at
 *     chunks[r >> chunk_bits] + (r & chunk_mask) * stride. Chunks are never
 *     moved or freed before destroy, so row pointers stay valid; only the small
 *     array of chunk pointers is reallocated, under the shard lock.
 *
 * Threads: any number of callers. Each shard's mutex guards its index, slab
 * bookkeeping and row count; one lock is held at a time, never two. Row
 * floats are not guarded (the caller's policy); metadata is updated with
 * relaxed atomics so readers never see a torn value.
 *
 * Determinism: a new row's values are a function of (seed, key) only.
 */
#include "runtime/store/table.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

#define EMPTY UINT32_MAX
#define INIT_CAP 256u

typedef struct {
	uint64_t key;
	uint32_t row;
} slot_t;

typedef struct {
	pthread_mutex_t mu;
	slot_t *slots;
	uint32_t cap;         /* power of two */
	uint32_t n;           /* rows in this shard */
	float **chunks;
	uint32_t n_chunks, chunks_cap;
	char pad[64];         /* keep neighbouring shards' locks on other lines */
} shard_t;

struct st_table {
	st_table_opts_t o;
	uint32_t stride;      /* floats (and meta words) per row */
	uint32_t chunk_bits, chunk_rows;
	uint32_t shard_bits;
	shard_t *shards;
};

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

int st_table_create(st_table_t **out, const st_table_opts_t *o)
{
	uint32_t ns = o->n_shards ? o->n_shards : 64;
	if (o->dim < 1 || o->dim > (1u << 20) || o->state_dim > (1u << 20) ||
	    (ns & (ns - 1)) || ns > (1u << 16) || !(o->init_scale >= 0.0f))
		return ST_EINVAL;
	st_table_t *t = calloc(1, sizeof *t);
	if (!t)
		return ST_ENOMEM;
	t->o = *o;
	t->o.n_shards = ns;
	t->stride = o->dim + o->state_dim + 2;
	/* Chunks of about 256 KiB (at least 16 rows): big enough that the
	 * chunk-pointer array stays tiny, small enough that an almost empty
	 * shard wastes little. */
	size_t row_b = (size_t)t->stride * sizeof(float);
	uint32_t bits = 4;
	while (bits < 20 && ((size_t)1 << (bits + 1)) * row_b <= (256u << 10))
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
		s->cap = INIT_CAP;
		s->slots = malloc(sizeof(slot_t) * INIT_CAP);
		if (!s->slots) {
			t->o.n_shards = i + 1;
			st_table_destroy(t);
			return ST_ENOMEM;
		}
		for (uint32_t j = 0; j < INIT_CAP; j++)
			s->slots[j].row = EMPTY;
	}
	*out = t;
	return ST_OK;
}

void st_table_destroy(st_table_t *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->o.n_shards; i++) {
		shard_t *s = &t->shards[i];
		for (uint32_t c = 0; c < s->n_chunks; c++)
			free(s->chunks[c]);
		free(s->chunks);
		free(s->slots);
		pthread_mutex_destroy(&s->mu);
	}
	free(t->shards);
	free(t);
}

static inline float *row_ptr(const st_table_t *t, const shard_t *s, uint32_t r)
{
	return s->chunks[r >> t->chunk_bits] +
	       (size_t)(r & (t->chunk_rows - 1)) * t->stride;
}

/* Probe for key; returns the slot holding it or the empty slot where it would
 * go. The index is never full (load <= 1/2), so the loop ends. */
static inline slot_t *probe(const shard_t *s, uint64_t key, uint64_t h)
{
	uint32_t mask = s->cap - 1, i = (uint32_t)h & mask;
	for (;;) {
		slot_t *sl = &s->slots[i];
		if (sl->row == EMPTY || sl->key == key)
			return sl;
		i = (i + 1) & mask;
	}
}

static int grow_index(shard_t *s)
{
	uint32_t ncap = s->cap * 2;
	if (ncap == 0)
		return ST_ENOMEM;
	slot_t *ns = malloc(sizeof(slot_t) * ncap);
	if (!ns)
		return ST_ENOMEM;
	for (uint32_t j = 0; j < ncap; j++)
		ns[j].row = EMPTY;
	uint32_t mask = ncap - 1;
	for (uint32_t j = 0; j < s->cap; j++) {
		slot_t sl = s->slots[j];
		if (sl.row == EMPTY)
			continue;
		uint32_t i = (uint32_t)mix64(sl.key) & mask;
		while (ns[i].row != EMPTY)
			i = (i + 1) & mask;
		ns[i] = sl;
	}
	free(s->slots);
	s->slots = ns;
	s->cap = ncap;
	return ST_OK;
}

/* Deterministic initial values of a new row from (seed, key). */
static void init_row(const st_table_t *t, uint64_t key, float *row)
{
	uint64_t base = mix64(key ^ mix64(t->o.seed + UINT64_C(0x632be59bd9b4e019)));
	float a = t->o.init_scale;
	for (uint32_t j = 0; j < t->o.dim; j++) {
		if (a == 0.0f) {
			row[j] = 0.0f;
			continue;
		}
		uint64_t h = mix64(base + (uint64_t)j * UINT64_C(0x9e3779b97f4a7c15));
		float u = (float)(h >> 40) * 0x1.0p-24f;   /* [0, 1) */
		row[j] = (2.0f * u - 1.0f) * a;
	}
	for (uint32_t j = 0; j < t->o.state_dim; j++)
		row[t->o.dim + j] = t->o.state_init;
	st_table_meta_t *m = (st_table_meta_t *)(row + t->o.dim + t->o.state_dim);
	m->last_step = 0;
	m->freq = 0;
}

static inline void touch(st_table_meta_t *m, uint32_t step)
{
	__atomic_store_n(&m->last_step, step, __ATOMIC_RELAXED);
	uint32_t f = __atomic_load_n(&m->freq, __ATOMIC_RELAXED);
	if (f != UINT32_MAX)
		__atomic_store_n(&m->freq, f + 1, __ATOMIC_RELAXED);
}

/* With the shard locked: the row of key, created when absent. Returns 1 if
 * created, 0 if it existed, ST_ENOMEM. */
static int get_or_create_locked(st_table_t *t, shard_t *s, uint64_t key, uint64_t h,
				uint32_t step, float **row)
{
	int created = 0;
	slot_t *sl = probe(s, key, h);
	if (sl->row == EMPTY) {
		if (s->n == EMPTY - 1)
			return ST_ENOMEM;
		if ((s->n + 1) * 2 > s->cap) {
			if (grow_index(s) < 0)
				return ST_ENOMEM;
			sl = probe(s, key, h);
		}
		uint32_t r = s->n;
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
		init_row(t, key, row_ptr(t, s, r));
		sl->key = key;
		sl->row = r;
		__atomic_store_n(&s->n, r + 1, __ATOMIC_RELAXED);
		created = 1;
	}
	float *p = row_ptr(t, s, sl->row);
	/* Under the lock, so counts are exact; atomics for lock-free readers. */
	touch((st_table_meta_t *)(p + t->o.dim + t->o.state_dim), step);
	*row = p;
	return created;
}

static inline shard_t *shard_of(const st_table_t *t, uint64_t h)
{
	return &t->shards[t->shard_bits ? h >> (64 - t->shard_bits) : 0];
}

int st_table_get_or_create(st_table_t *t, uint64_t key, uint32_t step, float **row)
{
	uint64_t h = mix64(key);
	shard_t *s = shard_of(t, h);
	pthread_mutex_lock(&s->mu);
	int rc = get_or_create_locked(t, s, key, h, step, row);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

#define PREFETCH_AHEAD 8

int st_table_resolve(st_table_t *t, const uint64_t *keys, uint32_t n, uint32_t step,
		     int create, float **rows)
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
				__builtin_prefetch(&s->slots[(uint32_t)hp & (s->cap - 1)]);
			}
			uint32_t i = order[j];
			if (create) {
				rc = get_or_create_locked(t, s, keys[i], hs[i], step, &rows[i]);
				if (rc < 0)
					break;
				created += rc;
			} else {
				slot_t *sl = probe(s, keys[i], hs[i]);
				rows[i] = sl->row == EMPTY ? NULL : row_ptr(t, s, sl->row);
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
	slot_t *sl = probe(s, key, h);
	if (sl->row != EMPTY)
		p = row_ptr(t, s, sl->row);
	pthread_mutex_unlock(&s->mu);
	return p;
}

st_table_meta_t *st_table_meta(const st_table_t *t, float *row)
{
	return (st_table_meta_t *)(row + t->o.dim + t->o.state_dim);
}

uint64_t st_table_size(const st_table_t *t)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < t->o.n_shards; i++)
		n += __atomic_load_n(&t->shards[i].n, __ATOMIC_RELAXED);
	return n;
}

uint32_t st_table_row_floats(const st_table_t *t)
{
	return t->o.dim + t->o.state_dim;
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
		bytes += sizeof(slot_t) * s->cap + sizeof(float *) * s->chunks_cap +
			 (size_t)s->n_chunks * t->chunk_rows * stride_b;
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
		for (uint32_t j = 0; j < s->cap; j++)
			if (s->slots[j].row != EMPTY)
				fn(s->slots[j].key, row_ptr(t, s, s->slots[j].row), arg);
		pthread_mutex_unlock(&s->mu);
	}
}
