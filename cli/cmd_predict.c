/*
 * cmd_predict.c — `strata predict` and `strata eval`: score data files with
 * a serving export (ops/view/predict.h).
 *
 *   strata predict EXPORT_DIR DATA... [--out FILE] [--format F] [--batch N]
 *   strata eval    EXPORT_DIR DATA... [--format F] [--batch N]
 *
 * EXPORT_DIR is a directory of exports (export-<seq>-full|delta/); the
 * newest full export and the deltas after it are applied. DATA are files or
 * glob patterns, read in the order given (a pattern's matches sorted) with
 * the training readers, so keys are hashed exactly as in training. A bad
 * record stops the command: skipping it would shift every later score
 * against its input line.
 *
 * predict writes one probability per line (%.9g, which a float reads back
 * exactly), in input order, to stdout or to FILE; a model of several heads
 * (docs/models.md, "Several labels") writes a header line naming the heads'
 * labels and then one tab-separated column per head; FILE is written under a
 * temporary name in its directory, fsynced and renamed, so it is either the
 * whole output or untouched. eval prints "auc X  logloss Y  examples N"
 * (exact AUC, ops/metrics/auc), followed by "  (K non-finite scores, left
 * out of the AUC)" when a diverged model scored NaN or infinity; each
 * further head adds "auc_<label> X  logloss_<label> Y".
 *
 * Exit status: 0 ok; 1 runtime failure (a damaged export, I/O, memory,
 * writing FILE); 2 usage error or bad input (no such export or data, no
 * complete full export, data the model cannot take, a bad record).
 */
#include "cli.h"
#include "lang/job.h"
#include "ops/view/predict.h"
#include "ops/metrics/auc.h"
#include "ops/read/read.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/metrics.h"

#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_BATCH 4096

typedef struct opts {
	const char *cmd;        /* "predict" | "eval" */
	const char *export_dir;
	const char *out;        /* predict --out, NULL = stdout */
	const char *format;     /* "criteo" | "libsvm" */
	const char *job;        /* --job JOB.lua: read DATA like the job's eval
				   (else train) source; NULL = --format */
	long batch;
	int threads;
	char **paths;           /* DATA expanded, in order */
	size_t n_paths;
} opts_t;

static void free_paths(opts_t *o)
{
	for (size_t i = 0; i < o->n_paths; i++)
		free(o->paths[i]);
	free(o->paths);
}

static void add_path(opts_t *o, const char *p)
{
	o->paths = realloc(o->paths, sizeof(char *) * (o->n_paths + 1));
	if (!o->paths)
		st_die("out of memory listing data files");
	o->paths[o->n_paths++] = st_xstrdup(p);
}

/* A file as given, or the sorted matches of a pattern. ST_OK; ST_EINVAL (a
 * directory) or ST_ENOENT (nothing there), said on stderr. */
static int expand(opts_t *o, const char *arg)
{
	struct stat sb;
	if (stat(arg, &sb) == 0) {
		if (S_ISDIR(sb.st_mode)) {
			fprintf(stderr, "strata %s: DATA '%s' is a directory (give files or a pattern "
				"such as '%s/*.tsv')\n", o->cmd, arg, arg);
			return ST_EINVAL;
		}
		add_path(o, arg);
		return 0;
	}
	glob_t g;
	memset(&g, 0, sizeof g);
	int rc = glob(arg, 0, NULL, &g);
	size_t n = 0;
	for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
		if (stat(g.gl_pathv[i], &sb) == 0 && !S_ISDIR(sb.st_mode)) {
			add_path(o, g.gl_pathv[i]);
			n++;
		}
	globfree(&g);
	if (!n) {
		fprintf(stderr, "strata %s: DATA '%s': no such file (and no file matches it as a "
			"pattern)\n", o->cmd, arg);
		return ST_ENOENT;
	}
	return 0;
}

/* A whole number in [lo, hi] (lo >= 0), or ST_EINVAL (said). */
static long parse_long(const char *cmd, const char *opt, const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "strata %s: %s must be an integer from %ld to %ld, got '%s'\n", cmd,
			opt, lo, hi, s);
		return ST_EINVAL;
	}
	return v;
}

