/*
 * dist.c — the sharded parameter store of a multi-process job: the owner
 * service, pull, push, asynchronous dense parameters on rank 0 and the end
 * of training (dist.h has the protocol; wire.h the message layouts).
 *
 * Locking: one mutex `mu` guards the tables' row data, the dense parameters
 * on rank 0 (asynchronous policies), the step accumulators, the deferred
 * pulls and the finish bookkeeping. The service thread handles a message
 * with mu held; a rank's own pulls and pushes call the same handlers
 * directly (no message to itself), also under mu. Network sends happen
 * outside mu except replies of the service thread (the network layer never
 * calls back into this file, so there is no lock order to keep).
 */
#include "ops/dist/dist_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "ops/algo/owner.h"
#include "runtime/err.h"

int st_dist_owner(const st_dist_t *d, uint64_t key)
{
	return st_algo_owner_key(key, d->owners);
}

int st_dist_owners(const st_dist_t *d)
{
	return d->owners;
}

int st_dist_rank(const st_dist_t *d) { return d->rank; }
int st_dist_size(const st_dist_t *d) { return d->P; }
st_net_t *st_dist_net(const st_dist_t *d) { return d->net; }

/* ---- the callers' side -------------------------------------------------------- */

static int ob_keys(obuf_t *b, const wire_hdr_t *h0, const uint64_t *keys, const uint8_t *tab,
		   const uint32_t *pos, uint32_t n, size_t row_bytes)
{
	size_t bytes = sizeof *h0 + sizeof(uint64_t) * (size_t)n + wire_pad8(n);
	if (st__dist_ob_reserve(b, bytes + row_bytes) < 0)
		return ST_ENOMEM;
	wire_hdr_t *h = (wire_hdr_t *)b->p;
	*h = *h0;
	h->n = n;
	uint64_t *k = (uint64_t *)(h + 1);
	uint8_t *t = (uint8_t *)(k + n);
	for (uint32_t i = 0; i < n; i++) {
		k[i] = keys[pos[i]];
		t[i] = tab[pos[i]];
	}
	memset(t + n, 0, wire_pad8(n) - n);
	b->len = bytes;
	b->n = n;
	return ST_OK;
}

/* Splits n keys by owner into sp->pos[o][0..cnt[o]). */
static int split_owners(st_dist_t *d, split_t *sp, const uint64_t *keys, uint32_t n,
			uint32_t *cnt)
{
	memset(cnt, 0, sizeof(uint32_t) * (size_t)d->P);
	for (uint32_t i = 0; i < n; i++) {
		int o = st_dist_owner(d, keys[i]);
		if (cnt[o] == sp->cap[o]) {
			size_t c = sp->cap[o] ? 2 * sp->cap[o] : 1024;
			uint32_t *p = realloc(sp->pos[o], sizeof(uint32_t) * c);
			if (!p)
				return ST_ENOMEM;
			sp->pos[o] = p;
			sp->cap[o] = c;
		}
		sp->pos[o][cnt[o]++] = i;
	}
	return ST_OK;
}

/* Waits on cv (mu held) for at most 0.2 s: the callers re-check their
 * condition and which peers are alive after each wake-up. */
static void cv_wait(st_dist_t *d)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 200 * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&d->cv, &d->mu, &ts);
}

static int check_peer(st_dist_t *d, int need_all)
{
	int first;
	if (need_all && st_net_dead(d->net, &first) > 0) {
		st_error("dist: rank %d died: a synchronous step cannot complete", first);
		return ST_EPEER;
	}
	return ST_OK;
}

