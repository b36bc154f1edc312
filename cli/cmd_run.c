/*
 * cmd_run.c — `strata run`: parses its arguments, loads the job, hands it
 * to the job runner (ops/runner/runner.h), which does the work, and prints
 * what the runner's observer reports: the progress line of each training
 * pass on a terminal, the result lines on stdout ("trained ... examples",
 * "progressive  auc", "eval         auc", the phase lines and the slice
 * table, the multi-process summary of rank 0), the runner's messages on
 * stderr; then maps the run's status to the exit code (cli.h).
 *
 * Threads: the main thread runs the job (st_runner_run); one signal thread
 * ("st-signal") turns SIGINT/SIGTERM, which a handler in whatever thread
 * the kernel picks passes it through a pipe, into st_runner_cancel, so ^C
 * stops the job cleanly and only complete checkpoints are left ("signals"
 * below says why a handler).
 */
#include "cli.h"
#include "lang/lang.h"
#include "ops/metrics/prom_http.h"
#include "ops/runner/runner.h"
#include "runtime/err.h"
#include "runtime/metrics.h"
#include "runtime/net/net.h"
#include "runtime/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- signals ------------------------------------------------------------ */

/*
 * SIGINT and SIGTERM stop a run cleanly: the first one cancels the run
 * (st_runner_cancel: reading stops, every batch in flight is freed once, no
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
 * reads the pipe and does the rest (locks, st_runner_cancel, messages).
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
	pthread_mutex_t lock;        /* runner */
	st_runner_t *runner;
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
		if (sig.runner)
			st_runner_cancel(sig.runner, b);
		pthread_mutex_unlock(&sig.lock);
	}
}

/* Installs the handler (for the signals not ignored at start), blocks the
 * signals in this thread and every thread created from now on, and starts
 * the thread that acts on them: it cancels r. */
