/*
 * net_internal.h — the transport's private layout, shared by its modules:
 * cfg.c (rank, size and coordinator from the environment or a cluster
 * file), boot.c (the TCP rendezvous at rank 0 and the failure monitor),
 * net.c (open/close, the UCX worker and its progress thread, sending,
 * receiving frames), inbox.c (per-channel queues, st_net_recv, peer states)
 * and coll.c (collectives). Nothing else includes it except the unit test,
 * which uses the test-only functions at the end.
 *
 * Locking: two locks. `wmu` serializes every call into UCX (the worker runs
 * in UCS_THREAD_MODE_SERIALIZED; UCX callbacks run inside
 * ucp_worker_progress, so under wmu). `mu` guards the inbox, the peer
 * states and the send completions. Lock order: wmu before mu (a UCX
 * callback delivering a message takes mu). Nobody takes wmu while holding
 * mu, and no lock is held while blocking on a socket. `pool_mu` (pool.c,
 * the collectives' receive buffers) is a leaf: nothing is taken under it.
 */
#ifndef ST_NET_INTERNAL_H
#define ST_NET_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "runtime/net/net.h"
#include "st_config.h"

#if ST_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

/* ---- wire format ---------------------------------------------------------- */

/*
 * Every message is one UCX tagged message: a frame header, then the
 * payload. The tag repeats channel and source (so a receiver can keep the
 * per-(channel, source) order from the moment a message is matched, before
 * its bytes have arrived) and carries a magic in its low 32 bits.
 */
#define ST__NET_FRAME_MAGIC 0x314e5453u  /* "STN1" little-endian */
#define ST__NET_FRAME_VERSION 1u
/* In the version field's high byte: the payload is not hashed (hash 0).
 * A sender leaves it so only to a peer on shared memory (the bytes never
 * cross a wire, and hashing them on both sides took a fifth of a 1 MiB
 * stream's cycles: docs/benchmarks.md, "Unhashed frames on shared
 * memory") or to itself. A receiver takes either kind: the checksum
 * guards against damage in transit, not against a peer (whoever can
 * forge a frame can hash it), and every other check still applies. */
#define ST__NET_FRAME_UNHASHED 0x100u
#define ST__NET_TAG_MAGIC 0x53544e31u
/* A large message in one block, payload first and frame last (net.c, FLAT). */
#define ST__NET_TAG_MAGIC_FLAT 0x53544e32u
/* A message without a frame: the payload alone, as one contiguous block,
 * between ranks on shared memory only (net.c, BARE). */
#define ST__NET_TAG_MAGIC_BARE 0x53544e33u
/* A large framed message in two (net.c, SPLIT): the frame and the small
 * head piece, then the body alone under ST__NET_TAG_MAGIC_BODY, which the
 * receiver joins to the head before it checks the frame. */
#define ST__NET_TAG_MAGIC_SPLIT 0x53544e35u
#define ST__NET_TAG_MAGIC_BODY 0x53544e36u
/* A frameless message that waits for a receive posted into its place
 * (net.c, DIRECT): the only magic with ST__NET_TAG_DIRECT_BIT set, which
 * the progress thread's probe leaves alone. */
#define ST__NET_TAG_DIRECT_BIT 0x80000000u
#define ST__NET_TAG_MAGIC_DIRECT (0x53544e34u | ST__NET_TAG_DIRECT_BIT)
#define ST__NET_TAG(chan, src) \
	(((uint64_t)(chan) << 48) | ((uint64_t)(uint16_t)(src) << 32) | ST__NET_TAG_MAGIC)
#define ST__NET_COLL_CHAN 0xff00u

typedef struct st__net_frame {
	uint32_t magic;
	uint16_t version;
	uint16_t chan;
	uint32_t src;
	uint32_t dst;
	uint64_t len;    /* payload bytes */
	uint64_t hash;   /* XXH3-64 of the payload, seeded with st__net_frame_seed */
} st__net_frame_t;

/* The seed of a frame's payload hash: XXH3 of the fields before `hash`, so
 * one 64-bit check covers header and payload. */
uint64_t st__net_frame_seed(const st__net_frame_t *f);

/* XXH3-64 of a then b (blen may be 0), seeded: libxxhash's loop (the
 * reference) and the AVX2 loop (frame_avx2.c; only where the CPU has AVX2),
 * the same bits. */
uint64_t st__net_hash_ref(uint64_t seed, const void *a, size_t alen, const void *b,
			  size_t blen);
uint64_t st__net_hash_avx2(uint64_t seed, const void *a, size_t alen, const void *b,
			   size_t blen);

