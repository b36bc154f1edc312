/*
 * cmd_run.c — `strata run`, `strata check` and `strata plan`.
 *
 * run: load and validate the job (nothing starts on an error), generate its
 * synthetic data if declared and absent, place the stage threads on this
 * machine's topology, run the training graph read -> pull -> train -> push ->
 * dump with a progress reporter, then score the eval source through the same
 * stages with batches marked eval.
 *
 * A job with `phases` runs one training graph per phase, in order, on the
 * same trainer (model, rows, optimizer state): before each, the trainer
 * switches to the phase's policy (st_trainer_set_policy); the phase reads
 * its own `data` or the job's train source, at most `rows` rows of it
 * (from its start: the read stage's limit). After each phase a line is
 * printed and a {"phase": ...} record is appended to the metrics file, and
 * the eval source, if any, is scored.
 *
 * Threads: the main thread runs the graph; one signal thread ("st-signal")
 * turns SIGINT/SIGTERM, which a handler in whatever thread the kernel picks
 * passes it through a pipe, into st_graph_cancel (and st_trainer_cancel,
 * which cuts straggler delays short and stops interval checkpoints) so ^C
 * stops the job cleanly, every batch is still freed exactly once, and only
 * complete checkpoints are left ("signals" below says why a handler).
 */
#include "cli.h"
#include "lang/lang.h"
#include "ops/gen/gen.h"
#include "ops/read/read.h"
#include "ops/sync/registry.h"
#include "ops/dump/ckpt.h"
#include "ops/train/checkpoint.h"
#include "ops/train/trainer.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/metrics.h"
#include "runtime/net/net.h"
#include "runtime/topo.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* mkdir -p; returns 0 or -errno. */
static int mkdir_p(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof buf)
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0777) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0777) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int mkdir_parent(const char *file)
{
	const char *slash = strrchr(file, '/');
	if (!slash || slash == file)
		return 0;
	char buf[4096];
	size_t n = (size_t)(slash - file);
	if (n >= sizeof buf)
		return -ENAMETOOLONG;
	memcpy(buf, file, n);
	buf[n] = 0;
	return mkdir_p(buf);
}

/* ---- signals ------------------------------------------------------------ */

/*
 * SIGINT and SIGTERM stop a run cleanly: the first one cancels the graph
 * (reading stops, every batch in flight is freed once) and the trainer (no
 * interval checkpoint starts after it; one whose copy has begun is written
 * to the end, so it is complete or, if the write fails, removed: never a
 * .tmp left behind; one whose copy had not begun is skipped, see
 * st__trainer_ckpt_gate), no final checkpoint or export is written, and the
 * run exits with 128 + the signal's number (130 for SIGINT, 143 for
 * SIGTERM).
 *
 * Why a handler and not a blocked mask with sigwait: a process-directed
 * signal goes to any thread that does not block it, and some threads exist
 * before main runs: OpenBLAS starts its thread pool in its library
 * constructor, which the dynamic loader runs before any constructor of this
 * program, so neither main nor a constructor of ours can block the signals
 * there (only .preinit_array could, and only for libraries linked at start,
 * not ones loaded or threads started later with their own mask). Such a
 * thread with the default action ended the whole process at once, mid-
 * checkpoint (issue 15). The handler below does nothing but count the
 * signal and write its number to a pipe, which is async-signal-safe and
 * correct in whichever thread the kernel runs it; the st-signal thread
 * reads the pipe and does the rest (locks, st_graph_cancel, messages).
 * Threads started after signals_start still block the signals (the mask is
 * inherited), so stage threads are seldom interrupted; SA_RESTART restarts
 * the system calls that can be restarted in the ones that are.
 *
 * A second signal ends the process at once, from the handler (_exit is
 * async-signal-safe): a checkpoint being written then stays a
 * ckpt-<step>.tmp directory, which resume ignores and the next checkpoint
 * removes; a directory under a final name is always complete
 * (ops/dump/ckpt.h).
 *
 * A signal ignored when the program started stays ignored, the Unix
 * convention (a job started in the background of a non-interactive shell
 * ignores SIGINT, so that a ^C meant for the shell's foreground job does not
 * stop it).
 */
static struct {
	pthread_t thread;
	int pipe[2];                 /* the handler writes signal numbers; 0 = stop */
	atomic_int count;            /* signals received */
	atomic_int signo;            /* the first one (0: none) */
	pthread_mutex_t lock;        /* graph, trainer */
	st_graph_t *graph;
	st_trainer_t *trainer;
	int ckpt;                    /* the job writes checkpoints (for the message) */
} sig = { .pipe = { -1, -1 }, .lock = PTHREAD_MUTEX_INITIALIZER };

static const char *sig_name(int s)
{
	return s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : "a signal";
}

static int interrupted(void)
{
	return atomic_load(&sig.signo);
}

static void on_signal(int s)
{
	int saved = errno;
	if (atomic_fetch_add(&sig.count, 1) > 0) {
		static const char msg[] = "strata: second signal: exiting now\n";
		ssize_t w = write(2, msg, sizeof msg - 1);
		(void)w;
		_exit(128 + s);
	}
	int expected = 0;
	atomic_compare_exchange_strong(&sig.signo, &expected, s);
	unsigned char b = (unsigned char)s;
	ssize_t w = write(sig.pipe[1], &b, 1);
	(void)w;
	errno = saved;
}

static void *signal_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "st-signal");
	/* This thread takes the signals when no older thread does. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	for (;;) {
		unsigned char b = 0;
		ssize_t n = read(sig.pipe[0], &b, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || b == 0)
			return NULL;
		fprintf(stderr, "strata: interrupted by %s: stopping%s (a second signal exits at "
			"once)\n", sig_name(b), sig.ckpt ? "; a checkpoint being written is finished "
			"first" : "");
		pthread_mutex_lock(&sig.lock);
		if (sig.graph)
			st_graph_cancel(sig.graph, b == SIGINT ? "interrupted (SIGINT)"
							       : "terminated (SIGTERM)");
		if (sig.trainer)
			st_trainer_cancel(sig.trainer);
		pthread_mutex_unlock(&sig.lock);
	}
}

/* Installs the handler (for the signals not ignored at start), blocks the
 * signals in this thread and every thread created from now on, and starts
 * the thread that acts on them. */
