/*
 * coll.c — the collectives: barrier, allgather, allreduce of floats and
 * broadcast, built on the point-to-point layer's reserved channel 0xff00.
 *
 * Every collective message starts with a header (operation, phase,
 * sequence number). Each process numbers its collectives 1, 2, ... and,
 * since every rank calls them in the same order, a message's number must
 * be the receiver's current one: an older number is a leftover of a
 * collective abandoned after a failure and is dropped; anything else means
 * the ranks called different collectives, which is reported, not hung on.
 *
 * Failure: a collective needs every rank, so it fails with ST_EPEER (naming
 * the rank in the log) as soon as any rank is known dead: one that exited,
 * or one that stalled (no heartbeat for timeout_s, boot.c). A rank that is
 * alive but slow is waited for, however long.
 *
 * Determinism of allreduce_f32: a direct reduce-scatter then allgather.
 * Rank c owns chunk c of the vector; it receives that chunk from every rank
 * and adds the contributions in rank order, acc = x0, acc += x1, ... (each
 * element its own sum: vectorizing the loop does not reorder it), then sends
 * the result to everyone. Every element is summed once, in rank order, by
 * one rank, so every rank gets the same bits, equal to a sequential sum.
 * A ring (NCCL's) would add chunk c in the order c+1, c+2, ..., c: the same
 * bytes per rank, 2(P-1)/P x 4N, but P different summation orders, so
 * rank-order determinism (and the bit-equality of P processes with one
 * process of P workers, docs/distributed.md) rules it out.
 *
 * Chunked and pipelined: each chunk moves in segments of net->coll_seg
 * floats (ST__NET_COLL_SEG). Every reduce-scatter segment is posted at
 * once; the owner adds segment j as soon as all its contributions are in
 * and sends it on (allgather) while segment j + 1 is still arriving, so
 * the adds, both phases and the transfers overlap. Messages of one source
 * on one channel arrive in order (net.c), so segments need no index. Their
 * receive buffers come from pool.c and go back to it.
 *
 * Threads: one thread per process at a time calls these (net.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"
#include "runtime/simd.h"
#include "runtime/net/net_internal.h"

enum { OP_BARRIER = 1, OP_ALLGATHER, OP_ALLREDUCE, OP_BCAST };
static const char *const op_name[] = { "?", "barrier", "allgather", "allreduce", "bcast" };

typedef struct coll_hdr {
	uint32_t op, phase;
	uint64_t seq;
	uint64_t len;   /* payload bytes */
} coll_hdr_t;

/*
 * A large payload to a rank on shared memory travels as a message of its
 * own, right behind its header (the header's phase has PHASE_SPLIT set):
 * one piece, so net.c sends it frameless from the caller's buffer and the
 * receiver copies it once, straight out of this process (net.c, BARE),
 * where header and payload in one message cost the sender a copy into a
 * flat block first. The receiver takes the next message from that rank
 * on this channel as the payload: a sender's messages on a channel arrive
 * in order (net.h). A small header message more per segment is cheap next
 * to a 1 MiB copy less.
 */
#define PHASE_SPLIT 0x80000000u
#define SPLIT_MIN ((size_t)64 << 10)
/* The same, where the receiver wants the payload in a place of its own
 * (the caller's buffer: coll_recv_into): the payload goes DIRECT (net.c)
 * and the receiver, once it has read the header, has it copied straight
 * into that place, where a split payload lands in a pool buffer first and
 * is copied again. The allreduce's first phase keeps PHASE_SPLIT: its
 * payloads are added, not kept, and the progress thread fetches them
 * while the owner adds the ones before. */
#define PHASE_DIRECT 0x40000000u

/* One collective call in progress. */
typedef struct coll {
	st_net_t *net;
	uint32_t op;
	uint64_t seq;
	int failed;            /* the failure is logged once */
	int n_sends;
	st__net_sreq_t *reqs;  /* one per send the collective may post */
	coll_hdr_t *hdrs;
} coll_t;

/* ceil(log2 P): the rounds of a dissemination barrier or a binomial tree. */
static unsigned log2_ceil(int P)
{
	unsigned k = 0;
	while ((1 << k) < P)
		k++;
	return k;
}

