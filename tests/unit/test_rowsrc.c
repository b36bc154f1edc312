/*
 * test_rowsrc.c — the row-source contract (ops/rowsrc/rowsrc.h), the same
 * cases against every backend: local with every row in RAM, local with an
 * SSD tier under a RAM budget of a few hundred rows, and remote (one rank:
 * the job's parameter service over a real network of one process, pulls
 * through its service thread). The cases: a train batch creates its rows
 * and an eval batch creates none; rows start from (seed, key) whatever the
 * backend; admission; several tables; shared rows versus private copies;
 * rows survive release and the SSD tier; TTL sweeps evict through maintain
 * and report each key with its table; the metrics.
 *
 * Remote only: a worker's step read sees a push sent before it and creates
 * nothing; a train batch's pull waits for the synchronous steps before it
 * (lag 0); and two ranks forked from this process, each pulling keys owned
 * by both, get the rows one local store would give.
 *
 * The forked ranks check with CHECK (exit status 3 and a message), as in
 * test_net.c. The remote cases skip when the build has no UCX.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ops/algo/params.h"
#include "ops/dist/dist.h"
#include "ops/optim/optim.h"
#include "ops/rowsrc/local.h"
#include "ops/rowsrc/remote.h"
#include "ops/rowsrc/rowsrc.h"
#include "runtime/err.h"
#include "runtime/metrics.h"
#include "runtime/net/net.h"
#include "st_config.h"
#include "dump_util.h"
#include "skip_util.h"

enum { LOCAL_RAM, LOCAL_SSD, REMOTE };

enum { DIM0 = 4, DIM1 = 8, MAXDIM = 8, WORKERS = 2 };

/* ---- fixtures ------------------------------------------------------------------- */

static st_net_t *g_net;        /* one rank, for the remote cases (opened once) */
static st_optim_t g_opt;
static st_algo_params_t g_params;  /* what the owners step: sgd, lr 0.5 */

typedef struct fix {
	int kind;
	st_rowsrc_t *src, *local;
	st_dist_t *dist;
	st_rowsrc_clock_t clock;
	char *dir;
	/* on_evict's log */
	uint64_t ev_key[4096];
	int ev_table[4096];
	int n_ev;
} fix_t;

static void log_evict(void *arg, int table, uint64_t key)
{
	fix_t *f = arg;
	if (f->n_ev < 4096) {
		f->ev_key[f->n_ev] = key;
		f->ev_table[f->n_ev++] = table;
	}
}

/* Table options of table k (DIM0 or DIM1 floats, no optimizer state). */
static st_table_opts_t topts(int k)
{
	return (st_table_opts_t){ .dim = k ? DIM1 : DIM0, .seed = 7 + (uint64_t)k,
				  .init_scale = 0.1f, .n_shards = 4 };
}

static void base_cfg(st_rowsrc_local_cfg_t *c, st_table_opts_t *t, int *slots, int n_tables)
{
	for (int k = 0; k < n_tables; k++) {
		t[k] = topts(k);
		slots[k] = 1;
	}
	*c = (st_rowsrc_local_cfg_t){ .n_tables = n_tables, .tables = t, .slots = slots,
				      .batch_size = 100 };
}

static void free_port_coord(char *coord, size_t n)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof a;
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	close(fd);
	snprintf(coord, n, "127.0.0.1:%d", ntohs(a.sin_port));
}

static void open_net(void)
{
	if (g_net)
		return;
	st_net_cfg_t cfg = { .rank = 0, .size = 1, .timeout_s = 60 };
	free_port_coord(cfg.coordinator, sizeof cfg.coordinator);
	snprintf(cfg.token, sizeof cfg.token, "rowsrc-%d", (int)getpid());
	assert_int_equal(st_net_open(&g_net, &cfg), ST_OK);
}

/* The parameter service of a rank over local's tables, and the remote
 * source over both. */
