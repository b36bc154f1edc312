/*
 * cmd_gen.c — `strata gen`: synthetic Criteo-format data (ops/gen).
 */
#include "cli.h"
#include "ops/gen/conv.h"
#include "ops/gen/cross.h"
#include "ops/gen/gen.h"
#include "runtime/err.h"
#include "runtime/metrics.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The range of one numeric option. Whole-number options accept 1e6 as well
 * as 1000000; digits alone are read exactly (a 64-bit seed), anything else
 * as a double. */
typedef struct numopt {
	const char *name;     /* "--rows" */
	double lo, hi;        /* inclusive bounds (lo exclusive with lo_open) */
	int whole;            /* an integer */
	int lo_open;          /* value > lo (zipf) */
	const char *hi_text;  /* hi as printed, when %.0f would round it */
} numopt_t;

/* Row indices of train data stay below the eval rows' (ops/gen/gen.h). */
#define MAX_ROWS ((double)ST_GEN_EVAL_BASE)

static const numopt_t opt_rows = { .name = "--rows", .lo = 1, .hi = MAX_ROWS, .whole = 1 };
static const numopt_t opt_eval = { .name = "--eval-rows", .lo = 0, .hi = MAX_ROWS, .whole = 1 };
static const numopt_t opt_seed = { .name = "--seed", .lo = 0, .hi = 18446744073709551615.0,
				   .whole = 1, .hi_text = "18446744073709551615" };
static const numopt_t opt_zipf = { .name = "--zipf", .lo = 0, .hi = 1e300, .lo_open = 1 };
static const numopt_t opt_vocab = { .name = "--vocab", .lo = 1, .hi = 4503599627370496.0 /* 2^52 */,
				    .whole = 1 };
static const numopt_t opt_files = { .name = "--files", .lo = 1, .hi = 100000, .whole = 1 };
static const numopt_t opt_threads = { .name = "--threads", .lo = 1, .hi = 4096, .whole = 1 };
static const numopt_t opt_days = { .name = "--days", .lo = 0, .hi = ST_GEN_MAX_DAYS, .whole = 1 };
static const numopt_t opt_drift = { .name = "--drift", .lo = 0, .hi = 1 };
static const numopt_t opt_mhot = { .name = "--multi-hot", .lo = 1, .hi = ST_GEN_MAX_LIST,
				   .whole = 1 };
static const numopt_t opt_hist = { .name = "--history", .lo = 1, .hi = ST_GEN_MAX_LIST,
				   .whole = 1 };
static const numopt_t opt_labels = { .name = "--labels", .lo = 1, .hi = ST_GEN_MAX_LABELS,
				     .whole = 1 };
static const numopt_t opt_cross = { .name = "--cross", .lo = 1, .hi = ST_GEN_MAX_CROSS,
				    .whole = 1 };

/* Prints "strata gen: --X must be a ... number between LO and HI, got 'S'"
 * and, when the value overflowed or passed a bound, says so. */
static void range_error(const numopt_t *o, const char *s, int overflow)
{
	if (o->lo_open)
		fprintf(stderr, "strata gen: %s must be a number > %g, got '%s'%s\n", o->name,
			o->lo, s, overflow ? " (out of range)" : "");
	else if (!o->whole)
		fprintf(stderr, "strata gen: %s must be a number between %g and %g, got '%s'%s\n",
			o->name, o->lo, o->hi, s, overflow ? " (out of range)" : "");
	else if (o->hi_text)
		fprintf(stderr, "strata gen: %s must be a whole number between %.0f and %s, got "
			"'%s'%s\n", o->name, o->lo, o->hi_text, s,
			overflow ? " (out of range)" : "");
	else
		fprintf(stderr, "strata gen: %s must be a whole number between %.0f and %.0f, got "
			"'%s'%s\n", o->name, o->lo, o->hi, s,
			overflow ? " (out of range)" : "");
}

/* Parses the value s of option o into *out (exact for digits-only whole
 * numbers up to 2^64 - 1 in *u). ST_OK, or ST_EINVAL with the reason
 * printed: not a number, not whole, out of range. */