/* Parses argv; returns ST_EXIT_OK (and fills o), or an exit status to
 * return (help printed: ST_EXIT_OK with o->export_dir NULL). */
static int parse(int argc, char **argv, opts_t *o)
{
	enum { O_OUT = 1, O_FORMAT, O_BATCH, O_THREADS, O_JOB, O_HELP };
	static const struct option longopts[] = {
		{ "out", required_argument, NULL, O_OUT },
		{ "format", required_argument, NULL, O_FORMAT },
		{ "batch", required_argument, NULL, O_BATCH },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "job", required_argument, NULL, O_JOB },
		{ "help", no_argument, NULL, O_HELP },
		{ 0, 0, 0, 0 },
	};
	const int predict = !strcmp(o->cmd, "predict");
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case O_OUT:
			if (!predict) {
				fprintf(stderr, "strata eval: --out is an option of predict (eval prints "
					"its metrics)\nRun 'strata help eval' for usage.\n");
				return ST_EXIT_USAGE;
			}
			o->out = optarg;
			break;
		case O_FORMAT:
			if (strcmp(optarg, "criteo") && strcmp(optarg, "libsvm")) {
				fprintf(stderr, "strata %s: --format must be criteo or libsvm, got '%s'\n",
					o->cmd, optarg);
				return ST_EXIT_USAGE;
			}
			o->format = optarg;
			break;
		case O_JOB:
			o->job = optarg;
			break;
		case O_BATCH:
			if ((o->batch = parse_long(o->cmd, "--batch", optarg, 1, 1 << 24)) < 0)
				return ST_EXIT_USAGE;
			break;
		case O_THREADS:
			if ((o->threads = (int)parse_long(o->cmd, "--threads", optarg, 1,
							  ST_MAX_STAGE_THREADS)) < 0)
				return ST_EXIT_USAGE;
			break;
		case O_HELP:
			st_cli_help_for(o->cmd, stdout);
			return ST_EXIT_OK;
		default:
			if (c == '?' && optopt)
				fprintf(stderr, "strata %s: option '%s' needs a value\n", o->cmd,
					argv[optind - 1]);
			else
				fprintf(stderr, "strata %s: unknown option '%s'\n", o->cmd,
					argv[optind - 1]);
			fprintf(stderr, "Run 'strata help %s' for usage.\n", o->cmd);
			return ST_EXIT_USAGE;
		}
	}
	if (argc - optind < 2) {
		fprintf(stderr, "strata %s: %s\nRun 'strata help %s' for usage.\n", o->cmd,
			optind >= argc ? "missing EXPORT_DIR and DATA" : "missing DATA", o->cmd);
		return ST_EXIT_USAGE;
	}
	o->export_dir = argv[optind];
	struct stat sb;
	if (stat(o->export_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		fprintf(stderr, "strata %s: EXPORT_DIR '%s': %s\n", o->cmd, o->export_dir,
			stat(o->export_dir, &sb) != 0 ? "no such directory" : "not a directory");
		return ST_EXIT_USAGE;
	}
	for (int i = optind + 1; i < argc; i++)
		if (expand(o, argv[i]) < 0)
			return ST_EXIT_USAGE;
	return ST_EXIT_OK;
}

static void note(void *arg, const char *msg)
{
	fprintf(stderr, "strata %s: note: %s\n", (const char *)arg, msg);
}

/* Where the scores go: predict's output, or eval's accumulators. */
typedef struct sink {
	FILE *f;            /* predict */
	float *pred, *label; /* eval: [n × H], each head's score and label */
	size_t n, cap;
	float *buf;         /* one batch of scores, [n × H] */
	const st_model_t *model;
	int H;              /* the model's heads: score columns */
} sink_t;

