/*
 * trainer.h — the CPU training core as pull / train / push / dump stage
 * ops: a model preset (ops/nn/model.h), its embedding tables, the sparse and
 * dense optimizers, N worker threads and a sync policy (ops/sync/sync.h).
 *
 * One st_trainer_t holds:
 *  - the model and its dense parameters;
 *  - one embedding table per distinct row width (st_model_row_dim), each row
 *    emb[dim] (+ wide weight) followed by its sparse-optimizer state;
 *  - the policy named by job->sync.name and N = job->train_stage.threads
 *    workers;
 *  - progressive ("predict then train") and eval metrics.
 *
 * Stage ops (state = the st_trainer_t*):
 *   st_trainer_pull_ops  — any number of threads. Dedups the batch's keys
 *                          into b->uniq / b->key_idx / b->n_uniq, resolves
 *                          each unique key to its row through the row
 *                          source (ops/rowsrc/rowsrc.h: this process's
 *                          tables, or a multi-process job's shards; b->rows
 *                          is a float *[n_uniq], b->aux the trainer's: row
 *                          widths and tables). Train batches create missing
 *                          rows; eval batches do not (NULL rows read as
 *                          zeros).
 *   st_trainer_train_ops — exactly ONE graph thread ("st-train-0"), which is
 *                          worker 0; it starts workers 1..N-1 ("st-train-<n>")
 *                          at thread_start (or at its first batch when the
 *                          ops are called directly) and joins them at
 *                          thread_stop / st_trainer_destroy. Per train batch
 *                          the workers split it into minibatches of
 *                          job->minibatch as the policy's schedule says; each
 *                          minibatch is predicted (b->pred, progressive
 *                          metrics) with the parameters before its own
 *                          update, then its gradients go to the policy, which
 *                          applies dense AND sparse updates inside the step.
 *                          Eval batches are only scored and kept for
 *                          st_trainer_eval_result.
 *   st_trainer_push_ops  — gives the batch's rows back to the row source
 *                          (unpin), has it keep its books (TTL sweeps,
 *                          memory warnings, "rows" and cache metrics) and
 *                          passes the batch on (the sparse update already
 *                          happened in train: see ops/train/step.c and
 *                          docs/design-notes.md "Where sparse updates are
 *                          applied").
 *   st_trainer_dump_ops  — checkpoints after a marked batch, frees the
 *                          batch.
 * The files of ops/train and what each does: trainer_internal.h.
 * Metrics: "examples", "loss", "auc" (progressive; refreshed every 65536
 * examples and at the end of the stage), "eval_examples", "rows", the
 * policy's "sync_*" values (sync.h, summed over the policies a run used),
 * "sync_switches" (st.sync.auto) and "worker_eps_<w>" (worker w's examples
 * per second of its own compute + straggler time).
 *
 * Stragglers (job->stragglers): after worker w computes a minibatch in t
 * seconds it waits (slowdown - 1) * t before handing the gradients to the
 * policy — a real, interruptible delay (st_trainer_cancel).
 *
 * Loss scale: the neural presets train on the mean loss of each step's
 * global minibatch (PyTorch's BCEWithLogitsLoss(reduction="mean")); the lr
 * preset on the SUM, as classic per-coordinate AdaGrad/FTRL logistic
 * regression does (and the skeleton's lr did), so its learning rates keep
 * their meaning.
 *
 * Optimizers: model.sparse_opt / model.dense_opt when their name is set,
 * else the legacy fields (optimizer, lr, lr_dense, l2, init_accum).
 */
#ifndef ST_TRAINER_H
#define ST_TRAINER_H

#include <stdint.h>

#include "lang/job.h"
#include "ops/nn/model.h"
#include "ops/sync/sync.h"
#include "runtime/graph.h"
#include "runtime/metrics.h"
#include "runtime/store/table.h"

typedef struct st_trainer st_trainer_t;

/* Builds everything from the job (model, minibatch, seed, sync, train
 * stage threads, train source shape). metrics may be NULL; it must outlive
 * the trainer. Returns ST_OK; ST_EJOB (logged) for settings it cannot run,
 * including a sync policy that is not implemented (st_sync_find); ST_ENOMEM.
 * Caller destroys. The job is not kept. */
int st_trainer_create(st_trainer_t **out, const st_job_t *job, st_metrics_t *metrics);

/* Stops the workers and frees everything (NULL-safe). No stage running. */
void st_trainer_destroy(st_trainer_t *tr);

extern const st_stage_ops_t st_trainer_pull_ops, st_trainer_train_ops,
	st_trainer_push_ops, st_trainer_dump_ops;