static void signals_start(void)
{
	if (pipe2(sig.pipe, O_CLOEXEC) < 0 ||
	    fcntl(sig.pipe[1], F_SETFL, fcntl(sig.pipe[1], F_GETFL) | O_NONBLOCK) < 0)
		st_die("cannot create the signal pipe: %s", strerror(errno));
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (pthread_create(&sig.thread, NULL, signal_main, NULL) != 0)
		st_die("cannot start the signal thread");
	const int sigs[] = { SIGINT, SIGTERM };
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		struct sigaction old, sa;
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_signal;
		sa.sa_flags = SA_RESTART;
		sigfillset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
}

static void signals_set_graph(st_graph_t *g)
{
	pthread_mutex_lock(&sig.lock);
	sig.graph = g;
	pthread_mutex_unlock(&sig.lock);
	if (g && interrupted())
		st_graph_cancel(g, "interrupted");
}

static void signals_set_trainer(st_trainer_t *tr)
{
	pthread_mutex_lock(&sig.lock);
	sig.trainer = tr;
	pthread_mutex_unlock(&sig.lock);
	if (tr && interrupted())
		st_trainer_cancel(tr);
}

/* Stops the signal thread. The handler stays: a signal from now on is
 * recorded (and a second one still exits at once) but cancels nothing. */
static void signals_stop(void)
{
	pthread_mutex_lock(&sig.lock);
	sig.graph = NULL;
	sig.trainer = NULL;
	pthread_mutex_unlock(&sig.lock);
	unsigned char b = 0;
	while (write(sig.pipe[1], &b, 1) < 0 && errno == EINTR)
		;
	pthread_join(sig.thread, NULL);
}

/* ---- data generation ---------------------------------------------------- */

static void gen_progress(int64_t done, int64_t total, void *arg)
{
	int tty = *(int *)arg;
	if (tty)
		fprintf(stderr, "\rstrata: generating data: %5.1f%% (%lld / %lld rows)",
			total ? 100.0 * (double)done / (double)total : 100.0,
			(long long)done, (long long)total);
}

static int file_exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Generates the job's synthetic data when declared and not all present.
 * The generator renames each file into place only when complete, so a file
 * that exists is whole. */
static int maybe_generate(st_job_t *job, int tty)
{
	if (!job->gen.enabled)
		return 0;
	if (!job->gen.used) {
		/* Every data path was pointed away from generate.dir. */
		st_info("data.generate: no data path is under %s; nothing is generated",
			job->gen.dir);
		return 0;
	}
	char path[4096];
	int have = 1;
	/* With days the train files are day-000.tsv .. day-<days-1>.tsv. */
	int n_train = job->gen.days > 0 ? job->gen.days : job->gen.files;
	for (int i = 0; i < n_train && have; i++) {
		if (job->gen.days > 0)
			snprintf(path, sizeof path, "%s/day-%03d.tsv", job->gen.dir, i);
		else
			snprintf(path, sizeof path, "%s/train-%05d.tsv", job->gen.dir, i);
		have = file_exists(path);
	}
	if (have && job->gen.eval_rows > 0) {
		snprintf(path, sizeof path, "%s/eval.tsv", job->gen.dir);
		have = file_exists(path);
	}
	if (have)
		return 0;
	st_info("generating %lld train + %lld eval rows of synthetic data in %s (seed %llu)",
		(long long)job->gen.rows, (long long)job->gen.eval_rows, job->gen.dir,
		(unsigned long long)job->gen.seed);
	if (job->gen.days > 0)
		st_info("as %d days day-000.tsv .. day-%03d.tsv, drift %g", job->gen.days,
			job->gen.days - 1, job->gen.drift);
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
	};
	double t0 = now_s();
	int rc = st_gen_write(&go, gen_progress, &tty);
	if (tty)
		fprintf(stderr, "\n");
	if (rc < 0) {
		st_error("generating data in %s failed: %s", job->gen.dir, st_strerror(rc));
		return rc;
	}
	st_info("generated data in %.1f s", now_s() - t0);
	if ((rc = st_job_expand_paths(&job->train)) < 0)
		return rc;
	if (job->has_eval && (rc = st_job_expand_paths(&job->eval)) < 0)
		return rc;
	return 0;
}

/* ---- the pipeline ------------------------------------------------------- */

typedef struct run_ctx {
	st_job_t *job;
	const st_trainer_ckpt_cfg_t *ckpt;
	uint64_t export_seq;       /* the next export's number */
	st_trainer_resume_t pos;   /* where the train pass starts (resume) */
	int resumed;
	st_metrics_t *metrics;
	st_trainer_t *model;
	st_place_req_t place[ST_CLI_NSTAGES];
	int pin;
	st_net_t *net;             /* a multi-process job; NULL in one process */
	/* End-of-training (or end-of-phase) checkpoints and exports that were
	 * not written: each failure is reported where it happens, the other
	 * steps still run, and the job exits non-zero (end_failed). */
	int ckpt_failed, export_failed;
	int metrics_err;           /* a write to the metrics file failed (logged) */
} run_ctx_t;

enum { TRAIN_STAGE = 2 };   /* index of "train" in st_cli_stage_names */

/* Builds read -> pull -> train -> push -> dump over `reader`. states may be
 * NULL (plan only). */
