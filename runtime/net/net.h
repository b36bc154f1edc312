/*
 * net.h — processes of one job talking to each other (DESIGN.md
 * "Distributed"): bootstrap (rank, size, coordinator, job token), framed
 * point-to-point messages over UCX (shared memory on one node, TCP or RDMA
 * between nodes), a failure detector, and the few collectives training
 * needs (barrier, allgather, allreduce of floats).
 *
 * Bootstrap: rank 0 listens on the coordinator address (host:port); every
 * rank connects over TCP, presents the job token, and sends its UCX worker
 * address. Rank 0 refuses (and logs) a connection with the wrong token, and
 * when all `size` ranks are in, sends everyone the address table. The TCP
 * connections stay open for the life of the job: they are the failure
 * detector. A process that dies (even SIGKILL) closes its socket; rank 0
 * then tells every other rank "rank k died", and rank 0's own death is seen
 * by everyone as EOF. So a blocked call involving a dead rank returns
 * ST_EPEER within about a second, never hangs. Every process also sends a
 * heartbeat on these connections from its own monitor thread; a process
 * that sends nothing for timeout_s (stopped, frozen) counts as dead, while
 * one that is only slow (its workers busy) does not.
 *
 * Messages: (channel, source, bytes). Every message is framed with a magic,
 * its channel, source rank, length and an XXH3 checksum of the payload; a
 * message whose frame does not check out is logged (naming the sender) and
 * dropped, never delivered.
 *
 * Threads: every function is thread-safe; several threads may send and
 * receive at once (the owner service, the pull stage, train workers).
 * Collectives use their own channel and must be called by one thread per
 * process at a time, in the same order on every rank.
 */
#ifndef ST_NET_H
#define ST_NET_H

#include <stddef.h>
#include <stdint.h>

#define ST_NET_ANY (-1)
#define ST_NET_MAX_RANKS 4096

typedef struct st_net st_net_t;

typedef struct st_net_cfg {
	int rank;                  /* 0 .. size-1 */
	int size;                  /* >= 1 */
	char coordinator[256];     /* "host:port" of rank 0's listener */
	char token[128];           /* shared job token ("" = none, still checked) */
	double timeout_s;          /* forming the job; silence before a peer counts as
				    * stalled, hence dead (default 60) */
	char source[64];           /* where rank/size came from, for messages */
} st_net_cfg_t;

/*
 * Fills cfg from the environment, first match wins:
 *   STRATA_RANK, STRATA_WORLD_SIZE, STRATA_COORDINATOR=host:port, STRATA_TOKEN
 *   OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE   (mpirun, OpenMPI)
 *   PMI_RANK / PMI_SIZE                           (MPICH, Hydra)
 *   SLURM_PROCID / SLURM_NTASKS                   (srun)
 * STRATA_CLUSTER=FILE.yaml (or `cluster_file` when not NULL) gives the
 * coordinator, token and world size (hosts × procs_per_host) of a cluster
 * file:   hosts: [a, b]   port: 29500   procs_per_host: 2   token: "..."
 * STRATA_COORDINATOR and STRATA_TOKEN override the file. STRATA_NET_TIMEOUT
 * (seconds) overrides timeout_s. Reads the environment only; not
 * thread-safe against setenv.
 * Returns 0 when the job is not distributed (no variables, or size 1), 1
 * when it is (cfg filled), or ST_EJOB with a logged message (a rank without
 * a coordinator, a rank out of range, an unreadable cluster file).
 */
int st_net_cfg_from_env(st_net_cfg_t *cfg, const char *cluster_file);

/* A cluster file, as read by st_net_cluster_load. */
typedef struct st_net_cluster {
	char **hosts;              /* n_hosts names or addresses, rank 0's first */
	int n_hosts;
	int port;                  /* rank 0's coordinator port */
	int procs_per_host;        /* default 1 */
	char token[128];           /* "" when the file has none */
} st_net_cluster_t;

/* Reads a cluster file. Returns ST_OK (release with st_net_cluster_fini,
 * which is safe to call twice) or ST_EJOB with a logged message naming
 * file:line. Without a launcher's rank variable, a process finds its rank
 * as (index of its host) × procs_per_host + STRATA_LOCAL_RANK (or the
 * launcher's local-rank variable; 0 when procs_per_host is 1). */
int st_net_cluster_load(st_net_cluster_t *cl, const char *path);
void st_net_cluster_fini(st_net_cluster_t *cl);
/* The index of this machine in cl->hosts (by host name, short host name
 * or one of its addresses), or ST_ENOENT. */
int st_net_cluster_self(const st_net_cluster_t *cl);

/* Connects this rank to the others (see above); *out is the caller's,
 * released by st_net_close. ST_OK, ST_EPEER (refused: wrong token; a rank
 * did not arrive within timeout_s), ST_EIO (cannot listen on the port, UCX
 * failed), ST_EINVAL (cfg out of range; a build without UCX). */
int st_net_open(st_net_t **out, const st_net_cfg_t *cfg);
/* Leaves: no barrier (call st_net_barrier first for a clean end). Waits at
 * most 5 s for this rank's last messages to reach live ranks, then says
 * goodbye, so the others see a clean leave, not a death. Never hangs on
 * dead peers. No other thread may use net during or after. Safe on NULL. */
