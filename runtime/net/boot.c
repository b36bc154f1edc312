/*
 * boot.c — the rendezvous that forms a job, and the failure monitor that
 * watches it afterwards, both over plain TCP connections to rank 0.
 *
 * Rendezvous: rank 0 listens on the coordinator port; every other rank
 * connects (retrying until timeout_s: rank 0 may start last) and sends a
 * hello: magic, version, rank, world size, job token, UCX worker address.
 * Rank 0 refuses, with a reason sent back and logged on both sides, a
 * connection with a bad hello, the wrong token, another world size, or a
 * rank already present; a refused connection does not disturb the job,
 * which keeps waiting for the real rank. A rank that disconnects before the
 * job forms may connect again. When every rank is in, rank 0 sends each the
 * address table. Rank 0 reads all connections at once (one poll over the
 * listener, the ranks in and every pending connection), so anyone on the
 * machine who opens connections and says nothing costs a slot each (64,
 * the oldest given up first) until their own deadline (HELLO_WAIT_S) and
 * never delays the ranks; and it checks the token as soon as it is in,
 * before it reads (or allocates for) the rest of the hello.
 *
 * Monitor: the connections stay open. One thread per process ("st-net-mon")
 * polls them. A process that exits, even by SIGKILL, has its socket closed
 * by the kernel, so rank 0 reads EOF at once; a goodbye record sent by
 * st_net_close first tells a clean leave from a death. Rank 0 forwards
 * either to every other rank as a record (LEFT k or DEAD k); the others
 * read rank 0's own death as EOF on their one connection. TCP keepalive
 * (about 20 s) covers a host that vanishes without closing anything.
 *
 * Stalls: a process that is stopped (SIGSTOP, a debugger, a frozen host)
 * closes nothing. So every monitor sends a beat on its connections every
 * timeout_s / 10 (at most 1 s), whatever the process's other threads are
 * doing: a rank busy with a large batch, or waiting in a barrier for a
 * slow one, still beats. Rank 0 takes a rank it has heard nothing from
 * for timeout_s for dead ("rank 1 did not answer within 10 s (stalled?)"),
 * closes its connection (if the rank ever runs again, it finds the
 * coordinator gone and stops) and tells the others (STALLED k); the others
 * treat a silent rank 0 the same way. Every wait on a peer re-checks
 * which peers are alive, so this bounds every wait on a stopped process
 * without bounding the legitimate waits on a slow one.
 *
 * Once rank 0 is gone nobody watches the others: over TCP and RDMA UCX
 * still reports a lost connection (net.c), and for peers on this host
 * (shared memory, where UCX reports nothing) the monitor checks every
 * beat whether their processes still exist (st__net_check_pids).
 *
 * Records are 8 bytes, sent whole by one send() each; only the monitor
 * thread reads and (until st__net_monitor_stop has ended it, and writes
 * the goodbye) writes the sockets, so each socket has one user at a time.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/net/net_internal.h"

#define HELLO_MAGIC 0x48425453u   /* "STBH" */
#define REPLY_MAGIC 0x52425453u   /* "STBR" */
#define BOOT_VERSION 2u          /* 2: addresses start with a host id (net.c) */
#define MAX_ADDR (1u << 16)
#define HELLO_WAIT_S 10.0         /* a connection must say hello within this */

typedef struct hello {
	uint32_t magic, version, rank, size, token_len, addr_len;
} hello_t;

typedef struct reply {
	uint32_t magic, status, len;   /* status: 0 table follows, 1 refused (reason follows) */
} reply_t;

enum { REC_BYE = 1, REC_LEFT, REC_DEAD, REC_BEAT, REC_STALLED };
typedef struct rec {
	uint32_t type;
	int32_t rank;
} rec_t;

/* ---- sockets ---------------------------------------------------------------------- */

/* Waits until fd is ready for events or the deadline passes: 1, 0, or
 * poll's error as -errno. */
