/*
 * net.c — the UCX side of the transport: opening and closing a job's
 * connections, the progress thread, and sending and receiving frames.
 *
 * One UCX worker per process, serialized by our own lock (wmu; see
 * net_internal.h for the lock order). Messages are UCX tagged messages
 * (frame header + payload, sent as an iov so nothing is copied together;
 * large ones as one block, FLAT, or in two, SPLIT; to a rank on shared
 * memory without a frame, BARE); the tag carries channel, source and a
 * magic that names the layout. The tag API delivers the
 * messages of one sender in the order sent, and the progress thread keeps
 * that order: it probes every arriving message, appends it to its channel
 * at once (before a large payload has arrived) and receives the payload
 * into a malloc'd buffer, which the receiver takes over. So a sender never
 * waits for its receiver's application thread, only for its progress
 * thread, and no receive is ever posted into an application's buffer (no
 * receive to cancel on a timeout).
 *
 * Locks: wmu, then mu (net_internal.h); UCX callbacks run under wmu.
 *
 * Threads: "st-net-io-0" runs ucp_worker_progress, probes, and sleeps in
 * epoll on the worker's event fd and an eventfd that senders write when
 * they leave a request in flight — or, while other threads poll the
 * worker themselves, naps on the eventfd alone with the worker unarmed
 * (progress_main). Application threads post sends under
 * wmu and wait for completion on sent_cv. A thread about to wait (for a
 * message or a send) first progresses the worker itself for up to
 * ST__NET_POLL_S when nobody else holds wmu (st__net_spin): an answer
 * already on its way then needs no wake-up of the progress thread and no
 * handoff through a condition variable, which was most of the one-way
 * latency (docs/benchmarks.md, "Transport": 50 -> 12-18 us on 2 cores).
 * The monitor thread (boot.c) calls st__net_peer_gone.
 *
 * Listeners: UCX's TCP transport listens on each network device it uses,
 * so the worker is given only the interface that reaches the coordinator
 * (pick_devices): the loopback for a job on one machine.
 *
 * Failure: endpoints to other hosts use UCP_ERR_HANDLING_MODE_PEER; those
 * to processes of this host use none, so that UCX can pick shared memory
 * (create_eps; STRATA_NET_SHM=0 turns that off). When a rank is known
 * gone, a PEER endpoint is closed with FORCE, which completes every
 * request to it with an error, so no send waits for a dead rank. A
 * shared-memory endpoint cannot be force-closed and UCX reports nothing on
 * it: its senders give their requests up once the rank is marked gone
 * (give_up_locked), and the endpoint waits for ucp_worker_destroy. A UCX
 * error on an endpoint makes later sends to that rank fail; the rank
 * counts as dead only when the coordinator says so (or, once no
 * coordinator is left, on the UCX error itself, and for a shared-memory
 * peer when its process no longer exists: st__net_check_pids). Peer error
 * handling also keeps UCX's TCP rendezvous off zero-copy put (TCP's memory
 * domain cannot invalidate a canceled put: openucx/ucx#11929), which is
 * most of what TCP messages lose to plain ucx_perftest; the price of
 * knowing a peer died.
 */
#include <assert.h>
#include <dirent.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/trace.h"
#include "runtime/net/net_internal.h"

#define CLOSE_WAIT_S 5.0   /* st_net_close waits at most this for its last messages */

/* Messages up to IMM_MAX bytes are sent as ones that must complete at
 * once (post) over TCP; to a rank on shared memory up to IMM_MAX_SHM. */
#define IMM_MAX 1024
#define IMM_MAX_SHM 64

/* What a UCX post returned is a request still in flight (not a status:
 * done at once, or failed). */
static int in_flight(ucs_status_ptr_t sp) { return UCS_PTR_IS_PTR(sp) && sp; }

/* in_flight, and then counted in net->inflight until its callback uncounts
 * it: what every post whose request calls back into the net does. */
static int track(st_net_t *net, ucs_status_ptr_t sp)
{
	if (!in_flight(sp))
		return 0;
	atomic_fetch_add(&net->inflight, 1);
	return 1;
}

static int status_rc(ucs_status_t s)
{
	return s == UCS_OK ? ST_OK : s == UCS_ERR_NO_MEMORY ? ST_ENOMEM : ST_EPEER;
}

static void wake_progress(st_net_t *net)
{
	uint64_t one = 1;
	while (write(net->wake_fd, &one, sizeof one) < 0 && errno == EINTR)
		;
}

/* Takes the wake-ups wake_progress left in wake_fd (non-blocking: none
 * left is fine, the wake-up is what counted). */
static void drain_wake(st_net_t *net)
{
	uint64_t v;
	ssize_t n = read(net->wake_fd, &v, sizeof v);
	(void)n;
}

/* ---- receiving ----------------------------------------------------------------- */

/* FLAT: a send of at least net->flat_min bytes (frame included), and on
 * the collectives' channel or to a rank over the network one of at least
 * net->flat_min_net, travels as one contiguous block on both sides, payload
 * first and the frame behind it, under its own tag magic
 * (ST__NET_TAG_MAGIC_FLAT), so the receiver knows the layout from the tag
 * whatever its own setting. Why: UCX 1.13 moves a rendezvous whose sender
 * or receiver uses an iov in bcopy fragments (ucp_rndv_progress_am_bcopy:
 * on shared memory a copy into the FIFO and one out of it; over TCP 8 KiB
 * sends), where a contiguous one is a single zero-copy read by the
 * receiver (CMA) or one large socket send, as ucx_perftest's. The frame
 * goes last so that the payload starts the receive buffer, which the
 * receiver takes over and frees as it is. The sender's copy of the payload
 * into its block is the price. Measured on the 16-core machine
 * (bench/device.sh flat, docs/benchmarks.md "Scale-out on 16 cores"): the
 * allreduce of 2M floats took 15-20% less time flat (P = 4: 5.6 vs 6.6 ms,
 * P = 8: 9.8 vs 12.3), where many messages are in flight and a copy less
 * counts; one stream of point-to-point messages on shared memory was 20-30%
 * slower (1 MiB: 3.3 vs 4.6 GB/s), the sender's copy being on its critical
 * path. Over TCP the copy is cheap next to the wire: a stream of 1 MiB
 * messages on the loopback went from 1.3 to 2.3-2.7 GB/s flat (2-core VM,
 * docs/benchmarks.md "Flat messages over TCP"). Hence flat by default on
 * the collectives' channel and to ranks over the network, 64 KiB and up;
 * point-to-point on shared memory never (a message of one piece goes BARE
 * there anyway). STRATA_NET_FLAT_MIN=N sets N bytes for every channel and
 * peer (0: never flat). */
#define FLAT_MIN_NET_DEFAULT ((size_t)64 << 10)

/* BARE: a message of one piece (st_net_send, st_net_send_submit; a
 * send2 whose header or payload is empty) to a peer on shared memory goes
 * without a frame at all: the caller's bytes, contiguous, under the tag
 * magic ST__NET_TAG_MAGIC_BARE, and the receiver fills in the frame
 * (unhashed) from the tag and the length. On shared memory an unhashed
 * frame says nothing the tag does not (channel, source, length), so this
 * costs no check; what it saves is the sender's copy into a flat block,
 * or UCX's copies of an iov through its FIFO: the receiver reads the
 * caller's buffer directly (CMA), once, as ucx_perftest's tag_bw does.
 * A receiver takes a bare message from any rank, as it takes an unhashed
 * frame: it cannot check that the sender is on shared memory, since a
 * peer's first messages may arrive before this rank has read the address
 * table that says so. STRATA_NET_CHECKSUM=all turns bare sends off with
 * the unhashed frames; STRATA_NET_CHECKSUM=none sends bare (and unhashed)
 * to every rank, over the network too: for fabrics that check their
 * packets end to end themselves (InfiniBand's and RoCE's ICRC), where a
 * second hash on both sides only costs CPU. Over TCP a 1 MiB stream then
 * keeps the sender's copy into a flat block and both sides' hashing off
 * its path (docs/benchmarks.md, "What a framed message costs over TCP"). */

int st__net_bare(const st_net_t *net, int dst)
{
	return dst != net->rank && !net->hash_shm && (net->peers[dst].shm || !net->hash_links);
}

/* Adds 1 to a counter that is only written under one lock (mu, or wmu
 * for msgs_imm): a plain load and store, where an atomic add (a locked
 * instruction) cost more than the rest of a small message's bookkeeping.
 * Readers load it atomically. */
