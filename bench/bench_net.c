/*
 * bench_net.c — throughput and latency of strata's own transport
 * (runtime/net) between processes on this machine; bench/net.sh runs it
 * beside ucx_perftest, the physical reference, and prints the ratios (see
 * docs/benchmarks.md "Transport").
 *
 *   bench_net -n P [--size BYTES] [--iters K] [--what p2p|allreduce|all|lat|bw]
 *             [--floats N] [--lat-iters K] [--timeout S]
 *   mpirun -np P ... bench_net --env [the same options but -n]
 *
 * --env: this process is one rank, started by a launcher; rank, size and
 * coordinator come from the environment as for `strata run`
 * (st_net_cfg_from_env: OMPI_COMM_WORLD_RANK / _SIZE under mpirun, with
 * STRATA_COORDINATOR and STRATA_TOKEN). That is how STRATA_NET_COLL=mpi
 * (the allreduce through MPI, coll_mpi.c) is measured: bench/coll_mpi.sh.
 *
 * Forks P ranks that meet, as in tests/unit/test_net.c, at a coordinator on
 * 127.0.0.1 at a free port with a fresh job token (st_net_cfg_t filled the
 * way STRATA_RANK / STRATA_WORLD_SIZE / STRATA_COORDINATOR / STRATA_TOKEN
 * would). Then, with every rank between barriers:
 *
 *   p2p = lat + bw (ranks 2.. only join the barriers):
 *     latency: 8-byte ping-pong between ranks 0 and 1 on one channel,
 *       round trip / 2, mean and median over --lat-iters (10000) rounds
 *       after 200 unmeasured ones;
 *     bandwidth: rank 0 st_net_sends K messages of SIZE bytes to rank 1 on
 *       one channel (each call returns once its buffer may be reused),
 *       rank 1 st_net_recvs them as they come (giving each buffer back
 *       with st_net_release, as a receiver that keeps up would) and then
 *       sends one 8-byte ack; GB/s = K x SIZE / (time from the first send to the ack) on
 *       rank 0. Sizes: --size, else 4 KiB, 64 KiB, 1 MiB, 8 MiB. K: --iters,
 *       else 512 MiB / SIZE within [20, 20000]. A tenth of K (at least 2)
 *       goes first unmeasured, and the first message is checked byte for
 *       byte once.
 *   allreduce: st_net_allreduce_f32 on N floats (--floats, else 1Ki, 256Ki,
 *     2Mi = 8 MB), checked once against the exact sum, then K calls (--iters,
 *     else 1000 / 100 / 20 by size) after 3 unmeasured ones. The time of a
 *     call is the slowest rank's (allgathered); algorithm bandwidth 4N / t,
 *     bus bandwidth 2(P-1)/P x 4N / t as NCCL defines it for a ring.
 *
 * Rank 0 prints the table on stdout; the other ranks print only errors.
 * Rows start with a keyword (lat, p2p, allreduce) so scripts can pick them.
 *
 * Failure: each rank runs under alarm(--timeout + 10) and is killed with
 * its parent (PR_SET_PDEATHSIG). The parent waits for every rank until
 * --timeout (default 120 s) or 10 s after the first rank failed (the others
 * see ST_EPEER within about a second), whichever comes first, kills what is
 * left, and exits 1 if any rank failed or was killed, else 0. Usage errors
 * exit 2.
 *
 * Threads: one per rank process (plus the transport's own).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/net/net.h"

#define MAX_P 64
#define MAX_SIZES 8
#define MAX_WINDOW 64
#define CH_BW 1        /* p2p bandwidth payloads, rank 0 -> 1 */
#define CH_ACK 2       /* the ack that ends a bandwidth round, 1 -> 0 */
#define CH_PING 3      /* latency ping-pong, both ways */
#define RECV_WAIT_S 30.0
#define LAT_WARMUP 200
#define AR_WARMUP 3

typedef struct opts {
	int P;
	size_t sizes[MAX_SIZES];
	int n_sizes;
	size_t floats[MAX_SIZES];
	int n_floats;
	long iters;        /* 0: by size */
	long lat_iters;
	int window;        /* p2p sends in flight (st_net_send_submit); 1: st_net_send */
	int do_lat, do_bw, do_ar;
	double timeout_s;
} opts_t;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A rank that cannot go on: says why and exits 3 (the parent reports it). */
static void die_rank(int rank, const char *what, int rc)
{
	if (rc < 0)
		fprintf(stderr, "bench_net: rank %d: %s: %s\n", rank, what, st_strerror(rc));
	else
		fprintf(stderr, "bench_net: rank %d: %s\n", rank, what);
	_exit(3);
}