static int wait_fd(int fd, short events, double deadline)
{
	for (;;) {
		double left = deadline - st__net_now();
		if (left <= 0)
			return 0;
		struct pollfd p = { .fd = fd, .events = events };
		int n = poll(&p, 1, (int)(left * 1000) + 1);
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* Reads exactly n bytes: 1 done, 0 EOF or deadline, or the error as
 * -errno. */
static int read_full(int fd, void *buf, size_t n, double deadline)
{
	char *p = buf;
	while (n) {
		int w = wait_fd(fd, POLLIN, deadline);
		if (w <= 0)
			return w;
		ssize_t got = recv(fd, p, n, MSG_DONTWAIT);
		if (got == 0)
			return 0;
		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		p += got;
		n -= (size_t)got;
	}
	return 1;
}

/* Writes n bytes: 0, ST_EPEER past the deadline, or the error as -errno. */
static int write_full(int fd, const void *buf, size_t n, double deadline)
{
	const char *p = buf;
	while (n) {
		ssize_t put = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (put < 0 && (errno == EAGAIN || errno == EINTR)) {
			int w = wait_fd(fd, POLLOUT, deadline);
			if (w <= 0)
				return w < 0 ? w : ST_EPEER;
			continue;
		}
		if (put < 0)
			return -errno;
		if (put == 0)
			return ST_EPEER;
		p += put;
		n -= (size_t)put;
	}
	return 0;
}

static void tune(int fd)
{
	int one = 1, idle = 10, intvl = 2, cnt = 5;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

static void peer_name(int fd, char *out, size_t n)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char host[INET6_ADDRSTRLEN] = "?", port[16] = "?";
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
		getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
			    NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(out, n, "%s:%s", host, port);
}

/* Listens on the coordinator's port: on the coordinator address itself when
 * it is a loopback one (a one-machine job stays private), else on every
 * interface of its family. The socket, or ST_EIO (logged). */
static int listen_on(const char *host, int port)
{
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	int e = getaddrinfo(host, ps, &hints, &res);
	if (e) {
		st_error("net: cannot resolve the coordinator host '%s': %s", host, gai_strerror(e));
		return ST_EIO;
	}
	int fd = -1, err = 0;
	for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
		struct sockaddr_storage ss;
		memcpy(&ss, a->ai_addr, a->ai_addrlen);
		int loop = a->ai_family == AF_INET
			? (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127
			: a->ai_family == AF_INET6 &&
			  IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
		if (!loop && a->ai_family == AF_INET)
			((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
		else if (!loop && a->ai_family == AF_INET6)
			((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		int one = 1;
		if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
				bind(fd, (struct sockaddr *)&ss, a->ai_addrlen) < 0 ||
				listen(fd, 128) < 0)) {
			err = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0) {
		st_error("net: rank 0 cannot listen on port %d of %s: %s (is another job using "
			 "it? choose another port in STRATA_COORDINATOR)", port, host, strerror(err));
		return ST_EIO;
	}
	return fd;
}

/* One attempt to connect: the socket, or ST_EPEER with *err set when it
 * did not work. */
static int connect_once(const char *host, int port, char *err, size_t errlen)
{
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	int e = getaddrinfo(host, ps, &hints, &res);
	if (e) {
		snprintf(err, errlen, "cannot resolve '%.100s': %s", host, gai_strerror(e));
		return ST_EPEER;
	}
	int fd = -1;
	for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
			snprintf(err, errlen, "%s", strerror(errno));
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	return fd >= 0 ? fd : ST_EPEER;
}

/* ---- rank 0 ------------------------------------------------------------------------ */

/* Tells a connected process why it is turned away, and closes it. */
static void send_refusal(int fd, const char *why)
{
	reply_t r = { REPLY_MAGIC, 1, (uint32_t)strlen(why) };
	double dl = st__net_now() + 1;
	if (write_full(fd, &r, sizeof r, dl) == 0)
		write_full(fd, why, r.len, dl);
	close(fd);
}

static void refuse(int fd, const char *who, const char *why)
{
	st_warn("net: refused a connection from %s: %s", who, why);
	send_refusal(fd, why);
}

/* A connection that has not finished its hello yet. Rank 0 reads every
 * pending connection as its bytes come (poll), so connections that say
 * nothing — a port scan, a stale process, anyone on the machine — cost a
 * slot each until their own deadline, and never delay the ranks. */
typedef struct pending {
	int fd;              /* -1: a free slot */
	double deadline;     /* HELLO_WAIT_S after accept */
	int part;            /* reading 0 the header, 1 the token, 2 the address */
	size_t got;          /* bytes of that part so far */
	hello_t h;
	char tok[128];
	void *addr;
	char who[80];
} pending_t;

#define MAX_PENDING 64

static void pend_close(pending_t *q)
{
	close(q->fd);
	free(q->addr);
	*q = (pending_t){ .fd = -1 };
}

static void pend_refuse(pending_t *q, const char *why)
{
	/* The rest of its hello may be in already (its address, unread when
	 * the token was wrong): read it first, so that closing sends a FIN
	 * after the reason rather than a reset that may overtake it. */
	char sink[4096];
	for (int i = 0; i < 20 && recv(q->fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
		;
	refuse(q->fd, q->who, why);
	free(q->addr);
	*q = (pending_t){ .fd = -1 };
}

/* The checks that need only the header and the token; why[0] = 0 if it
 * passes. The token comes first: a process of another job is told so
 * before anything else about it is believed. */
static void check_hello(st_net_t *net, const pending_t *q, const int *fds, char *why, size_t n)
{
	const char *mine = net->cfg.token;
	const int r = (int)q->h.rank;
	if (q->h.token_len != strlen(mine) || memcmp(q->tok, mine, q->h.token_len))
		snprintf(why, n, "wrong job token");
	else if ((int)q->h.size != net->size)
		snprintf(why, n, "it expects a world size of %u, this job has %d", q->h.size,
			 net->size);
	else if (r <= 0 || r >= net->size)
		snprintf(why, n, "rank %d is not in 1..%d", r, net->size - 1);
	else if (fds[r] >= 0)
		snprintf(why, n, "rank %d is already connected", r);
	else
		why[0] = 0;
}

/* Reads what pending connection q has sent. Returns the rank it joined as,
 * 0 while its hello is incomplete, ST_EPEER once it was refused or dropped
 * (said in a warning; q is closed). */
static int pend_read(st_net_t *net, pending_t *q, int *fds, void **addrs, size_t *lens)
{
	char why[160];
	for (;;) {
		void *dst = q->part == 0 ? (void *)&q->h : q->part == 1 ? (void *)q->tok : q->addr;
		size_t want = q->part == 0 ? sizeof q->h : q->part == 1 ? q->h.token_len
			: q->h.addr_len;
		if (q->got < want) {
			ssize_t got = recv(q->fd, (char *)dst + q->got, want - q->got, MSG_DONTWAIT);
			if (got < 0 && (errno == EAGAIN || errno == EINTR))
				return 0;
			if (got <= 0) {
				st_warn("net: dropped a connection from %s: it closed before its "
					"hello was complete", q->who);
				pend_close(q);
				return ST_EPEER;
			}
			q->got += (size_t)got;
			continue;
		}
		if (q->part == 0) {
			if (q->h.magic != HELLO_MAGIC || q->h.version != BOOT_VERSION ||
			    q->h.token_len > 127 || q->h.addr_len == 0 || q->h.addr_len > MAX_ADDR) {
				pend_refuse(q, "not a strata process of this version (bad hello)");
				return ST_EPEER;
			}
		} else if (q->part == 1) {
			check_hello(net, q, fds, why, sizeof why);
			if (!why[0] && !(q->addr = malloc(q->h.addr_len)))
				snprintf(why, sizeof why, "out of memory");
			if (why[0]) {
				pend_refuse(q, why);
				return ST_EPEER;
			}
		} else {
			const int r = (int)q->h.rank;
			check_hello(net, q, fds, why, sizeof why);   /* another may have joined as r */
			if (why[0]) {
				pend_refuse(q, why);
				return ST_EPEER;
			}
			int fl = fcntl(q->fd, F_GETFL);   /* the monitor reads it blocking */
			fcntl(q->fd, F_SETFL, fl & ~O_NONBLOCK);
			fds[r] = q->fd;
			addrs[r] = q->addr;
			lens[r] = q->h.addr_len;
			st_debug("net: rank %d connected from %s", r, q->who);
			*q = (pending_t){ .fd = -1 };
			return r;
		}
		q->part++;
		q->got = 0;
	}
}

/* Takes every connection waiting on the listener into a free slot of pq
 * (the oldest pending one gives its slot up when none is free). */
static void accept_all(int lfd, pending_t *pq, double deadline)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;   /* EAGAIN: no more for now (or a transient error) */
		int slot = -1;
		for (int i = 0; i < MAX_PENDING; i++) {
			if (pq[i].fd < 0) {
				slot = i;
				break;
			}
			if (slot < 0 || pq[i].deadline < pq[slot].deadline)
				slot = i;
		}
		if (pq[slot].fd >= 0) {
			st_warn("net: dropped a connection from %s: %d connections were waiting "
				"for their hello", pq[slot].who, MAX_PENDING);
			pend_close(&pq[slot]);
		}
		double dl = st__net_now() + HELLO_WAIT_S;
		pq[slot] = (pending_t){ .fd = fd, .deadline = dl < deadline ? dl : deadline };
		peer_name(fd, pq[slot].who, sizeof pq[slot].who);
	}
}

/* Drops rank r's connection before the job formed (it closed or misbehaved). */
static void forget(int *fds, void **addrs, int r)
{
	st_warn("net: rank %d disconnected before the job formed; waiting for it again", r);
	close(fds[r]);
	fds[r] = -1;
	free(addrs[r]);
	addrs[r] = NULL;
}

/* Rank 0 until every rank has said hello: one poll over the listener, the
 * ranks already in (a close before the table is a rank to wait for again)
 * and every pending connection, each with its own deadline. */
static int gather(st_net_t *net, int lfd, int *fds, void **addrs, size_t *lens, double deadline)
{
	const int n = net->size;
	struct pollfd *p = st_xcalloc((size_t)n + MAX_PENDING, sizeof *p);
	int *who = st_xcalloc((size_t)n + MAX_PENDING, sizeof *who);   /* rank, or -1 - slot */
	pending_t *pq = st_xcalloc(MAX_PENDING, sizeof *pq);
	for (int i = 0; i < MAX_PENDING; i++)
		pq[i].fd = -1;
	int joined = 1, rc = ST_OK;
	while (joined < n) {
		double now = st__net_now(), until = deadline;
		int np = 0;
		p[np++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (int r = 1; r < n; r++)
			if (fds[r] >= 0) {
				who[np] = r;
				p[np++] = (struct pollfd){ .fd = fds[r], .events = POLLIN };
			}
		for (int i = 0; i < MAX_PENDING; i++)
			if (pq[i].fd >= 0) {
				who[np] = -1 - i;
				p[np++] = (struct pollfd){ .fd = pq[i].fd, .events = POLLIN };
				until = pq[i].deadline < until ? pq[i].deadline : until;
			}
		if (now >= deadline) {
			rc = ST_EPEER;
			break;
		}
		int k = poll(p, (nfds_t)np, until > now ? (int)((until - now) * 1000) + 1 : 0);
		if (k < 0 && errno != EINTR) {
			rc = ST_EIO;
			break;
		}
		for (int i = 1; k > 0 && i < np; i++) {
			if (!p[i].revents)
				continue;
			if (who[i] > 0) {   /* nothing is due from a rank before the table */
				forget(fds, addrs, who[i]);
				joined--;
			} else if (pend_read(net, &pq[-1 - who[i]], fds, addrs, lens) > 0) {
				joined++;
			}
		}
		now = st__net_now();
		for (int i = 0; i < MAX_PENDING; i++)
			if (pq[i].fd >= 0 && now >= pq[i].deadline) {
				st_warn("net: dropped a connection from %s: no hello within %.0f s",
					pq[i].who, HELLO_WAIT_S);
				pend_close(&pq[i]);
			}
		if (k > 0 && (p[0].revents & POLLIN))
			accept_all(lfd, pq, deadline);
	}
	for (int i = 0; i < MAX_PENDING; i++)
		if (pq[i].fd >= 0)
			pend_close(&pq[i]);
	free(pq);
	free(who);
	free(p);
	if (rc == ST_EPEER) {
		char missing[200] = "", *m = missing;
		for (int r = 1; r < n && m < missing + sizeof missing - 12; r++)
			if (fds[r] < 0)
				m += sprintf(m, "%s%d", m == missing ? "" : ", ", r);
		st_error("net: the job did not form: rank(s) %s did not connect to %s within %.0f s",
			 missing, net->cfg.coordinator, net->cfg.timeout_s);
	}
	if (rc < 0)
		for (int r = 1; r < n; r++)
			if (fds[r] >= 0) {
				send_refusal(fds[r], "the job did not form in time");
				fds[r] = -1;
			}
	return rc;
}

static int serve_table(st_net_t *net, int *fds, void **addrs, size_t *lens, double deadline)
{
	size_t total = 0;
	for (int r = 0; r < net->size; r++)
		total += 4 + lens[r];
	if (total > UINT32_MAX)
		return ST_EINVAL;
	uint8_t *t = malloc(total), *p = t;
	if (!t)
		return ST_ENOMEM;
	for (int r = 0; r < net->size; r++) {
		uint32_t l = (uint32_t)lens[r];
		memcpy(p, &l, 4);
		memcpy(p + 4, addrs[r], l);
		p += 4 + l;
	}
	reply_t rep = { REPLY_MAGIC, 0, (uint32_t)total };
	int rc = ST_OK;
	for (int r = 1; r < net->size; r++)
		if (write_full(fds[r], &rep, sizeof rep, deadline) < 0 ||
		    write_full(fds[r], t, total, deadline) < 0) {
			st_error("net: could not send the address table to rank %d: %s", r,
				 strerror(errno));
			rc = ST_EPEER;
		}
	free(t);
	return rc;
}

/* The listening socket `strata launch` opened for this rank 0 and handed
 * down as STRATA_COORDINATOR_FD (cmd_launch.c): the launcher picks the port
 * by listening on it, so no other process can take it between the pick and
 * rank 0's start. The socket, or ST_ENOENT when there is none (unset, not a
 * socket listening on `port`: then rank 0 listens itself). */
static int inherited_listener(int port)
{
	const char *v = getenv("STRATA_COORDINATOR_FD");
	char *end;
	long fd = v && *v ? strtol(v, &end, 10) : -1;
	if (fd < 0 || fd > 65535 || *end)
		return ST_ENOENT;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	int acc = 0;
	socklen_t al = sizeof acc;
	if (getsockname((int)fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    getsockopt((int)fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) < 0 || !acc)
		return ST_ENOENT;
	int p = ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
		: ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) : -1;
	if (p != port)
		return ST_ENOENT;
	unsetenv("STRATA_COORDINATOR_FD");   /* not for this process's children */
	fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	fcntl((int)fd, F_SETFL, fcntl((int)fd, F_GETFL) | O_NONBLOCK);
	return (int)fd;
}

static int boot_root(st_net_t *net, const char *host, int port, void **addrs, size_t *lens)
{
	int lfd = inherited_listener(port);
	if (lfd < 0)
		lfd = listen_on(host, port);
	if (lfd < 0)
		return lfd;
	int *fds = net->socks;
	double deadline = st__net_now() + net->cfg.timeout_s;
	int rc = gather(net, lfd, fds, addrs, lens, deadline);
	close(lfd);
	if (rc == ST_OK)
		rc = serve_table(net, fds, addrs, lens, deadline + net->cfg.timeout_s);
	return rc;
}

/* ---- other ranks -------------------------------------------------------------------- */

static int parse_table(st_net_t *net, const uint8_t *t, size_t len, void **addrs, size_t *lens)
{
	size_t off = 0;
	for (int r = 0; r < net->size; r++) {
		uint32_t l;
		if (off + 4 > len)
			return ST_EPEER;
		memcpy(&l, t + off, 4);
		if (l == 0 || l > MAX_ADDR || off + 4 + l > len)
			return ST_EPEER;
		addrs[r] = st_xmalloc(l);
		memcpy(addrs[r], t + off + 4, l);
		lens[r] = l;
		off += 4 + l;
	}
	return off == len ? ST_OK : ST_EPEER;
}

static int boot_rank(st_net_t *net, const char *host, int port, const void *addr, size_t addr_len,
		     void **addrs, size_t *lens)
{
	const char *coord = net->cfg.coordinator;
	double deadline = st__net_now() + net->cfg.timeout_s;
	char err[160] = "not tried";
	int fd;
	while ((fd = connect_once(host, port, err, sizeof err)) < 0 && st__net_now() < deadline) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };   /* rank 0 may not be up yet */
		nanosleep(&ts, NULL);
	}
	if (fd < 0) {
		st_error("net: rank %d could not reach the coordinator %s within %.0f s: %s",
			 net->rank, coord, net->cfg.timeout_s, err);
		return ST_EPEER;
	}
	net->socks[0] = fd;
	size_t tl = strlen(net->cfg.token);
	hello_t h = { HELLO_MAGIC, BOOT_VERSION, (uint32_t)net->rank, (uint32_t)net->size,
		      (uint32_t)tl, (uint32_t)addr_len };
	reply_t rep;
	/* Rank 0 answers when the last rank is in, up to its own timeout. */
	double wait = st__net_now() + 2 * net->cfg.timeout_s + HELLO_WAIT_S;
	if (write_full(fd, &h, sizeof h, deadline) < 0 || write_full(fd, net->cfg.token, tl, deadline) < 0 ||
	    write_full(fd, addr, addr_len, deadline) < 0 ||
	    read_full(fd, &rep, sizeof rep, wait) <= 0 || rep.magic != REPLY_MAGIC ||
	    rep.len > (uint32_t)ST_NET_MAX_RANKS * (MAX_ADDR + 4)) {
		st_error("net: the coordinator %s closed the connection before the job formed "
			 "(is it a strata job of this version? did a rank fail to start?)", coord);
		return ST_EPEER;
	}
	uint8_t *body = malloc((size_t)rep.len + 1);
	if (!body)
		return ST_ENOMEM;
	int rc = ST_OK;
	if (read_full(fd, body, rep.len, wait) <= 0) {
		st_error("net: the coordinator %s closed the connection while sending the table",
			 coord);
		rc = ST_EPEER;
	} else if (rep.status != 0) {
		body[rep.len] = 0;
		st_error("net: the coordinator %s refused rank %d: %s%s", coord, net->rank,
			 (char *)body, strstr((char *)body, "token")
			 ? " (STRATA_TOKEN must be the same for every process of the job)" : "");
		rc = ST_EPEER;
	} else if (parse_table(net, body, rep.len, addrs, lens) < 0) {
		st_error("net: the coordinator %s sent a malformed address table", coord);
		rc = ST_EPEER;
	}
	free(body);
	return rc;
}

int st__net_boot(st_net_t *net, const void *addr, size_t addr_len, void ***addrs_out,
		 size_t **lens_out)
{
	int n = net->size;
	void **addrs = st_xcalloc((size_t)n, sizeof *addrs);
	size_t *lens = st_xcalloc((size_t)n, sizeof *lens);
	net->socks = st_xmalloc(sizeof(int) * (size_t)n);
	for (int r = 0; r < n; r++)
		net->socks[r] = -1;
	char host[256];
	int port = 0, rc;
	if (st__net_split_hostport(net->cfg.coordinator, host, sizeof host, &port) < 0) {
		st_error("net: coordinator '%s': expected host:port", net->cfg.coordinator);
		rc = ST_EINVAL;
	} else if (net->rank == 0) {
		addrs[0] = st_xmalloc(addr_len);
		memcpy(addrs[0], addr, addr_len);
		lens[0] = addr_len;
		rc = boot_root(net, host, port, addrs, lens);
	} else {
		rc = boot_rank(net, host, port, addr, addr_len, addrs, lens);
	}
	if (rc < 0) {
		for (int r = 0; r < n; r++)
			free(addrs[r]);
		free(addrs);
		free(lens);
		return rc;
	}
	for (int r = 0; r < n; r++)
		if (net->socks[r] >= 0)
			tune(net->socks[r]);
	*addrs_out = addrs;
	*lens_out = lens;
	return ST_OK;
}

/* ---- the failure monitor ---------------------------------------------------------------- */

static void send_rec(int fd, uint32_t type, int rank)
{
	rec_t r = { type, rank };
	if (fd >= 0)
		write_full(fd, &r, sizeof r, st__net_now() + 1);
}

/* How often a monitor says it is alive: a peer silent for timeout_s has
 * missed about ten beats, and a job of many ranks sends rank 0 at most
 * one 8-byte record per rank and second. */
static double beat_every(const st_net_t *net)
{
	double b = net->cfg.timeout_s / 10;
	return b < 0.05 ? 0.05 : b > 1.0 ? 1.0 : b;
}

/* Rank 0: rank r's connection has something: a goodbye, a beat, or EOF. */
static void root_event(st_net_t *net, int r, int *bye)
{
	rec_t rec;
	ssize_t got = recv(net->socks[r], &rec, sizeof rec, MSG_WAITALL);
	if (got == (ssize_t)sizeof rec && rec.type == REC_BYE && !bye[r]) {
		bye[r] = 1;
	} else if (got == (ssize_t)sizeof rec) {
		return;   /* a beat; nothing else is expected: ignore it */
	} else {
		close(net->socks[r]);
		net->socks[r] = -1;
		if (bye[r])
			return;   /* the EOF after a goodbye */
	}
	int how = bye[r] ? PEER_LEFT : PEER_DEAD;
	for (int k = 1; k < net->size; k++)
		if (k != r)
			send_rec(net->socks[k], how == PEER_LEFT ? REC_LEFT : REC_DEAD, r);
	st__net_peer_gone(net, r, how, "its connection to the coordinator closed without a "
			  "goodbye");
}

/* Rank 0: rank r sent nothing, not even a beat, for timeout_s. Its
 * connection is closed, so that if it ever runs again it finds the
 * coordinator gone and stops, rather than rejoin a job that went on
 * without it; the others hear of it as of a death. */
static void root_stalled(st_net_t *net, int r)
{
	close(net->socks[r]);
	net->socks[r] = -1;
	for (int k = 1; k < net->size; k++)
		if (k != r)
			send_rec(net->socks[k], REC_STALLED, r);
	char why[96];
	snprintf(why, sizeof why, "did not answer within %g s (stalled?)", net->cfg.timeout_s);
	st__net_peer_gone(net, r, PEER_STALLED, why);
}

/* Another rank: the record rank 0 sent, or its end. */
static void rank_event(st_net_t *net, int *bye0)
{
	rec_t rec;
	const int n = net->size;
	ssize_t got = recv(net->socks[0], &rec, sizeof rec, MSG_WAITALL);
	if (got == (ssize_t)sizeof rec && rec.rank >= 0 && rec.rank < n &&
	    (rec.type == REC_LEFT || rec.type == REC_DEAD))
		st__net_peer_gone(net, rec.rank, rec.type == REC_LEFT ? PEER_LEFT : PEER_DEAD,
				  "the coordinator saw its connection close without a goodbye");
	else if (got == (ssize_t)sizeof rec && rec.rank >= 0 && rec.rank < n &&
		 rec.type == REC_STALLED)
		st__net_peer_gone(net, rec.rank, PEER_STALLED,
				  "did not answer rank 0 in time (stalled?)");
	else if (got == (ssize_t)sizeof rec && rec.type == REC_BYE) {
		*bye0 = 1;
		st__net_peer_gone(net, 0, PEER_LEFT, "");
	} else if (got != (ssize_t)sizeof rec) {
		/* Rank 0 is gone: nobody watches the others any more. Its
		 * state is set first: the progress thread reads it to judge
		 * UCX errors once the detector is down. */
		st__net_peer_gone(net, 0, *bye0 ? PEER_LEFT : PEER_DEAD,
				  "its connection closed without a goodbye");
		atomic_store(&net->detector_up, 0);
		close(net->socks[0]);
		net->socks[0] = -1;
	}
	/* else a beat */
}

/* Another rank: rank 0 sent nothing for timeout_s. As when it dies,
 * nobody watches the others any more. */
static void rank0_stalled(st_net_t *net)
{
	char why[96];
	snprintf(why, sizeof why, "did not answer within %g s (stalled?)", net->cfg.timeout_s);
	st__net_peer_gone(net, 0, PEER_STALLED, why);
	atomic_store(&net->detector_up, 0);
	close(net->socks[0]);
	net->socks[0] = -1;
}

static void *monitor_main(void *arg)
{
	st_net_t *net = arg;
	pthread_setname_np(pthread_self(), "st-net-mon-0");
	const int n = net->size;
	const double every = beat_every(net), silence = net->cfg.timeout_s;
	int bye0 = 0;
	int *bye = st_xcalloc((size_t)n, sizeof *bye);
	double *heard = st_xcalloc((size_t)n, sizeof *heard);
	struct pollfd *p = st_xcalloc((size_t)n + 1, sizeof *p);
	int *rank_of = st_xcalloc((size_t)n + 1, sizeof *rank_of);
	double now = st__net_now(), next_beat = now;
	for (int r = 0; r < n; r++)
		heard[r] = now;
	for (;;) {
		if (now >= next_beat) {
			for (int r = 0; r < n; r++)
				send_rec(net->socks[r], REC_BEAT, net->rank);
			next_beat = now + every;
		}
		int np = 0;
		p[np++] = (struct pollfd){ .fd = net->mon_wake[0], .events = POLLIN };
		for (int r = 0; r < n; r++)
			if (net->socks[r] >= 0) {
				rank_of[np] = r;
				p[np++] = (struct pollfd){ .fd = net->socks[r], .events = POLLIN };
			}
		int k = poll(p, (nfds_t)np, (int)((next_beat - now) * 1000) + 1);
		now = st__net_now();
		/* Without a coordinator, nothing tells a death on a shared-memory
		 * endpoint (UCX reports none there): look at the processes. */
		if (!atomic_load(&net->detector_up))
			st__net_check_pids(net);
		if (k < 0)
			continue;
		if (p[0].revents)
			break;
		/* What arrived first: a process that was itself stopped for a
		 * while finds its peers' beats waiting and accuses nobody. */
		for (int i = 1; i < np; i++) {
			if (!p[i].revents)
				continue;
			int r = rank_of[i];
			heard[r] = now;
			if (net->rank == 0)
				root_event(net, r, bye);
			else
				rank_event(net, &bye0);
		}
		for (int r = 0; r < n; r++) {
			if (net->socks[r] < 0 || now - heard[r] <= silence || bye[r] || bye0)
				continue;
			if (net->rank == 0)
				root_stalled(net, r);
			else
				rank0_stalled(net);
		}
	}
	free(rank_of);
	free(p);
	free(heard);
	free(bye);
	return NULL;
}

int st__net_monitor_start(st_net_t *net)
{
	if (pipe2(net->mon_wake, O_CLOEXEC) < 0)
		return ST_EIO;
	atomic_store(&net->detector_up, 1);
	if (pthread_create(&net->mon_thread, NULL, monitor_main, net))
		st_die("net: cannot start the monitor thread");
	net->mon_started = 1;
	return ST_OK;
}

void st__net_monitor_stop(st_net_t *net)
{
	if (net->mon_started) {
		char c = 1;
		while (write(net->mon_wake[1], &c, 1) < 0 && errno == EINTR)
			;
		pthread_join(net->mon_thread, NULL);
		close(net->mon_wake[0]);
		close(net->mon_wake[1]);
		net->mon_started = 0;
	}
	st__net_boot_close(net);
}

void st__net_boot_close(st_net_t *net)
{
	if (!net->socks)
		return;
	for (int r = 0; r < net->size; r++)
		if (net->socks[r] >= 0) {
			send_rec(net->socks[r], REC_BYE, net->rank);
			close(net->socks[r]);
		}
	free(net->socks);
	net->socks = NULL;
}
