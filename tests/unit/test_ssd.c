/* test_ssd.c — the SSD tier (runtime/store/ssd.c): round trips through write
 * buffers and disk in every read mode, release + compaction against an
 * owner's key -> location map (with concurrent updaters and readers),
 * corruption on disk, the pread/pwrite fallback, the disk budget, a write
 * that fails, and the lock that keeps a directory to one store. Files go
 * under $TMPDIR (or /tmp) and are removed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/store/ssd.h"

enum {
	P = 60,                  /* payload bytes: 16 + 60 + 4 = 80-byte records */
	REC = 80,
	FILE_BYTES = 64 << 10,   /* small files: many of them, and fast tests */
	PER_FILE = (FILE_BYTES - 4096) / REC,
};

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Keys that look random but map back to a dense id (an odd multiplier is
 * invertible mod 2^64), so the owner map can be an array. */
#define KMUL UINT64_C(0x9e3779b97f4a7c15)
static uint64_t key_of(uint32_t id)
{
	return (uint64_t)id * KMUL;
}

static uint32_t id_of(uint64_t key)
{
	uint64_t inv = KMUL;
	for (int i = 0; i < 6; i++)
		inv *= 2 - KMUL * inv;
	return (uint32_t)(key * inv);
}

/* Payload = function of (key, version), with both inside it. */
static void fill_payload(uint8_t *p, uint64_t key, uint64_t ver)
{
	memcpy(p, &key, 8);
	memcpy(p + 8, &ver, 8);
	uint64_t s = key ^ (ver * UINT64_C(0x2545f4914f6cdd1d));
	for (int i = 16; i < P; i += 4) {
		uint32_t w = (uint32_t)rnd(&s);
		memcpy(p + i, &w, 4);
	}
}

static char *make_tmpdir(void)
{
	const char *t = getenv("TMPDIR");
	if (!t || !*t)
		t = "/tmp";
	char *p = malloc(strlen(t) + 32);
	assert_non_null(p);
	sprintf(p, "%s/st-ssd-XXXXXX", t);
	assert_non_null(mkdtemp(p));
	return p;
}

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char path[4400];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		struct stat st;
		if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
			rm_tree(path);
		else
			unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

/* stderr capture, to pin the text of log messages. */
struct cap {
	int saved;
	char path[4200];
};

static void cap_begin(struct cap *c, const char *dir)
{
	snprintf(c->path, sizeof c->path, "%s/stderr.txt", dir);
	fflush(stderr);
	c->saved = dup(2);
	int fd = open(c->path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	assert_true(fd >= 0);
	dup2(fd, 2);
	close(fd);
}

static char *cap_end(struct cap *c)
{
	fflush(stderr);
	dup2(c->saved, 2);
	close(c->saved);
	FILE *f = fopen(c->path, "r");
	assert_non_null(f);
	char *buf = calloc(1, 1 << 20);
	size_t n = fread(buf, 1, (1 << 20) - 1, f);
	buf[n] = 0;
	fclose(f);
	unlink(c->path);
	fputs(buf, stderr); /* keep it in the test log too */
	return buf;
}

/* The owner: key id -> (location, version), under striped locks like the
 * table's shards (id % NSTRIPE). */
enum { NSTRIPE = 8 };
struct owner {
	pthread_mutex_t mu[NSTRIPE];
	uint32_t n;
	st_ssd_loc_t *loc;
	uint64_t *ver;
	uint64_t relocated, refused, recovered, bad;
};

static void owner_init(struct owner *o, uint32_t n)
{
	memset(o, 0, sizeof *o);
	for (int i = 0; i < NSTRIPE; i++)
		pthread_mutex_init(&o->mu[i], NULL);
	o->n = n;
	o->loc = malloc(n * sizeof *o->loc);
	o->ver = calloc(n, sizeof *o->ver);
	for (uint32_t i = 0; i < n; i++)
		o->loc[i] = ST_SSD_NOLOC;
}

static void owner_fini(struct owner *o)
{
	free(o->loc);
	free(o->ver);
	for (int i = 0; i < NSTRIPE; i++)
		pthread_mutex_destroy(&o->mu[i]);
}

static pthread_mutex_t *stripe(struct owner *o, uint32_t id)
{
	return &o->mu[id % NSTRIPE];
}

/* In stripe order, so that holding all never deadlocks with one. */
static void lock_all(struct owner *o)
{
	for (int i = 0; i < NSTRIPE; i++)
		pthread_mutex_lock(&o->mu[i]);
}

static void unlock_all(struct owner *o)
{
	for (int i = NSTRIPE - 1; i >= 0; i--)
		pthread_mutex_unlock(&o->mu[i]);
}

static int owner_relocate(void *arg, uint64_t key, st_ssd_loc_t from, st_ssd_loc_t to)
{
	struct owner *o = arg;
	uint32_t id = id_of(key);
	if (id >= o->n) {
		__atomic_fetch_add(&o->bad, 1, __ATOMIC_RELAXED);
		return 0;
	}
	pthread_mutex_lock(stripe(o, id));
	int r = 0;
	if (o->loc[id] == from) {
		o->loc[id] = to;
		r = 1;
	}
	pthread_mutex_unlock(stripe(o, id));
	__atomic_fetch_add(r ? &o->relocated : &o->refused, 1, __ATOMIC_RELAXED);
	return r;
}

static void owner_recovered(void *arg, uint64_t key, st_ssd_loc_t loc)
{
	struct owner *o = arg;
	uint32_t id = id_of(key);
	if (id >= o->n || o->loc[id] != ST_SSD_NOLOC) {
		o->bad++;
		return;
	}
	o->loc[id] = loc;
	o->recovered++;
}

/* Reads ids[0..n) through the owner's current locations (under its locks,
 * as the table does: a location is valid while the lock is held) and
 * checks each payload against (key, version). lock: the one stripe lock
 * that covers all ids, or NULL for all stripes. Returns the number of
 * mismatches. */
static int check_ids_locked(st_ssd_t *s, struct owner *o, const uint32_t *ids, uint32_t n,
			    pthread_mutex_t *lock)
{
	uint64_t *keys = malloc(n * sizeof *keys);
	st_ssd_loc_t *locs = malloc(n * sizeof *locs);
	uint64_t *vers = malloc(n * sizeof *vers);
	uint8_t *buf = malloc((size_t)n * P);
	void **dst = malloc(n * sizeof *dst);
	uint8_t want[P];
	int bad = 0;
	if (lock)
		pthread_mutex_lock(lock);
	else
		lock_all(o);
	for (uint32_t i = 0; i < n; i++) {
		keys[i] = key_of(ids[i]);
		locs[i] = o->loc[ids[i]];
		vers[i] = o->ver[ids[i]];
		dst[i] = buf + (size_t)i * P;
	}
	int rc = st_ssd_read(s, n, keys, locs, dst);
	if (lock)
		pthread_mutex_unlock(lock);
	else
		unlock_all(o);
	if (rc != ST_OK)
		bad++;
	for (uint32_t i = 0; i < n; i++) {
		fill_payload(want, keys[i], vers[i]);
		if (memcmp(want, dst[i], P))
			bad++;
	}
	free(keys);
	free(locs);
	free(vers);
	free(buf);
	free(dst);
	return bad;
}

static int check_ids(st_ssd_t *s, struct owner *o, const uint32_t *ids, uint32_t n)
{
	return check_ids_locked(s, o, ids, n, NULL);
}

static int check_all(st_ssd_t *s, struct owner *o)
{
	uint32_t *ids = malloc(o->n * sizeof *ids), m = 0;
	for (uint32_t i = 0; i < o->n; i++)
		if (o->loc[i] != ST_SSD_NOLOC)
			ids[m++] = i;
	int bad = check_ids(s, o, ids, m);
	free(ids);
	return bad;
}

/* Appends version ver of keys [id0, id1) and releases each key's previous
 * record, under the owner's stripe lock (as the table does). */
static void owner_write(st_ssd_t *s, struct owner *o, uint32_t id0, uint32_t id1,
			uint64_t ver)
{
	uint8_t pl[P];
	for (uint32_t id = id0; id < id1; id++) {
		fill_payload(pl, key_of(id), ver);
		st_ssd_loc_t loc;
		pthread_mutex_lock(stripe(o, id));
		assert_int_equal(st_ssd_append(s, key_of(id), pl, &loc), ST_OK);
		if (o->loc[id] != ST_SSD_NOLOC)
			st_ssd_release(s, o->loc[id]);
		o->loc[id] = loc;
		o->ver[id] = ver;
		pthread_mutex_unlock(stripe(o, id));
	}
}

/* The end of a test: every key of o reads back, close returns close_rc,
 * the owner and the directory base (then its name) go. */
static void check_close_remove(st_ssd_t *s, struct owner *o, int close_rc, char *base)
{
	assert_int_equal(check_all(s, o), 0);
	assert_int_equal(st_ssd_close(s), close_rc);
	owner_fini(o);
	rm_tree(base);
	free(base);
}

/* ---- 1. round trip ---- */

struct rt {
	uint32_t n;
	uint64_t *keys;
	st_ssd_loc_t *locs;
	uint8_t *pl;
	uint64_t recovered, bad;
};

static int cmp_key_idx(const void *a, const void *b, void *arg)
{
	const struct rt *t = arg;
	uint64_t x = t->keys[*(const uint32_t *)a], y = t->keys[*(const uint32_t *)b];
	return (x > y) - (x < y);
}

static uint32_t *rt_sorted;

static void rt_recovered(void *arg, uint64_t key, st_ssd_loc_t loc)
{
	struct rt *t = arg;
	size_t lo = 0, hi = t->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t->keys[rt_sorted[mid]] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == t->n || t->keys[rt_sorted[lo]] != key || t->locs[rt_sorted[lo]] != loc)
		t->bad++;
	t->recovered++;
}

