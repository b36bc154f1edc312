/*
 * table.h — the host-tier embedding table: uint64 key -> row of floats.
 *
 * A sharded concurrent hash table. A key's shard comes from a hash of the key;
 * each shard has its own mutex, an open-addressing index key -> row number,
 * and a slab of rows in fixed-size chunks that never move, so a row pointer
 * stays valid for the table's life. A row is
 *
 *   float emb[dim] | float state[state_dim] | uint32 last_step | uint32 freq
 *
 * or, with row_prec bf16 / fp16 (storage.row_precision, rowfmt.h), emb as
 * dim 16-bit values padded to a 4-byte word: the state (fp32) then starts
 * st_rowfmt_words(row_prec, dim) words into the row. The table only
 * initializes rows in that format; readers decode (st_rowfmt_decode).
 *
 * New rows are initialized from (seed, key) only — emb uniform in
 * [-init_scale, init_scale), state = state_init — so their values never
 * depend on thread timing or insertion order.
 *
 * Library-grade: includes nothing but the C library (and err.h codes).
 * Thread-safety: every function is thread-safe except create/destroy. The
 * table guards its index; the floats of a row are the caller's to
 * synchronize (Hogwild callers use relaxed atomics on them).
 */
#ifndef ST_TABLE_H
#define ST_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/store/rowfmt.h"
#include "runtime/store/ssd.h"

typedef struct st_table st_table_t;

/* RAM bytes a row takes besides its slot in cache mode (the LRU/LFU
 * bookkeeping before the row), for sizing estimates. */
#define ST_TABLE_CACHE_ROW_BYTES 16u

typedef struct st_table_opts {
	uint32_t dim;         /* embedding floats per row, >= 1 */
	uint32_t state_dim;   /* optimizer-state floats per row, >= 0 */
	uint64_t seed;        /* initialization seed */
	float init_scale;     /* emb ~ U[-init_scale, init_scale); 0 = zeros */
	float state_init;     /* initial value of every state float */
	uint32_t n_shards;    /* power of two; 0 = 64 */
	int row_prec;         /* enum st_row_prec of emb (rowfmt.h); 0 = fp32 */
	/* Admission (0 from a zeroed struct means "admit always"): */
	uint32_t admit_min_count; /* a key gets a row on its min_count-th creating
				     lookup; 0 and 1 = at once */
	double admit_prob;    /* admit with this probability, decided by
				 hash(seed, key); 0 (unset) and >= 1 = always */
	/* Cache mode: the RAM tier as a cache over an SSD tier (cache.c). 0:
	 * every row stays in RAM. Else RAM holds about cache_rows rows (split
	 * evenly over the shards) besides pinned ones; colder rows go to ssd. */
	/* Called for each row st_table_evict_older removes, with the shard's
	 * lock held (it must not call back into the table); NULL = none. */
	void (*on_evict)(void *arg, uint64_t key);
	void *evict_arg;
	uint64_t cache_rows;
	double lru_frac;      /* LRU segment's share of cache_rows; 0 = 0.5 */
	const st_ssd_opts_t *ssd; /* required with cache_rows; the table opens
				     the store (its relocate and arg are the
				     table's own) and closes it on destroy */
} st_table_opts_t;

/* Counters (st_table_stats). */
typedef struct st_table_stats {
	uint64_t rows;        /* live rows */
	uint64_t admitted;    /* rows created so far (admitted keys) */
	uint64_t rejected;    /* creating lookups that found no row and made
				 none (key not admitted yet / rejected) */
	uint64_t candidates;  /* keys counting towards min_count right now */
	uint64_t evicted;     /* rows removed by st_table_evict_older so far */
	uint64_t free_rows;   /* evicted slots waiting to be reused */
	/* Cache mode (0 otherwise). Lookups by where they found the row: */
	uint64_t hits_lru, hits_lfu; /* in RAM, in each segment */
	uint64_t loads;       /* read back from SSD */
	uint64_t misses;      /* absent everywhere: created (or not admitted) */
	uint64_t lru_to_lfu;  /* rows moved from the LRU to the LFU segment */
	uint64_t spilled;     /* rows written to SSD on eviction */
	uint64_t cold_rows;   /* rows on SSD only (rows counts RAM rows) */
	uint64_t lru_rows, lfu_rows;
	uint64_t over_budget; /* evictions that found every candidate pinned */
} st_table_stats_t;

/* Per-row metadata, right after the floats of a row. */
typedef struct st_table_meta {
	uint32_t last_step;   /* step of the last get_or_create */
	uint32_t freq;        /* number of get_or_create calls (saturating) */
} st_table_meta_t;

/* Creates an empty table. ST_OK and *out; ST_EINVAL for bad opts; ST_ENOMEM.
 * The caller destroys it. */
int st_table_create(st_table_t **out, const st_table_opts_t *o);

/* Frees the table and every row (NULL-safe). No other call may run. */
void st_table_destroy(st_table_t *t);

/* Room in the index for `rows` more rows (spread over the shards as keys
 * hash, with a margin), so that inserting them grows no index: a restore
 * knows its row count up front, and growing as it goes rehashed every row
 * log2(n) times (18% of a 3M-row restore's time). ST_OK or ST_ENOMEM (the
 * table is as before or larger; inserts still grow as needed).
 * Thread-safe. */
