/*
 * rowplan.c — bytes per row and rows per GiB of a job's tables (rowplan.h),
 * for `strata plan`.
 *
 * The tables are the trainer's (ops/train/store.c): one per distinct row
 * width, a row being the slot's embedding (+ wide weight) and the sparse
 * optimizer's state. Each is built twice, fp32 and in the job's precision,
 * filled with ST_ROWPLAN_SAMPLE rows, and measured; nothing else of the job
 * runs.
 *
 * Threads: the caller's.
 */
#include "ops/train/rowplan.h"

#include "ops/nn/model.h"
#include "ops/optim/optim.h"
#include "ops/train/trainer_internal.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"
#include "runtime/store/ssd.h"
#include "runtime/store/table.h"

/* RAM bytes per row of a table with this layout, filled with n rows. */
static int measure(uint32_t dim, uint32_t state, int prec, double *out)
{
	st_table_opts_t o = { .dim = dim, .state_dim = state, .seed = 1, .init_scale = 0.01f,
			      .row_prec = prec };
	st_table_t *t;
	int rc = st_table_create(&t, &o);
	if (rc < 0)
		return rc;
	enum { CH = 4096 };
	uint64_t keys[CH];
	float *rows[CH];
	for (uint64_t k0 = 0; k0 < ST_ROWPLAN_SAMPLE && rc >= 0; k0 += CH) {
		for (uint32_t i = 0; i < CH; i++)
			keys[i] = (k0 + i) * UINT64_C(0x9e3779b97f4a7c15) + 1;
		rc = st_table_resolve(t, keys, CH, 0, 1, rows);
	}
	if (rc >= 0)
		*out = (double)st_table_row_bytes(t);
	st_table_destroy(t);
	return rc < 0 ? rc : ST_OK;
}

int st_rowplan(const st_job_t *job, st_rowplan_t *out, int max, int *n)
{
	*n = 0;
	st_model_t *m = NULL;
	if (st_model_create(&m, &job->model, job->train.n_dense, job->train.n_slots, job->seed) < 0)
		return ST_EJOB;
	st_optim_cfg_t oc;
	st_optim_t so;
	st__trainer_optim_cfg(&job->model, 0, &oc);
	int rc = st_optim_init(&so, &oc) < 0 ? ST_EJOB : ST_OK;
	for (int s = 0; s < job->train.n_slots && rc >= 0; s++) {
		int rd = st_model_row_dim(m, s), t;
		for (t = 0; t < *n && out[t].dim != rd; t++)
			;
		if (t == *n) {
			if (t == max) {
				rc = ST_EJOB;
				break;
			}
			out[t] = (st_rowplan_t){ .dim = rd, .prec = job->row_prec,
						 .state_dim = (int)st_optim_state_floats(&so, (size_t)rd) };
			(*n)++;
		}
		out[t].slots++;
	}
	st_model_destroy(m);
	for (int t = 0; t < *n && rc >= 0; t++) {
		st_rowplan_t *p = &out[t];
		for (int i = 0; i < 2 && rc >= 0; i++) {
			const int prec = i ? p->prec : ST_ROW_FP32;
			const uint32_t words = st_rowfmt_words(prec, (uint32_t)p->dim) +
					       (uint32_t)p->state_dim;
			p->payload[i] = words * 4u;
			/* The SSD record holds the words and the row's metadata
			 * (ops/rowsrc/local.c's payload_bytes). */
			p->ssd_bytes[i] = st_ssd_record_bytes((words + 2u) * 4u);
			rc = measure((uint32_t)p->dim, (uint32_t)p->state_dim, prec, &p->ram_bytes[i]);
			/* With an SSD tier the RAM tier is a cache: each row has
			 * its cache bookkeeping too. */
			if (job->ssd_path)
				p->ram_bytes[i] += ST_TABLE_CACHE_ROW_BYTES;
		}
	}
	return rc;
}