void st_net_close(st_net_t *net);

int st_net_rank(const st_net_t *net);
int st_net_size(const st_net_t *net);

/* Sends len bytes to rank dst on channel chan (< 2^16; channels >= 0xff00
 * are reserved for collectives). Returns once buf may be reused. ST_OK,
 * ST_EPEER (dst is dead), ST_ENOMEM. Sending to oneself works. */
int st_net_send(st_net_t *net, int dst, uint32_t chan, const void *buf, size_t len);
/* The same for a message in two pieces (a header and a payload) without
 * copying them together first. */
int st_net_send2(st_net_t *net, int dst, uint32_t chan, const void *a, size_t alen,
		 const void *b, size_t blen);

/* A send that returns before it is done, for callers with work to do
 * meanwhile (runtime/net/isend.c): *req (the caller's until
 * st_net_send_wait, which frees it) and buf must stay unchanged until that
 * wait. The message takes its place among this process's messages to dst
 * on chan when submitted: it arrives after those sent (or submitted)
 * before it and before those after. ST_OK, ST_EPEER (dst is dead),
 * ST_ENOMEM; *req is NULL on an error (nothing to wait for). */
typedef struct st_net_send_req st_net_send_req_t;
int st_net_send_submit(st_net_t *net, int dst, uint32_t chan, const void *buf, size_t len,
		       st_net_send_req_t **req);
/* Waits until req's send is done (buf may be reused) and frees req
 * (NULL: ST_OK at once). ST_OK, ST_EPEER (dst died before it got the
 * message). */
int st_net_send_wait(st_net_t *net, st_net_send_req_t *req);

/* Receives the next message on chan from rank src (or ST_NET_ANY): *buf is
 * malloc'd (free it), *len its length, *from the sender. Waits at most
 * timeout_s (< 0: forever). Returns ST_OK; ST_EAGAIN on timeout; ST_EPEER
 * when src is a specific rank that died or left, once everything it sent
 * has been delivered (or, for ST_NET_ANY, when every other rank has died
 * or left); ST_ECANCELED after st_net_cancel. Thread-safe. Messages of one
 * sender on one channel arrive in the order sent. */
int st_net_recv(st_net_t *net, int src, uint32_t chan, void **buf, size_t *len,
		int *from, double timeout_s);

/* Gives a buffer that st_net_recv returned back to net instead of freeing
 * it: a later message of about its size (64 KiB and up) then arrives in
 * its warm pages, where a fresh malloc'd buffer costs a page fault per
 * page whenever glibc had trimmed the heap (several large messages in
 * flight). For the caller it is free(buf): free() stays correct for any
 * buffer, and NULL is ignored. Thread-safe. */
void st_net_release(st_net_t *net, void *buf);

/* Wakes every thread blocked in st_net_recv with ST_ECANCELED, now and
 * later (shutdown). */
void st_net_cancel(st_net_t *net);

/* Failure detector: 1 while rank r is alive as far as we know (0 once it
 * died, stalled — no heartbeat for timeout_s — or left with st_net_close). */
int st_net_alive(const st_net_t *net, int r);
/* Number of ranks known dead (not counting those that left cleanly), and
 * the lowest such rank in *first (-1). */
int st_net_dead(const st_net_t *net, int *first);

/* Collectives (one thread per process at a time, same order everywhere).
 * Each returns ST_OK, or ST_EPEER naming the rank in the log: at once when
 * a rank has died, once a rank has sent no heartbeat for timeout_s (a live
 * rank that is slow to join is waited for), and when the ranks called
 * different collectives or sizes. */
int st_net_barrier(st_net_t *net);
/* Every rank contributes len bytes; out[r * len ..] receives rank r's. */
int st_net_allgather(st_net_t *net, const void *mine, size_t len, void *out);
/* Sums buf[0..n) over the ranks into buf on every rank. Deterministic: every
 * element is summed in rank order, ((x0 + x1) + x2) + ..., so the result is
 * the same bits on every rank and in every run. */
int st_net_allreduce_f32(st_net_t *net, float *buf, size_t n);
/* Rank root's len bytes into buf on every rank. */
int st_net_bcast(st_net_t *net, int root, void *buf, size_t len);

/* Bytes this process has sent to other ranks (payload + frame), and
 * messages; for metrics. */
uint64_t st_net_bytes_sent(const st_net_t *net);
uint64_t st_net_msgs_sent(const st_net_t *net);
/* Of st_net_bytes_sent, those of the collectives (allreduce, allgather,
 * bcast, barrier: channels >= 0xff00) — a lockstep policy's dense traffic,
 * where the rest is rows to and from their owners. */
uint64_t st_net_bytes_sent_coll(const st_net_t *net);
/* Message rounds of the collectives this process took part in: each
 * collective counts the rounds on its critical path (allreduce 2,
 * allgather 1, barrier and bcast ceil(log2 P); none at P = 1), the latency
 * terms of a step-time model (docs/benchmarks.md, "Scaling model"). */
uint64_t st_net_coll_rounds(const st_net_t *net);

#endif
