/*
 * batch.h — the columnar batch that flows through the pipeline.
 *
 * A batch holds up to `cap` examples. Readers append rows; later stages add
 * derived columns (unique keys, predictions). Layout:
 *
 *   labels   [n * n_labels]      float, 0 or 1 (or any real target), row-major:
 *                                example i's label l at labels[i * n_labels + l]
 *   dense    [n * n_dense]       float, row-major; a missing value is 0
 *   row_off  [n + 1]             CSR offsets of each example's sparse keys
 *   keys     [row_off[n]]        64-bit keys (xxh3 of slot and raw value)
 *   key_slot [row_off[n]]        slot (field) index of each key
 *   key_val  [row_off[n]]        value of each key (1 for categorical)
 *
 * Design note (see docs/design-notes.md): DESIGN.md says "sparse keys per slot
 * in CSR form". Readers append whole rows, so strata keeps one example-major
 * CSR with the slot of every key beside it. Per-slot pooling iterates an
 * example's keys and adds each into its slot's accumulator, which gives the
 * same result with one pass and no second transpose. A multi-valued (list)
 * field's keys are consecutive keys of its slot in the row, in the field's
 * order (no padding to a maximum length); its pooling is the model's per
 * slot (ops/nn/nn.h, slot_mean).
 *
 * Ownership: st_batch_create allocates, st_batch_destroy frees. A batch pushed
 * into a queue belongs to the consumer. Not thread-safe: one stage thread owns
 * a batch at a time.
 */
#ifndef ST_BATCH_H
#define ST_BATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_batch {
	uint64_t seq;      /* 0-based batch number assigned by the read stage */
	/* Data position after this batch (the read stage's; checkpoints record
	 * it): file cursor index (over paths x epochs) and records read from
	 * that file up to the end of this batch. A batch never spans files. */
	uint64_t src_file, src_rec;
	int ckpt;          /* the trainer checkpoints after this batch */
	uint32_t n, cap;   /* examples held / capacity */
	uint32_t n_dense;  /* dense features per example */
	uint32_t n_slots;  /* categorical slots (fields) */
	/* Labels per example (1 unless st_batch_set_labels changed it; a
	 * multi-task job's click, conversion, ...: docs/models.md, "Several
	 * labels"). With 1 the layout is that of a one-label batch. */
	uint32_t n_labels;
	float *labels;
	float *dense;
	uint32_t *row_off;
	uint64_t *keys;
	uint16_t *key_slot;
	float *key_val;
	uint32_t key_cap;  /* capacity of keys/key_slot/key_val */

	/* pull-sparse: unique keys of the batch and, per key occurrence, its index
	 * into uniq (PERSIA's unique-ID + index layout). */
	uint64_t *uniq;
	uint32_t *key_idx;
	uint32_t n_uniq;
	void *rows;        /* store-specific handles for uniq[], set by pull */

	/* train: prediction for each example (probability); a model of H heads
	 * (H <= n_labels) writes pred[i * H + h]. Room for cap * pred_per. */
	float *pred;
	uint32_t pred_per; /* predictions per example b->pred has room for */

	/* Opaque per-stage scratch that later stages may attach; freed with
	 * free() by st_batch_destroy when non-NULL. */
	void *aux;
	/* Multi-process jobs: the batch's private copies of its rows (pulled
	 * from their owner ranks, ops/dist); freed with free() like aux. */
	void *rowbuf;
	int eval;          /* nonzero: examples are scored, not trained on */
} st_batch_t;

/* Allocates a batch for cap examples with n_dense dense features and room for
 * key_cap sparse keys (grown on demand by st_batch_reserve_keys). Returns
 * ST_OK and *out, or ST_ENOMEM. The caller owns the batch. */
int st_batch_create(st_batch_t **out, uint32_t cap, uint32_t n_dense,
		    uint32_t n_slots, uint32_t key_cap);

/* Most labels a batch (a source, a model's heads) holds per example. */
#define ST_BATCH_MAX_LABELS 16

/* Makes b hold n_labels labels (and room for that many predictions) per
 * example; an empty batch only (b->n == 0). Reallocates labels and pred
 * (their old contents are dropped). ST_OK, ST_EINVAL (n_labels outside
 * 1..ST_BATCH_MAX_LABELS, or b not empty) or ST_ENOMEM (b unchanged). */
int st_batch_set_labels(st_batch_t *b, uint32_t n_labels);

/* Makes room for `per_example` predictions per example in b->pred (a
 * model of that many heads scoring data of fewer labels: predict). Grows
 * only, keeping nothing of the old predictions. ST_OK or ST_ENOMEM (b
 * unchanged). */
int st_batch_reserve_pred(st_batch_t *b, uint32_t per_example);

/* Frees the batch and every column (NULL is a no-op). */
void st_batch_destroy(st_batch_t *b);

/* Empties the batch for reuse (keeps its memory). */
void st_batch_clear(st_batch_t *b);

/* Ensures room for `extra` more keys after row_off[n]. ST_OK or ST_ENOMEM. */
int st_batch_reserve_keys(st_batch_t *b, uint32_t extra);

/* One thread's scratch for st_batch_dedup: an open-addressing set, kept
 * between batches so it is allocated once. Zero it before first use; free
 * with st_dedup_fini. */
typedef struct st_dedup {
	uint64_t *hkeys;
	uint32_t *hidx;
	uint32_t hcap;
} st_dedup_t;

/*
 * The batch's unique keys (PERSIA's unique-ID layout,
 * persia-hybrid-training.md Section 4.2.3): fills b->uniq (first-occurrence
 * order), b->key_idx (occurrence k -> its unique index) and b->n_uniq, and
 * *slot_out (malloc'd, the caller's) with the slot of each unique key's
 * first occurrence. *slot_out holds nk (key occurrences) uint16_t's and
 * then `extra` bytes per occurrence (callers lay out a second array
 * there). ST_OK or
 * ST_ENOMEM (b's derived columns may then be half done; the batch is still
 * freed normally). One thread per scratch.
 */
int st_batch_dedup(st_dedup_t *t, st_batch_t *b, size_t extra, uint16_t **slot_out);
void st_dedup_fini(st_dedup_t *t);

/* Total key occurrences in the batch. */
static inline uint32_t st_batch_nkeys(const st_batch_t *b)
{
	return b->row_off[b->n];
}

#endif
