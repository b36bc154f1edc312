/*
 * serve.c — what an owner rank does with the requests of the sharded store
 * (dist.h has the protocol, wire.h the layouts): answers pulls (deferred
 * until the steps they wait for are applied), applies pushes (synchronous
 * steps summed in rank order, asynchronous ones on arrival), keeps rank 0's
 * dense parameters for asynchronous policies, and counts finished ranks.
 * Every handler runs with st_dist.mu held (dist.c, "Locking").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops/dist/dist_internal.h"
#include "runtime/err.h"
#include "runtime/trace.h"

/* ---- fp16 rows (Section 4.2.3) -------------------------------------------- */

/* IEEE binary16 by hand, rounding to nearest even: _Float16 is not in
 * every C compiler this builds with (clang 14 refuses it on x86-64), and
 * F16C would tie the wire format to a CPU flag. */
static uint16_t f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	const uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu;
	uint32_t m = x & 0x7fffffu;
	if (e == 0xffu)                                 /* inf, nan */
		return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
	const int32_t he = (int32_t)e - 127 + 15;
	if (he >= 0x1f)                                 /* overflow: inf */
		return (uint16_t)(sign | 0x7c00u);
	if (he <= 0) {                                  /* subnormal or zero */
		if (he < -10)
			return (uint16_t)sign;
		m |= 0x800000u;
		const uint32_t shift = (uint32_t)(14 - he);
		uint32_t hm = m >> shift;
		const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (hm & 1)))
			hm++;
		return (uint16_t)(sign | hm);
	}
	uint32_t h = sign | ((uint32_t)he << 10) | (m >> 13);
	const uint32_t rem = m & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++;                                    /* a carry moves into the exponent */
	return (uint16_t)h;
}

static float f16_to_f32(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	uint32_t x;
	if (e == 0) {
		float f = (float)m * 0x1p-24f;          /* zero or subnormal */
		return sign ? -f : f;
	}
	x = e == 0x1f ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112) << 23) | (m << 13);
	float f;
	memcpy(&f, &x, sizeof f);
	return f;
}

void st__wire_f16_encode(const float *x, uint32_t dim, void *out)
{
	float m = 0;
	for (uint32_t j = 0; j < dim; j++)
		m = fabsf(x[j]) > m ? fabsf(x[j]) : m;
	float scale = m > 0 && isfinite(m) ? m : 1.0f, inv = 1.0f / scale;
	memcpy(out, &scale, sizeof scale);
	uint8_t *h = (uint8_t *)out + sizeof(float);
	for (uint32_t j = 0; j < dim; j++) {
		uint16_t v = f32_to_f16(x[j] * inv);
		memcpy(h + 2 * j, &v, sizeof v);
	}
}

void st__wire_f16_decode(const void *in, uint32_t dim, float *x)
{
	float scale;
	memcpy(&scale, in, sizeof scale);
	const uint8_t *h = (const uint8_t *)in + sizeof(float);
	for (uint32_t j = 0; j < dim; j++) {
		uint16_t v;
		memcpy(&v, h + 2 * j, sizeof v);
		x[j] = f16_to_f32(v) * scale;
	}
}

void st__dist_put_row(uint8_t *dst, const float *x, uint32_t dim, int f16)
{
	if (f16)
		st__wire_f16_encode(x, dim, dst);
	else
		memcpy(dst, x, sizeof(float) * dim);
}

void st__dist_get_row(const uint8_t *src, uint32_t dim, int f16, float *x)
{
	if (f16)
		st__wire_f16_decode(src, dim, x);
	else
		memcpy(x, src, sizeof(float) * dim);
}

/* ---- message buffers --------------------------------------------------------- */

int st__dist_ob_reserve(obuf_t *b, size_t need)
{
	if (need <= b->cap)
		return ST_OK;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < need)
		cap *= 2;
	uint8_t *p = realloc(b->p, cap);
	if (!p)
		return ST_ENOMEM;
	b->p = p;
	b->cap = cap;
	return ST_OK;
}

int st__dist_bad_msg(int from, const char *what, size_t len)
{
	st_error("dist: rank %d sent a malformed %s message (%zu bytes): dropped", from, what,
		 len);
	return ST_EPEER;
}

/* Checks a PULL or PUSH body: n keys, n table indices (each < n_tables) and,
 * for a PUSH, the rows. Returns the row bytes expected after the indices
 * (0 for a PULL) or -1. */
