/*
 * runner.h — the job runner: runs a loaded job (lang/job.h) to its end, in
 * one process or as one rank of a multi-process job, and reports what
 * happens through an observer. It is what `strata run` does, as a library:
 * the CLI parses arguments, loads the job, calls st_runner_run and prints
 * what the observer hands it (SQLite's sqlite3_step loop, Lua's lua_pcall:
 * the library does the work, the caller only parses, calls, prints).
 *
 * A run, in order (docs/operations.md, docs/distributed.md):
 *   - the job's synthetic data is generated when declared and absent
 *     (rank 0 alone in a multi-process job, before it joins);
 *   - the output, checkpoint and export folders are made, the stage threads
 *     placed on the topology, the trainer created, the other ranks joined;
 *   - with resume, the newest checkpoint that verifies is loaded;
 *   - without phases: one training pass over the train source (`epochs`
 *     times), the final checkpoint, an export, one eval pass;
 *   - with phases: per phase the policy switch, the slice scored before
 *     training on it (`validate`), the training pass, an export, the
 *     phase's checkpoint, an eval pass, a {"phase": ...} metrics record;
 *   - the model digest and the multi-process summary.
 * A failed end-of-training checkpoint or export is reported (artifact) and
 * the other steps still run; the run then ends FAILED.
 *
 * Observer calls, in the order they happen (each optional: NULL is fine):
 *   message* gen_progress* (pass_begin batch_end* pass_end)*
 *   without phases: train_end artifact(checkpoint)? artifact(export)?
 *                   [pass_begin(EVAL) pass_end eval]?
 *   with phases, per phase: [pass_begin(SLICE) pass_end eval(SLICE)]?
 *                   pass_begin(TRAIN) batch_end* pass_end artifact(export)?
 *                   artifact(checkpoint)? [pass_begin(EVAL) pass_end eval]?
 *                   phase_end;  then phases_end, train_end.
 * A pass that fails ends the run after its pass_end. Every call but
 * batch_end comes on the thread that called st_runner_run; batch_end comes
 * on the graph's dump thread. No lock of the runner is held during any
 * call, so a callback may call st_runner_cancel.
 *
 * Threads: the runner has none of its own; the passes run the graph's stage
 * threads and the trainer's workers (runtime/graph.h, ops/train/trainer.h).
 * st_runner_cancel may come from any thread.
 */
#ifndef ST_RUNNER_H
#define ST_RUNNER_H

#include <stdint.h>

#include "lang/job.h"
#include "ops/read/read.h"
#include "runtime/graph.h"
#include "runtime/metrics.h"
#include "runtime/topo.h"

struct st_net_cfg;

typedef struct st_runner st_runner_t;

/* How a run ends (st_runner_result_t.status). */
typedef enum st_runner_status {
	ST_RUNNER_OK = 0,
	ST_RUNNER_FAILED = 1,       /* it failed while running (`strata run` exit 1) */
	ST_RUNNER_JOB_ERROR = 2,    /* the job cannot run as written; nothing was
				     * trained (exit 2) */
	ST_RUNNER_INTERRUPTED = 3,  /* st_runner_cancel stopped it (exit 128 + signo) */
} st_runner_status_t;

typedef enum st_runner_resume {
	ST_RUNNER_RESUME_AS_JOB = 0,         /* resume when the job says so (resume = true) */
	ST_RUNNER_RESUME = 1,                /* --resume */
	ST_RUNNER_RESUME_FRESH_IF_DAMAGED = 2, /* --resume=fresh-if-damaged: when every
					      * checkpoint is damaged, move them aside
					      * and start from the beginning */
} st_runner_resume_t;

typedef struct st_runner_opts {
	st_runner_resume_t resume;
	const char *metrics_path;  /* JSON-lines metrics file; NULL: the job's. In a
				    * multi-process job rank r > 0 writes PATH.rank<r> */
	int pin;                   /* pin stage threads where the placement allows */
	int digest;                /* compute the model digest at the end (totals) */
	const char *topology;      /* topology XML for placement; NULL: this machine
				    * (and the read stage goes near the data's disk) */
	const struct st_net_cfg *net; /* one rank of a multi-process job; NULL: one
				    * process. Copied. */
	int net_timeout_fixed;     /* net->timeout_s came from the environment and wins
				    * over the job's dist.timeout */
} st_runner_opts_t;

/* Kinds of pass over data. */
typedef enum st_runner_pass_kind {
	ST_RUNNER_PASS_TRAIN = 0,
	ST_RUNNER_PASS_EVAL = 1,    /* the job's eval data, scored */
	ST_RUNNER_PASS_SLICE = 2,   /* a phase's data, scored before training on it */
} st_runner_pass_kind_t;

/* One pass. graph and metrics are valid from pass_begin to pass_end (the
 * caller may start a progress reporter on them: runtime/metrics.h). */