static void bump_locked(atomic_uint_fast64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* A received message's payload is in: check it, then deliver or drop it
 * (queued: in its channel already; otherwise it joins it here, ready). */
static void recv_finished(st__net_msg_t *m, ucs_status_t s)
{
	st_net_t *net = m->net;
	if (m->trailer && s == UCS_OK)
		memcpy(&m->hdr, (const char *)m->buf + m->len, sizeof m->hdr);
	const char *why = s != UCS_OK ? ucs_status_string(s)
		: st__net_frame_check(&m->hdr, m->src, m->chan, net->rank, m->buf, m->len);
	const int src = m->src, queued = m->queued > 0;
	const uint32_t chan = m->chan;
	int lost = m->queued < 0;   /* no memory for its channel (take_locked) */
	pthread_mutex_lock(&net->mu);
	if (!why) {
		if (m->hdr.version & ST__NET_FRAME_UNHASHED)
			bump_locked(&net->frames_unhashed);
		if (m->bare)
			bump_locked(&net->msgs_bare);
		m->ready = 1;
		if (queued)
			pthread_cond_broadcast(&net->chans[m->chan]->cv);
		else if (!lost)   /* taken and received in one go (take_locked) */
			lost = st__net_inbox_add_locked(net, m) < 0;
	} else if (queued) {
		st__net_inbox_drop_locked(net, m);   /* frees m */
	}
	pthread_mutex_unlock(&net->mu);
	if ((why && !queued) || lost) {
		free(m->buf);
		free(m);
	}
	if (lost && !why)
		st_error("net: out of memory for channel %u: dropped a message from rank %d", chan,
			 src);
	else if (why && s == UCS_OK) {
		atomic_fetch_add(&net->frames_dropped, 1);
		st_warn("net: dropped a malformed message from rank %d on channel %u: %s", src,
			chan, why);
	} else if (why) {
		st_debug("net: a message from rank %d was lost in transit: %s", src, why);
	}
}

/* A receive's callback: frees UCX's request; 1 when the receive is still
 * being posted (post_recv_locked), which then finishes it. UCX completed a
 * receive inside ucp_tag_msg_recv_nbx and still returned the request when
 * the sender's endpoint was purged (a dead peer, ucp_ep_req_purge);
 * finishing it in the callback freed m under the poster's feet
 * (dist_crash, ASan). */
static int completed_early(st__net_msg_t *m, void *req, ucs_status_t s)
{
	ucp_request_free(req);
	if (!m->posting) {
		atomic_fetch_sub(&m->net->inflight, 1);
		return 0;
	}
	m->early = 1;
	m->early_status = s;
	return 1;
}

/* Posts the receive of a probed message into `into` (count items of dt)
 * with callback cb, user data m. Returns what ucp_tag_msg_recv_nbx did:
 * a request still in flight, or the status of one done at once (its
 * callback's too, completed_early), which the caller finishes. */
static ucs_status_ptr_t post_recv_locked(st_net_t *net, st__net_msg_t *m, ucp_tag_message_h msg,
					 void *into, size_t count, ucp_datatype_t dt,
					 ucp_tag_recv_nbx_callback_t cb)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				  UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE,
				  .cb.recv = cb, .user_data = m, .datatype = dt };
	m->posting = 1;
	m->early = 0;
	ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(net->worker, into, count, msg, &p);
	m->posting = 0;
	if (m->early)
		return UCS_STATUS_PTR(m->early_status);
	track(net, sp);
	return sp;
}

static void recv_cb(void *req, ucs_status_t s, const ucp_tag_recv_info_t *info, void *user)
{
	if (!completed_early(user, req, s))
		recv_finished(user, s);
}

static void junk_cb(void *req, ucs_status_t s, const ucp_tag_recv_info_t *info, void *user)
{
	atomic_fetch_sub(&((st_net_t **)user)[0]->inflight, 1);
	ucp_request_free(req);
	free(user);
}

/* Receives and discards a message that is not a frame at all (or that we
 * have no memory for): into a small buffer, the rest is truncated away. */
static void discard_locked(st_net_t *net, ucp_tag_message_h msg, const char *why, int src,
			   size_t len)
{
	atomic_fetch_add(&net->frames_dropped, 1);
	st_warn("net: dropped a malformed message (%zu bytes, tagged as from rank %d): %s", len,
		src, why);
	st_net_t **junk = st_xmalloc(64);
	junk[0] = net;
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				  UCP_OP_ATTR_FIELD_USER_DATA,
				  .cb.recv = junk_cb, .user_data = junk };
	ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(net->worker, junk + 1, 64 - sizeof *junk, msg, &p);
	if (!track(net, sp))
		free(junk);
}

/* ---- SPLIT messages, received (the sender's side: post) -------------------------- */

/* Half of a SPLIT message is in (or failed): once both are, the head piece
 * goes in front of the body, the frame into hdr, and the whole is checked
 * and delivered as any other message. Under wmu. */
static void part_done(st__net_msg_t *m, ucs_status_t s)
{
	if (s != UCS_OK && m->part_status == UCS_OK)
		m->part_status = s;
	if (--m->parts > 0)
		return;
	if (m->part_status == UCS_OK) {
		memcpy(&m->hdr, m->head, sizeof m->hdr);
		if (m->head_len)
			memcpy(m->buf, (const char *)m->head + sizeof m->hdr, m->head_len);
	}
	free(m->head);
	m->head = NULL;
	recv_finished(m, (ucs_status_t)m->part_status);
}

static void part_cb(void *req, ucs_status_t s, const ucp_tag_recv_info_t *info, void *user)
{
	if (!completed_early(user, req, s))
		part_done(user, s);
}

/* Receives one half of m into `into`. m may be gone when this returns. */
static void post_part_locked(st_net_t *net, st__net_msg_t *m, ucp_tag_message_h msg, void *into,
			     size_t n)
{
	ucs_status_ptr_t sp = post_recv_locked(net, m, msg, into, n, ucp_dt_make_contig(1), part_cb);
	if (!in_flight(sp))
		part_done(m, UCS_PTR_STATUS(sp));
}

/* A SPLIT's first message (frame and head piece): the message takes its
 * place in its channel now, and waits there for its body, the next
 * message from src. */
static void take_head_locked(st_net_t *net, ucp_tag_message_h msg,
			     const ucp_tag_recv_info_t *info, int src, uint32_t chan)
{
	if (info->length < sizeof(st__net_frame_t)) {
		discard_locked(net, msg, "shorter than a frame header (truncated)", src, info->length);
		return;
	}
	st__net_msg_t *m = malloc(sizeof *m);
	void *head = malloc(info->length);
	if (!m || !head) {
		free(m);
		free(head);
		st_error("net: out of memory for a message from rank %d", src);
		discard_locked(net, msg, "out of memory", src, info->length);
		return;
	}
	*m = (st__net_msg_t){ .src = src, .chan = chan, .net = net, .head = head,
			      .head_len = info->length - sizeof(st__net_frame_t), .parts = 2 };
	st__net_msg_t *old = net->peers[src].split;
	net->peers[src].split = m;
	if (old)   /* a head without a body: no strata sender leaves one */
		part_done(old, UCS_ERR_MESSAGE_TRUNCATED);
	pthread_mutex_lock(&net->mu);
	if (st__net_inbox_add_locked(net, m) < 0)
		m->queued = -1;   /* recv_finished drops it */
	pthread_mutex_unlock(&net->mu);
	post_part_locked(net, m, msg, head, info->length);
}

/* A SPLIT's body: into the buffer of src's pending SPLIT, behind its head
 * piece. */
static void take_body_locked(st_net_t *net, ucp_tag_message_h msg,
			     const ucp_tag_recv_info_t *info, int src, uint32_t chan)
{
	st__net_msg_t *m = net->peers[src].split;
	if (!m || m->chan != chan) {
		discard_locked(net, msg, "a message's second half without its first", src,
			       info->length);
		return;
	}
	net->peers[src].split = NULL;
	const size_t len = m->head_len + info->length;
	void *buf = st__net_pool_get(net, len);
	if (!buf) {
		st_error("net: out of memory for a %zu-byte message from rank %d", len, src);
		discard_locked(net, msg, "out of memory", src, info->length);
		part_done(m, UCS_ERR_NO_MEMORY);
		return;
	}
	m->buf = buf;
	m->len = len;
	post_part_locked(net, m, msg, (char *)buf + m->head_len, info->length);
}

/* src is gone: its pending SPLIT, if any, will get no body. Under wmu. */
static void drop_split_locked(st_net_t *net, int src)
{
	st__net_msg_t *m = net->peers[src].split;
	net->peers[src].split = NULL;
	if (m)
		part_done(m, UCS_ERR_CONNECTION_RESET);
}