#define NET_OK(rank, call)                                     \
	do {                                                   \
		int rc_ = (call);                              \
		if (rc_ < 0)                                   \
			die_rank((rank), #call, rc_);          \
	} while (0)

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 131u ^ (i >> 11));
}

/* ---- p2p --------------------------------------------------------------------------- */

static void p2p_latency(st_net_t *net, long iters)
{
	int r = st_net_rank(net);
	NET_OK(r, st_net_barrier(net));
	if (r > 1) {
		NET_OK(r, st_net_barrier(net));
		return;
	}
	double *rt = malloc((size_t)iters * sizeof *rt);
	if (!rt)
		die_rank(r, "malloc", ST_ENOMEM);
	uint64_t ping = 0;
	for (long i = -LAT_WARMUP; i < iters; i++) {
		void *msg;
		size_t len;
		double t0 = now_s();
		if (r == 0) {
			NET_OK(r, st_net_send(net, 1, CH_PING, &ping, sizeof ping));
			NET_OK(r, st_net_recv(net, 1, CH_PING, &msg, &len, NULL, RECV_WAIT_S));
		} else {
			NET_OK(r, st_net_recv(net, 0, CH_PING, &msg, &len, NULL, RECV_WAIT_S));
			NET_OK(r, st_net_send(net, 0, CH_PING, msg, len));
		}
		if (i >= 0)
			rt[i] = now_s() - t0;
		if (len != sizeof ping)
			die_rank(r, "ping of the wrong length", 0);
		free(msg);
		ping++;
	}
	if (r == 0) {
		double sum = 0;
		for (long i = 0; i < iters; i++)
			sum += rt[i];
		qsort(rt, (size_t)iters, sizeof *rt, cmp_double);
		printf("%-10s %10zu %8ld %9.3f %9s %9.2f %9.2f\n", "lat", sizeof ping, iters, sum,
		       "-", sum / (double)iters / 2 * 1e6, rt[iters / 2] / 2 * 1e6);
		fflush(stdout);
	}
	free(rt);
	NET_OK(r, st_net_barrier(net));
}

/* One round: rank 0 sends k messages of size bytes, rank 1 takes them and
 * acks. Returns rank 0's elapsed seconds (0 elsewhere). */
static double p2p_round(st_net_t *net, const uint8_t *buf, size_t size, long k, int window,
			int check)
{
	int r = st_net_rank(net);
	void *msg;
	size_t len;
	st_net_send_req_t *q[MAX_WINDOW] = { 0 };
	NET_OK(r, st_net_barrier(net));
	double t0 = now_s(), dt = 0;
	if (r == 0) {
		for (long i = 0; i < k; i++) {
			if (window <= 1) {
				NET_OK(r, st_net_send(net, 1, CH_BW, buf, size));
				continue;
			}
			/* window sends in flight: the oldest is waited for
			 * before its slot takes the next one */
			st_net_send_req_t **slot = &q[i % window];
			NET_OK(r, st_net_send_wait(net, *slot));
			NET_OK(r, st_net_send_submit(net, 1, CH_BW, buf, size, slot));
		}
		for (int w = 0; w < window && window > 1; w++)
			NET_OK(r, st_net_send_wait(net, q[w]));
		NET_OK(r, st_net_recv(net, 1, CH_ACK, &msg, &len, NULL, RECV_WAIT_S));
		dt = now_s() - t0;
		free(msg);
	} else if (r == 1) {
		uint64_t got = 0;
		for (long i = 0; i < k; i++) {
			NET_OK(r, st_net_recv(net, 0, CH_BW, &msg, &len, NULL, RECV_WAIT_S));
			if (len != size)
				die_rank(r, "a message of the wrong length", 0);
			if (check && i == 0)
				for (size_t j = 0; j < size; j++)
					if (((uint8_t *)msg)[j] != pattern(j))
						die_rank(r, "a message with the wrong bytes", 0);
			st_net_release(net, msg);
			got += len;
		}
		NET_OK(r, st_net_send(net, 0, CH_ACK, &got, sizeof got));
	}
	NET_OK(r, st_net_barrier(net));
	return dt;
}