/* Reads the records idx[0..m) and compares them with what was appended. */
static void rt_read(st_ssd_t *s, const struct rt *t, const uint32_t *idx, uint32_t m)
{
	uint64_t *keys = malloc(m * sizeof *keys);
	st_ssd_loc_t *locs = malloc(m * sizeof *locs);
	uint8_t *buf = malloc((size_t)m * P);
	void **dst = malloc(m * sizeof *dst);
	for (uint32_t i = 0; i < m; i++) {
		keys[i] = t->keys[idx[i]];
		locs[i] = t->locs[idx[i]];
		dst[i] = buf + (size_t)i * P;
	}
	assert_int_equal(st_ssd_read(s, m, keys, locs, dst), ST_OK);
	for (uint32_t i = 0; i < m; i++)
		assert_memory_equal(dst[i], t->pl + (size_t)idx[i] * P, P);
	free(keys);
	free(locs);
	free(buf);
	free(dst);
}

static void shuffle(uint32_t *a, uint32_t n, uint64_t *seed)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(rnd(seed) % i);
		uint32_t x = a[i - 1];
		a[i - 1] = a[j];
		a[j] = x;
	}
}

static void round_trip(int no_uring)
{
	char *base = make_tmpdir();
	char dir[4200];
	snprintf(dir, sizeof dir, "%s/store", base);
	enum { N = 12000 };
	struct rt t = { .n = N };
	t.keys = malloc(N * sizeof *t.keys);
	t.locs = malloc(N * sizeof *t.locs);
	t.pl = malloc((size_t)N * P);
	uint64_t seed = 42;
	for (uint32_t i = 0; i < N; i++) {
		/* 0 and ~0 are ordinary keys. */
		t.keys[i] = i == 0 ? 0 : i == 1 ? UINT64_MAX : rnd(&seed);
		fill_payload(t.pl + (size_t)i * P, t.keys[i], i);
	}
	st_ssd_opts_t o = { .dir = dir, .payload_bytes = P, .file_bytes = FILE_BYTES,
			    .fresh = 1, .no_uring = no_uring };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &o, NULL, NULL), ST_OK);
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(st_ssd_append(s, t.keys[i], t.pl + (size_t)i * P, &t.locs[i]),
				 ST_OK);
	st_ssd_stats_t st;
	st_ssd_stats(s, &st);
	assert_int_equal(st.record_bytes, REC);
	assert_int_equal(st.appended, N);
	if (no_uring)
		assert_int_equal(st.uring, 0);

	/* The last records are still in the active buffer. */
	uint32_t *idx = malloc(N * sizeof *idx);
	for (uint32_t i = 0; i < 300; i++)
		idx[i] = N - 1 - i;
	rt_read(s, &t, idx, 300);
	st_ssd_stats(s, &st);
	assert_true(st.buffer_hits >= 300);

	assert_int_equal(st_ssd_flush(s), ST_OK);
	st_ssd_stats(s, &st);
	assert_int_equal(st.files, (N + PER_FILE - 1) / PER_FILE);
	assert_int_equal(st.pending_files, 0);
	assert_int_equal(st.live_records, N);
	for (uint32_t i = 0; i < N; i++)
		idx[i] = i;
	shuffle(idx, N, &seed);
	for (uint32_t i = 0; i < N; i += 1000)
		rt_read(s, &t, idx + i, N - i < 1000 ? N - i : 1000);
	uint64_t hits = st.buffer_hits;
	st_ssd_stats(s, &st);
	assert_int_equal(st.buffer_hits, hits); /* all from disk now */
	assert_true(st.bytes_read > 0);
	assert_int_equal(st_ssd_close(s), ST_OK);

	/* Every read mode, on the recovered store. */
	rt_sorted = malloc(N * sizeof *rt_sorted);
	for (uint32_t i = 0; i < N; i++)
		rt_sorted[i] = i;
	qsort_r(rt_sorted, N, sizeof *rt_sorted, cmp_key_idx, &t);
	uint64_t sparse_bytes[3] = { 0 };
	const int modes[3] = { ST_SSD_READ_BLOCK, ST_SSD_READ_FILE, ST_SSD_READ_AUTO };
	for (int m = 0; m < 3; m++) {
		o.fresh = 0;
		o.read_mode = modes[m];
		t.recovered = t.bad = 0;
		assert_int_equal(st_ssd_open(&s, &o, rt_recovered, &t), ST_OK);
		assert_int_equal(t.recovered, N);
		assert_int_equal(t.bad, 0);
		/* Sparse: one record in 400, about two per file. */
		uint32_t ns = 0;
		for (uint32_t i = 0; i < N; i += 400)
			idx[ns++] = i;
		rt_read(s, &t, idx, ns);
		st_ssd_stats(s, &st);
		sparse_bytes[m] = st.bytes_read;
		for (uint32_t i = 0; i < N; i++)
			idx[i] = i;
		shuffle(idx, N, &seed);
		rt_read(s, &t, idx, N);
		uint64_t before = st.bytes_read;
		st_ssd_stats(s, &st);
		/* A read of everything reads every data byte once. */
		uint64_t files = (N + PER_FILE - 1) / PER_FILE;
		assert_true(st.bytes_read - before >= (uint64_t)N * REC);
		assert_true(st.bytes_read - before <= files * FILE_BYTES);
		assert_int_equal(st.read_records, ns + N);
		assert_int_equal(st_ssd_close(s), ST_OK);
	}
	/* BLOCK reads the blocks holding the records; FILE whole files; AUTO
	 * picks blocks for two records in a 15-block file. */
	uint64_t file_data = 0;
	for (uint32_t f = 0; f * PER_FILE < N; f++) {
		uint32_t recs = N - f * PER_FILE < PER_FILE ? N - f * PER_FILE : PER_FILE;
		file_data += ((uint64_t)recs * REC + 4095) / 4096 * 4096;
	}
	assert_int_equal(sparse_bytes[0], ((N + 399) / 400) * 4096);
	assert_int_equal(sparse_bytes[1], file_data); /* every file has a sparse record */
	assert_int_equal(sparse_bytes[2], sparse_bytes[0]);

	free(rt_sorted);
	free(idx);
	free(t.keys);
	free(t.locs);
	free(t.pl);
	rm_tree(base);
	free(base);
}

