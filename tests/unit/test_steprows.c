/*
 * test_steprows.c — step reads issued ahead (dist.prefetch;
 * ops/dist/steprows.c through the remote row source's step_submit /
 * step_wait), on two ranks forked from this process over a real network:
 *
 *  - reads of four minibatches issued ahead (three of them while another
 *    is in flight) give, one wait at a time in submit order, exactly the
 *    rows and "gone" flags that reads made right before each minibatch
 *    (depth 0, read_step) give when nothing is pushed meanwhile; the
 *    counters say 4 reads went to the other rank, 3 of them ahead;
 *  - a read misses a push to another rank's key sent after it was
 *    submitted and sees one sent before (the owner answers a rank's
 *    requests and pushes in the order they came): the staleness a
 *    prefetch of depth d adds is d minibatches of this worker's own
 *    updates, no more, no less; keys this rank owns are read at the wait
 *    and see every push before it;
 *  - a cancel drops the reads in flight, and the next read gets its own
 *    answer, not theirs.
 *
 * Rank 1 only serves (its service thread) until rank 0 is done. Each
 * forked rank checks with CHECK (exit status 3 and a message), as in
 * test_net.c; the parent fails a rank that does not finish in 240 s. The
 * cases skip when the build has no UCX.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
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
#include "runtime/net/net.h"
#include "st_config.h"
#include "skip_util.h"

enum { DIM = 4, NKEYS = 400, MB = 100, NMB = 4 };

#define CHECK(c)                                                                   \
	do {                                                                       \
		if (!(c)) {                                                        \
			fprintf(stderr, "rank: %s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #c);                                     \
			_exit(3);                                                  \
		}                                                                  \
	} while (0)

static const uint8_t zeros[NKEYS + NMB];   /* every key in table 0 */

/* One rank's stack: its shard (a local source), the parameter service and
 * the remote source over both. Owners step rows with sgd, lr 0.5. */
typedef struct rank {
	st_optim_t opt;
	st_rowsrc_t *local, *src;
	st_dist_t *d;
	st_rowsrc_clock_t clock;
} rank_t;

static void rank_open(rank_t *r, st_net_t *net)
{
	memset(r, 0, sizeof *r);
	st_optim_cfg_t oc = { .name = "sgd", .lr = 0.5 };
	CHECK(st_optim_init(&r->opt, &oc) == ST_OK);
	st_table_opts_t t = { .dim = DIM, .seed = 7, .init_scale = 0.1f, .n_shards = 4 };
	int slots = 1;
	st_rowsrc_local_cfg_t lc = { .n_tables = 1, .tables = &t, .slots = &slots,
				     .batch_size = NKEYS };
	CHECK(st_rowsrc_local_create(&r->local, &lc) == ST_OK);
	st_dist_cfg_t dc = { .net = net, .n_tables = 1, .n_workers = 1,
			     .params = { .sparse_opt = &r->opt, .dense_opt = &r->opt } };
	dc.tables[0] = st_rowsrc_local_table(r->local, 0);
	dc.dim[0] = DIM;
	CHECK(st_dist_create(&r->d, &dc) == ST_OK);
	r->clock.lag = -1;
	st_rowsrc_remote_cfg_t rc = { .dist = r->d, .shard = r->local, .n_workers = 1,
				      .stride = DIM, .clock = &r->clock };
	CHECK(st_rowsrc_remote_create(&r->src, &rc) == ST_OK);
}

static void rank_close(rank_t *r, st_net_t *net)
{
	/* Nobody leaves while the other may still read from it. */
	CHECK(st_net_barrier(net) == ST_OK);
	st_rowsrc_destroy(r->src);
	st_dist_destroy(r->d);
	st_rowsrc_destroy(r->local);
}

/* A train batch of keys 1..NKEYS, resolved (its rows created at their
 * owners), then an eval-free copy whose uniq the reads name. */
static st_batch_t *train_batch(rank_t *r)
{
	st_batch_t *b;
	CHECK(st_batch_create(&b, 1, 0, 1, 1) == ST_OK);
	b->uniq = malloc(sizeof(uint64_t) * NKEYS);
	for (int i = 0; i < NKEYS; i++)
		b->uniq[i] = 1 + (uint64_t)i;
	b->n_uniq = NKEYS;
	b->rows = calloc(NKEYS, sizeof(float *));
	CHECK(st_rowsrc_resolve(r->src, b, zeros, 0, NULL, NULL) == ST_OK);
	return b;
}

