/*
 * steprows.c — a train worker's read of its minibatch's rows from their
 * owners, right before it computes (st_dist_pull_step; dist.h), or issued
 * a few minibatches ahead and collected when the worker gets there
 * (st_dist_step_submit / st_dist_step_wait: the prefetch of dist.prefetch).
 * The policies whose rows are applied on arrival (async, hop_bs, shadow)
 * train each minibatch on the rows as their owners hold them at that
 * moment, as one process's Hogwild workers read the shared table at every
 * step, instead of on the copies the pull stage made for the whole read
 * batch, ahead of training.
 *
 * Why: the batch's copies never see the batch's own updates, nor the
 * other ranks' that arrive meanwhile. With B / minibatch minibatches per
 * read batch and the pull stage's lead of several batches, a frequent row
 * took dozens to hundreds of gradients all computed at one old value — a
 * staleness that grows with the read batch (docs/distributed.md,
 * "Row staleness under async"), where PERSIA's bounded-staleness
 * assumption counts "the number of samples whose embeddings are
 * retrieved but their gradients are not yet updated into the model
 * parameters", below 5 (persia-hybrid-training.md Section 5, Assumption
 * 1; the embedding worker's get before each NN step, Section 4.1 steps
 * 3-7). Read here, a row misses only the updates of the minibatches in
 * flight at the other workers.
 *
 * Prefetch: a read submitted `depth` minibatches ahead is answered by the
 * owner while the worker trains the minibatches before it, so the round
 * trip leaves the step's critical path; the row then also misses this
 * worker's own updates of those `depth` minibatches (their pushes reach
 * the owner after the read did). PERSIA's bound counts exactly those
 * samples, read but not yet applied: depth minibatches more of them
 * (docs/distributed.md, "Prefetched step reads"). Keys this rank owns are
 * read at the wait, not at the submit: they are local, cost no round
 * trip, and are then as fresh as without prefetch.
 *
 * Ordering: the request goes to the owner's service on CH_REQ, the
 * channel this rank's pushes use, so the owner applies every push this
 * rank sent it before answering — a worker reads its own earlier
 * updates (those pushed before the read was submitted). An owner answers
 * a rank's requests in the order they came, on the worker's own reply
 * channel, and one sender's messages on one channel arrive in order: the
 * answers of a worker's reads in flight come back in submit order, which
 * is the order st_dist_step_wait collects them in (a FIFO of slots; each
 * answer's request id is checked).
 *
 * Threads: any number of workers at once, each with its own
 * st_dist_stepbuf_t (its reply channel CH_STEP_REPLY + w, scratch and
 * slots).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dist/dist_internal.h"
#include "runtime/err.h"

/* One read in flight. Positions index `keys`/`tab` and the output: the
 * caller's unique indices (st_dist_pull_step: its own arrays) or the
 * read's own 0..n-1 (submit: copies in the slot). */
typedef struct slot {
	uint64_t req;              /* request id (echoed by every owner) */
	uint32_t n;
	const uint64_t *keys;      /* keys[pos] */
	const uint8_t *tab;
	uint64_t *kcopy;           /* [kcap] submit's copies of the keys */
	uint8_t *tcopy;
	size_t kcap;
	uint32_t stamp;
	float *buf;                /* the caller's, until the wait */
	size_t stride;
	uint8_t *ok;
	uint32_t *cnt;             /* [P] keys per owner */
	uint32_t **pos;            /* [P] positions of each owner's keys */
	size_t *cap;               /* [P] */
} slot_t;

struct st_dist_stepbuf {
	int w;                     /* the worker: its reply channel */
	int P;
	uint64_t req;              /* requests made */
	slot_t slot[ST_DIST_STEP_MAX_AHEAD + 1];
	uint32_t head, len;        /* the FIFO of reads in flight */
	obuf_t *out;               /* [P] one request per owner (reused once sent) */
};