static long check_keys(const st_dist_t *d, const wire_hdr_t *h, size_t len, int rows)
{
	size_t off = sizeof *h + sizeof(uint64_t) * (size_t)h->n + wire_pad8(h->n);
	if (h->n > (1u << 28) || len < off)
		return -1;
	const uint8_t *tab = (const uint8_t *)h + sizeof *h + sizeof(uint64_t) * (size_t)h->n;
	size_t need = 0;
	for (uint32_t i = 0; i < h->n; i++) {
		if (tab[i] >= d->n_tables)
			return -1;
		need += wire_row_bytes(d->dim[tab[i]], (h->flags & WF_F16) != 0);
	}
	if (len != off + (rows ? need : 0))
		return -1;
	return (long)need;
}

/* ---- serving pulls (mu held) ------------------------------------------------ */

int st__dist_grow(void **p, size_t *cap, size_t n, size_t elem)
{
	if (n <= *cap)
		return ST_OK;
	size_t c = *cap ? *cap : 1024;
	while (c < n)
		c *= 2;
	void *q = realloc(*p, c * elem);
	if (!q)
		return ST_ENOMEM;
	*p = q;
	*cap = c;
	return ST_OK;
}

void st__dist_row_scratch_free(st_dist_t *d)
{
	free(d->rscratch);
	free(d->mkey);
	free(d->spos);
	free(d->gptr);
	d->rscratch = NULL;
	d->mkey = NULL;
	d->spos = NULL;
	d->gptr = NULL;
	d->rcap = 0;
}

/* See dist_internal.h. The row-lookup scratch (rscratch, mkey, spos, gptr)
 * for n keys (mu held). */
int st__dist_row_scratch(st_dist_t *d, uint32_t n)
{
	if (n <= d->rcap)
		return ST_OK;
	size_t c = d->rcap ? d->rcap : 1024;
	while (c < n)
		c *= 2;
	st__dist_row_scratch_free(d);
	d->rscratch = malloc(sizeof(float *) * c);
	d->mkey = malloc(sizeof(uint64_t) * c);
	d->spos = malloc(sizeof(uint32_t) * c);
	d->gptr = malloc(sizeof(float *) * c);
	d->rcap = d->rscratch && d->mkey && d->spos && d->gptr ? c : 0;
	return d->rcap ? ST_OK : ST_ENOMEM;
}

int st__dist_serve_rows(st_dist_t *d, const uint64_t *keys, const uint8_t *tab,
			const uint32_t *idx, uint32_t n, int create, uint32_t stamp, uint8_t *ok,
			float *out, size_t stride)
{
	if (st__dist_row_scratch(d, n) < 0)
		return ST_ENOMEM;
	for (int k = 0; k < d->n_tables; k++) {
		uint32_t m = 0;
		for (uint32_t q = 0; q < n; q++) {
			const uint32_t i = idx ? idx[q] : q;
			if (tab[i] == k) {
				d->mkey[m] = keys[i];
				d->spos[m++] = i;
			}
		}
		if (!m)
			continue;
		int rc = st_table_resolve(d->tables[k], d->mkey, m, stamp, create, d->rscratch);
		if (rc < 0)
			return rc;
		for (uint32_t j = 0; j < m; j++) {
			uint32_t i = d->spos[j];
			ok[i] = d->rscratch[j] != NULL;
			if (ok[i])
				memcpy(out + (size_t)i * stride, d->rscratch[j],
				       sizeof(float) * d->dim[k]);
		}
		st_table_unpin(d->tables[k], d->rscratch, m);
	}
	return ST_OK;
}

static uint32_t max_dim(const st_dist_t *d)
{
	uint32_t m = 1;
	for (int k = 0; k < d->n_tables; k++)
		m = d->dim[k] > m ? d->dim[k] : m;
	return m;
}

static int send_reply(st_dist_t *d, int to, uint32_t chan, const void *buf, size_t len)
{
	int rc = st_net_send(d->net, to, chan, buf, len);
	if (rc < 0)
		st_warn("dist: cannot answer rank %d: %s", to, st_strerror(rc));
	return rc;
}