/* One probed message: queue it on its channel, receive its payload. */
static void take_locked(st_net_t *net, ucp_tag_message_h msg, const ucp_tag_recv_info_t *info)
{
	uint64_t tag = info->sender_tag;
	int src = (int)(uint16_t)(tag >> 32);
	uint32_t chan = (uint32_t)(tag >> 48);
	if (src < net->size && (uint32_t)tag == ST__NET_TAG_MAGIC_SPLIT) {
		take_head_locked(net, msg, info, src, chan);
		return;
	}
	if (src < net->size && (uint32_t)tag == ST__NET_TAG_MAGIC_BODY) {
		take_body_locked(net, msg, info, src, chan);
		return;
	}
	const int trailer = (uint32_t)tag == ST__NET_TAG_MAGIC_FLAT;
	const int bare = (uint32_t)tag == ST__NET_TAG_MAGIC_BARE;
	if (((uint32_t)tag != ST__NET_TAG_MAGIC && !trailer && !bare) || src >= net->size) {
		discard_locked(net, msg, "not a strata tag", src, info->length);
		return;
	}
	if (!bare && info->length < sizeof(st__net_frame_t)) {
		discard_locked(net, msg, "shorter than a frame header (truncated)", src, info->length);
		return;
	}
	st__net_msg_t *m = malloc(sizeof *m);   /* all of it set below; calloc skips glibc's tcache */
	size_t len = bare ? info->length : info->length - sizeof(st__net_frame_t);
	/* Large messages in warm reused buffers (pool.c), which coll.c and
	 * st_net_release give back. */
	const size_t cap = trailer ? info->length : len;   /* room for the trailing frame */
	void *buf = m ? st__net_pool_get(net, cap) : NULL;
	if (!buf) {
		free(m);
		st_error("net: out of memory for a %zu-byte message from rank %d", len, src);
		discard_locked(net, msg, "out of memory", src, info->length);
		return;
	}
	*m = (st__net_msg_t){ .src = src, .len = len, .buf = buf, .chan = chan, .net = net,
			      .trailer = trailer, .bare = bare };
	m->iov[0] = (ucp_dt_iov_t){ &m->hdr, sizeof m->hdr };
	m->iov[1] = (ucp_dt_iov_t){ buf, len };
	if (bare)   /* the frame its sender left out (BARE) */
		st__net_frame_fill_unhashed(&m->hdr, src, net->rank, chan, len);
	const int contig = trailer || bare;
	ucs_status_ptr_t sp = post_recv_locked(net, m, msg, contig ? buf : (void *)m->iov,
					       contig ? cap : len ? 2 : 1,
					       contig ? ucp_dt_make_contig(1) : ucp_dt_make_iov(),
					       recv_cb);
	/* A message UCX holds all of (eager: every small one) is received at
	 * once and joins its channel, ready, in recv_finished's one locked
	 * section: a lock less than queueing it first. One still arriving
	 * (rendezvous) takes its place in the channel now and is marked ready
	 * later. Either way before wmu is let go, so no later message of
	 * this sender is taken in between: a sender's messages stay in order. */
	if (!in_flight(sp)) {
		recv_finished(m, UCS_PTR_STATUS(sp));
		return;
	}
	pthread_mutex_lock(&net->mu);
	if (st__net_inbox_add_locked(net, m) < 0)
		m->queued = -1;   /* recv_finished drops it */
	pthread_mutex_unlock(&net->mu);
}

static void close_ep_locked(st_net_t *net, int r);

/* One progress call, then the messages waiting in UCX's unexpected queue
 * are taken into the inbox (every message but the DIRECT ones, which wait
 * for their receive: st__net_recv_direct). Returns the events. Under wmu. */
static unsigned progress_once(st_net_t *net)
{
	unsigned n = ucp_worker_progress(net->worker);
	ucp_tag_recv_info_t info;
	ucp_tag_message_h msg;
	while ((msg = ucp_tag_probe_nb(net->worker, 0, ST__NET_TAG_DIRECT_BIT, 1, &info))) {
		take_locked(net, msg, &info);
		n++;
	}
	if (n)   /* written only under wmu: no locked add needed */
		atomic_store_explicit(&net->progressed,
				      atomic_load_explicit(&net->progressed, memory_order_relaxed) + n,
				      memory_order_release);
	return n;
}

/* Closes the endpoints UCX reported failed (ep_error). Under wmu. */
static void reap_failed_eps_locked(st_net_t *net)
{
	if (!atomic_load_explicit(&net->eps_failed, memory_order_relaxed) ||
	    !atomic_exchange(&net->eps_failed, 0))
		return;
	for (int r = 0; r < net->size; r++) {
		if (!net->peers[r].ep_failed || !net->peers[r].ep)
			continue;
		close_ep_locked(net, r);
		if (atomic_load(&net->detector_up))
			continue;
		/* Nobody is left to tell a death from a leave: after rank 0 left
		 * cleanly the job is ending, so a lost connection is a leave. */
		pthread_mutex_lock(&net->mu);
		int how = net->peers[0].state == PEER_LEFT ? PEER_LEFT : PEER_DEAD;
		pthread_mutex_unlock(&net->mu);
		st__net_mark_gone(net, r, how, "UCX lost its connection, and the coordinator is gone");
		drop_split_locked(net, r);
	}
}

/* Progresses the worker until it has nothing more to do. Under wmu. */
static void progress_locked(st_net_t *net)
{
	while (progress_once(net))
		;
	reap_failed_eps_locked(net);
}

/* The progress thread is woken for a send only when its poster stops
 * progressing the worker itself: before it sleeps (st__net_recv,
 * st__net_wait) or returns with the send in flight (st_net_send_submit).
 * Waking it at every post cost an eventfd write and, worse, a thread that
 * took a core and wmu from the poster polling for that very send. */
void st__net_kick(st_net_t *net)
{
	const int owed = atomic_exchange(&net->wake_owed, 0);
	/* The caller stops polling the worker now, so the progress thread
	 * must watch it: arm at its next look, or at once if it naps
	 * (progress_main; the two flags are read and written in opposite
	 * orders there and here, so one side always sees the other's). */
	atomic_store(&net->arm_now, 1);
	if (owed || atomic_load(&net->napping))
		wake_progress(net);
}

/* Between two looks at the inbox or a request, a waiter used to take
 * both locks and read the clock once per progress call: perf of the
 * 8-byte ping-pong had clock_gettime at 21% and the mutexes at 23% of its
 * samples. Here it takes only wmu, stops at the first progress call that
 * did something (here, or in another thread since it began: `progressed`),
 * and reads the clock every SPIN_CLOCK_TURNS calls. */
enum { SPIN_CLOCK_TURNS = 16 };

static int spin_turns(st_net_t *net, double until, unsigned seen)
{
	for (unsigned k = 1;; k++) {
		/* A waiter that finds wmu taken yields before it tries
		 * again: whoever holds it is doing the work (on shared memory,
		 * a receiver's progress copying a payload out of the sender,
		 * CMA), and on a machine with no core to spare a waiter
		 * spinning on the lock took that core from it. Measured
		 * (bench_net -n 2 --what bw, 2-core VM, docs/benchmarks.md
		 * "Frameless and direct messages on shared memory"): a 1 MiB
		 * stream 2-6 -> 8-11 GB/s. */
		if (pthread_mutex_trylock(&net->wmu) != 0) {
			sched_yield();
			return 1;
		}
		progress_once(net);
		reap_failed_eps_locked(net);
		pthread_mutex_unlock(&net->wmu);
		if (atomic_load_explicit(&net->progressed, memory_order_acquire) != seen)
			return 1;
		if (k % SPIN_CLOCK_TURNS == 0 && st__net_now() >= until)
			return 0;
	}
}

int st__net_spin(st_net_t *net, double until)
{
	const unsigned seen = atomic_load_explicit(&net->progressed, memory_order_acquire);
	atomic_fetch_add_explicit(&net->spins, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&net->spinning, 1, memory_order_relaxed);
	const int r = spin_turns(net, until, seen);
	atomic_fetch_sub_explicit(&net->spinning, 1, memory_order_relaxed);
	return r;
}

/* The progress thread's nap while other threads poll the worker (its
 * caller set napping): wakes at wake_fd (st__net_kick, close) or after
 * NAP_US. */
enum { NAP_US = 200 };

static void nap(st_net_t *net)
{
	struct pollfd pf = { .fd = net->wake_fd, .events = POLLIN };
	const struct timespec ts = { 0, NAP_US * 1000 };
	if (ppoll(&pf, 1, &ts, NULL) > 0)
		drain_wake(net);
	atomic_store(&net->napping, 0);
}