st_dist_stepbuf_t *st_dist_stepbuf_create(const st_dist_t *d, int w)
{
	if (w < 0 || w >= CH_STEP_MAX_WORKERS)
		return NULL;
	st_dist_stepbuf_t *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->w = w;
	s->P = d->P;
	int ok = (s->out = calloc((size_t)d->P, sizeof *s->out)) != NULL;
	for (int i = 0; ok && i <= ST_DIST_STEP_MAX_AHEAD; i++) {
		slot_t *sl = &s->slot[i];
		sl->cnt = calloc((size_t)d->P, sizeof *sl->cnt);
		sl->pos = calloc((size_t)d->P, sizeof *sl->pos);
		sl->cap = calloc((size_t)d->P, sizeof *sl->cap);
		ok = sl->cnt && sl->pos && sl->cap;
	}
	if (!ok) {
		st_dist_stepbuf_destroy(s);
		return NULL;
	}
	return s;
}

void st_dist_stepbuf_destroy(st_dist_stepbuf_t *s)
{
	if (!s)
		return;
	for (int i = 0; i <= ST_DIST_STEP_MAX_AHEAD; i++) {
		slot_t *sl = &s->slot[i];
		for (int o = 0; sl->pos && o < s->P; o++)
			free(sl->pos[o]);
		free(sl->cnt);
		free(sl->pos);
		free(sl->cap);
		free(sl->kcopy);
		free(sl->tcopy);
	}
	for (int o = 0; s->out && o < s->P; o++)
		free(s->out[o].p);
	free(s->out);
	free(s);
}

int st_dist_step_inflight(const st_dist_stepbuf_t *s)
{
	return (int)s->len;
}

/* Splits the slot's keys at positions idx[q] (idx NULL: q), q < n, by
 * owner into sl->pos[o][0..cnt[o]). */
static int split(const st_dist_t *d, slot_t *sl, const uint32_t *idx, uint32_t n)
{
	memset(sl->cnt, 0, sizeof(uint32_t) * (size_t)d->P);
	for (uint32_t q = 0; q < n; q++) {
		const uint32_t i = idx ? idx[q] : q;
		const int o = st_dist_owner(d, sl->keys[i]);
		if (st__dist_grow((void **)&sl->pos[o], &sl->cap[o], (size_t)sl->cnt[o] + 1,
				  sizeof(uint32_t)) < 0)
			return ST_ENOMEM;
		sl->pos[o][sl->cnt[o]++] = i;
	}
	return ST_OK;
}

/* One owner's request: a PULL of its keys that replies to this worker. */
static int request(st_dist_t *d, st_dist_stepbuf_t *s, const slot_t *sl, int o)
{
	const uint32_t m = sl->cnt[o];
	obuf_t *b = &s->out[o];
	const size_t bytes = sizeof(wire_hdr_t) + sizeof(uint64_t) * (size_t)m + wire_pad8(m);
	if (st__dist_ob_reserve(b, bytes) < 0)
		return ST_ENOMEM;
	wire_hdr_t *h = (wire_hdr_t *)b->p;
	*h = (wire_hdr_t){ .type = MSG_PULL, .n = m, .req = sl->req, .stamp = sl->stamp,
			   .flags = WF_STEP, .worker = (uint32_t)s->w };
	uint64_t *k = (uint64_t *)(h + 1);
	uint8_t *t = (uint8_t *)(k + m);
	const uint32_t *pos = sl->pos[o];
	for (uint32_t i = 0; i < m; i++) {
		k[i] = sl->keys[pos[i]];
		t[i] = sl->tab[pos[i]];
	}
	memset(t + m, 0, wire_pad8(m) - m);
	b->len = bytes;
	int rc = st_net_send(d->net, o, CH_REQ, b->p, bytes);
	if (rc < 0)
		st_error("dist: rows for a train step from rank %d: %s", o, st_strerror(rc));
	return rc;
}

