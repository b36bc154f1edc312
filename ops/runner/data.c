/*
 * data.c — data.generate: the job's synthetic data (ops/gen), written when
 * the job declares it and some of its files are absent, then the job's data
 * paths expanded again over the files that now exist.
 *
 * The generator renames each file into place only when complete, so a file
 * that exists is whole and a present set is never written again. It does
 * not stop on st_runner_cancel; the run stops right after it.
 */
#include "ops/runner/runner_internal.h"
#include "lang/lang.h"
#include "ops/gen/gen.h"
#include "runtime/err.h"

#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int file_exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void progress(int64_t done, int64_t total, void *arg)
{
	st_runner_t *r = arg;
	r->obs->gen_progress(r->ud, done, total, 0);
}

/* Every file the generator would write is there. */
static int present(const st_job_t *job)
{
	char path[4096];
	/* With days the train files are day-000.tsv .. day-<days-1>.tsv. */
	int n_train = job->gen.days > 0 ? job->gen.days : job->gen.files;
	for (int i = 0; i < n_train; i++) {
		if (job->gen.days > 0)
			snprintf(path, sizeof path, "%s/day-%03d.tsv", job->gen.dir, i);
		else
			snprintf(path, sizeof path, "%s/train-%05d.tsv", job->gen.dir, i);
		if (!file_exists(path))
			return 0;
	}
	if (job->gen.eval_rows > 0) {
		snprintf(path, sizeof path, "%s/eval.tsv", job->gen.dir);
		return file_exists(path);
	}
	return 1;
}

int st__runner_refresh_paths(st_runner_t *r)
{
	st_job_t *job = r->job;
	int rc = st_job_expand_paths(&job->train);
	if (rc >= 0 && job->has_eval)
		rc = st_job_expand_paths(&job->eval);
	return rc;
}

int st__runner_generate(st_runner_t *r)
{
	st_job_t *job = r->job;
	if (!job->gen.enabled)
		return ST_OK;
	if (!job->gen.used) {
		/* Every data path was pointed away from generate.dir. */
		st__runner_say(r, ST_LOG_INFO, "data.generate: no data path is under %s; nothing "
			       "is generated", job->gen.dir);
		return ST_OK;
	}
	if (present(job))
		return ST_OK;
	st__runner_say(r, ST_LOG_INFO, "generating %lld train + %lld eval rows of synthetic "
		       "data in %s (seed %llu)", (long long)job->gen.rows,
		       (long long)job->gen.eval_rows, job->gen.dir,
		       (unsigned long long)job->gen.seed);
	if (job->gen.days > 0)
		st__runner_say(r, ST_LOG_INFO, "as %d days day-000.tsv .. day-%03d.tsv, drift %g",
			       job->gen.days, job->gen.days - 1, job->gen.drift);
	st_gen_opts_t go = {
		.dir = job->gen.dir,
		.rows = job->gen.rows,
		.eval_rows = job->gen.eval_rows,
		.files = job->gen.files,
		.seed = job->gen.seed,
		.zipf = job->gen.zipf,
		.vocab = job->gen.vocab,
		.threads = 0,
		.days = job->gen.days,
		.drift = job->gen.drift,
		.multi_hot = job->gen.multi_hot,
		.labels = job->gen.labels,
	};
	const int report = r->obs && r->obs->gen_progress;
	double t0 = now_s();
	int rc = st_gen_write(&go, report ? progress : NULL, r);
	if (report)
		r->obs->gen_progress(r->ud, 0, 0, 1);
	if (rc < 0) {
		st__runner_say(r, ST_LOG_ERROR, "generating data in %s failed: %s", job->gen.dir,
			       st_strerror(rc));
		return rc;
	}
	st__runner_say(r, ST_LOG_INFO, "generated data in %.1f s", now_s() - t0);
	return st__runner_refresh_paths(r);
}
