/*
 * checkpoint.h — checkpoints of a trainer and resuming from them
 * (ops/train/checkpoint.c; the file formats are ops/dump/, documented in
 * docs/formats.md).
 */
#ifndef ST_TRAIN_CHECKPOINT_H
#define ST_TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "lang/job.h"
#include "ops/train/trainer.h"
#include "runtime/batch.h"

typedef struct st_trainer_ckpt_cfg {
	const char *dir;        /* checkpoint root (ckpt-<step>/ inside) */
	int keep;               /* newest complete checkpoints kept; 0 = all */
	const char *job_name;
	const char *job_hash;   /* st_trainer_job_hash */
	const char *model;      /* st_trainer_model_desc */
	const char *const *paths; /* the training files, by cursor % n_paths */
	int n_paths;
	uint64_t seed;
	int batch_size;         /* stages.read.batch_size (0: not recorded) */
} st_trainer_ckpt_cfg_t;

/* The model description compared on resume (malloc'ed, the caller frees)
 * and its hash with the seed (16 hex digits). */
char *st_trainer_model_desc(const st_job_t *job);
void st_trainer_job_hash(const st_job_t *job, char out[17]);

/* Checkpoints every `every_batches` train batches and/or every `every_secs`
 * seconds (0 = not by that measure), written by the dump stage with cfg
 * (kept by pointer: it must outlive the run). cfg NULL turns them off.
 * Before the graph runs. */
void st_trainer_set_checkpoint(st_trainer_t *tr, const st_trainer_ckpt_cfg_t *cfg,
			       uint64_t every_batches, double every_secs);

/* A copy of the trainer's state after `last` (NULL: after the last batch
 * trained, with the data position set by st_trainer_set_position). No
 * training may run during the call. ST_OK and *out (the caller destroys or
 * releases it), ST_ENOMEM, or the store's read error. The copy reuses the
 * memory of a snapshot released before, when the trainer kept one. */
typedef struct st_trainer_snap st_trainer_snap_t;
int st_trainer_snapshot(st_trainer_t *tr, const st_batch_t *last, st_trainer_snap_t **out);
int64_t st_trainer_snap_step(const st_trainer_snap_t *s);

/* Gives a snapshot that is no longer needed back to tr (ownership moves):
 * tr keeps its memory for the next st_trainer_snapshot, so that copy writes
 * into pages already mapped instead of faulting in a fresh copy of every
 * row. Frees it instead when the job bounds memory (storage.mem) or has an
 * SSD tier, when tr already keeps one, or after st_trainer_cancel; the kept
 * one is freed by st_trainer_cancel / st_trainer_destroy. Thread-safe
 * against st_trainer_cancel. NULL-safe. */
void st_trainer_snap_release(st_trainer_t *tr, st_trainer_snap_t *s);

/* 1 if the newest checkpoint written or loaded holds the current state (no
 * batch trained since), so another one would be a copy. */
int st_trainer_checkpoint_current(const st_trainer_t *tr);
void st_trainer_snap_destroy(st_trainer_snap_t *s);

/* Writes a snapshot as checkpoint <cfg->dir>/ckpt-<step> (temporary name,
 * fsync, rename, retention). ST_OK, or ST_ENOSPC / ST_EIO / ST_EINVAL with
 * the message in err; then older checkpoints are untouched. */
int st_trainer_snap_write(st_trainer_t *tr, const st_trainer_snap_t *s,
			  const st_trainer_ckpt_cfg_t *cfg, char *err, size_t errlen);

/* The checkpoint at the end of training of a multi-process job (policies
 * with the dist-checkpoint capability): every rank calls it, with no stage
 * running, after st_trainer_dist_finish. Each rank writes its shard, rank 0
 * the dense state and the manifest, published only when every rank's part
 * is complete (ops/train/dist_ckpt.c). *step: the checkpoint's. ST_OK on
 * every rank when it was published; else ST_EIO (a rank failed: err says
 * so, the rank that failed logged why) or a network error. */