/* Starts a collective that posts at most max_sends sends. */
static void coll_begin(coll_t *c, st_net_t *net, uint32_t op, size_t max_sends)
{
	*c = (coll_t){ .net = net, .op = op, .seq = ++net->coll_seq };
	/* Its message rounds on the critical path (st_net_coll_rounds): a
	 * step's latency cost, whatever the bytes. */
	const int P = net->size;
	const unsigned rounds = P < 2 ? 0 : op == OP_ALLREDUCE ? 2 : op == OP_ALLGATHER ? 1
		: log2_ceil(P);
	atomic_fetch_add(&net->coll_rounds, rounds);
	max_sends = max_sends ? 2 * max_sends : 1;   /* 2: a send may be split (PHASE_SPLIT) */
	c->reqs = st_xcalloc(max_sends, sizeof *c->reqs);
	c->hdrs = st_xcalloc(max_sends, sizeof *c->hdrs);
}

static int coll_fail(coll_t *c, int rc, int rank, const char *what)
{
	int dead;
	char stall[80];
	if (st_net_dead(c->net, &dead) > 0) {   /* the cause, rather than a rank that left since */
		rank = dead, what = "died";
		if (st__net_stalled(c->net, dead)) {
			snprintf(stall, sizeof stall, "did not answer within %g s (stalled?)",
				 c->net->cfg.timeout_s);
			what = stall;
		}
	}
	if (!c->failed && rc != ST_ECANCELED)
		st_error("net: %s #%llu on rank %d failed: rank %d %s", op_name[c->op],
			 (unsigned long long)c->seq, c->net->rank, rank, what);
	c->failed = 1;
	return rc == ST_EAGAIN ? ST_EPEER : rc;
}

/* Waits for every send posted so far, then releases c. */
static int coll_end(coll_t *c, int rc)
{
	int w = st__net_wait(c->net, c->reqs, c->n_sends);
	if (w < 0 && rc == ST_OK)
		rc = coll_fail(c, w, c->reqs[0].dst, "is gone (a send failed)");
	free(c->reqs);
	free(c->hdrs);
	return rc;
}

/* Sends this collective's message of `phase` to dst. in_place: its
 * receiver takes it with coll_recv_into, into a place of its own, so a
 * large payload may go DIRECT; otherwise with coll_recv. */
static int coll_send(coll_t *c, int dst, uint32_t phase, const void *data, size_t len,
		     int in_place)
{
	int i = c->n_sends;
	const int apart = len >= SPLIT_MIN && st__net_bare(c->net, dst);
	const uint32_t how = !apart ? 0 : in_place ? PHASE_DIRECT : PHASE_SPLIT;
	c->hdrs[i] = (coll_hdr_t){ c->op, phase | how, c->seq, len };
	int rc = st__net_post(c->net, &c->reqs[i], dst, ST__NET_COLL_CHAN, &c->hdrs[i],
			      sizeof c->hdrs[i], data, apart ? 0 : len);
	if (rc == ST_OK && apart) {
		c->n_sends++;
		rc = how == PHASE_DIRECT
			? st__net_post_direct(c->net, &c->reqs[i + 1], dst, ST__NET_COLL_CHAN, data,
					      len)
			: st__net_post(c->net, &c->reqs[i + 1], dst, ST__NET_COLL_CHAN, data, len,
				       NULL, 0);
	}
	if (rc < 0)
		return coll_fail(c, rc, dst, "is gone");
	c->n_sends++;
	return ST_OK;
}

/* The next message from src on the collectives' channel. */
static int coll_next(coll_t *c, int src, void **msg, size_t *len)
{
	/* No deadline of its own: a live rank may compute for long before it
	 * joins (a slow epoch, a large batch). The failure monitor (boot.c)
	 * turns a rank that sends no sign of life for timeout_s into a dead
	 * one, which ends the wait. */
	int gone = src;
	int rc = st__net_recv(c->net, src, ST__NET_COLL_CHAN, msg, len, NULL, -1, 1, &gone);
	return rc < 0 ? coll_fail(c, rc, gone, "is gone") : ST_OK;
}

/* A DIRECT payload of len bytes from src, received straight into buf. */
static int coll_direct(coll_t *c, int src, void *buf, size_t len)
{
	int gone = src;
	int rc = st__net_recv_direct(c->net, src, ST__NET_COLL_CHAN, buf, len, 1, &gone);
	return rc < 0 ? coll_fail(c, rc, gone, "is gone") : ST_OK;
}

/* A payload sent apart from its header (PHASE_SPLIT or PHASE_DIRECT, h's
 * len bytes) into *msg, a buffer of pool.c. */
