/*
 * test_net.c — the transport (runtime/net): configuration from launcher
 * variables and cluster files; then real jobs of 1, 2, 3 and 4 processes
 * forked from this one, meeting at a coordinator on 127.0.0.1 at a free
 * port: point-to-point order, self-sends, large messages, collectives
 * (allreduce bit-equal to a sequential rank-order sum on every rank), a
 * process with the wrong token, SIGKILL of a rank, SIGSTOP of a rank (a
 * stall, told by its missing heartbeats) against a rank that is only slow,
 * malformed frames.
 *
 * The forked ranks check with CHECK (exit status 3 and a message), not
 * cmocka: a cmocka failure in a child would jump back into the child's copy
 * of the test runner. The parent waits for the ranks with a deadline and
 * asserts their exit statuses. Ranks synchronize through pipes and
 * st_net_barrier, never sleeps (the slow rank's sleep is the behaviour
 * under test); the only time bounds asserted are the upper bound on
 * noticing a killed rank and the lower bound on a slow rank's barrier.
 *
 * Skips (77) the transport tests when the build has no UCX.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/err.h"
#include "runtime/net/net.h"
#include "runtime/net/net_internal.h"
#include "runtime/simd.h"
#include "st_config.h"

#define JOB_WAIT_S 240.0   /* a whole job, generous for a loaded 2-core sanitizer run */
#define RECV_WAIT_S 60.0

/* ---- configuration ------------------------------------------------------------- */

static const char *const all_vars[] = {
	"STRATA_RANK", "STRATA_WORLD_SIZE", "STRATA_COORDINATOR", "STRATA_TOKEN",
	"STRATA_CLUSTER", "STRATA_NET_TIMEOUT", "STRATA_LOCAL_RANK",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
	"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
};

static void clear_env(void)
{
	for (size_t i = 0; i < sizeof all_vars / sizeof *all_vars; i++)
		unsetenv(all_vars[i]);
}

static void test_net_cfg_not_distributed(void **state)
{
	(void)state;
	st_net_cfg_t cfg;
	clear_env();
	assert_int_equal(st_net_cfg_from_env(&cfg, NULL), 0);
	assert_int_equal(cfg.rank, 0);
	assert_int_equal(cfg.size, 1);
	setenv("STRATA_RANK", "0", 1);
	setenv("STRATA_WORLD_SIZE", "1", 1);
	assert_int_equal(st_net_cfg_from_env(&cfg, NULL), 0);
	assert_int_equal(cfg.size, 1);
	clear_env();
}

static void test_net_cfg_launchers(void **state)
{
	(void)state;
	static const char *const vars[][3] = {
		{ "STRATA_RANK", "STRATA_WORLD_SIZE", "STRATA_RANK" },
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK" },
		{ "PMI_RANK", "PMI_SIZE", "PMI_RANK" },
		{ "SLURM_PROCID", "SLURM_NTASKS", "SLURM_PROCID" },
	};
	for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
		clear_env();
		setenv(vars[i][0], "2", 1);
		setenv(vars[i][1], "3", 1);
		setenv("STRATA_COORDINATOR", "node0:29500", 1);
		setenv("STRATA_TOKEN", "s3cret", 1);
		st_net_cfg_t cfg;
		assert_int_equal(st_net_cfg_from_env(&cfg, NULL), 1);
		assert_int_equal(cfg.rank, 2);
		assert_int_equal(cfg.size, 3);
		assert_string_equal(cfg.coordinator, "node0:29500");
		assert_string_equal(cfg.token, "s3cret");
		assert_string_equal(cfg.source, vars[i][2]);
		assert_true(cfg.timeout_s == 60);
	}
	/* First match wins: STRATA_RANK over the launchers. */
	clear_env();
	setenv("STRATA_RANK", "1", 1);
	setenv("STRATA_WORLD_SIZE", "2", 1);
	setenv("OMPI_COMM_WORLD_RANK", "0", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
	setenv("STRATA_COORDINATOR", "[::1]:7000", 1);
	setenv("STRATA_NET_TIMEOUT", "2.5", 1);
	st_net_cfg_t cfg;
	assert_int_equal(st_net_cfg_from_env(&cfg, NULL), 1);
	assert_int_equal(cfg.rank, 1);
	assert_int_equal(cfg.size, 2);
	assert_true(cfg.timeout_s == 2.5);
	assert_string_equal(cfg.token, "");
	clear_env();
}

