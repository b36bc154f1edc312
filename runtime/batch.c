/*
 * batch.c — allocation of columnar batches (see batch.h for the layout).
 */
#include "batch.h"
#include "err.h"

#include <stdlib.h>
#include <string.h>

int st_batch_create(st_batch_t **out, uint32_t cap, uint32_t n_dense,
		    uint32_t n_slots, uint32_t key_cap)
{
	st_batch_t *b = calloc(1, sizeof *b);
	if (!b)
		return ST_ENOMEM;
	b->cap = cap;
	b->n_dense = n_dense;
	b->n_slots = n_slots;
	b->n_labels = 1;
	b->pred_per = 1;
	if (key_cap == 0)
		key_cap = 64;
	b->key_cap = key_cap;
	b->labels = malloc(sizeof(float) * (cap ? cap : 1));
	b->dense = calloc((size_t)cap * n_dense + 1, sizeof(float));
	b->row_off = calloc((size_t)cap + 1, sizeof(uint32_t));
	b->keys = malloc(sizeof(uint64_t) * key_cap);
	b->key_slot = malloc(sizeof(uint16_t) * key_cap);
	b->key_val = malloc(sizeof(float) * key_cap);
	b->pred = calloc((size_t)cap + 1, sizeof(float));
	if (!b->labels || !b->dense || !b->row_off || !b->keys || !b->key_slot ||
	    !b->key_val || !b->pred) {
		st_batch_destroy(b);
		return ST_ENOMEM;
	}
	*out = b;
	return ST_OK;
}

int st_batch_set_labels(st_batch_t *b, uint32_t n_labels)
{
	if (n_labels < 1 || n_labels > ST_BATCH_MAX_LABELS || b->n)
		return ST_EINVAL;
	if (n_labels == b->n_labels)
		return ST_OK;
	size_t cap = b->cap ? b->cap : 1;
	float *l = malloc(sizeof(float) * cap * n_labels);
	float *p = calloc(cap * n_labels + 1, sizeof(float));
	if (!l || !p) {
		free(l);
		free(p);
		return ST_ENOMEM;
	}
	free(b->labels);
	free(b->pred);
	b->labels = l;
	b->pred = p;
	b->n_labels = n_labels;
	b->pred_per = n_labels;
	return ST_OK;
}

int st_batch_reserve_pred(st_batch_t *b, uint32_t per_example)
{
	if (per_example <= b->pred_per)
		return ST_OK;
	float *p = calloc((size_t)(b->cap ? b->cap : 1) * per_example + 1, sizeof(float));
	if (!p)
		return ST_ENOMEM;
	free(b->pred);
	b->pred = p;
	b->pred_per = per_example;
	return ST_OK;
}

void st_batch_destroy(st_batch_t *b)
{
	if (!b)
		return;
	free(b->labels);
	free(b->dense);
	free(b->row_off);
	free(b->keys);
	free(b->key_slot);
	free(b->key_val);
	free(b->uniq);
	free(b->key_idx);
	free(b->rows);
	free(b->pred);
	free(b->aux);
	free(b->rowbuf);
	free(b);
}

void st_batch_clear(st_batch_t *b)
{
	b->n = 0;
	b->row_off[0] = 0;
	b->n_uniq = 0;
	b->eval = 0;
}

int st_batch_reserve_keys(st_batch_t *b, uint32_t extra)
{
	uint64_t need = (uint64_t)b->row_off[b->n] + extra;
	if (need <= b->key_cap)
		return ST_OK;
	if (need > UINT32_MAX)
		return ST_ENOMEM;
	uint64_t nc = b->key_cap ? b->key_cap : 64;
	while (nc < need)
		nc *= 2;
	if (nc > UINT32_MAX)
		nc = UINT32_MAX;
	uint64_t *k = realloc(b->keys, sizeof(uint64_t) * nc);
	if (!k)
		return ST_ENOMEM;
	b->keys = k;
	uint16_t *s = realloc(b->key_slot, sizeof(uint16_t) * nc);
	if (!s)
		return ST_ENOMEM;
	b->key_slot = s;
	float *v = realloc(b->key_val, sizeof(float) * nc);
	if (!v)
		return ST_ENOMEM;
	b->key_val = v;
	b->key_cap = (uint32_t)nc;
	return ST_OK;
}

/* splitmix64's finalizer: the dedup set's hash. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

int st_batch_dedup(st_dedup_t *t, st_batch_t *b, size_t extra, uint16_t **slot_out)
{
	const uint32_t nk = st_batch_nkeys(b);
	uint32_t cap = 16;
	while (cap < 2 * (uint64_t)nk)
		cap *= 2;
	if (cap > t->hcap) {
		free(t->hkeys);
		free(t->hidx);
		t->hkeys = malloc(sizeof(uint64_t) * cap);
		t->hidx = malloc(sizeof(uint32_t) * cap);
		if (!t->hkeys || !t->hidx) {
			t->hcap = 0;
			return ST_ENOMEM;
		}
		t->hcap = cap;
	}
	memset(t->hidx, 0xff, sizeof(uint32_t) * cap);
	uint64_t *uniq = realloc(b->uniq, sizeof(uint64_t) * (nk ? nk : 1));
	if (!uniq)
		return ST_ENOMEM;
	b->uniq = uniq;
	uint32_t *kidx = realloc(b->key_idx, sizeof(uint32_t) * (nk ? nk : 1));
	if (!kidx)
		return ST_ENOMEM;
	b->key_idx = kidx;
	uint16_t *uslot = malloc((sizeof(uint16_t) + extra) * (nk ? nk : 1));
	if (!uslot)
		return ST_ENOMEM;
	const uint32_t mask = cap - 1;
	uint32_t nu = 0;
	for (uint32_t k = 0; k < nk; k++) {
		const uint64_t key = b->keys[k];
		uint32_t i = (uint32_t)mix64(key) & mask;
		for (;;) {
			const uint32_t u = t->hidx[i];
			if (u == UINT32_MAX) {
				t->hidx[i] = nu;
				t->hkeys[i] = key;
				uniq[nu] = key;
				uslot[nu] = b->key_slot[k];
				kidx[k] = nu++;
				break;
			}
			if (t->hkeys[i] == key) {
				kidx[k] = u;
				break;
			}
			i = (i + 1) & mask;
		}
	}
	b->n_uniq = nu;
	*slot_out = uslot;
	return ST_OK;
}

void st_dedup_fini(st_dedup_t *t)
{
	free(t->hkeys);
	free(t->hidx);
	memset(t, 0, sizeof *t);
}
