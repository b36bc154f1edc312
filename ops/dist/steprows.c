/*
 * steprows.c — a train worker's read of its minibatch's rows from their
 * owners, right before it computes (st_dist_pull_step; dist.h). The
 * policies whose rows are applied on arrival (async, hop_bs, shadow) train
 * each minibatch on the rows as their owners hold them at that moment, as
 * one process's Hogwild workers read the shared table at every step,
 * instead of on the copies the pull stage made for the whole read batch,
 * ahead of training.
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
 * Ordering: the request goes to the owner's service on CH_REQ, the
 * channel this rank's pushes use, so the owner applies every push this
 * rank sent it before answering — a worker reads its own earlier
 * updates. Keys this rank owns are read from its tables under mu, where
 * its own pushes were applied synchronously.
 *
 * Threads: any number of workers at once, each with its own
 * st_dist_stepbuf_t (its reply channel CH_STEP_REPLY + w and scratch).
 */
#include <stdlib.h>
#include <string.h>

#include "ops/dist/dist_internal.h"
#include "runtime/err.h"

struct st_dist_stepbuf {
	int w;                     /* the worker: its reply channel */
	int P;
	uint64_t req;              /* requests sent */
	uint32_t **pos;            /* [P] positions in idx of each owner's keys */
	size_t *cap;               /* [P] */
	obuf_t *out;               /* [P] one request per owner */
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
	s->pos = calloc((size_t)d->P, sizeof *s->pos);
	s->cap = calloc((size_t)d->P, sizeof *s->cap);
	s->out = calloc((size_t)d->P, sizeof *s->out);
	if (!s->pos || !s->cap || !s->out) {
		free(s->pos);
		free(s->cap);
		free(s->out);
		free(s);
		return NULL;
	}
	return s;
}

void st_dist_stepbuf_destroy(st_dist_stepbuf_t *s)
{
	if (!s)
		return;
	for (int o = 0; o < s->P; o++) {
		free(s->pos[o]);
		free(s->out[o].p);
	}
	free(s->pos);
	free(s->cap);
	free(s->out);
	free(s);
}

/* Splits keys[idx[q]] (q < n) by owner into s->pos[o][0..cnt[o]). */
static int split(const st_dist_t *d, st_dist_stepbuf_t *s, const uint64_t *keys,
		 const uint32_t *idx, uint32_t n, uint32_t *cnt)
{
	memset(cnt, 0, sizeof(uint32_t) * (size_t)d->P);
	for (uint32_t q = 0; q < n; q++) {
		const int o = st_dist_owner(d, keys[idx[q]]);
		if (st__dist_grow((void **)&s->pos[o], &s->cap[o], (size_t)cnt[o] + 1,
				  sizeof(uint32_t)) < 0)
			return ST_ENOMEM;
		s->pos[o][cnt[o]++] = idx[q];
	}
	return ST_OK;
}

/* One owner's request: a PULL of its keys that replies to this worker. */
static int request(st_dist_t *d, st_dist_stepbuf_t *s, int o, const uint64_t *keys,
		   const uint8_t *table, uint32_t m, uint32_t stamp)
{
	obuf_t *b = &s->out[o];
	const size_t bytes = sizeof(wire_hdr_t) + sizeof(uint64_t) * (size_t)m + wire_pad8(m);
	if (st__dist_ob_reserve(b, bytes) < 0)
		return ST_ENOMEM;
	wire_hdr_t *h = (wire_hdr_t *)b->p;
	*h = (wire_hdr_t){ .type = MSG_PULL, .n = m, .req = s->req, .stamp = stamp,
			   .flags = WF_STEP, .worker = (uint32_t)s->w };
	uint64_t *k = (uint64_t *)(h + 1);
	uint8_t *t = (uint8_t *)(k + m);
	const uint32_t *pos = s->pos[o];
	for (uint32_t i = 0; i < m; i++) {
		k[i] = keys[pos[i]];
		t[i] = table[pos[i]];
	}
	memset(t + m, 0, wire_pad8(m) - m);
	b->len = bytes;
	int rc = st_net_send(d->net, o, CH_REQ, b->p, bytes);
	if (rc < 0)
		st_error("dist: rows for a train step from rank %d: %s", o, st_strerror(rc));
	return rc;
}

/* Owner o's answer into buf and ok at the positions of its keys. */
static int receive(st_dist_t *d, st_dist_stepbuf_t *s, int o, const uint8_t *table,
		   uint32_t m, float *buf, size_t stride, uint8_t *ok)
{
	void *msg;
	size_t len;
	int from;
	int rc = st_net_recv(d->net, o, CH_STEP_REPLY + (uint32_t)s->w, &msg, &len, &from, -1);
	if (rc < 0) {
		st_error("dist: rows for a train step from rank %d: %s", o, st_strerror(rc));
		return rc;
	}
	const wire_hdr_t *h = msg;
	const uint32_t *pos = s->pos[o];
	int bad = len < sizeof *h || h->type != MSG_PULL_REPLY || h->n != m || h->req != s->req;
	const int f16 = !bad && (h->flags & WF_F16);
	size_t need = sizeof *h + wire_pad8(m);
	const uint8_t *rok = (const uint8_t *)(h + 1);
	for (uint32_t i = 0; !bad && i < m; i++)
		if (rok[i])
			need += wire_row_bytes(d->dim[table[pos[i]]], f16);
	if (bad || len != need) {
		free(msg);
		return st__dist_bad_msg(o, "PULL reply (train step)", len);
	}
	const uint8_t *p = rok + wire_pad8(m);
	for (uint32_t i = 0; i < m; i++) {
		ok[pos[i]] = rok[i];
		if (!rok[i])
			continue;
		const uint32_t dim = d->dim[table[pos[i]]];
		st__dist_get_row(p, dim, f16, buf + (size_t)pos[i] * stride);
		p += wire_row_bytes(dim, f16);
	}
	free(msg);
	return ST_OK;
}

int st_dist_pull_step(st_dist_t *d, st_dist_stepbuf_t *s, const uint64_t *keys,
		      const uint8_t *table, const uint32_t *idx, uint32_t n, uint32_t stamp,
		      float *buf, size_t stride, uint8_t *ok)
{
	uint32_t cnt[ST_NET_MAX_RANKS];
	int rc = split(d, s, keys, idx, n, cnt);
	if (rc < 0)
		return rc;
	s->req++;
	/* The other owners' requests first, so they are served while this
	 * rank reads its own keys. */
	for (int o = 0; o < d->owners; o++)
		if (o != d->rank && cnt[o] && (rc = request(d, s, o, keys, table, cnt[o], stamp)) < 0)
			return rc;
	if (d->rank < d->owners && cnt[d->rank]) {
		pthread_mutex_lock(&d->mu);
		rc = st__dist_serve_rows(d, keys, table, s->pos[d->rank], cnt[d->rank], 0, stamp,
					 ok, buf, stride);
		pthread_mutex_unlock(&d->mu);
		if (rc < 0)
			return rc;
		stat_add(&d->st.keys_local, cnt[d->rank]);
	}
	int asked = 0;
	for (int o = 0; o < d->owners; o++) {
		if (o == d->rank || !cnt[o])
			continue;
		if (!asked++)   /* the owners answered in parallel: one round trip */
			stat_add(&d->st.round_trips, 1);
		if ((rc = receive(d, s, o, table, cnt[o], buf, stride, ok)) < 0)
			return rc;
		stat_add(&d->st.pulls_remote, 1);
		stat_add(&d->st.keys_remote, cnt[o]);
	}
	return ST_OK;
}
