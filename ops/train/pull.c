/*
 * pull.c — the pull-sparse stage of the trainer: deduplicates a batch's
 * keys (the batch's unique keys plus, per occurrence, its index: PERSIA's
 * layout, persia-hybrid-training.md Section 4.2.3) and resolves every unique
 * key to its row in the embedding table of its slot, creating rows for
 * training batches (subject to admission) and never for eval batches.
 *
 * Threads: runs on the pull stage's graph threads; thread i uses only
 * tr->rows.pull_t[i] as scratch. The tables do their own locking.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/dist/dist.h"
#include "ops/train/trainer_internal.h"
#include "runtime/err.h"

#define op_fail st__trainer_fail

void st__trainer_pull_free(pull_thread_t *p)
{
	free(p->hkeys);
	free(p->hidx);
	free(p->tkeys);
	free(p->tpos);
	free(p->trows);
}

/* Fills b->uniq (first-occurrence order), b->key_idx, b->n_uniq, and
 * udim[u] = the slot of u's first occurrence (turned into a width later). */
static int dedup(pull_thread_t *t, st_batch_t *b, uint16_t **slot_out)
{
	uint32_t nk = st_batch_nkeys(b);
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
	uint16_t *uslot = malloc(sizeof(uint16_t) * (nk ? nk : 1));
	if (!uslot)
		return ST_ENOMEM;
	uint32_t mask = cap - 1, nu = 0;
	for (uint32_t k = 0; k < nk; k++) {
		uint64_t key = b->keys[k];
		uint32_t i = (uint32_t)mix64(key) & mask;
		for (;;) {
			uint32_t u = t->hidx[i];
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

static int graph_stopped(void *g)
{
	return g && st_graph_canceled(g);
}

int st__trainer_dist_pull(st_trainer_t *tr, st_batch_t *b, const uint16_t *uslot,
			  uint64_t need_step, st_graph_t *g)
{
	const uint32_t nu = b->n_uniq;
	const size_t stride = (size_t)tr->gstride;
	const size_t ntok = (size_t)st_dist_size(tr->dist.d);
	size_t head = (sizeof(dist_rowbuf_t) + sizeof(uint64_t) * ntok + nu + 63) & ~(size_t)63;
	dist_rowbuf_t *rb = malloc(head + sizeof(float) * stride * (nu ? nu : 1));
	if (!rb)
		return ST_ENOMEM;
	rb->tokens = (uint64_t *)(rb + 1);
	rb->utable = (uint8_t *)(rb->tokens + ntok);
	rb->rows = (float *)((uint8_t *)rb + head);
	for (uint32_t u = 0; u < nu; u++)
		rb->utable[u] = (uint8_t)tr->rows.slot_table[uslot[u]];
	free(b->rowbuf);
	b->rowbuf = rb;
	return st_dist_pull(tr->dist.d, b->uniq, rb->utable, nu, need_step, !b->eval,
			    (uint32_t)b->seq, rb->rows, stride, b->rows, rb->tokens, graph_stopped, g);
}

static int pull_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			st_batch_t **out)
{
	st_trainer_t *tr = state;
	*out = b;
	pull_thread_t *t = &tr->rows.pull_t[ctx->thread_idx];
	st__trainer_ckpt_gate(tr, b, ctx->graph);
	if ((int)b->n_slots > tr->n_slots)
		return op_fail(ctx, ST_EINVAL, "batch %llu has %u slots, the model has %d",
			       (unsigned long long)b->seq, b->n_slots, tr->n_slots);
	uint16_t *uslot = NULL;
	int rc = dedup(t, b, &uslot);
	if (rc < 0)
		return op_fail(ctx, rc, "batch %llu: out of memory deduplicating %u keys",
			       (unsigned long long)b->seq, st_batch_nkeys(b));
	uint32_t nu = b->n_uniq;
	float **rows = realloc(b->rows, sizeof(float *) * (nu ? nu : 1));
	if (!rows) {
		free(uslot);
		return op_fail(ctx, ST_ENOMEM, "batch %llu: out of memory for rows",
			       (unsigned long long)b->seq);
	}
	b->rows = rows;
	const uint32_t step = (uint32_t)b->seq;
	if (tr->dist.d) {
		/* FRESH_ROWS (gba, bsp, hop_bw): train batch k is pulled once
		 * batch k-1 is trained, right before it computes. */
		while (__atomic_load_n(&tr->dist.fresh, __ATOMIC_RELAXED) && !b->eval &&
		       !st_graph_canceled(ctx->graph) &&
		       __atomic_load_n(&tr->dist.trained, __ATOMIC_ACQUIRE) < tr->dist.pulled) {
			struct timespec ts = { 0, 50 * 1000 };
			nanosleep(&ts, NULL);
		}
		/* Train batch k is sync step k + soff (soff = 0 unless st.sync.auto
		 * switched) and waits for steps 0..k+soff-1-lag; an eval pass runs
		 * after training, so it waits for every step. The train thread
		 * sets soff, then lag (release) at a switch. */
		const int64_t lag = __atomic_load_n(&tr->dist.lag, __ATOMIC_ACQUIRE);
		const int64_t at = (int64_t)tr->dist.pulled +
				   __atomic_load_n(&tr->dist.soff, __ATOMIC_RELAXED) - lag;
		uint64_t need = lag < 0 ? 0
				: b->eval ? __atomic_load_n(&tr->dist.ssteps, __ATOMIC_RELAXED)
				: at > 0 ? (uint64_t)at : 0;
		rc = st__trainer_dist_pull(tr, b, uslot, need, ctx->graph);
		if (!b->eval)
			tr->dist.pulled++;
	} else if (tr->rows.n_tables == 1) {
		rc = st_table_resolve(tr->rows.tables[0], b->uniq, nu, step, !b->eval, rows);
	} else {
		if (nu > t->tcap) {
			free(t->tkeys);
			free(t->tpos);
			free(t->trows);
			t->tkeys = malloc(sizeof(uint64_t) * nu);
			t->tpos = malloc(sizeof(uint32_t) * nu);
			t->trows = malloc(sizeof(float *) * nu);
			t->tcap = (t->tkeys && t->tpos && t->trows) ? nu : 0;
		}
		rc = t->tcap >= nu ? ST_OK : ST_ENOMEM;
		for (int k = 0; k < tr->rows.n_tables && rc >= 0; k++) {
			uint32_t m = 0;
			for (uint32_t u = 0; u < nu; u++)
				if (tr->rows.slot_table[uslot[u]] == k) {
					t->tkeys[m] = b->uniq[u];
					t->tpos[m++] = u;
				}
			rc = st_table_resolve(tr->rows.tables[k], t->tkeys, m, step, !b->eval, t->trows);
			for (uint32_t i = 0; i < m && rc >= 0; i++)
				rows[t->tpos[i]] = t->trows[i];
		}
	}
	if (rc < 0) {
		free(uslot);
		return op_fail(ctx, rc, "batch %llu: parameter store: %s",
			       (unsigned long long)b->seq, st_strerror(rc));
	}
	if ((rc = st__trainer_track_batch(tr, b, uslot)) < 0) {
		free(uslot);
		return op_fail(ctx, rc, "batch %llu: cannot record its keys for the next delta "
			       "export: %s (the export would silently miss their rows)",
			       (unsigned long long)b->seq, st_strerror(rc));
	}
	/* The row width of every unique key, for train (b->aux, freed with the
	 * batch). The slot array is reused in place. */
	for (uint32_t u = 0; u < nu; u++)
		uslot[u] = (uint16_t)st_model_row_dim(tr->model, uslot[u]);
	free(b->aux);
	b->aux = uslot;
	return ST_OK;
}

const st_stage_ops_t st_trainer_pull_ops = {
	.name = "pull",
	.process = pull_process,
};