static st_dist_t *dist_over(st_net_t *net, st_rowsrc_t *local)
{
	st_dist_cfg_t dc = { .net = net, .n_tables = st_rowsrc_local_ntables(local),
			     .params = g_params, .n_workers = WORKERS };
	for (int k = 0; k < dc.n_tables; k++) {
		dc.tables[k] = st_rowsrc_local_table(local, k);
		dc.dim[k] = k ? DIM1 : DIM0;
	}
	st_dist_t *d = NULL;
	return st_dist_create(&d, &dc) == ST_OK ? d : NULL;
}

/* Opens backend `kind` with cfg (its hooks and SSD settings are set here). */
static void fix_open(fix_t *f, int kind, st_rowsrc_local_cfg_t *cfg)
{
	memset(f, 0, sizeof *f);
	f->kind = kind;
	cfg->on_evict = log_evict;
	cfg->evict_arg = f;
	if (kind == LOCAL_SSD) {
		f->dir = tu_mkdtemp("rowsrc");
		cfg->ssd_path = f->dir;
		/* Room for 512 rows of table 0 in RAM; the rest goes to SSD. */
		cfg->mem_bytes = (uint64_t)512 * (DIM0 * sizeof(float) + 39) * (uint64_t)cfg->n_tables;
		cfg->ssd_file_bytes = 1 << 20;
		cfg->ssd_queue_depth = 8;
		cfg->ssd_lru = 0.5;
	}
	assert_int_equal(st_rowsrc_local_create(&f->local, cfg), ST_OK);
	f->src = f->local;
	if (kind == REMOTE) {
		open_net();
		assert_non_null(f->dist = dist_over(g_net, f->local));
		f->clock.lag = -1;
		st_rowsrc_remote_cfg_t rc = { .dist = f->dist, .shard = f->local,
					      .n_workers = WORKERS, .stride = MAXDIM,
					      .clock = &f->clock };
		assert_int_equal(st_rowsrc_remote_create(&f->src, &rc), ST_OK);
	}
}

static void fix_close(fix_t *f)
{
	if (f->src != f->local)
		st_rowsrc_destroy(f->src);
	st_dist_destroy(f->dist);
	st_rowsrc_destroy(f->local);
	if (f->dir) {
		st__dumpio_rmtree(f->dir);
		free(f->dir);
	}
}

/* A batch of n unique keys (their tables in table[], or all table 0). */
static st_batch_t *batch(uint64_t seq, int eval, const uint64_t *keys, uint32_t n)
{
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, 1, 0, 1, 1), ST_OK);
	b->seq = seq;
	b->eval = eval;
	b->uniq = malloc(sizeof(uint64_t) * (n ? n : 1));
	memcpy(b->uniq, keys, sizeof(uint64_t) * n);
	b->n_uniq = n;
	b->rows = calloc(n ? n : 1, sizeof(float *));
	return b;
}

static const uint8_t zeros[4096];

static int resolve(fix_t *f, st_batch_t *b, const uint8_t *table)
{
	return st_rowsrc_resolve(f->src, b, table ? table : zeros, 0, NULL, NULL);
}

static float **rows_of(st_batch_t *b)
{
	return b->rows;
}

/* The first dim floats a fresh row of key in table k starts with (from a
 * reference local store in RAM). */
static void ref_row(int k, uint64_t key, float *out)
{
	st_table_t *t;
	st_table_opts_t o = topts(k);
	assert_int_equal(st_table_create(&t, &o), ST_OK);
	float *r = NULL;
	assert_true(st_table_resolve(t, &key, 1, 0, 1, &r) >= 0);
	memcpy(out, r, sizeof(float) * o.dim);
	st_table_destroy(t);
}

static void keys_range(uint64_t *k, uint32_t n, uint64_t first)
{
	for (uint32_t i = 0; i < n; i++)
		k[i] = first + i;
}