static void *progress_main(void *arg)
{
	st_net_t *net = arg;
	pthread_setname_np(pthread_self(), "st-net-io-0");
	uint64_t sent = 0;
	unsigned spins_seen = atomic_load(&net->spins);
	while (!atomic_load(&net->stop)) {
		pthread_mutex_lock(&net->wmu);
		/* The trace (runtime/trace.h): a span per wake-up that took
		 * long enough to have done work (an empty progress call takes
		 * well under 2 us), and the bytes this rank sent so far. */
		uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
		progress_locked(net);
		/* While another thread polls the worker (st__net_spin, now or
		 * since the last look), this one does not arm it: armed, every
		 * arrival wakes this thread, and on a machine with no core to
		 * spare it takes the core from the poller that would have
		 * taken the message anyway. Measured (docs/benchmarks.md,
		 * "Progress thread off the worker while others poll"): the
		 * 8-byte latency over TCP 9.9 -> 5.6 us (medians). It naps instead
		 * and looks again; a poller that stops without what it waited
		 * for (about to sleep, or leaving a send in flight) kicks it
		 * to arm at once (st__net_kick), and after a nap with nobody
		 * polling it arms as before. */
		const unsigned spins = atomic_load(&net->spins);
		const int polled = spins != spins_seen || atomic_load(&net->spinning) > 0;
		spins_seen = spins;
		if (polled) {
			atomic_store(&net->napping, 1);
			if (!atomic_exchange(&net->arm_now, 0)) {
				pthread_mutex_unlock(&net->wmu);
				nap(net);
				continue;
			}
			atomic_store(&net->napping, 0);
		}
		atomic_store(&net->arm_now, 0);
		atomic_fetch_add_explicit(&net->arms, 1, memory_order_relaxed);
		ucs_status_t s = ucp_worker_arm(net->worker);
		pthread_mutex_unlock(&net->wmu);
		if (t0) {
			uint64_t t1 = st_trace_now(), b = atomic_load(&net->bytes_sent);
			if (t1 - t0 >= 2000)
				st_trace_span("work", "net progress", NULL, t0, t1, -1);
			if (b != sent)
				st_trace_counter("net bytes sent", (double)(sent = b));
		}
		if (s == UCS_ERR_BUSY) {
			/* More to do (UCX says so, e.g. sends waiting for room in a
			 * peer's shared-memory queue): go again, but let the other
			 * threads run first. Spinning straight on starved the peer
			 * process that has to make the room, on a machine with no
			 * core to spare (2 cores: an allreduce of 1M floats over
			 * shared memory took 15 ms instead of 1.1). */
			sched_yield();
			continue;
		}
		struct epoll_event ev[2];
		/* The timeout is only a safety net: UCX signals the worker's fd. */
		int n = epoll_wait(net->epfd, ev, 2, 100);
		for (int i = 0; i < n; i++)
			if (ev[i].data.fd == net->wake_fd)
				drain_wake(net);
	}
	return NULL;
}

/* ---- receiving into the caller's buffer (DIRECT) --------------------------------- */

/*
 * DIRECT: a collective's payload that its receiver wants in a place of
 * its own (the caller's vector, for the allreduce's second phase) travels
 * frameless, as BARE does, under the tag magic ST__NET_TAG_MAGIC_DIRECT,
 * whose high bit keeps it out of the progress thread's probe: it waits in
 * UCX's unexpected queue (a rendezvous: only its announcement) until the
 * receiver posts a receive for it into that place, and the payload is
 * then copied once, out of the sender straight into it (CMA), where a
 * probed message lands in a buffer of ours and costs a copy more. The
 * receiver knows when to post from the collective's header, which comes
 * first through the inbox (coll.c); messages of one sender with one tag
 * match posted receives in order, so the tag needs no sequence number.
 *
 * A posted receive is the one thing here that writes into a caller's
 * buffer after it was handed to UCX, so it is never left behind: when
 * the sender dies first, the receive is canceled and waited for, and
 * only then does the call return.
 */
typedef struct direct_rreq {
	int done;          /* under mu */
	ucs_status_t status;
	size_t len;
	st_net_t *net;
} direct_rreq_t;

static void direct_cb(void *req, ucs_status_t s, const ucp_tag_recv_info_t *info, void *user)
{
	direct_rreq_t *q = user;
	st_net_t *net = q->net;
	ucp_request_free(req);
	atomic_fetch_sub(&net->inflight, 1);
	pthread_mutex_lock(&net->mu);
	q->status = s;
	q->len = s == UCS_OK ? info->length : 0;
	q->done = 1;
	pthread_cond_broadcast(&net->sent_cv);
	pthread_mutex_unlock(&net->mu);
}

int st__net_recv_direct(st_net_t *net, int src, uint32_t chan, void *buf, size_t len,
			int fail_any, int *gone)
{
	assert(src >= 0 && src < net->size && src != net->rank);
	direct_rreq_t q = { .net = net };
	ucp_tag_recv_info_t info = { 0 };
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				  UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE |
				  UCP_OP_ATTR_FIELD_RECV_INFO,
				  .cb.recv = direct_cb, .user_data = &q,
				  .datatype = ucp_dt_make_contig(1), .recv_info.tag_info = &info };
	const uint64_t tag = ST__NET_TAG(chan, src) - ST__NET_TAG_MAGIC + ST__NET_TAG_MAGIC_DIRECT;
	pthread_mutex_lock(&net->wmu);
	ucs_status_ptr_t sp = ucp_tag_recv_nbx(net->worker, buf, len, tag, ~(uint64_t)0, &p);
	const int pending = track(net, sp);
	pthread_mutex_unlock(&net->wmu);
	if (!pending) {   /* done at once (or failed) */
		q.status = UCS_PTR_STATUS(sp);
		q.len = info.length;
	} else {
		const double until = st__net_now() + ST__NET_POLL_S;
		int canceled = 0, spin = 1;
		pthread_mutex_lock(&net->mu);
		while (!q.done) {
			int lost = net->peers[src].state != PEER_ALIVE || (fail_any && net->n_dead);
			if (lost && !canceled) {
				/* It completes (canceled) in a progress call; one
				 * already matched completes with the copy's error. */
				pthread_mutex_unlock(&net->mu);
				pthread_mutex_lock(&net->wmu);
				ucp_request_cancel(net->worker, sp);
				pthread_mutex_unlock(&net->wmu);
				pthread_mutex_lock(&net->mu);
				canceled = 1;
				continue;
			}
			if (spin) {
				pthread_mutex_unlock(&net->mu);
				spin = st__net_spin(net, until);
				pthread_mutex_lock(&net->mu);
				continue;
			}
			st__net_kick(net);
			/* A peer's death wakes sent_cv too (st__net_mark_gone). */
			pthread_cond_wait(&net->sent_cv, &net->mu);
		}
		pthread_mutex_unlock(&net->mu);
	}
	if (q.status == UCS_ERR_CANCELED || (q.status != UCS_OK && !st_net_alive(net, src))) {
		if (gone && !st_net_alive(net, src))
			*gone = src;
		return ST_EPEER;
	}
	if (q.status != UCS_OK || q.len != len) {
		st_error("net: a %zu-byte message from rank %d on channel %u, where %zu were due: %s",
			 q.len, src, chan, len, q.status == UCS_OK ? "wrong length"
			 : ucs_status_string(q.status));
		return ST_EPEER;
	}
	pthread_mutex_lock(&net->mu);
	bump_locked(&net->frames_unhashed);
	bump_locked(&net->msgs_bare);
	pthread_mutex_unlock(&net->mu);
	return ST_OK;
}

/* ---- sending ------------------------------------------------------------------- */


static void ticket_free(st_net_t *net, st__net_ticket_t *t)
{
	if (t->flat)
		st__net_pool_put(net, t->flat);
	free(t);
}

static void send_cb(void *req, ucs_status_t s, void *user)
{
	st__net_ticket_t *t = user;
	st_net_t *net = t->net;
	ucp_request_free(req);
	atomic_fetch_sub(&net->inflight, 1);
	pthread_mutex_lock(&net->mu);
	if (t->req) {
		t->req->status = status_rc(s);
		t->req->done = 1;
		t->req->ticket = NULL;
		pthread_cond_broadcast(&net->sent_cv);
	} else {   /* given up by its waiter: only the ticket is left */
		st__net_ticket_t **pp = &net->abandoned;
		while (*pp && *pp != t)
			pp = &(*pp)->next;
		if (*pp)
			*pp = t->next;
	}
	pthread_mutex_unlock(&net->mu);
	ticket_free(net, t);
}

static int post(st_net_t *net, st__net_sreq_t *req, int dst, uint32_t chan, const void *a,
		size_t alen, const void *b, size_t blen, int direct);

