/*
 * local.c — the local row source (local.h; the contract is rowsrc.h's):
 * one host table per distinct row width, and, with an SSD path, the RAM
 * tier of each table as a cache over its own SSD tier (runtime/store/
 * cache.c, ssd.c; hierarchical-gpu-parameter-server.md Sections 5-6).
 *
 * Rows are the live shared rows (ST_ROWSRC_SHARED). resolve resolves each
 * table's keys with one st_table_resolve (one lock per shard, index
 * prefetched); with an SSD tier every row it returns is pinned until
 * release unpins it (the paper's pinned working parameters, Appendix D).
 *
 * Budget. storage.mem is split over the tables in proportion to the bytes
 * their slots' rows take (row bytes x slots), and turned into a row count
 * per table from the RAM bytes of a cached row (floats, metadata, cache
 * words, index). The SSD tier's own index (the cold map, about 28 bytes per
 * row on SSD) is not part of the budget; it is reported as ssd.index_mb.
 * Without an SSD tier storage.mem is a limit the job is told about, once,
 * when the tables pass it (maintain), instead of silently using more
 * memory than the job allows.
 *
 * TTL. model.ttl counts batches: the store's clock is the batch sequence
 * number that resolve stamps on every row. maintain sweeps every ttl/8
 * batches (a sweep scans every row), so a row goes between ttl and ttl +
 * ttl/8 batches after its last use; the trainer makes the TTL longer than
 * the batches that can be in flight, so no batch in flight loses a row.
 *
 * Files. Each table's SSD tier lives in <ssd.path>/strata-store/t<k>/,
 * started fresh for every run (the store is the run's working memory, not a
 * checkpoint; checkpoints are the dump stage's) and removed at the end by
 * the tier itself (remove_on_close), while it still holds the directory's
 * lock. The lock (runtime/store/ssd.h) makes a second job on the same
 * ssd.path fail at its first table with ST_EBUSY before it wipes anything;
 * so only a table this source opened is ever removed, never a directory
 * another job is using.
 *
 * Threads: resolve from any number of pull threads, each with its own
 * scratch (thread index); the tables lock their shards. release, maintain
 * and metrics from the push thread. The warned flags are the push
 * thread's.
 */
#include "ops/rowsrc/local.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/err.h"

/* RAM bytes of one cached row besides its floats: metadata 16, cache words
 * 16, index about 7. */
#define ROW_OVERHEAD 39

/* One pull thread's scratch: a table's keys of a batch, where they go. */
typedef struct part {
	uint64_t *keys;
	uint32_t *pos;
	float **rows;
	uint32_t cap;
} part_t;

typedef struct local_src local_src_t;

typedef struct evict_ctx {
	local_src_t *L;
	int k;
} evict_ctx_t;

struct local_src {
	st_rowsrc_t base;          /* first: callers hold &base */
	int n_tables;
	st_table_t *tables[ST_ROWSRC_MAX_TABLES];
	uint32_t ttl;              /* batches; 0 = rows never expire */
	uint32_t evict_every;      /* batches between eviction sweeps */
	uint64_t mem_budget;       /* storage.mem in bytes; 0 = unlimited */
	int mem_warned;            /* push thread only */
	int over_warned;           /* push thread only */
	char root[4096];           /* "<ssd.path>/strata-store", "" without SSD */
	void (*on_evict)(void *arg, int table, uint64_t key);
	void *evict_arg;
	evict_ctx_t evict_ctx[ST_ROWSRC_MAX_TABLES];
	part_t part[ST_ROWSRC_MAX_THREADS];
};

static const st_rowsrc_methods_t local_methods;

static local_src_t *local_of(const st_rowsrc_t *s)
{
	assert(s && s->m == &local_methods);
	return (local_src_t *)s;
}

/* ---- creation -------------------------------------------------------------- */

