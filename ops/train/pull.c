/*
 * pull.c — the pull-sparse stage of the trainer: waits at the checkpoint
 * gate, deduplicates a batch's keys (the batch's unique keys plus, per
 * occurrence, its index: PERSIA's layout, persia-hybrid-training.md
 * Section 4.2.3), and has the row source (ops/rowsrc) resolve every unique
 * key to its row in the table of its slot, creating rows for training
 * batches (subject to admission) and never for eval batches; then records
 * the keys for the next delta export and leaves each key's row width and
 * table for train in b->aux.
 *
 * Threads: runs on the pull stage's graph threads; thread i uses only
 * tr->rows.pull_t[i] as scratch and passes i to the source.
 */
#include <stdlib.h>
#include <string.h>

#include "ops/train/trainer_internal.h"
#include "runtime/err.h"

#define op_fail st__trainer_fail

void st__trainer_pull_free(pull_thread_t *p)
{
	st_dedup_fini(&p->dd);
}

static int graph_stopped(void *g)
{
	return g && st_graph_canceled(g);
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
	/* Behind the slots, room for the table of each key (b->aux's layout,
	 * trainer_internal.h). */
	int rc = st_batch_dedup(&t->dd, b, 1, &uslot);
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
	/* Each unique key's table, behind the slots (b->aux's layout). */
	uint8_t *utable = (uint8_t *)(uslot + nu);
	for (uint32_t u = 0; u < nu; u++)
		utable[u] = (uint8_t)tr->rows.slot_table[uslot[u]];
	/* Where the rows live is the source's business (ops/rowsrc). */
	rc = st_rowsrc_resolve(tr->rows.src, b, utable, ctx->thread_idx, graph_stopped, ctx->graph);
	if (rc < 0) {
		free(uslot);
		return op_fail(ctx, rc, "batch %llu: parameter store: %s",
			       (unsigned long long)b->seq, st_strerror(rc));
	}
	if ((rc = st__trainer_track_batch(tr, b, utable)) < 0) {
		free(uslot);
		return op_fail(ctx, rc, "batch %llu: cannot record its keys for the next delta "
			       "export: %s (the export would silently miss their rows)",
			       (unsigned long long)b->seq, st_strerror(rc));
	}
	/* The row width of every unique key, for train (b->aux, freed with the
	 * batch). The slot array is reused in place; the tables stay behind
	 * it. */
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