static void p2p_bandwidth(st_net_t *net, size_t size, long iters, int window)
{
	int r = st_net_rank(net);
	long k = iters;
	if (!k) {
		k = (long)((512ul << 20) / size);
		k = k < 20 ? 20 : k > 20000 ? 20000 : k;
	}
	uint8_t *buf = malloc(size);
	if (!buf)
		die_rank(r, "malloc", ST_ENOMEM);
	for (size_t j = 0; j < size; j++)
		buf[j] = pattern(j);
	p2p_round(net, buf, size, k / 10 > 2 ? k / 10 : 2, window, 1);
	double dt = p2p_round(net, buf, size, k, window, 0);
	if (r == 0) {
		double bytes = (double)size * (double)k;
		printf("%-10s %10zu %8ld %9.3f %9.3f %9.1f %9s\n", "p2p", size, k, dt,
		       bytes / dt * 1e-9, dt / (double)k * 1e6, "-");
		fflush(stdout);
	}
	free(buf);
}

/* ---- allreduce ---------------------------------------------------------------------- */

static void allreduce(st_net_t *net, size_t n, long iters)
{
	int r = st_net_rank(net), P = st_net_size(net);
	long k = iters ? iters : n <= 4096 ? 1000 : n <= (512u << 10) ? 100 : 20;
	float *buf = malloc(n * sizeof *buf);
	double *times = malloc((size_t)P * sizeof *times);
	if (!buf || !times)
		die_rank(r, "malloc", ST_ENOMEM);
	/* Once against the exact sum (small integers add exactly in any order). */
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)(i % 13) + (float)r;
	NET_OK(r, st_net_allreduce_f32(net, buf, n));
	for (size_t i = 0; i < n; i++)
		if (buf[i] != (float)P * (float)(i % 13) + (float)(P * (P - 1) / 2))
			die_rank(r, "allreduce gave a wrong sum", 0);
	/* Zeros from here: repeated sums of anything else would overflow, and
	 * the adds cost the same (no denormals). */
	memset(buf, 0, n * sizeof *buf);
	for (int i = 0; i < AR_WARMUP; i++)
		NET_OK(r, st_net_allreduce_f32(net, buf, n));
	NET_OK(r, st_net_barrier(net));
	double t0 = now_s();
	for (long i = 0; i < k; i++)
		NET_OK(r, st_net_allreduce_f32(net, buf, n));
	double dt = now_s() - t0;
	NET_OK(r, st_net_allgather(net, &dt, sizeof dt, times));
	if (r == 0) {
		double t = 0;
		for (int q = 0; q < P; q++)
			t = times[q] > t ? times[q] : t;
		double per = t / (double)k, alg = 4.0 * (double)n / per * 1e-9;
		printf("%-10s %10zu %8ld %9.3f %9.3f %9.3f %9.3f\n", "allreduce", n, k, t, per * 1e3,
		       alg, alg * 2.0 * (P - 1) / P);
		fflush(stdout);
	}
	free(times);
	free(buf);
}

/* ---- ranks and the parent ------------------------------------------------------------- */

static void print_header(int P, const char *coord)
{
	printf("bench_net: %d ranks, coordinator %s, UCX_TLS=%s, STRATA_NET_COLL=%s\n", P, coord,
	       getenv("UCX_TLS") ? getenv("UCX_TLS") : "(unset: UCX's choice)",
	       getenv("STRATA_NET_COLL") ? getenv("STRATA_NET_COLL") : "(unset: strata)");
	const char *ck = getenv("STRATA_NET_CHECKSUM");
	printf("every message carries a 32-byte frame, with an XXH3-64 of its payload (computed\n"
	       "by the sender, checked by the receiver's progress thread) %s, and arrives in\n"
	       "a malloc'd buffer that the receiver takes over.\n",
	       ck && !strcmp(ck, "all") ? "on every link (STRATA_NET_CHECKSUM=all)"
					: "where it crosses a network link (not on shared memory)");
}

/* One rank's run on cfg; exits. */
static void rank_run(const opts_t *o, const st_net_cfg_t *cfg);

static void rank_main(const opts_t *o, int rank, const char *coord, const char *token,
		      pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(4);
	st_net_cfg_t cfg = { .rank = rank, .size = o->P, .timeout_s = RECV_WAIT_S };
	snprintf(cfg.coordinator, sizeof cfg.coordinator, "%s", coord);
	snprintf(cfg.token, sizeof cfg.token, "%s", token);
	snprintf(cfg.source, sizeof cfg.source, "bench_net");
	rank_run(o, &cfg);
}