static int read_mode(const char *s)
{
	if (s && !strcmp(s, "block"))
		return ST_SSD_READ_BLOCK;
	if (s && !strcmp(s, "file"))
		return ST_SSD_READ_FILE;
	return ST_SSD_READ_AUTO;
}

/* Creates <path>/strata-store; refuses a path that is missing, not a
 * directory or not writable, naming it. */
static int store_root(const char *path, char *root, size_t n)
{
	struct stat sb;
	if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		st_error("storage.ssd.path %s: %s", path,
			 stat(path, &sb) != 0 ? strerror(errno) : "not a directory");
		return ST_EJOB;
	}
	if (access(path, W_OK | X_OK) != 0) {
		st_error("storage.ssd.path %s: not writable (%s)", path, strerror(errno));
		return ST_EJOB;
	}
	snprintf(root, n, "%s/strata-store", path);
	if (mkdir(root, 0755) != 0 && errno != EEXIST) {
		st_error("storage.ssd.path: cannot create %s: %s", root, strerror(errno));
		return ST_EJOB;
	}
	return ST_OK;
}

/* A table's on_evict hook (TTL sweeps): under the table's shard lock. */
static void on_evict(void *arg, uint64_t key)
{
	evict_ctx_t *c = arg;
	c->L->on_evict(c->L->evict_arg, c->k, key);
}

static void local_destroy(st_rowsrc_t *s)
{
	local_src_t *L = (local_src_t *)s;
	/* A table's SSD tier removes its own directory on close. The root
	 * stays while another job's tiers are in it (rmdir fails). */
	for (int i = 0; i < L->n_tables; i++)
		st_table_destroy(L->tables[i]);
	if (L->root[0])
		rmdir(L->root);
	for (int i = 0; i < ST_ROWSRC_MAX_THREADS; i++) {
		free(L->part[i].keys);
		free(L->part[i].pos);
		free(L->part[i].rows);
	}
	free(L);
}