/* Three cmocka cases, one per backend, for each contract case. */
#define CASE(name)                                                                  \
	static void name##_local(void **s) { (void)s; name(LOCAL_RAM); }            \
	static void name##_ssd(void **s) { (void)s; name(LOCAL_SSD); }              \
	static void name##_remote(void **s)                                         \
	{                                                                           \
		(void)s;                                                            \
		if (!ST_HAVE_UCX)                                                   \
			TU_SKIP("remote row source: this build has no UCX");        \
		name(REMOTE);                                                       \
	}
#define RUN(name) cmocka_unit_test(name##_local), cmocka_unit_test(name##_ssd), \
	cmocka_unit_test(name##_remote)

/* ---- the contract, every backend --------------------------------------------------- */

static void train_creates_eval_does_not(int kind)
{
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[2];
	int slots[2];
	base_cfg(&cfg, t, slots, 1);
	fix_t *f = calloc(1, sizeof *f);
	fix_open(f, kind, &cfg);
	uint64_t k[60];
	keys_range(k, 50, 1);
	st_batch_t *tb = batch(0, 0, k, 50);
	assert_int_equal(resolve(f, tb, NULL), ST_OK);
	for (int i = 0; i < 50; i++) {
		float want[DIM0];
		ref_row(0, k[i], want);
		assert_non_null(rows_of(tb)[i]);
		assert_memory_equal(rows_of(tb)[i], want, sizeof want);
	}
	/* An eval batch: the 50 known keys and 10 new ones. */
	keys_range(k + 50, 10, 1000);
	st_batch_t *eb = batch(1, 1, k, 60);
	assert_int_equal(resolve(f, eb, NULL), ST_OK);
	for (int i = 0; i < 50; i++) {
		assert_non_null(rows_of(eb)[i]);
		assert_memory_equal(rows_of(eb)[i], rows_of(tb)[i], sizeof(float) * DIM0);
		if (st_rowsrc_caps(f->src) & ST_ROWSRC_SHARED)
			assert_ptr_equal(rows_of(eb)[i], rows_of(tb)[i]);
	}
	for (int i = 50; i < 60; i++)
		assert_null(rows_of(eb)[i]);
	st_rowsrc_release(f->src, eb);
	st_rowsrc_release(f->src, tb);
	/* A train batch creates them. */
	st_batch_t *t2 = batch(2, 0, k + 50, 10);
	assert_int_equal(resolve(f, t2, NULL), ST_OK);
	for (int i = 0; i < 10; i++)
		assert_non_null(rows_of(t2)[i]);
	st_rowsrc_release(f->src, t2);
	st_batch_destroy(tb);
	st_batch_destroy(eb);
	st_batch_destroy(t2);
	fix_close(f);
	free(f);
}
CASE(train_creates_eval_does_not)

static void admission(int kind)
{
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[2];
	int slots[2];
	base_cfg(&cfg, t, slots, 1);
	t[0].admit_min_count = 2;
	fix_t *f = calloc(1, sizeof *f);
	fix_open(f, kind, &cfg);
	uint64_t k[20];
	keys_range(k, 20, 500);
	for (int round = 0; round < 3; round++) {
		/* train (1st sighting), eval (counts nothing), train (2nd). */
		const int eval = round == 1;
		st_batch_t *b = batch((uint64_t)round, eval, k, 20);
		assert_int_equal(resolve(f, b, NULL), ST_OK);
		for (int i = 0; i < 20; i++) {
			if (round < 2)
				assert_null(rows_of(b)[i]);
			else
				assert_non_null(rows_of(b)[i]);
		}
		st_rowsrc_release(f->src, b);
		st_batch_destroy(b);
	}
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	st_rowsrc_metrics(f->src, m);
	assert_true(st_metrics_get(m, "rows", -1) == 20);
	assert_true(st_metrics_get(m, "not_admitted", 0) > 0);
	st_metrics_destroy(m);
	fix_close(f);
	free(f);
}
CASE(admission)

static void several_tables(int kind)
{
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[2];
	int slots[2];
	base_cfg(&cfg, t, slots, 2);
	fix_t *f = calloc(1, sizeof *f);
	fix_open(f, kind, &cfg);
	uint64_t k[20];
	uint8_t tab[20];
	for (int i = 0; i < 20; i++) {
		k[i] = 1 + (uint64_t)i;
		tab[i] = (uint8_t)(i % 2);
	}
	st_batch_t *b = batch(0, 0, k, 20);
	assert_int_equal(resolve(f, b, tab), ST_OK);
	for (int i = 0; i < 20; i++) {
		float want[MAXDIM];
		ref_row(tab[i], k[i], want);
		assert_non_null(rows_of(b)[i]);
		assert_memory_equal(rows_of(b)[i], want, sizeof(float) * (tab[i] ? DIM1 : DIM0));
	}
	st_rowsrc_release(f->src, b);
	/* The same keys in the other table: other rows. */
	for (int i = 0; i < 20; i++)
		tab[i] ^= 1;
	st_batch_t *b2 = batch(1, 0, k, 20);
	assert_int_equal(resolve(f, b2, tab), ST_OK);
	for (int i = 0; i < 20; i++) {
		float want[MAXDIM];
		ref_row(tab[i], k[i], want);
		assert_memory_equal(rows_of(b2)[i], want, sizeof(float) * (tab[i] ? DIM1 : DIM0));
		assert_true(memcmp(rows_of(b2)[i], rows_of(b)[i], sizeof(float) * DIM0) != 0);
	}
	st_rowsrc_release(f->src, b2);
	st_batch_destroy(b);
	st_batch_destroy(b2);
	fix_close(f);
	free(f);
}
CASE(several_tables)

static void shared_or_copy(int kind)
{
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[2];
	int slots[2];
	base_cfg(&cfg, t, slots, 1);
	fix_t *f = calloc(1, sizeof *f);
	fix_open(f, kind, &cfg);
	const uint64_t key = 77;
	float before[DIM0];
	ref_row(0, key, before);
	st_batch_t *b = batch(0, 0, &key, 1);
	assert_int_equal(resolve(f, b, NULL), ST_OK);
	float *r = rows_of(b)[0];
	r[0] = 42.0f;
	st_rowsrc_release(f->src, b);
	st_batch_t *b2 = batch(1, 0, &key, 1);
	assert_int_equal(resolve(f, b2, NULL), ST_OK);
	if (st_rowsrc_caps(f->src) & ST_ROWSRC_SHARED) {
		/* The live row: the write is the row's. */
		assert_ptr_equal(rows_of(b2)[0], r);
		assert_true(rows_of(b2)[0][0] == 42.0f);
	} else {
		/* A private copy: the write reached no one. */
		assert_ptr_not_equal(rows_of(b2)[0], r);
		assert_memory_equal(rows_of(b2)[0], before, sizeof before);
	}
	st_rowsrc_release(f->src, b2);
	st_batch_destroy(b);
	st_batch_destroy(b2);
	fix_close(f);
	free(f);
}
CASE(shared_or_copy)

/* Value a shared row is given in rows_survive (one per key and float). */
static float mark_of(uint64_t key, int j)
{
	return (float)(key % 1000) + 0.25f * (float)j;
}

static void rows_survive_release(int kind)
{
	enum { BATCHES = 30, N = 100 };
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[2];
	int slots[2];
	base_cfg(&cfg, t, slots, 1);
	fix_t *f = calloc(1, sizeof *f);
	fix_open(f, kind, &cfg);
	const int shared = st_rowsrc_caps(f->src) & ST_ROWSRC_SHARED;
	/* 3000 rows through a RAM tier of 512 (SSD) — every batch released
	 * before the next, as push does. */
	uint64_t k[N];
	for (int i = 0; i < BATCHES; i++) {
		keys_range(k, N, 10000 + (uint64_t)i * N);
		st_batch_t *b = batch((uint64_t)i, 0, k, N);
		assert_int_equal(resolve(f, b, NULL), ST_OK);
		for (int u = 0; shared && u < N; u++)
			for (int j = 0; j < DIM0; j++)
				rows_of(b)[u][j] = mark_of(k[u], j);
		st_rowsrc_release(f->src, b);
		st_batch_destroy(b);
	}
	for (int i = 0; i < BATCHES; i++) {
		keys_range(k, N, 10000 + (uint64_t)i * N);
		st_batch_t *b = batch((uint64_t)(BATCHES + i), 1, k, N);
		assert_int_equal(resolve(f, b, NULL), ST_OK);
		for (int u = 0; u < N; u++) {
			float want[DIM0];
			if (shared)
				for (int j = 0; j < DIM0; j++)
					want[j] = mark_of(k[u], j);
			else
				ref_row(0, k[u], want);
			assert_non_null(rows_of(b)[u]);
			assert_memory_equal(rows_of(b)[u], want, sizeof want);
		}
		st_rowsrc_release(f->src, b);
		st_batch_destroy(b);
	}
	st_metrics_t *m;
	assert_int_equal(st_metrics_create(&m), ST_OK);
	st_rowsrc_metrics(f->src, m);
	assert_true(st_metrics_get(m, "rows", -1) == BATCHES * N);
	if (kind == LOCAL_SSD) {
		assert_true(st_metrics_get(m, "cache.rows_ssd", 0) > 0);
		assert_true(st_metrics_get(m, "ssd.rows_read", 0) > 0);
	} else {
		assert_true(st_metrics_get(m, "cache.rows_ssd", -1) == -1);
	}
	st_metrics_destroy(m);
	fix_close(f);
	free(f);
}
CASE(rows_survive_release)

static void ttl_sweeps(int kind)
{
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[2];
	int slots[2];
	base_cfg(&cfg, t, slots, 2);
	cfg.ttl = 8;                   /* a sweep every batch (ttl / 8) */
	fix_t *f = calloc(1, sizeof *f);
	fix_open(f, kind, &cfg);
	uint64_t old[10];
	uint8_t tab[10];
	for (int i = 0; i < 10; i++) {
		old[i] = 1 + (uint64_t)i;
		tab[i] = (uint8_t)(i % 2);
	}
	st_batch_t *b = batch(1, 0, old, 10);
	assert_int_equal(resolve(f, b, tab), ST_OK);
	st_rowsrc_release(f->src, b);
	uint64_t ev = 0, total = 0;
	assert_int_equal(st_rowsrc_maintain(f->src, b, &ev), 0);   /* seq <= ttl */
	st_batch_destroy(b);
	for (uint64_t seq = 2; seq <= 20; seq++) {
		const uint64_t key = 100 + seq;
		b = batch(seq, 0, &key, 1);
		assert_int_equal(resolve(f, b, NULL), ST_OK);
		st_rowsrc_release(f->src, b);
		int rc = st_rowsrc_maintain(f->src, b, &ev);
		assert_int_equal(rc, seq > 8 ? 1 : 0);
		total += ev;
		st_batch_destroy(b);
	}
	/* An eval batch never sweeps. */
	b = batch(24, 1, old, 1);
	assert_int_equal(resolve(f, b, tab), ST_OK);
	assert_null(rows_of(b)[0]);     /* swept */
	st_rowsrc_release(f->src, b);
	assert_int_equal(st_rowsrc_maintain(f->src, b, &ev), 0);
	st_batch_destroy(b);
	assert_true(total >= 10);
	assert_int_equal((uint64_t)f->n_ev, total);
	for (int i = 0; i < 10; i++) {
		int seen = 0;
		for (int e = 0; e < f->n_ev; e++)
			if (f->ev_key[e] == old[i]) {
				assert_int_equal(f->ev_table[e], tab[i]);
				seen = 1;
			}
		assert_true(seen);
	}
	fix_close(f);
	free(f);
}
CASE(ttl_sweeps)

/* ---- remote only --------------------------------------------------------------- */

static void test_rowsrc_remote_step_read(void **state)
{
	(void)state;
	if (!ST_HAVE_UCX)
		TU_SKIP("remote row source: this build has no UCX");
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[2];
	int slots[2];
	base_cfg(&cfg, t, slots, 1);
	fix_t *f = calloc(1, sizeof *f);
	fix_open(f, REMOTE, &cfg);
	assert_true(st_rowsrc_can_read_step(f->src));
	uint64_t k[6] = { 1, 2, 3, 4, 5, 999 };
	st_batch_t *b = batch(0, 0, k, 5);
	assert_int_equal(resolve(f, b, NULL), ST_OK);
	assert_non_null(st_rowsrc_versions(f->src, b));
	/* An asynchronous push of key 3, then a step read of keys 1..5 and of
	 * 999, which no batch created. */
	float g[DIM0] = { 1, 2, 3, 4 }, before[DIM0];
	ref_row(0, 3, before);
	assert_int_equal(st_dist_push(f->dist, 0, 0, 1, &k[2], zeros, g, DIM0, 1), ST_OK);
	st_batch_t *e = batch(1, 0, k, 6);
	float buf[6 * MAXDIM];
	uint8_t ok[6] = { 9, 9, 9, 9, 9, 9 };
	uint32_t idx[6] = { 0, 1, 2, 3, 4, 5 };
	assert_int_equal(st_rowsrc_read_step(f->src, 1, e, zeros, idx, 6, buf, MAXDIM, ok), ST_OK);
	for (int i = 0; i < 5; i++)
		assert_int_equal(ok[i], 1);
	assert_int_equal(ok[5], 0);
	for (int j = 0; j < DIM0; j++)
		assert_true(buf[2 * MAXDIM + j] == before[j] - 0.5f * g[j]);
	assert_memory_equal(buf, rows_of(b)[0], sizeof(float) * DIM0);
	/* Nothing created: an eval batch still misses 999. */
	st_batch_t *e2 = batch(2, 1, &k[5], 1);
	assert_int_equal(resolve(f, e2, NULL), ST_OK);
	assert_null(rows_of(e2)[0]);
	st_batch_destroy(b);
	st_batch_destroy(e);
	st_batch_destroy(e2);
	fix_close(f);
	free(f);
}

/* The pull of batch 1 waits for step 0: the stop callback, which a pull
 * asks only while it waits, lets a helper thread send step 0's update; if
 * the pull did not wait, the update would never be sent and batch 1's row
 * would be the old one. */
typedef struct waiter {
	sem_t waiting;
	int fired, abort;
	fix_t *f;
	uint64_t key;
	const float *g;
} waiter_t;

static int stop_probe(void *arg)
{
	waiter_t *w = arg;
	if (!__atomic_exchange_n(&w->fired, 1, __ATOMIC_ACQ_REL))
		sem_post(&w->waiting);
	return 0;
}

static void *step0_sender(void *arg)
{
	waiter_t *w = arg;
	sem_wait(&w->waiting);
	if (!__atomic_load_n(&w->abort, __ATOMIC_ACQUIRE))
		st_dist_push(w->f->dist, 0, 1, 1, &w->key, zeros, w->g, DIM0, 1);
	return NULL;
}

static void test_rowsrc_remote_waits_for_steps(void **state)
{
	(void)state;
	if (!ST_HAVE_UCX)
		TU_SKIP("remote row source: this build has no UCX");
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[2];
	int slots[2];
	base_cfg(&cfg, t, slots, 1);
	fix_t *f = calloc(1, sizeof *f);
	fix_open(f, REMOTE, &cfg);
	f->clock.lag = 0;              /* allreduce: no pull runs ahead */
	const uint64_t key = 11;
	float before[DIM0], g[DIM0] = { 0.5f, -1, 2, 4 };
	ref_row(0, key, before);
	st_batch_t *b0 = batch(0, 0, &key, 1);
	assert_int_equal(resolve(f, b0, NULL), ST_OK);   /* step 0: waits for nothing */
	waiter_t w = { .f = f, .key = key, .g = g };
	sem_init(&w.waiting, 0, 0);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, step0_sender, &w), 0);
	/* Batch 1 is step 1: it must see step 0's update. */
	st_batch_t *b1 = batch(1, 0, &key, 1);
	int rc = st_rowsrc_resolve(f->src, b1, zeros, 0, stop_probe, &w);
	if (!__atomic_load_n(&w.fired, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&w.abort, 1, __ATOMIC_RELEASE);
		sem_post(&w.waiting);
	}
	pthread_join(th, NULL);
	sem_destroy(&w.waiting);
	assert_int_equal(rc, ST_OK);
	assert_true(w.fired);
	for (int j = 0; j < DIM0; j++)
		assert_true(rows_of(b1)[0][j] == before[j] - 0.5f * g[j]);
	st_batch_destroy(b0);
	st_batch_destroy(b1);
	fix_close(f);
	free(f);
}

