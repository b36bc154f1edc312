/*
 * psbuf.c — the gradient buffers of the buffered algorithms across
 * processes: GBA's token control (per-ID tags and decay) and BSP's plain
 * aggregation (gba-global-batch-aggregation.txt §4.1, §5.1, Appendix B
 * Algorithm 2). Each owner rank is one of the paper's parameter servers,
 * "each PS maintains an individual gradient buffer to deal with the
 * gradients of the corresponding partitions of the variables"; the
 * algorithm itself is ops/algo/gba.h, shared with one process's
 * ops/sync/gba.c and bsp.c. This file is its ranks transport.
 *
 * Contributions. Every worker gradient is one contribution to every PS: to
 * rank 0 its dense gradient (MSG_DENSE + WF_BUF; rank 0 holds the dense
 * parameters and the dense buffer), to each owner its rows of that owner
 * (MSG_PUSH + WF_BUF, possibly no rows), so every PS counts the same
 * contributions and steps once per M of them. The message carries M
 * (header `stamp`), the tolerance iota (`pad`, ST_ALGO_GBA_NO_TOL for none)
 * and the token (`step`); WF_PERID asks for GBA's tags and per-ID
 * averages. The first contribution sets the buffers' parameters; one that
 * disagrees is malformed.
 *
 * Tokens. The dense token is rank 0's dense k when the worker fetched the
 * parameters it computes with (the reply to its previous contribution, or
 * its first fetch). The rows a batch trains on were pulled from their
 * owners earlier (the pull stage runs ahead), so each owner answers a pull
 * with its rows buffer's k, and the batch's contributions to that owner
 * carry it: the rows' token is the step of the copy they actually read.
 *
 * Tags are forgotten HORIZON steps after they were set (rank 0 cannot
 * know every rank's oldest token, which one process uses); the pipeline
 * keeps tokens a few steps old, so the core's "dropped whole" rule for
 * older tokens never fires in a healthy job.
 *
 * Row steps use the sparse optimizer's step number k + 1 of this owner's
 * buffer (the one process uses its dense step count; docs/design-notes.md
 * "One core per algorithm").
 *
 * End: st__dist_buf_flush applies a partial buffer as a last step; rank 0
 * asks every owner for it once every rank has finished training.
 *
 * All functions: st_dist.mu held.
 */
#include <stdlib.h>
#include <string.h>

#include "ops/algo/gba.h"
#include "ops/dist/dist_internal.h"
#include "runtime/err.h"

#define HORIZON 1024u

void st__dist_buf_free(st_dist_t *d)
{
	st_algo_gba_rows_fini(&d->buf.rows);
	st_algo_gba_dense_fini(&d->buf.dense);
	free(d->buf.upd);
	memset(&d->buf, 0, sizeof d->buf);
}

/* The buffers' parameters, set by the first contribution; every later one
 * must agree. The buffer of rows is made then, the dense one (rank 0 only)
 * at the first dense contribution. ST_OK, ST_EINVAL (disagrees or out of
 * range), ST_ENOMEM. */
static int check_params(st_dist_t *d, const wire_hdr_t *h, int dense)
{
	psbuf_t *b = &d->buf;
	const int perid = (h->flags & WF_PERID) != 0;
	if (!h->stamp || h->stamp > ST_ALGO_GBA_MAX_M ||
	    (!perid && h->pad != ST_ALGO_GBA_NO_TOL))
		return ST_EINVAL;
	if (b->set && (b->rows.M != h->stamp || b->rows.tol != h->pad || b->rows.perid != perid))
		return ST_EINVAL;
	if (!b->set) {
		uint32_t md = 1;
		for (int k = 0; k < d->n_tables; k++)
			md = d->dim[k] > md ? d->dim[k] : md;
		int rc = st_algo_gba_rows_init(&b->rows, h->stamp, h->pad, perid, md);
		if (rc < 0)
			return rc;
		b->set = 1;
	}
	if (dense && !b->dense.sum)
		return st_algo_gba_dense_init(&b->dense, h->stamp, h->pad, d->p.nparams);
	return ST_OK;
}

/* The core's update, collected: the step's rows are updated after it, one
 * table lookup per table (st__dist_update_rows), not one per key. The
 * gradients stay in the core's buffer until its next step begins. */