/* Owner o's answer into the slot's buf and ok at the positions of its keys.
 * probe: look first whether it is already here (prefetched reads), and
 * count a wait when not; otherwise every wait counts. */
static int receive(st_dist_t *d, st_dist_stepbuf_t *s, const slot_t *sl, int o, int probe)
{
	void *msg;
	size_t len;
	int from;
	const uint32_t chan = CH_STEP_REPLY + (uint32_t)s->w;
	int rc = probe ? st_net_recv(d->net, o, chan, &msg, &len, &from, 0) : ST_EAGAIN;
	if (rc == ST_EAGAIN) {
		stat_add(&d->st.step_waits, 1);
		rc = st_net_recv(d->net, o, chan, &msg, &len, &from, -1);
	}
	if (rc < 0) {
		st_error("dist: rows for a train step from rank %d: %s", o, st_strerror(rc));
		return rc;
	}
	const uint32_t m = sl->cnt[o];
	const wire_hdr_t *h = msg;
	const uint32_t *pos = sl->pos[o];
	int bad = len < sizeof *h || h->type != MSG_PULL_REPLY || h->n != m || h->req != sl->req;
	const int f16 = !bad && (h->flags & WF_F16);
	size_t need = sizeof *h + wire_pad8(m);
	const uint8_t *rok = (const uint8_t *)(h + 1);
	for (uint32_t i = 0; !bad && i < m; i++)
		if (rok[i])
			need += wire_row_bytes(d->dim[sl->tab[pos[i]]], f16);
	if (bad || len != need) {
		free(msg);
		return st__dist_bad_msg(o, "PULL reply (train step)", len);
	}
	const uint8_t *p = rok + wire_pad8(m);
	for (uint32_t i = 0; i < m; i++) {
		sl->ok[pos[i]] = rok[i];
		if (!rok[i])
			continue;
		const uint32_t dim = d->dim[sl->tab[pos[i]]];
		st__dist_get_row(p, dim, f16, sl->buf + (size_t)pos[i] * sl->stride);
		p += wire_row_bytes(dim, f16);
	}
	free(msg);
	return ST_OK;
}

/* Splits the slot and sends the other owners' requests. */
static int issue(st_dist_t *d, st_dist_stepbuf_t *s, slot_t *sl, const uint32_t *idx,
		 uint32_t n)
{
	int rc = split(d, sl, idx, n);
	if (rc < 0)
		return rc;
	sl->req = ++s->req;
	int asked = 0;
	for (int o = 0; o < d->owners; o++) {
		if (o == d->rank || !sl->cnt[o])
			continue;
		if ((rc = request(d, s, sl, o)) < 0)
			return rc;
		asked = 1;
	}
	if (asked) {
		/* The owners answer in parallel: one round trip per read. */
		stat_add(&d->st.round_trips, 1);
		stat_add(&d->st.step_reads, 1);
		if (s->len)
			stat_add(&d->st.step_reads_ahead, 1);
	}
	return ST_OK;
}

/* The slot's own keys from this rank's tables, then the other owners'
 * answers. A failure leaves answers unread: the caller cancels. */
static int complete(st_dist_t *d, st_dist_stepbuf_t *s, const slot_t *sl, int probe)
{
	int rc;
	if (d->rank < d->owners && sl->cnt[d->rank]) {
		pthread_mutex_lock(&d->mu);
		rc = st__dist_serve_rows(d, sl->keys, sl->tab, sl->pos[d->rank], sl->cnt[d->rank],
					 0, sl->stamp, sl->ok, sl->buf, sl->stride);
		pthread_mutex_unlock(&d->mu);
		if (rc < 0)
			return rc;
		stat_add(&d->st.keys_local, sl->cnt[d->rank]);
	}
	for (int o = 0; o < d->owners; o++) {
		if (o == d->rank || !sl->cnt[o])
			continue;
		if ((rc = receive(d, s, sl, o, probe)) < 0)
			return rc;
		stat_add(&d->st.pulls_remote, 1);
		stat_add(&d->st.keys_remote, sl->cnt[o]);
	}
	return ST_OK;
}

