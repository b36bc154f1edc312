/*
 * job.c — loading a job for the CLI (diagnostics to stderr).
 */
#include "cli.h"
#include "lang/lang.h"
#include "runtime/err.h"
#include "st_config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The stdlib folder: $STRATA_STDLIB, else the source tree's (a build run
 * from its checkout), else the installed one. */
static const char *stdlib_dir(void)
{
	const char *e = getenv("STRATA_STDLIB");
	if (e && *e)
		return e;
	struct stat sb;
	if (stat(ST_STDLIB_DIR_SRC "/strata/init.lua", &sb) == 0)
		return ST_STDLIB_DIR_SRC;
	return ST_STDLIB_DIR_INSTALL;
}

static void on_interrupt(int sig)
{
	(void)sig;
	st_job_load_interrupt();
}

int st_cli_load_job(const st_cli_opts_t *o, int check_paths, st_job_t **job)
{
	st_diag_t diag;
	memset(&diag, 0, sizeof diag);
	st_load_opts_t lo = {
		.stdlib_dir = stdlib_dir(),
		.sets = o->sets,
		.n_sets = o->n_sets,
		.check_paths = check_paths,
	};
	/* SIGINT and SIGTERM stop the job file (an endless loop in it would
	 * otherwise hold for the whole time limit) even where the shell
	 * started us with SIGINT ignored, as it does in the background:
	 * `strata run` takes them with sigwait, check should not differ. */
	struct sigaction sa, old_int, old_term;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_interrupt;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	int rc = st_job_load(o->job_path, &lo, job, &diag);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (rc == ST_ECANCELED) {
		for (int i = 0; i < diag.n; i++)
			fprintf(stderr, "%s\n", diag.msg[i]);
		fprintf(stderr, "strata: stopped by signal while loading %s; nothing was run\n",
			o->job_path);
		st_diag_free(&diag);
		return ST_EXIT_FAILED;
	}
	if (rc < 0) {
		for (int i = 0; i < diag.n; i++)
			fprintf(stderr, "%s\n", diag.msg[i]);
		if (diag.n == 0)
			fprintf(stderr, "%s: %s\n", o->job_path, st_strerror(rc));
		fprintf(stderr, "strata: %d error%s in %s; nothing was run\n",
			diag.n ? diag.n : 1, diag.n == 1 ? "" : "s", o->job_path);
		st_diag_free(&diag);
		return ST_EXIT_USAGE;
	}
	st_diag_free(&diag);
	return ST_EXIT_OK;
}