static int sink_put(sink_t *s, const st_batch_t *b, int eval)
{
	const size_t H = (size_t)s->H;
	if (!eval) {
		/* One column per head, tab-separated (one head: one per line). */
		for (uint32_t i = 0; i < b->n; i++)
			for (size_t h = 0; h < H; h++)
				if (fprintf(s->f, "%.9g%c", s->buf[i * H + h],
					    h + 1 < H ? '\t' : '\n') < 0)
					return ST_EIO;
		s->n += b->n;
		return ST_OK;
	}
	if (s->n + b->n > s->cap) {
		size_t cap = s->cap ? s->cap : 1 << 16;
		while (cap < s->n + b->n)
			cap *= 2;
		float *p = realloc(s->pred, sizeof(float) * cap * H);
		if (!p)
			return ST_ENOMEM;
		s->pred = p;
		float *l = realloc(s->label, sizeof(float) * cap * H);
		if (!l)
			return ST_ENOMEM;
		s->label = l;
		s->cap = cap;
	}
	memcpy(s->pred + s->n * H, s->buf, sizeof(float) * b->n * H);
	for (size_t h = 0; h < H; h++) {
		/* head h's own label (run() checked the data has it) */
		const uint32_t l = (uint32_t)st_model_head_label(s->model, (int)h);
		for (uint32_t i = 0; i < b->n; i++)
			s->label[(s->n + i) * H + h] = b->labels[(size_t)i * b->n_labels + l];
	}
	s->n += b->n;
	return ST_OK;
}

/* eval's numbers of head h: "auc X  logloss Y  examples N" for head 0 (the
 * line of a one-head model), "auc_<label> X  logloss_<label> Y" after it.
 * Returns an exit status. */
static int eval_head(sink_t *s, int h, const char *last)
{
	const size_t H = (size_t)s->H;
	const float *pred = s->pred, *label = s->label;
	float *col = NULL;
	if (H > 1) {
		col = malloc(sizeof(float) * 2 * s->n);
		if (!col) {
			fprintf(stderr, "strata eval: out of memory\n");
			return ST_EXIT_FAILED;
		}
		for (size_t i = 0; i < s->n; i++) {
			col[i] = s->pred[i * H + (size_t)h];
			col[s->n + i] = s->label[i * H + (size_t)h];
		}
		pred = col;
		label = col + s->n;
	}
	double auc = 0;
	size_t nf = 0;
	if (st_auc_exact_finite(pred, label, s->n, &auc, &nf) < 0) {
		fprintf(stderr, "strata eval: out of memory computing the AUC\n");
		free(col);
		return ST_EXIT_FAILED;
	}
	/* A diverged model scores NaN or inf: the AUC ranks the finite scores
	 * only (nan when none or one class is left) and the line says how many
	 * were left out. */
	double ll = st_logloss(pred, label, s->n);
	const char *nm = st_model_head_name(s->model, h);
	if (h == 0)
		printf("auc %.6f  logloss %.6f  examples %zu", isnan(auc) ? NAN : auc,
		       isnan(ll) ? NAN : ll, s->n);
	else
		printf("auc_%s %.6f  logloss_%s %.6f", nm, isnan(auc) ? NAN : auc, nm,
		       isnan(ll) ? NAN : ll);
	if (nf)
		printf("  (%zu non-finite scores, left out of the AUC)", nf);
	printf("\n");
	if (nf)
		fprintf(stderr, "strata eval: warning: %zu of %zu scores are not finite "
			"(NaN or infinite): the model in %s diverged\n", nf, s->n, last);
	free(col);
	return ST_EXIT_OK;
}

/* Reads every DATA file into batches (a batch may span files, so scores do
 * not depend on where files end), scores and sinks them. Returns an exit
 * status, the reason said on stderr. */
