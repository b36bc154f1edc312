/* test_ssd_crash.c — the SSD tier survives SIGKILL at any moment: during
 * appends, during a file write, during compaction, during recovery's
 * successor run.
 *
 * A child process opens the store and runs rounds: round r overwrites the
 * keys drawn by RNG(seed, r) with version r (the payload holds key and r
 * and is a function of both), releases the superseded locations, calls
 * st_ssd_flush and then writes r to a pipe: the ack. Small files and a low
 * compaction floor keep the background compactor busy, so kills land in
 * compactions too. The parent reads a random number of acks, waits a
 * random 0-30 ms, kills the child with SIGKILL, reopens the store itself
 * and checks every key: the recovered version is the one the key had after
 * the last acked round A, or the one after round A+1 (the round the child
 * was in), and the payload is exactly f(key, version). A key with no
 * acked version may be absent. The next child continues in the same
 * directory from round A+1 (a redone round writes the same values), taking
 * its map from the recovered callback.
 *
 * ST_SSD_CRASH_SEED=<n> replays another sequence of kill points.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/store/ssd.h"

enum {
	K = 4000,          /* keys */
	U = 300,           /* updates per round */
	CYCLES = 40,       /* kill / recover cycles */
	P = 32,            /* payload: key, round, two check words */
	FILE_BYTES = 32 << 10,
};
#define NONE UINT64_MAX

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

#define KMUL UINT64_C(0x9e3779b97f4a7c15)
static uint64_t key_of(uint32_t id)
{
	return (uint64_t)id * KMUL + 1;
}

static uint32_t id_of(uint64_t key)
{
	uint64_t inv = KMUL;
	for (int i = 0; i < 6; i++)
		inv *= 2 - KMUL * inv;
	return (uint32_t)((key - 1) * inv);
}

static void payload(uint8_t *p, uint64_t key, uint64_t round)
{
	uint64_t s = key ^ (round << 20), w[4] = { key, round, rnd(&s), rnd(&s) };
	memcpy(p, w, P);
}

/* The ids round r overwrites (repeats allowed). */
static void round_ids(uint64_t r, uint32_t *ids)
{
	uint64_t s = UINT64_C(0x5eed) * 1000003 + r;
	for (int i = 0; i < U; i++)
		ids[i] = (uint32_t)(rnd(&s) % K);
}

struct owner {
	pthread_mutex_t mu;
	st_ssd_loc_t loc[K];
	int bad;
};

static int relocate(void *arg, uint64_t key, st_ssd_loc_t from, st_ssd_loc_t to)
{
	struct owner *o = arg;
	uint32_t id = id_of(key);
	if (id >= K)
		return 0;
	pthread_mutex_lock(&o->mu);
	int r = o->loc[id] == from;
	if (r)
		o->loc[id] = to;
	pthread_mutex_unlock(&o->mu);
	return r;
}

static void recovered(void *arg, uint64_t key, st_ssd_loc_t loc)
{
	struct owner *o = arg;
	uint32_t id = id_of(key);
	if (id >= K || o->loc[id] != ST_SSD_NOLOC) {
		o->bad++;
		return;
	}
	o->loc[id] = loc;
}

static st_ssd_opts_t opts_for(const char *dir, struct owner *o, int fresh)
{
	return (st_ssd_opts_t){ .dir = dir, .payload_bytes = P, .file_bytes = FILE_BYTES,
				.fresh = fresh, .relocate = relocate, .arg = o,
				.compact_min_bytes = 6 * FILE_BYTES };
}

static void owner_reset(struct owner *o)
{
	pthread_mutex_init(&o->mu, NULL);
	for (int i = 0; i < K; i++)
		o->loc[i] = ST_SSD_NOLOC;
	o->bad = 0;
}

/* The child: rounds from `start` until killed. Exit codes other than by
 * SIGKILL are failures: 2 open, 3 append, 4 flush, 5 recovery. */
static _Noreturn void child(const char *dir, int fresh, uint64_t start, int wfd)
{
	static struct owner o;
	owner_reset(&o);
	st_ssd_opts_t opts = opts_for(dir, &o, fresh);
	st_ssd_t *s;
	if (st_ssd_open(&s, &opts, fresh ? NULL : recovered, &o) != ST_OK)
		_exit(2);
	if (o.bad)
		_exit(5);
	uint32_t ids[U];
	uint8_t pl[P];
	for (uint64_t r = start;; r++) {
		round_ids(r, ids);
		for (int i = 0; i < U; i++) {
			uint64_t key = key_of(ids[i]);
			payload(pl, key, r);
			pthread_mutex_lock(&o.mu);
			st_ssd_loc_t loc;
			if (st_ssd_append(s, key, pl, &loc) != ST_OK)
				_exit(3);
			st_ssd_release(s, o.loc[ids[i]]);
			o.loc[ids[i]] = loc;
			pthread_mutex_unlock(&o.mu);
		}
		if (st_ssd_flush(s) != ST_OK)
			_exit(4);
		if (write(wfd, &r, sizeof r) != sizeof r)
			_exit(6);
	}
}

