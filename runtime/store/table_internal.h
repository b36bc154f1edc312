/*
 * table_internal.h — the host table's private layout, shared by the two
 * modules of the table: table.c (index, slab, admission, TTL) and cache.c
 * (the RAM tier as a cache over the SSD tier: LRU + LFU segments, pins, the
 * cold map key -> SSD location). Nothing else includes it.
 */
#ifndef ST_TABLE_INTERNAL_H
#define ST_TABLE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "runtime/store/ssd.h"
#include "runtime/store/table.h"

#define EMPTY UINT32_MAX
#define ROW_BITS 24u
#define ROW_MASK ((1u << ROW_BITS) - 1)
#define MAX_ROWS ROW_MASK          /* row ROW_MASK with tag 0xff would read as EMPTY */
#define INIT_CAP 256u
#define META_WORDS 4u              /* last_step, freq, key (2 words) */
#define CACHE_WORDS (ST_TABLE_CACHE_ROW_BYTES / 4u) /* cword_t, before the row (cache mode) */
#define LFU_BUCKETS 32u            /* LFU segment: one FIFO per log2(freq) */

typedef struct {
	uint64_t key;
	uint32_t count, step;
} cand_t;

/* Cache bookkeeping of a row, in the 16 bytes before its first float
 * (cache mode only). pins is changed with atomics (unpinning takes no
 * lock); state is read by waiters with acquire loads; the rest is guarded
 * by the shard lock. */
typedef struct {
	uint32_t pins;
	uint8_t state;        /* ROW_READY, ROW_LOADING, ROW_BAD */
	uint8_t seg;          /* SEG_NONE, SEG_LRU, SEG_LFU */
	uint8_t bucket;       /* LFU bucket while seg == SEG_LFU */
	uint8_t pad;
	uint32_t prev, next;  /* row numbers in the segment's list, EMPTY = end */
} cword_t;

_Static_assert(sizeof(cword_t) == ST_TABLE_CACHE_ROW_BYTES, "cache words before a row");

enum { ROW_READY = 0, ROW_LOADING = 1, ROW_BAD = 2 };
enum { SEG_NONE = 0, SEG_LRU = 1, SEG_LFU = 2 };

typedef struct {
	pthread_mutex_t mu;
	uint32_t *idx;
	uint32_t cap;         /* power of two */
	uint32_t n;           /* live rows */
	uint32_t used;        /* rows ever allocated (high-water mark) */
	uint32_t free_head;   /* first free row, or EMPTY */
	uint32_t n_free;
	float **chunks;
	uint32_t n_chunks, chunks_cap;
	cand_t *cand;         /* admission candidates (see cand_used) */
	uint8_t *cand_used;
	uint32_t cand_cap, cand_n;
	uint64_t admitted, rejected, evicted;
	/* Cache mode (cache.c). */
	uint32_t lru_head, lru_tail, n_lru;
	uint32_t lfu_head[LFU_BUCKETS], lfu_tail[LFU_BUCKETS];
	uint32_t n_lfu;
	uint64_t *cold_key;   /* cold map: keys on SSD -> location; a slot is */
	uint64_t *cold_loc;   /* empty when its loc is ST_SSD_NOLOC */
	uint32_t cold_cap, cold_n;
	uint64_t hits_lru, hits_lfu, loads, lru_to_lfu, spilled, misses;
	char pad[64];         /* keep neighbouring shards' locks on other lines */
} shard_t;

struct st_table {
	st_table_opts_t o;
	uint32_t stride;      /* floats (and meta / cache words) per row slot */
	uint32_t lead;        /* words before the row's first float (cache words) */
	uint32_t ew;          /* words of a row's emb part (rowfmt.h) */
	uint32_t chunk_bits, chunk_rows;
	uint32_t shard_bits;
	uint64_t prob_cut;    /* admit when hash(seed, key) < prob_cut; 0 = always */
	shard_t *shards;
	/* Cache mode: */
	st_ssd_t *ssd;        /* NULL: every row stays in RAM */
	uint32_t cap_shard;   /* resident rows per shard before eviction */
	uint32_t cap_lru;     /* of which the LRU segment's share */
	uint64_t over_budget; /* evictions that found only pinned rows (atomic) */
};

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static inline uint32_t tag_of(uint64_t h)
{
	return (uint32_t)(h >> 40) & 0xffu;
}

