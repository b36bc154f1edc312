/*
 * view.h — a read-only view of a model: its dense parameters (an ops/nn
 * model: tensors, shapes, forward) and its embedding tables (runtime/store
 * tables, RAM and SSD tiers), with what it takes to describe them (slot ->
 * table map, n_dense / n_slots, seed, minibatch, model configuration).
 *
 * Export (export.h), predict (predict.h) and eval work on a view; none of
 * them constructs a trainer. A view owns nothing: its source fills it
 * (a trainer through st_trainer_view, ops/train/view.h; a predictor from the
 * exports it loaded) and keeps everything it points to alive and unchanged
 * while the view is used. Nothing done through a view writes the model or
 * the tables, except st_view_lineage_new (below), which asks the source to
 * make its run lineage.
 *
 * Tables are numbered as exports number their files: table k is the k-th
 * distinct table in slot order (slot_table[s] is the table of slot s, and
 * the first slot of table k comes before the first slot of table k + 1).
 *
 * This file also holds the shared lookup of a scoring pass (st_view_lookup):
 * a batch's keys deduplicated and resolved to rows without creating any, a
 * key with no row reading as zeros — the same rows, in the same order, as
 * the trainer's pull of an eval batch.
 */
#ifndef ST_VIEW_H
#define ST_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "lang/job.h"
#include "ops/nn/model.h"
#include "runtime/batch.h"
#include "runtime/store/table.h"

/* Distinct tables a view may have (one per distinct row width). */
#define ST_VIEW_MAX_TABLES 16
/* Bytes of a lineage id with its NUL (the trainer's ST_TRAINER_LINEAGE_MAX). */
#define ST_VIEW_LINEAGE_MAX 64

typedef struct st_view {
	st_model_t *model;              /* dense parameters and forward; read only */
	const st_model_cfg_t *cfg;      /* the model's configuration (cfg->type set) */
	int n_dense, n_slots;           /* example shape */
	uint64_t seed;                  /* the job's seed */
	int minibatch;                  /* the training minibatch (>= 1) */
	int n_tables;                   /* 1 .. ST_VIEW_MAX_TABLES */
	st_table_t *tables[ST_VIEW_MAX_TABLES];
	const int *slot_table;          /* [n_slots]: table index of each slot */
	const char *name;               /* the job's name; NULL: "strata" */
	/* The run lineage (ST_VIEW_LINEAGE_MAX bytes, "" when the run has none
	 * yet) and the source's hook that makes one in that buffer; both NULL
	 * for a source without lineage (a predictor). */
	const char *lineage;
	void (*lineage_new)(void *src);
	void *src;
} st_view_t;

/*
 * Checks that v is complete and consistent: a model, a configuration with
 * a type, n_slots >= 1, n_dense >= 0, minibatch >= 1, 1..ST_VIEW_MAX_TABLES
 * tables, every slot in a table, tables numbered in slot order, and every
 * table's slots of one row width. ST_OK or ST_EINVAL with the reason in err
 * (errlen may be 0). Pure.
 */
int st_view_check(const st_view_t *v, char *err, size_t errlen);

/* The table of slot s (0 <= s < n_slots), or NULL. */
st_table_t *st_view_table_for_slot(const st_view_t *v, int s);

/* The row width (embedding floats, wide weight included) of table k, from
 * its first slot; 0 for a k out of range. */
int st_view_row_dim(const st_view_t *v, int k);

/* Makes the source's run lineage when it has none and can make one
 * (v->lineage_new), and returns it: "" when the source has no lineage. */
const char *st_view_lineage_new(const st_view_t *v);

/* ---- lookup -------------------------------------------------------------- */

/* One scoring thread's scratch for st_view_lookup (zeroed before first use,
 * freed by st_view_lookup_fini). */
typedef struct st_view_lookup {
	st_dedup_t dd;
	uint64_t *tkeys;
	uint32_t *tpos;
	float **trows;
	uint32_t tcap;
} st_view_lookup_t;

/*
 * Resolves batch b's keys against v's tables for scoring: fills b->uniq
 * (unique keys, first-occurrence order), b->key_idx, b->n_uniq, b->rows
 * (b->rows[u] = the row of unique key u, NULL when the table has none:
 * it reads as zeros) and b->aux (a uint16_t[n_uniq] of row widths). No row
 * is created and no row metadata changes. Rows of a table with an SSD tier
 * are pinned (runtime/store/table.h): st_view_release unpins them once
 * scored. b must have at most v->n_slots slots (else ST_EINVAL). ST_OK,
 * ST_EINVAL, ST_ENOMEM, or the SSD tier's read error. The batch's derived
 * columns are (re)allocated and stay the batch's. Thread-safe for distinct
 * scratches and batches.
 */
int st_view_lookup(const st_view_t *v, st_view_lookup_t *s, st_batch_t *b);

/* Unpins the rows st_view_lookup pinned for b (no-op without SSD tiers). */
void st_view_release(const st_view_t *v, const st_batch_t *b);

void st_view_lookup_fini(st_view_lookup_t *s);

#endif