static int build_graph(st_graph_t **out, const st_job_t *job,
		       const st_place_req_t *place, int pin, void *read_state,
		       void *model)
{
	const st_stage_ops_t *ops[ST_CLI_NSTAGES] = {
		&st_read_stage_ops, &st_trainer_pull_ops, &st_trainer_train_ops,
		&st_trainer_push_ops, &st_trainer_dump_ops,
	};
	st_graph_t *g = NULL;
	int rc = st_graph_create(&g);
	if (rc < 0)
		return rc;
	for (int i = 0; i < ST_CLI_NSTAGES; i++) {
		const st_stage_cfg_t *c = st_cli_stage_cfg(job, i);
		st_stage_desc_t d;
		memset(&d, 0, sizeof d);
		d.name = st_cli_stage_names[i];
		d.ops = ops[i];
		d.state = i == 0 ? read_state : model;
		/* The train stage is one graph thread; it runs the job's
		 * workers itself (trainer.h). */
		d.n_threads = i == TRAIN_STAGE ? 1 : c->threads;
		d.queue_cap = c->queue;
		for (int t = 0; t < ST_MAX_STAGE_THREADS; t++)
			d.cpus[t] = (pin && t < c->threads && t < 64) ? place[i].cpus[t] : -1;
		if ((rc = st_graph_add_stage(g, &d)) < 0) {
			st_graph_destroy(g);
			return rc;
		}
	}
	*out = g;
	return 0;
}

/* Runs one pass (training or eval) of the graph over `src`. Returns 0 or
 * the error (message printed). */
static int run_pass(run_ctx_t *rc_, const st_source_t *src, int epochs, int eval,
		    const char *metrics_path, int progress, double *secs,
		    st_read_stats_t *rstats)
{
	st_read_stage_t *rs = NULL;
	st_graph_t *g = NULL;
	st_progress_t *pr = NULL;
	int rc = st_read_stage_create(&rs, src, (uint32_t)rc_->job->batch_size, epochs, eval);
	if (rc < 0) {
		st_error("cannot start the read stage: %s", st_strerror(rc));
		return rc;
	}
	if (rc_->net && (rc = st_read_stage_shard(rs, st_net_rank(rc_->net),
						  st_net_size(rc_->net))) < 0) {
		st_read_stage_destroy(rs);
		return rc;
	}
	if (!eval && rc_->resumed &&
	    (rc = st_read_stage_seek(rs, rc_->pos.file, rc_->pos.records, rc_->pos.pass_batches,
				     rc_->pos.pass_examples)) < 0) {
		st_error("%s: the checkpoint's data position (file %llu, record %llu) is past "
			 "the data", rc_->pos.dir, (unsigned long long)rc_->pos.file,
			 (unsigned long long)rc_->pos.records);
		st_read_stage_destroy(rs);
		return rc;
	}
	if (!eval)
		rc_->resumed = 0;   /* only the first training pass continues mid-way */
	if (rc_->net)
		st_trainer_dist_pass(rc_->model, eval);
	rc = build_graph(&g, rc_->job, rc_->place, rc_->pin, rs, rc_->model);
	if (rc < 0)
		goto out;
	if (progress || metrics_path) {
		rc = st_progress_start(&pr, g, rc_->metrics, rc_->job->progress_secs,
				       metrics_path, progress);
		if (rc < 0) {
			st_error("cannot write metrics to %s: %s", metrics_path, st_strerror(rc));
			goto out;
		}
	}
	signals_set_graph(g);
	double t0 = now_s();
	rc = st_graph_run(g);
	*secs = now_s() - t0;
	signals_set_graph(NULL);
	if (st_progress_stop(pr) < 0)
		rc_->metrics_err = 1;
	st_read_stage_totals(rs, rstats);
	/* A pass canceled by ^C is no error to print (the signal thread said
	 * so), but it did not complete: rc stays. */
	if (rc < 0 && !(rc == ST_ECANCELED && interrupted()))
		fprintf(stderr, "strata: error: %s\n",
			st_graph_error(g) ? st_graph_error(g) : st_strerror(rc));
	else if (rc >= 0)
		rc = st_read_stage_check_bad(rs, eval ? "eval" : "train");   /* logs */
out:
	st_graph_destroy(g);
	st_read_stage_destroy(rs);
	return rc;
}

/* The checkpoint at the end of training (when the job has checkpoints and
 * the last interval did not just write one). */
static int final_checkpoint(run_ctx_t *rc_, const st_trainer_ckpt_cfg_t *cfg)
{
	if (!rc_->job->ckpt_dir || interrupted() || st_trainer_checkpoint_current(rc_->model))
		return 0;
	st_trainer_snap_t *s = NULL;
	int rc = st_trainer_snapshot(rc_->model, NULL, &s);
	char err[1024] = "";
	if (rc >= 0)
		rc = st_trainer_snap_write(rc_->model, s, cfg, err, sizeof err);
	else
		snprintf(err, sizeof err, "%s", st_strerror(rc));
	if (rc >= 0) {
		st_info("checkpoint %s/ckpt-%012lld written", cfg->dir,
			(long long)st_trainer_snap_step(s));
	} else {
		st_error("final checkpoint not written: %s", err);
		rc_->ckpt_failed++;
	}
	st_trainer_snap_destroy(s);
	return rc;
}

static void print_count(FILE *f, uint64_t n)
{
	if (n >= 1000000)
		fprintf(f, "%.1fM", (double)n / 1e6);
	else if (n >= 10000)
		fprintf(f, "%.1fk", (double)n / 1e3);
	else
		fprintf(f, "%llu", (unsigned long long)n);
}

/* Every model preset and optimizer runs; sync policies are looked up in
 * the registry (ops/sync), so the names lang/ validates but this version
 * does not implement are refused here, before anything starts. */
static int check_one(const st_job_t *job, const st_sync_cfg_t *cfg)
{
	const char *m = st_trainer_policy_missing(cfg);
	if (!m)
		return ST_EXIT_OK;
	char names[256];
	fprintf(stderr, "%s: sync policy '%s' is valid but not implemented in this version; "
		"implemented: %s\n", job->file, m, st_policy_names(names, sizeof names, 0, 0));
	return ST_EXIT_USAGE;
}

static int check_implemented(const st_job_t *job)
{
	int ec = job->n_phases ? ST_EXIT_OK : check_one(job, &job->sync);
	for (int i = 0; i < job->n_phases && ec == ST_EXIT_OK; i++)
		ec = check_one(job, &job->phases[i].sync);
	return ec;
}