static void test_ssd_round_trip(void **state)
{
	(void)state;
	round_trip(0);
}

/* ---- 2. release + compaction ---- */

struct upd {
	st_ssd_t *s;
	struct owner *o;
	uint32_t id0, id1, updates;
	uint64_t seed;
	int err;
};

/* Overwrites random keys of [id0, id1): append the new version, release
 * the old location, both under the owner's lock (as the table does). */
static void *updater(void *p)
{
	struct upd *u = p;
	uint8_t pl[P];
	for (uint32_t k = 0; k < u->updates && !u->err; k++) {
		uint32_t id = u->id0 + (uint32_t)(rnd(&u->seed) % (u->id1 - u->id0));
		pthread_mutex_lock(stripe(u->o, id));
		uint64_t ver = u->o->ver[id] + 1;
		fill_payload(pl, key_of(id), ver);
		st_ssd_loc_t loc;
		int rc = st_ssd_append(u->s, key_of(id), pl, &loc);
		if (rc == ST_OK) {
			st_ssd_release(u->s, u->o->loc[id]);
			u->o->loc[id] = loc;
			u->o->ver[id] = ver;
		} else {
			u->err = rc;
		}
		pthread_mutex_unlock(stripe(u->o, id));
	}
	return NULL;
}

struct rdr {
	st_ssd_t *s;
	struct owner *o;
	uint64_t seed;
	int rounds, bad;
};

/* Reads 64 random keys of one stripe at a time, under that stripe's lock. */
static void *reader(void *p)
{
	struct rdr *r = p;
	uint32_t ids[64];
	for (int k = 0; k < r->rounds; k++) {
		uint32_t st = (uint32_t)(rnd(&r->seed) % NSTRIPE);
		for (int i = 0; i < 64; i++)
			ids[i] = (uint32_t)(rnd(&r->seed) % (r->o->n / NSTRIPE)) * NSTRIPE + st;
		r->bad += check_ids_locked(r->s, r->o, ids, 64, &r->o->mu[st]);
	}
	return NULL;
}

