/*
 * wire.h — message layouts of the sharded store (ops/dist, private). Every
 * message is one flat buffer: a header, then arrays, each padded to 8
 * bytes; the receiver checks every length against the header before
 * touching an array (a malformed message is logged and dropped).
 */
#ifndef ST_DIST_WIRE_H
#define ST_DIST_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* Channels (runtime/net). Replies to a train worker w use CH_DENSE_REPLY + w
 * and CH_STEP_REPLY + w (w < CH_STEP_MAX_WORKERS). */
enum {
	CH_REQ = 1,            /* to an owner's service */
	CH_PULL_REPLY = 2,     /* to the pull thread */
	CH_CTRL = 3,           /* finish protocol */
	CH_FLUSH_REPLY = 4,
	CH_DENSE_REPLY = 64,
	CH_STEP_REPLY = 0x1000, /* rows for one train step (steprows.c) */
	CH_STEP_MAX_WORKERS = 1024,
};

enum {
	MSG_PULL = 0x50554c4c,    /* "PULL" */
	MSG_PULL_REPLY = 0x52504c4c,
	MSG_PUSH = 0x50555348,    /* "PUSH" */
	MSG_DENSE = 0x44454e53,   /* "DENS" */
	MSG_DENSE_REPLY = 0x52444e53,
	MSG_FLUSH = 0x464c5348,   /* "FLSH" */
	MSG_FLUSH_REPLY = 0x52464c53,
	MSG_DONE = 0x444f4e45,    /* "DONE" */
	MSG_FIN = 0x46494e21,     /* "FIN!" */
	MSG_BFLUSH = 0x42464c53,  /* "BFLS": apply a partial gradient buffer (psbuf.c) */
	MSG_IDLE = 0x49444c45,    /* "IDLE": a worker under the clock rule has no
				   * minibatch left (hop.c) */
};

/* Flags. */
enum {
	WF_CREATE = 1,            /* PULL: create rows (train batch) */
	WF_SYNC = 2,              /* PUSH: a synchronous step */
	WF_F16 = 4,               /* floats as block-scaled fp16 */
	WF_BUF = 8,               /* PUSH, DENSE: a contribution to the gradient
				   * buffers (psbuf.c): step = token, stamp = M,
				   * pad = tolerance */
	WF_PERID = 16,            /* with WF_BUF: GBA's per-ID tags and averages
				   * (ops/algo/gba.h) */
	WF_HOP = 32,              /* DENSE: the bounded-staleness clock rule
				   * (ops/algo/hopclock.h), stamp = b (hop.c) */
	WF_BW = 64,               /* DENSE: the backup-worker quorum
				   * (ops/algo/hopclock.h), stamp = b, step = token;
				   * PUSH (with WF_SYNC): a step of pad = K ranks */
	WF_STEP = 128,            /* PULL: a train worker's rows for one step
				   * (steprows.c): never creates rows nor waits
				   * (step 0), answered on CH_STEP_REPLY + worker */
};

typedef struct wire_hdr {
	uint32_t type;
	uint32_t n;               /* keys (PULL, PUSH), floats (DENSE) */
	uint64_t req;             /* request id echoed by the reply */
	uint64_t step;            /* PULL: need_step; PUSH: step (WF_BUF: token);
				   * DENSE_REPLY (WF_BUF): the contribution's age */
	uint64_t t;               /* PUSH: optimizer step; DENSE_REPLY: version
				   * (WF_BUF: the next token); PULL_REPLY: the
				   * owner's buffered step count */
	uint32_t stamp;           /* PULL: TTL clock; WF_BUF: M */
	uint32_t flags;
	uint32_t worker;          /* DENSE: the worker's reply channel offset */
	uint32_t pad;             /* WF_BUF: tolerance */
} wire_hdr_t;

static inline size_t wire_pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* Bytes of one row of dim floats on the wire. */
static inline size_t wire_row_bytes(uint32_t dim, int f16)
{
	return f16 ? sizeof(float) + ((sizeof(uint16_t) * dim + 3) & ~(size_t)3)
		   : sizeof(float) * dim;
}

/* fp16 rows scaled by their block's max |x| (persia-hybrid-training.md
 * Section 4.2.3): out = scale (one float) then dim halves of x / scale. */
void st__wire_f16_encode(const float *x, uint32_t dim, void *out);
void st__wire_f16_decode(const void *in, uint32_t dim, float *x);

#endif
