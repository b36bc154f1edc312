/*
 * local.h — the local row source (ops/rowsrc/local.c): this process's
 * embedding tables, one per distinct row width, each a RAM tier and, with
 * an SSD path, an SSD tier under it (runtime/store/;
 * hierarchical-gpu-parameter-server.md Sections 5-6). The contract is
 * rowsrc.h's; this header adds its constructor and the accessors that
 * checkpoints, exports and a rank's shard service use to reach the tables
 * themselves.
 */
#ifndef ST_ROWSRC_LOCAL_H
#define ST_ROWSRC_LOCAL_H

#include <stdint.h>

#include "ops/rowsrc/rowsrc.h"
#include "runtime/store/table.h"

typedef struct st_rowsrc_local_cfg {
	int n_tables;                     /* 1 .. ST_ROWSRC_MAX_TABLES */
	/* [n_tables] each table's options: dim, state_dim, seed, init_scale,
	 * state_init, n_shards, admission. on_evict, cache and SSD settings
	 * are the source's own. */
	const st_table_opts_t *tables;
	/* [n_tables] the slots whose rows live in each table: storage.mem is
	 * split over the tables in proportion to row bytes x slots. */
	const int *slots;
	/* [n_tables] or NULL (= slots): the most keys one example has in each
	 * table's slots (a list field with max_len counts max_len, other
	 * slots 1), for the working-set minimum of storage.mem. */
	const int *keys;
	uint32_t ttl;                     /* batches; 0: rows never expire */
	uint64_t mem_bytes;               /* storage.mem; 0: unlimited */
	int batch_size;                   /* examples a batch (the working set) */
	/* SSD tier (storage.ssd; ssd_path NULL: RAM only, mem_bytes then only
	 * warned about). */
	const char *ssd_path;
	uint64_t ssd_bytes;               /* 0: unlimited */
	uint64_t ssd_file_bytes;
	int ssd_queue_depth;
	const char *ssd_read;             /* "auto", "block", "file" */
	double ssd_lru;
	/* Called for every key a TTL sweep evicts (delta exports), under the
	 * table's shard lock: it may take only locks never held while calling
	 * into a table. NULL: none. */
	void (*on_evict)(void *arg, int table, uint64_t key);
	void *evict_arg;
} st_rowsrc_local_cfg_t;

/* Creates the tables (and SSD tiers: <ssd_path>/strata-store/t<k>/, fresh,
 * removed at destroy). ST_OK and *out (the caller destroys it with
 * st_rowsrc_destroy); ST_EJOB (logged: a bad ssd path, storage.ssd without
 * storage.mem, a budget below one batch's rows), ST_EBUSY (logged: the SSD
 * path is another job's), ST_EINVAL, ST_ENOMEM. cfg is not kept.
 *
 * Threads: resolve from any number of threads (the tables lock their
 * shards). */
int st_rowsrc_local_create(st_rowsrc_t **out, const st_rowsrc_local_cfg_t *cfg);

/* The accessors below take a local source only (asserted). */

/* Number of tables, and table k (NULL for k out of range), owned by s.
 * For checkpoints, exports, digests and a rank's shard service, which
 * work on whole tables; batch rows go through resolve. */
int st_rowsrc_local_ntables(const st_rowsrc_t *s);
st_table_t *st_rowsrc_local_table(const st_rowsrc_t *s, int k);

/* 1 when the job bounds the store's memory (storage.mem) or it has an SSD
 * tier: then a second copy of the tables (a kept checkpoint snapshot) is
 * not affordable. */
int st_rowsrc_local_bounded(const st_rowsrc_t *s);

#endif