static void signals_start(st_runner_t *r)
{
	sig.runner = r;
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

/* Stops the signal thread. The handler stays: a signal from now on is
 * recorded (and a second one still exits at once) but cancels nothing. */
static void signals_stop(void)
{
	pthread_mutex_lock(&sig.lock);
	sig.runner = NULL;
	pthread_mutex_unlock(&sig.lock);
	unsigned char b = 0;
	while (write(sig.pipe[1], &b, 1) < 0 && errno == EINTR)
		;
	pthread_join(sig.thread, NULL);
}

/* ---- what the runner reports ------------------------------------------- */

typedef struct view {
	const st_job_t *job;
	int tty;                  /* draw the progress lines */
	st_progress_t *progress;  /* the progress line of the training pass running */
	st_prom_http_t *prom;     /* --metrics-port: the live endpoint, or NULL */
	st_meter_t gen;           /* data generation before the run */
	int gen_on;               /* gen was started */
} view_t;

static void print_count(FILE *f, uint64_t n)
{
	if (n >= 1000000)
		fprintf(f, "%.1fM", (double)n / 1e6);
	else if (n >= 10000)
		fprintf(f, "%.1fk", (double)n / 1e3);
	else
		fprintf(f, "%llu", (unsigned long long)n);
}

static void on_message(void *ud, int level, const char *text)
{
	(void)ud;
	if (level == ST_RUNNER_LINE)
		fprintf(stderr, "%s\n", text);
	else
		st_log((enum st_log_level)level, "%s", text);
}

static void on_gen_progress(void *ud, int64_t done, int64_t total, int end)
{
	view_t *v = ud;
	if (!v->gen_on) {
		st_meter_init(&v->gen, "strata: generating data", "rows");
		v->gen_on = 1;
	}
	if (end) {
		st_meter_fini(&v->gen);
		v->gen_on = 0;
	} else {
		st_meter_update(&v->gen, done, total);
	}
}

static void on_pass_begin(void *ud, const st_runner_pass_t *p)
{
	view_t *v = ud;
	if (v->prom)
		st_prom_http_attach(v->prom, p->metrics, p->graph);
	if (!v->tty || p->kind != ST_RUNNER_PASS_TRAIN)
		return;
	int rc = st_progress_start(&v->progress, p->graph, p->metrics, v->job->progress_secs,
				   NULL, 1);
	if (rc < 0)
		st_warn("no progress line: %s", st_strerror(rc));
}

static void on_pass_end(void *ud, const st_runner_pass_t *p)
{
	view_t *v = ud;
	(void)p;
	if (v->prom)   /* before the runner frees the pass's graph */
		st_prom_http_detach_graph(v->prom);
	st_progress_stop(v->progress);   /* no file: nothing to fail */
	v->progress = NULL;
}

/* The heads after the first of a multi-task model, one line each under
 * head 0's (whose line keeps its words for every parser of one-label
 * jobs): "  eval         auc_conversion 0.8123  logloss_conversion ...". */
static void print_heads(const char *what, const st_runner_heads_t *hs)
{
	for (int h = 1; h < hs->n; h++) {
		printf("  %-12s auc_%s %.4f  logloss_%s %.4f", what, hs->name[h], hs->auc[h],
		       hs->name[h], hs->logloss[h]);
		if (!isnan(hs->calibration[h]))
			printf("  calibration_%s %.3f", hs->name[h], hs->calibration[h]);
		printf("\n");
	}
}

static void on_train_end(void *ud, const st_runner_totals_t *t)
{
	const view_t *v = ud;
	const char *name = v->job->name;
	if (t->ranks > 1) {
		/* Rank 0 speaks for the job. */
		if (t->rank != 0)
			return;
		if (t->lost) {
			printf("%s: rank 0 trained %llu examples in %.2f s; %d rank%s lost "
			       "(see above)\n", name, (unsigned long long)t->examples, t->secs,
			       t->lost, t->lost == 1 ? "" : "s");
			return;
		}
		printf("%s: trained %llu examples on %d ranks in %.2f s (%.0f ex/s)\n", name,
		       (unsigned long long)t->all_examples, t->ranks, t->all_secs,
		       (double)t->all_examples / (t->all_secs > 0 ? t->all_secs : 1));
		printf("  progressive  auc %.4f  logloss %.4f  (rank 0's examples)\n", t->auc,
		       t->logloss);
		print_heads("progressive", &t->heads);
		printf("  network      %.1f MB sent, %.0f bytes per example, %.2f round trips "
		       "per step\n", (double)t->all_bytes_sent / 1e6,
		       t->all_examples ? (double)t->all_bytes_sent / (double)t->all_examples : 0,
		       t->all_steps ? (double)t->all_round_trips / (double)t->all_steps : 0);
		if (t->has_digest)
			printf("  model        digest %016llx  %llu rows\n",
			       (unsigned long long)t->digest, (unsigned long long)t->digest_rows);
		fflush(stdout);
		return;
	}
	if (t->phases) {   /* the phase lines said the rest */
		if (t->has_digest)
			printf("%s: model digest %016llx  %llu rows\n", name,
			       (unsigned long long)t->digest, (unsigned long long)t->digest_rows);
		return;
	}
	printf("%s: trained ", name);
	print_count(stdout, t->examples);
	printf(" examples in %.2f s (", t->secs);
	print_count(stdout, (uint64_t)((double)t->examples / (t->secs > 0 ? t->secs : 1)));
	printf(" ex/s)\n");
	printf("  progressive  auc %.4f  logloss %.4f\n", t->auc, t->logloss);
	print_heads("progressive", &t->heads);
	printf("  read         %llu rows, %llu bad records, %.1f MB\n",
	       (unsigned long long)t->read.rows, (unsigned long long)t->read.bad,
	       (double)t->read.bytes / 1e6);
	if (t->read.lists_truncated || t->read.list_items_empty || t->read.lists_empty ||
	    t->read.missing_keys)
		printf("  fields       %llu lists truncated, %llu empty list items, %llu empty "
		       "lists, %llu missing keys\n",
		       (unsigned long long)t->read.lists_truncated,
		       (unsigned long long)t->read.list_items_empty,
		       (unsigned long long)t->read.lists_empty,
		       (unsigned long long)t->read.missing_keys);
	if (t->has_digest)
		printf("  model        digest %016llx  %llu rows\n", (unsigned long long)t->digest,
		       (unsigned long long)t->digest_rows);
	fflush(stdout);
}

static void on_eval(void *ud, const st_runner_eval_t *e)
{
	(void)ud;
	/* The phases' scores are in their lines. */
	if (e->kind == ST_RUNNER_PASS_EVAL && e->phase < 0 && e->has_result)
	{
		printf("  eval         auc %.4f  logloss %.4f  calibration %.3f  (%llu examples)\n",
		       e->auc, e->logloss, e->calibration, (unsigned long long)e->examples);
		print_heads("eval", &e->heads);
	}
}

static void on_phase_end(void *ud, const st_runner_phase_result_t *p)
{
	const view_t *v = ud;
	if (!p->reported)
		return;
	printf("%s: phase %d '%s' (sync %s): ", v->job->name, p->index + 1, p->name, p->sync);
	print_count(stdout, p->examples);
	printf(" examples%s in %.2f s, progressive auc %.4f logloss %.4f",
	       p->dist ? " (rank 0's)" : "", p->secs, p->auc, p->logloss);
	if (p->has_slice)
		printf(", slice auc %.4f logloss %.4f (before training on it)", p->slice_auc,
		       p->slice_logloss);
	if (p->has_eval)
		printf(", eval auc %.4f logloss %.4f", p->eval_auc, p->eval_logloss);
	printf("\n");
	print_heads("progressive", &p->heads);
	if (p->has_eval && isfinite(p->eval_auc))
		print_heads("eval", &p->eval_heads);
	fflush(stdout);
}

/* The slices' table, when a phase validates. */
static void on_phases_end(void *ud, const st_runner_phase_result_t *phs, int n)
{
	const view_t *v = ud;
	int any = 0;
	for (int i = 0; i < n; i++)
		any |= phs[i].validate;
	if (!any || !phs[0].reported)
		return;
	printf("%s: slices, each scored before training on it\n", v->job->name);
	printf("  %-16s %10s %8s %8s\n", "slice", "examples", "auc", "logloss");
	for (int i = 0; i < n; i++)
		if (phs[i].validate && phs[i].slice_examples)
			printf("  %-16s %10llu %8.4f %8.4f\n", phs[i].name,
			       (unsigned long long)phs[i].slice_examples, phs[i].slice_auc,
			       phs[i].slice_logloss);
		else if (phs[i].validate)
			printf("  %-16s %10s %8s %8s  (%s)\n", phs[i].name, "-", "-", "-",
			       phs[i].ran ? "resumed mid-slice" : "before the resumed checkpoint");
}

static const st_runner_observer_t observer = {
	.version = ST_RUNNER_OBSERVER_VERSION,
	.message = on_message,
	.gen_progress = on_gen_progress,
	.pass_begin = on_pass_begin,
	.pass_end = on_pass_end,
	.train_end = on_train_end,
	.eval = on_eval,
	.phase_end = on_phase_end,
	.phases_end = on_phases_end,
};

/* ---- the trace ------------------------------------------------------------ */

/* Writes the trace of this process: path itself in one process; rank r of
 * several writes PATH.rank<r>.json (PATH's .json suffix, if any, goes after
 * the rank), so that the ranks never write one file. The process is named
 * "strata rank <r>" and has the OS pid, so that several ranks' files can be
 * loaded side by side. ST_OK or the error (reported). */
static int trace_write(const char *path, int rank)
{
	char file[4096], name[64];
	if (rank < 0) {
		snprintf(file, sizeof file, "%s", path);
		snprintf(name, sizeof name, "strata");
	} else {
		size_t len = strlen(path);
		int json = len > 5 && !strcmp(path + len - 5, ".json");
		snprintf(file, sizeof file, "%.*s.rank%d.json", (int)(json ? len - 5 : len), path,
			 rank);
		snprintf(name, sizeof name, "strata rank %d", rank);
	}
	int rc = st_trace_write(file, (int)getpid(), name);
	if (rc < 0) {
		st_error("cannot write the trace %s: %s", file, st_strerror(rc));
		return rc;
	}
	st_trace_stats_t ts;
	st_trace_stats(&ts);
	st_info("trace written to %s (%llu events on %d threads%s)", file,
		(unsigned long long)ts.kept, ts.threads,
		ts.dropped ? ", older ones dropped: see --trace-events" : "");
	return ST_OK;
}

/* ---- the command --------------------------------------------------------- */

int st_cmd_run(int argc, char **argv)
{
	st_cli_opts_t o;
	int ec = st_cli_parse(argc, argv, "run",
			      "job,set,metrics,verbose,quiet,no-pin,resume,trace,trace-events,"
			      "metrics-port,metrics-bind", &o);
	if (ec) {
		free(o.sets);
		return ec;
	}
	st_job_t *job = NULL;
	st_runner_t *r = NULL;
	view_t v = { 0 };
	if ((ec = st_cli_load_job(&o, 1, &job)) != ST_EXIT_OK) {
		free(o.sets);
		return ec;
	}
	/* A rank of a multi-process job (launcher variables, docs/distributed.md). */
	st_net_cfg_t ncfg;
	int dist = st_net_cfg_from_env(&ncfg, NULL);
	if (dist < 0) {
		ec = ST_EXIT_USAGE;
		goto done;
	}
	const st_runner_opts_t ro = {
		.resume = o.resume_fresh ? ST_RUNNER_RESUME_FRESH_IF_DAMAGED
			: o.resume ? ST_RUNNER_RESUME : ST_RUNNER_RESUME_AS_JOB,
		.metrics_path = o.metrics_path,
		.pin = !o.no_pin,
		.digest = getenv("STRATA_DIGEST") && atoi(getenv("STRATA_DIGEST")) > 0,
		.net = dist ? &ncfg : NULL,
		.net_timeout_fixed = getenv("STRATA_NET_TIMEOUT") != NULL,
	};
	if (o.trace_path) {
		/* Before the runner makes any thread, so that every thread records
		 * (runtime/trace.h); written after st_runner_destroy joined them. */
		if (st_trace_open((size_t)o.trace_events) < 0)
			st_die("cannot start the trace recorder");
		st_trace_thread_name("main");
		st_trace_instant("start", "%s", job->name);
	}
	v = (view_t){ .job = job, .tty = !o.quiet && isatty(2) && (!dist || ncfg.rank == 0) };
	/* The other progress lines (data generation, a checkpoint restore)
	 * follow the same rule as the training pass's. */
	st_meter_set_tty(v.tty);
	int rc = st_runner_create(&r, job, &ro, &observer, &v);
	if (rc < 0) {
		ec = rc == ST_EJOB ? ST_EXIT_USAGE : ST_EXIT_FAILED;
		goto done;
	}
	if (o.verbose)
		st_job_dump(job, stderr);
	if (o.metrics_port) {
		/* Before anything is trained: a taken port stops the run here. */
		int port = o.metrics_port + (dist ? ncfg.rank : 0);
		const char *addr = o.metrics_bind ? o.metrics_bind : "127.0.0.1";
		if (port > 65535) {
			st_error("--metrics-port %d: rank %d would serve on port %d, past 65535",
				 o.metrics_port, ncfg.rank, port);
			ec = ST_EXIT_USAGE;
			goto done;
		}
		rc = st_prom_http_start(&v.prom, addr, port);
		if (rc < 0) {
			ec = rc == -ENOTSUP || rc == ST_EINVAL ? ST_EXIT_USAGE : ST_EXIT_FAILED;
			goto done;
		}
		st_info("metrics served at http://%s%s%s:%d/metrics", strchr(addr, ':') ? "[" : "",
			addr, strchr(addr, ':') ? "]" : "", port);
	} else if (o.metrics_bind) {
		st_error("--metrics-bind needs --metrics-port");
		ec = ST_EXIT_USAGE;
		goto done;
	}

	sig.ckpt = job->ckpt_dir != NULL;
	signals_start(r);
	st_runner_run(r);
	signals_stop();
	const st_runner_result_t *res = st_runner_result(r);
	ec = res->status == ST_RUNNER_OK ? ST_EXIT_OK
	   : res->status == ST_RUNNER_JOB_ERROR ? ST_EXIT_USAGE : ST_EXIT_FAILED;
	/* Stopped (or finished while stopping) on a signal, also one that came
	 * after the run returned: 128 + its number, as a shell reports a
	 * process the signal ended, so that scripts see the run did not simply
	 * succeed. */
	int s = interrupted();
	if (!s && res->status == ST_RUNNER_INTERRUPTED)
		s = res->signo;
	if (s) {
		ec = 128 + s;
		if (job->ckpt_dir)
			fprintf(stderr, "strata: stopped by %s (exit status %d); every checkpoint in "
				"%s is complete: continue with --resume\n", sig_name(s), ec,
				job->ckpt_dir);
		else
			fprintf(stderr, "strata: stopped by %s (exit status %d)\n", sig_name(s), ec);
	}
done:
	st_prom_http_stop(v.prom);   /* the runner's metrics must outlive it */
	st_runner_destroy(r);
	if (o.trace_path && st_trace_enabled()) {
		int wrc = trace_write(o.trace_path, dist ? ncfg.rank : -1);
		if (wrc < 0 && ec == ST_EXIT_OK)
			ec = ST_EXIT_FAILED;
		st_trace_close();
	}
	st_job_free(job);
	free(o.sets);
	return ec;
}
