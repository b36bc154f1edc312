/*
 * psbuf.c — the gradient buffers of the buffered policies across processes
 * (gba, bsp): each owner rank is one of the paper's parameter servers
 * (gba-global-batch-aggregation.txt §4.1, Fig. 5, Appendix B Algorithm 2),
 * "each PS maintains an individual gradient buffer to deal with the
 * gradients of the corresponding partitions of the variables".
 *
 * Contributions. Every worker gradient is one contribution to every PS: to
 * rank 0 its dense gradient (MSG_DENSE + WF_BUF; rank 0 holds the dense
 * parameters, the token list and the dense buffer), to each owner its rows
 * of that owner (MSG_PUSH + WF_BUF, possibly no rows), so every PS counts
 * the same contributions. A PS performs its global step k when M
 * contributions are in its buffer ("the gradient buffer reaches the
 * capacity of M pairs of gradients and tokens", §4.1), then k = k + 1. The
 * message carries M (header `stamp`), the tolerance iota (`pad`,
 * UINT32_MAX for none: bsp) and the token (`step`).
 *
 * Tokens. The dense token is rank 0's k when the worker fetched the
 * parameters it computes with (the reply to its previous contribution, or
 * its first fetch): k - token is exactly the dense data staleness, as in
 * the single-process ops/sync/gba.c. The rows a batch trains on were
 * pulled from their owners earlier (the pull stage runs ahead), so each
 * owner answers a pull with its own k, and the batch's contributions to
 * that owner carry it: the rows' token is the step of the copy they
 * actually read.
 *
 * Decay (gba, WF_PERID; Eq. 1, Alg. 2 lines 18-23). Dense: f = 1 if
 * k - token <= iota, else the gradient counts as zero and is `dropped`;
 * the step applies sum(f g) / n over the n contributions of the step
 * ("divided by N_a"). Rows: every ID carries the global step of its last
 * update, stored as seen = step + 1 (the "tag"); an ID's staleness for a
 * contribution is seen - token if seen > token, else 0, and its gradient
 * is the sum of the kept ones divided by the contributions that touched it
 * ("divided by the number of workers that encountered the particular ID").
 * A contribution's decay is decided when it arrives: tags change only at a
 * step and the contribution belongs to the step being filled, so its
 * staleness is already what it will be at that step ("we could execute
 * the weighted sum over some gradients in advance based on the tokens",
 * Appendix B). The buffer therefore holds one running sum per ID, not M
 * gradients.
 *
 * bsp (no WF_PERID, no tolerance): sums alone; dense and every row
 * averaged over the step's n contributions, as ops/sync/bsp.c.
 *
 * Tags are forgotten HORIZON steps after they were set (the map would
 * otherwise grow with every ID ever updated); a row contribution whose
 * token is more than HORIZON + iota steps old is dropped whole, since a
 * forgotten tag could no longer show how stale it is. The pipeline keeps
 * tokens a few steps old, so this never happens in a healthy job.
 *
 * End: st__dist_buf_flush applies a partial buffer as a last step (the
 * paper's last update of an epoch aggregates Q mod M gradients); rank 0
 * asks every owner for it once every rank has finished training.
 *
 * All functions: st_dist.mu held.
 */
#include <stdlib.h>
#include <string.h>

#include "ops/dist/dist_internal.h"
#include "runtime/err.h"

#define HORIZON 1024u

static uint64_t slot_hash(uint64_t key, uint8_t tab)
{
	return mixk(key ^ ((uint64_t)tab << 56) ^ SALT);
}

void st__dist_buf_free(st_dist_t *d)
{
	psbuf_t *b = &d->buf;
	free(b->aslot);
	free(b->akey);
	free(b->atab);
	free(b->asum);
	free(b->acnt);
	free(b->akept);
	free(b->tkey);
	free(b->ttab);
	free(b->tseen);
	free(b->dagg);
	memset(b, 0, sizeof *b);
}

/* ---- tags: (table, key) -> seen ------------------------------------------------ */

static size_t tag_pos(const psbuf_t *b, uint64_t key, uint8_t tab)
{
	size_t i = (size_t)slot_hash(key, tab) & (b->tcap - 1);
	while (b->tseen[i] && (b->tkey[i] != key || b->ttab[i] != tab))
		i = (i + 1) & (b->tcap - 1);
	return i;
}

static uint64_t tag_get(const psbuf_t *b, uint64_t key, uint8_t tab)
{
	return b->tcap ? b->tseen[tag_pos(b, key, tab)] : 0;
}