/* A PULL from another rank whose steps are applied: rows into a reply. */
static int answer_pull(st_dist_t *d, const void *msg, size_t len, int from)
{
	const wire_hdr_t *h = msg;
	const uint64_t *keys = (const uint64_t *)(h + 1);
	const uint8_t *tab = (const uint8_t *)(keys + h->n);
	const uint32_t n = h->n, md = max_dim(d);
	const int f16 = d->f16;
	size_t c = d->scap;
	if (st__dist_grow((void **)&d->sbuf, &c, (size_t)n * md + 1, sizeof(float)) < 0)
		return ST_ENOMEM;
	d->scap = c;
	c = d->okcap;
	if (st__dist_grow((void **)&d->sok, &c, n + 8, 1) < 0)
		return ST_ENOMEM;
	d->okcap = c;
	int rc = st__dist_serve_rows(d, keys, tab, NULL, n, (h->flags & WF_CREATE) != 0, h->stamp, d->sok,
			    d->sbuf, md);
	if (rc < 0) {
		st_error("dist: pull of %u keys from rank %d: %s", n, from, st_strerror(rc));
		return rc;
	}
	size_t bytes = sizeof *h + wire_pad8(n);
	for (uint32_t i = 0; i < n; i++)
		if (d->sok[i])
			bytes += wire_row_bytes(d->dim[tab[i]], f16);
	if (st__dist_ob_reserve(&d->reply, bytes) < 0)
		return ST_ENOMEM;
	wire_hdr_t *r = (wire_hdr_t *)d->reply.p;
	*r = (wire_hdr_t){ .type = MSG_PULL_REPLY, .n = n, .req = h->req, .t = d->buf.rows.k,
			   .flags = f16 ? WF_F16 : 0 };
	uint8_t *ok = (uint8_t *)(r + 1);
	memcpy(ok, d->sok, n);
	memset(ok + n, 0, wire_pad8(n) - n);
	uint8_t *p = ok + wire_pad8(n);
	for (uint32_t i = 0; i < n; i++)
		if (d->sok[i]) {
			st__dist_put_row(p, d->sbuf + (size_t)i * md, d->dim[tab[i]], f16);
			p += wire_row_bytes(d->dim[tab[i]], f16);
		}
	const uint32_t chan = h->flags & WF_STEP ? CH_STEP_REPLY + h->worker : CH_PULL_REPLY;
	return send_reply(d, from, chan, d->reply.p, bytes);
}

/* Row gradient of key i of a PUSH into g (decoded). */
static const uint8_t *push_rows(const wire_hdr_t *h)
{
	return (const uint8_t *)(h + 1) + sizeof(uint64_t) * (size_t)h->n + wire_pad8(h->n);
}

/* An asynchronous PUSH: every row updated on arrival, in message order
 * within each table. The rows are looked up one table at a time for the
 * whole message (one st_table_resolve of its keys, then one unpin), not
 * one lookup per key: per-key lookups were the
 * owner's largest cost under async, ~30% of a 2-process job's cycles in
 * st_table_resolve (docs/benchmarks.md, "Prefetched step reads"). Rows
 * are independent, so the updates are the same bits either way; a key
 * twice in one message is updated twice, in order, as before. */
static int apply_async(st_dist_t *d, const wire_hdr_t *h)
{
	const uint64_t *keys = (const uint64_t *)(h + 1);
	const uint8_t *tab = (const uint8_t *)(keys + h->n);
	const int f16 = (h->flags & WF_F16) != 0;
	const uint64_t t = h->t ? h->t : 1;
	if (st__dist_row_scratch(d, h->n) < 0)
		return ST_ENOMEM;
	for (int k = 0; k < d->n_tables; k++) {
		uint32_t m = 0;
		for (uint32_t i = 0; i < h->n; i++)
			if (tab[i] == k)
				d->mkey[m++] = keys[i];
		if (!m)
			continue;
		int rc = st_table_resolve(d->tables[k], d->mkey, m, 0, 0, d->rscratch);
		if (rc < 0)
			return rc;
		const uint8_t *p = push_rows(h);
		for (uint32_t i = 0, j = 0; i < h->n; i++) {
			const uint32_t dim = d->dim[tab[i]];
			if (tab[i] == k && d->rscratch[j++]) {
				/* NULL: not admitted, or expired meanwhile */
				st__dist_get_row(p, dim, f16, d->trow);
				st_algo_row_update(&d->p, d->rscratch[j - 1], d->trow, (int)dim, t);
			}
			p += wire_row_bytes(dim, f16);
		}
		st_table_unpin(d->tables[k], d->rscratch, m);
	}
	return ST_OK;
}