/* Forgets the eval examples scored so far (no train stage running). */
void st_trainer_reset_eval(st_trainer_t *tr);

/* Exact AUC, mean logloss, calibration and count over the eval examples
 * since the last reset. ST_OK or ST_ENOMEM. auc NaN if one class is absent.
 * No train stage running. */
int st_trainer_eval_result(st_trainer_t *tr, double *auc, double *logloss,
			   double *calib, uint64_t *n);
/* The same for head h (0 <= h < st_model_nheads; head 0 is
 * st_trainer_eval_result): its scores against its own label. ST_EINVAL for
 * another h. */
int st_trainer_eval_result_head(st_trainer_t *tr, int h, double *auc, double *logloss,
				double *calib, uint64_t *n);

/* How many of the eval scores since the last reset are not finite (NaN or
 * infinite: the model diverged); st_trainer_eval_result ranks the others
 * only. No train stage running. */
uint64_t st_trainer_eval_nonfinite(const st_trainer_t *tr);

/* Progressive train metrics so far. Thread-safe (slightly stale while
 * training). Any out pointer may be NULL. */
void st_trainer_progress(const st_trainer_t *tr, double *auc, double *logloss,
			 uint64_t *n);
/* The same for head h of the model (0 <= h < st_model_nheads; head 0 is
 * st_trainer_progress). Metrics of heads after the first are published as
 * "auc_<label>" and "loss_<label>". */
void st_trainer_progress_head(const st_trainer_t *tr, int h, double *auc, double *logloss,
			      uint64_t *n);

/* The model (dense params via st_model_params; tests may overwrite them
 * while no stage runs). Owned by the trainer. */
st_model_t *st_trainer_model(st_trainer_t *tr);

/* The table holding slot `slot`'s rows, owned by the trainer. */
st_table_t *st_trainer_table_for_slot(st_trainer_t *tr, int slot);

/* Number of embedding tables, and table k (0 <= k < ntables; NULL for
 * another k), owned by the trainer. Table k is the k-th distinct table in
 * slot order, i.e. the one of slot s is st_trainer_table(tr, k) for the
 * smallest k whose table equals st_trainer_table_for_slot(tr, s). Exports
 * number their table files this way (ops/dump/export.h). */
int st_trainer_ntables(const st_trainer_t *tr);

/* Writes a serving export <root>/export-<seq>-{full,delta} (ops/dump/export.h)
 * of the trainer's current state: full the first time, then, with delta,
 * only the rows pulled for training and the rows evicted since the previous
 * export (tracking starts with the first export). No training may run
 * during the call. ST_OK, or an error with the message in err (then the
 * changes stay for the next delta). ops/train/store.c. */
int st_trainer_export(st_trainer_t *tr, const st_job_t *job, const char *root,
		      uint64_t seq, int delta, int keep, char *err, size_t errlen);
st_table_t *st_trainer_table(st_trainer_t *tr, int k);

/* The run lineage: an id (16 hex digits) the first full export of a run
 * creates (st_export_write), which every later export and checkpoint of the
 * trainer carries and --resume restores, so that an export chain can tell a
 * delta of its own run from one of another run written into the same
 * directory. "" until then (owned by the trainer). set copies id (at most
 * ST_TRAINER_LINEAGE_MAX - 1 characters; longer ids are cut), new makes a
 * fresh random one. No training may run during set/new. ops/train/store.c. */
#define ST_TRAINER_LINEAGE_MAX 64
const char *st_trainer_lineage(const st_trainer_t *tr);
void st_trainer_set_lineage(st_trainer_t *tr, const char *id);
void st_trainer_new_lineage(st_trainer_t *tr);

/* Creates (if absent) the row of key in slot's table and sets its first
 * st_model_row_dim(model, slot) floats to row[]; the optimizer state is
 * left as initialized. ST_OK, ST_EINVAL (bad slot), ST_ENOMEM. No stage
 * running. */
int st_trainer_set_row(st_trainer_t *tr, int slot, uint64_t key, const float *row);

/* Sync statistics so far. */
void st_trainer_sync_stats(const st_trainer_t *tr, st_sync_stats_t *out);

/* Switches to the policy cfg describes ("auto" included) between batches:
 * creates the new policy on the same shared parameters, embedding rows and
 * dense optimizer state (sync.h env.dense_state), then destroys the old
 * one, so training continues from the same model and optimizer state. cfg
 * is not kept. ST_OK; ST_EJOB (logged) for a policy st_sync_find does not
 * know or a bad parameter, ST_ENOMEM — the old policy stays then. No stage
 * running (or from the train thread between batches). */
int st_trainer_set_policy(st_trainer_t *tr, const st_sync_cfg_t *cfg);