/* Minibatch m's keys: every NMB-th key from m, so each names keys of both
 * owners; plus key NKEYS + 1 + m, which no batch created (gone). The
 * reads name them by unique index into b->uniq (b has room for them). */
static uint32_t mb_idx(uint32_t m, uint32_t *idx)
{
	uint32_t n = 0;
	for (uint32_t u = m; u < NKEYS; u += NMB)
		idx[n++] = u;
	idx[n++] = NKEYS + m;
	return n;
}

/* ---- reads ahead give the rows reads made now give ----------------------------- */

static void body_same_rows(rank_t *r, st_net_t *net)
{
	if (st_net_rank(net) != 0) {
		CHECK(st_net_barrier(net) == ST_OK);
		return;
	}
	st_batch_t *b = train_batch(r);
	/* Room for the gone keys NKEYS+1 .. NKEYS+NMB at indices NKEYS.. */
	uint64_t *uq = realloc(b->uniq, sizeof(uint64_t) * (NKEYS + NMB));
	CHECK(uq);
	b->uniq = uq;
	for (int m = 0; m < NMB; m++)
		b->uniq[NKEYS + m] = NKEYS + 1 + (uint64_t)m;
	b->n_uniq = NKEYS + NMB;
	int remote = 0;
	for (int i = 0; i < NKEYS; i++)
		remote += st_dist_owner(r->d, b->uniq[i]) != 0;
	CHECK(remote > 0 && remote < NKEYS);

	/* Depth 0: each minibatch read right before it (u-indexed). */
	static float ref[NMB][(NKEYS + NMB) * DIM];
	static uint8_t refok[NMB][NKEYS + NMB];
	uint32_t idx[NMB][MB + 1], n[NMB];
	for (uint32_t m = 0; m < NMB; m++) {
		n[m] = mb_idx(m, idx[m]);
		memset(refok[m], 9, sizeof refok[m]);
		CHECK(st_rowsrc_read_step(r->src, 0, b, zeros, idx[m], n[m], ref[m], DIM,
					  refok[m]) == ST_OK);
	}
	st_dist_stats_t s0, s1;
	st_dist_stats(r->d, &s0);
	CHECK(s0.step_reads == NMB && s0.step_reads_ahead == 0 && s0.step_waits == NMB);

	/* Ahead: all four issued before the first wait (depth 3). */
	CHECK(st_rowsrc_step_ahead_max(r->src) >= NMB - 1);
	static float rows[NMB][(MB + 1) * DIM];
	static uint8_t ok[NMB][MB + 1];
	for (uint32_t m = 0; m < NMB; m++) {
		memset(ok[m], 9, sizeof ok[m]);
		CHECK(st_rowsrc_step_submit(r->src, 0, b, zeros, idx[m], n[m], rows[m], DIM,
					    ok[m]) == ST_OK);
	}
	st_dist_stats(r->d, &s1);
	CHECK(s1.step_reads - s0.step_reads == NMB);
	CHECK(s1.step_reads_ahead - s0.step_reads_ahead == NMB - 1);
	CHECK(s1.round_trips - s0.round_trips == NMB);
	for (uint32_t m = 0; m < NMB; m++) {
		CHECK(st_rowsrc_step_wait(r->src, 0) == ST_OK);
		for (uint32_t q = 0; q < n[m]; q++) {
			const uint32_t u = idx[m][q];
			CHECK(ok[m][q] == refok[m][u]);
			CHECK(ok[m][q] == (u < NKEYS));
			if (ok[m][q])
				CHECK(!memcmp(rows[m] + q * DIM, ref[m] + (size_t)u * DIM,
					      sizeof(float) * DIM));
		}
	}
	st_batch_destroy(b);
	CHECK(st_net_barrier(net) == ST_OK);
}

/* ---- what a read issued ahead misses ------------------------------------------- */

