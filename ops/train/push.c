/*
 * push.c — the push and dump stages of the trainer. The sparse optimizer
 * step happens in train, at every step (docs/design-notes.md, "Where sparse
 * updates are applied"); push gives the batch's rows back to the row source
 * (ops/rowsrc: the local store unpins them, so that the RAM tier may evict
 * them again; remote copies go with the batch) and has the source keep its
 * books, in batch order: TTL eviction sweeps, memory-budget warnings, the
 * row / cache / SSD metrics. dump records the data position, writes a
 * checkpoint after a batch pull marked, and frees the batch.
 *
 * Threads: one push thread and one dump thread (graph stages).
 */
#include <stdlib.h>

#include "ops/rowsrc/rowsrc.h"

#include "ops/train/trainer_internal.h"
#include "runtime/err.h"
#include "runtime/trace.h"

/* The store's counters on the trace (runtime/trace.h), read back from the
 * metrics the row source just published: one lookup each per batch, only
 * when recording. A counter the source does not have is left out. */
static void trace_store(const st_metrics_t *m)
{
	static const struct { const char *metric, *track; } c[] = {
		{ "rows", "store rows" },
		{ "cache.hit", "store hit rate" },
		{ "cache.ssd_load", "store ssd load rate" },
		{ "ssd.rows_read", "ssd rows read" },
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		double v = st_metrics_get(m, c[i].metric, -1);
		if (v >= 0)
			st_trace_counter(c[i].track, v);
	}
}

static int push_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b,
			st_batch_t **out)
{
	st_trainer_t *tr = state;
	/* The batch's updates are applied (every policy applies a batch's row
	 * updates before its end_batch): its rows go back to the source. */
	st_rowsrc_release(tr->rows.src, b);
	if (!b->eval)
		tr->examples_done += b->n;
	uint64_t ev = 0;
	int rc = st_rowsrc_maintain(tr->rows.src, b, &ev);
	if (rc < 0)
		return st__trainer_fail(ctx, rc, "batch %llu: parameter store upkeep: %s",
					(unsigned long long)b->seq, st_strerror(rc));
	if (rc > 0) {
		/* A TTL sweep ran: its evictions, and whether every evicted key
		 * made it into the next delta export. */
		if (tr->metrics)
			st_metrics_add(tr->metrics, "evicted", (double)ev);
		if ((rc = st__trainer_track_error(tr)) < 0)
			return st__trainer_fail(ctx, rc, "batch %llu: TTL eviction: cannot record "
						"the evicted keys for the next delta export: %s (the "
						"export would silently keep their rows)",
						(unsigned long long)b->seq, st_strerror(rc));
	}
	if (tr->metrics) {
		st_rowsrc_metrics(tr->rows.src, tr->metrics);
		if (st_trace_enabled())
			trace_store(tr->metrics);
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
		tr->ckpt.pass_seq = b->seq + 1;
	}
	if (b->ckpt && tr->ckpt.cfg) {
		/* The copy runs here, on the dump thread; the files are written
		 * in the background (ops/dump/dumpio.c). */
		uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
		st__trainer_checkpoint_after(tr, b);
		if (t0) {
			st_trace_span("work", "checkpoint", NULL, t0, st_trace_now(),
				      (int64_t)b->seq);
			st_trace_instant("checkpoint", "after batch %llu",
					 (unsigned long long)b->seq);
		}
	}
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