int st_dist_pull_step(st_dist_t *d, st_dist_stepbuf_t *s, const uint64_t *keys,
		      const uint8_t *table, const uint32_t *idx, uint32_t n, uint32_t stamp,
		      float *buf, size_t stride, uint8_t *ok)
{
	/* Not mixed with prefetched reads: their answers would come first. */
	assert(s->len == 0);
	slot_t *sl = &s->slot[s->head];
	sl->keys = keys;
	sl->tab = table;
	sl->n = n;
	sl->stamp = stamp;
	sl->buf = buf;
	sl->stride = stride;
	sl->ok = ok;
	/* The other owners' requests first, so they are served while this
	 * rank reads its own keys; then wait for them (no probe: the answer
	 * cannot be here yet, and every wait counts). */
	int rc = issue(d, s, sl, idx, n);
	return rc < 0 ? rc : complete(d, s, sl, 0);
}

int st_dist_step_submit(st_dist_t *d, st_dist_stepbuf_t *s, const uint64_t *keys,
			const uint8_t *table, const uint32_t *idx, uint32_t n, uint32_t stamp,
			float *buf, size_t stride, uint8_t *ok)
{
	assert(s->len <= ST_DIST_STEP_MAX_AHEAD);
	if (s->len > ST_DIST_STEP_MAX_AHEAD)
		return ST_EINVAL;
	slot_t *sl = &s->slot[(s->head + s->len) % (ST_DIST_STEP_MAX_AHEAD + 1)];
	if (n > sl->kcap) {
		size_t c = sl->kcap ? sl->kcap : 256;
		while (c < n)
			c *= 2;
		free(sl->kcopy);
		free(sl->tcopy);
		sl->kcopy = malloc(sizeof(uint64_t) * c);
		sl->tcopy = malloc(c);
		sl->kcap = sl->kcopy && sl->tcopy ? c : 0;
		if (!sl->kcap)
			return ST_ENOMEM;
	}
	for (uint32_t q = 0; q < n; q++) {
		sl->kcopy[q] = keys[idx[q]];
		sl->tcopy[q] = table[idx[q]];
	}
	sl->keys = sl->kcopy;
	sl->tab = sl->tcopy;
	sl->n = n;
	sl->stamp = stamp;
	sl->buf = buf;
	sl->stride = stride;
	sl->ok = ok;
	int rc = issue(d, s, sl, NULL, n);
	if (rc < 0)
		return rc;   /* not in flight: some owners may answer (cancel drops them) */
	s->len++;
	return ST_OK;
}

int st_dist_step_wait(st_dist_t *d, st_dist_stepbuf_t *s)
{
	assert(s->len > 0);
	if (!s->len)
		return ST_EINVAL;
	const slot_t *sl = &s->slot[s->head];
	int rc = complete(d, s, sl, 1);
	s->head = (s->head + 1) % (ST_DIST_STEP_MAX_AHEAD + 1);
	s->len--;
	return rc;
}

void st_dist_step_cancel(st_dist_t *d, st_dist_stepbuf_t *s)
{
	/* Answers that may still come would be taken for the next read's:
	 * drain the channel of every answer owed. A read whose requests were
	 * only partly sent (a failed submit) owes nothing we can count; the
	 * failure stops the job anyway. */
	while (s->len) {
		slot_t *sl = &s->slot[s->head];
		for (int o = 0; o < d->owners; o++) {
			if (o == d->rank || !sl->cnt[o])
				continue;
			void *msg;
			size_t len;
			int from;
			if (st_net_recv(d->net, o, CH_STEP_REPLY + (uint32_t)s->w, &msg, &len, &from,
					-1) == ST_OK)
				free(msg);
		}
		s->head = (s->head + 1) % (ST_DIST_STEP_MAX_AHEAD + 1);
		s->len--;
	}
}