typedef struct st_runner_pass {
	st_runner_pass_kind_t kind;
	int phase;                  /* 0-based; -1 in a job without phases */
	int epochs;
	st_graph_t *graph;
	st_metrics_t *metrics;
	/* pass_end only: */
	int rc;                     /* ST_OK or the pass's error */
	double secs;                /* wall seconds of the graph */
	st_read_stats_t read;       /* rows, bad records, bytes of this process */
} st_runner_pass_t;

/* Per-head numbers of a multi-task model (docs/models.md, "Several
 * labels"): head h's label name and its AUC / logloss / calibration (NaN
 * where not measured). n = the model's heads (1: only head 0, whose numbers
 * are also the struct's plain auc, logloss, ...). Names are the model's,
 * valid while the runner lives. */
typedef struct st_runner_heads {
	int n;
	const char *name[ST_MODEL_MAX_HEADS];
	double auc[ST_MODEL_MAX_HEADS], logloss[ST_MODEL_MAX_HEADS];
	double calibration[ST_MODEL_MAX_HEADS];
} st_runner_heads_t;

/* Scores of an eval or slice pass (over every rank's share in a
 * multi-process job, collected on rank 0). */
typedef struct st_runner_eval {
	st_runner_pass_kind_t kind; /* EVAL or SLICE */
	int phase;                  /* -1: the end of a job without phases */
	int has_result;             /* 0 on ranks other than 0: the numbers are NaN */
	double auc, logloss, calibration;
	uint64_t examples;
	uint64_t nonfinite;         /* scores that are NaN or infinite (a diverged
				     * model): the AUC ranks the others only */
	double secs;
	st_runner_heads_t heads;    /* every head's (has_result only) */
} st_runner_eval_t;

/* An end-of-training (or end-of-phase) checkpoint or export. */
typedef enum st_runner_artifact_kind {
	ST_RUNNER_CHECKPOINT = 0,
	ST_RUNNER_EXPORT = 1,
} st_runner_artifact_kind_t;

typedef struct st_runner_artifact {
	st_runner_artifact_kind_t kind;
	int phase;                  /* -1: the end of a job without phases */
	int rc;                     /* ST_OK: written; else why not */
	const char *dir;            /* checkpoint.dir or export.dir */
	int64_t num;                /* checkpoint step (-1 when the snapshot failed)
				     * or export number */
	const char *error;          /* rc < 0: what failed, for a person */
} st_runner_artifact_t;

/* One phase's outcome (valid until st_runner_destroy). */
typedef struct st_runner_phase_result {
	int index;                  /* 0-based */
	const char *name;           /* the job's */
	int ran;                    /* 0: ended before the resumed checkpoint */
	char sync[64];              /* the policy it ended with (auto: the active one) */
	uint64_t examples;          /* trained in this phase, this process */
	double secs;                /* of its training pass */
	double auc, logloss;        /* progressive, this process, after the phase */
	uint64_t switches;          /* policy switches so far (st.sync.auto) */
	int has_eval;               /* the job's eval data was scored after it */
	double eval_auc, eval_logloss, eval_calibration;
	uint64_t eval_examples;
	int validate;               /* the job asks for the slice to be scored */
	int has_slice;              /* it was (not when resumed mid-phase) */
	double slice_auc, slice_logloss;
	uint64_t slice_examples;
	int reported;               /* one process, or rank 0 of several: the rank
				     * that speaks for the job */
	int dist;                   /* a multi-process job: examples etc. are this rank's */
	st_runner_heads_t heads;    /* progressive, every head */
	st_runner_heads_t eval_heads; /* has_eval: every head's eval scores */
} st_runner_phase_result_t;

/* Totals at the end of training. */
typedef struct st_runner_totals {
	int phases;                 /* the job has phases (phase_end said the rest) */
	uint64_t examples;          /* progressive, this process */
	double secs;                /* training passes' wall seconds */
	double auc, logloss;        /* progressive, this process */
	st_read_stats_t read;       /* a job without phases: its train pass */
	int has_digest;             /* opts.digest */
	uint64_t digest, digest_rows; /* the whole model's (xor / sum over the ranks) */
	int rank, ranks;            /* 0 and 1 in one process */
	int lost;                   /* ranks lost: the all_* totals are not filled */
	uint64_t all_examples;      /* summed over the ranks */
	double all_secs;            /* the slowest rank's */
	uint64_t all_bytes_sent;    /* network bytes, summed over the ranks */
	uint64_t all_round_trips;   /* round trips (st_dist_stats_t), summed over the ranks */
	uint64_t all_steps;         /* training steps, summed over the ranks */
	st_runner_heads_t heads;    /* progressive, every head, this process */
} st_runner_totals_t;

/* Messages. level is ST_LOG_INFO, ST_LOG_WARN or ST_LOG_ERROR
 * (runtime/err.h: printed as "strata: <level>: <text>") or
 * ST_RUNNER_LINE: text is a whole line for a person, printed as it is. */
#define ST_RUNNER_LINE 100

#define ST_RUNNER_OBSERVER_VERSION 1

/* The observer: a struct of callbacks and the user pointer given to
 * st_runner_create; every pointer may be NULL. The structs passed are valid
 * during the call only. message NULL: the runner logs through st_log
 * (runtime/err.h) and prints lines to stderr. */