/* Rebuilds the tag map with capacity cap, keeping tags with seen > lo. */
static int tag_rebuild(psbuf_t *b, size_t cap, uint64_t lo)
{
	uint64_t *key = malloc(sizeof(uint64_t) * cap), *seen = calloc(cap, sizeof(uint64_t));
	uint8_t *tab = malloc(cap);
	if (!key || !seen || !tab) {
		free(key);
		free(seen);
		free(tab);
		return ST_ENOMEM;
	}
	psbuf_t nb = { .tkey = key, .ttab = tab, .tseen = seen, .tcap = cap };
	for (size_t i = 0; i < b->tcap; i++) {
		if (b->tseen[i] <= lo)
			continue;
		size_t j = tag_pos(&nb, b->tkey[i], b->ttab[i]);
		key[j] = b->tkey[i];
		tab[j] = b->ttab[i];
		seen[j] = b->tseen[i];
		nb.tn++;
	}
	free(b->tkey);
	free(b->ttab);
	free(b->tseen);
	b->tkey = key;
	b->ttab = tab;
	b->tseen = seen;
	b->tcap = cap;
	b->tn = nb.tn;
	return ST_OK;
}

/* Room for n more tags (at most half full), forgetting the old ones. */
static int tag_reserve(psbuf_t *b, size_t n)
{
	if (b->tcap && b->tn + n <= b->tcap / 2)
		return ST_OK;
	const uint64_t lo = b->k > HORIZON ? b->k - HORIZON : 0;
	size_t live = 0;
	for (size_t i = 0; i < b->tcap; i++)
		live += b->tseen[i] > lo;
	size_t cap = 1024;
	while (live + n > cap / 4)
		cap *= 2;
	return tag_rebuild(b, cap, lo);
}

/* ---- the running sums of the step being filled -------------------------------- */

/* Room for n more IDs in the step's sums. */
static int acc_reserve(st_dist_t *d, size_t n)
{
	psbuf_t *b = &d->buf;
	const size_t need = b->nacc + n;
	if (need > b->acap) {
		size_t c = b->acap ? b->acap : 1024;
		while (c < need)
			c *= 2;
		const size_t md = b->md;
		uint64_t *key = realloc(b->akey, sizeof(uint64_t) * c);
		if (key)
			b->akey = key;
		uint8_t *tab = realloc(b->atab, c);
		if (tab)
			b->atab = tab;
		float *sum = realloc(b->asum, sizeof(float) * c * md);
		if (sum)
			b->asum = sum;
		uint32_t *cnt = realloc(b->acnt, sizeof(uint32_t) * c);
		if (cnt)
			b->acnt = cnt;
		uint32_t *kept = realloc(b->akept, sizeof(uint32_t) * c);
		if (kept)
			b->akept = kept;
		if (!key || !tab || !sum || !cnt || !kept)
			return ST_ENOMEM;
		b->acap = c;
	}
	if (2 * need > b->scap) {
		size_t c = b->scap ? b->scap : 2048;
		while (c < 2 * need)
			c *= 2;
		uint32_t *slot = malloc(sizeof(uint32_t) * c);
		if (!slot)
			return ST_ENOMEM;
		memset(slot, 0xff, sizeof(uint32_t) * c);
		for (size_t a = 0; a < b->nacc; a++) {
			size_t j = (size_t)slot_hash(b->akey[a], b->atab[a]) & (c - 1);
			while (slot[j] != UINT32_MAX)
				j = (j + 1) & (c - 1);
			slot[j] = (uint32_t)a;
		}
		free(b->aslot);
		b->aslot = slot;
		b->scap = c;
	}
	return ST_OK;
}

/* The step's sum of (tab, key), created empty. */
static uint32_t acc_find(psbuf_t *b, uint64_t key, uint8_t tab, uint32_t dim)
{
	size_t j = (size_t)slot_hash(key, tab) & (b->scap - 1);
	while (b->aslot[j] != UINT32_MAX) {
		uint32_t a = b->aslot[j];
		if (b->akey[a] == key && b->atab[a] == tab)
			return a;
		j = (j + 1) & (b->scap - 1);
	}
	uint32_t a = (uint32_t)b->nacc++;
	b->aslot[j] = a;
	b->akey[a] = key;
	b->atab[a] = tab;
	b->acnt[a] = b->akept[a] = 0;
	memset(b->asum + (size_t)a * b->md, 0, sizeof(float) * dim);
	return a;
}

/* ---- steps ------------------------------------------------------------------------ */

/* The rows' global step: every ID with a kept gradient gets one optimizer
 * step and (gba) its tag. */
static int rows_step(st_dist_t *d)
{
	psbuf_t *b = &d->buf;
	int rc = b->perid ? tag_reserve(b, b->nacc) : ST_OK;
	if (rc < 0)
		return rc;
	const uint64_t k = b->k, t = k + 1;
	for (size_t a = 0; a < b->nacc; a++) {
		if (!b->akept[a])
			continue;
		const uint8_t tab = b->atab[a];
		const uint32_t dim = d->dim[tab];
		float *g = b->asum + a * b->md;
		const float inv = 1.0f / (float)(b->perid ? b->acnt[a] : b->n);
		for (uint32_t j = 0; j < dim; j++)
			g[j] *= inv;
		if ((rc = st__dist_update_row(d, tab, b->akey[a], g, t)) < 0)
			return rc;
		if (b->perid) {
			size_t i = tag_pos(b, b->akey[a], tab);
			if (!b->tseen[i]) {
				b->tkey[i] = b->akey[a];
				b->ttab[i] = tab;
				b->tn++;
			}
			b->tseen[i] = t;   /* seen = step + 1 */
		}
	}
	b->k = t;
	b->n = 0;
	b->nacc = 0;
	memset(b->aslot, 0xff, sizeof(uint32_t) * b->scap);
	stat_add(&d->st.buf_steps, 1);
	return ST_OK;
}