static void test_ssd_release_and_compaction(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	enum { K = 3000, UPDATES = 15000 };
	struct owner o;
	owner_init(&o, K);
	st_ssd_opts_t opts = { .dir = base, .payload_bytes = P, .file_bytes = FILE_BYTES,
			       .fresh = 1, .relocate = owner_relocate, .arg = &o,
			       .compact_min_bytes = 4 * FILE_BYTES };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &opts, NULL, NULL), ST_OK);
	owner_write(s, &o, 0, K, 1);   /* first version of every key */
	/* Two updaters on disjoint halves and two readers, while the
	 * background compactor merges behind them. */
	struct upd u[2] = { { s, &o, 0, K / 2, UPDATES, 7, 0 },
			    { s, &o, K / 2, K, UPDATES, 8, 0 } };
	struct rdr r[2] = { { s, &o, 9, 200, 0 }, { s, &o, 10, 200, 0 } };
	pthread_t tid[4];
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_create(&tid[i], NULL, updater, &u[i]), 0);
		assert_int_equal(pthread_create(&tid[2 + i], NULL, reader, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(tid[i], NULL);
	assert_int_equal(u[0].err, 0);
	assert_int_equal(u[1].err, 0);
	assert_int_equal(r[0].bad, 0);
	assert_int_equal(r[1].bad, 0);
	assert_int_equal(o.bad, 0);

	/* The background compactor was woken by the releases; wait for its
	 * first pass (a condition, not a timing: 30 s is a hang guard). */
	st_ssd_stats_t st;
	assert_int_equal(st_ssd_flush(s), ST_OK);
	for (int i = 0; i < 30000; i++) {
		st_ssd_stats(s, &st);
		if (st.compactions > 0)
			break;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	assert_true(st.compactions > 0);
	assert_true(o.relocated > 0);

	int rc = st_ssd_compact_now(s);
	assert_true(rc >= 0);
	st_ssd_stats(s, &st);
	/* One live record per key; files bounded by 2x live (Appendix E)
	 * plus one file of slack. */
	assert_int_equal(st.live_records, K);
	assert_int_equal(st.pending_files, 0);
	assert_int_equal(st.draining_files, 0);
	assert_true(st.disk_bytes <= 2 * st.live_records * REC + FILE_BYTES);
	assert_true(st.compact_seconds > 0);
	assert_int_equal(check_all(s, &o), 0);
	/* Nothing left to merge: a second pass removes no file. */
	assert_int_equal(st_ssd_compact_now(s), 0);
	assert_int_equal(st_ssd_close(s), ST_OK);

	/* Recovery finds exactly the latest versions. */
	struct owner o2;
	owner_init(&o2, K);
	memcpy(o2.ver, o.ver, K * sizeof *o.ver);
	opts.fresh = 0;
	opts.arg = &o2;
	assert_int_equal(st_ssd_open(&s, &opts, owner_recovered, &o2), ST_OK);
	assert_int_equal(o2.recovered, K);
	assert_int_equal(o2.bad, 0);
	assert_int_equal(check_all(s, &o2), 0);
	st_ssd_stats(s, &st);
	assert_int_equal(st.live_records, K);
	assert_int_equal(st_ssd_close(s), ST_OK);
	owner_fini(&o2);
	owner_fini(&o);
	rm_tree(base);
	free(base);
}

/* ---- close during a compaction pass ---- */

/* The relocate of the test below: the first call (the pass's first live
 * record) says so and waits until close has told the compactor to stop. */
struct gate {
	struct owner *o;
	sem_t in_pass, go;
	uint64_t calls;
};

static int gated_relocate(void *arg, uint64_t key, st_ssd_loc_t from, st_ssd_loc_t to)
{
	struct gate *g = arg;
	if (__atomic_fetch_add(&g->calls, 1, __ATOMIC_RELAXED) == 0) {
		sem_post(&g->in_pass);
		while (sem_wait(&g->go) != 0)
			;
	}
	return owner_relocate(g->o, key, from, to);
}

static void gate_open(void *arg)
{
	sem_post(&((struct gate *)arg)->go);
}

struct closer {
	st_ssd_t *s;
	int rc;
};

static void *close_main(void *p)
{
	struct closer *c = p;
	c->rc = st_ssd_close(c->s);
	return NULL;
}

/* st_ssd_close while the background compactor is in a pass over 8 hot
 * files stops the pass after the file it is copying: relocate runs for one
 * file's live records, not eight; nothing is lost (a reopen finds every
 * key's latest version). Eight files of version 1, then two thirds of
 * every file rewritten (each old file 2/3 stale: hot); compact_min_bytes
 * is 13 files, which only the flush's 14th file passes, so the first pass
 * starts with all eight hot. Ordered by semaphores, no sleeps. */
static void test_ssd_close_stops_compaction(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	enum { K = 8 * PER_FILE };
	struct owner o;
	owner_init(&o, K);
	struct gate g = { .o = &o };
	sem_init(&g.in_pass, 0, 0);
	sem_init(&g.go, 0, 0);
	st_ssd_opts_t opts = { .dir = base, .payload_bytes = P, .file_bytes = FILE_BYTES,
			       .fresh = 1, .relocate = gated_relocate, .arg = &g,
			       .compact_min_bytes = 13ull * FILE_BYTES };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &opts, NULL, NULL), ST_OK);
	owner_write(s, &o, 0, K, 1);
	for (uint32_t id = 0; id < K; id++)
		if (id % 3)
			owner_write(s, &o, id, id + 1, 2);
	assert_int_equal(st_ssd_flush(s), ST_OK);
	while (sem_wait(&g.in_pass) != 0)
		;
	st__ssd_close_hook = gate_open;
	st__ssd_close_hook_arg = &g;
	struct closer c = { s, -1 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, close_main, &c), 0);
	pthread_join(t, NULL);
	st__ssd_close_hook = NULL;
	assert_int_equal(c.rc, ST_OK);
	/* One source file's live records (a third of PER_FILE), not 8. */
	assert_true(g.calls >= 1);
	assert_true(g.calls <= PER_FILE);

	struct owner o2;
	owner_init(&o2, K);
	memcpy(o2.ver, o.ver, K * sizeof *o.ver);
	opts.fresh = 0;
	opts.relocate = owner_relocate;
	opts.arg = &o2;
	assert_int_equal(st_ssd_open(&s, &opts, owner_recovered, &o2), ST_OK);
	assert_int_equal(o2.recovered, K);
	assert_int_equal(o2.bad, 0);
	check_close_remove(s, &o2, ST_OK, base);
	owner_fini(&o);
	sem_destroy(&g.in_pass);
	sem_destroy(&g.go);
}

/* Copies the .sst files of dir into snap: what a crash at this moment
 * would leave on disk (every .sst was fsynced before its rename). */
static void snapshot(const char *dir, const char *snap)
{
	assert_true(mkdir(snap, 0755) == 0);
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *e;
	char buf[65536], a[4400], b[4400];
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 5 || strcmp(e->d_name + l - 4, ".sst"))
			continue;
		snprintf(a, sizeof a, "%s/%s", dir, e->d_name);
		snprintf(b, sizeof b, "%s/%s", snap, e->d_name);
		int in = open(a, O_RDONLY), out = open(b, O_CREAT | O_WRONLY, 0644);
		assert_true(in >= 0 && out >= 0);
		ssize_t k;
		while ((k = read(in, buf, sizeof buf)) > 0)
			assert_int_equal(write(out, buf, (size_t)k), k);
		close(in);
		close(out);
	}
	closedir(d);
}

/* Compaction must not delete a file whose rows were superseded by records
 * still in a write buffer: a crash then would recover rows older than the
 * superseded ones, or none. The background compactor merges a file whose
 * newer versions are all unwritten; a copy of the directory taken then
 * (a crash) must still recover every key. */
