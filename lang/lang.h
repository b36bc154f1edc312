/*
 * lang.h — loading a job file into the job IR.
 *
 * The job file runs in a sandboxed Lua 5.4 state (no os.execute, io.popen,
 * loadfile, dofile; reading an undefined global is an error naming it) with
 * the stdlib/strata library on its require path and the job's own folder.
 * The file must return st.job{...}. Every problem is collected before any
 * work starts, each as "file:line: sentence".
 */
#ifndef ST_LANG_H
#define ST_LANG_H

#include <stdio.h>

#include "job.h"

/* Diagnostics collected while loading: up to ST_DIAG_MAX messages. */
#define ST_DIAG_MAX 64
typedef struct st_diag {
	int n;
	char *msg[ST_DIAG_MAX];   /* "jobs/x.lua:12: unknown field 'bach_size' in stages.read (did you mean 'batch_size'?)" */
} st_diag_t;

void st_diag_free(st_diag_t *d);

typedef struct st_load_opts {
	const char *stdlib_dir;   /* folder holding strata/<module>.lua; NULL = built-in
				     default ($STRATA_STDLIB, the source tree, the
				     installed copy, in that order) */
	const char *const *sets;  /* "key.path=lua-literal" overrides, applied in order */
	int n_sets;
	int check_paths;          /* 1: data globs must match at least one file
				     (skipped for sources that `gen` will create) */
	double time_limit_s;      /* run time the job file and its validation may
				     take; 0 = 10 s */
} st_load_opts_t;

/* Loads, overrides, validates and converts the job. Returns ST_OK and *out
 * (caller frees with st_job_free), or ST_EJOB with every message in *diag
 * (caller frees with st_diag_free), or ST_ECANCELED (with a message) when
 * st_job_load_interrupt stopped it. *diag is initialized by the call (its
 * previous contents are not freed). Thread-safe: every call runs its own
 * Lua state. The job runs with at most 512 MiB and opts->time_limit_s
 * (default 10 s), which it cannot catch or evade. */
int st_job_load(const char *path, const st_load_opts_t *opts, st_job_t **out,
		st_diag_t *diag);

/* Stops every st_job_load running now (loads started later are not
 * affected): each returns ST_ECANCELED soon after. Async-signal-safe, so a
 * SIGINT handler may call it. */
void st_job_load_interrupt(void);

/* Re-runs src->globs (after data.generate made the files, say) and replaces
 * src->paths with the sorted, de-duplicated matches. Returns ST_OK, or
 * ST_ENOENT (logged, paths unchanged) when no pattern matches a file.
 * Not thread-safe on the same source. */
int st_job_expand_paths(st_source_t *src);

/* Prints every field of the resolved job, one per line
 * ("stages.read.threads = 2"), for `strata check --verbose`. Returns ST_OK or
 * ST_EIO when writing failed. */
int st_job_dump(const st_job_t *job, FILE *f);

#endif