static int parse_num(const numopt_t *o, const char *s, double *out, uint64_t *u)
{
	char *end = NULL;
	errno = 0;
	if (o->whole && s[0] && strspn(s, "0123456789") == strlen(s)) {
		unsigned long long x = strtoull(s, &end, 10);
		if (errno == ERANGE || (double)x > o->hi || (double)x < o->lo) {
			range_error(o, s, errno == ERANGE || (double)x > o->hi);
			return ST_EINVAL;
		}
		*out = (double)x;
		if (u)
			*u = x;
		return 0;
	}
	double v = strtod(s, &end);
	if (end == s || *end || v != v) {
		fprintf(stderr, "strata gen: %s must be a number, got '%s'\n", o->name, s);
		return ST_EINVAL;
	}
	/* strtod gives +-HUGE_VAL (ERANGE) past the double range and "inf"
	 * for inf: both out of range, never a value. */
	/* 2^64 itself equals the double nearest 2^64 - 1 (--seed's bound). */
	const int over = errno == ERANGE || !isfinite(v) || v > o->hi ||
			 (o->whole && v >= 18446744073709551616.0);
	if (over || v < o->lo || (o->lo_open && v <= o->lo)) {
		range_error(o, s, over);
		return ST_EINVAL;
	}
	if (o->whole && v != floor(v)) {
		range_error(o, s, 0);
		return ST_EINVAL;
	}
	*out = v;
	if (u)
		*u = (uint64_t)v;
	return 0;
}

/* st_gen_write calls it from one writer thread at a time. */
static void progress(int64_t done, int64_t total, void *arg)
{
	st_meter_update(arg, done, total);
}

int st_cmd_gen(int argc, char **argv)
{
	enum { O_ROWS = 1, O_OUT, O_SEED, O_ZIPF, O_VOCAB, O_FILES, O_EVAL, O_THREADS,
	       O_DAYS, O_DRIFT, O_MHOT, O_HIST, O_CROSS, O_LABELS, O_HELP };
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
		{ "multi-hot", required_argument, NULL, O_MHOT },
		{ "history", required_argument, NULL, O_HIST },
		{ "cross", required_argument, NULL, O_CROSS },
		{ "labels", required_argument, NULL, O_LABELS },
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
			if (parse_num(&opt_rows, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.rows = (int64_t)v;
			break;
		case O_OUT: o.dir = optarg; break;
		case O_SEED:
			if (parse_num(&opt_seed, optarg, &v, &o.seed))
				return ST_EXIT_USAGE;
			break;
		case O_ZIPF:
			if (parse_num(&opt_zipf, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.zipf = v;
			break;
		case O_VOCAB:
			if (parse_num(&opt_vocab, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.vocab = (uint64_t)v;
			break;
		case O_FILES:
			if (parse_num(&opt_files, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.files = (int)v;
			files_set = 1;
			break;
		case O_EVAL:
			if (parse_num(&opt_eval, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.eval_rows = (int64_t)v;
			break;
		case O_THREADS:
			if (parse_num(&opt_threads, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.threads = (int)v;
			break;
		case O_DAYS:
			if (parse_num(&opt_days, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.days = (int)v;
			break;
		case O_DRIFT:
			if (parse_num(&opt_drift, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.drift = v;
			drift_set = 1;
			break;
		case O_MHOT:
			if (parse_num(&opt_mhot, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.multi_hot = (int)v;
			break;
		case O_HIST:
			if (parse_num(&opt_hist, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.history = (int)v;
			break;
		case O_CROSS:
			if (parse_num(&opt_cross, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.cross = (int)v;
			break;
		case O_LABELS:
			if (parse_num(&opt_labels, optarg, &v, NULL))
				return ST_EXIT_USAGE;
			o.labels = (int)v;
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
	if (o.days > 0 && o.multi_hot) {
		fprintf(stderr, "strata gen: --multi-hot cannot be used with --days (the drifting "
				"model is single-hot)\n");
		return ST_EXIT_USAGE;
	}
	if (o.history && (o.days > 0 || o.multi_hot)) {
		fprintf(stderr, "strata gen: --history cannot be used with --days or --multi-hot "
				"(the history is a field of its own beside single-hot fields)\n");
		return ST_EXIT_USAGE;
	}
	if (o.cross && (o.days > 0 || o.multi_hot)) {
		fprintf(stderr, "strata gen: --cross cannot be used with --days or --multi-hot "
				"(the planted pairs are single-hot keys whose latents do not drift)\n");
		return ST_EXIT_USAGE;
	}
	if (o.labels > 1 && (o.days > 0 || o.multi_hot)) {
		fprintf(stderr, "strata gen: --labels 2 cannot be used with --days or --multi-hot "
				"(the conversion's latents are single-hot and do not drift)\n");
		return ST_EXIT_USAGE;
	}
	if (o.days > 0 && o.rows < o.days) {
		fprintf(stderr, "strata gen: --rows (%lld) must be at least --days (%d): every "
				"day needs a row\n", (long long)o.rows, o.days);
		return ST_EXIT_USAGE;
	}
	st_meter_t meter;
	st_meter_init(&meter, "strata gen", "rows");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = st_gen_write(&o, progress, &meter);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	st_meter_fini(&meter);
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
