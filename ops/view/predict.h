/*
 * predict.h — scoring with a serving export (export.h): load the newest
 * full export under a root, apply the deltas after it, rebuild the model
 * and its tables from the export's metadata as a model view of the
 * predictor's own (view.h; no trainer), and score batches the way the
 * trainer's eval does (score.h: lookup without creating rows, forward in
 * minibatches), so a key the export has no row for reads as zeros exactly
 * as in training eval, and the scores equal the trainer's bit for bit.
 *
 * Which exports: st_ckpt_list_exports's apply order (the newest full export,
 * then the deltas numbered right after it up to the first gap), every one of
 * them verified against its manifest. Unlike a loader of checkpoints the
 * predictor does not fall back: a damaged export in that chain (full or
 * delta) fails the open, naming the export and the file, because serving an
 * older model than the one on disk without being asked to is worse than not
 * serving. Delete the damaged directory to serve the exports before it.
 *
 * Thread-safety: open/close on any thread; st_predictor_score by one thread
 * at a time per predictor (the caller's thread is its first scoring worker;
 * with opts.threads > 1 it runs that many workers, score.h).
 */
#ifndef ST_VIEW_PREDICT_H
#define ST_VIEW_PREDICT_H

#include <stddef.h>
#include <stdint.h>

#include "lang/job.h"
#include "ops/dump/ckpt.h"
#include "ops/view/view.h"
#include "runtime/batch.h"

typedef struct st_predictor st_predictor_t;

typedef struct st_predictor_opts {
	int threads;     /* scoring workers; <= 0: 1 */
	int minibatch;   /* examples per forward call; <= 0: the export's
			    strata.minibatch (the training minibatch, whose
			    splits make scores equal the trainer's eval bit
			    for bit), or 1024 when absent */
	/* Notes about exports not applied (a gap, a later export that is not a
	 * delta); NULL: logged as warnings. */
	st_ckpt_msg_fn *msg;
	void *arg;
} st_predictor_opts_t;

/* What was loaded. Strings and cfg owned by the predictor. */
typedef struct st_predictor_info {
	const st_model_cfg_t *model;  /* decoded strata.model */
	int n_dense, n_slots, n_tables;
	int minibatch, threads;
	uint64_t seed;
	const char *full;             /* name of the full export, "export-...-full" */
	const char *last;             /* name of the newest export applied */
	int64_t seq, step;            /* of the newest export applied */
	size_t n_exports;             /* full + deltas applied */
	uint64_t rows;                /* rows loaded, all tables */
} st_predictor_info_t;

/*
 * Opens the exports under root. Returns ST_OK and *out (the caller closes
 * it), or, with "what: why" in err:
 *   ST_ENOENT   root is not a directory, or holds no complete full export;
 *   ST_ECORRUPT an export of the chain fails its manifest's checksums (or a
 *               file is missing), or a row file is damaged;
 *   ST_EFORMAT  metadata strata does not know or that disagrees between the
 *               exports of the chain, a tensor or table of the wrong shape;
 *   ST_EIO, ST_ENOMEM.
 * opts may be NULL (defaults). Nothing is kept from the arguments.
 */
int st_predictor_open(st_predictor_t **out, const char *root, const st_predictor_opts_t *opts,
		      char *err, size_t errlen);

/*
 * Scores b: out[i] = the predicted probability of example i (i < b->n).
 * b must have the model's n_dense and at most its n_slots slots (else
 * ST_EINVAL, nothing done). Sets b->eval = 1 and fills the batch's derived
 * columns (uniq, key_idx, rows, aux, pred); b stays the caller's. out may be
 * NULL (the scores are in b->pred then). ST_OK, ST_EINVAL, ST_ENOMEM.
 */
int st_predictor_score(st_predictor_t *p, st_batch_t *b, float *out);

/* What was loaded; valid until close. */
void st_predictor_info(const st_predictor_t *p, st_predictor_info_t *info);

/* The loaded model and tables as a view (no lineage), owned by p and valid
 * until close. Read only: an export of it (export.h) writes the model the
 * predictor serves. */
const st_view_t *st_predictor_view(const st_predictor_t *p);

/* Frees everything (NULL-safe). */
void st_predictor_close(st_predictor_t *p);

#endif