static void test_ssd_compaction_waits_for_durability(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	char dir[4200], snap[4200];
	snprintf(dir, sizeof dir, "%s/store", base);
	snprintf(snap, sizeof snap, "%s/crash", base);
	enum { K = 2 * PER_FILE, NEW = PER_FILE * 6 / 10 };
	struct owner o;
	owner_init(&o, K);
	st_ssd_opts_t opts = { .dir = dir, .payload_bytes = P, .file_bytes = FILE_BYTES,
			       .fresh = 1, .relocate = owner_relocate, .arg = &o,
			       .compact_ratio = 1.0, .compact_min_bytes = 1 };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &opts, NULL, NULL), ST_OK);
	owner_write(s, &o, 0, K, 1);
	assert_int_equal(st_ssd_flush(s), ST_OK);
	/* New versions of 60% of the first file's keys: less than a file, so
	 * they stay in the active buffer. */
	owner_write(s, &o, 0, NEW, 2);
	st_ssd_stats_t st;
	for (int i = 0; i < 30000; i++) { /* hang guard, not a timing */
		st_ssd_stats(s, &st);
		if (st.compactions > 0)
			break;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	assert_int_equal(st.compactions, 1);
	assert_int_equal(st.pending_files, 1);
	snapshot(dir, snap);
	/* Until the new versions are written, the merged file stays. */
	char first[4400];
	snprintf(first, sizeof first, "%s/%08u.sst", dir, 1);
	assert_int_equal(access(first, F_OK), 0);
	assert_int_equal(st_ssd_flush(s), ST_OK);
	assert_int_equal(access(first, F_OK), -1);
	assert_int_equal(check_all(s, &o), 0);
	assert_int_equal(st_ssd_close(s), ST_OK);

	/* The crash copy recovers every key, at version 1 or 2. */
	struct owner o2;
	owner_init(&o2, K);
	st_ssd_opts_t o2pts = { .dir = snap, .payload_bytes = P, .file_bytes = FILE_BYTES,
				.relocate = owner_relocate, .arg = &o2 };
	assert_int_equal(st_ssd_open(&s, &o2pts, owner_recovered, &o2), ST_OK);
	assert_int_equal(o2.recovered, K);
	for (uint32_t id = 0; id < K; id++)
		o2.ver[id] = 1; /* the unwritten version 2 is lost, version 1 not */
	assert_int_equal(check_all(s, &o2), 0);
	assert_int_equal(st_ssd_close(s), ST_OK);
	owner_fini(&o2);
	owner_fini(&o);
	rm_tree(base);
	free(base);
}

/* The table loads a cold row by taking the key out of its map under the
 * shard lock, then reading the location without the lock, then releasing
 * it. Compaction in between finds the key gone (relocate says 0), but the
 * record is not released yet: its file must stay readable until the
 * release arrives, and go after it. */
static void test_ssd_compaction_keeps_unreleased_records(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	enum { K = 2 * PER_FILE, NEW = PER_FILE * 6 / 10, LOADED = PER_FILE - 1 };
	struct owner o;
	owner_init(&o, K);
	st_ssd_opts_t opts = { .dir = base, .payload_bytes = P, .file_bytes = FILE_BYTES,
			       .fresh = 1, .relocate = owner_relocate, .arg = &o };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &opts, NULL, NULL), ST_OK);
	uint8_t pl[P], got[P];
	owner_write(s, &o, 0, K, 1);
	owner_write(s, &o, 0, NEW, 2);
	assert_int_equal(st_ssd_flush(s), ST_OK);
	/* The "load" of LOADED starts: out of the map, not released yet. */
	st_ssd_loc_t held = o.loc[LOADED];
	assert_int_equal((uint32_t)(held >> 32), 1);
	o.loc[LOADED] = ST_SSD_NOLOC;
	/* File 1 is 60% stale and merged, but it cannot go yet. */
	assert_int_equal(st_ssd_compact_now(s), 0);
	st_ssd_stats_t st;
	st_ssd_stats(s, &st);
	assert_int_equal(st.draining_files, 1);
	char first[4400];
	snprintf(first, sizeof first, "%s/%08u.sst", base, 1);
	assert_int_equal(access(first, F_OK), 0);
	uint64_t key = key_of(LOADED);
	void *dst = got;
	assert_int_equal(st_ssd_read(s, 1, &key, &held, &dst), ST_OK);
	fill_payload(pl, key, 1);
	assert_memory_equal(got, pl, P);
	/* The load ends: the release lets the file go. */
	st_ssd_release(s, held);
	assert_int_equal(st_ssd_flush(s), ST_OK);
	assert_int_equal(access(first, F_OK), -1);
	st_ssd_stats(s, &st);
	assert_int_equal(st.compactions, 1);
	assert_int_equal(st.draining_files, 0);
	assert_int_equal(st.live_records, K - 1);
	check_close_remove(s, &o, ST_OK, base);
}

/* ---- 3. corruption ---- */

