/*
 * cli.h — shared pieces of the `strata` command's subcommands.
 *
 * Exit codes of every subcommand: 0 ok, 1 the job failed while running,
 * 2 usage error or invalid job file (nothing was started); `run` stopped
 * cleanly by a signal: 128 + its number (130 SIGINT, 143 SIGTERM).
 */
#ifndef ST_CLI_H
#define ST_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "lang/job.h"
#include "runtime/topo.h"

enum { ST_EXIT_OK = 0, ST_EXIT_FAILED = 1, ST_EXIT_USAGE = 2 };

/* Options common to the commands that take a job file. */
typedef struct st_cli_opts {
	const char *job_path;
	const char **sets;        /* --set values, in order */
	int n_sets;
	const char *metrics_path; /* --metrics FILE */
	const char *topology;     /* --topology FILE.xml */
	int verbose;
	int quiet;                /* no progress line */
	int no_pin;               /* --no-pin: do not pin threads */
	int dot;                  /* plan --dot */
	int resume;               /* run --resume */
	int resume_fresh;         /* run --resume=fresh-if-damaged */
} st_cli_opts_t;

/* Parses the arguments after the subcommand name. Returns 0, or prints a
 * usage message and returns ST_EXIT_USAGE. `allowed` lists the long options
 * the command accepts (e.g. "set,metrics,quiet"). Frees nothing: the
 * strings point into argv; sets is heap-allocated and freed by the caller. */
int st_cli_parse(int argc, char **argv, const char *cmd, const char *allowed,
		 st_cli_opts_t *o);

/* Loads the job and prints every diagnostic. Returns ST_EXIT_OK and *job, or
 * ST_EXIT_USAGE, or ST_EXIT_FAILED when SIGINT or SIGTERM stopped it. */
int st_cli_load_job(const st_cli_opts_t *o, int check_paths, st_job_t **job);

/* The five stages in pipeline order with their settings from the job. */
#define ST_CLI_NSTAGES 5
extern const char *const st_cli_stage_names[ST_CLI_NSTAGES];
const st_stage_cfg_t *st_cli_stage_cfg(const st_job_t *job, int i);

/* Places every stage on the topology; reqs has ST_CLI_NSTAGES entries
 * (st_place_req_t). With detect_data_disk, a read stage on "auto" is placed
 * near the disk holding the first train file when the topology has it.
 * Returns ST_OK or an error (message logged). */
int st_cli_place(const st_topo_t *topo, const st_job_t *job, void *reqs,
		 int detect_data_disk);

/* Multi-process runs (run_dist.c). check: ST_EXIT_OK or ST_EXIT_USAGE
 * (message printed) for what such a job does not support yet, and sets
 * one read and one pull thread per rank; join: opens
 * the network with cfg and attaches the trainer (message logged);
 * summary: rank 0 prints totals over the ranks (digest: the model digest
 * too, STRATA_DIGEST=1). */
struct st_net;
struct st_net_cfg;
struct st_trainer;
int st_cli_dist_check(st_job_t *job);
int st_cli_dist_join(struct st_net **net, const struct st_net_cfg *cfg, const st_job_t *job,
		     struct st_trainer *tr);
int st_cli_dist_summary(struct st_net *net, struct st_trainer *tr, const st_job_t *job,
			double secs, int lost, int digest);

/* The metrics file of `strata run` beyond the progress records
 * (run_metrics.c). Each returns ST_OK or the error (logged with the path):
 * truncate creates or empties path; append copies the file `from` to the
 * end of `to` and removes `from` (also on failure); phase appends one JSON
 * line {"phase": ...} with r's fields (strings escaped, NaN as null). */
typedef struct st_cli_phase_rec {
	const char *phase;          /* the phase's name, any bytes */
	int index;                  /* 1-based */
	const char *sync;           /* the policy it ended with */
	uint64_t examples;
	double secs, auc, logloss;
	uint64_t switches;
	int has_eval;               /* eval_auc, eval_logloss are written */
	double eval_auc, eval_logloss;
	int has_slice;              /* slice_* are written */
	double slice_auc, slice_logloss;
	uint64_t slice_examples;
} st_cli_phase_rec_t;
int st_cli_metrics_truncate(const char *path);
int st_cli_metrics_append(const char *to, const char *from);
int st_cli_metrics_phase(const char *path, const st_cli_phase_rec_t *r);

int st_cmd_run(int argc, char **argv);
int st_cmd_launch(int argc, char **argv);
int st_cmd_check(int argc, char **argv);
int st_cmd_plan(int argc, char **argv);
int st_cmd_gen(int argc, char **argv);
int st_cmd_inspect(int argc, char **argv);
int st_cmd_predict(int argc, char **argv);
int st_cmd_eval(int argc, char **argv);
int st_cmd_help(int argc, char **argv);

/* Prints the help of one command to f; returns ST_OK, or ST_ENOENT if
 * unknown. */
int st_cli_help_for(const char *cmd, FILE *f);
void st_cli_usage(FILE *f);

#endif