/* Two ranks, forked: each pulls 400 keys (owned by both ranks) and gets the
 * rows one local store gives. */

#define CHECK(c)                                                                   \
	do {                                                                       \
		if (!(c)) {                                                        \
			fprintf(stderr, "rank: %s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #c);                                     \
			_exit(3);                                                  \
		}                                                                  \
	} while (0)

static int two_rank_body(st_net_t *net)
{
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[2];
	int slots[2];
	base_cfg(&cfg, t, slots, 1);
	st_rowsrc_t *local = NULL, *src = NULL;
	CHECK(st_rowsrc_local_create(&local, &cfg) == ST_OK);
	st_dist_t *d = dist_over(net, local);
	CHECK(d);
	st_rowsrc_clock_t clock = { .lag = -1 };
	st_rowsrc_remote_cfg_t rc = { .dist = d, .shard = local, .n_workers = 1,
				      .stride = MAXDIM, .clock = &clock };
	CHECK(st_rowsrc_remote_create(&src, &rc) == ST_OK);
	enum { N = 400 };
	uint64_t k[N];
	keys_range(k, N, 1 + 1000 * (uint64_t)st_net_rank(net));
	int remote_keys = 0;
	for (int i = 0; i < N; i++)
		remote_keys += st_dist_owner(d, k[i]) != st_net_rank(net);
	CHECK(remote_keys > 0 && remote_keys < N);
	st_batch_t *b;
	CHECK(st_batch_create(&b, 1, 0, 1, 1) == ST_OK);
	b->uniq = malloc(sizeof k);
	memcpy(b->uniq, k, sizeof k);
	b->n_uniq = N;
	b->rows = calloc(N, sizeof(float *));
	CHECK(st_rowsrc_resolve(src, b, zeros, 0, NULL, NULL) == ST_OK);
	st_table_t *ref;
	st_table_opts_t o = topts(0);
	CHECK(st_table_create(&ref, &o) == ST_OK);
	for (int i = 0; i < N; i++) {
		float *want = NULL;
		CHECK(st_table_resolve(ref, &k[i], 1, 0, 1, &want) >= 0);
		CHECK(b->rows && ((float **)b->rows)[i]);
		CHECK(!memcmp(((float **)b->rows)[i], want, sizeof(float) * DIM0));
	}
	st_table_destroy(ref);
	st_rowsrc_release(src, b);
	st_batch_destroy(b);
	/* Nobody leaves while the other may still pull from it. */
	CHECK(st_net_barrier(net) == ST_OK);
	st_rowsrc_destroy(src);
	st_dist_destroy(d);
	st_rowsrc_destroy(local);
	return 0;
}

static void test_rowsrc_remote_two_ranks(void **state)
{
	(void)state;
	if (!ST_HAVE_UCX)
		TU_SKIP("remote row source: this build has no UCX");
	char coord[64], token[64];
	free_port_coord(coord, sizeof coord);
	snprintf(token, sizeof token, "rowsrc2-%d", (int)getpid());
	pid_t pid[2];
	for (int r = 0; r < 2; r++) {
		fflush(NULL);
		pid[r] = fork();
		assert_true(pid[r] >= 0);
		if (pid[r] == 0) {
			st_net_cfg_t cfg = { .rank = r, .size = 2, .timeout_s = 60 };
			snprintf(cfg.coordinator, sizeof cfg.coordinator, "%s", coord);
			snprintf(cfg.token, sizeof cfg.token, "%s", token);
			st_net_t *net;
			CHECK(st_net_open(&net, &cfg) == ST_OK);
			int status = two_rank_body(net);
			st_net_close(net);
			_exit(status);
		}
	}
	/* Deadline: a job that hangs fails here, it does not hang the suite. */
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int r = 0; r < 2; r++) {
		int st = 0;
		for (;;) {
			pid_t w = waitpid(pid[r], &st, WNOHANG);
			if (w == pid[r])
				break;
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - t0.tv_sec > 240) {
				kill(pid[0], SIGKILL);
				kill(pid[1], SIGKILL);
				fail_msg("rank %d did not finish in 240 s", r);
			}
			struct timespec ts = { 0, 20 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fail_msg("rank %d: exit status %d, signal %d", r,
				 WIFEXITED(st) ? WEXITSTATUS(st) : -1,
				 WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	}
}

/* The working-set minimum of storage.mem counts a list field's max_len
 * keys per example (cfg.keys), not one per slot: room for 512 rows holds a
 * batch of 100 examples x 1 slot, not one of 100 x 6 keys. */
static void test_rowsrc_mem_minimum_counts_list_keys(void **state)
{
	(void)state;
	st_rowsrc_local_cfg_t cfg;
	st_table_opts_t t[1];
	int slots[1], keys[1] = { 6 };
	base_cfg(&cfg, t, slots, 1);
	char *dir = tu_mkdtemp("rowsrc-min");
	cfg.ssd_path = dir;
	cfg.mem_bytes = (uint64_t)512 * (DIM0 * sizeof(float) + 39);
	cfg.ssd_file_bytes = 1 << 20;
	cfg.ssd_queue_depth = 8;
	cfg.ssd_lru = 0.5;
	st_rowsrc_t *r = NULL;
	assert_int_equal(st_rowsrc_local_create(&r, &cfg), ST_OK);
	st_rowsrc_destroy(r);
	cfg.keys = keys;
	r = NULL;
	assert_int_equal(st_rowsrc_local_create(&r, &cfg), ST_EJOB);
	assert_null(r);
	st__dumpio_rmtree(dir);
	free(dir);
}

int main(void)
{
	st_optim_cfg_t oc = { .name = "sgd", .lr = 0.5 };
	if (st_optim_init(&g_opt, &oc) < 0)
		return 1;
	g_params = (st_algo_params_t){ .sparse_opt = &g_opt, .dense_opt = &g_opt };
	const struct CMUnitTest tests[] = {
		/* First, before this process opens a network of its own: the
		 * ranks are forks of it. */
		cmocka_unit_test(test_rowsrc_remote_two_ranks),
		RUN(train_creates_eval_does_not),
		RUN(admission),
		RUN(several_tables),
		RUN(shared_or_copy),
		RUN(rows_survive_release),
		RUN(ttl_sweeps),
		cmocka_unit_test(test_rowsrc_remote_step_read),
		cmocka_unit_test(test_rowsrc_remote_waits_for_steps),
		cmocka_unit_test(test_rowsrc_mem_minimum_counts_list_keys),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	st_net_close(g_net);
	return tu_exit(failed, sizeof tests / sizeof tests[0]);
}