static void test_net_cfg_errors(void **state)
{
	(void)state;
	static const char *const bad[][6] = {
		/* rank >= size */
		{ "STRATA_RANK", "4", "STRATA_WORLD_SIZE", "4", "STRATA_COORDINATOR", "h:1" },
		/* no coordinator */
		{ "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", NULL, NULL },
		/* size unknown */
		{ "STRATA_RANK", "1", "STRATA_COORDINATOR", "h:1", NULL, NULL },
		/* not numbers */
		{ "PMI_RANK", "one", "PMI_SIZE", "2", "STRATA_COORDINATOR", "h:1" },
		{ "SLURM_PROCID", "0", "SLURM_NTASKS", "0", "STRATA_COORDINATOR", "h:1" },
		/* coordinator without a port */
		{ "STRATA_RANK", "0", "STRATA_WORLD_SIZE", "2", "STRATA_COORDINATOR", "node0" },
		{ "STRATA_RANK", "0", "STRATA_WORLD_SIZE", "2", "STRATA_COORDINATOR", "node0:99999" },
		/* a coordinator but no rank */
		{ "STRATA_COORDINATOR", "h:1", NULL, NULL, NULL, NULL },
		{ "STRATA_RANK", "0", "STRATA_WORLD_SIZE", "2", "STRATA_NET_TIMEOUT", "-1" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		clear_env();
		for (int k = 0; k < 6 && bad[i][k]; k += 2)
			setenv(bad[i][k], bad[i][k + 1], 1);
		st_net_cfg_t cfg;
		if (st_net_cfg_from_env(&cfg, NULL) != ST_EJOB)
			fail_msg("case %zu: expected ST_EJOB", i);
	}
	clear_env();
}

static char tmpdir[64];

static const char *write_file(const char *name, const char *text)
{
	static char path[128];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static void test_net_cfg_cluster_file(void **state)
{
	(void)state;
	char me[256] = "", text[700];
	gethostname(me, sizeof me - 1);
	st_net_cfg_t cfg;

	/* With a launcher's rank: the file gives coordinator, token, size. */
	clear_env();
	const char *path = write_file("c1.yaml", "hosts: [node0, node1]\nport: 29555\n"
				      "procs_per_host: 2\ntoken: \"abc\"\n");
	setenv("OMPI_COMM_WORLD_RANK", "3", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
	assert_int_equal(st_net_cfg_from_env(&cfg, path), 1);
	assert_int_equal(cfg.rank, 3);
	assert_int_equal(cfg.size, 4);
	assert_string_equal(cfg.coordinator, "node0:29555");
	assert_string_equal(cfg.token, "abc");
	/* STRATA_CLUSTER names the file; STRATA_COORDINATOR and STRATA_TOKEN win. */
	setenv("STRATA_CLUSTER", path, 1);
	setenv("STRATA_COORDINATOR", "10.0.0.1:1234", 1);
	setenv("STRATA_TOKEN", "xyz", 1);
	assert_int_equal(st_net_cfg_from_env(&cfg, NULL), 1);
	assert_string_equal(cfg.coordinator, "10.0.0.1:1234");
	assert_string_equal(cfg.token, "xyz");
	/* The launcher's size must match the file's. */
	setenv("OMPI_COMM_WORLD_SIZE", "5", 1);
	assert_int_equal(st_net_cfg_from_env(&cfg, NULL), ST_EJOB);

	/* Without a launcher: rank from this host's place and the local rank. */
	clear_env();
	snprintf(text, sizeof text, "hosts:\n  - elsewhere\n  - %s\nport: 4000\nprocs_per_host: 2\n", me);
	path = write_file("c2.yaml", text);
	assert_int_equal(st_net_cfg_from_env(&cfg, path), ST_EJOB);   /* which local rank? */
	setenv("STRATA_LOCAL_RANK", "1", 1);
	assert_int_equal(st_net_cfg_from_env(&cfg, path), 1);
	assert_int_equal(cfg.rank, 3);
	assert_int_equal(cfg.size, 4);
	assert_string_equal(cfg.coordinator, "elsewhere:4000");
	assert_non_null(strstr(cfg.source, "cluster file"));
	setenv("STRATA_LOCAL_RANK", "2", 1);   /* out of 0..1 */
	assert_int_equal(st_net_cfg_from_env(&cfg, path), ST_EJOB);
	clear_env();
	/* A host given as one of this machine's addresses. */
	path = write_file("c3.yaml", "hosts: [192.0.2.7, 127.0.0.1]\nport: 4000\n");
	assert_int_equal(st_net_cfg_from_env(&cfg, path), 1);
	assert_int_equal(cfg.rank, 1);
	assert_int_equal(cfg.size, 2);
	/* Not one of the hosts. */
	path = write_file("c4.yaml", "hosts: [192.0.2.7, 192.0.2.8]\nport: 4000\n");
	assert_int_equal(st_net_cfg_from_env(&cfg, path), ST_EJOB);

	static const char *const bad[] = {
		"hosts: [a, b]\n",                              /* no port */
		"port: 4000\n",                                 /* no hosts */
		"hosts: a\nport: 4000\n",                       /* hosts not a list */
		"hosts: [a]\nport: 70000\n",                    /* port out of range */
		"hosts: [a]\nport: 4000\nprocs_per_host: 0\n",
		"hosts: [a]\nport: 4000\nworkers: 2\n",         /* unknown key */
		"hosts: [a, b\nport: 4000\n",                   /* not YAML */
		"- a\n- b\n",                                   /* not a mapping */
	};
	setenv("STRATA_RANK", "0", 1);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		path = write_file("bad.yaml", bad[i]);
		if (st_net_cfg_from_env(&cfg, path) != ST_EJOB)
			fail_msg("bad cluster file %zu was accepted", i);
	}
	char missing[128];
	snprintf(missing, sizeof missing, "%s/absent.yaml", tmpdir);
	assert_int_equal(st_net_cfg_from_env(&cfg, missing), ST_EJOB);
	st_net_cluster_t cl;
	assert_int_equal(st_net_cluster_load(&cl, write_file("ok.yaml", "hosts: [x, y, z]\nport: 9\n")),
			 ST_OK);
	assert_int_equal(cl.n_hosts, 3);
	assert_int_equal(cl.procs_per_host, 1);
	assert_string_equal(cl.hosts[2], "z");
	st_net_cluster_fini(&cl);
	st_net_cluster_fini(&cl);
	clear_env();
}

/* Writes garbage over one 64-byte window of the stack below the caller, as
 * the calls between two sends do. */
static __attribute__((noinline)) void churn_stack(size_t window)
{
	volatile uint8_t junk[8192];
	for (size_t i = window * 64; i < window * 64 + 64 && i < sizeof junk; i++)
		junk[i] = (uint8_t)(i * 37 + 11);
}

static __attribute__((noinline)) void fill_frame(st__net_frame_t *f, const uint8_t *p, size_t n)
{
	st__net_frame_fill(f, 1, 0, 77, p, n / 3, p + n / 3, n - n / 3);
}

/* The frame hash's AVX2 loop (frame_avx2.c) gives libxxhash's bits: every
 * length to 600 (XXH3's short, mid and long paths), lengths around its
 * 1 KiB stripes and blocks and a 1 MiB payload, each split in two at
 * several points (header + payload), several seeds; and a frame filled by
 * one checks out with the other. */
static void test_net_frame_hash_avx2(void **state)
{
	(void)state;
	if (!st_simd_cpu_avx2())
		skip();   /* no AVX2 loop to compare: only the reference runs here */
	const size_t big = 1u << 20;
	uint8_t *p = malloc(big + 64);
	assert_non_null(p);
	for (size_t i = 0; i < big + 64; i++)
		p[i] = (uint8_t)(i * 2654435761u >> 13);
	const size_t lens[] = { 1023, 1024, 1025, 2047, 2048, 4096, 65535, 65536, 100003, 1u << 20 };
	const uint64_t seeds[] = { 0, 1, 0x9e3779b97f4a7c15ull };
	size_t checked = 0;
	for (size_t n = 0; n < 600 + sizeof lens / sizeof *lens; n++) {
		const size_t len = n < 600 ? n : lens[n - 600];
		const size_t cuts[] = { 0, len / 3, len > 40 ? 40 : len, len };
		for (size_t c = 0; c < 4; c++)
			for (size_t s = 0; s < 3; s++) {
				const uint8_t *a = p + 7, *b = p + 7 + cuts[c];   /* unaligned */
				uint64_t r = st__net_hash_ref(seeds[s], a, cuts[c], b, len - cuts[c]);
				uint64_t v = st__net_hash_avx2(seeds[s], a, cuts[c], b, len - cuts[c]);
				if (r != v)
					fail_msg("length %zu cut at %zu seed %llu: %016llx != %016llx", len,
						 cuts[c], (unsigned long long)seeds[s],
						 (unsigned long long)r, (unsigned long long)v);
				checked++;
			}
	}
	assert_int_equal(checked, (600 + sizeof lens / sizeof *lens) * 12);
	/* Filled with one loop, checked with the other, and corrupted. */
	for (int fill_ref = 0; fill_ref < 2; fill_ref++) {
		st_simd_set_ref(fill_ref);
		st__net_frame_t f;
		fill_frame(&f, p, big);
		st_simd_set_ref(!fill_ref);
		assert_null(st__net_frame_check(&f, 1, 77, 0, p, big));
		p[big / 2] ^= 4;
		assert_string_equal(st__net_frame_check(&f, 1, 77, 0, p, big), "checksum mismatch");
		p[big / 2] ^= 4;
	}
	st_simd_set_ref(0);
	free(p);
}

/* An unhashed frame (shared memory) checks out without a hash; every
 * other check still applies, and a hash in it or an unknown flag is
 * refused. */
static void test_net_frame_unhashed(void **state)
{
	(void)state;
	uint8_t p[100];
	for (size_t i = 0; i < sizeof p; i++)
		p[i] = (uint8_t)(i * 7);
	st__net_frame_t f;
	st__net_frame_fill_unhashed(&f, 1, 0, 77, sizeof p);
	assert_int_equal(f.hash, 0);
	assert_int_equal(f.version, ST__NET_FRAME_VERSION | ST__NET_FRAME_UNHASHED);
	assert_null(st__net_frame_check(&f, 1, 77, 0, p, sizeof p));
	p[3] ^= 1;   /* not hashed: a changed payload is not seen */
	assert_null(st__net_frame_check(&f, 1, 77, 0, p, sizeof p));
	assert_string_equal(st__net_frame_check(&f, 1, 77, 0, p, sizeof p - 1),
			    "payload length differs from the frame's (truncated)");
	assert_non_null(st__net_frame_check(&f, 1, 78, 0, p, sizeof p));
	assert_string_equal(st__net_frame_check(&f, 1, 77, 2, p, sizeof p),
			    "frame addressed to another rank");
	f.hash = 1;
	assert_string_equal(st__net_frame_check(&f, 1, 77, 0, p, sizeof p),
			    "unhashed frame with a hash");
	f.hash = 0;
	f.version |= 0x200;
	assert_string_equal(st__net_frame_check(&f, 1, 77, 0, p, sizeof p),
			    "unknown frame version");
	/* The hashed fill gives the bits it always gave: version 1 and the hash. */
	st__net_frame_fill(&f, 1, 0, 77, p, sizeof p, NULL, 0);
	assert_int_equal(f.version, ST__NET_FRAME_VERSION);
	assert_true(f.hash == XXH3_64bits_withSeed(p, sizeof p, st__net_frame_seed(&f)));
}

/* A frame filled on a stack that still holds an earlier fill's state (same
 * seed) checks out: libxxhash 0.8.1 kept a stale secret there. */
static void test_net_frame_repeat(void **state)
{
	(void)state;
	const size_t n = 5000;
	uint8_t *p = malloc(n);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131);
	for (size_t w = 0; w < 8192 / 64; w++) {
		st__net_frame_t f;
		fill_frame(&f, p, n);
		churn_stack(w);
		fill_frame(&f, p, n);
		if (st__net_frame_check(&f, 1, 77, 0, p, n))
			fail_msg("the frame filled after overwriting stack window %zu is wrong", w);
	}
	st__net_frame_t f;
	fill_frame(&f, p, n);
	p[n - 1] ^= 1;
	assert_string_equal(st__net_frame_check(&f, 1, 77, 0, p, n), "checksum mismatch");
	assert_non_null(st__net_frame_check(&f, 1, 78, 0, p, n));
	assert_non_null(st__net_frame_check(&f, 1, 77, 0, p, n - 1));
	free(p);
}

/* The interface that reaches a loopback coordinator is the loopback one:
 * what UCX is told to listen on in a one-machine job (net.c). */
static void test_net_job_iface(void **state)
{
	(void)state;
	char name[64] = "";
	assert_int_equal(st__net_job_iface("127.0.0.1:29500", name, sizeof name), 0);
	struct ifaddrs *ifs;
	assert_int_equal(getifaddrs(&ifs), 0);
	int loop = 0;
	for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
		loop |= !strcmp(i->ifa_name, name) && (i->ifa_flags & IFF_LOOPBACK);
	freeifaddrs(ifs);
	assert_true(loop);
	assert_int_equal(st__net_job_iface("no port", name, sizeof name), ST_EINVAL);
}

/* ---- jobs of forked processes ----------------------------------------------------- */

static int g_rank = -1;

#define CHECK(c)                                                                      \
	do {                                                                          \
		if (!(c)) {                                                           \
			fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", g_rank, \
				__FILE__, __LINE__, #c);                              \
			_exit(3);                                                     \
		}                                                                     \
	} while (0)
#define CHECK_RC(call, want)                                                               \
	do {                                                                               \
		int rc_ = (call);                                                          \
		if (rc_ != (want)) {                                                       \
			fprintf(stderr, "rank %d: %s:%d: %s returned %d (%s), expected %d\n",   \
				g_rank, __FILE__, __LINE__, #call, rc_, st_strerror(rc_), want); \
			_exit(3);                                                          \
		}                                                                          \
	} while (0)

typedef struct job job_t;
typedef int (*body_fn)(st_net_t *net, job_t *j);

struct job {
	int P;
	char coord[64];
	char token[64];
	pid_t pid[8];
	double timeout_s; /* the ranks' cfg.timeout_s */
	int ready[2];     /* each rank writes one byte once connected */
	char log[8][128]; /* stderr of rank r, when captured */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof a;
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static void job_init(job_t *j, int P)
{
	memset(j, 0, sizeof *j);
	j->P = P;
	j->timeout_s = RECV_WAIT_S;
	snprintf(j->coord, sizeof j->coord, "127.0.0.1:%d", free_port());
	snprintf(j->token, sizeof j->token, "test-%d-%ld", (int)getpid(), (long)time(NULL));
	assert_int_equal(pipe(j->ready), 0);
}

/* The transport UCX picked for every peer is the one this job asked for:
 * shared memory between the processes of one machine (these tests run on
 * one), TCP when STRATA_NET_SHM=0. Fails rather than let the shared-memory
 * path fall back to TCP unnoticed, which would still pass every other
 * test, only slower and with UCX's own error reports. */
static void check_transport(st_net_t *net)
{
	const char *v = getenv("STRATA_NET_SHM");
	const int want_shm = !v || strcmp(v, "0");
	for (int p = 0; p < st_net_size(net); p++) {
		if (p == st_net_rank(net))
			continue;
		char tls[256];
		CHECK(st__net_ep_transports(net, p, tls, sizeof tls) > 0);
		int shm = strstr(tls, "posix") || strstr(tls, "sysv") || strstr(tls, "cma");
		if (st__net_ep_shm(net, p) != want_shm || shm != want_shm ||
		    (want_shm && strstr(tls, "tcp")) || (!want_shm && !strstr(tls, "tcp"))) {
			fprintf(stderr, "rank %d: to rank %d UCX uses \"%s\", expected %s\n",
				g_rank, p, tls, want_shm ? "shared memory only" : "tcp");
			_exit(3);
		}
	}
}

/* Forks rank `rank` with `token`; it opens the transport, runs body and
 * exits with its status (10 when st_net_open said ST_EPEER). With
 * capture, its stderr goes to j->log[rank]. */
static pid_t spawn(job_t *j, int rank, const char *token, body_fn body, int capture)
{
	if (capture)
		snprintf(j->log[rank], sizeof j->log[rank], "%s/rank%d-%d.log", tmpdir, rank,
			 (int)getpid());
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid > 0)
		return pid;
	g_rank = rank;
	if (capture) {
		int fd = open(j->log[rank], O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 2);
		close(fd);
	}
	close(j->ready[0]);
	st_net_cfg_t cfg = { .rank = rank, .size = j->P, .timeout_s = j->timeout_s };
	snprintf(cfg.coordinator, sizeof cfg.coordinator, "%s", j->coord);
	snprintf(cfg.token, sizeof cfg.token, "%s", token);
	st_net_t *net;
	int rc = st_net_open(&net, &cfg);
	if (rc < 0) {
		fprintf(stderr, "rank %d: st_net_open: %s\n", rank, st_strerror(rc));
		_exit(rc == ST_EPEER ? 10 : 11);
	}
	CHECK(st_net_rank(net) == rank && st_net_size(net) == j->P);
	/* Before the parent hears "ready" and may kill a rank: every test's
	 * job, the kill and stall tests included, runs on the transport it
	 * asked for. */
	check_transport(net);
	char one = 1;
	CHECK(write(j->ready[1], &one, 1) == 1);
	int status = body(net, j);
	st_net_close(net);
	exit(status);
}

/* Waits for pid until the deadline (then kills it and fails). */
static int wait_pid(pid_t pid, double deadline)
{
	int st;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			return st;
		assert_int_equal(w, 0);
		if (now_s() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fail_msg("process %d did not finish within %.0f s", (int)pid, JOB_WAIT_S);
		}
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

static void expect_exit(pid_t pid, int code, double deadline, const char *what)
{
	int st = wait_pid(pid, deadline);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != code)
		fail_msg("%s: exit status %d, signal %d (expected exit %d)", what,
			 WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0,
			 code);
}

/* Reads n readiness bytes (every rank connected). */
static void wait_ready(job_t *j, int n, double deadline)
{
	while (n > 0) {
		struct pollfd p = { .fd = j->ready[0], .events = POLLIN };
		int left = (int)((deadline - now_s()) * 1000);
		if (left <= 0 || poll(&p, 1, left) <= 0)
			fail_msg("the job did not form in time");
		char b[8];
		ssize_t got = read(j->ready[0], b, (size_t)n < sizeof b ? (size_t)n : sizeof b);
		assert_true(got > 0);
		n -= (int)got;
	}
}

static void job_end(job_t *j)
{
	close(j->ready[0]);
	close(j->ready[1]);
	for (int r = 0; r < 8; r++)
		if (j->log[r][0])
			unlink(j->log[r]);
}

/* Every rank of j exits 0 (those not skipped). */
static void expect_all_ok(job_t *j, int skip, double deadline)
{
	for (int r = 0; r < j->P; r++) {
		char what[32];
		snprintf(what, sizeof what, "rank %d of %d", r, j->P);
		if (r != skip)
			expect_exit(j->pid[r], 0, deadline, what);
	}
}

static void run_job(int P, body_fn body)
{
	job_t j;
	job_init(&j, P);
	for (int r = 0; r < P; r++)
		j.pid[r] = spawn(&j, r, j.token, body, 0);
	expect_all_ok(&j, -1, now_s() + JOB_WAIT_S);
	job_end(&j);
}

static int log_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char line[1024];
	int found = 0;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

/* ---- bodies ------------------------------------------------------------------------ */

static uint8_t pattern(size_t i, int seed)
{
	return (uint8_t)((i * 131u + (size_t)seed * 7u) ^ (i >> 13));
}

static void *recv_ok(st_net_t *net, int src, uint32_t chan, size_t *len)
{
	void *buf;
	int from = -1;
	CHECK_RC(st_net_recv(net, src, chan, &buf, len, &from, RECV_WAIT_S), ST_OK);
	CHECK(src == ST_NET_ANY || from == src);
	return buf;
}

typedef struct pmsg {
	int src, dst, i;
	uint8_t fill[200];
} pmsg_t;

static size_t pmsg_len(int i)
{
	return offsetof(pmsg_t, fill) + (size_t)(i * 37 % 200);
}

/* All pairs (self included), in order; ANY; send2; 8 MB; empty messages. */
static int body_p2p(st_net_t *net, job_t *j)
{
	const int P = st_net_size(net), r = st_net_rank(net), K = 40;
	for (int i = 0; i < K; i++)
		for (int d = 0; d < P; d++) {
			pmsg_t m = { r, d, i, { 0 } };
			memset(m.fill, (r * 16 + i) & 0xff, sizeof m.fill);
			CHECK_RC(st_net_send(net, d, 7, &m, pmsg_len(i)), ST_OK);
		}
	for (int s = 0; s < P; s++)
		for (int i = 0; i < K; i++) {
			size_t len;
			pmsg_t *m = recv_ok(net, s, 7, &len);
			CHECK(len == pmsg_len(i) && m->src == s && m->dst == r && m->i == i);
			for (size_t k = 0; k < len - offsetof(pmsg_t, fill); k++)
				CHECK(m->fill[k] == ((s * 16 + i) & 0xff));
			free(m);
		}
	/* Every rank to rank 0 on one channel, received with ST_NET_ANY: each
	 * sender's messages still come in order. */
	for (int i = 0; i < 5; i++) {
		int v[2] = { r, i };
		CHECK_RC(st_net_send(net, 0, 9, v, sizeof v), ST_OK);
	}
	if (r == 0) {
		int next[8] = { 0 };
		for (int k = 0; k < 5 * P; k++) {
			size_t len;
			int *v = recv_ok(net, ST_NET_ANY, 9, &len);
			CHECK(len == 2 * sizeof(int) && v[0] >= 0 && v[0] < P && v[1] == next[v[0]]);
			next[v[0]]++;
			free(v);
		}
	}
	/* send2: header and payload arrive as one message. */
	const char hdr[] = "head:", body[] = "and the body";
	CHECK_RC(st_net_send2(net, (r + 1) % P, 10, hdr, 5, body, sizeof body), ST_OK);
	size_t len;
	char *got = recv_ok(net, (r + P - 1) % P, 10, &len);
	CHECK(len == 5 + sizeof body && !memcmp(got, "head:and the body", len));
	free(got);
	/* Large send2s, with a small header (over the network: SPLIT, the
	 * body sent apart from frame and header) and with a 4 KiB one (FLAT),
	 * arrive as one message, header first. */
	{
		static const size_t heads[] = { 24, 4096 };
		const size_t blen = (1u << 20) + 1;
		uint8_t *h = malloc(4096), *bb = malloc(blen);
		CHECK(h && bb);
		for (size_t k = 0; k < 4096; k++)
			h[k] = pattern(k, 7);
		for (size_t k = 0; k < blen; k++)
			bb[k] = pattern(k, 8);
		for (int t = 0; t < 2; t++)
			CHECK_RC(st_net_send2(net, (r + 1) % P, 18, h, heads[t], bb, blen), ST_OK);
		for (int t = 0; t < 2; t++) {
			uint8_t *g = recv_ok(net, (r + P - 1) % P, 18, &len);
			CHECK(len == heads[t] + blen && !memcmp(g, h, heads[t]) &&
			      !memcmp(g + heads[t], bb, blen));
			free(g);
		}
		free(h);
		free(bb);
	}
	/* Empty messages. */
	CHECK_RC(st_net_send(net, (r + 1) % P, 11, NULL, 0), ST_OK);
	got = recv_ok(net, (r + P - 1) % P, 11, &len);
	CHECK(len == 0 && got);
	free(got);
	/* 8 MB and a bit from rank 0 to every rank, itself included. */
	const size_t big = (8u << 20) + 3;
	if (r == 0) {
		uint8_t *b = malloc(big);
		CHECK(b);
		for (size_t i = 0; i < big; i++)
			b[i] = pattern(i, 5);
		for (int d = 0; d < P; d++)
			CHECK_RC(st_net_send(net, d, 12, b, big), ST_OK);
		free(b);
		CHECK(st_net_bytes_sent(net) >= (uint64_t)(P - 1) * big);
	}
	uint8_t *b = recv_ok(net, 0, 12, &len);
	CHECK(len == big);
	for (size_t i = 0; i < big; i++)
		if (b[i] != pattern(i, 5))
			CHECK(!"8 MB message corrupted");
	free(b);
	/* Large and small messages alternating on one channel, submitted
	 * without waiting, keep their order: a small one is received at once,
	 * while the large one before it may still be arriving (net.c,
	 * take_locked). */
	{
		enum { N_MIX = 8 };
		const size_t large = (1u << 20) + 5;
		uint8_t *lb[N_MIX] = { 0 };
		int small[N_MIX];
		st_net_send_req_t *q[N_MIX];
		for (int i = 0; i < N_MIX; i++) {
			small[i] = i;
			if (i % 2 == 0) {
				CHECK((lb[i] = malloc(large)));
				for (size_t k = 0; k < large; k++)
					lb[i][k] = pattern(k, i);
			}
			CHECK_RC(st_net_send_submit(net, (r + 1) % P, 13,
						    i % 2 ? (void *)&small[i] : lb[i],
						    i % 2 ? sizeof small[i] : large, &q[i]),
				 ST_OK);
		}
		for (int i = 0; i < N_MIX; i++) {
			uint8_t *m = recv_ok(net, (r + P - 1) % P, 13, &len);
			if (i % 2 == 0) {
				CHECK(len == large);
				for (size_t k = 0; k < len; k++)
					if (m[k] != pattern(k, i))
						CHECK(!"a large message out of order or corrupted");
			} else {
				CHECK(len == sizeof i && !memcmp(m, &i, sizeof i));
			}
			free(m);
		}
		for (int i = 0; i < N_MIX; i++) {
			CHECK_RC(st_net_send_wait(net, q[i]), ST_OK);
			free(lb[i]);
		}
	}
	/* A large message's buffer given back (st_net_release) carries the
	 * next one from that rank: sent only once the first was given back, it
	 * arrives in a buffer from the cache (pool.c). Over TCP the flat
	 * sends' blocks come from the same cache, so only shared memory can
	 * tell the receive's hit apart. */
	const char *shm = getenv("STRATA_NET_SHM");
	if (P > 1) {
		const size_t large = (1u << 20) + 7;
		uint8_t *lb = malloc(large);
		CHECK(lb);
		memset(lb, 0x5a, large);
		CHECK_RC(st_net_send(net, (r + 1) % P, 14, lb, large), ST_OK);
		uint8_t *m = recv_ok(net, (r + P - 1) % P, 14, &len);
		CHECK(len == large && m[0] == 0x5a && m[large - 1] == 0x5a);
		st_net_release(net, m);
		const uint64_t hits = st__net_pool_hits(net);
		int ack = 1;
		CHECK_RC(st_net_send(net, (r + P - 1) % P, 15, &ack, sizeof ack), ST_OK);
		int *a = recv_ok(net, (r + 1) % P, 15, &len);
		free(a);
		CHECK_RC(st_net_send(net, (r + 1) % P, 14, lb, large), ST_OK);
		m = recv_ok(net, (r + P - 1) % P, 14, &len);
		CHECK(len == large && m[0] == 0x5a && m[large - 1] == 0x5a);
		if (!(shm && !strcmp(shm, "0")))
			CHECK(st__net_pool_hits(net) > hits);
		st_net_release(net, m);
		st_net_release(net, NULL);
		free(lb);
	}
	/* While a thread polls the worker (st__net_spin), the progress thread
	 * leaves it unarmed (net.c, progress_main), so arrivals do not wake
	 * it to take a core from the poller: rank 1 polls for 50 ms while rank
	 * 0 sends it 100 messages, and the worker is armed at most twice
	 * meanwhile (before, every arrival woke the progress thread, which
	 * armed the worker again after it). */
	if (P > 1 && r < 2) {
		enum { N_POLLED = 100 };
		int go = 1;
		if (r == 1) {
			CHECK_RC(st_net_send(net, 0, 16, &go, sizeof go), ST_OK);
			const uint64_t arms = st__net_arms(net);
			const double end = now_s() + 0.05;
			while (now_s() < end)
				st__net_spin(net, end);
			CHECK(st__net_arms(net) - arms <= 2);
			for (int i = 0; i < N_POLLED; i++) {
				int *v = recv_ok(net, 0, 17, &len);
				CHECK(len == sizeof i && *v == i);
				free(v);
			}
		} else {
			free(recv_ok(net, 1, 16, &len));
			for (int i = 0; i < N_POLLED; i++)
				CHECK_RC(st_net_send(net, 1, 17, &i, sizeof i), ST_OK);
		}
	}
	/* Over the network (here TCP on the loopback, STRATA_NET_SHM=0) the
	 * large send2 with a small header above went in two (net.c, SPLIT),
	 * the one with a 4 KiB header flat (FLAT). */
	if (shm && !strcmp(shm, "0") && P > 1)
		CHECK(st__net_msgs_split(net) > 0 && st__net_msgs_flat(net) > 0);
	/* Small sends to other ranks complete inside their post, with no
	 * ticket (net.c, post), on shared memory and over TCP. */
	if (P > 1)
		CHECK(st__net_msgs_imm(net) > 0);
	/* Nothing else is queued. */
	void *none;
	CHECK_RC(st_net_recv(net, ST_NET_ANY, 7, &none, &len, NULL, 0.01), ST_EAGAIN);
	CHECK(P == 1 || st_net_msgs_sent(net) > 0);
	/* Frames between ranks on shared memory travel unhashed, over TCP or
	 * with STRATA_NET_CHECKSUM=all hashed (TEST_NET_UNHASHED says which
	 * the test expects). */
	const char *uh = getenv("TEST_NET_UNHASHED");
	if (uh && P > 1)
		CHECK(*uh == '1' ? st__net_frames_unhashed(net) > 0
				 : st__net_frames_unhashed(net) == 0);
	/* Messages of one piece (st_net_send) to a rank on shared memory go
	 * frameless (net.c, BARE) exactly when frames there go unhashed. */
	if (uh && P > 1)
		CHECK(*uh == '1' ? st__net_msgs_bare(net) > 0 : st__net_msgs_bare(net) == 0);
	CHECK_RC(st_net_barrier(net), ST_OK);
	return 0;
}

/* body_p2p on 2 ranks with var=val in the ranks' environment (the forked
 * ranks inherit it), expecting unhashed frames ("1") or none ("0").
 * p2p_env_reset (the tests' teardown) clears them, also after a failure,
 * so that a failed test does not change the ones after it. */
static void p2p_2_with(const char *var, const char *val, const char *unhashed)
{
	setenv(var, val, 1);
	setenv("TEST_NET_UNHASHED", unhashed, 1);
	run_job(2, body_p2p);
}

static int p2p_env_reset(void **state)
{
	(void)state;
	unsetenv("STRATA_NET_CHECKSUM");
	unsetenv("STRATA_NET_SHM");
	unsetenv("TEST_NET_UNHASHED");
	return 0;
}

/* Shared memory, the default checksum setting whatever the caller's. */
static void test_net_p2p_2(void **state)
{
	(void)state;
	p2p_2_with("STRATA_NET_CHECKSUM", "links", "1");
}


/* STRATA_NET_CHECKSUM=all: shared memory, every frame hashed. */
static void test_net_p2p_2_checksum_all(void **state)
{
	(void)state;
	p2p_2_with("STRATA_NET_CHECKSUM", "all", "0");
}

static void test_net_p2p_4(void **state) { (void)state; run_job(4, body_p2p); }

static uint64_t rng_next(uint64_t *s)
{
	*s += UINT64_C(0x9e3779b97f4a7c15);
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Rank s's contribution: floats of mixed sign and magnitude, so that the
 * order of the additions shows in the low bits. */
static void contribution(float *x, size_t n, int s)
{
	uint64_t st = (uint64_t)s * 7919 + n;
	for (size_t i = 0; i < n; i++) {
		uint64_t v = rng_next(&st);
		float u = (float)(v >> 40) / (float)(1 << 24) - 0.5f;
		x[i] = ldexpf(u, (int)(v % 21) - 10);
	}
}

static int body_coll(st_net_t *net, job_t *j)
{
	const int P = st_net_size(net), r = st_net_rank(net);
	for (int k = 0; k < 5; k++)
		CHECK_RC(st_net_barrier(net), ST_OK);
	static const size_t sizes[] = { 0, 1, 3, 1000003 };
	for (size_t t = 0; t < sizeof sizes / sizeof *sizes; t++) {
		size_t n = sizes[t];
		float *buf = malloc(n * sizeof(float) + 4), *ref = malloc(n * sizeof(float) + 4),
		      *x = malloc(n * sizeof(float) + 4);
		CHECK(buf && ref && x);
		contribution(buf, n, r);
		contribution(ref, n, 0);
		for (int s = 1; s < P; s++) {
			contribution(x, n, s);
			for (size_t i = 0; i < n; i++)
				ref[i] += x[i];
		}
		const uint64_t bare0 = st__net_msgs_bare(net), split0 = st__net_msgs_split(net);
		CHECK_RC(st_net_allreduce_f32(net, buf, n), ST_OK);
		CHECK(n == 0 || !memcmp(buf, ref, n * sizeof(float)));
		/* A large segment to a rank on shared memory travels as its
		 * own frameless message behind its header (coll.c,
		 * PHASE_SPLIT): every rank gets at least one. Over the network
		 * (hashed) the 1 MiB segments go in two (net.c, SPLIT). */
		if (n > 100000 && P > 1 && st__net_bare(net, (r + 1) % P))
			CHECK(st__net_msgs_bare(net) > bare0);
		else if (n > 100000 && P > 1 && !st__net_ep_shm(net, (r + 1) % P))
			CHECK(st__net_msgs_split(net) > split0);
		free(buf);
		free(ref);
		free(x);
	}
	/* allgather */
	uint64_t mine[3] = { (uint64_t)r, (uint64_t)r * r, UINT64_C(0xabcdef) ^ (uint64_t)r };
	uint64_t all[8][3];
	CHECK_RC(st_net_allgather(net, mine, sizeof mine, all), ST_OK);
	for (int s = 0; s < P; s++)
		CHECK(all[s][0] == (uint64_t)s && all[s][1] == (uint64_t)s * s &&
		      all[s][2] == (UINT64_C(0xabcdef) ^ (uint64_t)s));
	/* bcast from every root */
	const size_t blen = 100003;
	uint8_t *b = malloc(blen);
	CHECK(b);
	for (int root = 0; root < P; root++) {
		for (size_t i = 0; i < blen; i++)
			b[i] = r == root ? pattern(i, root) : 0;
		CHECK_RC(st_net_bcast(net, root, b, blen), ST_OK);
		for (size_t i = 0; i < blen; i++)
			if (b[i] != pattern(i, root))
				CHECK(!"bcast payload differs");
	}
	free(b);
	CHECK_RC(st_net_barrier(net), ST_OK);
	return 0;
}

static void test_net_coll_2(void **state) { (void)state; run_job(2, body_coll); }

/* STRATA_NET_SHM=0: the same jobs over TCP (check_transport says so),
 * the collectives' large segments framed and hashed (SPLIT, FLAT). */
static void test_net_p2p_2_tcp(void **state)
{
	(void)state;
	p2p_2_with("STRATA_NET_SHM", "0", "0");
	run_job(2, body_coll);
}

/* STRATA_NET_CHECKSUM=none over TCP: frames unhashed and messages of one
 * piece bare over the network too (net.c, BARE); then the collectives,
 * whose large segments to such a rank travel apart and direct (coll.c),
 * as on shared memory. */
static void test_net_tcp_checksum_none(void **state)
{
	(void)state;
	setenv("STRATA_NET_SHM", "0", 1);
	p2p_2_with("STRATA_NET_CHECKSUM", "none", "1");
	run_job(2, body_coll);
}

/* The same with the references forced (runtime/simd.h): the allreduce's
 * adds through the plain loop, where test_net_coll_2 takes the AVX-512 one
 * on a CPU that has it (the ranks inherit the setting). */
static void test_net_coll_2_ref(void **state)
{
	(void)state;
	st_simd_set_ref(1);
	run_job(2, body_coll);
}

static int simd_unforce(void **state)
{
	(void)state;
	st_simd_set_ref(0);   /* also when the test failed half-way */
	return 0;
}
static void test_net_coll_4(void **state) { (void)state; run_job(4, body_coll); }

/* The allreduce's segments (coll.c): each rank's chunk moves in pieces of
 * net->coll_seg floats. With 7-float segments, sizes that divide by
 * neither P nor 7 give chunks of different segment counts (n = 22 at P = 3:
 * chunks of 8, 7, 7 floats, so 2, 1, 1 segments), empty chunks (n < P),
 * short last segments; then the default segment on a size just past it.
 * Every result bit-equal to the rank-order sequential sum, as body_coll;
 * the receive buffers reused; the collectives' rounds counted. */
static int body_coll_segments(st_net_t *net, job_t *j)
{
	const int P = st_net_size(net), r = st_net_rank(net);
	static const size_t small[] = { 1, 2, 3, 6, 7, 8, 13, 14, 15, 20, 21, 22, 23, 29, 1001 };
	const size_t big = 3 * ST__NET_COLL_SEG + 5;
	const uint64_t rounds0 = st_net_coll_rounds(net);
	for (size_t t = 0; t <= sizeof small / sizeof *small; t++) {
		const int last = t == sizeof small / sizeof *small;
		size_t n = last ? big : small[t];
		net->coll_seg = last ? ST__NET_COLL_SEG : 7;
		float *buf = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float)),
		      *x = malloc(n * sizeof(float));
		CHECK(buf && ref && x);
		contribution(buf, n, r);
		contribution(ref, n, 0);
		for (int s = 1; s < P; s++) {
			contribution(x, n, s);
			for (size_t i = 0; i < n; i++)
				ref[i] += x[i];
		}
		CHECK_RC(st_net_allreduce_f32(net, buf, n), ST_OK);
		CHECK(!memcmp(buf, ref, n * sizeof(float)));
		free(buf);
		free(ref);
		free(x);
	}
	/* Large segments arrive in reused buffers (pool.c): a second call of
	 * the same size is served from what the first gave back. */
	float *z = calloc(big, sizeof(float));
	CHECK(z);
	CHECK_RC(st_net_allreduce_f32(net, z, big), ST_OK);
	const uint64_t hits = st__net_pool_hits(net);
	/* No rank sends the second call's segments before every rank has
	 * read its count (a rank still in the first call would take them
	 * early, into fresh buffers). */
	CHECK_RC(st_net_barrier(net), ST_OK);
	CHECK_RC(st_net_allreduce_f32(net, z, big), ST_OK);
	CHECK(st__net_pool_hits(net) > hits);
	free(z);
	CHECK_RC(st_net_barrier(net), ST_OK);
	/* The latency count: 2 rounds per allreduce, ceil(log2 P) per barrier,
	 * however many segments moved. */
	const uint64_t n_ar = sizeof small / sizeof *small + 3, lg = P > 2 ? 2 : 1;
	CHECK(st_net_coll_rounds(net) - rounds0 == 2 * n_ar + 2 * lg);
	return 0;
}

static void test_net_coll_segments_2(void **state) { (void)state; run_job(2, body_coll_segments); }
static void test_net_coll_segments_3(void **state) { (void)state; run_job(3, body_coll_segments); }
static void test_net_coll_segments_4(void **state) { (void)state; run_job(4, body_coll_segments); }

static void *cancel_waiter(void *arg)
{
	void *buf;
	size_t len;
	intptr_t rc = st_net_recv(arg, 0, 1, &buf, &len, NULL, -1);
	return (void *)rc;
}

/* One process: self-sends, timeouts, cancel, trivial collectives. */
static int body_single(st_net_t *net, job_t *j)
{
	CHECK_RC(st_net_send(net, 0, 3, "hi", 3), ST_OK);
	size_t len;
	char *m = recv_ok(net, 0, 3, &len);
	CHECK(len == 3 && !strcmp(m, "hi"));
	free(m);
	void *buf;
	CHECK_RC(st_net_recv(net, 0, 3, &buf, &len, NULL, 0.01), ST_EAGAIN);
	float f[3] = { 1, 2, 3 };
	CHECK_RC(st_net_allreduce_f32(net, f, 3), ST_OK);
	CHECK(f[0] == 1 && f[1] == 2 && f[2] == 3);
	CHECK_RC(st_net_barrier(net), ST_OK);
	CHECK(st_net_alive(net, 0) && st_net_dead(net, NULL) == 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, cancel_waiter, net) == 0);
	st_net_cancel(net);
	void *rc;
	pthread_join(t, &rc);
	CHECK((intptr_t)rc == ST_ECANCELED);
	CHECK_RC(st_net_recv(net, 0, 3, &buf, &len, NULL, 0), ST_ECANCELED);
	return 0;
}

static void test_net_single(void **state) { (void)state; run_job(1, body_single); }

static int body_barrier(st_net_t *net, job_t *j)
{
	CHECK_RC(st_net_barrier(net), ST_OK);
	return 0;
}

/* A process with the wrong token is refused; the job forms without it. */
static void test_net_wrong_token(void **state)
{
	(void)state;
	job_t j;
	job_init(&j, 2);
	double deadline = now_s() + JOB_WAIT_S;
	j.pid[0] = spawn(&j, 0, j.token, body_barrier, 1);
	pid_t bad = spawn(&j, 1, "not-the-token", body_barrier, 1);
	expect_exit(bad, 10, deadline, "the process with the wrong token");
	assert_true(log_has(j.log[1], "wrong job token"));
	j.pid[1] = spawn(&j, 1, j.token, body_barrier, 0);
	expect_all_ok(&j, -1, deadline);
	assert_true(log_has(j.log[0], "refused a connection from 127.0.0.1:"));
	assert_true(log_has(j.log[0], "wrong job token"));
	job_end(&j);
}

/* Rank 0 takes the listening socket `strata launch` hands down
 * (STRATA_COORDINATOR_FD) instead of binding the port itself: here the
 * port is taken by that very socket, so a rank 0 that tried to bind it
 * would fail (EADDRINUSE) and the job would not form. A variable that names
 * no listening socket of the port is ignored. */
static void test_net_inherited_listener(void **state)
{
	(void)state;
	job_t j;
	job_init(&j, 2);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof a;
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(lfd, 16), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &l), 0);
	snprintf(j.coord, sizeof j.coord, "127.0.0.1:%d", ntohs(a.sin_port));
	char v[16];
	snprintf(v, sizeof v, "%d", lfd);
	setenv("STRATA_COORDINATOR_FD", v, 1);
	double deadline = now_s() + JOB_WAIT_S;
	j.pid[0] = spawn(&j, 0, j.token, body_barrier, 0);
	unsetenv("STRATA_COORDINATOR_FD");
	close(lfd);
	j.pid[1] = spawn(&j, 1, j.token, body_barrier, 0);
	expect_all_ok(&j, -1, deadline);
	job_end(&j);

	setenv("STRATA_COORDINATOR_FD", "0", 1);   /* stdin: not a listening socket */
	run_job(2, body_barrier);
	setenv("STRATA_COORDINATOR_FD", "not-a-number", 1);
	run_job(2, body_barrier);
	unsetenv("STRATA_COORDINATOR_FD");
}