int st_table_reserve(st_table_t *t, uint64_t rows);

/* Finds the row of key, creating and initializing it when absent and
 * admitted (in cache mode loading it from SSD when it is there, and pinning
 * it: the caller unpins it with st_table_unpin); records step in last_step and counts freq. *row points to the
 * row's first float and stays valid until st_table_destroy or until the row
 * is evicted. Returns 1 if the row was created, 0 if it existed or the key
 * is not admitted (then *row = NULL), ST_ENOMEM. Thread-safe; for one key
 * exactly one concurrent caller gets 1. */
int st_table_get_or_create(st_table_t *t, uint64_t key, uint32_t step, float **row);

/* Batched lookup: rows[i] = the row of keys[i] for i < n. With create != 0
 * absent keys are created as by st_table_get_or_create (metadata touched with
 * step; keys not admitted give NULL and count one occurrence each); with
 * create == 0 they give NULL and metadata is left alone. Keys
 * are grouped by shard so each shard's lock is taken once per call, and
 * index slots are prefetched ahead of the probes. Returns the number of rows
 * created (>= 0) or ST_ENOMEM (then some rows may be unset). Thread-safe. */
int st_table_resolve(st_table_t *t, const uint64_t *keys, uint32_t n, uint32_t step,
		     int create, float **rows);

/* In cache mode every row resolve returns is pinned: it is neither evicted
 * nor moved until unpinned, once per resolve that returned it. Rows in flight
 * (pulled, trained, pushed) stay pinned (hierarchical-gpu-parameter-server.md
 * Appendix D). Rows hit while another thread loads them from SSD are
 * waited for. Errors besides ST_ENOMEM in cache mode: ST_ECORRUPT (an SSD
 * record failed its checksum; logged with file and offset), the SSD tier's
 * write error (ST_ENOSPC, ST_EIO). */

/* Unpins rows (NULL entries are skipped) returned by resolve of a table in
 * cache mode; no-op for a table without one. Thread-safe, lock-free. */
void st_table_unpin(const st_table_t *t, float *const *rows, uint32_t n);

/* The row of key in RAM, or NULL if absent (or only on SSD). Does not touch
 * metadata or pins. Thread-safe. */
float *st_table_find(st_table_t *t, uint64_t key);

/* Metadata of a row returned by this table (reads/writes with __atomic). */
st_table_meta_t *st_table_meta(const st_table_t *t, float *row);

/* Number of rows. Thread-safe (may lag concurrent inserts). */
uint64_t st_table_size(const st_table_t *t);

/* 4-byte words per row, metadata excluded: st_rowfmt_words(row_prec, dim)
 * + state_dim (dim + state_dim for fp32 rows). */
uint32_t st_table_row_floats(const st_table_t *t);

/* The precision of the rows' emb part (enum st_row_prec). */
int st_table_row_prec(const st_table_t *t);

/* Memory per row, including metadata, index slots and chunk slack at the
 * table's current fill (bytes of all allocations / rows; row stride when
 * empty). Thread-safe, approximate under concurrent inserts. */
size_t st_table_row_bytes(const st_table_t *t);

/* Removes every row with now_step - last_step > ttl (as signed 64-bit
 * numbers), puts its slot on its shard's free list, and forgets admission
 * candidates last seen more than ttl steps ago. Returns the number of rows
 * removed. Contract: the caller guarantees that no other thread reads or
 * writes the floats of rows that may be evicted while this runs (the trainer
 * calls it between batches, when no batch holds row pointers); lookups on
 * other keys may run concurrently. Thread-safe in that sense. */
uint64_t st_table_evict_older(st_table_t *t, uint32_t now_step, uint32_t ttl);

/* Empties the table as if it were new: no rows, no admission candidates,
 * counters at 0 (on_evict is not called: nothing was evicted). For a
 * restore that found the file it loaded damaged after inserting rows from
 * it. Row pointers handed out before are dangling afterwards. ST_OK, or
 * ST_EINVAL for a table in cache mode (its SSD tier is not emptied). Not
 * concurrent with any other call on t. */
int st_table_clear(st_table_t *t);

/* Fills *s with the table's counters. Thread-safe (a consistent snapshot of
 * each shard, not of the whole table). */
void st_table_stats(st_table_t *t, st_table_stats_t *s);

/* Calls fn(key, row, arg) for every row in RAM, shard by shard with that
 * shard's lock held: fn must not call back into the table. Order is
 * unspecified. */
void st_table_foreach(st_table_t *t, void (*fn)(uint64_t key, float *row, void *arg),
		      void *arg);

/* Like st_table_foreach, for every row of both tiers: rows on SSD are read
 * (a shard at a time, lock held) into a scratch row that fn may read but
 * whose writes are lost. Returns ST_OK, ST_ENOMEM or the SSD read error.
 * Not concurrent with resolve. */
int st_table_foreach_all(st_table_t *t, void (*fn)(uint64_t key, float *row, void *arg),
			 void *arg);

/* Cache mode: writes every unpinned RAM row to SSD and flushes the SSD
 * tier, so that the store directory holds the whole table (reopen with
 * ssd->fresh = 0 recovers it). ST_OK or the SSD error. No-op otherwise. */
int st_table_spill_all(st_table_t *t);

/* The SSD tier (cache mode) or NULL. */
st_ssd_t *st_table_ssd(const st_table_t *t);

#endif