static void body_misses_later_pushes(rank_t *r, st_net_t *net)
{
	if (st_net_rank(net) != 0) {
		CHECK(st_net_barrier(net) == ST_OK);
		return;
	}
	st_batch_t *b = train_batch(r);
	/* x: a key rank 1 owns; y: one this rank owns. */
	uint32_t ux = NKEYS, uy = NKEYS;
	for (uint32_t u = 0; u < NKEYS && (ux == NKEYS || uy == NKEYS); u++) {
		if (st_dist_owner(r->d, b->uniq[u]) == 1 && ux == NKEYS)
			ux = u;
		if (st_dist_owner(r->d, b->uniq[u]) == 0 && uy == NKEYS)
			uy = u;
	}
	CHECK(ux < NKEYS && uy < NKEYS);
	const uint32_t idx[2] = { ux, uy };
	float x0[DIM], y0[DIM], a[2 * DIM], c[2 * DIM], now[2 * NKEYS * DIM];
	uint8_t oka[2], okc[2], oknow[NKEYS];
	CHECK(st_rowsrc_read_step(r->src, 0, b, zeros, idx, 2, now, DIM, oknow) == ST_OK);
	memcpy(x0, now + (size_t)ux * DIM, sizeof x0);
	memcpy(y0, now + (size_t)uy * DIM, sizeof y0);

	/* Read A issued; then a push of x and y (applied on arrival); then
	 * read C issued; then both collected. */
	const float g[2 * DIM] = { 1, 2, 3, 4, 1, 2, 3, 4 };
	const uint64_t keys[2] = { b->uniq[ux], b->uniq[uy] };
	CHECK(st_rowsrc_step_submit(r->src, 0, b, zeros, idx, 2, a, DIM, oka) == ST_OK);
	CHECK(st_dist_push(r->d, 0, 0, 1, keys, zeros, g, DIM, 2) == ST_OK);
	CHECK(st_rowsrc_step_submit(r->src, 0, b, zeros, idx, 2, c, DIM, okc) == ST_OK);
	CHECK(st_rowsrc_step_wait(r->src, 0) == ST_OK);
	CHECK(st_rowsrc_step_wait(r->src, 0) == ST_OK);
	CHECK(oka[0] && oka[1] && okc[0] && okc[1]);
	for (int j = 0; j < DIM; j++) {
		const float x1 = x0[j] - 0.5f * g[j], y1 = y0[j] - 0.5f * g[DIM + j];
		CHECK(a[j] == x0[j]);             /* x: pushed after A's submit */
		CHECK(c[j] == x1);                /* ... and before C's */
		CHECK(a[DIM + j] == y1);          /* y is local: read at the wait */
		CHECK(c[DIM + j] == y1);
	}

	/* A cancel drops the reads in flight (their answers are drained):
	 * the read after it gets its own answer. */
	float junk[2 * DIM];
	uint8_t okj[2];
	for (int i = 0; i < 3; i++)
		CHECK(st_rowsrc_step_submit(r->src, 0, b, zeros, idx, 2, junk, DIM, okj) == ST_OK);
	st_rowsrc_step_cancel(r->src, 0);
	const uint32_t one[1] = { ux };
	memset(oknow, 9, sizeof oknow);
	CHECK(st_rowsrc_read_step(r->src, 0, b, zeros, one, 1, now, DIM, oknow) == ST_OK);
	CHECK(oknow[ux] == 1);
	CHECK(!memcmp(now + (size_t)ux * DIM, c, sizeof(float) * DIM));
	st_batch_destroy(b);
	CHECK(st_net_barrier(net) == ST_OK);
}

/* ---- two forked ranks ---------------------------------------------------------- */

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

static void two_ranks(void (*body)(rank_t *, st_net_t *), const char *name)
{
	if (!ST_HAVE_UCX)
		TU_SKIP("step reads across ranks: this build has no UCX");
	char coord[64], token[64];
	free_port_coord(coord, sizeof coord);
	snprintf(token, sizeof token, "%s-%d", name, (int)getpid());
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
			rank_t rk;
			rank_open(&rk, net);
			body(&rk, net);
			rank_close(&rk, net);
			st_net_close(net);
			_exit(0);
		}
	}
	/* Deadline: a rank that hangs fails here, it does not hang the suite. */
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

static void test_steprows_ahead_gives_the_rows_of_reads_made_now(void **state)
{
	(void)state;
	two_ranks(body_same_rows, "steprows-same");
}

static void test_steprows_ahead_misses_only_later_pushes(void **state)
{
	(void)state;
	two_ranks(body_misses_later_pushes, "steprows-stale");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_steprows_ahead_gives_the_rows_of_reads_made_now),
		cmocka_unit_test(test_steprows_ahead_misses_only_later_pushes),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	return tu_exit(failed, sizeof tests / sizeof tests[0]);
}