/* Scores src (an eval pass) with the model as it is: *auc etc. cover
 * every rank's share of it in a multi-process job (rank 0 collects them;
 * the other ranks get NAN). ST_OK or the pass's error. */
static int run_eval_of(run_ctx_t *rc_, const st_source_t *src, double *secs, double *auc,
		       double *ll, double *calib, uint64_t *n)
{
	st_read_stats_t es = { 0 };
	st_trainer_reset_eval(rc_->model);
	int rc = run_pass(rc_, src, 1, 1, NULL, 0, secs, &es);
	if (rc >= 0 && rc_->net && (rc = st_trainer_dist_eval_gather(rc_->model)) < 0)
		st_error("cannot collect the eval results of the other ranks");
	if (rc < 0)
		return rc;
	*auc = *ll = *calib = NAN;
	*n = 0;
	if (rc_->net && st_net_rank(rc_->net) != 0)
		return ST_OK;
	return st_trainer_eval_result(rc_->model, auc, ll, calib, n);
}

/* The job's eval data. */
static int run_eval(run_ctx_t *rc_, double *auc, double *ll, double *calib, uint64_t *n)
{
	double secs = 0;
	return run_eval_of(rc_, &rc_->job->eval, &secs, auc, ll, calib, n);
}

/* Runs the job's phases in order on one trainer. 0 or the error. */
/* A serving export of the current state (job.export), numbered after the
 * ones already in the directory. */
static int export_now(run_ctx_t *rc_)
{
	const st_job_t *job = rc_->job;
	if (!job->export_dir || interrupted())
		return 0;
	char err[1024] = "";
	int rc = st_trainer_export(rc_->model, job, job->export_dir, rc_->export_seq,
				   job->export_delta, job->export_keep, err, sizeof err);
	if (rc < 0) {
		st_error("export %llu not written: %s", (unsigned long long)rc_->export_seq, err);
		rc_->export_failed++;
		return rc;
	}
	st_info("export %s/export-%012llu written", job->export_dir,
		(unsigned long long)rc_->export_seq);
	rc_->export_seq++;
	return 0;
}

static int final_checkpoint(run_ctx_t *rc_, const st_trainer_ckpt_cfg_t *cfg);

static int run_phases(run_ctx_t *rc_, const char *metrics_path, int tty, double *total_secs)
{
	/* In a multi-process job rank 0 prints the phase lines and the eval
	 * results (of every rank's share), the progressive AUC of its own
	 * examples. */
	const int talk = !rc_->net || st_net_rank(rc_->net) == 0;
	const st_job_t *job = rc_->job;
	char tmp[4200];
	if (metrics_path) {
		int trc = st_cli_metrics_truncate(metrics_path);   /* phases append */
		if (trc < 0)
			return trc;
		snprintf(tmp, sizeof tmp, "%s.phase", metrics_path);
	}
	uint64_t n_before = 0;
	typedef struct { double auc, ll; uint64_t n; } slice_t;
	slice_t *slice = st_xcalloc((size_t)job->n_phases, sizeof *slice);
	for (int i = 0; i < job->n_phases; i++)
		slice[i] = (slice_t){ NAN, NAN, 0 };
	/* Resume: phases that ended before the checkpoint are skipped; the one
	 * it was taken in continues from its data position. */
	int first = 0, partial = -1;
	if (rc_->resumed && rc_->pos.phase >= 0) {
		first = (int)rc_->pos.phase + (rc_->pos.pass_done ? 1 : 0);
		if (!rc_->pos.pass_done)
			partial = (int)rc_->pos.phase;
		else
			rc_->resumed = 0;
		st_info("resuming at phase %d/%d%s", first + 1, job->n_phases,
			partial >= 0 ? " (mid-phase)" : "");
	}
	*total_secs = 0;
	int rc = 0;
	for (int i = first; i < job->n_phases; i++) {
		const st_phase_t *ph = &job->phases[i];
		rc = rc_->net ? st_trainer_dist_phase(rc_->model) : ST_OK;
		if (rc >= 0)
			rc = st_trainer_set_policy(rc_->model, &ph->sync);
		if (rc < 0) {
			st_error("phase %s: cannot start sync policy %s: %s", ph->name,
				 ph->sync.name, st_strerror(rc));
			goto out;
		}
		st_source_t src = ph->has_data ? ph->data : job->train;
		if (ph->rows >= 0)
			src.limit = src.limit >= 0 && src.limit < ph->rows ? src.limit : ph->rows;
		char rows[32] = "all";
		if (src.limit >= 0)
			snprintf(rows, sizeof rows, "%lld", (long long)src.limit);
		st_info("phase %d/%d '%s': sync %s, %s rows of %s", i + 1, job->n_phases,
			ph->name, ph->sync.name, rows, ph->has_data ? "its own data" : "data.train");
		double secs = 0, vauc = NAN, vll = NAN, vcal = NAN;
		uint64_t vn = 0;
		st_read_stats_t rs = { 0 };
		st_trainer_begin_pass(rc_->model, i, i == partial ? rc_->pos.pass_batches : 0,
				      i == partial ? rc_->pos.pass_examples : 0);
		if (ph->validate && i != partial) {
			/* Progressive validation of the slice: scored by the model
			 * trained on every earlier slice, before it learns from it
			 * (kstep-adam-terabyte-training.md, Section 5). */
			if ((rc = run_eval_of(rc_, &src, &secs, &vauc, &vll, &vcal, &vn)) < 0)
				goto out;
			slice[i] = (slice_t){ vauc, vll, vn };
		}
		rc = run_pass(rc_, &src, job->epochs, 0, metrics_path ? tmp : NULL, tty, &secs, &rs);
		if (metrics_path && st_cli_metrics_append(metrics_path, tmp) < 0)
			rc_->metrics_err = 1;
		if (rc < 0)
			goto out;
		st_trainer_end_pass(rc_->model);
		*total_secs += secs;
		int lost = 0;
		if (rc_->net && (rc = st_trainer_dist_finish(rc_->model, &lost)) < 0)
			goto out;
		/* Both run whatever the other did, and the next phases train: the
		 * model is intact (as after a failed interval checkpoint). The
		 * failures are counted for the exit status (end_failed). */
		export_now(rc_);
		final_checkpoint(rc_, rc_->ckpt);
		double auc = 0, ll = 0, eauc = NAN, ell = NAN, calib = NAN;
		uint64_t n = 0, en = 0;
		st_trainer_progress(rc_->model, &auc, &ll, &n);
		if (job->has_eval && (rc = run_eval(rc_, &eauc, &ell, &calib, &en)) < 0)
			goto out;
		if (talk) {
			printf("%s: phase %d '%s' (sync %s): ", job->name, i + 1, ph->name,
			       st_trainer_policy_name(rc_->model));
			print_count(stdout, n - n_before);
			printf(" examples%s in %.2f s, progressive auc %.4f logloss %.4f",
			       rc_->net ? " (rank 0's)" : "", secs, auc, ll);
			if (ph->validate && i != partial)
				printf(", slice auc %.4f logloss %.4f (before training on it)", vauc,
				       vll);
			if (job->has_eval)
				printf(", eval auc %.4f logloss %.4f", eauc, ell);
			printf("\n");
			fflush(stdout);
		}
		if (metrics_path) {
			st_cli_phase_rec_t pr = {
				.phase = ph->name, .index = i + 1,
				.sync = st_trainer_policy_name(rc_->model), .examples = n - n_before,
				.secs = secs, .auc = auc, .logloss = ll,
				.switches = st_trainer_switches(rc_->model),
				.has_eval = job->has_eval && isfinite(eauc), .eval_auc = eauc,
				.eval_logloss = ell, .has_slice = ph->validate && i != partial,
				.slice_auc = vauc, .slice_logloss = vll, .slice_examples = vn,
			};
			if (st_cli_metrics_phase(metrics_path, &pr) < 0)
				rc_->metrics_err = 1;
		}
		n_before = n;
	}
	int any = 0;
	for (int i = 0; i < job->n_phases; i++)
		any |= job->phases[i].validate;
	if (any && talk) {
		printf("%s: slices, each scored before training on it\n", job->name);
		printf("  %-16s %10s %8s %8s\n", "slice", "examples", "auc", "logloss");
		for (int i = 0; i < job->n_phases; i++)
			if (job->phases[i].validate && slice[i].n)
				printf("  %-16s %10llu %8.4f %8.4f\n", job->phases[i].name,
				       (unsigned long long)slice[i].n, slice[i].auc, slice[i].ll);
			else if (job->phases[i].validate)
				printf("  %-16s %10s %8s %8s  (%s)\n", job->phases[i].name, "-", "-", "-",
				       i < first ? "before the resumed checkpoint" : "resumed mid-slice");
	}
	rc = 0;
out:
	free(slice);
	return rc;
}