int st_rowsrc_local_create(st_rowsrc_t **out, const st_rowsrc_local_cfg_t *cfg)
{
	const int nt = cfg->n_tables;
	if (nt < 1 || nt > ST_ROWSRC_MAX_TABLES)
		return ST_EINVAL;
	uint64_t total_w = 0, row_b[ST_ROWSRC_MAX_TABLES];
	for (int t = 0; t < nt; t++) {
		/* Compact rows (storage.row_precision) take fewer words, so the
		 * same storage.mem caches more of them. */
		size_t floats = (size_t)st_rowfmt_words(cfg->tables[t].row_prec, cfg->tables[t].dim) +
				cfg->tables[t].state_dim;
		row_b[t] = floats * sizeof(float) + ROW_OVERHEAD;
		total_w += row_b[t] * (uint64_t)cfg->slots[t];
	}
	const int cached = cfg->ssd_path != NULL;
	uint64_t cache_rows[ST_ROWSRC_MAX_TABLES] = { 0 };
	if (cached && !cfg->mem_bytes) {
		st_error("storage.ssd needs storage.mem: the RAM budget decides which rows go "
			 "to SSD");
		return ST_EJOB;
	}
	for (int t = 0; cached && t < nt; t++) {
		const int nslots = cfg->slots[t];
		double share = (double)row_b[t] * nslots / (double)total_w;
		cache_rows[t] = (uint64_t)((double)cfg->mem_bytes * share) / row_b[t];
		/* One batch may touch batch_size rows of each of the table's
		 * slots (max_len of a list field's); fewer rows than that cannot
		 * hold the working set (the paper's pinned working parameters,
		 * Appendix D). */
		const int nkeys = cfg->keys && cfg->keys[t] > nslots ? cfg->keys[t] : nslots;
		uint64_t need = (uint64_t)cfg->batch_size * (uint64_t)nkeys;
		if (cache_rows[t] < need) {
			char what[64];
			if (nkeys == nslots)
				snprintf(what, sizeof what, "%d slots", nslots);
			else
				snprintf(what, sizeof what, "%d keys of %d slots", nkeys, nslots);
			st_error("storage.mem = %.1f MiB holds %llu rows of table %d (%llu bytes each), "
				 "fewer than one batch can use (batch_size %d x %s = %llu rows): "
				 "raise storage.mem to at least %.1f MiB or lower "
				 "stages.read.batch_size",
				 (double)cfg->mem_bytes / 1048576.0,
				 (unsigned long long)cache_rows[t], t, (unsigned long long)row_b[t],
				 cfg->batch_size, what, (unsigned long long)need,
				 (double)need * (double)total_w / nslots / 1048576.0);
			return ST_EJOB;
		}
	}
	local_src_t *L = calloc(1, sizeof *L);
	if (!L)
		return ST_ENOMEM;
	L->base.m = &local_methods;
	L->ttl = cfg->ttl;
	L->evict_every = cfg->ttl / 8 ? cfg->ttl / 8 : 1;
	L->mem_budget = cfg->mem_bytes;
	L->on_evict = cfg->on_evict;
	L->evict_arg = cfg->evict_arg;
	if (cached) {
		int rc = store_root(cfg->ssd_path, L->root, sizeof L->root);
		if (rc < 0) {
			L->root[0] = 0;
			local_destroy(&L->base);
			return rc;
		}
	}
	for (int t = 0; t < nt; t++) {
		st_table_opts_t to = cfg->tables[t];
		L->evict_ctx[t] = (evict_ctx_t){ L, t };
		to.on_evict = cfg->on_evict ? on_evict : NULL;
		to.evict_arg = &L->evict_ctx[t];
		st_ssd_opts_t so;
		char dir[4200];
		if (cached) {
			to.cache_rows = cache_rows[t];
			/* Shards of at least ~256 rows, so that each shard's LRU and
			 * LFU segments are long enough to mean something. */
			uint32_t ns = 64;
			while (ns > 1 && to.cache_rows / ns < 256)
				ns /= 2;
			to.n_shards = ns;
			to.lru_frac = cfg->ssd_lru;
			snprintf(dir, sizeof dir, "%s/t%d", L->root, t);
			so = (st_ssd_opts_t){
				.dir = dir,
				.payload_bytes = (uint32_t)((st_rowfmt_words(to.row_prec, to.dim) + to.state_dim + 2) *
							  sizeof(float)),
				.file_bytes = cfg->ssd_file_bytes,
				.queue_depth = (uint32_t)cfg->ssd_queue_depth,
				.budget_bytes = cfg->ssd_bytes / (uint64_t)nt,
				.read_mode = read_mode(cfg->ssd_read),
				.fresh = 1,
				.remove_on_close = 1,
			};
			to.ssd = &so;
		}
		int rc = st_table_create(&L->tables[t], &to);
		if (rc < 0) {
			if (rc == ST_EINVAL)
				st_error("table %d (dim %u): invalid settings", t, cfg->tables[t].dim);
			if (rc == ST_EBUSY)
				st_error("storage.ssd.path %s is in use by another strata job "
					 "(see above): two jobs on one path would overwrite each "
					 "other's rows. Give each job (and each process of a "
					 "multi-process job) its own storage.ssd.path; nothing was "
					 "trained", cfg->ssd_path);
			local_destroy(&L->base);
			return rc;
		}
		L->n_tables = t + 1;
	}
	*out = &L->base;
	return ST_OK;
}

/* ---- the contract ---------------------------------------------------------- */