/* Fills in f for a message of a (+ b) from src to dst on chan. */
void st__net_frame_fill(st__net_frame_t *f, int src, int dst, uint32_t chan, const void *a,
			size_t alen, const void *b, size_t blen);

/* Fills in f for a message of len bytes without hashing its payload
 * (ST__NET_FRAME_UNHASHED: to a peer on shared memory, or to oneself). */
void st__net_frame_fill_unhashed(st__net_frame_t *f, int src, int dst, uint32_t chan,
				 size_t len);

/* Checks a received frame against the tag it came with and the payload
 * (its hash unless it is ST__NET_FRAME_UNHASHED). Returns NULL when it is
 * good, else a static reason for the log. */
const char *st__net_frame_check(const st__net_frame_t *f, int tag_src, uint32_t tag_chan,
				int me, const void *payload, size_t len);

/* A monotonic-clock reading in seconds. */
static inline double st__net_secs(const struct timespec *ts)
{
	return (double)ts->tv_sec + (double)ts->tv_nsec * 1e-9;
}

/* Seconds on the monotonic clock. */
static inline double st__net_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return st__net_secs(&ts);
}

/* cfg.c: splits "host:port" or "[v6]:port". Returns ST_OK or ST_EINVAL. */
int st__net_split_hostport(const char *s, char *host, size_t hostsz, int *port);
/* cfg.c: the name of the network interface this machine reaches
 * `coordinator` ("host:port") through — the one holding the source address
 * of the route to it, so the coordinator's own interface on rank 0 and the
 * loopback for a loopback coordinator — into name[n]. Returns ST_OK;
 * ST_EINVAL for a coordinator that is not host:port; ST_ENOENT when the
 * host does not resolve or no interface holds that address. Sends
 * nothing. Thread-safe. */
int st__net_job_iface(const char *coordinator, char *name, size_t n);

/* ---- peers and the inbox --------------------------------------------------- */

/* Peer states. PEER_STALLED is only ever passed to st__net_mark_gone: the
 * peer becomes PEER_DEAD (with `stalled` set), since a process that sent no
 * sign of life for timeout_s is treated as one that died. */
enum { PEER_ALIVE = 0, PEER_LEFT, PEER_DEAD, PEER_STALLED };

typedef struct st__net_msg {
	struct st__net_msg *next;
	int src;
	int ready;       /* payload arrived and checked */
	size_t len;
	void *buf;       /* malloc'd payload, handed to the receiver */
	st__net_frame_t hdr;
	int trailer;     /* a large message: its frame follows the payload in buf (net.c) */
	int bare;        /* it came without a frame (net.c, BARE): hdr is filled in here */
	int queued;      /* in its channel's list (net.c adds it at arrival or completion) */
	/* SPLIT (net.c): its frame and head piece arrive in head (head_len
	 * bytes after the frame), its body in buf + head_len; parts counts
	 * the halves not yet in, part_status keeps the first error (wmu). */
	void *head;
	size_t head_len;
	int parts;
	int part_status;
	uint32_t chan;
	struct st_net *net;
#if ST_HAVE_UCX
	ucp_dt_iov_t iov[2];
	/* Its receive is being posted (net.c post_recv_locked): a callback that comes
	 * already, inside the post, only records its status here. */
	int posting, early;
	ucs_status_t early_status;
#endif
} st__net_msg_t;

typedef struct st__net_chan {
	st__net_msg_t *head, *tail;
	pthread_cond_t cv;
	struct st__net_chan *next_alloc;   /* list of every channel, for wakeups */
} st__net_chan_t;

typedef struct st__net_peer {
	int state;          /* PEER_ALIVE, PEER_LEFT or PEER_DEAD, under mu (stored
			     * atomically: net.c's peer_usable reads it without) */
	int stalled;        /* dead because it went silent, not because it exited (mu) */
#if ST_HAVE_UCX
	ucp_ep_h ep;        /* under wmu; NULL once closed */
	int ep_failed;      /* UCX reported an error on ep (under wmu) */
	int shm;            /* ep has no UCX peer error handling (same host: shared
			     * memory); only the monitor tells this peer's death.
			     * Set before the job starts, read-only after. */
	int pid;            /* its process id, for a shm peer (same pid namespace) */
	ucp_ep_h dead_ep;   /* a gone peer's shm ep, which UCX will not force-close;
			     * ucp_worker_destroy releases it (wmu) */
	struct st__net_msg *split;   /* its SPLIT message whose body is still to
				      * come (net.c take_locked; wmu) */
#endif
	int rank;
	struct st_net *net;
} st__net_peer_t;

