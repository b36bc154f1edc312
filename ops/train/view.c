/*
 * view.c (ops/train) — the trainer's model view (view.h): pointers to the
 * trainer's model, tables and slot map, and the job's description of them.
 * It is the one place where a model view is built from the trainer's
 * private state, so export, eval and predict never see that state.
 *
 * Threads: the caller's; the view reads state that only training changes.
 */
#include "ops/train/view.h"

#include <string.h>

#include "ops/train/trainer_internal.h"
#include "runtime/err.h"

static void new_lineage(void *src)
{
	st_trainer_new_lineage(src);
}

int st_trainer_view(st_trainer_t *tr, const st_job_t *job, st_view_t *out)
{
	_Static_assert(ST_VIEW_MAX_TABLES >= MAX_TABLES, "a view holds every trainer table");
	_Static_assert(ST_VIEW_LINEAGE_MAX == ST_TRAINER_LINEAGE_MAX, "one lineage size");
	memset(out, 0, sizeof *out);
	if (job->train.n_slots != tr->n_slots || job->train.n_dense != tr->n_dense ||
	    job->minibatch < 1 || (uint32_t)job->minibatch != tr->minibatch)
		return ST_EINVAL;
	*out = (st_view_t){
		.model = tr->model,
		.cfg = &job->model,
		.n_dense = tr->n_dense,
		.n_slots = tr->n_slots,
		.seed = job->seed,
		.minibatch = (int)tr->minibatch,
		.n_tables = tr->rows.n_tables,
		.slot_table = tr->rows.slot_table,
		.name = job->name,
		.lineage = tr->track.lineage,
		.lineage_new = new_lineage,
		.src = tr,
	};
	for (int k = 0; k < tr->rows.n_tables; k++)
		out->tables[k] = st__trainer_table(tr, k);
	return ST_OK;
}