int st__net_post(st_net_t *net, st__net_sreq_t *req, int dst, uint32_t chan,
		 const void *a, size_t alen, const void *b, size_t blen)
{
	return post(net, req, dst, chan, a, alen, b, blen, 0);
}

int st__net_post_direct(st_net_t *net, st__net_sreq_t *req, int dst, uint32_t chan,
			const void *buf, size_t len)
{
	assert(st__net_bare(net, dst));
	return post(net, req, dst, chan, buf, len, NULL, 0, 1);
}

/* Whether dst's endpoint may be sent on. Under wmu. Its state is read
 * without mu (st__net_mark_gone stores it atomically): a send that races
 * with the news of dst's death is one more send to a rank about to be
 * found dead, as it would be a moment earlier, and a lock less per send. */
static int peer_usable(st_net_t *net, int dst)
{
	const st__net_peer_t *peer = &net->peers[dst];
	return __atomic_load_n(&peer->state, __ATOMIC_RELAXED) == PEER_ALIVE && peer->ep &&
	       !peer->ep_failed;
}

/* Sends with UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL in q: UCS_OK when sent;
 * otherwise nothing was. */
static ucs_status_t send_imm(st_net_t *net, int dst, const void *buf, size_t count,
			     uint64_t tag, const ucp_request_param_t *q)
{
	pthread_mutex_lock(&net->wmu);
	ucs_status_ptr_t sp = !peer_usable(net, dst) ? UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET)
		: ucp_tag_send_nbx(net->peers[dst].ep, buf, count, tag, q);
	if (sp == NULL)   /* UCS_OK */
		bump_locked(&net->msgs_imm);   /* written only under wmu */
	pthread_mutex_unlock(&net->wmu);
	return UCS_PTR_STATUS(sp);
}

/* SPLIT: a framed message that would go FLAT, of at least SPLIT_MIN bytes,
 * whose head piece is at most SPLIT_HEAD_MAX bytes (a send2's header, or
 * none) travels as two messages to the same endpoint, back to back under wmu:
 * first the frame and the head piece, copied into one small block (tag
 * magic ST__NET_TAG_MAGIC_SPLIT), then the body alone, contiguous, straight
 * from the caller's buffer (ST__NET_TAG_MAGIC_BODY). The receiver takes the
 * first, keeps it as its sender's pending SPLIT (peers[src].split), and
 * receives the second into the same buffer behind the head piece; the frame
 * is checked once both are in. UCX keeps an endpoint's sends in order, and
 * the progress thread takes a sender's messages in the order they came, so
 * a body always follows its own head. Why: FLAT copies the whole payload
 * into a block of its own so that UCX moves it as one contiguous
 * rendezvous; here only the head is copied. Over TCP the sender's copy was
 * a quarter of its time in a 1 MiB stream (docs/benchmarks.md, "What a
 * framed message costs over TCP"), and streams of 1 and 2 MiB messages
 * over TCP ran 20-25% faster in two; at 512 KiB no faster, and at 64-256
 * KiB 5-20% slower than flat (the second message's cost; same document).
 * A message whose head is larger keeps FLAT. */
#define SPLIT_MIN ((size_t)512 << 10)
#define SPLIT_HEAD_MAX IMM_MAX

/* A SPLIT's first message while UCX may still hold it. */
typedef struct split_head {
	st_net_t *net;
	uint8_t bytes[];   /* frame, then head piece */
} split_head_t;

static void head_cb(void *req, ucs_status_t s, void *user)
{
	(void)s;   /* the body's request reports the message */
	split_head_t *h = user;
	ucp_request_free(req);
	atomic_fetch_sub(&h->net->inflight, 1);
	free(h);
}

/* Sends a SPLIT's head (h, n bytes of h->bytes) and takes h over: freed
 * once UCX is done with it. NULL when sent or on its way, else the error.
 * Under wmu. */
static ucs_status_ptr_t send_head_locked(st_net_t *net, int dst, split_head_t *h, size_t n,
					 uint64_t tag)
{
	ucp_request_param_t q = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				  UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE,
				  .cb.send = head_cb, .user_data = h,
				  .datatype = ucp_dt_make_contig(1) };
	ucs_status_ptr_t sp = ucp_tag_send_nbx(net->peers[dst].ep, h->bytes, n, tag, &q);
	if (track(net, sp))
		return NULL;
	free(h);
	return sp;
}

static void count_sent(st_net_t *net, uint32_t chan, size_t bytes)
{
	atomic_fetch_add(&net->bytes_sent, bytes);
	atomic_fetch_add(&net->msgs_sent, 1);
	if (chan >= 0xff00)
		atomic_fetch_add(&net->bytes_sent_coll, bytes);
}

static int post(st_net_t *net, st__net_sreq_t *req, int dst, uint32_t chan, const void *a,
		size_t alen, const void *b, size_t blen, int direct)
{
	assert(dst >= 0 && dst < net->size);
	assert(chan < 65536);
	memset(req, 0, sizeof *req);
	req->dst = dst;
	req->net = net;
	if (dst == net->rank || st__net_bare(net, dst))
		st__net_frame_fill_unhashed(&req->hdr, net->rank, dst, chan, alen + blen);
	else
		st__net_frame_fill(&req->hdr, net->rank, dst, chan, a, alen, b, blen);
	if (dst == net->rank) {   /* to oneself: straight into the inbox */
		st__net_msg_t *m = calloc(1, sizeof *m);
		size_t len = alen + blen;
		void *buf = m ? malloc(len ? len : 1) : NULL;
		if (!buf) {
			free(m);
			return ST_ENOMEM;
		}
		if (alen)
			memcpy(buf, a, alen);
		if (blen)
			memcpy((char *)buf + alen, b, blen);
		*m = (st__net_msg_t){ .src = dst, .ready = 1, .len = len, .buf = buf, .chan = chan,
				      .net = net };
		pthread_mutex_lock(&net->mu);
		int rc = st__net_inbox_add_locked(net, m);
		pthread_mutex_unlock(&net->mu);
		if (rc < 0) {
			free(buf);
			free(m);
		}
		req->done = req->imm = 1, req->status = rc;
		return rc;
	}
	const size_t fmin = chan == ST__NET_COLL_CHAN || !net->peers[dst].shm ? net->flat_min_net
		: net->flat_min;
	const size_t len = alen + blen;
	size_t total = sizeof req->hdr + len;
	const int bare = st__net_bare(net, dst) && (!alen || !blen);
	if (bare)
		total = len;
	const uint64_t tag = ST__NET_TAG(chan, net->rank) - ST__NET_TAG_MAGIC +
		(!bare ? ST__NET_TAG_MAGIC : direct ? ST__NET_TAG_MAGIC_DIRECT : ST__NET_TAG_MAGIC_BARE);
	/* A small message: first as one that must complete at once, with no
	 * ticket and no callback. The 8-byte ping-pong spent a malloc, a free
	 * and a lock more per send on the ticket, which such a send never needs
	 * (docs/benchmarks.md, "Small-message latency"). UCX 1.13 completes a
	 * send at once only through its inline short protocol: contiguous
	 * bytes up to am_short (`ucx_info -d`: 100 bytes on shared memory, UCP's
	 * header included, 8 KiB over TCP), so a framed message is copied out
	 * flat first, as the iov below would have it on the wire. */
	const size_t imm_max = net->peers[dst].shm ? IMM_MAX_SHM : IMM_MAX;
	if (total <= imm_max && !(fmin && total >= fmin)) {
		uint8_t flat[IMM_MAX];
		const void *bytes = bare ? (alen ? a : b) : flat;
		if (!bare) {
			memcpy(flat, &req->hdr, sizeof req->hdr);
			if (alen)
				memcpy(flat + sizeof req->hdr, a, alen);
			if (blen)
				memcpy(flat + sizeof req->hdr + alen, b, blen);
		}
		ucp_request_param_t q = { .op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
					  UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL,
					  .datatype = ucp_dt_make_contig(1) };
		if (send_imm(net, dst, bytes, total, tag, &q) == UCS_OK) {
			req->done = req->imm = 1;
			count_sent(net, chan, total);
			return ST_OK;
		}
		/* Anything else (no room now, a dead peer) takes the way below. */
	}
	st__net_ticket_t *t = malloc(sizeof *t);
	if (!t)
		return ST_ENOMEM;
	*t = (st__net_ticket_t){ .req = req, .net = net, .hdr = req->hdr };
	int n = 0;
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
				  UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE,
				  .cb.send = send_cb, .user_data = t,
				  .datatype = ucp_dt_make_iov() };
	const void *buf = NULL;
	size_t count = total;
	uint64_t stag = tag;
	split_head_t *head = NULL;   /* SPLIT: frame and head piece, sent first */
	const size_t head_len = blen ? alen : 0;
	if (bare) {   /* BARE */
		buf = alen ? a : b;
		p.datatype = ucp_dt_make_contig(1);
	} else if (fmin && total >= fmin && len >= SPLIT_MIN && head_len <= SPLIT_HEAD_MAX &&
		   (head = malloc(sizeof *head + sizeof t->hdr + head_len))) {   /* SPLIT */
		head->net = net;
		memcpy(head->bytes, &t->hdr, sizeof t->hdr);
		if (head_len)
			memcpy(head->bytes + sizeof t->hdr, a, head_len);
		buf = blen ? b : a;
		count = len - head_len;
		stag = tag - ST__NET_TAG_MAGIC + ST__NET_TAG_MAGIC_BODY;
		atomic_fetch_add(&net->msgs_split, 1);
		p.datatype = ucp_dt_make_contig(1);
	} else if (fmin && total >= fmin && (t->flat = st__net_pool_get(net, total))) {
		uint8_t *f = t->flat;   /* payload, then the frame (FLAT) */
		if (alen)
			memcpy(f, a, alen);
		if (blen)
			memcpy(f + alen, b, blen);
		memcpy(f + alen + blen, &t->hdr, sizeof t->hdr);
		buf = f;
		stag = tag - ST__NET_TAG_MAGIC + ST__NET_TAG_MAGIC_FLAT;
		atomic_fetch_add(&net->msgs_flat, 1);
		p.datatype = ucp_dt_make_contig(1);
	} else {
		t->iov[n++] = (ucp_dt_iov_t){ &t->hdr, sizeof t->hdr };
		if (alen)
			t->iov[n++] = (ucp_dt_iov_t){ (void *)a, alen };
		if (blen)
			t->iov[n++] = (ucp_dt_iov_t){ (void *)b, blen };
	}
	pthread_mutex_lock(&net->wmu);
	ucs_status_ptr_t sp = UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET);
	if (!peer_usable(net, dst)) {
		free(head);
	} else {
		sp = !head ? NULL : send_head_locked(net, dst, head, sizeof t->hdr + head_len,
						     tag - ST__NET_TAG_MAGIC + ST__NET_TAG_MAGIC_SPLIT);
		if (!UCS_PTR_IS_ERR(sp))   /* the message, or a SPLIT's body behind its head */
			sp = ucp_tag_send_nbx(net->peers[dst].ep, buf ? buf : (const void *)t->iov,
					      buf ? count : (size_t)n, stag, &p);
	}
	const int pending = track(net, sp);
	int rc = pending ? ST_OK : status_rc(UCS_PTR_STATUS(sp));
	if (pending) {
		req->ticket = t;   /* send_cb cannot run: it needs wmu */
	} else {
		req->done = req->imm = 1, req->status = rc;
		ticket_free(net, t);
	}
	pthread_mutex_unlock(&net->wmu);
	if (pending)   /* someone must progress it: its waiter, or the progress thread */
		atomic_store(&net->wake_owed, 1);
	if (rc == ST_OK)
		count_sent(net, chan, total);
	return rc;
}

