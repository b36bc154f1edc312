/*
 * lr.h — logistic regression over hashed sparse keys plus dense features,
 * as the pull / train / push / dump stage ops of a pipeline.
 *
 * One st_lr_t holds the model: a host table (runtime/store/table.h) with one
 * weight and one AdaGrad accumulator per key, dense weights (one per dense
 * feature, transformed by log1p(max(x, 0)) or used as is, per
 * job->model.dense_transform) plus a bias, each with its own accumulator, and
 * the progressive ("predict then train") metrics.
 *
 * Stage ops (state = the st_lr_t*; any number of threads per stage, each with
 * its own scratch selected by ctx->thread_idx):
 *   st_lr_pull_ops  — dedups the batch's keys into b->uniq / b->key_idx /
 *                     b->n_uniq and resolves each unique key to its row:
 *                     b->rows is a float *[n_uniq]. Train batches create
 *                     missing rows; eval batches (b->eval) do not (NULL rows
 *                     count as weight 0).
 *   st_lr_train_ops — per minibatch of job->minibatch examples: predict all
 *                     (b->pred), add to the progressive AUC/logloss, then one
 *                     AdaGrad step (sparse gradients summed per unique key).
 *                     Threads update shared weights Hogwild (sync "async"); with
 *                     one train thread a run is bit-for-bit deterministic.
 *                     Eval batches are only scored, and kept for
 *                     st_lr_eval_result.
 *   st_lr_push_ops  — publishes "rows" (table size) and passes the batch on.
 *   st_lr_dump_ops  — frees the batch (end of the chain for now).
 * Metrics: "examples" (per batch), "loss" and "auc" (progressive; refreshed
 * every 65536 examples per train thread and when the train stage finishes),
 * "eval_examples", "rows".
 */
#ifndef ST_LR_H
#define ST_LR_H

#include <stdint.h>

#include "lang/job.h"
#include "runtime/graph.h"
#include "runtime/metrics.h"
#include "runtime/store/table.h"

typedef struct st_lr st_lr_t;

/* Builds the model from job->model (lr, lr_dense, l2, init_accum, optimizer
 * "adagrad" or "sgd", dense_transform), job->minibatch, job->seed and the
 * train source's n_dense. metrics may be NULL (no metrics published); it must
 * outlive the model. Returns ST_OK and *out, ST_EJOB (logged) for settings
 * the model cannot honour, ST_ENOMEM. Caller destroys. The job is not kept. */
int st_lr_create(st_lr_t **out, const st_job_t *job, st_metrics_t *metrics);

/* Frees the model and all scratch (NULL-safe). No stage may be running. */
void st_lr_destroy(st_lr_t *m);

extern const st_stage_ops_t st_lr_pull_ops, st_lr_train_ops, st_lr_push_ops,
	st_lr_dump_ops;

/* Forgets the eval examples scored so far (call before an eval pass, with no
 * train stage running). */
void st_lr_reset_eval(st_lr_t *m);

/* Exact AUC, mean logloss, calibration and count over the eval examples
 * scored since the last reset. ST_OK or ST_ENOMEM. Call with no train stage
 * running. auc is NaN if one class is absent. */
int st_lr_eval_result(st_lr_t *m, double *auc, double *logloss, double *calib,
		      uint64_t *n);

/* Progressive train metrics so far (streaming AUC). Thread-safe: may run
 * while training (values slightly stale). Any out pointer may be NULL. */
void st_lr_progress(const st_lr_t *m, double *auc, double *logloss, uint64_t *n);

/* The model's table (for inspection and tests); owned by the model. */
st_table_t *st_lr_table(st_lr_t *m);

/* Prediction of the model for example i of b after pull (read-only). */
float st_lr_predict(const st_lr_t *m, const st_batch_t *b, uint32_t i);

#endif