static int coll_payload(coll_t *c, int src, const coll_hdr_t *h, void **msg, size_t *len)
{
	if (h->phase & PHASE_SPLIT)
		return coll_next(c, src, msg, len);
	if (!(*msg = st__net_pool_get(c->net, h->len)))
		return coll_fail(c, ST_ENOMEM, src, "sent more than fits in memory");
	*len = h->len;
	int rc = coll_direct(c, src, *msg, h->len);
	if (rc < 0) {
		st__net_pool_put(c->net, *msg);
		*msg = NULL;
	}
	return rc;
}

/* This collective's header of `phase` from src, into *h: *msg (give it
 * back with st__net_pool_put) is its message, *len bytes, the header
 * first. Leftovers of an abandoned collective are dropped on the way,
 * with their payloads. */
static int coll_recv_hdr(coll_t *c, int src, uint32_t phase, coll_hdr_t *h, void **msg,
			 size_t *len)
{
	st_net_t *net = c->net;
	for (;;) {
		int rc = coll_next(c, src, msg, len);
		if (rc < 0)
			return rc;
		*h = (coll_hdr_t){ 0 };
		if (*len >= sizeof *h)
			memcpy(h, *msg, sizeof *h);
		const uint32_t apart = *len == sizeof *h ? h->phase & (PHASE_SPLIT | PHASE_DIRECT) : 0;
		const int known = *len >= sizeof *h;
		if (known && h->seq < c->seq) {   /* from an abandoned collective */
			st__net_pool_put(net, *msg);
			if (apart && (rc = coll_payload(c, src, h, msg, len)) < 0)
				return rc;
			if (apart)
				st__net_pool_put(net, *msg);
			continue;
		}
		if (known && h->seq == c->seq && h->op == c->op &&
		    (h->phase & ~(PHASE_SPLIT | PHASE_DIRECT)) == phase) {
			h->phase = apart;   /* how its payload comes, if apart */
			return ST_OK;
		}
		st__net_pool_put(net, *msg);
		*msg = NULL;
		st_error("net: rank %d sent %s #%llu (phase %u) while rank %d is in %s #%llu: every "
			 "rank must call the collectives in the same order", src,
			 op_name[h->op < 5 ? h->op : 0], (unsigned long long)h->seq,
			 h->phase & ~(PHASE_SPLIT | PHASE_DIRECT), net->rank, op_name[c->op],
			 (unsigned long long)c->seq);
		c->failed = 1;
		return ST_EPEER;
	}
}

/* The payload of header h, whose message (len bytes, the header first)
 * is *msg: there, or apart from it (then *msg is the payload's buffer).
 * *data and *len: the payload. */
static int coll_body(coll_t *c, int src, const coll_hdr_t *h, void **msg, const void **data,
		     size_t *len)
{
	*data = (char *)*msg + sizeof *h;
	*len -= sizeof *h;
	if (!h->phase)
		return ST_OK;
	st__net_pool_put(c->net, *msg);
	int rc = coll_payload(c, src, h, msg, len);
	*data = *msg;
	return rc;
}

/* Receives this collective's message of `phase` from src: *msg (give it
 * back with st__net_pool_put) holds the len bytes of payload at *data. */
static int coll_recv(coll_t *c, int src, uint32_t phase, void **msg, const void **data,
		     size_t *len)
{
	coll_hdr_t h;
	int rc = coll_recv_hdr(c, src, phase, &h, msg, len);
	return rc < 0 ? rc : coll_body(c, src, &h, msg, data, len);
}

/* Receives exactly len payload bytes from src into out: a DIRECT payload
 * straight there, others through a buffer of ours. */
static int coll_recv_into(coll_t *c, int src, uint32_t phase, void *out, size_t len)
{
	coll_hdr_t h;
	void *msg;
	const void *data;
	size_t got;
	int rc = coll_recv_hdr(c, src, phase, &h, &msg, &got);
	if (rc < 0)
		return rc;
	const size_t sent = h.phase ? h.len : got - sizeof h;
	if (sent != len) {
		st__net_pool_put(c->net, msg);
		st_error("net: %s #%llu: rank %d contributed %zu bytes, rank %d %zu: every rank "
			 "must pass the same size", op_name[c->op], (unsigned long long)c->seq, src,
			 sent, c->net->rank, len);
		c->failed = 1;
		return ST_EPEER;
	}
	if (h.phase == PHASE_DIRECT) {
		st__net_pool_put(c->net, msg);
		return coll_direct(c, src, out, len);
	}
	if ((rc = coll_body(c, src, &h, &msg, &data, &got)) < 0)
		return rc;
	if (len)
		memcpy(out, data, len);
	st__net_pool_put(c->net, msg);
	return ST_OK;
}

