/*
 * cmd_launch.c — `strata launch`: starts the processes of a distributed job
 * on this machine, each running `strata run JOB.lua [options]` with its
 * rank in the environment (docs/distributed.md, "strata launch").
 *
 * Without --cluster, the job is N processes on this machine: the launcher
 * picks a free port on 127.0.0.1 for rank 0's coordinator and a random job
 * token. With --cluster FILE, it starts this host's procs_per_host
 * processes of the cluster file, with ranks host_index × procs_per_host +
 * i; coordinator and token come from the file (run it on every host).
 *
 * Signals: SIGINT, SIGTERM and SIGCHLD are blocked and taken with
 * sigwaitinfo, so nothing runs in a signal handler. INT and TERM are
 * forwarded to every rank still running, which stops cleanly on it (cmd_run.c,
 * "signals"); the launcher then waits at most --stop-timeout seconds (30 by
 * default) for them and kills the ones still running with SIGKILL, so a rank
 * stuck on a dead peer cannot hold the launcher forever. A second INT or TERM
 * is forwarded too (a rank exits at once on its second signal). The ranks run
 * in their own process group, so a Ctrl-C at the terminal reaches them once,
 * through the launcher; they start with the default action for INT and TERM
 * whatever the launcher inherited (the launcher decides what reaches them),
 * and each gets SIGTERM if the launcher itself dies. Once a rank has ended, a
 * rank that stays stopped, or one still running after rank 0 ended, is killed
 * after STRATA_NET_TIMEOUT (watch), so the launcher always ends.
 *
 * Exit status: rank 0's (with --cluster, that of the first rank started
 * here: 130 or 143 when it stopped on a forwarded SIGINT or SIGTERM), 1 if
 * it was killed by a signal; 2 for a usage error, when nothing was started.
 */
#include "cli.h"
#include "runtime/err.h"
#include "runtime/net/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct launch {
	int n;               /* processes started here */
	int base, world;     /* rank of the first, world size */
	const char *cluster; /* --cluster FILE or NULL */
	char coordinator[64];
	int lfd;             /* rank 0's listening socket (no --cluster), or -1 */
	char token[40];
	char **child_argv;
	pid_t *pid;
	int *status;         /* wait status, valid once reaped */
	int running;
	int stop_timeout;    /* seconds the ranks get to stop after a forwarded signal */
	int bind;            /* --bind: each rank on its own slice of the allowed CPUs */
	int *cpus, ncpus;    /* the launcher's allowed CPUs, in order (--bind) */
	/* Leftovers (see watch): a rank that stays stopped after another one
	 * ended, or that outlives rank 0, holds the launcher forever. */
	double grace;        /* STRATA_NET_TIMEOUT, or 60 s */
	double first_end;    /* when the first rank ended (0: none yet) */
	double end0;         /* when rank 0 ended, if it runs here (0: not yet) */
	double *stopped;     /* since when each rank is stopped (0: it is not) */
	char *killed;        /* watch sent it SIGKILL */
} launch_t;

static int usage_error(const char *fmt, const char *arg)
{
	fputs("strata launch: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\nRun 'strata help launch' for usage.\n", stderr);
	return ST_EXIT_USAGE;
}

/* A listening socket on a free port of 127.0.0.1, its port in *port, or -1.
 * The launcher keeps it open until the ranks are started and hands it to
 * rank 0 (STRATA_COORDINATOR_FD, runtime/net/boot.c): a port picked by
 * binding and closing could be taken by any other process — an outgoing
 * connection's source port, another job's pick — before rank 0 listens. */
static int listen_port(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 128) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
		*port = ntohs(a.sin_port);
		return fd;
	}
	if (fd >= 0)
		close(fd);
	return -1;
}

/* 32 hex digits from /dev/urandom into out[n]: ST_OK or ST_EIO. */
static int random_token(char *out, size_t n)
{
	unsigned char raw[16];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	ssize_t got = fd >= 0 ? read(fd, raw, sizeof raw) : -1;
	if (fd >= 0)
		close(fd);
	if (got != (ssize_t)sizeof raw || n < 2 * sizeof raw + 1)
		return ST_EIO;
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	return 0;
}