/* After the job ran to its end: 1, with a summary line, if any end-of-
 * training checkpoint or export was not written (each one reported where it
 * failed), else 0. */
static int end_failed(const run_ctx_t *rc_)
{
	if (!rc_->ckpt_failed && !rc_->export_failed)
		return 0;
	char what[128];
	if (rc_->ckpt_failed && rc_->export_failed)
		snprintf(what, sizeof what, "%d checkpoint%s and %d export%s were", rc_->ckpt_failed,
			 rc_->ckpt_failed == 1 ? "" : "s", rc_->export_failed,
			 rc_->export_failed == 1 ? "" : "s");
	else if (rc_->ckpt_failed)
		snprintf(what, sizeof what, "%d checkpoint%s %s", rc_->ckpt_failed,
			 rc_->ckpt_failed == 1 ? "" : "s", rc_->ckpt_failed == 1 ? "was" : "were");
	else
		snprintf(what, sizeof what, "%d export%s %s", rc_->export_failed,
			 rc_->export_failed == 1 ? "" : "s", rc_->export_failed == 1 ? "was" : "were");
	st_error("the job ran to its end, but %s not written (see above)", what);
	return 1;
}

int st_cmd_run(int argc, char **argv)
{
	st_cli_opts_t o;
	int ec = st_cli_parse(argc, argv, "run", "job,set,metrics,verbose,quiet,no-pin,resume", &o);
	if (ec) {
		free(o.sets);
		return ec;
	}
	st_job_t *job = NULL;
	if ((ec = st_cli_load_job(&o, 1, &job)) != ST_EXIT_OK) {
		free(o.sets);
		return ec;
	}
	if ((ec = check_implemented(job)) != ST_EXIT_OK)
		goto done;
	/* A rank of a multi-process job (launcher variables, docs/distributed.md). */
	st_net_cfg_t ncfg;
	int dist = st_net_cfg_from_env(&ncfg, NULL);
	if (dist < 0 || (dist && (ec = st_cli_dist_check(job)) != ST_EXIT_OK)) {
		ec = ST_EXIT_USAGE;
		goto done;
	}
	if (o.verbose)
		st_job_dump(job, stderr);

	int tty = !o.quiet && isatty(2) && (!dist || ncfg.rank == 0);
	const int digest = getenv("STRATA_DIGEST") && atoi(getenv("STRATA_DIGEST")) > 0;
	int lost = 0;
	run_ctx_t rc_;
	memset(&rc_, 0, sizeof rc_);
	rc_.job = job;
	rc_.pin = !o.no_pin;
	st_topo_t *topo = NULL;
	const char *metrics_path = o.metrics_path ? o.metrics_path : job->metrics_path;
	char rank_metrics[4000];
	if (dist && ncfg.rank != 0 && metrics_path) {
		/* One metrics file per rank: FILE for rank 0, FILE.rank<r> for the others. */
		snprintf(rank_metrics, sizeof rank_metrics, "%s.rank%d", metrics_path, ncfg.rank);
		metrics_path = rank_metrics;
	}

	sig.ckpt = job->ckpt_dir != NULL;
	signals_start();
	ec = ST_EXIT_FAILED;
	/* Ranks of one machine share the data folder: rank 0 alone generates
	 * it, before it joins, so the others (waiting to join) read complete
	 * files. */
	if ((!dist || ncfg.rank == 0) && maybe_generate(job, tty) < 0)
		goto stop;
	if (interrupted())   /* the generator does not stop on ^C: stop here */
		goto stop;
	if (job->out_dir && mkdir_p(job->out_dir) < 0) {
		st_error("cannot create output directory %s: %s", job->out_dir, strerror(errno));
		goto stop;
	}
	if (metrics_path && mkdir_parent(metrics_path) < 0) {
		st_error("cannot create the folder of %s: %s", metrics_path, strerror(errno));
		goto stop;
	}
	if (st_topo_load(&topo, NULL) < 0 || st_cli_place(topo, job, rc_.place, 1) < 0) {
		st_warn("topology unavailable: stage threads are not pinned");
		rc_.pin = 0;
	} else if (rc_.pin) {
		/* Pinning pays when every stage thread can own a core. With more
		 * threads than cores, fixed placement stacks busy threads (train
		 * workers, pull) on one core while another idles, and lockstep
		 * workers then wait on the slowest: measured on 2 cores, the
		 * standard DNN ran at 45.8k ex/s pinned and 81.3k unpinned
		 * (docs/benchmarks.md). Then the kernel balances them instead. */
		int total = 0;
		for (int i = 0; i < ST_CLI_NSTAGES; i++)
			total += st_cli_stage_cfg(job, i)->threads;
		if (total > st_topo_ncores(topo)) {
			st_info("%d stage threads on %d cores: threads are not pinned "
				"(the kernel balances them)", total, st_topo_ncores(topo));
			rc_.pin = 0;
		}
	}
	if (dist && rc_.pin) {
		/* Every rank would place its threads on the same cores: leave
		 * the ranks' threads to the kernel (rank-aware placement is
		 * future work, docs/distributed.md). */
		st_info("multi-process job: stage threads are not pinned");
		rc_.pin = 0;
	}
	if (st_metrics_create(&rc_.metrics) < 0) {
		st_error("cannot create the metrics: out of memory");
		goto stop;
	}
	int mrc = st_trainer_create(&rc_.model, job, rc_.metrics);
	if (mrc < 0) {
		/* A setting only the model or policy can check (a global batch
		 * that is not a multiple of the minibatch, k-step without Adam):
		 * a job error like the others, reported before any training. */
		if (mrc == ST_EJOB || mrc == ST_EINVAL) {
			fprintf(stderr, "strata: %s: the job's model or sync settings are invalid "
				"(see above); nothing was trained\n", job->file);
			ec = ST_EXIT_USAGE;
		} else {
			st_error("cannot create the model: %s", st_strerror(mrc));
		}
		goto stop;
	}
	if (dist && st_cli_dist_join(&rc_.net, &ncfg, job, rc_.model) < 0)
		goto stop;
	/* Rank 0 generated the data before it joined: the others find the
	 * files now. */
	if (dist && ncfg.rank != 0 && job->gen.enabled &&
	    (st_job_expand_paths(&job->train) < 0 ||
	     (job->has_eval && st_job_expand_paths(&job->eval) < 0)))
		goto stop;
	if (rc_.pin)
		st_trainer_pin_workers(rc_.model, rc_.place[TRAIN_STAGE].cpus,
				       rc_.place[TRAIN_STAGE].n_threads);
	signals_set_trainer(rc_.model);
	char job_hash[17];
	char *model_desc = st_trainer_model_desc(job);
	st_trainer_job_hash(job, job_hash);
	st_trainer_ckpt_cfg_t ckpt = {
		.dir = job->ckpt_dir, .keep = job->ckpt_keep, .job_name = job->name,
		.job_hash = job_hash, .model = model_desc, .paths = (const char *const *)job->train.paths,
		.n_paths = job->train.n_paths, .seed = job->seed,
	};
	rc_.ckpt = &ckpt;
	if (job->export_dir) {
		if (mkdir_p(job->export_dir) < 0 || access(job->export_dir, W_OK | X_OK) != 0) {
			st_error("export.dir %s: %s; nothing was trained", job->export_dir,
				 strerror(errno));
			ec = ST_EXIT_USAGE;
			goto stop_desc;
		}
		st_ckpt_entry_t *ents = NULL;
		size_t ne = 0;
		char err[512];
		if (st_ckpt_list_exports(job->export_dir, 0, &ents, &ne, NULL, NULL, err,
					 sizeof err) >= 0) {
			for (size_t i = 0; i < ne; i++)
				if ((uint64_t)ents[i].num + 1 > rc_.export_seq)
					rc_.export_seq = (uint64_t)ents[i].num + 1;
			st_ckpt_entries_free(ents, ne);
		}
	}
	if (job->ckpt_dir && job->pull.threads > 1) {
		/* The checkpoint gate holds later batches at pull-sparse in batch
		 * order; with several pull threads a later batch can pass before
		 * the gate closes and its updates would leak into the checkpoint. */
		st_error("checkpoint needs stages.pull.threads = 1 (got %d): a consistent "
			 "checkpoint with several pull threads is not implemented yet",
			 job->pull.threads);
		ec = ST_EXIT_USAGE;
		goto stop_desc;
	}
	if (job->ckpt_dir) {
		if (mkdir_p(job->ckpt_dir) < 0 || access(job->ckpt_dir, W_OK | X_OK) != 0) {
			st_error("checkpoint.dir %s: %s; nothing was trained", job->ckpt_dir,
				 strerror(errno));
			ec = ST_EXIT_USAGE;
			goto stop_desc;
		}
		st_trainer_set_checkpoint(rc_.model, &ckpt, job->ckpt_every, job->ckpt_secs);
	}
	if ((o.resume || job->resume) && !job->ckpt_dir) {
		fprintf(stderr, "strata: %s: --resume needs checkpoint.dir in the job\n", job->file);
		ec = ST_EXIT_USAGE;
		goto stop_desc;
	}
	if (o.resume || job->resume) {
		char err[4096];
		int r = st_trainer_resume(rc_.model, &ckpt, &rc_.pos, err, sizeof err);
		if (r == ST_ECORRUPT && rc_.pos.none_verifies && o.resume_fresh) {
			/* Asked for: the damaged ones go aside (kept, and out of the
			 * way of retention, which prefers higher step numbers). */
			st_warn("cannot resume: %s", err);
			if (st_trainer_set_aside_damaged(&ckpt, err, sizeof err) < 0) {
				st_error("%s", err);
				goto stop_desc;
			}
			st_info("starting from the beginning (--resume=fresh-if-damaged)");
		} else if (r == ST_ECORRUPT && rc_.pos.none_verifies) {
			/* Starting over would hide the damage and overwrite them. */
			st_error("cannot resume: %s", err);
			fprintf(stderr, "strata: nothing was trained and %s was left as it is; run with "
				"--resume=fresh-if-damaged to move the damaged checkpoints aside and "
				"start from the beginning\n", job->ckpt_dir);
			goto stop_desc;
		} else if (r == ST_ENOENT) {
			st_info("no checkpoint to resume from in %s (%s): starting from the beginning",
				job->ckpt_dir, err);
		} else if (r < 0) {
			st_error("cannot resume: %s", err);
			ec = r == ST_EINVAL ? ST_EXIT_USAGE : ST_EXIT_FAILED;
			goto stop_desc;
		} else {
			rc_.resumed = 1;
			st_info("resuming from %s: step %llu, %llu examples done", rc_.pos.dir,
				(unsigned long long)rc_.pos.step, (unsigned long long)rc_.pos.examples);
		}
	}
	if (job->n_phases) {
		st_info("%s: %d phases, %d train worker%s, model %s", job->name, job->n_phases,
			job->train_stage.threads, job->train_stage.threads == 1 ? "" : "s",
			job->model.type);
		double secs = 0;
		if (run_phases(&rc_, metrics_path, tty, &secs) < 0)
			goto stop_desc;
		/* Multi-process: the whole job's summary, then a clean end. */
		if (rc_.net && (st_cli_dist_summary(rc_.net, rc_.model, job, secs, lost, digest) < 0 ||
				st_trainer_dist_leave(rc_.model, &lost) < 0))
			goto stop_desc;
		if (!rc_.net && digest) {
			uint64_t rows = 0, h = st_trainer_digest(rc_.model, 1, &rows);
			printf("%s: model digest %016llx  %llu rows\n", job->name,
			       (unsigned long long)h, (unsigned long long)rows);
		}
		ec = end_failed(&rc_) ? ST_EXIT_FAILED : ST_EXIT_OK;
		goto stop_desc;
	}

	if (rc_.net)
		st_info("rank %d of %d: trains batches %d, %d + %d, ... of the stream",
			st_net_rank(rc_.net), st_net_size(rc_.net), st_net_rank(rc_.net),
			st_net_rank(rc_.net), st_net_size(rc_.net));
	st_info("%s: training on %d file%s (%s), %d epoch%s, batch %d, minibatch %d, "
		"%d read threads, %d train worker%s, sync %s, model %s",
		job->name, job->train.n_paths, job->train.n_paths == 1 ? "" : "s",
		job->train.format, job->epochs, job->epochs == 1 ? "" : "s",
		job->batch_size, job->minibatch, job->read.threads, job->train_stage.threads,
		job->train_stage.threads == 1 ? "" : "s", job->sync.name, job->model.type);
	double secs = 0;
	st_read_stats_t rs = { 0 };
	st_trainer_begin_pass(rc_.model, -1, rc_.resumed ? rc_.pos.pass_batches : 0,
			      rc_.resumed ? rc_.pos.pass_examples : 0);
	if (run_pass(&rc_, &job->train, job->epochs, 0, metrics_path, tty, &secs, &rs) < 0)
		goto stop_desc;
	st_trainer_end_pass(rc_.model);

	double auc = 0, ll = 0;
	uint64_t n = 0;
	if (rc_.net) {
		if (st_trainer_dist_finish(rc_.model, &lost) < 0 ||
		    st_cli_dist_summary(rc_.net, rc_.model, job, secs, lost, digest) < 0)
			goto stop_desc;
		goto eval;
	}
	st_trainer_progress(rc_.model, &auc, &ll, &n);
	printf("%s: trained ", job->name);
	print_count(stdout, n);
	printf(" examples in %.2f s (", secs);
	print_count(stdout, (uint64_t)((double)n / (secs > 0 ? secs : 1)));
	printf(" ex/s)\n");
	printf("  progressive  auc %.4f  logloss %.4f\n", auc, ll);
	printf("  read         %llu rows, %llu bad records, %.1f MB\n",
	       (unsigned long long)rs.rows, (unsigned long long)rs.bad, (double)rs.bytes / 1e6);
	if (digest) {
		uint64_t rows = 0, h = st_trainer_digest(rc_.model, 1, &rows);
		printf("  model        digest %016llx  %llu rows\n", (unsigned long long)h,
		       (unsigned long long)rows);
	}
	fflush(stdout);
	/* Each runs and reports its own failure; the eval still runs
	 * (end_failed sets the exit status). */
	final_checkpoint(&rc_, &ckpt);
	export_now(&rc_);
eval:
	if (job->has_eval) {
		st_trainer_reset_eval(rc_.model);
		st_read_stats_t es = { 0 };
		if (run_pass(&rc_, &job->eval, 1, 1, NULL, 0, &secs, &es) < 0)
			goto stop_desc;
		if (rc_.net && st_trainer_dist_eval_gather(rc_.model) < 0) {
			st_error("cannot collect the eval results of the other ranks");
			goto stop_desc;
		}
		double calib = 0;
		if ((!rc_.net || st_net_rank(rc_.net) == 0) &&
		    st_trainer_eval_result(rc_.model, &auc, &ll, &calib, &n) == 0)
			printf("  eval         auc %.4f  logloss %.4f  calibration %.3f  (%llu examples)\n",
			       auc, ll, calib, (unsigned long long)n);
	}
	/* A clean end of a multi-process job: nobody leaves while another
	 * rank may still pull from it (a second round of the finish). */
	if (rc_.net && st_trainer_dist_leave(rc_.model, &lost) < 0)
		goto stop_desc;
	ec = end_failed(&rc_) ? ST_EXIT_FAILED : ST_EXIT_OK;
stop_desc:
	free(model_desc);
stop:
	signals_stop();
	if (ec == ST_EXIT_OK && rc_.metrics_err) {
		st_error("the job ran, but the metrics file %s is incomplete (see above)",
			 metrics_path);
		ec = ST_EXIT_FAILED;
	}
	if (interrupted()) {
		/* Stopped (or finished while stopping) on a signal: 128 + its
		 * number, as a shell reports a process the signal ended, so
		 * that scripts see the run did not simply succeed. */
		int s = interrupted();
		ec = 128 + s;
		if (job->ckpt_dir)
			fprintf(stderr, "strata: stopped by %s (exit status %d); every checkpoint in "
				"%s is complete: continue with --resume\n", sig_name(s), ec,
				job->ckpt_dir);
		else
			fprintf(stderr, "strata: stopped by %s (exit status %d)\n", sig_name(s), ec);
	}
	st_trainer_destroy(rc_.model);
	st_net_close(rc_.net);
	st_metrics_destroy(rc_.metrics);
	st_topo_destroy(topo);
done:
	st_job_free(job);
	free(o.sets);
	return ec;
}