/* Rank 0's dense global step over the dn contributions in its buffer. */
static void dense_step(st_dist_t *d)
{
	psbuf_t *b = &d->buf;
	const size_t np = d->p.nparams;
	const uint64_t t = *d->dense_t + 1;
	if (b->dkept) {
		const float inv = 1.0f / (float)b->dn;
		for (size_t j = 0; j < np; j++)
			b->dagg[j] *= inv;
		st_algo_dense_update(&d->p, d->p.params, d->dense_state, b->dagg, t);
	}
	*d->dense_t = t;
	memset(b->dagg, 0, sizeof(float) * np);
	b->dk++;
	b->dn = 0;
	b->dkept = 0;
}

/* The buffer's parameters, set by the first contribution; every later one
 * must agree. */
static int check_params(st_dist_t *d, const wire_hdr_t *h)
{
	psbuf_t *b = &d->buf;
	const int perid = (h->flags & WF_PERID) != 0;
	if (!h->stamp || h->stamp > (1u << 20))
		return -1;
	if (!b->M) {
		b->M = h->stamp;
		b->tol = h->pad;
		b->perid = perid;
		uint32_t md = 1;
		for (int k = 0; k < d->n_tables; k++)
			md = d->dim[k] > md ? d->dim[k] : md;
		b->md = md;
		return 0;
	}
	return b->M == h->stamp && b->tol == h->pad && b->perid == perid ? 0 : -1;
}

int st__dist_buf_rows(st_dist_t *d, const wire_hdr_t *h, size_t len, int from)
{
	psbuf_t *b = &d->buf;
	if (check_params(d, h) < 0 || h->step > b->k)
		return st__dist_bad_msg(from, "PUSH (buffered: parameters or token)", len);
	int rc = acc_reserve(d, h->n);
	if (rc < 0)
		return rc;
	const uint64_t *keys = (const uint64_t *)(h + 1);
	const uint8_t *tab = (const uint8_t *)(keys + h->n);
	const uint8_t *p = (const uint8_t *)(h + 1) + sizeof(uint64_t) * (size_t)h->n +
			   wire_pad8(h->n);
	const int f16 = (h->flags & WF_F16) != 0;
	const uint64_t token = h->step;
	const int ancient = b->perid && b->tol != UINT32_MAX &&
			    b->k - token > (uint64_t)HORIZON + b->tol;
	uint64_t dropped = 0;
	for (uint32_t i = 0; i < h->n; i++) {
		const uint32_t dim = d->dim[tab[i]];
		const uint32_t a = acc_find(b, keys[i], tab[i], dim);
		b->acnt[a]++;
		uint64_t s = 0;
		if (b->perid) {
			uint64_t seen = tag_get(b, keys[i], tab[i]);
			s = seen > token ? seen - token : 0;
		}
		if (ancient || (b->tol != UINT32_MAX && s > b->tol)) {
			dropped++;
		} else {
			b->akept[a]++;
			float *sum = b->asum + (size_t)a * b->md;
			st__dist_get_row(p, dim, f16, d->trow);
			for (uint32_t j = 0; j < dim; j++)
				sum[j] += d->trow[j];
		}
		p += wire_row_bytes(dim, f16);
	}
	stat_add(&d->st.buf_rows_dropped, dropped);
	if (++b->n == b->M)
		return rows_step(d);
	return ST_OK;
}

int st__dist_buf_dense(st_dist_t *d, const wire_hdr_t *h, const float *grad, uint64_t *token,
		       uint64_t *age, int *dropped)
{
	psbuf_t *b = &d->buf;
	const size_t np = d->p.nparams;
	if (check_params(d, h) < 0 || h->step > b->dk)
		return -1;
	if (!b->dagg && !(b->dagg = calloc(np ? np : 1, sizeof(float))))
		return ST_ENOMEM;
	*age = b->dk - h->step;
	*dropped = 0;
	if (grad) {
		if (b->tol != UINT32_MAX && *age > b->tol) {
			*dropped = 1;
		} else {
			for (size_t j = 0; j < np; j++)
				b->dagg[j] += grad[j];
			b->dkept++;
		}
		if (++b->dn == b->M)
			dense_step(d);
	}
	*token = b->dk;
	return ST_OK;
}

int st__dist_buf_flush(st_dist_t *d)
{
	psbuf_t *b = &d->buf;
	if (b->dn)
		dense_step(d);
	return b->n ? rows_step(d) : ST_OK;
}
