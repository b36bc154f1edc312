/*
 * attention.c — DIN's local activation unit (attention.h): the readable
 * reference. The attention MLP runs through nn.h's st_linear_* (sgemm) over
 * a chunk of keys at a time, so the products are already blocked; the rest
 * (building a_t, the weighted sum, scattering gradients to rows) is plain
 * loops over d, which at CTR dims (8..64) is a small share of the time.
 *
 * Scratch (one block, the caller's): Q and dQ [max_n × d], then per chunk of
 * C keys A [C × 4d], the hidden outputs H_l [C × h_l], the weights w [C],
 * dA [C × 4d], two dH buffers [C × max h], dw [C], and each key's example
 * (pex) and CSR index (pkey). Each part starts on a 64-byte line.
 */
#include "ops/nn/attention.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "ops/nn/nn.h"

typedef struct parts {
	float *Q, *dQ, *A, *H[ST_ATTN_MAX_HIDDEN], *w, *dA, *dH[2], *dw;
	uint32_t *pex, *pkey;
} parts_t;

static size_t up16(size_t floats) { return (floats + 15) & ~(size_t)15; }

static int max_hidden(const st_attn_shape_t *s)
{
	int m = 1;
	for (int l = 0; l < s->n_hidden; l++)
		m = s->hidden[l] > m ? s->hidden[l] : m;
	return m;
}

/* Lays the parts out from base (NULL: only counts). Returns floats used. */
static size_t carve(const st_attn_shape_t *s, uint32_t max_n, float *base, parts_t *p)
{
	const size_t C = (size_t)s->chunk, d = (size_t)s->d, n = max_n ? max_n : 1;
	size_t o = 0;
#define PART(dst, cnt) do { if (base) (dst) = (void *)(base + o); o += up16(cnt); } while (0)
	PART(p->Q, n * d);
	PART(p->dQ, n * d);
	PART(p->A, C * 4 * d);
	for (int l = 0; l < s->n_hidden; l++)
		PART(p->H[l], C * (size_t)s->hidden[l]);
	PART(p->w, C);
	PART(p->dA, C * 4 * d);
	PART(p->dH[0], C * (size_t)max_hidden(s));
	PART(p->dH[1], C * (size_t)max_hidden(s));
	PART(p->dw, C);
	PART(p->pex, C);      /* uint32_t is float's size */
	PART(p->pkey, C);
#undef PART
	return o;
}

int st_attn_embed_layout(const st_pool_layout_t *pool, const uint8_t *seq, int *dim,
			 int *off)
{
	int w = 0;
	for (int s = 0; s < pool->n_slots; s++) {
		dim[s] = seq[s] ? 0 : pool->dim[s];
		off[s] = w;
		w += dim[s];
	}
	return w;
}

int st_attn_check(const st_pool_layout_t *P, const char *prefix, int q_slot, int k_slot,
		  int n_hidden, const int *hidden, int act, char *err, size_t len)
{
	int S = P->n_slots;
	if (q_slot < 0 || q_slot >= S || k_slot < 0 || k_slot >= S || q_slot == k_slot) {
		snprintf(err, len, "attention %s: query slot %d and key slot %d must be two "
			 "slots of 0..%d", prefix, q_slot, k_slot, S - 1);
		return -1;
	}
	if (P->dim[q_slot] != P->dim[k_slot] || P->dim[k_slot] < 1) {
		snprintf(err, len, "attention %s: the query slot %d is %d wide and the key slot "
			 "%d is %d; both need the same embedding dim", prefix, q_slot,
			 P->dim[q_slot], k_slot, P->dim[k_slot]);
		return -1;
	}
	if (n_hidden < 0 || n_hidden > ST_ATTN_MAX_HIDDEN || act < 0 || act > 2) {
		snprintf(err, len, "attention %s: %d hidden layers (0..%d), activation %d", prefix,
			 n_hidden, ST_ATTN_MAX_HIDDEN, act);
		return -1;
	}
	for (int l = 0; l < n_hidden; l++)
		if (hidden[l] < 1) {
			snprintf(err, len, "attention %s: hidden layer %d has size %d (need >= 1)",
				 prefix, l, hidden[l]);
			return -1;
		}
	return 0;
}

size_t st_attn_scratch_bytes(const st_attn_shape_t *s, uint32_t max_n)
{
	parts_t p;
	return carve(s, max_n, NULL, &p) * sizeof(float);
}