int st_cmd_check(int argc, char **argv)
{
	st_cli_opts_t o;
	int ec = st_cli_parse(argc, argv, "check", "job,set,verbose", &o);
	if (ec) {
		free(o.sets);
		return ec;
	}
	st_job_t *job = NULL;
	ec = st_cli_load_job(&o, 1, &job);
	if (ec == ST_EXIT_OK) {
		if (o.verbose)
			st_job_dump(job, stdout);
		printf("%s: ok (job '%s')\n", o.job_path, job->name);
	}
	st_job_free(job);
	free(o.sets);
	return ec;
}

static void print_dot(const st_job_t *job, const st_place_req_t *place)
{
	printf("digraph \"%s\" {\n  rankdir=LR;\n  node [shape=box];\n", job->name);
	for (int i = 0; i < ST_CLI_NSTAGES; i++) {
		const st_stage_cfg_t *c = st_cli_stage_cfg(job, i);
		printf("  %s [label=\"%s\\n%d thread%s\\npackage %d%s%s\"];\n",
		       st_cli_stage_names[i], st_cli_stage_names[i], c->threads,
		       c->threads == 1 ? "" : "s", place[i].package,
		       place[i].device[0] ? "\\nnear " : "", place[i].device);
		if (i > 0)
			printf("  %s -> %s [label=\"queue %d\"];\n", st_cli_stage_names[i - 1],
			       st_cli_stage_names[i], c->queue);
	}
	printf("}\n");
}