/* The ranks this host starts, from -n or the cluster file. */
static int plan(launch_t *l, int n_opt)
{
	if (!l->cluster) {
		if (n_opt < 1)
			return usage_error("%s", "-n N (the number of processes) is required");
		l->n = l->world = n_opt;
		int port = -1;
		l->lfd = listen_port(&port);
		if (l->lfd < 0 || random_token(l->token, sizeof l->token) < 0) {
			fprintf(stderr, "strata launch: cannot pick a port or a token: %s\n",
				strerror(errno));
			return ST_EXIT_FAILED;
		}
		snprintf(l->coordinator, sizeof l->coordinator, "127.0.0.1:%d", port);
		return ST_EXIT_OK;
	}
	st_net_cluster_t cl;
	if (st_net_cluster_load(&cl, l->cluster) < 0)
		return ST_EXIT_USAGE;
	int h = st_net_cluster_self(&cl), rc = ST_EXIT_OK;
	if (h < 0) {
		char me[256] = "";
		gethostname(me, sizeof me - 1);
		fprintf(stderr, "strata launch: this machine (%s) is not one of the hosts of %s\n",
			me, l->cluster);
		rc = ST_EXIT_USAGE;
	} else if (n_opt > 0 && n_opt != cl.procs_per_host) {
		fprintf(stderr, "strata launch: -n %d but %s has procs_per_host %d (leave -n out "
			"with --cluster)\n", n_opt, l->cluster, cl.procs_per_host);
		rc = ST_EXIT_USAGE;
	}
	l->n = cl.procs_per_host;
	l->base = h * cl.procs_per_host;
	l->world = cl.n_hosts * cl.procs_per_host;
	st_net_cluster_fini(&cl);
	return rc;
}

static void set_int(const char *name, int v)
{
	char s[16];
	snprintf(s, sizeof s, "%d", v);
	setenv(name, s, 1);
}

/* --bind: local rank i's slice of the launcher's allowed CPUs, [*lo, *hi)
 * of l->cpus: contiguous blocks of ncpus / n CPUs, the first ncpus % n
 * ranks one more. */
static void bind_slice(const launch_t *l, int i, int *lo, int *hi)
{
	const int q = l->ncpus / l->n, rem = l->ncpus % l->n;
	*lo = i * q + (i < rem ? i : rem);
	*hi = *lo + q + (i < rem);
}

/* --bind: the launcher's allowed CPUs into l->cpus; a usage error when there
 * are fewer than ranks to start here. */
static int bind_plan(launch_t *l)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) < 0) {
		fprintf(stderr, "strata launch: --bind: cannot read this process's CPUs: %s\n",
			strerror(errno));
		return ST_EXIT_FAILED;
	}
	l->cpus = st_xcalloc(CPU_SETSIZE, sizeof *l->cpus);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			l->cpus[l->ncpus++] = c;
	if (l->ncpus < l->n) {
		fprintf(stderr, "strata launch: --bind needs a CPU per rank: %d ranks here, %d CPUs "
			"allowed\n", l->n, l->ncpus);
		return ST_EXIT_USAGE;
	}
	for (int i = 0; i < l->n; i++) {
		int lo, hi;
		bind_slice(l, i, &lo, &hi);
		fprintf(stderr, "strata launch: rank %d on CPUs %d-%d\n", l->base + i, l->cpus[lo],
			l->cpus[hi - 1]);
	}
	return ST_EXIT_OK;
}

/* In the child: its environment, then `strata run ...`. Never returns. */
static void exec_rank(const launch_t *l, int i, pid_t launcher, const sigset_t *mask)
{
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != launcher)   /* the launcher died before prctl */
		_exit(1);
	set_int("STRATA_RANK", l->base + i);
	set_int("STRATA_WORLD_SIZE", l->world);
	set_int("STRATA_LOCAL_RANK", i);
	if (l->cluster) {
		setenv("STRATA_CLUSTER", l->cluster, 1);
	} else {
		setenv("STRATA_COORDINATOR", l->coordinator, 1);
		setenv("STRATA_TOKEN", l->token, 1);
		unsetenv("STRATA_CLUSTER");
		/* Rank 0 gets the listening socket (dup: without close-on-exec). */
		int fd = l->base + i == 0 && l->world > 1 && l->lfd >= 0 ? dup(l->lfd) : -1;
		if (fd >= 0)
			set_int("STRATA_COORDINATOR_FD", fd);
		else
			unsetenv("STRATA_COORDINATOR_FD");
	}
	if (l->bind) {
		/* The slice is the process's affinity, inherited by every thread
		 * it starts; the rank does not pin within it (a multi-process
		 * job leaves placement to the kernel, ops/runner/stages.c). */
		int lo, hi;
		cpu_set_t set;
		bind_slice(l, i, &lo, &hi);
		CPU_ZERO(&set);
		for (int k = lo; k < hi; k++)
			CPU_SET(l->cpus[k], &set);
		if (sched_setaffinity(0, sizeof set, &set) < 0) {
			fprintf(stderr, "strata launch: rank %d: cannot bind to its CPUs: %s\n",
				l->base + i, strerror(errno));
			_exit(1);
		}
	}
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	sigprocmask(SIG_SETMASK, mask, NULL);
	execv("/proc/self/exe", l->child_argv);
	fprintf(stderr, "strata launch: rank %d: cannot run /proc/self/exe: %s\n", l->base + i,
		strerror(errno));
	_exit(127);
}