static void test_ssd_corruption(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	enum { K = 2000 };
	struct owner o;
	owner_init(&o, K);
	st_ssd_opts_t opts = { .dir = base, .payload_bytes = P, .file_bytes = FILE_BYTES,
			       .fresh = 1, .relocate = owner_relocate, .arg = &o };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &opts, NULL, NULL), ST_OK);
	owner_write(s, &o, 0, K, 1);
	assert_int_equal(st_ssd_flush(s), ST_OK);
	uint8_t pl[P];

	/* Flip one payload byte of a record in the middle of the first file. */
	const uint32_t victim = 100;
	st_ssd_loc_t vloc = o.loc[victim];
	uint64_t off = 4096 + (uint64_t)(uint32_t)vloc * REC + 16 + 5;
	char path[4200], want[4400];
	snprintf(path, sizeof path, "%s/%08u.sst", base, (uint32_t)(vloc >> 32));
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	uint8_t b;
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
	assert_int_equal(fsync(fd), 0);
	close(fd);
	snprintf(want, sizeof want, "%s: corrupt record at offset %llu (key %llx)", path,
		 (unsigned long long)(off - 16 - 5), (unsigned long long)key_of(victim));

	/* A live read: ST_ECORRUPT, message with file and offset, the dst of
	 * the bad record untouched, the others delivered. Once through a
	 * sparse read (blocks) and once reading everything (whole files). */
	for (int pass = 0; pass < 2; pass++) {
		uint32_t n = pass == 0 ? 3 : K;
		uint32_t *ids = malloc(n * sizeof *ids);
		for (uint32_t i = 0; i < n; i++)
			ids[i] = pass == 0 ? victim - 1 + i : i;
		uint64_t *keys = malloc(n * sizeof *keys);
		st_ssd_loc_t *locs = malloc(n * sizeof *locs);
		uint8_t *buf = malloc((size_t)n * P);
		void **dst = malloc(n * sizeof *dst);
		memset(buf, 0xee, (size_t)n * P);
		for (uint32_t i = 0; i < n; i++) {
			keys[i] = key_of(ids[i]);
			locs[i] = o.loc[ids[i]];
			dst[i] = buf + (size_t)i * P;
		}
		struct cap c;
		cap_begin(&c, base);
		int rc = st_ssd_read(s, n, keys, locs, dst);
		char *log = cap_end(&c);
		assert_int_equal(rc, ST_ECORRUPT);
		assert_non_null(strstr(log, want));
		free(log);
		for (uint32_t i = 0; i < n; i++) {
			if (ids[i] == victim) {
				for (int j = 0; j < P; j++)
					assert_int_equal(((uint8_t *)dst[i])[j], 0xee);
			} else {
				fill_payload(pl, keys[i], 1);
				assert_memory_equal(dst[i], pl, P);
			}
		}
		free(ids);
		free(keys);
		free(locs);
		free(buf);
		free(dst);
	}
	assert_int_equal(st_ssd_close(s), ST_OK);

	/* Recovery logs the record with file and offset and skips it. */
	struct owner o2;
	owner_init(&o2, K);
	opts.fresh = 0;
	opts.arg = &o2;
	struct cap c;
	cap_begin(&c, base);
	int rc = st_ssd_open(&s, &opts, owner_recovered, &o2);
	char *log = cap_end(&c);
	assert_int_equal(rc, ST_OK);
	snprintf(want, sizeof want, "%s: corrupt record at offset %llu", path,
		 (unsigned long long)(off - 16 - 5));
	assert_non_null(strstr(log, want));
	free(log);
	assert_int_equal(o2.recovered, K - 1);
	assert_int_equal(o2.loc[victim], ST_SSD_NOLOC);
	assert_int_equal(o2.bad, 0);
	memcpy(o2.ver, o.ver, K * sizeof *o.ver);
	assert_int_equal(check_all(s, &o2), 0);
	st_ssd_stats_t st;
	st_ssd_stats(s, &st);
	assert_int_equal(st.live_records, K - 1);
	assert_int_equal(st.stale_records, 1);
	assert_int_equal(st_ssd_close(s), ST_OK);
	owner_fini(&o2);
	owner_fini(&o);
	rm_tree(base);
	free(base);
}

/* ---- 4. fallback ---- */

static void test_ssd_fallback_no_uring(void **state)
{
	(void)state;
	round_trip(1);
}

static void test_ssd_fallback_env(void **state)
{
	(void)state;
	setenv("STRATA_NO_URING", "1", 1);
	char *base = make_tmpdir();
	st_ssd_opts_t o = { .dir = base, .payload_bytes = P, .fresh = 1 };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &o, NULL, NULL), ST_OK);
	st_ssd_stats_t st;
	st_ssd_stats(s, &st);
	assert_int_equal(st.uring, 0);
	assert_int_equal(st_ssd_close(s), ST_OK);
	rm_tree(base);
	free(base);
	/* The whole round trip with the variable set (no_uring = 0). */
	round_trip(0);
	unsetenv("STRATA_NO_URING");
}

/* io_uring refused by the kernel (a seccomp filter answering EPERM, as
 * container runtimes do): the store falls back, says so once, and works.
 * In a child process, because a seccomp filter cannot be removed. */
static void test_ssd_fallback_seccomp_eperm(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	struct cap c;
	cap_begin(&c, base);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sock_filter f[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog prog = { sizeof f / sizeof f[0], f };
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
			_exit(77);
		st_ssd_opts_t o = { .dir = base, .payload_bytes = P, .file_bytes = FILE_BYTES,
				    .fresh = 1 };
		st_ssd_t *s;
		if (st_ssd_open(&s, &o, NULL, NULL) != ST_OK)
			_exit(2);
		uint8_t pl[P], got[P];
		st_ssd_loc_t locs[2000];
		for (uint32_t i = 0; i < 2000; i++) {
			fill_payload(pl, key_of(i), 1);
			if (st_ssd_append(s, key_of(i), pl, &locs[i]) != ST_OK)
				_exit(3);
		}
		if (st_ssd_flush(s) != ST_OK)
			_exit(4);
		for (uint32_t i = 0; i < 2000; i++) {
			uint64_t key = key_of(i);
			void *dst = got;
			fill_payload(pl, key, 1);
			if (st_ssd_read(s, 1, &key, &locs[i], &dst) != ST_OK || memcmp(pl, got, P))
				_exit(5);
		}
		st_ssd_stats_t st;
		st_ssd_stats(s, &st);
		_exit(st.uring == 0 && st_ssd_close(s) == ST_OK ? 0 : 6);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	char *log = cap_end(&c);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77) {
		free(log);
		rm_tree(base);
		free(base);
		skip();
	}
	assert_int_equal(WEXITSTATUS(status), 0);
	/* Once per process, with the reason. */
	const char *msg = "io: io_uring_queue_init(32): Operation not permitted; "
			  "falling back to pread/pwrite";
	const char *w = strstr(log, msg);
	assert_non_null(w);
	assert_null(strstr(w + strlen(msg), "falling back"));
	free(log);
	rm_tree(base);
	free(base);
}

/* ---- 5. budget and failing writes ---- */

static void test_ssd_budget_enospc(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	enum { MAXN = 200000 };
	uint64_t budget = 6 * FILE_BYTES;
	st_ssd_opts_t opts = { .dir = base, .payload_bytes = P, .file_bytes = FILE_BYTES,
			       .fresh = 1, .budget_bytes = budget };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &opts, NULL, NULL), ST_OK);
	struct owner o;
	owner_init(&o, MAXN);
	uint8_t pl[P];
	int rc = ST_OK;
	uint32_t n = 0;
	struct cap c;
	cap_begin(&c, base);
	for (; n < MAXN; n++) {
		fill_payload(pl, key_of(n), 1);
		rc = st_ssd_append(s, key_of(n), pl, &o.loc[n]);
		if (rc != ST_OK)
			break;
		o.ver[n] = 1;
	}
	char *log = cap_end(&c);
	assert_int_equal(rc, ST_ENOSPC);
	assert_non_null(strstr(log, "over the budget of 393216 bytes"));
	assert_non_null(strstr(log, base));
	free(log);
	assert_int_equal(o.loc[n], ST_SSD_NOLOC); /* the failed append gave nothing */
	assert_true(n >= 6 * PER_FILE);
	/* Sticky. */
	assert_int_equal(st_ssd_append(s, key_of(n), pl, &o.loc[n]), ST_ENOSPC);
	assert_int_equal(st_ssd_flush(s), ST_ENOSPC);
	st_ssd_stats_t st;
	st_ssd_stats(s, &st);
	assert_true(st.disk_bytes <= budget);
	assert_true(st.pending_files >= 1); /* rows kept in memory */
	/* Everything appended before is readable, from disk or memory. */
	o.n = n;
	check_close_remove(s, &o, ST_ENOSPC, base);
}

