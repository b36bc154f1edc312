/*
 * cli.h — shared pieces of the `strata` command's subcommands. Running a
 * job is the job runner's (ops/runner/runner.h); cli/ parses, calls, prints.
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
	const char *trace_path;   /* run --trace FILE */
	long trace_events;        /* run --trace-events N (0: the default) */
	int metrics_port;         /* run --metrics-port N (0: no endpoint) */
	const char *metrics_bind; /* run --metrics-bind ADDR (NULL: 127.0.0.1) */
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

int st_cmd_run(int argc, char **argv);
int st_cmd_launch(int argc, char **argv);
int st_cmd_check(int argc, char **argv);
int st_cmd_plan(int argc, char **argv);
int st_cmd_gen(int argc, char **argv);
int st_cmd_inspect(int argc, char **argv);
int st_cmd_predict(int argc, char **argv);
int st_cmd_eval(int argc, char **argv);
int st_cmd_help(int argc, char **argv);
int st_cmd_trace(int argc, char **argv);
int st_cmd_report(int argc, char **argv);

/* Prints the help of one command to f; returns ST_OK, or ST_ENOENT if
 * unknown. */
int st_cli_help_for(const char *cmd, FILE *f);
void st_cli_usage(FILE *f);

#endif