static int local_resolve(st_rowsrc_t *s, st_batch_t *b, const uint8_t *table, int thread,
			 int (*stop)(void *), void *stop_arg)
{
	(void)stop;
	(void)stop_arg;
	local_src_t *L = (local_src_t *)s;
	const uint32_t nu = b->n_uniq, step = (uint32_t)b->seq;
	float **rows = b->rows;
	int rc;
	if (L->n_tables == 1) {
		rc = st_table_resolve(L->tables[0], b->uniq, nu, step, !b->eval, rows);
		return rc < 0 ? rc : ST_OK;
	}
	/* Several tables: each table's keys in one call, from this thread's
	 * scratch. */
	part_t *p = &L->part[thread];
	if (nu > p->cap) {
		free(p->keys);
		free(p->pos);
		free(p->rows);
		p->keys = malloc(sizeof(uint64_t) * nu);
		p->pos = malloc(sizeof(uint32_t) * nu);
		p->rows = malloc(sizeof(float *) * nu);
		p->cap = (p->keys && p->pos && p->rows) ? nu : 0;
	}
	rc = p->cap >= nu ? ST_OK : ST_ENOMEM;
	for (int k = 0; k < L->n_tables && rc >= 0; k++) {
		uint32_t m = 0;
		for (uint32_t u = 0; u < nu; u++)
			if (table[u] == k) {
				p->keys[m] = b->uniq[u];
				p->pos[m++] = u;
			}
		rc = st_table_resolve(L->tables[k], p->keys, m, step, !b->eval, p->rows);
		for (uint32_t i = 0; i < m && rc >= 0; i++)
			rows[p->pos[i]] = p->rows[i];
	}
	return rc < 0 ? rc : ST_OK;
}

static void local_release(st_rowsrc_t *s, st_batch_t *b)
{
	local_src_t *L = (local_src_t *)s;
	/* With an SSD tier every row resolve returned is pinned; from now on
	 * the RAM tier may evict them again. st_table_unpin finds a row's pin
	 * count in the row itself, and every table of a tiered store is
	 * tiered, so one call covers the rows of every table. */
	if (L->root[0])
		st_table_unpin(L->tables[0], b->rows, b->n_uniq);
}

static int local_maintain(st_rowsrc_t *s, const st_batch_t *b, uint64_t *evicted)
{
	local_src_t *L = (local_src_t *)s;
	int swept = 0;
	*evicted = 0;
	if (L->ttl && !b->eval && b->seq > L->ttl && b->seq % L->evict_every == 0) {
		for (int i = 0; i < L->n_tables; i++)
			*evicted += st_table_evict_older(L->tables[i], (uint32_t)b->seq, L->ttl);
		swept = 1;
	}
	if (L->mem_budget && !L->root[0] && !L->mem_warned) {
		uint64_t bytes = 0;
		for (int i = 0; i < L->n_tables; i++)
			bytes += (uint64_t)st_table_size(L->tables[i]) * st_table_row_bytes(L->tables[i]);
		if (bytes > L->mem_budget) {
			st_warn("the embedding table uses %.1f MB, more than storage.mem (%.1f MB): "
				"without storage.ssd every row stays in RAM (add storage.ssd to "
				"evict cold rows to SSD)",
				(double)bytes / 1e6, (double)L->mem_budget / 1e6);
			L->mem_warned = 1;
		}
	}
	return swept;
}