static void forward(launch_t *l, int sig)
{
	for (int i = 0; i < l->n; i++)
		if (l->pid[i] > 0 && l->status[i] < 0)
			kill(l->pid[i], sig);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void reap(launch_t *l)
{
	int st;
	pid_t p;
	while ((p = waitpid(-1, &st, WNOHANG | WUNTRACED | WCONTINUED)) > 0)
		for (int i = 0; i < l->n; i++) {
			if (l->pid[i] != p)
				continue;
			if (WIFSTOPPED(st) || WIFCONTINUED(st)) {
				l->stopped[i] = WIFSTOPPED(st) ? now_s() : 0;
				continue;
			}
			l->status[i] = st;
			l->running--;
			l->first_end = l->first_end ? l->first_end : now_s();
			if (i == 0 && l->base == 0)
				l->end0 = now_s();
		}
}

/* Once a rank has ended, the others should end too, or go on without it
 * (docs/distributed.md, "Failures"); two kinds of leftover never do. A
 * rank that is stopped (SIGSTOP) has been given up by the others after
 * STRATA_NET_TIMEOUT (they saw no heartbeat), and would hold the launcher
 * forever; and after rank 0 (the coordinator) has ended, the others see
 * it at once and end within seconds. Either gets `grace` seconds, then
 * SIGKILL, named. */
static void watch(launch_t *l)
{
	const double now = now_s();
	for (int i = 0; i < l->n; i++) {
		if (l->status[i] >= 0 || l->pid[i] <= 0 || l->killed[i])
			continue;
		const double since = l->stopped[i] > l->first_end ? l->stopped[i] : l->first_end;
		if (l->stopped[i] && now >= since + l->grace)
			fprintf(stderr, "strata launch: rank %d stayed stopped (stalled?) for %g s "
				"after another rank ended: killing it\n", l->base + i, l->grace);
		else if (l->end0 && now >= l->end0 + l->grace)
			fprintf(stderr, "strata launch: rank %d was still running %g s after rank 0 "
				"ended: killing it\n", l->base + i, l->grace);
		else
			continue;
		kill(l->pid[i], SIGKILL);
		l->killed[i] = 1;
	}
}

/* Starts the ranks and waits for all of them. */
static void run_ranks(launch_t *l)
{
	sigset_t block, old;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGCHLD);
	sigprocmask(SIG_BLOCK, &block, &old);
	pid_t me = getpid();
	fflush(NULL);
	for (int i = 0; i < l->n; i++) {
		l->status[i] = -1;
		l->pid[i] = fork();
		if (l->pid[i] == 0)
			exec_rank(l, i, me, &old);
		if (l->pid[i] < 0) {
			fprintf(stderr, "strata launch: cannot start rank %d: %s\n", l->base + i,
				strerror(errno));
			l->status[i] = 1 << 8;   /* as if it exited with status 1 */
			forward(l, SIGTERM);
			continue;
		}
		l->running++;
	}
	/* Rank 0 holds the listening socket now; once it ends, the port closes. */
	if (l->lfd >= 0) {
		close(l->lfd);
		l->lfd = -1;
	}
	/* After the first forwarded signal the ranks have until `deadline`
	 * to stop; then the ones left are killed, once. */
	int stopping = 0, killed = 0;
	struct timespec deadline = { 0, 0 };
	while (l->running > 0) {
		siginfo_t si;
		int sig;
		/* The wait ends at the stop deadline, and every 0.25 s once a rank
		 * has ended (watch looks at the leftovers). */
		struct timespec left = { 0, 250 * 1000 * 1000 };
		int timed = l->first_end != 0;
		if (stopping && !killed) {
			struct timespec now, d;
			clock_gettime(CLOCK_MONOTONIC, &now);
			d.tv_sec = deadline.tv_sec - now.tv_sec;
			d.tv_nsec = deadline.tv_nsec - now.tv_nsec;
			if (d.tv_nsec < 0)
				d.tv_sec--, d.tv_nsec += 1000000000L;
			if (d.tv_sec < 0) {
				for (int i = 0; i < l->n; i++)
					if (l->pid[i] > 0 && l->status[i] < 0)
						fprintf(stderr, "strata launch: rank %d did not stop within "
							"%d s: killing it\n", l->base + i, l->stop_timeout);
				forward(l, SIGKILL);
				killed = 1;
				continue;
			}
			if (!timed || d.tv_sec < left.tv_sec ||
			    (d.tv_sec == left.tv_sec && d.tv_nsec < left.tv_nsec))
				left = d;
			timed = 1;
		}
		sig = timed ? sigtimedwait(&block, &si, &left) : sigwaitinfo(&block, &si);
		if (sig == SIGINT || sig == SIGTERM) {
			if (!stopping) {
				stopping = 1;
				clock_gettime(CLOCK_MONOTONIC, &deadline);
				deadline.tv_sec += l->stop_timeout;
				fprintf(stderr, "strata launch: %s: stopping the %d running rank%s (at "
					"most %d s, then they are killed)\n", sig == SIGINT ? "SIGINT"
					: "SIGTERM", l->running, l->running == 1 ? "" : "s",
					l->stop_timeout);
			}
			forward(l, sig);
		} else if (sig == SIGCHLD) {
			reap(l);
		}
		if (l->first_end)
			watch(l);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
}

int st_cmd_launch(int argc, char **argv)
{
	enum { O_CLUSTER = 1, O_HELP, O_STOP_TIMEOUT, O_BIND };
	static const struct option longopts[] = {
		{ "bind", no_argument, NULL, O_BIND },
		{ "cluster", required_argument, NULL, O_CLUSTER },
		{ "stop-timeout", required_argument, NULL, O_STOP_TIMEOUT },
		{ "help", no_argument, NULL, O_HELP },
		{ 0, 0, 0, 0 },
	};
	launch_t l = { .stop_timeout = 30, .lfd = -1 };
	int n_opt = 0, c;
	optind = 1;
	opterr = 0;
	/* "+": stop at JOB.lua; what follows belongs to `strata run`. */
	while ((c = getopt_long(argc, argv, "+n:", longopts, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'n':
			n_opt = (int)strtol(optarg, &end, 10);
			if (*end || n_opt < 1 || n_opt > ST_NET_MAX_RANKS)
				return usage_error("-n must be a number of processes from 1 to 4096, "
						   "got '%s'", optarg);
			break;
		case O_CLUSTER: l.cluster = optarg; break;
		case O_BIND: l.bind = 1; break;
		case O_STOP_TIMEOUT:
			l.stop_timeout = (int)strtol(optarg, &end, 10);
			if (*end || !*optarg || l.stop_timeout < 0 || l.stop_timeout > 86400)
				return usage_error("--stop-timeout must be a number of seconds from 0 "
						   "to 86400, got '%s'", optarg);
			break;
		case O_HELP:
			st_cli_help_for("launch", stdout);
			return ST_EXIT_OK;
		default:
			return usage_error(c == ':' || (c == '?' && optopt) ? "option '%s' needs a value"
					   : "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error("%s", "missing JOB.lua");
	const char *job = argv[optind];
	if (access(job, R_OK) < 0) {
		fprintf(stderr, "strata launch: cannot read %s: %s\n", job, strerror(errno));
		return ST_EXIT_USAGE;
	}
	int rc = plan(&l, n_opt);
	if (rc == ST_EXIT_OK && l.bind)
		rc = bind_plan(&l);
	if (rc != ST_EXIT_OK) {
		free(l.cpus);
		return rc;
	}
	/* strata run JOB.lua [options...] */
	int extra = argc - optind;
	l.child_argv = st_xcalloc((size_t)extra + 3, sizeof(char *));
	l.child_argv[0] = "strata";
	l.child_argv[1] = "run";
	for (int i = 0; i < extra; i++)
		l.child_argv[2 + i] = argv[optind + i];
	l.pid = st_xcalloc((size_t)l.n, sizeof *l.pid);
	l.status = st_xcalloc((size_t)l.n, sizeof *l.status);
	l.stopped = st_xcalloc((size_t)l.n, sizeof *l.stopped);
	l.killed = st_xcalloc((size_t)l.n, sizeof *l.killed);
	const char *to = getenv("STRATA_NET_TIMEOUT");
	l.grace = to && atof(to) > 0 ? atof(to) : 60;
	run_ranks(&l);
	for (int i = 0; i < l.n; i++) {
		int st = l.status[i], r = l.base + i;
		if (WIFSIGNALED(st))
			fprintf(stderr, "strata launch: rank %d killed by signal %d (%s)\n", r,
				WTERMSIG(st), strsignal(WTERMSIG(st)));
		else if (WIFEXITED(st) && (WEXITSTATUS(st) == 128 + SIGINT ||
					   WEXITSTATUS(st) == 128 + SIGTERM))
			fprintf(stderr, "strata launch: rank %d stopped on %s (exit status %d)\n", r,
				WEXITSTATUS(st) == 128 + SIGINT ? "SIGINT" : "SIGTERM",
				WEXITSTATUS(st));
		else if (WIFEXITED(st) && WEXITSTATUS(st))
			fprintf(stderr, "strata launch: rank %d exited with status %d\n", r,
				WEXITSTATUS(st));
	}
	int st0 = l.status[0];
	rc = WIFEXITED(st0) ? WEXITSTATUS(st0) : ST_EXIT_FAILED;
	free(l.child_argv);
	free(l.pid);
	free(l.status);
	free(l.stopped);
	free(l.killed);
	free(l.cpus);
	return rc;
}