int st_trainer_dist_checkpoint(st_trainer_t *tr, int64_t *step, char *err, size_t errlen);

/* A serving export of a multi-process job, full or (delta, after a first
 * export) delta as st_trainer_export (every rank calls it, between
 * passes, with the same root and keep): each rank writes its shard of the
 * rows, rank 0 the dense file and the manifest with the world, published
 * once every rank wrote (ops/train/dist_ckpt.c). *seq: rank 0's number wins
 * (the other ranks learn it). ST_OK on every rank once published; else
 * ST_EIO with the reason in err, or a network error. */
int st_trainer_dist_export(st_trainer_t *tr, const st_job_t *job, const char *root,
			   uint64_t *seq, int delta, int keep, char *err, size_t errlen);

/* The data position of the end of training (for the final checkpoint). */
void st_trainer_set_position(st_trainer_t *tr, uint64_t file, uint64_t records);

/* Passes: a job trains in one pass, or one per phase. Checkpoints record
 * the phase, the batches and examples of it done, and whether it ended, so
 * that resume skips the finished phases and continues the current one.
 * begin_pass: a pass starts (phase -1 without phases) with batches_before /
 * examples_before of it already done (resume); end_pass: it ended. */
void st_trainer_begin_pass(st_trainer_t *tr, int64_t phase, uint64_t batches_before,
			   uint64_t examples_before);
void st_trainer_end_pass(st_trainer_t *tr);

typedef struct st_trainer_resume {
	int64_t phase;          /* -1: no phases */
	uint64_t pass_batches, pass_examples; /* done in that phase (pass) */
	int pass_done;          /* the phase had ended */
	uint64_t step;          /* batches done */
	uint64_t file, records; /* data position: file cursor, records into it */
	uint64_t examples;
	char dir[4200];         /* the checkpoint used */
	int none_verifies;      /* set with ST_ECORRUPT: there are checkpoints,
				 * every one damaged */
} st_trainer_resume_t;

/* Loads the newest complete checkpoint under cfg->dir into a fresh trainer
 * (parameters, optimizer state, rows of every table, counters); older ones
 * are tried when the newest fails its checksums (each said on stderr).
 * Row files of tables in RAM are hashed while they load: one found damaged
 * then leaves the tables emptied and the trainer otherwise untouched
 * before the next older checkpoint is tried (docs/operations.md, "Restore
 * in one pass").
 * The checkpoint may come from any number of processes. In a
 * multi-process job (after st_trainer_attach_dist) every rank calls it (it
 * is a collective): rank 0 chooses, every rank loads the rows it owns
 * under the job's world from every shard, and all return the same status
 * once every rank has loaded its part; out->pass_batches is in batches of
 * cfg->batch_size.
 * ST_OK and *out. ST_ENOENT when cfg->dir holds no checkpoint at all.
 * ST_ECORRUPT with out->none_verifies = 1 when it holds checkpoints and
 * every one fails verification (or has no manifest): err names each and
 * what failed, and nothing was changed in cfg->dir. Else ST_EINVAL (an
 * incompatible job: the message names the mismatch), ST_EFORMAT,
 * ST_ECORRUPT, ST_EIO with out->none_verifies = 0. Not thread-safe against
 * a writer of the same directory. */
int st_trainer_resume(st_trainer_t *tr, const st_trainer_ckpt_cfg_t *cfg,
		      st_trainer_resume_t *out, char *err, size_t errlen);

/* Renames every checkpoint under cfg->dir (ckpt-<step>/, complete or not)
 * to ckpt-<step>.damaged (.damaged-2, ... if taken), which resume, listing
 * and retention ignore: for starting from the beginning when every
 * checkpoint is damaged, so that neither is lost and retention does not
 * prefer their higher step numbers to the new run's. The number moved, or
 * a negative error with the message in err (the ones moved before stay
 * moved). */
int st_trainer_set_aside_damaged(const st_trainer_ckpt_cfg_t *cfg, char *err, size_t errlen);

#endif
