/*
 * rowplan.h — what one embedding row of a job costs, per table, in the
 * job's row precision and in fp32 (storage.row_precision; `strata plan`
 * prints it, docs/storage.md explains it).
 *
 * The numbers are measured, not estimated: a table with the job's row
 * layout is filled with sample rows and asked for its bytes per row
 * (st_table_row_bytes: row slot, metadata, index and chunk slack at that
 * fill), plus the cache bookkeeping of a row when the job has an SSD tier
 * (ST_TABLE_CACHE_ROW_BYTES). The SSD cost is the SSD tier's record size for the row's payload.
 */
#ifndef ST_TRAIN_ROWPLAN_H
#define ST_TRAIN_ROWPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "lang/job.h"

/* Rows per table sampled to measure the RAM cost. */
#define ST_ROWPLAN_SAMPLE 65536

typedef struct st_rowplan {
	int dim;                 /* emb (+ wide) floats of a row */
	int state_dim;           /* optimizer-state floats (fp32 always) */
	int slots;               /* slots whose rows live in this table */
	int prec;                /* the job's enum st_row_prec */
	/* [0]: fp32 rows, [1]: the job's precision (equal for an fp32 job). */
	uint32_t payload[2];     /* bytes of a row's values (emb + state) */
	double ram_bytes[2];     /* RAM bytes per row, measured */
	uint32_t ssd_bytes[2];   /* SSD record bytes per row */
} st_rowplan_t;

/* Fills out[0..*n) with the job's tables (one per distinct row width, in
 * slot order, as the trainer makes them); max is out's room. Builds the
 * job's model to learn the row widths. ST_OK, ST_EJOB (the model cannot be
 * built, or more tables than max), ST_ENOMEM. Thread-safe (own objects
 * only). */
int st_rowplan(const st_job_t *job, st_rowplan_t *out, int max, int *n);

#endif