static int read_ack(int fd, uint64_t *r)
{
	size_t got = 0;
	while (got < sizeof *r) {
		ssize_t k = read(fd, (char *)r + got, sizeof *r - got);
		if (k <= 0)
			return 0;
		got += (size_t)k;
	}
	return 1;
}

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[4400];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

static void test_ssd_crash_kill_and_recover(void **state)
{
	(void)state;
	const char *t = getenv("TMPDIR");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/st-ssd-crash-XXXXXX", t && *t ? t : "/tmp");
	assert_non_null(mkdtemp(dir));
	const char *e = getenv("ST_SSD_CRASH_SEED");
	uint64_t seed = e ? strtoull(e, NULL, 10) : 1;
	fprintf(stderr, "test_ssd_crash: seed %llu, dir %s\n", (unsigned long long)seed, dir);

	/* lo[id]: the round of id's version after the last acked round
	 * (NONE: no version yet). */
	static uint64_t lo[K], hi[K];
	for (int i = 0; i < K; i++)
		lo[i] = NONE;
	int64_t acked = -1;
	uint32_t ids[U];
	static struct owner o;
	for (int cycle = 0; cycle < CYCLES; cycle++) {
		int pfd[2];
		assert_int_equal(pipe(pfd), 0);
		fflush(stderr);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			child(dir, cycle == 0, (uint64_t)(acked + 1), pfd[1]);
		}
		close(pfd[1]);
		int want = 1 + (int)(rnd(&seed) % 4);
		uint64_t r = 0;
		int64_t last = acked;
		for (int i = 0; i < want; i++) {
			if (!read_ack(pfd[0], &r))
				break;
			last = (int64_t)r;
		}
		struct timespec d = { 0, (long)(rnd(&seed) % 31) * 1000000L };
		nanosleep(&d, NULL);
		kill(pid, SIGKILL);
		int status;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
			fprintf(stderr, "test_ssd_crash: cycle %d: child ended with %s %d\n", cycle,
				WIFEXITED(status) ? "exit code" : "signal",
				WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			fail();
		}
		while (read_ack(pfd[0], &r))
			last = (int64_t)r;
		close(pfd[0]);
		assert_true(last > acked); /* each cycle acks at least one round */

		/* Expected window: versions after `last`, and after last + 1. */
		for (int64_t rr = acked + 1; rr <= last; rr++) {
			round_ids((uint64_t)rr, ids);
			for (int i = 0; i < U; i++)
				lo[ids[i]] = (uint64_t)rr;
		}
		acked = last;
		memcpy(hi, lo, sizeof lo);
		round_ids((uint64_t)acked + 1, ids);
		for (int i = 0; i < U; i++)
			hi[ids[i]] = (uint64_t)acked + 1;

		owner_reset(&o);
		st_ssd_opts_t opts = opts_for(dir, &o, 0);
		st_ssd_t *s;
		assert_int_equal(st_ssd_open(&s, &opts, recovered, &o), ST_OK);
		assert_int_equal(o.bad, 0);
		static uint64_t keys[K];
		static st_ssd_loc_t locs[K];
		static uint8_t buf[K][P];
		static void *dst[K];
		static uint32_t who[K];
		uint32_t n = 0;
		pthread_mutex_lock(&o.mu);
		for (uint32_t id = 0; id < K; id++) {
			if (o.loc[id] == ST_SSD_NOLOC) {
				/* Absent: only if no acked round wrote it. */
				if (lo[id] != NONE)
					fprintf(stderr, "cycle %d: key id %u lost (acked round %llu)\n",
						cycle, id, (unsigned long long)lo[id]);
				assert_true(lo[id] == NONE);
				continue;
			}
			keys[n] = key_of(id);
			locs[n] = o.loc[id];
			dst[n] = buf[n];
			who[n++] = id;
		}
		int rc = st_ssd_read(s, n, keys, locs, dst);
		pthread_mutex_unlock(&o.mu);
		assert_int_equal(rc, ST_OK);
		for (uint32_t i = 0; i < n; i++) {
			uint64_t w[2];
			memcpy(w, buf[i], 16);
			uint32_t id = who[i];
			uint8_t want_pl[P];
			payload(want_pl, keys[i], w[1]);
			if (w[0] != keys[i] || memcmp(want_pl, buf[i], P) ||
			    (w[1] != lo[id] && w[1] != hi[id])) {
				fprintf(stderr, "cycle %d: key id %u has round %llu, want %llu or "
					"%llu\n", cycle, id, (unsigned long long)w[1],
					(unsigned long long)lo[id], (unsigned long long)hi[id]);
				fail();
			}
		}
		assert_int_equal(st_ssd_close(s), ST_OK);
		pthread_mutex_destroy(&o.mu);
	}
	fprintf(stderr, "test_ssd_crash: %d cycles, %lld rounds acked\n", CYCLES,
		(long long)acked + 1);
	rm_tree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ssd_crash_kill_and_recover),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