typedef struct st_runner_observer {
	int version;                /* ST_RUNNER_OBSERVER_VERSION */
	void (*message)(void *ud, int level, const char *text);
	/* data.generate: rows written so far; once more with end = 1 when the
	 * generator is done (also after a failure). */
	void (*gen_progress)(void *ud, int64_t done, int64_t total, int end);
	void (*pass_begin)(void *ud, const st_runner_pass_t *p);
	void (*pass_end)(void *ud, const st_runner_pass_t *p);
	/* After each training batch left the graph (an interval checkpoint of
	 * it, if due, is written): its number in the pass's stream. On the
	 * graph's dump thread. */
	void (*batch_end)(void *ud, uint64_t seq);
	void (*train_end)(void *ud, const st_runner_totals_t *t);
	void (*eval)(void *ud, const st_runner_eval_t *e);
	void (*artifact)(void *ud, const st_runner_artifact_t *a);
	void (*phase_end)(void *ud, const st_runner_phase_result_t *ph);
	void (*phases_end)(void *ud, const st_runner_phase_result_t *phs, int n);
} st_runner_observer_t;

/* What a run did (st_runner_result; valid until st_runner_destroy). */
typedef struct st_runner_result {
	st_runner_status_t status;
	int signo;                  /* INTERRUPTED: the signal st_runner_cancel named
				     * (0: cancelled with none) */
	int rc;                     /* the first error (ST_OK when status is OK) */
	int trained;                /* training ran to its end (totals are filled) */
	st_runner_totals_t totals;
	int has_eval;               /* a job without phases scored its eval data */
	st_runner_eval_t eval;
	int n_phases;
	const st_runner_phase_result_t *phases;  /* n_phases entries */
	int resumed;                /* training continued from a checkpoint */
	uint64_t resumed_step;
	int ckpts_written, ckpt_failed;     /* end-of-training / end-of-phase ones */
	int exports_written, export_failed;
	int metrics_err;            /* a write to the metrics file failed */
} st_runner_result_t;

/* Prepares a run of job: checks what this build and the run's shape (one
 * process or several) can run, before anything starts; may adjust job
 * (multi-process: one read and one pull thread per rank) and later
 * st_runner_run expands the paths of data it generates. job and obs are
 * borrowed: both must outlive the runner; opts is copied (strings in it
 * must outlive the runner too). Returns ST_OK and *out (the caller
 * destroys it), ST_EJOB (the reason went to obs->message: the job cannot
 * run as written) or ST_ENOMEM; *out is NULL then. */
int st_runner_create(st_runner_t **out, st_job_t *job, const st_runner_opts_t *opts,
		     const st_runner_observer_t *obs, void *ud);

/* Runs the job to its end (or until st_runner_cancel), once per runner.
 * Returns ST_OK when the status is OK, else a negative code: ST_EJOB (a job
 * error), ST_ECANCELED (interrupted), or the failure's error; the details
 * are in st_runner_result. Not thread-safe (one caller). */
int st_runner_run(st_runner_t *r);

/* Stops the run cleanly: reading stops, every batch in flight is freed
 * once, no interval checkpoint starts after it (one whose copy has begun is
 * written to its end), and no final checkpoint or export is written; the
 * run ends INTERRUPTED with signo (0: none; the first call's counts) even
 * when it was about to end anyway. Thread-safe; takes a mutex, so it is
 * not async-signal-safe: a signal handler hands the signal to a thread
 * (cli/cmd_run.c "signals") that calls this. Idempotent. */
void st_runner_cancel(st_runner_t *r, int signo);

/* The run's result: the status etc. after st_runner_run returned. Owned by
 * the runner. */
const st_runner_result_t *st_runner_result(const st_runner_t *r);

/* Frees the runner: the trainer, the network, the metrics (NULL-safe).
 * Not while st_runner_run runs. */
void st_runner_destroy(st_runner_t *r);

/* ---- the stage graph, shared with `strata plan` (stages.c) ------------- */

/* The five stages in pipeline order, and their settings in the job. */
#define ST_RUNNER_NSTAGES 5
extern const char *const st_runner_stage_names[ST_RUNNER_NSTAGES];
const st_stage_cfg_t *st_runner_stage_cfg(const st_job_t *job, int i);

/* Places every stage on topo; reqs[ST_RUNNER_NSTAGES] are filled. With
 * detect_data_disk, a read stage on "auto" goes near the disk holding the
 * first train file when the topology has it. ST_OK or the error (logged). */
int st_runner_place(const st_topo_t *topo, const st_job_t *job, st_place_req_t *reqs,
		    int detect_data_disk);

/* Builds read -> pull -> train -> push -> dump: the read stage's state is
 * read_state (ops/read/read.h), the others' the trainer; both NULL for a
 * graph that is only printed. pin: threads on place[i].cpus. ST_OK and *out
 * (the caller destroys it), or the error. */
int st_runner_build_graph(st_graph_t **out, const st_job_t *job,
			  const st_place_req_t *place, int pin, void *read_state,
			  void *trainer);

#endif