static void rank_run(const opts_t *o, const st_net_cfg_t *cfg)
{
	const int rank = cfg->rank;
	alarm((unsigned)o->timeout_s + 10);
	st_net_t *net;
	NET_OK(rank, st_net_open(&net, cfg));
	if (rank == 0)
		print_header(cfg->size, cfg->coordinator);
	if (o->do_lat || o->do_bw) {
		if (rank == 0) {
			printf("\np2p, rank 0 -> rank 1, one channel. lat: 8-byte ping-pong, us = round "
			       "trip / 2.\np2p: K st_net_send of SIZE bytes, then an 8-byte ack; "
			       "GB/s = K x SIZE / time.\n");
			printf("%-10s %10s %8s %9s %9s %9s %9s\n", "what", "bytes", "K", "total_s",
			       "GB/s", "us/msg", "median_us");
			fflush(stdout);
		}
		if (o->do_lat)
			p2p_latency(net, o->lat_iters);
		for (int i = 0; o->do_bw && i < o->n_sizes; i++)
			p2p_bandwidth(net, o->sizes[i], o->iters, o->window);
	}
	if (o->do_ar) {
		const char *coll = getenv("STRATA_NET_COLL");
		if (rank == 0 && coll && !strcmp(coll, "mpi"))
			printf("\nallreduce_f32 on %d ranks through MPI_Allreduce (STRATA_NET_COLL=mpi, "
			       "runtime/net/coll_mpi.c).\n", cfg->size);
		else if (rank == 0) {
			printf("\nallreduce_f32 on %d ranks. Deterministic: every element is summed in "
			       "rank order,\n((x0 + x1) + x2) + ..., by the one rank that owns its chunk. "
			       "Algorithm\n(runtime/net/coll.c): direct reduce-scatter (each rank sends "
			       "chunk c straight\nto rank c; rank c adds them in rank order), then direct "
			       "allgather (rank c\nsends its summed chunk to the P-1 others), in 1 MiB "
			       "segments, pipelined. Each\nrank sends 2(P-1)/P x 4N bytes, as a ring "
			       "does.\nms = the slowest rank's time per call; "
			       "algbw = 4N / time; busbw = algbw x 2(P-1)/P.\n", cfg->size);
		}
		if (rank == 0) {
			printf("%-10s %10s %8s %9s %9s %9s %9s\n", "what", "floats", "K", "total_s", "ms",
			       "algbw", "busbw");
			fflush(stdout);
		}
		for (int i = 0; i < o->n_floats; i++)
			allreduce(net, o->floats[i], o->iters);
	}
	NET_OK(rank, st_net_barrier(net));
	st_net_close(net);
	fflush(stdout);
	_exit(0);
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof a;
	int port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Waits for every rank until the deadline; kills the rest on a timeout.
 * Returns the number of ranks that failed. */
static int wait_ranks(const pid_t *pid, int P, double timeout_s)
{
	int left = P, failed = 0;
	int done[MAX_P] = { 0 };
	double deadline = now_s() + timeout_s;
	while (left > 0) {
		int st;
		pid_t w = waitpid(-1, &st, WNOHANG);
		if (w < 0 && errno != EINTR)
			break;
		for (int r = 0; w > 0 && r < P; r++) {
			if (pid[r] != w || done[r])
				continue;
			done[r] = 1;
			left--;
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
				continue;
			failed++;
			if (WIFEXITED(st))
				fprintf(stderr, "bench_net: rank %d exited with status %d\n", r,
					WEXITSTATUS(st));
			else
				fprintf(stderr, "bench_net: rank %d was killed by signal %d%s\n", r,
					WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (its own timeout)" : "");
			/* The others see ST_EPEER within about a second. */
			if (deadline > now_s() + 10)
				deadline = now_s() + 10;
		}
		if (w > 0)
			continue;
		if (now_s() > deadline) {
			for (int r = 0; r < P; r++)
				if (!done[r]) {
					fprintf(stderr, "bench_net: rank %d did not finish in time; "
						"killing it\n", r);
					kill(pid[r], SIGKILL);
					waitpid(pid[r], &st, 0);
					failed++;
				}
			break;
		}
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return failed;
}

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s -n P|--env [--size BYTES] [--iters K] [--what p2p|allreduce|all|lat|bw]\n"
		"       [--floats N] [--lat-iters K] [--window W] [--timeout S]\n"
		"P in 2..%d. Default: --what all, sizes 4 KiB, 64 KiB, 1 MiB, 8 MiB, floats 1Ki, "
		"256Ki, 2Mi;\np2p is lat (8-byte ping-pong) and bw (the sizes). BYTES and N take k and m "
		"suffixes (x 1024).\nW (1..%d, default 1): bw sends in flight (st_net_send_submit; 1: "
		"st_net_send).\n", argv0, MAX_P, MAX_WINDOW);
	exit(2);
}

static long parse_long(const char *s, const char *argv0)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 0);
	if (errno || end == s || v < 1)
		usage(argv0);
	/* k, m suffixes of 1024 for sizes */
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	if (*end)
		usage(argv0);
	return v;
}