/* What UCX holds of a send in flight: its own copy of the frame header and
 * the iov, on the heap, so that a waiter may give the send up (the peer is
 * gone, net.c st__net_wait) and return, freeing its st__net_sreq_t, while
 * UCX still has the request. The completion callback frees it. */
typedef struct st__net_ticket {
	struct st__net_sreq *req;       /* NULL once given up (mu) */
	struct st__net_ticket *next;    /* in net->abandoned once given up (mu) */
	struct st_net *net;
	st__net_frame_t hdr;
	void *flat;                     /* a large send's payload + frame in one block (pool.c) */
#if ST_HAVE_UCX
	ucp_dt_iov_t iov[3];
#endif
} st__net_ticket_t;

/* A posted send, until st__net_wait returns for it. */
typedef struct st__net_sreq {
	st__net_frame_t hdr;
	int done;           /* under mu */
	int imm;            /* done inside the post, by its poster (no lock needed) */
	int status;
	int dst;
	struct st_net *net;
	st__net_ticket_t *ticket;   /* UCX's part while in flight (mu) */
} st__net_sreq_t;

struct st_net {
	st_net_cfg_t cfg;
	int rank, size;

	/* inbox (inbox.c), under mu */
	pthread_mutex_t mu;
	pthread_cond_t sent_cv;        /* a send completed */
	st__net_chan_t **chans;        /* 65536 slots, allocated on first use */
	st__net_chan_t *all_chans;
	int canceled;
	int n_gone, n_dead;
	st__net_peer_t *peers;         /* size entries */

	/* counters */
	atomic_uint_fast64_t bytes_sent, msgs_sent, frames_dropped, frames_unhashed;
	atomic_uint_fast64_t msgs_bare;         /* of frames_unhashed: received frameless (BARE) */
	atomic_uint_fast64_t msgs_imm;          /* sends done inside their post, no ticket (wmu) */
	atomic_uint_fast64_t msgs_flat;         /* sends that went FLAT */
	atomic_uint_fast64_t msgs_split;        /* sends that went SPLIT */
	atomic_uint_fast64_t arms;              /* the progress thread's ucp_worker_arm calls */
	atomic_uint_fast64_t bytes_sent_coll;   /* of bytes_sent: on channels >= 0xff00 */
	atomic_uint_fast64_t coll_rounds;       /* st_net_coll_rounds */

	/* collectives (coll.c), used by one thread at a time */
	uint64_t coll_seq;
	size_t coll_seg;               /* allreduce segment, floats (ST__NET_COLL_SEG) */
	size_t flat_min;               /* sends of this many bytes and up go flat (0: none; net.c) */
	size_t flat_min_net;           /* the same on the collectives' channel and over the network */
	int mpi_on;                    /* allreduce through MPI (coll_mpi.c) */
	int mpi_owned;                 /* we called MPI_Init, so we finalize */
	uint64_t mpi_calls;            /* allreduces through MPI so far */

	/* receive buffers of the collectives (pool.c), under pool_mu */
	pthread_mutex_t pool_mu;
	struct st__net_pooled { void *buf; size_t cap; } *pool;
	int pool_n;
	size_t pool_bytes;
	uint64_t pool_hits;

#if ST_HAVE_UCX
	/* UCX (net.c) */
	pthread_mutex_t wmu;
	ucp_context_h ctx;
	ucp_worker_h worker;
	ucp_address_t *addr;
	size_t addr_len;
	int worker_fd, wake_fd, epfd;
	pthread_t progress_thread;
	int progress_started;
	atomic_int stop;
	atomic_int inflight;           /* UCX requests not yet completed */
	atomic_int closing;            /* of them: flushes and closes (st_net_close waits) */
	atomic_int eps_failed;         /* some peer's ep reported an error */
	atomic_int wake_owed;          /* a send was posted; st__net_kick wakes the progress thread */
	atomic_uint spins;             /* st__net_spin calls begun (progress_main's "polled" clock) */
	atomic_int spinning;           /* threads inside st__net_spin now */
	atomic_int napping;            /* the progress thread waits without the worker armed */
	atomic_int arm_now;            /* st__net_kick: arm and sleep on the worker at once */
	atomic_uint progressed;        /* events of progress_locked, whoever ran it (st__net_spin) */
	int shm_allowed;               /* STRATA_NET_SHM is not 0 */
	int hash_shm;                  /* STRATA_NET_CHECKSUM=all: frames to shm peers hashed */
	int hash_links;                /* frames over network links hashed (not with =none) */
	st__net_ticket_t *abandoned;   /* sends given up while UCX held them (mu) */
#endif

