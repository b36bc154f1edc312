/*
 * cmd_gen.c — `strata gen`: synthetic Criteo-format data (ops/gen).
 */
#include "cli.h"
#include "ops/gen/gen.h"
#include "runtime/err.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Parses a non-negative number that may be written 1e6 or 10000000. */
static int parse_num(const char *opt, const char *s, double min, double *out)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || v < min || v != v) {
		fprintf(stderr, "strata gen: %s must be a number >= %g, got '%s'\n", opt, min, s);
		return -1;
	}
	*out = v;
	return 0;
}

static void progress(int64_t done, int64_t total, void *arg)
{
	if (*(int *)arg)
		fprintf(stderr, "\rstrata gen: %5.1f%% (%lld / %lld rows)",
			total ? 100.0 * (double)done / (double)total : 100.0,
			(long long)done, (long long)total);
}

int st_cmd_gen(int argc, char **argv)
{
	enum { O_ROWS = 1, O_OUT, O_SEED, O_ZIPF, O_VOCAB, O_FILES, O_EVAL, O_THREADS,
	       O_DAYS, O_DRIFT, O_HELP };
	static const struct option longopts[] = {
		{ "rows", required_argument, NULL, O_ROWS },
		{ "out", required_argument, NULL, O_OUT },
		{ "seed", required_argument, NULL, O_SEED },
		{ "zipf", required_argument, NULL, O_ZIPF },
		{ "vocab", required_argument, NULL, O_VOCAB },
		{ "files", required_argument, NULL, O_FILES },
		{ "eval-rows", required_argument, NULL, O_EVAL },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "days", required_argument, NULL, O_DAYS },
		{ "drift", required_argument, NULL, O_DRIFT },
		{ "help", no_argument, NULL, O_HELP },
		{ 0, 0, 0, 0 },
	};
	st_gen_opts_t o = {
		.dir = NULL, .rows = -1, .eval_rows = 0, .files = 1,
		.seed = 1, .zipf = 1.1, .vocab = 1000000, .threads = 0,
		.days = 0, .drift = 0.1,
	};
	int files_set = 0, drift_set = 0;
	double v;
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case O_ROWS:
			if (parse_num("--rows", optarg, 1, &v))
				return ST_EXIT_USAGE;
			o.rows = (int64_t)v;
			break;
		case O_OUT: o.dir = optarg; break;
		case O_SEED:
			if (parse_num("--seed", optarg, 0, &v))
				return ST_EXIT_USAGE;
			o.seed = (uint64_t)v;
			break;
		case O_ZIPF:
			if (parse_num("--zipf", optarg, 0, &v))
				return ST_EXIT_USAGE;
			o.zipf = v;
			break;
		case O_VOCAB:
			if (parse_num("--vocab", optarg, 1, &v))
				return ST_EXIT_USAGE;
			o.vocab = (uint64_t)v;
			break;
		case O_FILES:
			if (parse_num("--files", optarg, 1, &v) || v > 100000) {
				fprintf(stderr, "strata gen: --files must be between 1 and 100000\n");
				return ST_EXIT_USAGE;
			}
			o.files = (int)v;
			files_set = 1;
			break;
		case O_EVAL:
			if (parse_num("--eval-rows", optarg, 0, &v))
				return ST_EXIT_USAGE;
			o.eval_rows = (int64_t)v;
			break;
		case O_THREADS:
			if (parse_num("--threads", optarg, 1, &v))
				return ST_EXIT_USAGE;
			o.threads = (int)v;
			break;
		case O_DAYS:
			if (parse_num("--days", optarg, 0, &v) || v > ST_GEN_MAX_DAYS || v != (int)v) {
				fprintf(stderr, "strata gen: --days must be a whole number between 0 and %d\n",
					ST_GEN_MAX_DAYS);
				return ST_EXIT_USAGE;
			}
			o.days = (int)v;
			break;
		case O_DRIFT:
			if (parse_num("--drift", optarg, 0, &v) || v > 1) {
				fprintf(stderr, "strata gen: --drift must be a number between 0 and 1, got '%s'\n",
					optarg);
				return ST_EXIT_USAGE;
			}
			o.drift = v;
			drift_set = 1;
			break;
		case O_HELP:
			st_cli_help_for("gen", stdout);
			return ST_EXIT_OK;
		default:
			fprintf(stderr, "strata gen: unknown option or missing value '%s'\n"
					"Run 'strata help gen' for usage.\n", argv[optind - 1]);
			return ST_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "strata gen: unexpected argument '%s'\n", argv[optind]);
		return ST_EXIT_USAGE;
	}
	if (o.rows < 0 || !o.dir) {
		fprintf(stderr, "strata gen: --rows and --out are required\n"
				"Run 'strata help gen' for usage.\n");
		return ST_EXIT_USAGE;
	}
	if (o.days == 0 && drift_set) {
		fprintf(stderr, "strata gen: --drift needs --days N (N > 0): without days nothing drifts\n");
		return ST_EXIT_USAGE;
	}
	if (o.days > 0 && files_set && o.files != 1) {
		fprintf(stderr, "strata gen: --files cannot be used with --days: each day is one "
				"file, day-000.tsv .. day-%03d.tsv\n", o.days - 1);
		return ST_EXIT_USAGE;
	}
	if (o.days > 0 && o.rows < o.days) {
		fprintf(stderr, "strata gen: --rows (%lld) must be at least --days (%d): every "
				"day needs a row\n", (long long)o.rows, o.days);
		return ST_EXIT_USAGE;
	}
	int tty = isatty(2);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = st_gen_write(&o, progress, &tty);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (tty)
		fprintf(stderr, "\n");
	if (rc < 0) {
		fprintf(stderr, "strata gen: failed writing %s: %s\n", o.dir, st_strerror(rc));
		return ST_EXIT_FAILED;
	}
	double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	if (o.days > 0)
		printf("wrote %lld train rows in %d day%s (day-000.tsv .. day-%03d.tsv, drift %g) "
		       "and %lld eval rows%s to %s in %.2f s (%.0f rows/s)\n",
		       (long long)o.rows, o.days, o.days == 1 ? "" : "s", o.days - 1, o.drift,
		       (long long)o.eval_rows, o.eval_rows ? " (of the last day)" : "", o.dir, s,
		       (double)(o.rows + o.eval_rows) / (s > 0 ? s : 1));
	else
		printf("wrote %lld train rows in %d file%s and %lld eval rows to %s in %.2f s (%.0f rows/s)\n",
		       (long long)o.rows, o.files, o.files == 1 ? "" : "s", (long long)o.eval_rows,
		       o.dir, s, (double)(o.rows + o.eval_rows) / (s > 0 ? s : 1));
	return ST_EXIT_OK;
}