static void local_metrics(st_rowsrc_t *s, st_metrics_t *m)
{
	local_src_t *L = (local_src_t *)s;
	uint64_t rows = 0, rejected = 0;
	st_table_stats_t sum = { 0 };
	st_ssd_stats_t ss = { 0 };
	uint64_t live_bytes = 0, ram_bytes = 0;
	for (int i = 0; i < L->n_tables; i++) {
		st_table_stats_t ts;
		st_table_stats(L->tables[i], &ts);
		/* the RAM tier's rows, each its row slot (floats, metadata and,
		 * with an SSD tier, cache words) */
		ram_bytes += ts.rows * st_table_row_bytes(L->tables[i]);
		rows += ts.rows + ts.cold_rows;
		rejected += ts.rejected;
		sum.hits_lru += ts.hits_lru;
		sum.hits_lfu += ts.hits_lfu;
		sum.loads += ts.loads;
		sum.misses += ts.misses;
		sum.spilled += ts.spilled;
		sum.cold_rows += ts.cold_rows;
		sum.rows += ts.rows;
		sum.over_budget += ts.over_budget;
		st_ssd_t *ssd = st_table_ssd(L->tables[i]);
		if (ssd) {
			st_ssd_stats_t x;
			st_ssd_stats(ssd, &x);
			ss.disk_bytes += x.disk_bytes;
			ss.live_records += x.live_records;
			ss.bytes_read += x.bytes_read;
			ss.read_ios += x.read_ios;
			ss.read_records += x.read_records;
			ss.bytes_written += x.bytes_written;
			ss.compact_seconds += x.compact_seconds;
			ss.record_bytes = x.record_bytes;
			ss.stale_records += x.stale_records;
			live_bytes += x.live_records * x.record_bytes;
		}
	}
	st_metrics_set(m, "rows", (double)rows);
	st_metrics_set(m, "ram_mb", (double)ram_bytes / 1e6);
	if (rejected)
		st_metrics_set(m, "not_admitted", (double)rejected);
	if (!L->root[0])
		return;
	double look = (double)(sum.hits_lru + sum.hits_lfu + sum.loads + sum.misses);
	st_metrics_set(m, "cache.rows_ram", (double)sum.rows);
	st_metrics_set(m, "cache.rows_ssd", (double)sum.cold_rows);
	if (look > 0) {
		st_metrics_set(m, "cache.hit", (double)(sum.hits_lru + sum.hits_lfu) / look);
		st_metrics_set(m, "cache.hit_lru", (double)sum.hits_lru / look);
		st_metrics_set(m, "cache.hit_lfu", (double)sum.hits_lfu / look);
		st_metrics_set(m, "cache.ssd_load", (double)sum.loads / look);
	}
	st_metrics_set(m, "ssd.rows_read", (double)sum.loads);
	st_metrics_set(m, "ssd.rows_written", (double)sum.spilled);
	st_metrics_set(m, "ssd.read_mb", (double)ss.bytes_read / 1e6);
	st_metrics_set(m, "ssd.read_ios", (double)ss.read_ios);
	st_metrics_set(m, "ssd.write_mb", (double)ss.bytes_written / 1e6);
	if (ss.read_records)
		st_metrics_set(m, "ssd.read_amp", (double)ss.bytes_read /
				   ((double)ss.read_records * ss.record_bytes));
	st_metrics_set(m, "ssd.disk_mb", (double)ss.disk_bytes / 1e6);
	st_metrics_set(m, "ssd.live_mb", (double)live_bytes / 1e6);
	st_metrics_set(m, "ssd.index_mb", (double)sum.cold_rows * 28.0 / 1e6);
	st_metrics_set(m, "ssd.compact_s", ss.compact_seconds);
	if (sum.over_budget && !L->over_warned) {
		st_warn("the RAM tier went over storage.mem: every row it could evict was pinned by "
			"batches in flight (lower stages.*.queue or raise storage.mem)");
		L->over_warned = 1;
	}
}

static const st_rowsrc_methods_t local_methods = {
	.version = ST_ROWSRC_VERSION,
	.name = "local",
	.caps = ST_ROWSRC_SHARED,
	.resolve = local_resolve,
	.release = local_release,
	.maintain = local_maintain,
	.metrics = local_metrics,
	.destroy = local_destroy,
};

/* ---- accessors ------------------------------------------------------------ */

int st_rowsrc_local_ntables(const st_rowsrc_t *s)
{
	return local_of(s)->n_tables;
}

st_table_t *st_rowsrc_local_table(const st_rowsrc_t *s, int k)
{
	const local_src_t *L = local_of(s);
	return k >= 0 && k < L->n_tables ? L->tables[k] : NULL;
}

int st_rowsrc_local_bounded(const st_rowsrc_t *s)
{
	const local_src_t *L = local_of(s);
	return L->mem_budget || L->root[0];
}