static inline float *row_ptr(const st_table_t *t, const shard_t *s, uint32_t r)
{
	return s->chunks[r >> t->chunk_bits] +
	       (size_t)(r & (t->chunk_rows - 1)) * t->stride + t->lead;
}

static inline st_table_meta_t *meta_of(const st_table_t *t, float *row)
{
	return (st_table_meta_t *)(row + t->ew + t->o.state_dim);
}

static inline cword_t *cw_of(float *row)
{
	return (cword_t *)(void *)row - 1;
}

/* The key sits after the metadata; a row is only 4-byte aligned, so it is
 * copied, not dereferenced as a uint64_t. */
static inline uint64_t row_key(const st_table_t *t, const float *row)
{
	uint64_t k;
	memcpy(&k, row + t->ew + t->o.state_dim + 2, sizeof k);
	return k;
}

static inline void set_row_key(const st_table_t *t, float *row, uint64_t k)
{
	memcpy(row + t->ew + t->o.state_dim + 2, &k, sizeof k);
}

static inline shard_t *shard_of(const st_table_t *t, uint64_t h)
{
	return &t->shards[t->shard_bits ? h >> (64 - t->shard_bits) : 0];
}

/* Probe for key; returns the index position holding it or the empty one
 * where it would go. The index is never full (load <= 3/4), so the loop
 * ends. */
static inline uint32_t probe(const st_table_t *t, const shard_t *s, uint64_t key, uint64_t h)
{
	uint32_t mask = s->cap - 1, i = (uint32_t)h & mask, tag = tag_of(h);
	for (;;) {
		uint32_t e = s->idx[i];
		if (e == EMPTY)
			return i;
		if ((e >> ROW_BITS) == tag && row_key(t, row_ptr(t, s, e & ROW_MASK)) == key)
			return i;
		i = (i + 1) & mask;
	}
}

/* Under the shard lock: last_step = step, freq + 1 (saturating). Relaxed
 * atomics so that lock-free readers never see a torn value. */
static inline void touch(st_table_meta_t *m, uint32_t step)
{
	__atomic_store_n(&m->last_step, step, __ATOMIC_RELAXED);
	uint32_t f = __atomic_load_n(&m->freq, __ATOMIC_RELAXED);
	if (f != UINT32_MAX)
		__atomic_store_n(&m->freq, f + 1, __ATOMIC_RELAXED);
}

/* table.c, with the shard locked: */
int st__table_grow_index(const st_table_t *t, shard_t *s);
void st__table_index_delete(const st_table_t *t, shard_t *s, uint32_t i);
void st__table_init_row(const st_table_t *t, uint64_t key, float *row);
int st__table_admit(const st_table_t *t, shard_t *s, uint64_t key, uint64_t h, uint32_t step);
int64_t st__table_alloc_row(const st_table_t *t, shard_t *s);
/* Puts a new row for an absent key (hash h) in the index: *pos is the empty
 * entry probe() found, updated when the index grows. Returns the row number
 * (the caller fills the row, key included, before unlocking) or ST_ENOMEM. */
int64_t st__table_insert(st_table_t *t, shard_t *s, uint64_t h, uint32_t *pos);
/* Puts row r (already out of the index) on the free list. */
void st__table_free_row(const st_table_t *t, shard_t *s, uint32_t r);
/* Groups key positions by shard: order[] lists positions shard by shard,
 * end[sh] is the end of shard sh's run; hs[i] = mix64(keys[i]). The three
 * arrays are malloc'd; the caller frees them. ST_ENOMEM. */
int st__table_group(const st_table_t *t, const uint64_t *keys, uint32_t n, uint64_t **hs,
		    uint32_t **order, uint32_t **end);

/* cache.c: */
int st__cache_open(st_table_t *t);
void st__cache_close(st_table_t *t);
void st__cache_free_shard(shard_t *s);
int st__cache_resolve(st_table_t *t, const uint64_t *keys, uint32_t n, uint32_t step,
		      int create, float **rows);
/* With the shard locked: takes row r (index entry at pos) out of its segment
 * list; TTL eviction of a cached row. */
void st__cache_unlink(const st_table_t *t, shard_t *s, uint32_t r);

#endif