/* With releases and compaction a budget of a few times the live bytes
 * holds any number of updates. */
static void test_ssd_budget_with_compaction(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	enum { K = 1000 };
	struct owner o;
	owner_init(&o, K);
	st_ssd_opts_t opts = { .dir = base, .payload_bytes = P, .file_bytes = FILE_BYTES,
			       .fresh = 1, .budget_bytes = 16 * FILE_BYTES,
			       .relocate = owner_relocate, .arg = &o,
			       .compact_min_bytes = 4 * FILE_BYTES };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &opts, NULL, NULL), ST_OK);
	for (int chunk = 0; chunk < 40; chunk++) {
		struct upd u = { s, &o, 0, K, K, (uint64_t)chunk + 100, 0 };
		updater(&u);
		assert_int_equal(u.err, 0);
		assert_true(st_ssd_compact_now(s) >= 0);
	}
	st_ssd_stats_t st;
	st_ssd_stats(s, &st);
	assert_true(st.bytes_written > 2 * opts.budget_bytes);
	assert_true(st.disk_bytes <= opts.budget_bytes);
	check_close_remove(s, &o, ST_OK, base);
}

/* A write that fails (here: the file size limit, EFBIG, which binds root
 * too; and, when not root, a directory made read-only after opening):
 * sticky error, one message naming the file, every row still readable. */
static void write_failure(int how)
{
	char *base = make_tmpdir();
	char dir[4200];
	snprintf(dir, sizeof dir, "%s/store", base);
	enum { K = 5000 };
	struct owner o;
	owner_init(&o, K);
	st_ssd_opts_t opts = { .dir = dir, .payload_bytes = P, .file_bytes = FILE_BYTES,
			       .fresh = 1 };
	st_ssd_t *s;
	assert_int_equal(st_ssd_open(&s, &opts, NULL, NULL), ST_OK);
	uint8_t pl[P];
	/* Two files reach the disk before the trouble starts. */
	uint32_t n = 0;
	for (; n < 2 * PER_FILE; n++) {
		o.ver[n] = 1;
		fill_payload(pl, key_of(n), 1);
		assert_int_equal(st_ssd_append(s, key_of(n), pl, &o.loc[n]), ST_OK);
	}
	assert_int_equal(st_ssd_flush(s), ST_OK);
	struct rlimit old;
	void (*old_sig)(int) = SIG_DFL;
	if (how == 0) {
		/* Files up to half a store file: every write fails. */
		old_sig = signal(SIGXFSZ, SIG_IGN);
		getrlimit(RLIMIT_FSIZE, &old);
		struct rlimit lim = { FILE_BYTES / 2, old.rlim_max };
		assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	} else {
		assert_int_equal(chmod(dir, 0500), 0);
	}
	struct cap c;
	cap_begin(&c, base);
	int rc = ST_OK;
	for (; n < K; n++) {
		fill_payload(pl, key_of(n), 1);
		rc = st_ssd_append(s, key_of(n), pl, &o.loc[n]);
		if (rc != ST_OK)
			break;
		o.ver[n] = 1;
	}
	if (rc == ST_OK)
		rc = st_ssd_flush(s);
	if (how == 0) {
		setrlimit(RLIMIT_FSIZE, &old);
		signal(SIGXFSZ, old_sig);
	} else {
		chmod(dir, 0700);
	}
	char *log = cap_end(&c);
	int want = how == 0 ? -EFBIG : -EACCES;
	assert_int_equal(rc, want);
	char msg[4400];
	snprintf(msg, sizeof msg, "%s/%08u.tmp: %s — the SSD tier stops accepting rows; rows "
		 "already stored remain readable", dir, 3, st_strerror(want));
	assert_non_null(strstr(log, msg));
	/* Logged once. */
	assert_null(strstr(strstr(log, msg) + strlen(msg), "stops accepting rows"));
	free(log);
	assert_int_equal(st_ssd_append(s, key_of(0), pl, &o.loc[K - 1]), want);
	assert_int_equal(st_ssd_flush(s), want);
	/* No .tmp left behind; all rows readable. */
	char tmp[4400];
	snprintf(tmp, sizeof tmp, "%s/%08u.tmp", dir, 3);
	assert_int_equal(access(tmp, F_OK), -1);
	o.n = n;
	assert_int_equal(check_all(s, &o), 0);
	st_ssd_stats_t st;
	st_ssd_stats(s, &st);
	assert_true(st.pending_files >= 1);
	assert_int_equal(st_ssd_close(s), want);
	owner_fini(&o);
	rm_tree(base);
	free(base);
}

static void test_ssd_write_failure_efbig(void **state)
{
	(void)state;
	write_failure(0);
}

static void test_ssd_write_failure_readonly_dir(void **state)
{
	(void)state;
	if (geteuid() == 0) {
		/* root writes into a 0500 directory anyway. */
		fprintf(stderr, "test_ssd: running as root, chmod cannot make the "
			"directory read-only; skipped (the EFBIG test covers the path)\n");
		skip();
	}
	write_failure(1);
}

/* ---- options and paths ---- */