int st_net_barrier(st_net_t *net)
{
	coll_t c;
	coll_begin(&c, net, OP_BARRIER, (size_t)net->size);
	int rc = ST_OK, P = net->size, r = net->rank;
	/* Dissemination: after round k every rank has heard, through a chain,
	 * from the 2^(k+1) ranks before it. */
	for (uint32_t k = 1, round = 0; rc == ST_OK && (int)k < P; k <<= 1, round++) {
		rc = coll_send(&c, (int)((r + k) % (uint32_t)P), round, NULL, 0, 1);
		if (rc == ST_OK)
			rc = coll_recv_into(&c, (int)((r + (uint32_t)P - k) % (uint32_t)P), round, NULL, 0);
	}
	return coll_end(&c, rc);
}

int st_net_allgather(st_net_t *net, const void *mine, size_t len, void *out)
{
	coll_t c;
	coll_begin(&c, net, OP_ALLGATHER, (size_t)net->size);
	int rc = ST_OK, P = net->size, r = net->rank;
	if (len)
		memcpy((char *)out + (size_t)r * len, mine, len);
	for (int s = 1; rc == ST_OK && s < P; s++)
		rc = coll_send(&c, (r + s) % P, 0, mine, len, 1);
	for (int s = 0; rc == ST_OK && s < P; s++)
		if (s != r)
			rc = coll_recv_into(&c, s, 0, (char *)out + (size_t)s * len, len);
	return coll_end(&c, rc);
}

static size_t chunk_lo(size_t n, int P, int c)
{
	size_t q = n / (size_t)P, rem = n % (size_t)P;
	return q * (size_t)c + ((size_t)c < rem ? (size_t)c : rem);
}

/* acc[i] += x[i], 16 floats at a time: GCC's -O2 leaves the plain loop
 * scalar (it would need an epilogue), and scalar adds were the largest
 * part of a 2-rank allreduce's CPU (perf: 29%, more than either copy).
 * Each element is still its own sum, so the bits are the plain loop's.
 * Built twice: for the baseline (SSE: four 16-byte adds per step, through
 * the stack) and for AVX-512 where the CPU has it (runtime/simd.h; one
 * 64-byte add): the 2-rank allreduce of 2M floats 2.73 -> 2.47 ms on the
 * 2-core VM (docs/benchmarks.md, "Small-message latency"). */
typedef float v16f __attribute__((vector_size(64)));

#define ADD_F32_BODY                                       \
	size_t i = 0;                                      \
	for (; i + 16 <= n; i += 16) {                     \
		v16f a, b;                                 \
		memcpy(&a, acc + i, sizeof a);             \
		memcpy(&b, x + i, sizeof b);               \
		a += b;                                    \
		memcpy(acc + i, &a, sizeof a);             \
	}                                                  \
	for (; i < n; i++)                                 \
		acc[i] += x[i];