	/* bootstrap and failure monitor (boot.c) */
	int *socks;                    /* rank 0: one per rank (-1 for itself); others: socks[0] */
	int mon_wake[2];               /* pipe that stops the monitor */
	pthread_t mon_thread;
	int mon_started;
	atomic_int detector_up;        /* the coordinator connections still work */
	int sent_bye;
};

/* coll_mpi.c: STRATA_NET_COLL (0 strata, 1 mpi, -1 logged error); joining
 * MPI (collective: every rank at st_net_open), leaving it, and the
 * allreduce through it. */
int st__net_coll_choice(void);
int st__net_mpi_open(st_net_t *net);
void st__net_mpi_close(st_net_t *net);
int st__net_mpi_allreduce(st_net_t *net, float *buf, size_t n);

/* inbox.c */
int st__net_inbox_init(st_net_t *net);
void st__net_inbox_fini(st_net_t *net);
/* Takes ownership of m (ready or not) and appends it to its channel, under
 * mu. Returns ST_ENOMEM when the channel cannot be allocated (m is left to
 * the caller). */
int st__net_inbox_add_locked(st_net_t *net, st__net_msg_t *m);
/* Removes m from its channel (under mu) and frees it. */
void st__net_inbox_drop_locked(st_net_t *net, st__net_msg_t *m);
/* Wakes every thread waiting on any channel (under mu). */
void st__net_wake_all_locked(st_net_t *net);
/* Marks rank r gone (PEER_LEFT, PEER_DEAD or PEER_STALLED) and wakes the
 * waiters; logs a death as "rank r died (why)", a stall as "rank r why".
 * Returns 1 if the state changed. Takes mu. */
int st__net_mark_gone(st_net_t *net, int r, int how, const char *why);
/* 1 when rank r was declared dead because it went silent (a stall). */
int st__net_stalled(st_net_t *net, int r);
/* st_net_recv with an extra for collectives: fail_any makes the call
 * return ST_EPEER as soon as any rank has died (*gone = the lowest such).
 * A rank that left cleanly fails only a receive from it: it flushed its
 * messages before leaving, so it may well have finished its part. */
int st__net_recv(st_net_t *net, int src, uint32_t chan, void **buf, size_t *len, int *from,
		 double timeout_s, int fail_any, int *gone);

/* pool.c: large receive buffers of the collectives' channel, reused. */
typedef struct st__net_pooled st__net_pooled_t;
#define ST__NET_POOL_MIN ((size_t)64 << 10)   /* smaller ones: plain malloc */
void st__net_pool_init(st_net_t *net);
void st__net_pool_fini(st_net_t *net);
/* A buffer of at least len bytes (len >= ST__NET_POOL_MIN: from the cache
 * when one fits), malloc'd either way: free() or st__net_pool_put releases
 * it. NULL when out of memory. Thread-safe. */
void *st__net_pool_get(st_net_t *net, size_t len);
/* Gives a malloc'd buffer back to the cache, or frees it. Thread-safe. */
void st__net_pool_put(st_net_t *net, void *buf);
/* Test-only: how many st__net_pool_get calls the cache served. */
uint64_t st__net_pool_hits(st_net_t *net);

/* coll.c: the allreduce moves each rank's chunk in segments of this many
 * floats (1 MiB), so that adding, sending and receiving overlap. Measured
 * on the 2-core VM (docs/benchmarks.md, "Collectives against OpenMPI"):
 * 64Ki-float segments lost up to 2x at P = 2 to per-message costs (a
 * rendezvous handshake each), 1Mi-float ones gained nothing over 256Ki. */
#define ST__NET_COLL_SEG ((size_t)256 << 10)

/* net.c */
/* Posts a send of a (+ b) to dst on chan (any channel, reserved ones too).
 * req must stay put until st__net_wait returns for it. */
int st__net_post(st_net_t *net, st__net_sreq_t *req, int dst, uint32_t chan,
		 const void *a, size_t alen, const void *b, size_t blen);
/* Posts a DIRECT send (net.c) of len bytes at buf to dst on chan; only
 * where st__net_bare(net, dst). Its receiver takes it with
 * st__net_recv_direct. Otherwise as st__net_post. */
int st__net_post_direct(st_net_t *net, st__net_sreq_t *req, int dst, uint32_t chan,
			const void *buf, size_t len);