/* A rank that never comes: the others give up after timeout_s, rank 0
 * naming it. */
static void test_net_missing_rank(void **state)
{
	(void)state;
	job_t j;
	job_init(&j, 3);
	j.timeout_s = 2;
	j.pid[0] = spawn(&j, 0, j.token, body_barrier, 1);
	j.pid[1] = spawn(&j, 1, j.token, body_barrier, 1);
	double deadline = now_s() + JOB_WAIT_S;
	expect_exit(j.pid[0], 10, deadline, "rank 0 without rank 2");
	expect_exit(j.pid[1], 10, deadline, "rank 1 without rank 2");
	assert_true(log_has(j.log[0], "rank(s) 2 did not connect"));
	assert_true(log_has(j.log[1], "the job did not form in time"));
	job_end(&j);
}

/* A TCP connection to the job's coordinator, retried until it listens. */
static int connect_coord(const job_t *j, double deadline)
{
	int port = atoi(strchr(j->coord, ':') + 1);
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		assert_true(fd >= 0);
		if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
			return fd;
		close(fd);
		if (now_s() > deadline)
			fail_msg("the coordinator %s does not listen", j->coord);
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* Connections that never say hello (anyone on the machine may open them)
 * do not keep the ranks out: rank 0 reads every pending connection at
 * once, each with its own deadline. One read at a time, 10 s each, three
 * of them kept the job from forming within its 8 s. And a process of
 * another job is refused as soon as its token is in, before it has sent
 * its address. */
static void test_net_idle_connections(void **state)
{
	(void)state;
	job_t j;
	job_init(&j, 2);
	j.timeout_s = 8;
	double deadline = now_s() + JOB_WAIT_S;
	j.pid[0] = spawn(&j, 0, j.token, body_barrier, 1);
	int idle[3];
	for (int i = 0; i < 3; i++)
		idle[i] = connect_coord(&j, deadline);
	/* The hello of boot.c: magic "STBH", version, rank, size, token and
	 * address lengths; then the token. The address never comes. */
	int bad = connect_coord(&j, deadline);
	const uint32_t hello[6] = { 0x48425453u, 2, 1, 2, 5, 100 };
	assert_int_equal(send(bad, hello, sizeof hello, 0), (ssize_t)sizeof hello);
	assert_int_equal(send(bad, "wrong", 5, 0), 5);
	double t0 = now_s();
	char reply[256] = "";
	size_t got = 0;
	for (ssize_t n; got < sizeof reply - 1; got += (size_t)n) {
		struct pollfd p = { .fd = bad, .events = POLLIN };
		if (poll(&p, 1, 5000) <= 0)
			fail_msg("no answer to a hello with the wrong token within 5 s");
		n = recv(bad, reply + got, sizeof reply - 1 - got, 0);
		if (n <= 0)
			break;
	}
	assert_true(now_s() - t0 < 5);
	assert_true(got > 12 && memmem(reply + 12, got - 12, "wrong job token", 15));
	close(bad);
	j.pid[1] = spawn(&j, 1, j.token, body_barrier, 0);
	expect_all_ok(&j, -1, deadline);
	assert_true(log_has(j.log[0], "wrong job token"));
	for (int i = 0; i < 3; i++)
		close(idle[i]);
	job_end(&j);
}

static int g_victim;

static double elapsed_since(double t0)
{
	return now_s() - t0;
}

/* Survivors of a SIGKILLed rank: everything involving it fails fast,
 * everything else still works. */
static int body_survivor(st_net_t *net, job_t *j)
{
	const int P = st_net_size(net), r = st_net_rank(net), v = g_victim;
	if (r == v) {
		for (;;)
			pause();   /* until the parent's SIGKILL */
	}
	void *buf;
	size_t len;
	double t0 = now_s();
	CHECK_RC(st_net_recv(net, v, 5, &buf, &len, NULL, -1), ST_EPEER);
	CHECK(elapsed_since(t0) < 10.0);
	CHECK(!st_net_alive(net, v));
	int first = -2;
	CHECK(st_net_dead(net, &first) == 1 && first == v);
	CHECK_RC(st_net_send(net, v, 5, "x", 1), ST_EPEER);
	t0 = now_s();
	CHECK_RC(st_net_barrier(net), ST_EPEER);
	float f[4] = { 0 };
	CHECK_RC(st_net_allreduce_f32(net, f, 4), ST_EPEER);
	CHECK(elapsed_since(t0) < 10.0);
	/* The survivors still talk to each other, in a ring that skips v. */
	int next = (r + 1) % P == v ? (r + 2) % P : (r + 1) % P;
	int prev = (r + P - 1) % P == v ? (r + P - 2) % P : (r + P - 1) % P;
	CHECK_RC(st_net_send(net, next, 6, &r, sizeof r), ST_OK);
	int *got = recv_ok(net, prev, 6, &len);
	CHECK(len == sizeof(int) && *got == prev);
	free(got);
	return 0;
}

/* A collective's payload received straight into the caller's buffer
 * (net.c, DIRECT): between live ranks it arrives; from a rank that dies
 * the receive ends with ST_EPEER within the failure detector's bound and
 * the buffer is left as it was (the receive was canceled, not left to
 * write into it later). */
static int body_direct(st_net_t *net, job_t *j)
{
	const int r = st_net_rank(net), v = g_victim;
	const size_t n = (size_t)1 << 20;
	if (r == v) {
		for (;;)
			pause();   /* until the parent's SIGKILL */
	}
	uint8_t *buf = malloc(n);
	CHECK(buf);
	if (st__net_bare(net, r ^ 1)) {   /* ranks 0 and 1 (v is 2), on shared memory */
		if (r == 0) {
			for (size_t i = 0; i < n; i++)
				buf[i] = pattern(i, 5);
			st__net_sreq_t q;
			CHECK_RC(st__net_post_direct(net, &q, 1, 12, buf, n), ST_OK);
			CHECK_RC(st__net_wait(net, &q, 1), ST_OK);
		} else {
			memset(buf, 0, n);
			CHECK_RC(st__net_recv_direct(net, 0, 12, buf, n, 0, NULL), ST_OK);
			for (size_t i = 0; i < n; i++)
				if (buf[i] != pattern(i, 5))
					CHECK(!"a direct payload differs");
		}
	}
	memset(buf, 0xa5, n);
	int gone = -1;
	double t0 = now_s();
	CHECK_RC(st__net_recv_direct(net, v, 12, buf, n, 0, &gone), ST_EPEER);
	CHECK(elapsed_since(t0) < 10.0 && gone == v);
	for (size_t i = 0; i < n; i++)
		if (buf[i] != 0xa5)
			CHECK(!"a canceled receive wrote into the buffer");
	free(buf);
	return 0;
}

static void kill_one_with(int P, int victim, int (*body)(st_net_t *, job_t *))
{
	job_t j;
	job_init(&j, P);
	g_victim = victim;
	for (int r = 0; r < P; r++)
		j.pid[r] = spawn(&j, r, j.token, body, r == 0);
	double deadline = now_s() + JOB_WAIT_S;
	wait_ready(&j, P, deadline);
	kill(j.pid[victim], SIGKILL);
	int st = wait_pid(j.pid[victim], deadline);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	expect_all_ok(&j, victim, deadline);
	if (victim != 0) {
		char needle[32];
		snprintf(needle, sizeof needle, "rank %d died", victim);
		assert_true(log_has(j.log[0], needle));
	}
	job_end(&j);
}

static void kill_one(int P, int victim) { kill_one_with(P, victim, body_survivor); }

static void test_net_kill_rank(void **state) { (void)state; kill_one(4, 2); }
static void test_net_direct_dead(void **state) { (void)state; kill_one_with(3, 2, body_direct); }
static void test_net_kill_rank0(void **state) { (void)state; kill_one(3, 0); }

/* After rank 0 is gone nobody forwards deaths, and UCX reports none on a
 * shared-memory endpoint: rank 1 still learns that rank 2 died, from its
 * process being gone, and its receive from rank 2 ends. */
static int g_back[2] = { -1, -1 };   /* rank 1 tells the parent it saw rank 0 die */

static int body_after_rank0(st_net_t *net, job_t *j)
{
	if (st_net_rank(net) != 1) {
		for (;;)
			pause();   /* until the parent's SIGKILL */
	}
	void *buf;
	size_t len;
	CHECK_RC(st_net_recv(net, 0, 5, &buf, &len, NULL, -1), ST_EPEER);
	CHECK(write(g_back[1], "x", 1) == 1);
	double t0 = now_s();
	CHECK_RC(st_net_recv(net, 2, 5, &buf, &len, NULL, -1), ST_EPEER);
	CHECK(elapsed_since(t0) < 10.0);
	CHECK(!st_net_alive(net, 2));
	return 0;
}

static void test_net_kill_after_rank0(void **state)
{
	(void)state;
	job_t j;
	job_init(&j, 3);
	assert_int_equal(pipe(g_back), 0);
	for (int r = 0; r < 3; r++)
		j.pid[r] = spawn(&j, r, j.token, body_after_rank0, r == 1);
	double deadline = now_s() + JOB_WAIT_S;
	wait_ready(&j, 3, deadline);
	kill(j.pid[0], SIGKILL);
	struct pollfd p = { .fd = g_back[0], .events = POLLIN };
	assert_int_equal(poll(&p, 1, (int)(JOB_WAIT_S * 1000)), 1);
	kill(j.pid[2], SIGKILL);
	for (int r = 0; r < 3; r += 2) {
		int st = wait_pid(j.pid[r], deadline);
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	}
	expect_exit(j.pid[1], 0, deadline, "rank 1 of 3");
	assert_true(log_has(j.log[1], "rank 2 died (its process (pid"));
	close(g_back[0]);
	close(g_back[1]);
	job_end(&j);
}

/* The stall timeout of the tests below: long enough for a loaded sanitizer
 * run to form the job in, short enough to wait for a few times. */
#define STALL_S 3.0

static int g_go[2] = { -1, -1 };   /* the parent writes a byte per survivor: the victim is stopped */

/* Sends that can never complete: 8 MB (the rendezvous: the receiver must
 * fetch it) and many small ones (they fill its shared-memory queue) to a
 * rank that is stopped. Over shared memory UCX reports nothing for such a
 * peer; the sends end with ST_EPEER once the monitor declares it dead
 * (STALL_S), which force-closes the endpoint, and the survivors go on. */
static int body_send_stalled(st_net_t *net, job_t *j)
{
	const int P = st_net_size(net), r = st_net_rank(net), v = g_victim;
	if (r == v) {
		for (;;)
			pause();   /* until the parent's SIGSTOP, then SIGKILL */
	}
	char go;
	CHECK(read(g_go[0], &go, 1) == 1);
	const size_t big = 8u << 20;
	uint8_t *b = calloc(1, big);
	CHECK(b);
	double t0 = now_s();
	CHECK_RC(st_net_send(net, v, 5, b, big), ST_EPEER);
	CHECK(elapsed_since(t0) < STALL_S + 10.0);
	int rc = ST_OK;
	for (int i = 0; i < 100000 && rc == ST_OK; i++)
		rc = st_net_send(net, v, 5, b, 1000);
	CHECK_RC(rc, ST_EPEER);
	free(b);
	CHECK_RC(st_net_barrier(net), ST_EPEER);
	int next = (r + 1) % P == v ? (r + 2) % P : (r + 1) % P;
	int prev = (r + P - 1) % P == v ? (r + P - 2) % P : (r + P - 1) % P;
	CHECK_RC(st_net_send(net, next, 6, &r, sizeof r), ST_OK);
	size_t len;
	int *got = recv_ok(net, prev, 6, &len);
	CHECK(len == sizeof(int) && *got == prev);
	free(got);
	return 0;
}

static void test_net_send_to_stalled(void **state)
{
	(void)state;
	job_t j;
	job_init(&j, 3);
	j.timeout_s = STALL_S;
	g_victim = 1;
	assert_int_equal(pipe(g_go), 0);
	for (int r = 0; r < 3; r++)
		j.pid[r] = spawn(&j, r, j.token, body_send_stalled, 0);
	double deadline = now_s() + JOB_WAIT_S;
	wait_ready(&j, 3, deadline);
	kill(j.pid[1], SIGSTOP);
	assert_int_equal(write(g_go[1], "gg", 2), 2);
	expect_all_ok(&j, 1, deadline);
	kill(j.pid[1], SIGKILL);
	int st = wait_pid(j.pid[1], deadline);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	close(g_go[0]);
	close(g_go[1]);
	job_end(&j);
}

/* A rank stopped by SIGSTOP closes nothing: only its missing heartbeats
 * tell. The survivors' waits on it (a receive, a barrier) end within
 * STALL_S and a margin, naming it, and they go on among themselves. */
static void stall_one(int P, int victim)
{
	job_t j;
	job_init(&j, P);
	j.timeout_s = STALL_S;
	g_victim = victim;
	const int watcher = victim == 0 ? 1 : 0;   /* whose log names the victim */
	for (int r = 0; r < P; r++)
		j.pid[r] = spawn(&j, r, j.token, body_survivor, r == watcher);
	double deadline = now_s() + JOB_WAIT_S;
	wait_ready(&j, P, deadline);
	kill(j.pid[victim], SIGSTOP);
	expect_all_ok(&j, victim, deadline);
	kill(j.pid[victim], SIGKILL);
	int st = wait_pid(j.pid[victim], deadline);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	char needle[64];
	snprintf(needle, sizeof needle, "rank %d did not answer within 3 s (stalled?)", victim);
	assert_true(log_has(j.log[watcher], needle));
	job_end(&j);
}

static void test_net_stall_rank(void **state) { (void)state; stall_one(3, 2); }
static void test_net_stall_rank0(void **state) { (void)state; stall_one(3, 0); }

/* A slow rank is not a stalled one: rank 1 computes (here: sleeps) for
 * more than twice the timeout before it joins a barrier and sends; its
 * monitor thread beats meanwhile, so rank 0 waits for it and nothing
 * fails. The sleep is what is tested, not a synchronization. */
static int body_slow(st_net_t *net, job_t *j)
{
	if (st_net_rank(net) == 1) {
		struct timespec ts = { (time_t)(2 * STALL_S + 1), 0 };
		while (nanosleep(&ts, &ts) < 0)
			;
		CHECK_RC(st_net_send(net, 0, 4, "late", 5), ST_OK);
		CHECK_RC(st_net_barrier(net), ST_OK);
		return 0;
	}
	double t0 = now_s();
	CHECK_RC(st_net_barrier(net), ST_OK);
	CHECK(elapsed_since(t0) > STALL_S);
	size_t len;
	char *m = recv_ok(net, 1, 4, &len);
	CHECK(len == 5 && !strcmp(m, "late"));
	free(m);
	CHECK(st_net_dead(net, NULL) == 0);   /* (it may have left by now: not a death) */
	return 0;
}

static void test_net_slow_rank(void **state)
{
	(void)state;
	job_t j;
	job_init(&j, 2);
	j.timeout_s = STALL_S;
	for (int r = 0; r < 2; r++)
		j.pid[r] = spawn(&j, r, j.token, body_slow, 0);
	expect_all_ok(&j, -1, now_s() + JOB_WAIT_S);
	job_end(&j);
}

/* Malformed frames from rank 1 are logged and dropped at rank 0; the good
 * message after them arrives. */
static int body_frames(st_net_t *net, job_t *j)
{
	const uint32_t ch = 3;
	if (st_net_rank(net) == 1) {
		uint8_t junk[10] = { 1, 2, 3 };
		CHECK_RC(st__net_send_raw(net, 0, ch, ST__NET_TAG_MAGIC, junk, sizeof junk), ST_OK);   /* truncated */
		size_t plen = 1u << 20;
		uint8_t *f = calloc(1, sizeof(st__net_frame_t) + plen);
		CHECK(f);
		st__net_frame_t h = { .magic = ST__NET_FRAME_MAGIC, .version = ST__NET_FRAME_VERSION,
				      .chan = ch, .src = 1, .dst = 0, .len = 100 };
		uint8_t *pay = f + sizeof h;
		for (size_t i = 0; i < plen; i++)
			pay[i] = pattern(i, 9);
		h.hash = XXH3_64bits_withSeed(pay, 100, st__net_frame_seed(&h));
		memcpy(f, &h, sizeof h);
		pay[7] ^= 1;   /* checksum mismatch */
		CHECK_RC(st__net_send_raw(net, 0, ch, ST__NET_TAG_MAGIC, f, sizeof h + 100), ST_OK);
		pay[7] ^= 1;
		CHECK_RC(st__net_send_raw(net, 0, ch, ST__NET_TAG_MAGIC, f, sizeof h + 60), ST_OK);   /* cut short */
		st__net_frame_t bad = h;
		bad.magic = 0xdeadbeef;
		memcpy(f, &bad, sizeof bad);
		CHECK_RC(st__net_send_raw(net, 0, ch, ST__NET_TAG_MAGIC, f, sizeof h + 100), ST_OK);
		bad = h;
		bad.chan = ch + 1;   /* header and tag disagree */
		memcpy(f, &bad, sizeof bad);
		CHECK_RC(st__net_send_raw(net, 0, ch, ST__NET_TAG_MAGIC, f, sizeof h + 100), ST_OK);
		/* A large frame (the rendezvous path) with a bad checksum. */
		h.len = plen;
		h.hash = XXH3_64bits_withSeed(pay, plen, st__net_frame_seed(&h)) ^ 1;
		memcpy(f, &h, sizeof h);
		CHECK_RC(st__net_send_raw(net, 0, ch, ST__NET_TAG_MAGIC, f, sizeof h + plen), ST_OK);
		/* SPLIT (net.c): a body without its head; a head and body whose
		 * hash does not check out; then a good pair, which arrives as
		 * one message, head piece first. */
		CHECK_RC(st__net_send_raw(net, 0, ch, ST__NET_TAG_MAGIC_BODY, pay, 100), ST_OK);
		uint8_t cat[5 + 100];
		memcpy(cat, "head:", 5);
		memcpy(cat + 5, pay, 100);
		h.len = sizeof cat;
		h.hash = XXH3_64bits_withSeed(cat, sizeof cat, st__net_frame_seed(&h));
		uint8_t head[sizeof h + 5];
		memcpy(head, &h, sizeof h);
		memcpy(head + sizeof h, "head:", 5);
		for (int good = 0; good < 2; good++) {
			pay[50] ^= !good;
			CHECK_RC(st__net_send_raw(net, 0, ch, ST__NET_TAG_MAGIC_SPLIT, head,
						  sizeof head), ST_OK);
			CHECK_RC(st__net_send_raw(net, 0, ch, ST__NET_TAG_MAGIC_BODY, pay, 100),
				 ST_OK);
			pay[50] ^= !good;
		}
		free(f);
		CHECK_RC(st_net_send(net, 0, ch, "good", 5), ST_OK);
	} else {
		size_t len;
		uint8_t *s = recv_ok(net, 1, ch, &len);
		CHECK(len == 105 && !memcmp(s, "head:", 5));
		for (size_t i = 0; i < 100; i++)
			CHECK(s[5 + i] == pattern(i, 9));
		free(s);
		char *m = recv_ok(net, 1, ch, &len);
		CHECK(len == 5 && !strcmp(m, "good"));
		free(m);
		CHECK(st__net_frames_dropped(net) == 8);
		void *none;
		CHECK_RC(st_net_recv(net, 1, ch, &none, &len, NULL, 0.01), ST_EAGAIN);
	}
	CHECK_RC(st_net_barrier(net), ST_OK);
	return 0;
}

static void test_net_bad_frames(void **state)
{
	(void)state;
	job_t j;
	job_init(&j, 2);
	j.pid[0] = spawn(&j, 0, j.token, body_frames, 1);
	j.pid[1] = spawn(&j, 1, j.token, body_frames, 0);
	expect_all_ok(&j, -1, now_s() + JOB_WAIT_S);
	assert_true(log_has(j.log[0], "dropped a malformed message from rank 1"));
	assert_true(log_has(j.log[0], "checksum mismatch"));
	assert_true(log_has(j.log[0], "truncated"));
	assert_true(log_has(j.log[0], "second half without its first"));
	job_end(&j);
}

static __attribute__((unused)) void test_net_open_without_ucx(void **state)
{
	(void)state;
	st_net_cfg_t cfg = { .rank = 0, .size = 2, .timeout_s = 1, .coordinator = "127.0.0.1:1" };
	st_net_t *net = (st_net_t *)1;
	assert_int_equal(st_net_open(&net, &cfg), ST_EINVAL);
	assert_null(net);
	st_net_close(NULL);
}

/* STRATA_NET_COLL takes "strata" or "mpi"; anything else stops st_net_open
 * before it connects (a job that asked for a collective must not silently
 * get another). */
static void test_net_coll_choice_refused(void **state)
{
	(void)state;
	st_net_cfg_t cfg = { .rank = 0, .size = 2, .timeout_s = 1, .coordinator = "127.0.0.1:1" };
	st_net_t *net = (st_net_t *)1;
	setenv("STRATA_NET_COLL", "mpich", 1);
	assert_int_equal(st_net_open(&net, &cfg), ST_EINVAL);
	assert_null(net);
	unsetenv("STRATA_NET_COLL");
}

int main(int argc, char **argv)
{
	(void)argc;
#if defined(__SANITIZE_THREAD__)
	/* UCX's memory hooks (libucm, installed when the library loads) crash
	 * under ThreadSanitizer: its madvise hook takes a lock in a thread that
	 * TSan has already torn down. They only keep UCX's registration cache
	 * fresh, which the TCP transport used here does not need. The setting
	 * is read when libucm loads, so restart with it. */
	if (!getenv("UCX_MEM_EVENTS")) {
		setenv("UCX_MEM_EVENTS", "no", 1);
		execv("/proc/self/exe", argv);
		perror("execv");
		return 1;
	}
#else
	(void)argv;
#endif
	if (getenv("TEST_NET_ONLY"))   /* one test by name (a glob), while debugging */
		cmocka_set_test_filter(getenv("TEST_NET_ONLY"));
	snprintf(tmpdir, sizeof tmpdir, "/tmp/st-test-net-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	const struct CMUnitTest cfg_tests[] = {
		cmocka_unit_test(test_net_cfg_not_distributed),
		cmocka_unit_test(test_net_cfg_launchers),
		cmocka_unit_test(test_net_cfg_errors),
		cmocka_unit_test(test_net_cfg_cluster_file),
		cmocka_unit_test(test_net_frame_repeat),
		cmocka_unit_test(test_net_frame_unhashed),
		cmocka_unit_test(test_net_frame_hash_avx2),
		cmocka_unit_test(test_net_job_iface),
	};
	int failed = cmocka_run_group_tests_name("net_cfg", cfg_tests, NULL, NULL);
	if (!ST_HAVE_UCX) {
		const struct CMUnitTest t[] = { cmocka_unit_test(test_net_open_without_ucx) };
		failed += cmocka_run_group_tests_name("net_noucx", t, NULL, NULL);
		rmdir(tmpdir);
		if (failed)
			return 1;
		printf("skipped: strata was built without UCX; the transport tests need it\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_net_coll_choice_refused),
		cmocka_unit_test(test_net_single),
		cmocka_unit_test_teardown(test_net_p2p_2, p2p_env_reset),
		cmocka_unit_test_teardown(test_net_p2p_2_tcp, p2p_env_reset),
		cmocka_unit_test_teardown(test_net_p2p_2_checksum_all, p2p_env_reset),
		cmocka_unit_test_teardown(test_net_tcp_checksum_none, p2p_env_reset),
		cmocka_unit_test(test_net_p2p_4),
		cmocka_unit_test(test_net_coll_2),
		cmocka_unit_test_teardown(test_net_coll_2_ref, simd_unforce),
		cmocka_unit_test(test_net_coll_4),
		cmocka_unit_test(test_net_coll_segments_2),
		cmocka_unit_test(test_net_coll_segments_3),
		cmocka_unit_test(test_net_coll_segments_4),
		cmocka_unit_test(test_net_wrong_token),
		cmocka_unit_test(test_net_inherited_listener),
		cmocka_unit_test(test_net_missing_rank),
		cmocka_unit_test(test_net_idle_connections),
		cmocka_unit_test(test_net_kill_rank),
		cmocka_unit_test(test_net_direct_dead),
		cmocka_unit_test(test_net_kill_rank0),
		cmocka_unit_test(test_net_kill_after_rank0),
		cmocka_unit_test(test_net_stall_rank),
		cmocka_unit_test(test_net_stall_rank0),
		cmocka_unit_test(test_net_send_to_stalled),
		cmocka_unit_test(test_net_slow_rank),
		cmocka_unit_test(test_net_bad_frames),
	};
	failed += cmocka_run_group_tests_name("net", tests, NULL, NULL);
	rmdir(tmpdir);
	return failed ? 1 : 0;
}
