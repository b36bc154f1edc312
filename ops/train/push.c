/*
 * push.c — the push and dump stages of the trainer. The sparse optimizer
 * step happens in train, at every step (docs/design-notes.md, "Where sparse
 * updates are applied"); push keeps the store's books: TTL eviction sweeps
 * (model.ttl, in batches, every ttl/8 batches, in batch order so no row of a
 * batch in flight is older than the TTL) and the row / admission metrics.
 * dump frees the batch (checkpoints and exports arrive with their issue).
 * With an SSD tier, push unpins the batch's rows (pinned by pull-sparse):
 * from then on the RAM tier may evict them.
 *
 * Threads: one push thread and one dump thread (graph stages).
 */
#include <stdlib.h>

#include "ops/train/trainer_internal.h"
#include "runtime/err.h"

static int push_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			st_batch_t **out)
{
	st_trainer_t *tr = state;
	/* The batch's updates are applied (every policy applies a batch's row
	 * updates before its end_batch): its rows may be evicted again. */
	if (tr->rows.store_root[0] && !tr->dist.d)   /* a multi-process batch holds copies */
		st_table_unpin(tr->rows.tables[0], b->rows, b->n_uniq);
	if (!b->eval)
		tr->examples_done += b->n;
	if (tr->rows.ttl && !b->eval && b->seq > tr->rows.ttl && b->seq % tr->rows.evict_every == 0) {
		uint64_t ev = 0;
		for (int i = 0; i < tr->rows.n_tables; i++)
			ev += st_table_evict_older(tr->rows.tables[i], (uint32_t)b->seq, tr->rows.ttl);
		if (tr->metrics)
			st_metrics_add(tr->metrics, "evicted", (double)ev);
		int rc = st__trainer_track_error(tr);
		if (rc < 0)
			return st__trainer_fail(ctx, rc, "batch %llu: TTL eviction: cannot record "
						"the evicted keys for the next delta export: %s (the "
						"export would silently keep their rows)",
						(unsigned long long)b->seq, st_strerror(rc));
	}
	if (tr->metrics)
		st__trainer_store_metrics(tr);
	/* Without storage.ssd there is nowhere to evict rows to: storage.mem
	 * is then a limit the job is told about, once, when the table passes
	 * it, instead of silently using more memory than the job allows. */
	if (tr->rows.mem_budget && !tr->rows.store_root[0] && !tr->rows.mem_warned) {
		uint64_t bytes = 0;
		for (int i = 0; i < tr->rows.n_tables; i++)
			bytes += (uint64_t)st_table_size(tr->rows.tables[i]) *
				 st_table_row_bytes(tr->rows.tables[i]);
		if (bytes > tr->rows.mem_budget) {
			st_warn("the embedding table uses %.1f MB, more than storage.mem (%.1f MB): "
				"without storage.ssd every row stays in RAM (add storage.ssd to "
				"evict cold rows to SSD)",
				(double)bytes / 1e6, (double)tr->rows.mem_budget / 1e6);
			tr->rows.mem_warned = 1;
		}
	}
	*out = b;
	return ST_OK;
}

static int dump_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			st_batch_t **out)
{
	st_trainer_t *tr = state;
	if (!b->eval) {
		tr->ckpt.pos_file = b->src_file;
		tr->ckpt.pos_rec = b->src_rec;
	}
	if (b->ckpt && tr->ckpt.cfg)
		st__trainer_checkpoint_after(tr, b);
	st_batch_destroy(b);
	*out = NULL;
	return ST_OK;
}

const st_stage_ops_t st_trainer_push_ops = {
	.name = "push",
	.process = push_process,
};

const st_stage_ops_t st_trainer_dump_ops = {
	.name = "dump",
	.process = dump_process,
};
