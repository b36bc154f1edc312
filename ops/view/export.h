/*
 * export.h — writing a serving export of a model view (view.h; a live
 * trainer's through st_trainer_view): the dense tensors and every table's
 * embedding rows (no optimizer state), full or as a delta, in the layout of
 * docs/formats.md ("Exports"), which ops/view/predict.h reads back.
 *
 * An export directory <root>/export-<seq, 12 digits>-full|delta/ holds
 *   dense.safetensors  every tensor of st_model_params, named and shaped as
 *                      st_model_tensor(m, i), F32; its __metadata__ carries
 *                      the model (below);
 *   table-<k>.rows     table k of the view (k = 0 .. n_tables-1, view.h's
 *                      order), dim = the table's row width (embedding, plus
 *                      the wide weight of lr/wdl/deepfm), state_dim 0;
 *   manifest.yaml      kind export-full / export-delta, seq, step, job name,
 *                      hash and lineage (the view's: the first full export
 *                      of a run without one creates it), every file with its
 *                      size and XXH3-64.
 *
 * __metadata__ of dense.safetensors:
 *   strata.format       "1"
 *   strata.model        st_modelcfg_encode(v->cfg) (ops/dump/modelcfg.h)
 *   strata.n_dense      dense features per example (v->n_dense)
 *   strata.n_slots      slots per example (v->n_slots)
 *   strata.slot_tables  comma-separated table index of each slot
 *   strata.seed         v->seed
 *   strata.minibatch    v->minibatch: a predictor scores in minibatches of
 *                       this size by default, so that its scores equal the
 *                       trainer's eval scores bit for bit
 *
 * Thread-safety: the caller guarantees that nothing changes the view's model
 * or tables during the call (for a trainer: no pull, train or push op runs);
 * one writer per root at a time (ckpt.h).
 */
#ifndef ST_VIEW_EXPORT_H
#define ST_VIEW_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ops/view/view.h"

/* The keys of one table a delta export covers. */
typedef struct st_export_keys {
	const uint64_t *touched;   /* keys whose rows changed since the last export */
	size_t n_touched;
	const uint64_t *deleted;   /* keys whose rows were removed (TTL, ...) */
	size_t n_deleted;
} st_export_keys_t;

/* A delta: tables[k] for each table k of the view (n_tables must equal the
 * view's). Keys may repeat and may be in both lists. */
typedef struct st_export_delta {
	int n_tables;
	const st_export_keys_t *tables;
} st_export_delta_t;

/*
 * Writes export `seq` of view v under root: full when delta is NULL (every row
 * of every table, RAM and SSD tiers, st_table_foreach_all), else a delta.
 *
 * A delta writes, per table, the CURRENT state of every key in touched ∪
 * deleted: a key that has a row now is written as a row (even when listed as
 * deleted: it came back), a key that has none is written as deleted (even
 * when listed as touched: it went away since). So applying the delta to the
 * previous export's rows gives exactly the view's rows, provided the lists
 * hold every key that changed. Rows are looked up in RAM first
 * (st_table_find); keys not there are looked for in one pass over the
 * table's SSD tier (a table without one has no other rows).
 *
 * The dense tensors are written whole in full and delta exports alike (a
 * predictor takes them from the newest export it applies).
 *
 * v describes the model (st_view_check must accept it). step (>= 0) is
 * recorded in the manifest. keep > 0 applies retention after the commit (ckpt.h: the
 * newest `keep` full exports and every export after the oldest of them);
 * 0 keeps everything; retention failures are logged as warnings.
 *
 * Lineage: a full export of a view whose source has no lineage yet creates
 * one (st_view_lineage_new); the manifest records it. Exports already under
 * root numbered from the one this export follows (seq - 1 for a delta, seq
 * for a full export) must be of the same job and lineage, else nothing is
 * written (ST_EINVAL, the other run named in err): two runs writing into
 * one root would interleave their chains.
 *
 * Returns ST_OK once the directory is published; ST_EINVAL for bad
 * arguments (seq > INT64_MAX, step < 0, a view st_view_check refuses, a
 * delta with the wrong number of tables, a model the codec refuses) and for another run's exports (above); ST_ENOSPC, ST_EIO, ST_ENOMEM, or the
 * SSD tier's read error. On failure err holds the reason and nothing was
 * published (older exports are untouched). Nothing of the arguments is kept.
 */
int st_export_write(const st_view_t *v, const char *root, uint64_t seq, int64_t step,
		    const st_export_delta_t *delta, int keep, char *err, size_t errlen);

/*
 * The steps of st_export_write, for an export several processes write
 * (docs/distributed.md, "Exports of multi-process jobs"): one process begins
 * the directory, writes the dense file and commits; every process (that one
 * included) writes its own rows into the same .tmp directory as
 * table-<k>.rank-<r>-of-<P>.rows, joining it with st_ckpt_export_join.
 *
 * st_export_begin: the argument and lineage checks of st_export_write, then
 * st_ckpt_export_begin; *out is the caller's. st_export_write_dense: dense.safetensors.
 * st_export_write_tables: a row file per table of v (full when delta is
 * NULL), named st_export_rows_name(k, rank, world) (world 0: table-<k>.rows).
 * st_export_commit: the manifest (with world's world_size, owners,
 * owner_salt and parts when world is non-NULL), publish, retention.
 * Each returns ST_OK or an error code with err set; on failure the caller
 * destroys the writer, which removes the .tmp (ckpt.h). Same threading
 * rules as st_export_write.
 */
struct st_ckpt_writer;
struct st_manifest;
int st_export_begin(const st_view_t *v, const char *root, uint64_t seq, int delta,
		    struct st_ckpt_writer **out, char *err, size_t errlen);
int st_export_write_dense(const st_view_t *v, struct st_ckpt_writer *w, uint64_t seq,
			  char *err, size_t errlen);
int st_export_write_tables(const st_view_t *v, struct st_ckpt_writer *w, uint64_t seq,
			   const st_export_delta_t *delta, int rank, int world, char *err,
			   size_t errlen);
int st_export_commit(const st_view_t *v, struct st_ckpt_writer *w, uint64_t seq, int64_t step,
		     int keep, const struct st_manifest *world, char *err, size_t errlen);

/* The name of table k's row file: "table-<k>.rows" (world 0), or rank's
 * shard "table-<k>.rank-<rank>-of-<world>.rows" — in exports and in
 * checkpoints alike (ops/train writes and reads checkpoints with it). */
void st_export_rows_name(char *buf, size_t len, int table, int rank, int world);

/* Keys of metadata and the format version (shared with predict.c). */
#define ST_EXPORT_FORMAT "1"
#define ST_EXPORT_DENSE "dense.safetensors"

#endif