int st_cmd_plan(int argc, char **argv)
{
	st_cli_opts_t o;
	int ec = st_cli_parse(argc, argv, "plan", "job,set,topology,dot,verbose", &o);
	if (ec) {
		free(o.sets);
		return ec;
	}
	st_job_t *job = NULL;
	st_topo_t *topo = NULL;
	st_graph_t *g = NULL;
	st_place_req_t place[ST_CLI_NSTAGES];
	if ((ec = st_cli_load_job(&o, 0, &job)) != ST_EXIT_OK)
		goto out;
	ec = ST_EXIT_USAGE;
	int rc = st_topo_load(&topo, o.topology);
	if (rc < 0) {
		fprintf(stderr, "strata plan: cannot load topology %s: %s\n",
			o.topology ? o.topology : "of this machine", st_strerror(rc));
		goto out;
	}
	if (st_cli_place(topo, job, place, o.topology == NULL) < 0) {
		fprintf(stderr, "strata plan: placement failed (see above)\n");
		goto out;
	}
	if (o.dot) {
		print_dot(job, place);
		ec = ST_EXIT_OK;
		goto out;
	}
	printf("job %s (%s)\n\n", job->name, job->file);
	printf("topology%s%s: %d package%s, %d cores\n", o.topology ? " " : "",
	       o.topology ? o.topology : " (this machine)", st_topo_npackages(topo),
	       st_topo_npackages(topo) == 1 ? "" : "s", st_topo_ncores(topo));
	if (o.verbose)
		st_topo_print(topo, stdout);
	if (build_graph(&g, job, place, 1, NULL, NULL) < 0) {
		fprintf(stderr, "strata plan: cannot compile the graph\n");
		goto out;
	}
	printf("\ngraph:\n");
	st_graph_print(g, stdout);
	printf("\nplacement:\n");
	for (int i = 0; i < ST_CLI_NSTAGES; i++) {
		printf("  %-6s package %d%s%s%s  cpus", st_cli_stage_names[i], place[i].package,
		       place[i].device[0] ? "  near " : "", place[i].device,
		       place[i].near && strcmp(place[i].near, "auto") ? "" : "");
		for (int t = 0; t < place[i].n_threads && t < 64; t++)
			printf(" %d", place[i].cpus[t]);
		printf("\n");
	}
	int total = 0;
	for (int i = 0; i < ST_CLI_NSTAGES; i++)
		total += st_cli_stage_cfg(job, i)->threads;
	if (total > st_topo_ncores(topo))
		printf("\nnote: %d stage threads on %d cores: `strata run` leaves them unpinned "
		       "and the kernel balances them\n", total, st_topo_ncores(topo));
	ec = ST_EXIT_OK;
out:
	st_graph_destroy(g);
	st_topo_destroy(topo);
	st_job_free(job);
	free(o.sets);
	return ec;
}