int main(int argc, char **argv)
{
	opts_t o = { .lat_iters = 10000, .window = 1, .do_lat = 1, .do_bw = 1, .do_ar = 1,
		     .timeout_s = 120 };
	int from_env = 0;
	static const struct option longopts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "iters", required_argument, NULL, 'k' },
		{ "what", required_argument, NULL, 'w' },
		{ "floats", required_argument, NULL, 'f' },
		{ "lat-iters", required_argument, NULL, 'l' },
		{ "window", required_argument, NULL, 'W' },
		{ "timeout", required_argument, NULL, 't' },
		{ "env", no_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "n:", longopts, NULL)) != -1) {
		switch (c) {
		case 'n': o.P = (int)parse_long(optarg, argv[0]); break;
		case 's': o.sizes[0] = (size_t)parse_long(optarg, argv[0]), o.n_sizes = 1; break;
		case 'f': o.floats[0] = (size_t)parse_long(optarg, argv[0]), o.n_floats = 1; break;
		case 'k': o.iters = parse_long(optarg, argv[0]); break;
		case 'l': o.lat_iters = parse_long(optarg, argv[0]); break;
		case 'W':
			o.window = (int)parse_long(optarg, argv[0]);
			if (o.window < 1 || o.window > MAX_WINDOW)
				usage(argv[0]);
			break;
		case 't': o.timeout_s = (double)parse_long(optarg, argv[0]); break;
		case 'e': from_env = 1; break;
		case 'w':
			o.do_lat = !strcmp(optarg, "p2p") || !strcmp(optarg, "all") ||
				   !strcmp(optarg, "lat");
			o.do_bw = !strcmp(optarg, "p2p") || !strcmp(optarg, "all") ||
				  !strcmp(optarg, "bw");
			o.do_ar = !strcmp(optarg, "allreduce") || !strcmp(optarg, "all");
			if (!o.do_lat && !o.do_bw && !o.do_ar)
				usage(argv[0]);
			break;
		default: usage(argv[0]);
		}
	}
	if (optind != argc || (!from_env && (o.P < 2 || o.P > MAX_P)))
		usage(argv[0]);
	if (!o.n_sizes) {
		const size_t s[] = { 4u << 10, 64u << 10, 1u << 20, 8u << 20 };
		memcpy(o.sizes, s, sizeof s);
		o.n_sizes = 4;
	}
	if (!o.n_floats) {
		const size_t f[] = { 1u << 10, 256u << 10, 2u << 20 };
		memcpy(o.floats, f, sizeof f);
		o.n_floats = 3;
	}
	if (from_env) {   /* one rank of a launcher's (mpirun's) job */
		st_net_cfg_t cfg;
		int rc = st_net_cfg_from_env(&cfg, NULL);
		if (rc != 1) {
			fprintf(stderr, "bench_net --env: no distributed job in the environment "
				"(run it under mpirun -np P with STRATA_COORDINATOR set)\n");
			return 2;
		}
		cfg.timeout_s = RECV_WAIT_S;
		o.P = cfg.size;
		rank_run(&o, &cfg);
	}
	int port = free_port();
	if (port < 0) {
		fprintf(stderr, "bench_net: no free port on 127.0.0.1: %s\n", strerror(errno));
		return 1;
	}
	char coord[64], token[64];
	snprintf(coord, sizeof coord, "127.0.0.1:%d", port);
	snprintf(token, sizeof token, "bench-net-%d-%ld", (int)getpid(), (long)time(NULL));
	pid_t pid[MAX_P], self = getpid();
	int P = o.P;
	for (int r = 0; r < P; r++) {
		fflush(NULL);
		pid[r] = fork();
		if (pid[r] == 0)
			rank_main(&o, r, coord, token, self);
		if (pid[r] < 0) {
			fprintf(stderr, "bench_net: fork: %s\n", strerror(errno));
			for (int q = 0; q < r; q++)
				kill(pid[q], SIGKILL);
			wait_ranks(pid, r, 5);
			return 1;
		}
	}
	return wait_ranks(pid, P, o.timeout_s) ? 1 : 0;
}