static int score_all(const opts_t *o, st_predictor_t *p, const st_source_t *src, sink_t *s,
		     int eval)
{
	st_batch_t *b;
	const uint32_t cap = (uint32_t)o->batch;
	if (st_batch_create(&b, cap, (uint32_t)src->n_dense, (uint32_t)src->n_slots,
			    cap * (uint32_t)(src->n_slots + 1)) < 0 ||
	    st_batch_set_labels(b, (uint32_t)st_source_labels(src)) < 0 ||
	    !(s->buf = malloc(sizeof(float) * cap * (size_t)s->H))) {
		st_batch_destroy(b);
		fprintf(stderr, "strata %s: out of memory for a batch of %u examples\n", o->cmd, cap);
		return ST_EXIT_FAILED;
	}
	int status = ST_EXIT_OK;
	uint64_t seq = 0;
	int64_t scored = 0;
	char what[32];
	snprintf(what, sizeof what, "strata %s", o->cmd);
	st_meter_t meter;   /* the number of examples is known only at the end */
	st_meter_init(&meter, what, "examples");
	for (size_t i = 0; i <= o->n_paths && status == ST_EXIT_OK; i++) {
		st_reader_t *r = NULL;
		if (i < o->n_paths) {
			int rc = st_reader_open(&r, src, o->paths[i]);   /* logs why */
			if (rc < 0) {
				status = rc == ST_ENOENT ? ST_EXIT_USAGE : ST_EXIT_FAILED;
				break;
			}
		}
		for (;;) {
			int n = 0;
			if (r && b->n < b->cap) {
				n = st_reader_next(r, b, b->cap - b->n);
				if (n < 0) {
					fprintf(stderr, "strata %s: %s%s\n", o->cmd,
						n == ST_EBADREC ? "bad record: " : "", st_reader_error(r));
					status = n == ST_EBADREC ? ST_EXIT_USAGE : ST_EXIT_FAILED;
					break;
				}
			}
			/* Score a full batch, or what is left after the last file. */
			if (b->n == b->cap || (!r && b->n)) {
				b->seq = seq++;
				int rc = st_predictor_score(p, b, s->buf);
				if (rc >= 0)
					rc = sink_put(s, b, eval);
				if (rc < 0) {
					fprintf(stderr, "strata %s: %s\n", o->cmd,
						rc == ST_EIO ? "cannot write the scores" : st_strerror(rc));
					status = ST_EXIT_FAILED;
					break;
				}
				scored += b->n;
				st_meter_update(&meter, scored, 0);
				st_batch_clear(b);
				continue;
			}
			if (!r || n == 0)
				break;
		}
		st_reader_close(r);
	}
	st_meter_fini(&meter);
	st_batch_destroy(b);
	return status;
}

/* predict's output file: FILE.tmp.<pid> beside it, renamed at the end. */
static int out_finish(const char *out, const char *tmp, FILE *f, const char *cmd)
{
	int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
	int e = errno;
	if (fclose(f) != 0 && !bad) {
		bad = 1;
		e = errno;
	}
	if (!bad && rename(tmp, out) != 0) {
		bad = 1;
		e = errno;
	}
	if (bad) {
		fprintf(stderr, "strata %s: cannot write %s: %s\n", cmd, out, strerror(e));
		unlink(tmp);
		return ST_EXIT_FAILED;
	}
	return ST_EXIT_OK;
}