double st_attn_flops_per_key(const st_attn_shape_t *s)
{
	double f = 0.0;
	int in = 4 * s->d;
	for (int l = 0; l <= s->n_hidden; l++) {
		int out = l < s->n_hidden ? s->hidden[l] : 1;
		f += 8.0 * in * out;   /* forward twice (recomputed), backward twice */
		in = out;
	}
	return f + 12.0 * s->d;   /* building a_t, w_t k_t, and their gradients */
}

/* Q[i] = Σ over example i's keys in the query slot of val × row[0:d]. */
static void queries(const st_attn_shape_t *s, uint32_t r0, uint32_t n,
		    const uint32_t *row_off, const uint16_t *key_slot, const float *key_val,
		    const uint32_t *key_idx, float *const *rows, float *Q)
{
	const int d = s->d;
	memset(Q, 0, sizeof(float) * (size_t)n * d);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t k = row_off[r0 + i]; k < row_off[r0 + i + 1]; k++) {
			const float *row = rows[key_idx[k]];
			if (key_slot[k] != s->q_slot || !row)
				continue;
			for (int j = 0; j < d; j++)
				Q[(size_t)i * d + j] += key_val[k] * row[j];
		}
}

/* Row p of A: [k, q, k − q, k ⊙ q] for key `k` of example i. */
static void fill_row(const st_attn_shape_t *s, const parts_t *p, int pos, uint32_t i,
		     uint32_t k, const float *key_val, const uint32_t *key_idx,
		     float *const *rows)
{
	const int d = s->d;
	float *a = p->A + (size_t)pos * 4 * d;
	const float *q = p->Q + (size_t)i * d, *row = rows[key_idx[k]];
	for (int j = 0; j < d; j++) {
		float kj = row ? key_val[k] * row[j] : 0.0f;
		a[j] = kj;
		a[d + j] = q[j];
		a[2 * d + j] = kj - q[j];
		a[3 * d + j] = kj * q[j];
	}
	p->pex[pos] = i;
	p->pkey[pos] = k;
}

/* The attention MLP over the chunk's P rows of A: w [P]. */
static void mlp_forward(const st_attn_shape_t *s, const parts_t *p, int P,
			const float *const *W, const float *const *b)
{
	const float *X = p->A;
	int in = 4 * s->d;
	for (int l = 0; l < s->n_hidden; l++) {
		st_linear_forward(P, in, s->hidden[l], X, W[l], b[l], p->H[l]);
		st_act_forward(s->act, (size_t)P * s->hidden[l], p->H[l]);
		X = p->H[l];
		in = s->hidden[l];
	}
	st_linear_forward(P, in, 1, X, W[s->n_hidden], b[s->n_hidden], p->w);
}

/* out[pex[q]] += w_q k_q over the chunk's P keys. */
static void chunk_forward(const st_attn_shape_t *s, const parts_t *p, int P,
			  const float *const *W, const float *const *b, float *out)
{
	const int d = s->d;
	mlp_forward(s, p, P, W, b);
	for (int q = 0; q < P; q++) {
		const float *kt = p->A + (size_t)q * 4 * d;
		float *o = out + (size_t)p->pex[q] * d;
		for (int j = 0; j < d; j++)
			o[j] += p->w[q] * kt[j];
	}
}

void st_attn_forward(const st_attn_shape_t *s, uint32_t r0, uint32_t n,
		     const uint32_t *row_off, const uint16_t *key_slot,
		     const float *key_val, const uint32_t *key_idx, float *const *rows,
		     const float *const *W, const float *const *b, void *scratch,
		     float *out)
{
	assert(s->chunk >= 1 && s->n_hidden >= 0 && s->n_hidden <= ST_ATTN_MAX_HIDDEN);
	parts_t p;
	carve(s, n, scratch, &p);
	queries(s, r0, n, row_off, key_slot, key_val, key_idx, rows, p.Q);
	memset(out, 0, sizeof(float) * (size_t)n * s->d);
	int P = 0;
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t k = row_off[r0 + i]; k < row_off[r0 + i + 1]; k++) {
			if (key_slot[k] != s->k_slot)
				continue;
			fill_row(s, &p, P++, i, k, key_val, key_idx, rows);
			if (P == s->chunk) {
				chunk_forward(s, &p, P, W, b, out);
				P = 0;
			}
		}
	if (P)
		chunk_forward(s, &p, P, W, b, out);
}