/*
 * A send to a peer that is gone and has a shared-memory endpoint can stay
 * in flight for ever: UCX reports nothing for such a peer and refuses to
 * force-close its endpoint (UCX 1.13: UCP_EP_CLOSE_FLAG_FORCE needs peer
 * error handling; "Invalid parameter"). So its waiter gives it up: it
 * fails with ST_EPEER, and the ticket, which UCX still points to, moves
 * to net->abandoned until UCX calls back (st_net_close frees the rest
 * once the worker is gone, with a flat send's block). The caller's payload
 * of an iov send is not copied: UCX does not read it again, since the
 * rendezvous data is fetched by the receiver and an eager fragment waiting
 * for room in the dead peer's queue never gets any. Under mu.
 */
static int give_up_locked(st_net_t *net, st__net_sreq_t *req)
{
	const st__net_peer_t *p = &net->peers[req->dst];
	if (req->done || p->state == PEER_ALIVE || !p->shm || !req->ticket)
		return 0;
	req->ticket->req = NULL;
	req->ticket->next = net->abandoned;
	net->abandoned = req->ticket;
	req->ticket = NULL;
	req->done = 1;
	req->status = ST_EPEER;
	return 1;
}

int st__net_wait(st_net_t *net, st__net_sreq_t *reqs, int n)
{
	int rc = ST_OK, spin = 1;
	double until = 0;   /* read from the clock only if a request is not done */
	for (; n > 0 && reqs->imm; reqs++, n--)   /* no callback writes these */
		if (reqs->status < 0 && rc == ST_OK)
			rc = reqs->status;
	if (!n)
		return rc;
	pthread_mutex_lock(&net->mu);
	for (int i = 0; i < n; i++) {
		while (!reqs[i].done && spin) {
			pthread_mutex_unlock(&net->mu);
			if (!until)
				until = st__net_now() + ST__NET_POLL_S;
			spin = st__net_spin(net, until);
			pthread_mutex_lock(&net->mu);
		}
		if (!reqs[i].done)
			st__net_kick(net);
		while (!reqs[i].done && !give_up_locked(net, &reqs[i]))
			pthread_cond_wait(&net->sent_cv, &net->mu);
		if (reqs[i].status < 0 && rc == ST_OK)
			rc = reqs[i].status;
	}
	pthread_mutex_unlock(&net->mu);
	return rc;
}

int st_net_send2(st_net_t *net, int dst, uint32_t chan, const void *a, size_t alen,
		 const void *b, size_t blen)
{
	assert(chan < ST__NET_COLL_CHAN);
	st__net_sreq_t req;
	int rc = st__net_post(net, &req, dst, chan, a, alen, b, blen);
	return rc < 0 ? rc : st__net_wait(net, &req, 1);
}

int st_net_send(st_net_t *net, int dst, uint32_t chan, const void *buf, size_t len)
{
	return st_net_send2(net, dst, chan, buf, len, NULL, 0);
}

int st__net_send_raw(st_net_t *net, int dst, uint32_t chan, uint32_t magic,
		     const void *bytes, size_t len)
{
	assert(dst != net->rank);
	pthread_mutex_lock(&net->wmu);
	ucp_ep_h ep = net->peers[dst].ep;
	const uint64_t tag = ST__NET_TAG(chan, net->rank) - ST__NET_TAG_MAGIC + magic;
	ucs_status_ptr_t sp = ep ? ucp_tag_send_nbx(ep, bytes, len, tag, &(ucp_request_param_t){ 0 })
		: UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET);
	pthread_mutex_unlock(&net->wmu);
	if (!in_flight(sp))
		return status_rc(UCS_PTR_STATUS(sp));
	/* A test's few bytes: wait for them here, progressing ourselves. */
	ucs_status_t s;
	do {
		pthread_mutex_lock(&net->wmu);
		progress_locked(net);
		s = ucp_request_check_status(sp);
		if (s != UCS_INPROGRESS)
			ucp_request_free(sp);
		pthread_mutex_unlock(&net->wmu);
		sched_yield();
	} while (s == UCS_INPROGRESS);
	wake_progress(net);
	return status_rc(s);
}

/* ---- endpoints and peers ------------------------------------------------------ */

static void close_cb(void *req, ucs_status_t s, void *user)
{
	ucp_request_free(req);
	atomic_fetch_sub(&((st_net_t *)user)->closing, 1);
}

/* Closes rank r's endpoint. One with peer error handling is closed without
 * waiting for the peer (FORCE): every request to it completes, with an
 * error if unfinished. A shared-memory one cannot be (UCX refuses FORCE
 * without peer error handling): while its peer is alive it is flushed and
 * closed (at st_net_close, after the last messages went out); once the
 * peer is gone it is only set aside, for ucp_worker_destroy, since a flush
 * would never end; its waiters give their sends up (give_up_locked).
 * Under wmu. */
static void close_ep_locked(st_net_t *net, int r)
{
	st__net_peer_t *p = &net->peers[r];
	if (!p->ep)
		return;
	pthread_mutex_lock(&net->mu);
	int alive = p->state == PEER_ALIVE;
	pthread_mutex_unlock(&net->mu);
	if (p->shm && !alive) {
		p->dead_ep = p->ep;
		p->ep = NULL;
		return;
	}
	ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
				    UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
				    .flags = p->shm ? 0 : UCP_EP_CLOSE_FLAG_FORCE, .cb.send = close_cb,
				    .user_data = net };
	ucs_status_ptr_t sp = ucp_ep_close_nbx(p->ep, &prm);
	if (in_flight(sp))
		atomic_fetch_add(&net->closing, 1);
	else if (UCS_PTR_IS_ERR(sp))
		st_debug("net: closing the endpoint to rank %d: %s", r,
			 ucs_status_string(UCS_PTR_STATUS(sp)));
	p->ep = NULL;
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t s)
{
	st__net_peer_t *p = arg;
	p->ep_failed = 1;
	atomic_store(&p->net->eps_failed, 1);
	st_debug("net: UCX reports the connection to rank %d failed: %s", p->rank,
		 ucs_status_string(s));
}

