/*
 * job.c — loading a job for the CLI (diagnostics to stderr) and mapping the
 * job's stages onto the topology.
 */
#include "cli.h"
#include "lang/lang.h"
#include "runtime/err.h"
#include "st_config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

const char *const st_cli_stage_names[ST_CLI_NSTAGES] = {
	"read", "pull", "train", "push", "dump",
};

const st_stage_cfg_t *st_cli_stage_cfg(const st_job_t *job, int i)
{
	const st_stage_cfg_t *c[ST_CLI_NSTAGES] = {
		&job->read, &job->pull, &job->train_stage, &job->push, &job->dump,
	};
	return c[i];
}

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

/* Name of the block device (whole disk, e.g. "nvme0n1") holding `path`,
 * from /sys/dev/block/MAJ:MIN; ST_OK, or ST_ENOENT if unknown (tmpfs,
 * overlay). */
static int disk_of(const char *path, char *name, size_t size)
{
	struct stat sb;
	char link[128], real[PATH_MAX];
	if (stat(path, &sb) < 0)
		return ST_ENOENT;
	snprintf(link, sizeof link, "/sys/dev/block/%u:%u", major(sb.st_dev), minor(sb.st_dev));
	if (!realpath(link, real))
		return ST_ENOENT;
	char part[PATH_MAX + 16];
	snprintf(part, sizeof part, "%s/partition", real);
	if (access(part, F_OK) == 0) {  /* a partition: its parent is the disk */
		char *slash = strrchr(real, '/');
		if (!slash)
			return ST_ENOENT;
		*slash = 0;
	}
	const char *base = strrchr(real, '/');
	base = base ? base + 1 : real;
	if (!*base || strlen(base) >= size)
		return ST_ENOENT;
	snprintf(name, size, "%s", base);
	return 0;
}

int st_cli_place(const st_topo_t *topo, const st_job_t *job, void *reqs_,
		 int detect_data_disk)
{
	st_place_req_t *reqs = reqs_;
	static char disk[64];
	for (int i = 0; i < ST_CLI_NSTAGES; i++) {
		const st_stage_cfg_t *c = st_cli_stage_cfg(job, i);
		memset(&reqs[i], 0, sizeof reqs[i]);
		reqs[i].stage = st_cli_stage_names[i];
		reqs[i].near = c->near;
		reqs[i].n_threads = c->threads;
	}
	/* The read stage, left on "auto", goes near the disk its data is on
	 * when the topology knows that disk (kstep paper, Section 3.1: I/O work
	 * on the cores co-located with the device). */
	const char *rn = reqs[0].near;
	if (detect_data_disk && (!rn || !strcmp(rn, "auto")) && job->train.n_paths > 0 &&
	    disk_of(job->train.paths[0], disk, sizeof disk) == 0 &&
	    st_topo_has_device(topo, disk))
		reqs[0].near = disk;
	return st_topo_place(topo, reqs, ST_CLI_NSTAGES);
}
