/*
 * cmd_report.c — `strata report`: one self-contained HTML page from the
 * files a run left behind (its --metrics file, its --trace file, and the
 * job's configuration from a job file or a checkpoint's manifest.yaml).
 * ops/report/report.h draws the page; this file parses the options, reads
 * the inputs and writes the output, naming the file (and line) of any bad
 * input.
 */
#include "cli.h"
#include "ops/report/report.h"
#include "ops/report/runlog.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_CONFIG (1 << 20)   /* bytes of a job file or manifest shown */

static int usage(const char *why)
{
	fprintf(stderr, "strata report: %s\nRun 'strata help report' for usage.\n", why);
	return ST_EXIT_USAGE;
}

/* The whole of a small text file (malloc'd, NUL-terminated), or NULL with
 * errno set (EFBIG when over MAX_CONFIG). */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *b = malloc(MAX_CONFIG + 1);
	size_t n = b ? fread(b, 1, MAX_CONFIG + 1, f) : 0;
	int e = !b ? ENOMEM : ferror(f) ? EIO : n > MAX_CONFIG ? EFBIG : 0;
	fclose(f);
	if (e) {
		free(b);
		errno = e;
		return NULL;
	}
	b[n] = '\0';
	return b;
}

/* DIR/manifest.yaml when DIR is one checkpoint, else the manifest of the
 * newest ckpt-<step> under DIR (step numbers are zero-padded, so the
 * greatest name is the newest). 0, or -1 with a message printed. */
static int find_manifest(const char *dir, char *out, size_t cap)
{
	struct stat st;
	snprintf(out, cap, "%s/manifest.yaml", dir);
	if (stat(out, &st) == 0)
		return 0;
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "strata report: cannot open the checkpoint directory %s: %s\n", dir,
			strerror(errno));
		return -1;
	}
	char best[256] = "";
	struct dirent *e;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "ckpt-", 5) && !strchr(e->d_name, '.') &&
		    strcmp(e->d_name, best) > 0 && strlen(e->d_name) < sizeof best)
			snprintf(best, sizeof best, "%s", e->d_name);
	closedir(d);
	if (!best[0]) {
		fprintf(stderr, "strata report: %s holds neither manifest.yaml nor a ckpt-<step> "
			"directory (give a checkpoint directory of the job)\n", dir);
		return -1;
	}
	snprintf(out, cap, "%s/%s/manifest.yaml", dir, best);
	return 0;
}

int st_cmd_report(int argc, char **argv)
{
	enum { O_METRICS = 1, O_TRACE, O_CKPT, O_JOB, O_TITLE };
	static const struct option opts[] = {
		{ "metrics", required_argument, NULL, O_METRICS },
		{ "trace", required_argument, NULL, O_TRACE },
		{ "checkpoint", required_argument, NULL, O_CKPT },
		{ "job", required_argument, NULL, O_JOB },
		{ "title", required_argument, NULL, O_TITLE },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *metrics = NULL, *trace = NULL, *ckpt = NULL, *job = NULL, *title = NULL,
		   *outp = NULL;
	optind = 1;
	opterr = 0;
	int ch;
	while ((ch = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
		switch (ch) {
		case O_METRICS: metrics = optarg; break;
		case O_TRACE: trace = optarg; break;
		case O_CKPT: ckpt = optarg; break;
		case O_JOB: job = optarg; break;
		case O_TITLE: title = optarg; break;
		case 'o': outp = optarg; break;
		case 'h':
			st_cli_help_for("report", stdout);
			return ST_EXIT_OK;
		case ':': {
			char why[96];
			snprintf(why, sizeof why, "%s needs a value", argv[optind - 1]);
			return usage(why);
		}
		default: {
			char why[128];
			snprintf(why, sizeof why, "unknown option %s", argv[optind - 1]);
			return usage(why);
		}
		}
	}
	if (optind < argc)
		return usage("unexpected argument (inputs are given with --metrics, --trace, "
			     "--checkpoint, --job)");
	if (!metrics && !trace)
		return usage("nothing to report: give --metrics FILE and/or --trace FILE");
	if (!outp)
		return usage("missing -o OUT.html");
	if (ckpt && job)
		return usage("give the configuration once: --job or --checkpoint");

	int rc = ST_EXIT_FAILED;
	st_runlog_t log = { 0 };
	char err[512] = "", manifest[4096];
	char *config = NULL;
	const char *config_from = NULL;
	st_html_t page;
	st_html_init(&page);
	if (metrics && st_runlog_read(metrics, &log, err, sizeof err) < 0) {
		fprintf(stderr, "strata report: %s\n", err);
		goto out;
	}
	if (metrics && log.cut_line > 0)
		fprintf(stderr, "strata report: warning: %s:%d is cut short (the run stopped while "
			"writing it); left out\n", metrics, log.cut_line);
	if (metrics && log.n == 0) {
		fprintf(stderr, "strata report: %s is empty (was it written by `strata run "
			"--metrics`?)\n", metrics);
		goto out;
	}
	if (ckpt) {
		if (find_manifest(ckpt, manifest, sizeof manifest) < 0)
			goto out;
		config_from = manifest;
	} else if (job) {
		config_from = job;
	}
	if (config_from && !(config = slurp(config_from))) {
		fprintf(stderr, "strata report: cannot read %s: %s\n", config_from,
			errno == EFBIG ? "larger than 1 MiB" : strerror(errno));
		goto out;
	}
	st_report_in_t in = {
		.title = title, .metrics_path = metrics, .log = metrics ? &log : NULL,
		.trace_path = trace, .config_text = config, .config_from = config_from,
	};
	if (st_report_build(&in, &page, err, sizeof err) < 0) {
		fprintf(stderr, "strata report: %s\n", err);
		goto out;
	}
	FILE *f = fopen(outp, "w");
	if (!f) {
		fprintf(stderr, "strata report: cannot create %s: %s\n", outp, strerror(errno));
		goto out;
	}
	size_t w = fwrite(page.p, 1, page.len, f);
	int bad = w != page.len || ferror(f);
	if (fclose(f) != 0 || bad) {
		fprintf(stderr, "strata report: cannot write %s: %s\n", outp, strerror(errno));
		goto out;
	}
	fprintf(stderr, "strata: info: report written to %s (%zu bytes)\n", outp, page.len);
	rc = ST_EXIT_OK;
out:
	st_html_fini(&page);
	st_runlog_fini(&log);
	free(config);
	return rc;
}