static int run(int argc, char **argv, const char *cmd)
{
	opts_t o = { .cmd = cmd, .format = "criteo", .batch = DEFAULT_BATCH, .threads = 1 };
	int status = parse(argc, argv, &o);
	if (status != ST_EXIT_OK || !o.export_dir) {
		free_paths(&o);
		return status;
	}
	const int eval = !strcmp(cmd, "eval");
	st_predictor_t *p;
	char err[2048] = "";
	st_predictor_opts_t po = { .threads = o.threads, .msg = note, .arg = (void *)cmd };
	int rc = st_predictor_open(&p, o.export_dir, &po, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "strata %s: %s\n", cmd, err);
		free_paths(&o);
		return rc == ST_ENOENT || rc == ST_EFORMAT ? ST_EXIT_USAGE : ST_EXIT_FAILED;
	}
	st_predictor_info_t info;
	st_predictor_info(p, &info);

	/* The data's shape must be the model's. */
	st_source_t src;
	memset(&src, 0, sizeof src);
	st_job_t *job = NULL;
	if (o.job) {
		/* The job's eval (else train) source says how to read DATA: a csv
		 * schema with list fields, missing keys, dense indicators. */
		st_cli_opts_t co;
		memset(&co, 0, sizeof co);
		co.job_path = o.job;
		if (st_cli_load_job(&co, 0, &job) != ST_EXIT_OK) {
			st_predictor_close(p);
			free_paths(&o);
			return ST_EXIT_USAGE;
		}
		src = job->has_eval ? job->eval : job->train;
		o.format = src.format;
	} else {
		src.format = (char *)o.format;
		src.sep = ',';
		const int criteo = !strcmp(o.format, "criteo");
		src.n_dense = criteo ? 13 : 0;
		src.n_slots = criteo ? 26 : info.n_slots;
	}
	src.on_bad = ST_BAD_FAIL;
	src.max_report = 0;
	src.limit = -1;
	if (src.n_dense != info.n_dense || src.n_slots != info.n_slots) {
		fprintf(stderr, "strata %s: incompatible data: the model of %s takes %d dense "
			"features and %d slots; %s data has %d dense features and %d slots\n", cmd,
			info.last, info.n_dense, info.n_slots, o.format, src.n_dense, src.n_slots);
		st_predictor_close(p);
		free_paths(&o);
		st_job_free(job);
		return ST_EXIT_USAGE;
	}

	sink_t s = { 0 };
	s.model = st_predictor_view(p)->model;
	s.H = st_model_nheads(s.model);
	/* eval scores each head against its own label: the data must have it
	 * (a multi-task model's job, --job, says how to read its labels). */
	for (int h = 0; eval && h < s.H; h++)
		if (st_model_head_label(s.model, h) >= st_source_labels(&src)) {
			fprintf(stderr, "strata eval: head '%s' of the model of %s learns label %d, "
				"the data has %d label%s; pass --job JOB (the job's data says how "
				"to read every label)\n", st_model_head_name(s.model, h), info.last,
				st_model_head_label(s.model, h) + 1, st_source_labels(&src),
				st_source_labels(&src) == 1 ? "" : "s");
			st_predictor_close(p);
			free_paths(&o);
			st_job_free(job);
			return ST_EXIT_USAGE;
		}
	char *tmp = NULL;
	/* Scores on the terminal itself: a progress line would be drawn over
	 * them, so there is none. */
	if (!eval && !o.out && isatty(1))
		st_meter_set_tty(0);
	if (!eval) {
		s.f = stdout;
		if (o.out) {
			size_t n = strlen(o.out) + 32;
			tmp = st_xmalloc(n);
			snprintf(tmp, n, "%s.tmp.%ld", o.out, (long)getpid());
			if (!(s.f = fopen(tmp, "w"))) {
				fprintf(stderr, "strata %s: cannot create %s: %s\n", cmd, tmp,
					strerror(errno));
				free(tmp);
				st_predictor_close(p);
				free_paths(&o);
				st_job_free(job);
				return ST_EXIT_FAILED;
			}
		}
	}
	/* Several heads: a header line names the score columns (one head
	 * writes none, as before heads). */
	if (!eval && s.H > 1) {
		for (int h = 0; h < s.H; h++)
			fprintf(s.f, "%s%c", st_model_head_name(s.model, h), h + 1 < s.H ? '\t' : '\n');
	}
	status = score_all(&o, p, &src, &s, eval);
	if (!eval && o.out) {
		if (status == ST_EXIT_OK)
			status = out_finish(o.out, tmp, s.f, cmd);
		else {
			fclose(s.f);
			unlink(tmp);
		}
		if (status == ST_EXIT_OK)
			fprintf(stderr, "strata predict: %zu scores written to %s (model %s, seq %" PRId64
				", step %" PRId64 ")\n", s.n, o.out, info.last, info.seq, info.step);
	} else if (!eval && status == ST_EXIT_OK && fflush(stdout) != 0) {
		fprintf(stderr, "strata predict: cannot write the scores: %s\n", strerror(errno));
		status = ST_EXIT_FAILED;
	}
	if (eval && status == ST_EXIT_OK) {
		if (!s.n) {
			fprintf(stderr, "strata eval: the data holds no examples\n");
			status = ST_EXIT_USAGE;
		}
		for (int h = 0; status == ST_EXIT_OK && h < s.H; h++)
			status = eval_head(&s, h, info.last);
	}
	free(tmp);
	free(s.pred);
	free(s.label);
	free(s.buf);
	st_predictor_close(p);
	free_paths(&o);
	st_job_free(job);
	return status;
}

int st_cmd_predict(int argc, char **argv)
{
	return run(argc, argv, "predict");
}

int st_cmd_eval(int argc, char **argv)
{
	return run(argc, argv, "eval");
}
