/*
 * runner_internal.h — the runner's state, shared by the files of
 * ops/runner/ only (nothing outside this folder includes it).
 *
 * Files, one concept each:
 *   runner.c    the run's life: create, the steps of a run in order, cancel,
 *               the result and its status; messages to the observer
 *   stages.c    the stage graph and its placement on the topology
 *   data.c      data.generate: the job's synthetic data when absent
 *   pass.c      one pass over data (train, eval, slice) and scoring
 *   schedule.c  resume, end-of-training checkpoints and exports
 *   phases.c    a job's phases in order, their slices and records
 *   ranks.c     a multi-process job: what it refuses, joining, the summary
 *   metrics_file.c  the metrics file's phase records
 *
 * Lock: st_runner.lock guards graph and cancel_trainer for st_runner_cancel
 * only; it is never held while calling the observer or waiting on anything.
 * Lock order: st_runner.lock, then the graph's and the trainer's own locks
 * (st_graph_cancel, st_trainer_cancel take them); neither calls back into
 * the runner.
 */
#ifndef ST_RUNNER_INTERNAL_H
#define ST_RUNNER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "ops/runner/runner.h"
#include "ops/train/checkpoint.h"
#include "ops/train/trainer.h"
#include "runtime/net/net.h"

enum { ST__RUNNER_TRAIN_STAGE = 2 };   /* index of "train" in the stage names */

struct st_runner {
	st_job_t *job;                   /* borrowed */
	st_runner_opts_t opts;
	const st_runner_observer_t *obs; /* borrowed; may be NULL */
	void *ud;
	int dist;                        /* one rank of a multi-process job */
	st_net_cfg_t ncfg;               /* dist only */
	const char *metrics_path;        /* NULL: none */
	char rank_metrics[4200];         /* PATH.rank<r> */
	int talk;                        /* one process or rank 0: speaks for the job */

	/* Cancel: the first call's signal; the graph and trainer to stop. */
	pthread_mutex_t lock;
	atomic_int cancelled;
	atomic_int signo;
	st_graph_t *graph;               /* under lock */
	st_trainer_t *cancel_trainer;    /* under lock */

	/* The run. */
	int ran;                         /* st_runner_run was called */
	int job_error;                   /* the failure is the job's (status JOB_ERROR) */
	st_metrics_t *metrics;
	st_trainer_t *model;
	st_net_t *net;
	st_topo_t *topo;
	st_place_req_t place[ST_RUNNER_NSTAGES];
	int pin;
	char job_hash[17];
	char *model_desc;
	st_trainer_ckpt_cfg_t ckpt;      /* the trainer keeps a pointer to it */
	uint64_t export_seq;             /* the next export's number */
	st_trainer_resume_t pos;         /* where training continues (resumed) */
	int resumed;                     /* the next training pass continues mid-way */
	int lost;                        /* ranks lost (multi-process) */
	st_runner_phase_result_t *phases;
	st_runner_result_t res;
};

/* Messages through the observer (or st_log / stderr without one). level:
 * ST_LOG_INFO / WARN / ERROR or ST_RUNNER_LINE. */
void st__runner_say(st_runner_t *r, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The first signal st_runner_cancel named, or 1 when it named none; 0 when
 * not cancelled. */
int st__runner_cancelled(const st_runner_t *r);

/* Publishes the graph / trainer that st_runner_cancel stops (NULL: none);
 * one published after a cancel is stopped at once. */
void st__runner_set_graph(st_runner_t *r, st_graph_t *g);
void st__runner_set_trainer(st_runner_t *r, st_trainer_t *tr);

/* stages.c: loads the topology and places the stages; r->pin says whether
 * threads are pinned after it (never fails: without a topology threads
 * are not pinned). */
void st__runner_placement(st_runner_t *r);
/* The run's graph over read state rs; with obs->batch_end the dump stage
 * reports each training batch. */
int st__runner_graph(st_runner_t *r, st_graph_t **out, void *rs);

/* data.c: generates the job's data when declared and absent. ST_OK or the
 * error (logged). */
int st__runner_generate(st_runner_t *r);
/* Expands the train and eval paths again (the files another rank
 * generated). ST_OK or ST_ENOENT (logged). */
int st__runner_refresh_paths(st_runner_t *r);

/* pass.c: one pass of the graph over src; metrics_path: the JSON progress
 * records of a training pass (NULL: none). *secs and *rstats are set also
 * on failure. ST_OK or the error (reported). */
int st__runner_pass(st_runner_t *r, st_runner_pass_kind_t kind, int phase,
		    const st_source_t *src, int epochs, const char *metrics_path,
		    double *secs, st_read_stats_t *rstats);
/* Scores src with the model as it is (an EVAL or SLICE pass), every rank's
 * share collected on rank 0; fills *e (NaN numbers on the other ranks) and
 * tells obs->eval. ST_OK or the error. */
/* Every head's progressive numbers (this process) / eval numbers (after
 * st_trainer_eval_result's pass; ST_OK or ST_ENOMEM) into *hs. */
void st__runner_progress_heads(st_runner_t *r, st_runner_heads_t *hs);
int st__runner_eval_heads(st_runner_t *r, st_runner_heads_t *hs);
int st__runner_score(st_runner_t *r, st_runner_pass_kind_t kind, int phase,
		     const st_source_t *src, st_runner_eval_t *e);

/* schedule.c */
/* The job's output folder and the metrics file's folder. ST_OK or the
 * error (said). */
int st__runner_folders(st_runner_t *r);
/* The export and checkpoint folders, the export numbering and the
 * trainer's interval checkpoints. ST_OK, or an error (a job error sets
 * r->job_error). */
int st__runner_outputs(st_runner_t *r);
/* Resume as opts and the job say: r->resumed and r->pos. ST_OK (also when
 * there is nothing to resume from) or an error (reported). */
int st__runner_resume(st_runner_t *r);
/* The checkpoint at the end of training or of a phase, and an export: each
 * skipped when cancelled; failures reported (artifact) and counted. */
void st__runner_final_checkpoint(st_runner_t *r, int phase);
void st__runner_export(st_runner_t *r, int phase);
/* After the job ran to its end: 1, with a message, if an end-of-training
 * checkpoint or export was not written. */
int st__runner_end_failed(st_runner_t *r);

/* phases.c: the job's phases in order. ST_OK or the error. */
int st__runner_phases(st_runner_t *r, double *total_secs);

/* ranks.c */
/* What a multi-process job refuses (job error, said) and the thread
 * counts it needs. ST_OK or ST_EJOB. */
int st__runner_dist_check(st_runner_t *r);
/* Opens the network and attaches the trainer. ST_OK or the error (said). */
int st__runner_dist_join(st_runner_t *r);
/* The totals over every rank (a collective) into *t, or this rank's only
 * with r->lost. ST_OK or the error. */
int st__runner_dist_totals(st_runner_t *r, st_runner_totals_t *t);

/* metrics_file.c: the metrics file beyond the progress records. Each
 * returns ST_OK or the error (logged with the path). truncate creates or
 * empties path; append copies `from` to the end of `to` and removes `from`
 * (also on failure); phase appends one {"phase": ...} line. */
int st__runner_metrics_truncate(const char *path);
int st__runner_metrics_append(const char *to, const char *from);
int st__runner_metrics_phase(const char *path, const st_runner_phase_result_t *p);

#endif