/* Receives the next DIRECT message from src on chan into buf, which must
 * be exactly len bytes. Waits as long as src lives (and, with fail_any,
 * while no rank is dead: then *gone is src, or -1 for another rank).
 * ST_OK; ST_EPEER (the rank is gone, or the message had another length:
 * logged). Never leaves a receive into buf behind. */
int st__net_recv_direct(st_net_t *net, int src, uint32_t chan, void *buf, size_t len,
			int fail_any, int *gone);
/* 1 when a message of one piece to dst goes frameless (net.c, BARE): dst
 * is another rank on shared memory, and STRATA_NET_CHECKSUM is not all. */
int st__net_bare(const st_net_t *net, int dst);
/* Waits until every one of reqs[0..n) posted successfully has completed.
 * Returns ST_OK or the first error. */
int st__net_wait(st_net_t *net, st__net_sreq_t *reqs, int n);
/* How long a thread waiting for a message or a send progresses the UCX
 * worker itself before it sleeps. */
#define ST__NET_POLL_S 50e-6
/* A waiter's busy-poll (net.c): progresses the worker until something
 * happened (a progress call did work, here or in another thread), another
 * thread holds wmu, or the clock passes `until` (st__net_now). Returns 0
 * when `until` passed, 1 otherwise: look again. Call without locks. */
int st__net_spin(st_net_t *net, double until);
/* Wakes the progress thread if a send was posted since it was last woken
 * (net.c): a thread that posted calls it before it sleeps or leaves the
 * send in flight. Takes no lock. */
void st__net_kick(st_net_t *net);
/* Marks dead every shared-memory peer whose process no longer exists.
 * The monitor calls it once the coordinator is gone: then nobody else
 * would tell such a peer's death (UCX reports nothing on those
 * endpoints). */
void st__net_check_pids(st_net_t *net);
/* The monitor learned that rank r left or died: deliver what already
 * arrived from it, mark it, close its endpoint. */
void st__net_peer_gone(st_net_t *net, int r, int how, const char *why);

/* boot.c */
/* The rendezvous: rank 0 collects every rank's worker address, checks
 * tokens and hands out the table; *addrs (size entries, each malloc'd, and
 * the array) and *lens belong to the caller. Leaves the coordinator
 * connections in net->socks. */
int st__net_boot(st_net_t *net, const void *addr, size_t addr_len, void ***addrs,
		 size_t **lens);
int st__net_monitor_start(st_net_t *net);
/* Says goodbye to the coordinator (or, on rank 0, to everyone), stops the
 * monitor thread and closes the sockets. Safe when never started. */
void st__net_monitor_stop(st_net_t *net);
void st__net_boot_close(st_net_t *net);

/* ---- test-only ---------------------------------------------------------------- */

/* The transports UCX chose for the endpoint to rank r, as "tl/dev" names
 * separated by spaces ("posix/memory cma/memory"), into out[n]; "" for
 * oneself or a closed endpoint. Returns the length, or ST_EIO when UCX's
 * description could not be read. Takes wmu. */
int st__net_ep_transports(st_net_t *net, int r, char *out, size_t n);
/* 1 when the endpoint to rank r was made for shared memory (same host, no
 * UCX peer error handling). */
int st__net_ep_shm(st_net_t *net, int r);

/* Sends len raw bytes as one message to dst, tagged as if on chan from this
 * rank with the tag magic `magic` (ST__NET_TAG_MAGIC: a framed message),
 * without a frame of its own: lets a test deliver truncated or corrupt
 * frames. */
int st__net_send_raw(st_net_t *net, int dst, uint32_t chan, uint32_t magic,
		     const void *bytes, size_t len);
/* Frames this process dropped because they did not check out. */
uint64_t st__net_frames_dropped(const st_net_t *net);
/* Frames from other ranks this process took unhashed (shared memory). */
uint64_t st__net_frames_unhashed(const st_net_t *net);
/* Of those, the messages that came without a frame at all (net.c, BARE). */
uint64_t st__net_msgs_bare(const st_net_t *net);
/* Sends to other ranks that completed inside their post, with no ticket
 * (net.c, post: small messages). */
uint64_t st__net_msgs_imm(const st_net_t *net);
/* Sends that went flat (net.c, FLAT). */
uint64_t st__net_msgs_flat(const st_net_t *net);
/* Sends that went in two, frame and head then body (net.c, SPLIT). */
uint64_t st__net_msgs_split(const st_net_t *net);
/* Times the progress thread armed the worker to sleep on it (net.c,
 * progress_main: not while other threads poll it). */
uint64_t st__net_arms(const st_net_t *net);

#endif