/* The first policy name in cfg (auto's sub-policies included) that
 * st_sync_find does not know, or NULL when all are implemented. */
const char *st_trainer_policy_missing(const st_sync_cfg_t *cfg);

/* The name of the policy running now (auto: the active sub-policy). */
const char *st_trainer_policy_name(const st_trainer_t *tr);

/* Policy switches st.sync.auto made so far. */
uint64_t st_trainer_switches(const st_trainer_t *tr);

/* Test hook for st.sync.auto: fn(ud, worker, step, measured) returns the
 * step time recorded for worker's minibatch number `step` instead of the
 * measured seconds, so tests drive the switch without real timing. Called
 * on the worker threads. Set before training; NULL restores measuring. */
typedef double (*st_trainer_time_fn)(void *ud, int worker, uint64_t step, double measured);
void st_trainer_set_time_fn(st_trainer_t *tr, st_trainer_time_fn fn, void *ud);

/* Worker w's minibatches and examples computed so far and the seconds it
 * spent computing and straggling. Any out pointer may be NULL. Slightly
 * stale while training. */
void st_trainer_worker_stats(const st_trainer_t *tr, int w, uint64_t *minibatches,
			     uint64_t *examples, double *busy_s);

/* Wakes and disables straggler delays (st.stragglers) so a stopping job
 * does not wait them out. Thread-safe; for signal/cancel paths. */
void st_trainer_cancel(st_trainer_t *tr);

/* Number of workers. */
int st_trainer_workers(const st_trainer_t *tr);

/* Pins worker i (1 .. workers-1; worker 0 is the graph's train thread,
 * pinned by the graph) to cpus[i] when i < n and cpus[i] >= 0. Call before
 * the first batch. Not thread-safe. */
void st_trainer_pin_workers(st_trainer_t *tr, const int *cpus, int n);

/* ---- multi-process jobs (ops/train/dist_glue.c, docs/distributed.md) ---- */
struct st_net;
struct st_dist_stats;
/* Joins the job's other ranks: the sharded store over net and the
 * multi-process twin of the job's policy. Before any stage runs. ST_OK,
 * ST_EJOB (a policy that does not run across processes), ST_ENOMEM. */
int st_trainer_attach_dist(st_trainer_t *tr, struct st_net *net, const st_job_t *job);
/* dist.prefetch when the job does not say: the step reads (async, shadow)
 * each worker has in flight ahead of the minibatch it trains
 * (docs/distributed.md, "Prefetched step reads"). */
#define ST_TRAINER_PREFETCH_DEFAULT 2
/* After training: st_dist_finish (*lost = ranks that died), then the
 * final dense parameters from rank 0 for asynchronous policies. */
int st_trainer_dist_finish(st_trainer_t *tr, int *lost);
/* Whether st.sync.auto cfg can run across processes (its sub-policies:
 * allreduce or hybrid, and async, gba, bsp or hop_bs); logs why not. */
int st_trainer_auto_dist_ok(const st_sync_cfg_t *cfg);
/* Before each phase of a multi-process job (a collective): every rank's
 * updates are applied and every rank takes rank 0's dense parameters and
 * optimizer state (st_dist_sync_begin), so the phase's policy starts from
 * one model whatever the last one left; st_trainer_set_policy switches
 * without a handover of its own (only st.sync.auto's switches, in the
 * middle of a pass, make one). */
int st_trainer_dist_phase(st_trainer_t *tr);
/* Before each pass over data (every rank, in the same order): a training
 * pass ends with the drain of the synchronous steps (and auto's votes)
 * that the ranks out of data take part in; an eval pass has none. */
void st_trainer_dist_pass(st_trainer_t *tr, int eval);
/* At the end of the job: the second round of st_dist_finish. */
int st_trainer_dist_leave(st_trainer_t *tr, int *lost);
/* Rank 0 collects every rank's eval predictions (after an eval pass);
 * st_trainer_eval_result then covers them all. */
int st_trainer_dist_eval_gather(st_trainer_t *tr);
void st_trainer_dist_stats(const st_trainer_t *tr, struct st_dist_stats *out);
/* Training steps this process took in the multi-process job (batches with
 * examples, every worker's); 0 without one. Read after the pass. */
uint64_t st_trainer_dist_steps(const st_trainer_t *tr);
/* An order-independent digest of the rows in this process's tables and,
 * with with_dense, the dense parameters; *rows = the rows counted. Equal
 * digests mean equal models (floats and optimizer state) for testing. */
uint64_t st_trainer_digest(st_trainer_t *tr, int with_dense, uint64_t *rows);

#endif