int st_dist_wait_applied(st_dist_t *d, uint64_t steps)
{
	/* A rank beyond dist.owners holds no shard: no push ever reaches it,
	 * so its count of applied steps never moves, and nothing is to wait
	 * for (it waited forever, hanging the cut of every rank). */
	if (d->rank >= d->owners)
		return ST_OK;
	int rc = ST_OK;
	pthread_mutex_lock(&d->mu);
	while (rc >= 0 && d->applied < steps) {
		cv_wait(d);
		if (d->applied < steps)
			rc = check_peer(d, 1);
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int st_dist_pull(st_dist_t *d, const uint64_t *keys, const uint8_t *table, uint32_t n,
		 uint64_t need_step, int create, uint32_t stamp, float *buf, size_t stride,
		 float **rows, uint64_t *tokens, int (*stop)(void *arg), void *stop_arg)
{
	uint32_t cnt[ST_NET_MAX_RANKS];
	uint32_t **const P = d->pull_split.pos;
	int rc = split_owners(d, &d->pull_split, keys, n, cnt);
	if (rc < 0)
		return rc;
	const uint64_t req = ++d->req;
	const wire_hdr_t h0 = { .type = MSG_PULL, .req = req, .step = need_step,
				.stamp = stamp, .flags = create ? WF_CREATE : 0 };
	memset(buf, 0, sizeof(float) * stride * (size_t)n);
	if (tokens)
		memset(tokens, 0, sizeof(uint64_t) * (size_t)d->P);
	int asked = 0;
	for (int o = 0; o < d->owners; o++) {
		if (o == d->rank || !cnt[o])
			continue;
		if (!asked++)   /* the owners answer in parallel: one round trip */
			stat_add(&d->st.round_trips, 1);
		if ((rc = ob_keys(&d->pull_out[o], &h0, keys, table, P[o], cnt[o], 0)) < 0)
			return rc;
		if ((rc = st_net_send(d->net, o, CH_REQ, d->pull_out[o].p, d->pull_out[o].len)) < 0) {
			st_error("dist: pull from rank %d: %s", o, st_strerror(rc));
			return rc;
		}
		stat_add(&d->st.pulls_remote, 1);
		stat_add(&d->st.keys_remote, cnt[o]);
	}
	/* Own keys, straight from the tables, once the steps are applied. */
	if (d->rank < d->owners && cnt[d->rank]) {
		const uint32_t m = cnt[d->rank], *pos = P[d->rank];
		pthread_mutex_lock(&d->mu);
		while (st__dist_pull_waits(d, need_step)) {
			cv_wait(d);
			if (st__dist_pull_waits(d, need_step) && stop && stop(stop_arg))
				rc = ST_ECANCELED;
			else if (st__dist_pull_waits(d, need_step))
				rc = check_peer(d, 1);
			if (rc < 0) {
				pthread_mutex_unlock(&d->mu);
				return rc;
			}
		}
		/* Straight into the batch's buffer, at the keys' positions. */
		size_t c = d->lok_cap;
		rc = st__dist_grow((void **)&d->lok, &c, n, 1);
		d->lok_cap = c;
		if (rc >= 0)
			rc = st__dist_serve_rows(d, keys, table, pos, m, create, stamp, d->lok, buf,
						 stride);
		if (tokens)
			tokens[d->rank] = d->buf.rows.k;
		pthread_mutex_unlock(&d->mu);
		for (uint32_t i = 0; rc >= 0 && i < m; i++)
			rows[pos[i]] = d->lok[pos[i]] ? buf + (size_t)pos[i] * stride : NULL;
		if (rc < 0)
			return rc;
		stat_add(&d->st.keys_local, m);
	}
	/* The owners' answers, in their order of sending (one request each). */
	for (int o = 0; o < d->owners; o++) {
		if (o == d->rank || !cnt[o])
			continue;
		void *msg;
		size_t len;
		int from;
		for (;;) {
			rc = st_net_recv(d->net, o, CH_PULL_REPLY, &msg, &len, &from, 0.5);
			if (rc != ST_EAGAIN)
				break;
			if (stop && stop(stop_arg))
				return ST_ECANCELED;
			if ((rc = check_peer(d, need_step > 0)) < 0)
				return rc;
		}
		if (rc < 0) {
			st_error("dist: pull from rank %d: %s", o, st_strerror(rc));
			return rc;
		}
		const wire_hdr_t *h = msg;
		const uint32_t m = cnt[o], *pos = P[o];
		int bad = len < sizeof *h || h->type != MSG_PULL_REPLY || h->n != m || h->req != req;
		const int f16 = !bad && (h->flags & WF_F16);
		size_t need = sizeof *h + wire_pad8(m);
		const uint8_t *ok = (const uint8_t *)(h + 1);
		for (uint32_t i = 0; !bad && i < m; i++)
			if (ok[i])
				need += wire_row_bytes(d->dim[table[pos[i]]], f16);
		if (bad || len != need) {
			free(msg);
			return st__dist_bad_msg(o, "PULL reply", len);
		}
		if (tokens)
			tokens[o] = h->t;
		const uint8_t *p = ok + wire_pad8(m);
		for (uint32_t i = 0; i < m; i++) {
			float *dst = buf + (size_t)pos[i] * stride;
			rows[pos[i]] = ok[i] ? dst : NULL;
			if (!ok[i])
				continue;
			const uint32_t dim = d->dim[table[pos[i]]];
			st__dist_get_row(p, dim, f16, dst);
			p += wire_row_bytes(dim, f16);
		}
		free(msg);
	}
	return ST_OK;
}

/* Waits for the push to owner o still in flight (o < 0: to every owner).
 * Pushes are submitted, not sent (st_net_send_submit): the caller goes
 * on computing while one travels, and they stay in order with everything
 * sent to o after them. A failed one is reported here, at the next push
 * or at the end (st_dist_finish). */
static int push_settle(st_dist_t *d, int o)
{
	int rc = ST_OK;
	for (int r = o < 0 ? 0 : o; r < (o < 0 ? d->P : o + 1); r++) {
		int e = st_net_send_wait(d->net, d->push_req[r]);
		d->push_req[r] = NULL;
		if (e < 0 && rc == ST_OK) {
			st_error("dist: push to rank %d: %s", r, st_strerror(e));
			rc = e;
		}
	}
	return rc;
}

/* Row gradients to their owners, each owner's keys in one message made
 * from h0 (step = tokens[o] when tokens is set); every owner gets one,
 * possibly empty, when `all`. */
static int push_rows(st_dist_t *d, const wire_hdr_t *h0, const uint64_t *tokens, int all,
		     const uint64_t *keys, const uint8_t *table, const float *grad,
		     size_t gstride, uint32_t n)
{
	uint32_t cnt[ST_NET_MAX_RANKS];
	int rc = split_owners(d, &d->push_split, keys, n, cnt);
	if (rc < 0)
		return rc;
	const int f16 = d->f16;
	for (int o = 0; o < d->owners; o++) {
		if (!cnt[o] && !all)
			continue;
		const uint32_t m = cnt[o], *pos = d->push_split.pos[o];
		size_t rb = 0;
		for (uint32_t i = 0; i < m; i++)
			rb += wire_row_bytes(d->dim[table[pos[i]]], f16);
		obuf_t *b = &d->push_out[o];
		/* The previous push to o went out while the worker computed;
		 * its buffer is reused only once it is done. */
		if ((rc = push_settle(d, o)) < 0 || (rc = ob_keys(b, h0, keys, table, pos, m, rb)) < 0)
			return rc;
		if (tokens)
			((wire_hdr_t *)b->p)->step = tokens[o];
		uint8_t *p = b->p + b->len;
		for (uint32_t i = 0; i < m; i++) {
			const uint32_t dim = d->dim[table[pos[i]]];
			st__dist_put_row(p, grad + (size_t)pos[i] * gstride, dim, f16);
			p += wire_row_bytes(dim, f16);
		}
		b->len += rb;
		if (o == d->rank && !(h0->flags & WF_SYNC)) {
			/* Our own shard, without a message; a sync step's list
			 * goes to the service thread (its apply held worker 0's
			 * allreduce: docs/benchmarks.md, "Scale-out on 16 cores"). */
			void *copy = malloc(b->len);
			if (!copy)
				return ST_ENOMEM;
			memcpy(copy, b->p, b->len);
			pthread_mutex_lock(&d->mu);
			rc = st__dist_handle(d, copy, b->len, d->rank);
			pthread_mutex_unlock(&d->mu);
		} else {
			rc = st_net_send_submit(d->net, o, CH_REQ, b->p, b->len, &d->push_req[o]);
			if (rc < 0)
				st_error("dist: push to rank %d: %s", o, st_strerror(rc));
		}
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}

int st_dist_push(st_dist_t *d, uint64_t step, int sync, uint64_t t, const uint64_t *keys,
		 const uint8_t *table, const float *grad, size_t gstride, uint32_t n)
{
	const wire_hdr_t h0 = { .type = MSG_PUSH, .step = step, .t = t,
				.flags = (sync ? WF_SYNC : 0) | (d->f16 ? WF_F16 : 0) };
	return push_rows(d, &h0, NULL, sync, keys, table, grad, gstride, n);
}

static void buf_hdr(wire_hdr_t *h, const st_dist_buf_t *b)
{
	h->flags |= WF_BUF | (b->perid ? WF_PERID : 0);
	h->stamp = b->M;
	h->pad = b->tol;
}

int st_dist_push_buf(st_dist_t *d, const st_dist_buf_t *b, const uint64_t *tokens,
		     const uint64_t *keys, const uint8_t *table, const float *grad,
		     size_t gstride, uint32_t n)
{
	wire_hdr_t h0 = { .type = MSG_PUSH, .flags = d->f16 ? WF_F16 : 0 };
	buf_hdr(&h0, b);
	return push_rows(d, &h0, tokens, 1, keys, table, grad, gstride, n);
}

/* Rank 0's own hop_bw contribution (mu held): as the service does for the
 * other ranks (serve.c), waiting on cv until the step closes. */
static int bw_local(st_dist_t *d, const wire_hdr_t *h, const float *grad, wire_hdr_t *rep)
{
	int late = 0;
	int rc = st__dist_bw_contrib(d, h, grad, 0, &late);
	if (rc == ST_EINVAL)
		st_error("dist: hop_bw: a step not open yet, or another bound");
	if (rc < 0)
		return rc;
	if (late) {
		*rep = (wire_hdr_t){ .t = d->hop.q.k, .flags = grad ? 1 : 0 };
		return ST_OK;
	}
	if ((rc = st__dist_hop_hold(d, 0, UINT32_MAX, 0)) < 0)
		return rc;
	const uint64_t mine = h->step;
	while (rc >= 0 && d->hop.q.k == mine) {
		rc = st__dist_hop_poll(d);   /* closes the step when it can */
		if (rc < 0 || d->hop.q.k != mine)
			break;
		cv_wait(d);
	}
	*rep = (wire_hdr_t){ .t = d->hop.q.k, .step = d->hop.lastK[0] };
	return rc;
}

/* A DENSE exchange with rank 0: h (n, flags, worker, buffer fields set),
 * then the reply's parameters into params and its header into *rep. */
static int dense_call(st_dist_t *d, wire_hdr_t *h, const float *grad, float *params,
		      wire_hdr_t *rep)
{
	const size_t np = d->p.nparams;
	h->type = MSG_DENSE;
	h->n = (uint32_t)np;
	h->flags |= grad ? 1 : 0;
	if (d->rank == 0) {
		/* Rank 0's own workers: the handlers' work without a message. */
		int rc = ST_OK;
		pthread_mutex_lock(&d->mu);
		*rep = (wire_hdr_t){ 0 };
		if (h->flags & WF_BW) {
			rc = bw_local(d, h, grad, rep);
		} else if (h->flags & WF_BUF) {
			int dropped = 0;
			rc = st__dist_buf_dense(d, h, grad, &rep->t, &rep->step, &dropped);
			rep->flags = dropped ? 1 : 0;
			if (rc == ST_EINVAL)
				st_error("dist: a buffered contribution with other parameters (M, "
					 "tolerance) than the first, or a token from the future");
		} else {
			if (h->flags & WF_HOP && (rc = st__dist_hop_step(d, h, 0, grad != NULL)) == ST_EINVAL)
				st_error("dist: hop_bs: bad worker index or bound");
			if (grad && rc >= 0)
				st_algo_dense_update(&d->p, d->p.params, d->dense_state, grad,
						     ++*d->dense_t);
			/* hop_bs: wait for the clock rule; the others' messages
			 * and deaths wake us (or the timeout, to see deaths). */
			while (rc >= 0 && h->flags & WF_HOP && !st__dist_hop_ready(d, 0, h->worker)) {
				cv_wait(d);
			}
			if (rc >= 0 && h->flags & WF_HOP)
				rc = st__dist_hop_poll(d);
			rep->t = *d->dense_t;
		}
		if (rc >= 0)
			memcpy(params, d->p.params, sizeof(float) * np);
		pthread_mutex_unlock(&d->mu);
		return rc;
	}
	stat_add(&d->st.round_trips, 1);   /* the request and the parameters back */
	int rc = grad ? st_net_send2(d->net, 0, CH_REQ, h, sizeof *h, grad, sizeof(float) * np)
		      : st_net_send(d->net, 0, CH_REQ, h, sizeof *h);
	if (rc < 0) {
		st_error("dist: dense parameters from rank 0: %s", st_strerror(rc));
		return rc;
	}
	void *msg;
	size_t len;
	int from;
	rc = st_net_recv(d->net, 0, CH_DENSE_REPLY + h->worker, &msg, &len, &from, -1);
	if (rc < 0) {
		st_error("dist: dense parameters from rank 0: %s", st_strerror(rc));
		return rc;
	}
	const wire_hdr_t *r = msg;
	if (len != sizeof *r + sizeof(float) * np || r->type != MSG_DENSE_REPLY) {
		free(msg);
		return st__dist_bad_msg(0, "DENSE reply", len);
	}
	memcpy(params, r + 1, sizeof(float) * np);
	*rep = *r;
	free(msg);
	return ST_OK;
}

int st_dist_dense(st_dist_t *d, int w, const float *grad, float *params, uint64_t *version)
{
	wire_hdr_t h = { .worker = (uint32_t)w }, r;
	int rc = dense_call(d, &h, grad, params, &r);
	if (rc >= 0)
		*version = r.t;
	return rc;
}

int st_dist_dense_hop(st_dist_t *d, int w, uint32_t b, const float *grad, float *params,
		      uint64_t *version)
{
	wire_hdr_t h = { .worker = (uint32_t)w, .stamp = b, .flags = WF_HOP }, r;
	int rc = dense_call(d, &h, grad, params, &r);
	if (rc >= 0)
		*version = r.t;
	return rc;
}

int st_dist_dense_bw(st_dist_t *d, uint32_t b, const float *grad, uint64_t token,
		     float *params, uint64_t *next, uint32_t *K, int *late)
{
	wire_hdr_t h = { .stamp = b, .step = token, .flags = WF_BW }, r;
	int rc = dense_call(d, &h, grad, params, &r);
	if (rc >= 0) {
		*next = r.t;
		*K = (uint32_t)r.step;
		*late = (r.flags & 1) != 0;
	}
	return rc;
}

int st_dist_push_quorum(st_dist_t *d, uint64_t step, uint64_t t, uint32_t K,
			const uint64_t *keys, const uint8_t *table, const float *grad,
			size_t gstride, uint32_t n)
{
	const wire_hdr_t h0 = { .type = MSG_PUSH, .step = step, .t = t, .pad = K,
				.flags = WF_SYNC | WF_BW | (d->f16 ? WF_F16 : 0) };
	return push_rows(d, &h0, NULL, 1, keys, table, grad, gstride, n);
}

int st_dist_idle(st_dist_t *d, int w)
{
	wire_hdr_t h = { .type = MSG_IDLE, .worker = (uint32_t)w };
	if (d->rank != 0)
		return st_net_send(d->net, 0, CH_REQ, &h, sizeof h);
	pthread_mutex_lock(&d->mu);
	int rc = st__dist_hop_idle(d, 0, (uint32_t)w);
	if (rc >= 0)
		rc = st__dist_hop_poll(d);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int st_dist_dense_buf(st_dist_t *d, int w, const st_dist_buf_t *b, const float *grad,
		      uint64_t token, float *params, uint64_t *next, uint64_t *age, int *dropped)
{
	wire_hdr_t h = { .worker = (uint32_t)w, .step = token }, r;
	buf_hdr(&h, b);
	int rc = dense_call(d, &h, grad, params, &r);
	if (rc >= 0) {
		*next = r.t;
		*age = r.step;
		*dropped = (r.flags & 1) != 0;
	}
	return rc;
}

/* ---- the end of training --------------------------------------------------------- */

/* Waits for a control message; *n (if not NULL) = its header's n. */
static int wait_ctrl(st_dist_t *d, int src, uint32_t chan, uint32_t type, const char *what,
		     uint32_t *n)
{
	void *msg;
	size_t len;
	int from;
	int rc = st_net_recv(d->net, src, chan, &msg, &len, &from, -1);
	if (rc < 0) {
		st_error("dist: waiting for rank %d (%s): %s", src, what, st_strerror(rc));
		return rc;
	}
	int ok = len == sizeof(wire_hdr_t) && ((const wire_hdr_t *)msg)->type == type;
	if (ok && n)
		*n = ((const wire_hdr_t *)msg)->n;
	free(msg);
	return ok ? ST_OK : st__dist_bad_msg(src, what, len);
}

/* Every push of ours is applied: a FLUSH to each other owner comes back
 * after the pushes sent before it (one channel, in order). The end of
 * training, a switch of policy and a checkpoint's cut. */
int st_dist_flush(st_dist_t *d)
{
	for (int o = 0; o < d->owners; o++) {
		if (o == d->rank)
			continue;
		wire_hdr_t h = { .type = MSG_FLUSH };
		int rc = st_net_send(d->net, o, CH_REQ, &h, sizeof h);
		if (rc >= 0)
			rc = wait_ctrl(d, o, CH_FLUSH_REPLY, MSG_FLUSH_REPLY, "flush", NULL);
		if (rc < 0) {
			st_error("dist: owner rank %d died: its rows are lost, the job cannot "
				 "finish", o);
			return rc;
		}
	}
	return ST_OK;
}

/* Rank 0, once every contribution of every rank has arrived: the gradient
 * buffers' partial steps (psbuf.c), here and at every other owner. */
int st_dist_flush_buffers(st_dist_t *d)
{
	pthread_mutex_lock(&d->mu);
	int rc = st__dist_buf_flush(d);
	pthread_mutex_unlock(&d->mu);
	for (int o = 1; rc >= 0 && o < d->owners; o++) {
		wire_hdr_t h = { .type = MSG_BFLUSH };
		rc = st_net_send(d->net, o, CH_REQ, &h, sizeof h);
		if (rc >= 0)
			rc = wait_ctrl(d, o, CH_FLUSH_REPLY, MSG_FLUSH_REPLY, "buffer flush", NULL);
		if (rc < 0)
			st_error("dist: owner rank %d died: its rows are lost, the job cannot "
				 "finish", o);
	}
	return rc;
}

int st_dist_finish(st_dist_t *d, int *lost)
{
	*lost = 0;
	const uint32_t round = ++d->round;
	/* 1. Every push of ours is out, and applied. */
	int rc = push_settle(d, -1);
	if (rc >= 0)
		rc = st_dist_flush(d);
	if (rc < 0)
		return rc;
	/* 2. Tell rank 0; rank 0 waits for every live rank, then lets all go. */
	if (d->rank != 0) {
		wire_hdr_t h = { .type = MSG_DONE, .step = round };
		uint32_t nl = 0;
		rc = st_net_send(d->net, 0, CH_REQ, &h, sizeof h);
		if (rc >= 0)
			rc = wait_ctrl(d, 0, CH_CTRL, MSG_FIN, "finish", &nl);
		*lost = (int)nl;   /* rank 0 counted the ranks lost */
		return rc;
	}
	pthread_mutex_lock(&d->mu);
	d->done[0] = round;
	for (;;) {
		int waiting = 0;
		for (int r = 0; r < d->P; r++)
			waiting += d->done[r] < round && st_net_alive(d->net, r);
		if (!waiting)
			break;
		cv_wait(d);
	}
	pthread_mutex_unlock(&d->mu);
	/* 3. Every contribution of every rank has arrived: the partial
	 * buffers, before anyone reads the model. */
	rc = st_dist_flush_buffers(d);
	for (int r = 1; r < d->P; r++)
		*lost += d->done[r] < round;
	for (int r = 1; r < d->P; r++) {
		if (d->done[r] < round) {
			if (d->done[r] + 1 == round)   /* once, in the round it died */
				st_warn("rank %d died %s: its in-flight updates are lost; the job "
					"finished on the other ranks", r,
					round == 1 ? "during training" : "after training");
			if (r < d->owners) {
				st_error("rank %d owned rows: the model is incomplete", r);
				rc = ST_EPEER;
			}
			continue;
		}
		wire_hdr_t h = { .type = MSG_FIN, .n = (uint32_t)*lost };
		int s = st_net_send(d->net, r, CH_CTRL, &h, sizeof h);
		if (s < 0 && rc >= 0)
			rc = s;
	}
	return rc;
}

/* ---- switching between synchronous and asynchronous policies (st.sync.auto) -- */

int st_dist_sync_end(st_dist_t *d, uint64_t steps)
{
	pthread_mutex_lock(&d->mu);
	d->stepcap = steps;
	int rc = st__dist_retry_deferred(d);
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int st_dist_sync_begin(st_dist_t *d)
{
	/* 1. Our pushes are applied; once every rank has said so (the
	 * barrier), nothing of the asynchronous phase is in flight. */
	int rc = st_dist_flush(d);
	if (rc >= 0)
		rc = st_net_barrier(d->net);
	/* 2. Rank 0 applies the buffers' partial steps everywhere and forgets
	 * hop_bs's clocks (a later hop_bs phase starts its clocks afresh). */
	if (rc >= 0 && d->rank == 0) {
		rc = st_dist_flush_buffers(d);
		pthread_mutex_lock(&d->mu);
		st__dist_hop_free(d);
		pthread_mutex_unlock(&d->mu);
	}
	/* 3. Rank 0's dense parameters, optimizer state and step count become
	 * every rank's replica (the bcast also waits for step 2). */
	if (rc >= 0)
		rc = st_net_bcast(d->net, 0, d->p.params, sizeof(float) * d->p.nparams);
	if (rc >= 0 && d->dense_state)
		rc = st_net_bcast(d->net, 0, d->dense_state,
				  sizeof(float) * st_algo_dense_state_floats(&d->p));
	if (rc >= 0 && d->dense_t)
		rc = st_net_bcast(d->net, 0, d->dense_t, sizeof *d->dense_t);
	pthread_mutex_lock(&d->mu);
	d->stepcap = UINT64_MAX;
	pthread_mutex_unlock(&d->mu);
	if (rc < 0)
		st_error("dist: switching to a synchronous policy: %s", st_strerror(rc));
	return rc;
}

/* ---- setup ---------------------------------------------------------------------- */

int st_dist_create(st_dist_t **out, const st_dist_cfg_t *cfg)
{
	st_dist_t *d = calloc(1, sizeof *d);
	if (!d)
		return ST_ENOMEM;
	d->net = cfg->net;
	d->rank = st_net_rank(cfg->net);
	d->P = st_net_size(cfg->net);
	d->owners = cfg->owners > 0 && cfg->owners < d->P ? cfg->owners : d->P;
	d->f16 = cfg->compress;
	d->n_tables = cfg->n_tables;
	d->p = cfg->params;
	d->n_workers = cfg->n_workers > 0 ? cfg->n_workers : 1;
	d->dense_state = cfg->dense_state;
	d->dense_t = cfg->dense_t;
	uint32_t md = 1;
	for (int k = 0; k < d->n_tables; k++) {
		d->tables[k] = cfg->tables[k];
		d->dim[k] = cfg->dim[k];
		md = d->dim[k] > md ? d->dim[k] : md;
	}
	d->stepcap = UINT64_MAX;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	d->trow = malloc(sizeof(float) * md);
	d->pull_out = calloc((size_t)d->P, sizeof(obuf_t));
	d->push_out = calloc((size_t)d->P, sizeof(obuf_t));
	d->push_req = calloc((size_t)d->P, sizeof *d->push_req);
	split_t *sp[2] = { &d->pull_split, &d->push_split };
	for (int i = 0; i < 2; i++) {
		sp[i]->pos = calloc((size_t)d->P, sizeof(uint32_t *));
		sp[i]->cap = calloc((size_t)d->P, sizeof(size_t));
	}
	d->done = calloc((size_t)d->P, sizeof *d->done);
	if (!d->trow || !d->pull_out || !d->push_out || !d->push_req || !d->pull_split.pos || !d->pull_split.cap ||
	    !d->push_split.pos || !d->push_split.cap || !d->done) {
		st_dist_destroy(d);
		return ST_ENOMEM;
	}
	if (pthread_create(&d->svc, NULL, st__dist_service, d) != 0) {
		st_dist_destroy(d);
		return ST_ENOMEM;
	}
	d->started = 1;
	*out = d;
	return ST_OK;
}

void st_dist_destroy(st_dist_t *d)
{
	if (!d)
		return;
	if (d->push_req)
		push_settle(d, -1);   /* their buffers go below */
	if (d->started) {
		__atomic_store_n(&d->stop, 1, __ATOMIC_RELEASE);
		pthread_join(d->svc, NULL);
	}
	while (d->steps) {
		step_acc_t *a = d->steps;
		d->steps = a->next;
		st__dist_step_free(a, d->P);
	}
	for (size_t i = 0; i < d->n_def; i++)
		free(d->def[i].buf);
	free(d->def);
	for (int r = 0; r < d->P; r++) {
		if (d->pull_out)
			free(d->pull_out[r].p);
		if (d->push_out)
			free(d->push_out[r].p);
		if (d->pull_split.pos)
			free(d->pull_split.pos[r]);
		if (d->push_split.pos)
			free(d->push_split.pos[r]);
	}
	free(d->pull_out);
	free(d->push_out);
	free(d->push_req);
	free(d->pull_split.pos);
	free(d->pull_split.cap);
	free(d->push_split.pos);
	free(d->push_split.cap);
	free(d->done);
	free(d->trow);
	st__dist_row_scratch_free(d);
	free(d->sbuf);
	free(d->sok);
	free(d->reply.p);
	free(d->mkeys);
	free(d->mslot);
	free(d->macc);
	free(d->mtab);
	free(d->lok);
	st__dist_buf_free(d);
	st__dist_hop_free(d);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

struct digest_ctx {
	uint64_t h, n, salt;
	uint32_t floats;
};

static void digest_row(uint64_t key, float *row, void *arg)
{
	struct digest_ctx *c = arg;
	c->h ^= XXH3_64bits_withSeed(row, sizeof(float) * c->floats, key ^ c->salt);
	c->n++;
}

uint64_t st_dist_rows_digest(st_table_t *const *tables, int n_tables, uint64_t *rows)
{
	struct digest_ctx c = { 0, 0, 0, 0 };
	for (int k = 0; k < n_tables; k++) {
		c.floats = st_table_row_floats(tables[k]);
		c.salt = mixk((uint64_t)k + 1);   /* tables apart */
		st_table_foreach_all(tables[k], digest_row, &c);
	}
	if (rows)
		*rows = c.n;
	return c.h;
}

void st_dist_stats(const st_dist_t *d, st_dist_stats_t *out)
{
	const uint64_t *src = (const uint64_t *)&d->st;
	uint64_t *dst = (uint64_t *)out;
	for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	out->bytes_sent = st_net_bytes_sent(d->net);
	out->bytes_coll = st_net_bytes_sent_coll(d->net);
	out->msgs_sent = st_net_msgs_sent(d->net);
	out->round_trips += st_net_coll_rounds(d->net);
}
