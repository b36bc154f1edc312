/*
 * view.h (ops/train) — a live trainer seen as a model view (ops/view/view.h):
 * what export, eval and predict read, without the trainer's internals.
 */
#ifndef ST_TRAINER_VIEW_H
#define ST_TRAINER_VIEW_H

#include "lang/job.h"
#include "ops/train/trainer.h"
#include "ops/view/view.h"

/*
 * Fills *out with a view of tr: its model and dense parameters, its tables
 * (RAM and SSD tiers) numbered as st_trainer_table numbers them, its slot ->
 * table map, shape and minibatch, and its run lineage (the view's
 * lineage_new makes one, st_trainer_new_lineage). job must be the job tr was
 * created from: the trainer does not keep it, and the view takes the model
 * configuration, seed and name from it (pointers into job: it must outlive
 * the view). The view points into tr and is valid until st_trainer_destroy;
 * it sees the trainer's current state, so nothing may train while it is
 * read. ST_OK, or ST_EINVAL when job's shape or minibatch is not tr's.
 * Not thread-safe with training; any thread otherwise.
 */
int st_trainer_view(st_trainer_t *tr, const st_job_t *job, st_view_t *out);

#endif