static void test_ssd_bad_opts_and_paths(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	st_ssd_t *s = (st_ssd_t *)1;
	st_ssd_opts_t o = { .dir = base, .payload_bytes = 6, .fresh = 1 };
	assert_int_equal(st_ssd_open(&s, &o, NULL, NULL), ST_EINVAL);
	assert_null(s);
	o.payload_bytes = 8;
	o.read_mode = 7;
	assert_int_equal(st_ssd_open(&s, &o, NULL, NULL), ST_EINVAL);
	o.read_mode = 0;
	o.fresh = 0; /* recovery needs the callback */
	assert_int_equal(st_ssd_open(&s, &o, NULL, NULL), ST_EINVAL);
	/* Not a directory. */
	char file[4200];
	snprintf(file, sizeof file, "%s/plain", base);
	close(open(file, O_CREAT | O_WRONLY, 0644));
	o.dir = file;
	o.fresh = 1;
	assert_int_equal(st_ssd_open(&s, &o, NULL, NULL), ST_EIO);
	/* Missing parent. */
	snprintf(file, sizeof file, "%s/a/b", base);
	assert_int_equal(st_ssd_open(&s, &o, NULL, NULL), ST_EIO);
	/* A store of another payload size. */
	o.dir = base;
	assert_int_equal(st_ssd_open(&s, &o, NULL, NULL), ST_OK);
	assert_string_equal(st_ssd_dir(s), base);
	st_ssd_loc_t loc;
	uint8_t pl[8] = { 0 };
	assert_int_equal(st_ssd_append(s, 1, pl, &loc), ST_OK);
	assert_int_equal(st_ssd_close(s), ST_OK);
	struct owner ow;
	owner_init(&ow, 4);
	o.payload_bytes = 12;
	o.fresh = 0;
	assert_int_equal(st_ssd_open(&s, &o, owner_recovered, &ow), ST_EINVAL);
	owner_fini(&ow);
	assert_int_equal(st_ssd_close(NULL), ST_OK);
	rm_tree(base);
	free(base);
}

/* ---- one store per directory ---- */

static int count_sst(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		n += l > 4 && !strcmp(e->d_name + l - 4, ".sst");
	}
	closedir(d);
	return n;
}

/* A second store on a directory in use is refused with ST_EBUSY, from this
 * process or another, naming the holder's pid and removing nothing (a
 * second job opening "fresh" used to delete the first one's files); the
 * directory is free again after close, after its holder is killed, and a
 * remove_on_close store takes its directory with it. */
static void test_ssd_lock_one_store_per_dir(void **state)
{
	(void)state;
	char *base = make_tmpdir();
	char dir[4200];
	snprintf(dir, sizeof dir, "%s/store", base);
	st_ssd_opts_t o = { .dir = dir, .payload_bytes = P, .file_bytes = FILE_BYTES,
			    .fresh = 1, .no_uring = 1 };
	st_ssd_t *s1, *s2 = (st_ssd_t *)1;
	assert_int_equal(st_ssd_open(&s1, &o, NULL, NULL), ST_OK);
	uint8_t pl[P], back[P];
	st_ssd_loc_t loc;
	fill_payload(pl, key_of(7), 1);
	assert_int_equal(st_ssd_append(s1, key_of(7), pl, &loc), ST_OK);
	assert_int_equal(st_ssd_flush(s1), ST_OK);
	assert_int_equal(count_sst(dir), 1);

	/* The same process, fresh: refused before the wipe. */
	struct cap c;
	cap_begin(&c, base);
	int rc = st_ssd_open(&s2, &o, NULL, NULL);
	char *msg = cap_end(&c);
	assert_int_equal(rc, ST_EBUSY);
	assert_null(s2);
	char want[9000];
	snprintf(want, sizeof want, "%s: the SSD store directory is in use by another store "
		 "(process %ld holds %s/LOCK)", dir, (long)getpid(), dir);
	assert_non_null(strstr(msg, want));
	free(msg);
	assert_int_equal(count_sst(dir), 1);
	uint64_t k7 = key_of(7);
	void *dst[1] = { back };
	assert_int_equal(st_ssd_read(s1, 1, &k7, &loc, dst), ST_OK);
	assert_memory_equal(pl, back, P);

	/* Another process. */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		st_ssd_t *x;
		_exit(st_ssd_open(&x, &o, NULL, NULL) == ST_EBUSY && !x ? 0 : 1);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(count_sst(dir), 1);

	/* Free after close: the record is recovered. */
	assert_int_equal(st_ssd_close(s1), ST_OK);
	struct owner ow;
	owner_init(&ow, 16);
	o.fresh = 0;
	assert_int_equal(st_ssd_open(&s2, &o, owner_recovered, &ow), ST_OK);
	assert_int_equal(ow.recovered, 1);
	assert_int_equal(st_ssd_close(s2), ST_OK);
	owner_fini(&ow);

	/* A holder killed with SIGKILL (no close) frees the directory. */
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		st_ssd_t *x;
		o.fresh = 1;
		char ok = st_ssd_open(&x, &o, NULL, NULL) == ST_OK ? 'y' : 'n';
		if (write(p[1], &ok, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	char ok = 0;
	assert_int_equal(read(p[0], &ok, 1), 1);
	assert_int_equal(ok, 'y');
	o.fresh = 1;
	assert_int_equal(st_ssd_open(&s2, &o, NULL, NULL), ST_EBUSY);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	close(p[0]);
	close(p[1]);

	/* remove_on_close: files, LOCK and the directory go; the next open
	 * creates them again. */
	o.remove_on_close = 1;
	assert_int_equal(st_ssd_open(&s2, &o, NULL, NULL), ST_OK);
	assert_int_equal(st_ssd_append(s2, key_of(7), pl, &loc), ST_OK);
	assert_int_equal(st_ssd_flush(s2), ST_OK);
	assert_int_equal(count_sst(dir), 1);
	assert_int_equal(st_ssd_close(s2), ST_OK);
	struct stat sb;
	assert_int_not_equal(stat(dir, &sb), 0);
	assert_int_equal(st_ssd_open(&s2, &o, NULL, NULL), ST_OK);
	assert_int_equal(st_ssd_close(s2), ST_OK);
	assert_int_not_equal(stat(dir, &sb), 0);
	rm_tree(base);
	free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ssd_round_trip),
		cmocka_unit_test(test_ssd_release_and_compaction),
		cmocka_unit_test(test_ssd_compaction_waits_for_durability),
		cmocka_unit_test(test_ssd_compaction_keeps_unreleased_records),
		cmocka_unit_test(test_ssd_corruption),
		cmocka_unit_test(test_ssd_fallback_no_uring),
		cmocka_unit_test(test_ssd_fallback_env),
		cmocka_unit_test(test_ssd_fallback_seccomp_eperm),
		cmocka_unit_test(test_ssd_budget_enospc),
		cmocka_unit_test(test_ssd_budget_with_compaction),
		cmocka_unit_test(test_ssd_write_failure_efbig),
		cmocka_unit_test(test_ssd_write_failure_readonly_dir),
		cmocka_unit_test(test_ssd_bad_opts_and_paths),
		cmocka_unit_test(test_ssd_lock_one_store_per_dir),
		cmocka_unit_test(test_ssd_close_stops_compaction),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