/* Backward of one chunk of P keys (its forward recomputed first). */
static void chunk_backward(const st_attn_shape_t *s, const parts_t *p, int P,
			   const float *key_val, const uint32_t *key_idx,
			   const float *const *W, const float *const *b, const float *dout,
			   float *const *dW, float *const *db, float *gu, int gstride)
{
	const int d = s->d, H = s->n_hidden;
	mlp_forward(s, p, P, W, b);
	/* out_i = Σ w_t k_t: dw_t = dout_i · k_t. */
	for (int q = 0; q < P; q++) {
		const float *kt = p->A + (size_t)q * 4 * d, *g = dout + (size_t)p->pex[q] * d;
		float acc = 0.0f;
		for (int j = 0; j < d; j++)
			acc += g[j] * kt[j];
		p->dw[q] = acc;
	}
	/* Back through the MLP, last layer first, down to dA. */
	const float *cur = p->dw;
	int pp = 0;
	for (int l = H; l >= 0; l--) {
		int in = l ? s->hidden[l - 1] : 4 * d, out = l < H ? s->hidden[l] : 1;
		if (l < H)
			st_act_backward(s->act, (size_t)P * out, p->H[l], (float *)cur);
		const float *X = l ? p->H[l - 1] : p->A;
		float *dX = l ? p->dH[pp] : p->dA;
		st_linear_backward(P, in, out, X, W[l], cur, dX, dW[l], db[l]);
		cur = dX;
		pp ^= 1;
	}
	/* a = [k, q, k − q, k ⊙ q]: dk = w dout + da0 + da2 + da3 ⊙ q,
	 * dq = da1 − da2 + da3 ⊙ k; dk goes to the key's row (× val). */
	for (int q = 0; q < P; q++) {
		const uint32_t i = p->pex[q], k = p->pkey[q];
		const float *a = p->A + (size_t)q * 4 * d, *da = p->dA + (size_t)q * 4 * d;
		const float *qv = p->Q + (size_t)i * d, *g = dout + (size_t)i * d;
		float *dq = p->dQ + (size_t)i * d;
		float *gr = gu + (size_t)key_idx[k] * gstride;
		for (int j = 0; j < d; j++) {
			float dk = p->w[q] * g[j] + da[j] + da[2 * d + j] + da[3 * d + j] * qv[j];
			dq[j] += da[d + j] - da[2 * d + j] + da[3 * d + j] * a[j];
			gr[j] += key_val[k] * dk;
		}
	}
}

void st_attn_backward(const st_attn_shape_t *s, uint32_t r0, uint32_t n,
		      const uint32_t *row_off, const uint16_t *key_slot,
		      const float *key_val, const uint32_t *key_idx, float *const *rows,
		      const float *const *W, const float *const *b, const float *dout,
		      void *scratch, float *const *dW, float *const *db, float *gu,
		      int gstride)
{
	parts_t p;
	carve(s, n, scratch, &p);
	const int d = s->d;
	queries(s, r0, n, row_off, key_slot, key_val, key_idx, rows, p.Q);
	memset(p.dQ, 0, sizeof(float) * (size_t)n * d);
	int P = 0;
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t k = row_off[r0 + i]; k < row_off[r0 + i + 1]; k++) {
			if (key_slot[k] != s->k_slot)
				continue;
			fill_row(s, &p, P++, i, k, key_val, key_idx, rows);
			if (P == s->chunk) {
				chunk_backward(s, &p, P, key_val, key_idx, W, b, dout, dW, db, gu,
					       gstride);
				P = 0;
			}
		}
	if (P)
		chunk_backward(s, &p, P, key_val, key_idx, W, b, dout, dW, db, gu, gstride);
	/* The query's gradient goes to its rows, as pooling's backward does. */
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t k = row_off[r0 + i]; k < row_off[r0 + i + 1]; k++) {
			if (key_slot[k] != s->q_slot)
				continue;
			float *gr = gu + (size_t)key_idx[k] * gstride;
			const float *dq = p.dQ + (size_t)i * d;
			for (int j = 0; j < d; j++)
				gr[j] += key_val[k] * dq[j];
		}
}