void st__net_peer_gone(st_net_t *net, int r, int how, const char *why)
{
	/* First deliver whatever already arrived from it, so that a rank's
	 * last messages before a clean leave are never lost to the news. */
	pthread_mutex_lock(&net->wmu);
	progress_locked(net);
	pthread_mutex_unlock(&net->wmu);
	wake_progress(net);   /* it may have armed before we took its events */
	if (!st__net_mark_gone(net, r, how, why))
		return;
	pthread_mutex_lock(&net->wmu);
	close_ep_locked(net, r);
	drop_split_locked(net, r);
	pthread_mutex_unlock(&net->wmu);
	wake_progress(net);
}

/* Every rank's address in the table starts with HOST_ID_LEN bytes naming
 * its host, "hostname/boot_id/pid namespace", then its pid (4 bytes), then
 * UCX's address. The boot id tells two machines with one hostname (cloned
 * VMs, containers named alike) apart; the pid namespace makes the pid
 * meaningful to the ranks that share the host id (st__net_check_pids).
 * Processes of one machine that disagree on any of it (containers) just
 * count as two hosts and talk over the network: slower, always correct. */
#define HOST_ID_LEN 128
#define ADDR_HDR_LEN (HOST_ID_LEN + 4)

static void host_id(char id[HOST_ID_LEN])
{
	char host[64] = "?", boot[48] = "", ns[64] = "";
	if (gethostname(host, sizeof host - 1) < 0)
		strcpy(host, "?");
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f) {
		if (!fgets(boot, sizeof boot, f))
			boot[0] = 0;
		fclose(f);
	}
	boot[strcspn(boot, "\n")] = 0;
	ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
	ns[n > 0 ? n : 0] = 0;
	memset(id, 0, HOST_ID_LEN);
	snprintf(id, HOST_ID_LEN, "%s/%s/%s", host, boot, ns);
}

/* A rank's table entry: host id, pid, UCX address. Caller frees. */
static void *addr_entry(st_net_t *net, size_t *len)
{
	char *e = st_xmalloc(ADDR_HDR_LEN + net->addr_len);
	host_id(e);
	int32_t pid = (int32_t)getpid();
	memcpy(e + HOST_ID_LEN, &pid, 4);
	memcpy(e + ADDR_HDR_LEN, net->addr, net->addr_len);
	*len = ADDR_HDR_LEN + net->addr_len;
	return e;
}

void st__net_check_pids(st_net_t *net)
{
	for (int r = 0; r < net->size; r++) {
		st__net_peer_t *p = &net->peers[r];
		if (!p->shm || !p->pid || !st_net_alive(net, r))
			continue;
		if (kill(p->pid, 0) < 0 && errno == ESRCH) {
			char why[96];
			snprintf(why, sizeof why, "its process (pid %d on this host) is gone",
				 (int)p->pid);
			st__net_peer_gone(net, r, PEER_DEAD, why);
		}
	}
}

/*
 * One endpoint per peer. A peer on another host gets UCX's peer error
 * handling (TCP, RDMA): UCX then reports a broken connection itself. A peer
 * on this host gets none (UCP_ERR_HANDLING_MODE_NONE), because in UCX 1.13
 * that is what lets it pick the shared-memory transports (posix/sysv for
 * small messages, cma for the rendezvous): they do not advertise peer
 * failure handling. With UCX_POSIX_ERROR_HANDLING=y they would, but then
 * a 1 MiB ucx_perftest tag_bw between two processes here fell from 1.4-1.7
 * to 0.12-0.16 GB/s, slower than TCP. What UCX no longer tells us about
 * such a peer the monitor does (boot.c: the coordinator's connections
 * close when a process dies, heartbeats end when it stalls), and
 * st__net_peer_gone then force-closes the endpoint, which completes every
 * request to it.
 */
static int create_eps(st_net_t *net, void **addrs, const size_t *lens)
{
	char me[HOST_ID_LEN];
	host_id(me);
	for (int r = 0; r < net->size; r++) {
		if (r == net->rank)
			continue;
		if (lens[r] <= ADDR_HDR_LEN) {
			st_error("net: rank %d sent a %zu-byte address, too short to hold a host id",
				 r, lens[r]);
			return ST_EPEER;
		}
		int shm = net->shm_allowed && !memcmp(addrs[r], me, HOST_ID_LEN);
		int32_t pid;
		memcpy(&pid, (char *)addrs[r] + HOST_ID_LEN, 4);
		net->peers[r].pid = shm ? pid : 0;
		ucp_ep_params_t ep = {
			.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
				      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
				      UCP_EP_PARAM_FIELD_ERR_HANDLER,
			.address = (const ucp_address_t *)((char *)addrs[r] + ADDR_HDR_LEN),
			.err_mode = shm ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
			.err_handler = { .cb = ep_error, .arg = &net->peers[r] },
		};
		pthread_mutex_lock(&net->wmu);
		ucs_status_t s = ucp_ep_create(net->worker, &ep, &net->peers[r].ep);
		net->peers[r].shm = shm;
		pthread_mutex_unlock(&net->wmu);
		if (s != UCS_OK) {
			net->peers[r].ep = NULL;
			st_error("net: cannot create a UCX endpoint to rank %d: %s", r,
				 ucs_status_string(s));
			return ST_EIO;
		}
	}
	return ST_OK;
}

int st__net_ep_shm(st_net_t *net, int r)
{
	pthread_mutex_lock(&net->wmu);
	int shm = net->peers[r].shm;
	pthread_mutex_unlock(&net->wmu);
	return shm;
}

int st__net_ep_transports(st_net_t *net, int r, char *out, size_t n)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		return ST_EIO;
	pthread_mutex_lock(&net->wmu);
	if (net->peers[r].ep && r != net->rank)
		ucp_ep_print_info(net->peers[r].ep, f);
	pthread_mutex_unlock(&net->wmu);
	fclose(f);
	size_t k = 0;
	out[0] = 0;
	/* Lane lines read "#   lane[0]:  3:posix/memory.0 md[3] ...": the
	 * transport/device comes after the resource index. */
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		char *l = strstr(line, "lane["), *c = l ? strchr(l, ':') : NULL;
		if (!c || !(c = strchr(c + 1, ':')))
			continue;
		size_t w = strcspn(c + 1, ". \t");
		char name[64];
		snprintf(name, sizeof name, "%.*s", (int)(w < 63 ? w : 63), c + 1);
		if (!strstr(out, name) && k + w + 2 < n)
			k += (size_t)snprintf(out + k, n - k, "%s%s", k ? " " : "", name);
	}
	free(text);
	return (int)k;
}

/* ---- open and close --------------------------------------------------------------- */

/* UCX's network devices for this job: the interface that reaches the
 * coordinator (the loopback for `strata launch`), so its TCP transport
 * listens there only and not on every interface of the machine, plus the
 * RDMA ports (/sys/class/infiniband/DEV/ports/N as "DEV:N"), which open no
 * TCP port. UCX_NET_DEVICES in the environment wins. */
static void pick_devices(st_net_t *net, ucp_config_t *config)
{
	if (getenv("UCX_NET_DEVICES") || net->size < 2)
		return;
	char devs[1024];
	if (st__net_job_iface(net->cfg.coordinator, devs, sizeof devs / 4) < 0) {
		st_warn("net: cannot tell which interface reaches the coordinator %s: UCX listens "
			"on every interface (set UCX_NET_DEVICES to choose)", net->cfg.coordinator);
		return;
	}
	size_t len = strlen(devs);
	DIR *ib = opendir("/sys/class/infiniband");
	for (struct dirent *d; ib && (d = readdir(ib));) {
		char path[512];
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports", d->d_name);
		DIR *ports = opendir(path);
		for (struct dirent *p; ports && (p = readdir(ports));)
			if (p->d_name[0] != '.' && len + strlen(d->d_name) + strlen(p->d_name) + 3 <
			    sizeof devs)
				len += (size_t)snprintf(devs + len, sizeof devs - len, ",%s:%s",
							d->d_name, p->d_name);
		if (ports)
			closedir(ports);
	}
	if (ib)
		closedir(ib);
	if (ucp_config_modify(config, "NET_DEVICES", devs) != UCS_OK)
		st_warn("net: UCX refused NET_DEVICES=%s: it listens on every interface", devs);
	else
		st_debug("net: UCX uses the network devices %s (UCX_NET_DEVICES overrides)", devs);
}