static int collect_row(void *arg, uint64_t key, uint8_t tab, float *g, uint32_t dim)
{
	psbuf_t *b = &((st_dist_t *)arg)->buf;
	(void)dim;
	if (st__dist_grow((void **)&b->upd, &b->ucap, b->un + 1, sizeof *b->upd) < 0)
		return ST_ENOMEM;
	b->upd[b->un++] = (struct bufupd){ .key = key, .g = g, .tab = tab };
	return ST_OK;
}

/* The rows' global step. */
static int rows_step(st_dist_t *d)
{
	st_algo_gba_rows_t *r = &d->buf.rows;
	psbuf_t *b = &d->buf;
	b->un = 0;
	int rc = st_algo_gba_rows_step(r, r->k > HORIZON ? r->k - HORIZON : 0, collect_row, d);
	/* r->k is now the step's number: the sparse optimizer's step k + 1 of
	 * before, as the per-key update used. */
	if (rc >= 0)
		rc = st__dist_row_scratch(d, (uint32_t)b->un);
	for (int k = 0; rc >= 0 && k < d->n_tables; k++) {
		uint32_t m = 0;
		for (size_t i = 0; i < b->un; i++)
			if (b->upd[i].tab == k) {
				d->mkey[m] = b->upd[i].key;
				d->gptr[m++] = b->upd[i].g;
			}
		rc = st__dist_update_rows(d, k, m, r->k);
	}
	if (rc >= 0)
		stat_add(&d->st.buf_steps, 1);
	return rc;
}

/* Rank 0's dense global step over the contributions in its buffer. */
static void dense_step(st_dist_t *d)
{
	st_algo_gba_dense_t *b = &d->buf.dense;
	const uint64_t t = *d->dense_t + 1;
	const float *g = st_algo_gba_dense_mean(b);
	if (g)
		st_algo_dense_update(&d->p, d->p.params, d->dense_state, g, t);
	*d->dense_t = t;
	st_algo_gba_dense_done(b);
}

int st__dist_buf_rows(st_dist_t *d, const wire_hdr_t *h, size_t len, int from)
{
	st_algo_gba_rows_t *r = &d->buf.rows;
	int rc = check_params(d, h, 0);
	if (rc == ST_ENOMEM)
		return rc;
	if (rc >= 0)
		rc = st_algo_gba_rows_begin(r, h->step, h->n);
	if (rc == ST_EINVAL)
		return st__dist_bad_msg(from, "PUSH (buffered: parameters or token)", len);
	if (rc < 0)
		return rc;
	const uint64_t *keys = (const uint64_t *)(h + 1);
	const uint8_t *tab = (const uint8_t *)(keys + h->n);
	const uint8_t *p = (const uint8_t *)(h + 1) + sizeof(uint64_t) * (size_t)h->n +
			   wire_pad8(h->n);
	const int f16 = (h->flags & WF_F16) != 0;
	uint64_t dropped = 0;
	for (uint32_t i = 0; i < h->n; i++) {
		const uint32_t dim = d->dim[tab[i]];
		st__dist_get_row(p, dim, f16, d->trow);
		dropped += !st_algo_gba_rows_add(r, h->step, keys[i], tab[i], d->trow, dim);
		p += wire_row_bytes(dim, f16);
	}
	stat_add(&d->st.buf_rows_dropped, dropped);
	return st_algo_gba_rows_end(r) ? rows_step(d) : ST_OK;
}

int st__dist_buf_dense(st_dist_t *d, const wire_hdr_t *h, const float *grad, uint64_t *token,
		       uint64_t *age, int *dropped)
{
	st_algo_gba_dense_t *b = &d->buf.dense;
	int rc = check_params(d, h, 1);
	if (rc < 0)
		return rc;
	if (h->step > b->k)
		return ST_EINVAL;
	*age = b->k - h->step;
	*dropped = 0;
	if (grad) {
		if ((rc = st_algo_gba_dense_add(b, h->step, grad, age, dropped)) < 0)
			return rc;
		if (st_algo_gba_dense_full(b))
			dense_step(d);
	}
	*token = b->k;
	return ST_OK;
}

int st__dist_buf_flush(st_dist_t *d)
{
	psbuf_t *b = &d->buf;
	if (b->dense.count)
		dense_step(d);
	return b->rows.count ? rows_step(d) : ST_OK;
}
