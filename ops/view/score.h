/*
 * score.h — scoring batches with a model view (view.h): the shared lookup
 * (keys deduplicated, rows resolved without creating any, absent keys read
 * as zeros) and the model's forward pass in minibatches, spread over a few
 * workers.
 *
 * Bit for bit: a minibatch's scores depend only on its examples, its rows
 * and the dense parameters, never on which worker computed it, so a scorer
 * with the trainer's minibatch gives the trainer's eval scores exactly
 * (ops/train runs eval batches the same way), with any number of workers.
 *
 * Threads: worker 0 is the caller of st_scorer_run; workers 1..threads-1
 * are threads "st-score-<n>" started by create and stopped by destroy. One
 * caller at a time per scorer.
 */
#ifndef ST_VIEW_SCORE_H
#define ST_VIEW_SCORE_H

#include "ops/view/view.h"
#include "runtime/batch.h"

typedef struct st_scorer st_scorer_t;

/* A scorer of view v (which must outlive it, and whose model and tables
 * must not change while a batch is scored) with `threads` workers
 * (1..ST_MAX_STAGE_THREADS) and minibatches of `minibatch` examples (>= 1).
 * ST_OK and *out (the caller destroys it); ST_EINVAL for a bad count;
 * ST_ENOMEM; the error of a thread that could not be started. */
int st_scorer_create(st_scorer_t **out, const st_view_t *v, int threads, int minibatch);

/* Scores b: b->pred[i] = the predicted probability of example i (i < b->n).
 * Fills the batch's derived columns (st_view_lookup); b stays the caller's.
 * ST_OK; ST_EINVAL (b has more slots than the model, or another n_dense);
 * ST_ENOMEM or a table's read error, with nothing scored. */
int st_scorer_run(st_scorer_t *s, st_batch_t *b);

/* Stops the workers and frees the scorer (NULL-safe). Not during a run. */
void st_scorer_destroy(st_scorer_t *s);

#endif