static int ucx_init(st_net_t *net)
{
	ucp_config_t *config;
	ucs_status_t s = ucp_config_read(NULL, NULL, &config);
	if (s == UCS_OK)
		pick_devices(net, config);
	if (s == UCS_OK) {
		ucp_params_t prm = {
			.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
			.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
			.estimated_num_eps = (size_t)net->size,
		};
		s = ucp_init(&prm, config, &net->ctx);
		ucp_config_release(config);
	}
	if (s == UCS_OK) {
		ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
					   .thread_mode = UCS_THREAD_MODE_SERIALIZED };
		s = ucp_worker_create(net->ctx, &wp, &net->worker);
	}
	if (s == UCS_OK)
		s = ucp_worker_get_address(net->worker, &net->addr, &net->addr_len);
	if (s == UCS_OK)
		s = ucp_worker_get_efd(net->worker, &net->worker_fd);
	if (s != UCS_OK) {
		st_error("net: cannot start UCX: %s (see `ucx_info -d` for the transports)",
			 ucs_status_string(s));
		return ST_EIO;
	}
	net->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	net->epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event e1 = { .events = EPOLLIN, .data.fd = net->worker_fd };
	struct epoll_event e2 = { .events = EPOLLIN, .data.fd = net->wake_fd };
	if (net->wake_fd < 0 || net->epfd < 0 ||
	    epoll_ctl(net->epfd, EPOLL_CTL_ADD, net->worker_fd, &e1) < 0 ||
	    epoll_ctl(net->epfd, EPOLL_CTL_ADD, net->wake_fd, &e2) < 0) {
		st_error("net: cannot set up the progress thread's wakeup: %s", strerror(errno));
		return ST_EIO;
	}
	pthread_mutex_init(&net->wmu, NULL);
	if (pthread_create(&net->progress_thread, NULL, progress_main, net))
		st_die("net: cannot start the progress thread");
	net->progress_started = 1;
	return ST_OK;
}

int st_net_open(st_net_t **out, const st_net_cfg_t *cfg)
{
	*out = NULL;
	const int coll = st__net_coll_choice();
	if (coll < 0)
		return ST_EINVAL;
	if (cfg->size < 1 || cfg->size > ST_NET_MAX_RANKS || cfg->rank < 0 ||
	    cfg->rank >= cfg->size || !(cfg->timeout_s > 0)) {
		st_error("net: invalid configuration: rank %d of %d, timeout %g s", cfg->rank,
			 cfg->size, cfg->timeout_s);
		return ST_EINVAL;
	}
	st_net_t *net = calloc(1, sizeof *net);
	if (!net)
		return ST_ENOMEM;
	net->cfg = *cfg;
	net->rank = cfg->rank;
	net->size = cfg->size;
	net->wake_fd = net->epfd = -1;
	net->coll_seg = ST__NET_COLL_SEG;
	net->flat_min = 0;
	net->flat_min_net = FLAT_MIN_NET_DEFAULT;
	const char *fm = getenv("STRATA_NET_FLAT_MIN");
	if (fm) {
		char *end;
		unsigned long long v = strtoull(fm, &end, 10);
		if (*end || !*fm)
			st_warn("net: STRATA_NET_FLAT_MIN=%s: expected a number of bytes (0: never "
				"flat); keeping the default", fm);
		else
			net->flat_min = net->flat_min_net = (size_t)v;
	}
	if (st__net_inbox_init(net) < 0) {
		free(net);
		return ST_ENOMEM;
	}
	const char *shm = getenv("STRATA_NET_SHM");
	if (shm && strcmp(shm, "0") && strcmp(shm, "1"))
		st_warn("net: STRATA_NET_SHM=%s: expected 0 (no shared memory) or 1; using 1", shm);
	net->shm_allowed = !shm || strcmp(shm, "0");
	/* STRATA_NET_CHECKSUM=all: hash the frames to peers on shared memory
	 * too; none: not even those that cross a network link (BARE); links,
	 * the default: only those. */
	const char *ck = getenv("STRATA_NET_CHECKSUM");
	if (ck && strcmp(ck, "all") && strcmp(ck, "links") && strcmp(ck, "none"))
		st_warn("net: STRATA_NET_CHECKSUM=%s: expected all, links or none; using links", ck);
	net->hash_shm = ck && !strcmp(ck, "all");
	net->hash_links = !ck || strcmp(ck, "none");
	int rc = ucx_init(net);
	void **addrs = NULL;
	size_t *lens = NULL;
	if (rc == ST_OK && net->size > 1) {
		size_t len;
		void *mine = addr_entry(net, &len);
		rc = st__net_boot(net, mine, len, &addrs, &lens);
		free(mine);
	}
	if (addrs) {
		rc = create_eps(net, addrs, lens);
		for (int r = 0; rc == ST_OK && r < net->size && st_log_get_level() <= ST_LOG_DEBUG; r++) {
			char tls[256];
			if (r != net->rank && st__net_ep_transports(net, r, tls, sizeof tls) >= 0)
				st_debug("net: rank %d talks to rank %d over %s%s", net->rank, r, tls,
					 net->peers[r].shm ? " (same host: no UCX peer error handling)" : "");
		}
		for (int r = 0; r < net->size; r++)
			free(addrs[r]);
		free(addrs);
		free(lens);
	}
	if (rc == ST_OK && net->size > 1)
		rc = st__net_monitor_start(net);
	if (rc == ST_OK && net->size > 1 && coll == 1)
		rc = st__net_mpi_open(net);
	if (rc < 0) {
		st_net_close(net);
		return rc;
	}
	st_debug("net: rank %d of %d is connected (coordinator %s)", net->rank, net->size,
		 net->cfg.coordinator);
	*out = net;
	return ST_OK;
}

static void flush_cb(void *req, ucs_status_t s, void *user)
{
	st_net_t *net = user;
	ucp_request_free(req);
	atomic_fetch_sub(&net->closing, 1);
}

/* Waits (at most until deadline) for the progress thread to finish every
 * flush and close request. */
static void drain(st_net_t *net, double deadline)
{
	while (atomic_load(&net->closing) > 0 && st__net_now() < deadline) {
		wake_progress(net);
		struct timespec ts = { 0, 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

void st_net_close(st_net_t *net)
{
	if (!net)
		return;
	st__net_mpi_close(net);
	if (net->progress_started) {
		/* Our last messages reach the live ranks before our goodbye does. */
		double wait = net->cfg.timeout_s < CLOSE_WAIT_S ? net->cfg.timeout_s : CLOSE_WAIT_S;
		/* Endpoint by endpoint rather than the whole worker: a send to
		 * a gone peer over shared memory never completes (give_up_locked),
		 * and a worker flush would wait for it, CLOSE_WAIT_S at every
		 * survivor's exit. Gone peers have no endpoint any more. */
		pthread_mutex_lock(&net->wmu);
		for (int r = 0; r < net->size; r++) {
			if (!net->peers[r].ep)
				continue;
			ucs_status_ptr_t sp = ucp_ep_flush_nbx(net->peers[r].ep, &(ucp_request_param_t){
				.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
						UCP_OP_ATTR_FIELD_USER_DATA,
				.cb.send = flush_cb, .user_data = net });
			if (in_flight(sp))
				atomic_fetch_add(&net->closing, 1);
		}
		pthread_mutex_unlock(&net->wmu);
		drain(net, st__net_now() + wait);
	}
	st__net_monitor_stop(net);
	if (net->progress_started) {
		pthread_mutex_lock(&net->wmu);
		for (int r = 0; r < net->size; r++)
			close_ep_locked(net, r);
		pthread_mutex_unlock(&net->wmu);
		drain(net, st__net_now() + 1);
		atomic_store(&net->stop, 1);
		wake_progress(net);
		pthread_join(net->progress_thread, NULL);
		pthread_mutex_destroy(&net->wmu);
	}
	if (net->addr)
		ucp_worker_release_address(net->worker, net->addr);
	if (net->worker)
		ucp_worker_destroy(net->worker);   /* also the dead peers' shm endpoints */
	for (st__net_ticket_t *t = net->abandoned, *next; t; t = next) {
		next = t->next;   /* UCX can no longer call back: the worker is gone */
		ticket_free(net, t);
	}
	if (net->ctx)
		ucp_cleanup(net->ctx);
	if (net->epfd >= 0)
		close(net->epfd);
	if (net->wake_fd >= 0)
		close(net->wake_fd);
	st__net_inbox_fini(net);
	free(net);
}