/* Sync step s has every rank's list: sums each key's gradients in rank
 * order (the first contributor's gradient, plus the next one's, ...) and
 * applies one optimizer step per key. */
static int apply_step(st_dist_t *d, step_acc_t *a)
{
	size_t total = 0;
	uint64_t t = 0;
	for (int r = 0; r < d->P; r++) {
		const wire_hdr_t *h = a->msg[r];
		if (!h)
			continue;   /* hop_bw: a rank not in the step's quorum */
		total += h->n;
		t = h->t > t ? h->t : t;
	}
	size_t cap = 16;
	while (cap < 2 * total)
		cap *= 2;
	const uint32_t md = max_dim(d);
	if (cap > d->mcap) {
		free(d->mkeys);
		free(d->mslot);
		d->mkeys = malloc(sizeof(uint64_t) * cap);
		d->mslot = malloc(sizeof(uint32_t) * cap);
		d->mcap = d->mkeys && d->mslot ? cap : 0;
		if (!d->mcap)
			return ST_ENOMEM;
	}
	if (total + 1 > d->accap) {
		free(d->macc);
		free(d->mtab);
		d->macc = malloc(sizeof(float) * (total + 1) * md);
		d->mtab = malloc(sizeof(uint16_t) * (total + 1));
		d->accap = d->macc && d->mtab ? total + 1 : 0;
		if (!d->accap)
			return ST_ENOMEM;
	}
	memset(d->mslot, 0xff, sizeof(uint32_t) * cap);
	const size_t mask = cap - 1;
	uint32_t nu = 0;
	for (int r = 0; r < d->P; r++) {
		const wire_hdr_t *h = a->msg[r];
		if (!h)
			continue;
		const uint64_t *keys = (const uint64_t *)(h + 1);
		const uint8_t *tab = (const uint8_t *)(keys + h->n);
		const uint8_t *p = push_rows(h);
		const int f16 = (h->flags & WF_F16) != 0;
		for (uint32_t i = 0; i < h->n; i++) {
			const uint32_t dim = d->dim[tab[i]];
			/* A row is (table, key): the same key in two tables is two
			 * rows, summed apart. */
			size_t j = (size_t)mixk(keys[i] ^ tab[i]) & mask;
			while (d->mslot[j] != UINT32_MAX &&
			       (d->mkeys[j] != keys[i] || d->mtab[d->mslot[j]] != tab[i]))
				j = (j + 1) & mask;
			float *acc;
			if (d->mslot[j] == UINT32_MAX) {
				d->mslot[j] = nu;
				d->mkeys[j] = keys[i];
				d->mtab[nu] = tab[i];
				acc = d->macc + (size_t)nu++ * md;
				st__dist_get_row(p, dim, f16, acc);
			} else {
				acc = d->macc + (size_t)d->mslot[j] * md;
				st__dist_get_row(p, dim, f16, d->trow);
				for (uint32_t q = 0; q < dim; q++)
					acc[q] += d->trow[q];
			}
			p += wire_row_bytes(dim, f16);
		}
	}
	/* One st_table_resolve per table for the step's keys, as apply_async
	 * does: a lookup per key took the owner's
	 * service thread 9% of a 2-process allreduce job's cycles, most of it
	 * the lookup's setup and a lock per key. Each key is updated once, so
	 * the order does not change the bits. */
	if (st__dist_row_scratch(d, nu) < 0)
		return ST_ENOMEM;
	for (int k = 0; k < d->n_tables; k++) {
		uint32_t m = 0;
		for (size_t j = 0; j < cap; j++) {
			uint32_t u = d->mslot[j];
			if (u != UINT32_MAX && d->mtab[u] == k) {
				d->mkey[m] = d->mkeys[j];
				d->gptr[m++] = d->macc + (size_t)u * md;
			}
		}
		int rc = st__dist_update_rows(d, k, m, t);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}

int st__dist_update_rows(st_dist_t *d, int k, uint32_t m, uint64_t t)
{
	if (!m)
		return ST_OK;
	int rc = st_table_resolve(d->tables[k], d->mkey, m, 0, 0, d->rscratch);
	if (rc < 0)
		return rc;
	for (uint32_t q = 0; q < m; q++)
		if (d->rscratch[q])   /* NULL: not admitted, or expired meanwhile */
			st_algo_row_update(&d->p, d->rscratch[q], d->gptr[q], (int)d->dim[k],
					   t ? t : 1);
	st_table_unpin(d->tables[k], d->rscratch, m);
	return ST_OK;
}

void st__dist_step_free(step_acc_t *a, int P)
{
	for (int r = 0; r < P; r++)
		free(a->msg[r]);
	free(a->msg);
	free(a);
}

/* Takes ownership of msg. */
static int add_sync(st_dist_t *d, void *msg, size_t len, int from)
{
	const wire_hdr_t *h = msg;
	if (h->step < d->applied) {
		free(msg);
		return st__dist_bad_msg(from, "PUSH (step already applied)", len);
	}
	step_acc_t **pp = &d->steps;
	while (*pp && (*pp)->step < h->step)
		pp = &(*pp)->next;
	step_acc_t *a = *pp;
	if (!a || a->step != h->step) {
		a = calloc(1, sizeof *a);
		if (a)
			a->msg = calloc((size_t)d->P, sizeof(void *));
		if (!a || !a->msg) {
			free(a);
			free(msg);
			return ST_ENOMEM;
		}
		a->step = h->step;
		a->next = *pp;
		*pp = a;
	}
	/* hop_bw: only the step's K kept ranks send (header pad); the others
	 * every rank. */
	const int expect = h->flags & WF_BW ? (int)h->pad : d->P;
	if (!a->expect)
		a->expect = expect;
	if (a->msg[from] || expect != a->expect || expect < 1 || expect > d->P) {
		free(msg);
		return st__dist_bad_msg(from, "PUSH (second list for one step, or a bad count)",
					len);
	}
	a->msg[from] = msg;
	a->count++;
	int rc = ST_OK;
	while (d->steps && d->steps->step == d->applied && d->steps->count == d->steps->expect) {
		step_acc_t *head = d->steps;
		rc = apply_step(d, head);
		d->steps = head->next;
		st__dist_step_free(head, d->P);
		if (rc < 0)
			break;
		d->applied++;
		pthread_cond_broadcast(&d->cv);
	}
	return rc;
}

/* Rank 0's dense parameters to worker w of rank `to`. */
static int dense_reply(st_dist_t *d, int to, uint32_t w, uint64_t req, uint64_t v,
		       uint64_t age, int dropped)
{
	const size_t np = d->p.nparams;
	size_t bytes = sizeof(wire_hdr_t) + sizeof(float) * np;
	if (st__dist_ob_reserve(&d->reply, bytes) < 0)
		return ST_ENOMEM;
	wire_hdr_t *r = (wire_hdr_t *)d->reply.p;
	*r = (wire_hdr_t){ .type = MSG_DENSE_REPLY, .n = (uint32_t)np, .req = req,
			   .t = v, .step = age, .flags = dropped ? 1 : 0 };
	memcpy(r + 1, d->p.params, sizeof(float) * np);
	return send_reply(d, to, CH_DENSE_REPLY + w, d->reply.p, bytes);
}

/* A held hop_bs reply, now allowed: the parameters as they are now. */
static int hop_reply(st_dist_t *d, int to, uint32_t w, uint64_t req)
{
	return dense_reply(d, to, w, req, *d->dense_t, 0, 0);
}

/* A held hop_bw answer: the step closed with the rank's gradient in it. */
static int bw_reply(st_dist_t *d, int to, uint32_t w, uint64_t req)
{
	return dense_reply(d, to, w, req, d->hop.q.k, d->hop.lastK[to], 0);
}

int st__dist_hop_poll(st_dist_t *d)
{
	if (d->hop.bw)
		return st__dist_bw_close(d, bw_reply);
	return d->hop.nheld ? st__dist_hop_release(d, hop_reply) : ST_OK;
}

static int answer_dense(st_dist_t *d, const void *msg, size_t len, int from)
{
	const wire_hdr_t *h = msg;
	const size_t np = d->p.nparams;
	const int has_grad = (h->flags & 1) != 0;
	if (d->rank != 0 || h->n != np || len != sizeof *h + (has_grad ? sizeof(float) * np : 0) ||
	    h->worker >= 1024)
		return st__dist_bad_msg(from, "DENSE", len);
	const float *grad = has_grad ? (const float *)(h + 1) : NULL;
	uint64_t v = 0, age = 0;
	int dropped = 0;
	if (h->flags & WF_BW) {
		/* hop_bw: a contribution to the open step (hop.c). */
		int late = 0;
		int rc = st__dist_bw_contrib(d, h, grad, from, &late);
		if (rc == ST_ENOMEM)
			return rc;
		if (rc < 0 || h->worker != 0)
			return st__dist_bad_msg(from, "DENSE (hop_bw: step or bound)", len);
		if (late)
			return dense_reply(d, from, 0, h->req, d->hop.q.k, 0, grad != NULL);
		if ((rc = st__dist_hop_hold(d, from, 0, h->req)) < 0)
			return rc;
		return st__dist_bw_close(d, bw_reply);
	}
	if (h->flags & WF_BUF) {
		/* gba, bsp: into the gradient buffer (psbuf.c). */
		int rc = st__dist_buf_dense(d, h, grad, &v, &age, &dropped);
		if (rc == ST_ENOMEM)
			return rc;
		if (rc < 0)
			return st__dist_bad_msg(from, "DENSE (buffered: parameters or token)", len);
	} else {
		if (h->flags & WF_HOP) {
			/* hop_bs: the clocks first (hop.c), so a bad message
			 * changes nothing. */
			int rc = st__dist_hop_step(d, h, from, has_grad);
			if (rc == ST_ENOMEM)
				return rc;
			if (rc < 0)
				return st__dist_bad_msg(from, "DENSE (hop_bs: worker or bound)",
							len);
		}
		if (grad)
			st_algo_dense_update(&d->p, d->p.params, d->dense_state, grad,
					     ++*d->dense_t);
		v = *d->dense_t;
	}
	if (h->flags & WF_HOP) {
		/* The reply waits for the clock rule. */
		int rc;
		if (!st__dist_hop_ready(d, from, h->worker))
			return st__dist_hop_hold(d, from, h->worker, h->req);
		rc = dense_reply(d, from, h->worker, h->req, v, 0, 0);
		return rc < 0 ? rc : st__dist_hop_release(d, hop_reply);
	}
	return dense_reply(d, from, h->worker, h->req, v, age, dropped);
}


/* One message to this rank's service (mu held). Takes ownership of msg. */
int st__dist_handle(st_dist_t *d, void *msg, size_t len, int from)
{
	const wire_hdr_t *h = msg;
	int rc = ST_OK;
	if (len < sizeof *h) {
		free(msg);
		return st__dist_bad_msg(from, "short", len);
	}
	switch (h->type) {
	case MSG_PULL:
		if (check_keys(d, h, len, 0) < 0 ||
		    (h->flags & WF_STEP && (h->worker >= CH_STEP_MAX_WORKERS || h->step ||
					    h->flags & WF_CREATE))) {
			rc = st__dist_bad_msg(from, "PULL", len);
			break;
		}
		if (st__dist_pull_waits(d, h->step)) {
			if (d->n_def == d->cap_def) {
				size_t c = d->cap_def ? 2 * d->cap_def : 8;
				deferred_t *p = realloc(d->def, c * sizeof *p);
				if (!p) {
					rc = ST_ENOMEM;
					break;
				}
				d->def = p;
				d->cap_def = c;
			}
			d->def[d->n_def++] = (deferred_t){ msg, len, from };
			return ST_OK;
		}
		rc = answer_pull(d, msg, len, from);
		break;
	case MSG_PUSH:
		if (check_keys(d, h, len, 1) < 0) {
			rc = st__dist_bad_msg(from, "PUSH", len);
			break;
		}
		stat_add(&d->st.pushes, 1);
		stat_add(&d->st.rows_pushed, h->n);
		if (h->flags & WF_SYNC) {
			rc = add_sync(d, msg, len, from);
			if (rc >= 0)
				rc = st__dist_retry_deferred(d);
			return rc;
		}
		rc = h->flags & WF_BUF ? st__dist_buf_rows(d, h, len, from) : apply_async(d, h);
		break;
	case MSG_DENSE:
		rc = answer_dense(d, msg, len, from);
		break;
	case MSG_IDLE:
		if (d->rank != 0 || len != sizeof *h) {
			rc = st__dist_bad_msg(from, "IDLE", len);
			break;
		}
		rc = st__dist_hop_idle(d, from, h->worker);
		if (rc == ST_EINVAL)
			rc = st__dist_bad_msg(from, "IDLE (worker)", len);
		else if (rc >= 0)
			rc = st__dist_hop_poll(d);
		break;
	case MSG_BFLUSH:   /* the buffers' partial steps, answered as a FLUSH */
	case MSG_FLUSH: {
		if (h->type == MSG_BFLUSH && (rc = st__dist_buf_flush(d)) < 0)
			break;
		wire_hdr_t r = { .type = MSG_FLUSH_REPLY, .req = h->req };
		rc = send_reply(d, from, CH_FLUSH_REPLY, &r, sizeof r);
		break;
	}
	case MSG_DONE:
		if (d->rank != 0 || !d->done) {
			rc = st__dist_bad_msg(from, "DONE", len);
			break;
		}
		if (h->step > d->done[from])
			d->done[from] = (uint32_t)h->step;   /* the round finished */
		pthread_cond_broadcast(&d->cv);
		break;
	default:
		rc = st__dist_bad_msg(from, "unknown", len);
	}
	free(msg);
	return rc;
}

int st__dist_retry_deferred(st_dist_t *d)
{
	size_t k = 0;
	int rc = ST_OK;
	for (size_t i = 0; i < d->n_def; i++) {
		deferred_t x = d->def[i];
		const wire_hdr_t *h = x.buf;
		if (st__dist_pull_waits(d, h->step)) {
			d->def[k++] = x;
			continue;
		}
		int r = answer_pull(d, x.buf, x.len, x.from);
		free(x.buf);
		if (r < 0 && rc >= 0)
			rc = r;
	}
	d->n_def = k;
	return rc;
}

/* A request's name on the trace's service track (a literal: the trace
 * keeps the pointer). */
static const char *msg_name(uint32_t type)
{
	switch (type) {
	case MSG_PULL: return "serve pull";
	case MSG_PUSH: return "serve push";
	case MSG_DENSE: return "serve dense";
	case MSG_IDLE: return "serve idle";
	default: return "serve";
	}
}

void *st__dist_service(void *arg)
{
	st_dist_t *d = arg;
	pthread_setname_np(pthread_self(), "st-dist-svc");
	while (!__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE)) {
		void *buf;
		size_t len;
		int from;
		int rc = st_net_recv(d->net, ST_NET_ANY, CH_REQ, &buf, &len, &from, 0.2);
		if (rc == ST_EAGAIN) {
			/* hop_bs: a rank may have died, freeing held replies. */
			pthread_mutex_lock(&d->mu);
			(void)st__dist_hop_poll(d);
			pthread_mutex_unlock(&d->mu);
			continue;
		}
		if (rc == ST_ECANCELED)
			break;
		if (rc < 0) {
			/* Every other rank is gone: nothing left to serve. */
			struct timespec ts = { 0, 50 * 1000 * 1000 };
			nanosleep(&ts, NULL);
			continue;
		}
		/* The trace (docs/observability.md): a span per request on the
		 * service's track, its wait for the shard's lock apart. */
		const int tr = st_trace_enabled();
		const uint32_t type = len >= sizeof(wire_hdr_t) ? ((const wire_hdr_t *)buf)->type : 0;
		uint64_t t0 = tr ? st_trace_now() : 0, t1 = 0;
		pthread_mutex_lock(&d->mu);
		if (tr)
			t1 = st_trace_now();
		rc = st__dist_handle(d, buf, len, from);
		pthread_mutex_unlock(&d->mu);
		if (tr) {
			if (t1 - t0 >= 2000)
				st_trace_span("wait", "wait shard lock", NULL, t0, t1, -1);
			st_trace_span("work", msg_name(type), NULL, t1, st_trace_now(), from);
		}
		if (rc < 0 && rc != ST_EPEER) {
			/* The shard can no longer follow the protocol (out of
			 * memory, the SSD tier failed): stop this process so the
			 * others see a dead owner and stop too, instead of
			 * waiting for a step that never comes. */
			st_error("dist: rank %d cannot serve its shard (%s): stopping this "
				 "process", d->rank, st_strerror(rc));
			_exit(1);
		}
	}
	return NULL;
}