static void add_f32_plain(float *restrict acc, const float *restrict x, size_t n)
{
	ADD_F32_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void add_f32_avx512(float *restrict acc,
							      const float *restrict x, size_t n)
{
	ADD_F32_BODY
}
#endif

static void add_f32(float *restrict acc, const float *restrict x, size_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (st_simd_avx512()) {
		add_f32_avx512(acc, x, n);
		return;
	}
#endif
	add_f32_plain(acc, x, n);
}

/* A chunk travels in segments of at most `seg` floats (the last one
 * shorter): segment j of the chunk that starts at lo covers
 * [lo + j seg, min(lo + (j + 1) seg, lo + cnt)). */
static size_t n_segs(size_t cnt, size_t seg)
{
	return (cnt + seg - 1) / seg;
}

static size_t seg_len(size_t cnt, size_t seg, size_t j)
{
	return cnt - j * seg < seg ? cnt - j * seg : seg;
}

/* Segment j of rank r's chunk (at acc, cnt floats): the contributions of
 * every rank added in rank order, ((x0 + x1) + x2) + ..., into acc. The
 * ranks before r are summed in x0's receive buffer; then our own part
 * joins as acc = acc + that, which is the same bits as that + acc (IEEE
 * addition commutes; only its association matters), so no sum is ever
 * copied back into acc (a copy of the whole chunk on every rank but 0). */
static int reduce_seg(coll_t *c, float *acc, size_t cnt)
{
	void *first = NULL;
	float *before = NULL;   /* x0 + ... + x(r-1), in x0's buffer */
	int rc = ST_OK;
	for (int s = 0; rc == ST_OK && s < c->net->size; s++) {
		if (s == c->net->rank) {
			if (before)
				add_f32(acc, before, cnt);
			continue;
		}
		void *msg;
		const void *data;
		size_t len;
		rc = coll_recv(c, s, 0, &msg, &data, &len);
		if (rc == ST_OK && len != cnt * sizeof(float)) {
			st__net_pool_put(c->net, msg);
			st_error("net: allreduce #%llu: rank %d sent %zu floats where %zu were due: "
				 "every rank must pass the same n", (unsigned long long)c->seq, s,
				 len / sizeof(float), cnt);
			c->failed = 1;
			rc = ST_EPEER;
		}
		if (rc < 0)
			break;
		const float *x = data;
		if (s == 0 && c->net->rank > 0) {   /* x0 starts the sum of those before us */
			first = msg;
			before = (float *)x;
			continue;
		}
		add_f32(s < c->net->rank ? before : acc, x, cnt);
		st__net_pool_put(c->net, msg);
	}
	st__net_pool_put(c->net, first);
	return rc;
}

int st_net_allreduce_f32(st_net_t *net, float *buf, size_t n)
{
	if (net->mpi_on)   /* STRATA_NET_COLL=mpi (coll_mpi.c) */
		return st__net_mpi_allreduce(net, buf, n);
	int P = net->size, r = net->rank, rc = ST_OK;
	const size_t seg = net->coll_seg;
	const size_t lo = chunk_lo(n, P, r), cnt = chunk_lo(n, P, r + 1) - lo;
	/* Chunk 0 is the largest; every send of both phases may be in flight. */
	const size_t max_segs = n_segs(chunk_lo(n, P, 1), seg);
	coll_t c;
	coll_begin(&c, net, OP_ALLREDUCE, 2 * (size_t)(P - 1) * max_segs);
	/* 1. reduce-scatter: segment j of chunk d goes to rank d, every
	 * segment posted at once, segment-major so that every owner can start
	 * adding its first segment while the rest are on their way. */
	for (size_t j = 0; j < max_segs; j++)
		for (int s = 1; rc == ST_OK && s < P; s++) {
			int d = (r + s) % P;
			size_t dlo = chunk_lo(n, P, d), dcnt = chunk_lo(n, P, d + 1) - dlo;
			if (j < n_segs(dcnt, seg))
				rc = coll_send(&c, d, 0, buf + dlo + j * seg,
					       seg_len(dcnt, seg, j) * sizeof(float), 0);
		}
	const int n_scatter = c.n_sends;
	/* Our own chunk, a segment at a time: sum it, then send it to the
	 * others at once (2. allgather), while the later segments arrive. */
	for (size_t j = 0; rc == ST_OK && P > 1 && j < n_segs(cnt, seg); j++) {
		float *acc = buf + lo + j * seg;
		size_t len = seg_len(cnt, seg, j);
		rc = reduce_seg(&c, acc, len);
		for (int s = 1; rc == ST_OK && s < P; s++)
			rc = coll_send(&c, (r + s) % P, 1, acc, len * sizeof(float), 1);
	}
	/* The other chunks are overwritten below: their sends must be done. */
	int w = st__net_wait(net, c.reqs, n_scatter);
	if (w < 0 && rc == ST_OK)
		rc = coll_fail(&c, w, c.reqs[0].dst, "is gone (a send failed)");
	for (size_t j = 0; rc == ST_OK && j < max_segs; j++)
		for (int s = 0; rc == ST_OK && s < P; s++) {
			size_t slo = chunk_lo(n, P, s), scnt = chunk_lo(n, P, s + 1) - slo;
			if (s != r && j < n_segs(scnt, seg))
				rc = coll_recv_into(&c, s, 1, buf + slo + j * seg,
						    seg_len(scnt, seg, j) * sizeof(float));
		}
	return coll_end(&c, rc);
}

int st_net_bcast(st_net_t *net, int root, void *buf, size_t len)
{
	int P = net->size, vr = (net->rank - root + P) % P, rc = ST_OK;
	coll_t c;
	coll_begin(&c, net, OP_BCAST, (size_t)P);
	/* Binomial tree over ranks relative to root: receive from the parent
	 * (vr minus its lowest set bit), then send to vr + 2^k below it. */
	int mask = 1;
	for (; mask < P; mask <<= 1)
		if (vr & mask) {
			rc = coll_recv_into(&c, (vr - mask + root) % P, 0, buf, len);
			break;
		}
	for (mask >>= 1; rc == ST_OK && mask > 0; mask >>= 1)
		if (vr + mask < P)
			rc = coll_send(&c, (vr + mask + root) % P, 0, buf, len, 1);
	return coll_end(&c, rc);
}
