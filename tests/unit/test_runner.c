/*
 * test_runner.c — the job runner (ops/runner/runner.h) driven in-process:
 * a plain run returns its result and calls the observer in the documented
 * order; its numbers equal what `strata run` prints for the same job; the
 * same seed gives the same model digest; phases run in order with a result
 * each; a run cancelled at a batch and then resumed ends with the same
 * model as an uninterrupted one (the bit-identical resume check, without a
 * subprocess); a failed final checkpoint still exports and evaluates; the
 * non-finite scores of a diverged model are counted; a cancel makes the run
 * INTERRUPTED; a job error is a JOB_ERROR.
 *
 * Data: 6000 train rows in 2 files and 1000 eval rows from ops/gen, in a
 * temporary folder made once (the setup); jobs are loaded with lang/ from a
 * job file written there, varied with --set style overrides. The settings
 * (one read thread, one worker, allreduce, a fixed seed) make a run
 * deterministic, as tests/e2e/resume.sh needs too.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lang/lang.h"
#include "ops/gen/gen.h"
#include "ops/runner/runner.h"
#include "runtime/err.h"
#include "st_config.h"

static char root[64];        /* the temporary folder */
static char job_path[128];

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof root, "/tmp/st_runner_XXXXXX");
	if (!mkdtemp(root))
		return -1;
	char dir[128];
	snprintf(dir, sizeof dir, "%s/d", root);
	st_gen_opts_t go = { .dir = dir, .rows = 6000, .eval_rows = 1000, .files = 2,
			     .seed = 5, .zipf = 1.1, .vocab = 2000, .threads = 1 };
	if (st_gen_write(&go, NULL, NULL) < 0)
		return -1;
	snprintf(job_path, sizeof job_path, "%s/job.lua", root);
	FILE *f = fopen(job_path, "w");
	if (!f)
		return -1;
	fprintf(f,
		"local st = require \"strata\"\n"
		"return st.job {\n"
		"  name = \"rt\", seed = 11,\n"
		"  data = {\n"
		"    train = st.data.criteo { path = \"%s/train-*.tsv\" },\n"
		"    eval = st.data.criteo { path = \"%s/eval.tsv\" },\n"
		"  },\n"
		"  model = st.model.dnn { emb_dim = 4, hidden = { 16 },\n"
		"                         optimizer = st.optim.adam { lr = 0.003 } },\n"
		"  stages = {\n"
		"    read = { threads = 1, queue = 4, batch_size = 256 },\n"
		"    train = { workers = 1, minibatch = 128 },\n"
		"  },\n"
		"  sync = st.sync.allreduce {},\n"
		"}\n", dir, dir);
	return fclose(f) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

/* The job with sets ("key=lua", NULL-terminated) applied. */
static st_job_t *load(const char *const *sets)
{
	int n = 0;
	while (sets && sets[n])
		n++;
	st_load_opts_t lo = { .stdlib_dir = ST_STDLIB_DIR_SRC, .sets = sets, .n_sets = n,
			      .check_paths = 1 };
	st_diag_t d;
	st_job_t *job = NULL;
	int rc = st_job_load(job_path, &lo, &job, &d);
	for (int i = 0; i < d.n; i++)
		fprintf(stderr, "%s\n", d.msg[i]);
	st_diag_free(&d);
	assert_int_equal(rc, ST_OK);
	return job;
}

/* ---- an observer that records ------------------------------------------- */

typedef struct rec {
	char events[512];        /* one letter per call but batch_end's */
	size_t n;
	uint64_t batches, last_seq;
	int seq_in_order;
	char messages[8192];
	st_runner_artifact_t art[8];
	char art_err[8][256];
	int n_art;
	uint64_t cancel_at;      /* > 0: cancel at this batch */
	int cancel_signo;
	st_runner_t *runner;
	st_runner_totals_t totals;
	st_runner_phase_result_t phase[4];   /* name: the job's, gone after the run */
	char phase_name[4][32];
	int n_phase;
} rec_t;

static void ev(rec_t *r, char c)
{
	if (r->n + 1 < sizeof r->events) {
		r->events[r->n++] = c;
		r->events[r->n] = 0;
	}
}

static char kind_letter(st_runner_pass_kind_t k)
{
	return k == ST_RUNNER_PASS_TRAIN ? 't' : k == ST_RUNNER_PASS_EVAL ? 'e' : 's';
}

static void on_message(void *ud, int level, const char *text)
{
	rec_t *r = ud;
	(void)level;
	size_t len = strlen(r->messages);
	snprintf(r->messages + len, sizeof r->messages - len, "%s\n", text);
}

static void on_pass_begin(void *ud, const st_runner_pass_t *p)
{
	rec_t *r = ud;
	assert_non_null(p->graph);
	assert_non_null(p->metrics);
	ev(r, '(');
	ev(r, kind_letter(p->kind));
}

static void on_pass_end(void *ud, const st_runner_pass_t *p)
{
	rec_t *r = ud;
	ev(r, kind_letter(p->kind));
	ev(r, ')');
}

/* On the dump thread: counts and checks the order; cancels at cancel_at. */
static void on_batch_end(void *ud, uint64_t seq)
{
	rec_t *r = ud;
	if (r->batches && seq <= r->last_seq)
		r->seq_in_order = 0;
	r->last_seq = seq;
	r->batches++;
	if (r->cancel_at && r->batches == r->cancel_at)
		st_runner_cancel(r->runner, r->cancel_signo);
}

static void on_train_end(void *ud, const st_runner_totals_t *t)
{
	rec_t *r = ud;
	r->totals = *t;
	ev(r, 'T');
}

static void on_eval(void *ud, const st_runner_eval_t *e)
{
	rec_t *r = ud;
	ev(r, e->kind == ST_RUNNER_PASS_SLICE ? 'S' : 'E');
}

static void on_artifact(void *ud, const st_runner_artifact_t *a)
{
	rec_t *r = ud;
	ev(r, a->kind == ST_RUNNER_CHECKPOINT ? 'C' : 'X');
	if (r->n_art < 8) {
		r->art[r->n_art] = *a;
		snprintf(r->art_err[r->n_art], sizeof r->art_err[0], "%s", a->error ? a->error : "");
		r->n_art++;
	}
}

static void on_phase_end(void *ud, const st_runner_phase_result_t *p)
{
	rec_t *r = ud;
	ev(r, 'P');
	if (r->n_phase < 4) {
		snprintf(r->phase_name[r->n_phase], sizeof r->phase_name[0], "%s", p->name);
		r->phase[r->n_phase++] = *p;
	}
}

static void on_phases_end(void *ud, const st_runner_phase_result_t *phs, int n)
{
	rec_t *r = ud;
	(void)phs;
	(void)n;
	ev(r, 'Z');
}

static const st_runner_observer_t obs = {
	.version = ST_RUNNER_OBSERVER_VERSION,
	.message = on_message,
	.pass_begin = on_pass_begin,
	.pass_end = on_pass_end,
	.batch_end = on_batch_end,
	.train_end = on_train_end,
	.eval = on_eval,
	.artifact = on_artifact,
	.phase_end = on_phase_end,
	.phases_end = on_phases_end,
};

/* Runs the job with sets and opts; *res is a copy of the result (phases
 * left out). Returns st_runner_run's code. */
static int run(const char *const *sets, const st_runner_opts_t *opts, rec_t *r,
	       st_runner_result_t *res)
{
	st_job_t *job = load(sets);
	r->seq_in_order = 1;
	st_runner_t *rn = NULL;
	assert_int_equal(st_runner_create(&rn, job, opts, &obs, r), ST_OK);
	r->runner = rn;
	int rc = st_runner_run(rn);
	*res = *st_runner_result(rn);
	res->phases = NULL;
	st_runner_destroy(rn);
	st_job_free(job);
	if (getenv("ST_TEST_VERBOSE"))
		fprintf(stderr, "events %s\n%s", r->events, r->messages);
	return rc;
}

/* ---- tests --------------------------------------------------------------- */

static void test_runner_plain_run_returns_result(void **state)
{
	(void)state;
	rec_t r = { 0 };
	st_runner_result_t res;
	st_runner_opts_t o = { .digest = 1 };
	assert_int_equal(run(NULL, &o, &r, &res), ST_OK);
	assert_int_equal(res.status, ST_RUNNER_OK);
	assert_int_equal(res.rc, ST_OK);
	assert_true(res.trained);
	assert_int_equal(res.totals.examples, 6000);
	assert_int_equal(res.totals.read.rows, 6000);
	assert_int_equal(res.totals.read.bad, 0);
	assert_int_equal(res.totals.ranks, 1);
	assert_true(res.totals.has_digest);
	assert_true(res.totals.digest_rows > 0);
	assert_true(res.totals.auc > 0.5 && res.totals.auc < 1);
	assert_true(res.has_eval);
	assert_int_equal(res.eval.examples, 1000);
	assert_true(res.eval.auc > 0.5 && res.eval.auc < 1);
	assert_true(isfinite(res.eval.logloss) && isfinite(res.eval.calibration));
	assert_int_equal(res.eval.nonfinite, 0);
	/* One training pass (its batches on the dump thread, in order), the
	 * totals, then the eval pass and its scores; no checkpoint or export
	 * without their folders. */
	assert_string_equal(r.events, "(tt)T(ee)E");
	assert_true(r.seq_in_order);
	assert_true(r.batches >= 6000 / 256);
	assert_int_equal(res.ckpts_written + res.ckpt_failed + res.exports_written, 0);
}

/* Reads `strata run`'s stdout for the job. */
static void cli_run(char *out, size_t cap)
{
	const char *b = getenv("ST_BUILD_ROOT");
	assert_non_null(b);   /* the test environment sets it (tests/meson.build) */
	char cmd[1024];
	/* The CLI keeps this process's OpenBLAS kernels: on an AVX-512 CPU it
	 * would otherwise re-execute itself with SkylakeX (runtime/simd.h) while
	 * this test multiplies with whatever the loader picked (Prescott on an
	 * Emerald Rapids VM), and other kernels round differently. What is
	 * compared here is the runner against the CLI, not two BLAS builds. */
	snprintf(cmd, sizeof cmd, "STRATA_DIGEST=1 STRATA_KEEP_OPENBLAS_CORETYPE=1 '%s/cli/strata' "
		 "run '%s' --quiet --no-pin 2>/dev/null", b, job_path);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t n = fread(out, 1, cap - 1, p);
	out[n] = 0;
	assert_int_equal(pclose(p), 0);
}

static void test_runner_same_numbers_as_cli(void **state)
{
	(void)state;
	rec_t r1 = { 0 }, r2 = { 0 };
	st_runner_result_t a, b;
	st_runner_opts_t o = { .digest = 1 };
	assert_int_equal(run(NULL, &o, &r1, &a), ST_OK);
	assert_int_equal(run(NULL, &o, &r2, &b), ST_OK);
	/* Same seed, same model. */
	assert_int_equal(a.totals.digest, b.totals.digest);
	assert_int_equal(a.totals.digest_rows, b.totals.digest_rows);
	assert_true(a.eval.auc == b.eval.auc && a.eval.logloss == b.eval.logloss);
	/* And what the command line prints for the job. */
	char out[8192], want[256];
	cli_run(out, sizeof out);
	snprintf(want, sizeof want, "  model        digest %016" PRIx64 "  %" PRIu64 " rows\n",
		 a.totals.digest, a.totals.digest_rows);
	if (!strstr(out, want))
		fail_msg("`strata run` printed\n%s\nnot\n%s", out, want);
	snprintf(want, sizeof want, "  eval         auc %.4f  logloss %.4f  calibration %.3f  "
		 "(%" PRIu64 " examples)\n", a.eval.auc, a.eval.logloss, a.eval.calibration,
		 a.eval.examples);
	if (!strstr(out, want))
		fail_msg("`strata run` printed\n%s\nnot\n%s", out, want);
	snprintf(want, sizeof want, "  progressive  auc %.4f  logloss %.4f\n", a.totals.auc,
		 a.totals.logloss);
	if (!strstr(out, want))
		fail_msg("`strata run` printed\n%s\nnot\n%s", out, want);
}

static void test_runner_phases_in_order(void **state)
{
	(void)state;
	char metrics[128], set_m[200];
	snprintf(metrics, sizeof metrics, "%s/phases.jsonl", root);
	snprintf(set_m, sizeof set_m, "output={metrics=\"%s\"}", metrics);
	const char *sets[] = {
		"phases={{name=\"first\",rows=2000,validate=true,sync=st.sync.allreduce{}},"
		"{name=\"rest\",validate=true,sync=st.sync.async{}}}",
		set_m, NULL,
	};
	rec_t r = { 0 };
	st_runner_result_t res;
	st_runner_opts_t o = { 0 };
	assert_int_equal(run(sets, &o, &r, &res), ST_OK);
	assert_int_equal(res.status, ST_RUNNER_OK);
	assert_int_equal(res.n_phases, 2);
	/* Per phase: the slice scored, the training pass, the eval, the
	 * phase's end; then the phases' end and the totals. */
	assert_string_equal(r.events, "(ss)S(tt)(ee)EP(ss)S(tt)(ee)EPZT");
	assert_int_equal(r.n_phase, 2);
	assert_int_equal(r.phase[0].index, 0);
	assert_string_equal(r.phase_name[0], "first");
	assert_string_equal(r.phase_name[1], "rest");
	assert_string_equal(r.phase[0].sync, "allreduce");
	assert_int_equal(r.phase[0].examples, 2000);
	assert_true(r.phase[0].has_slice && r.phase[0].slice_examples == 2000);
	assert_true(r.phase[0].has_eval && r.phase[0].eval_examples == 1000);
	assert_int_equal(r.phase[1].index, 1);
	assert_string_equal(r.phase[1].sync, "async");
	assert_int_equal(r.phase[1].examples, 6000);
	assert_int_equal(r.phase[1].slice_examples, 6000);
	assert_true(r.phase[0].ran && r.phase[1].ran && r.phase[0].reported);
	assert_true(r.totals.phases);
	assert_int_equal(r.totals.examples, 8000);
	/* The metrics file: a {"phase": ...} line after each phase, in order. */
	FILE *f = fopen(metrics, "r");
	assert_non_null(f);
	char line[4096];
	int seen = 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "{\"phase\":", 9)) {
			assert_non_null(strstr(line, seen ? "\"rest\",\"index\":2"
							  : "\"first\",\"index\":1"));
			seen++;
		}
	fclose(f);
	assert_int_equal(seen, 2);
}

/* The checkpoints under dir: complete ones counted, *tmp the ones left
 * half-written. */
static int count_ckpts(const char *dir, int *tmp)
{
	DIR *d = opendir(dir);
	int n = 0;
	*tmp = 0;
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "ckpt-", 5)) {
			if (strstr(e->d_name, ".tmp"))
				(*tmp)++;
			else
				n++;
		}
	closedir(d);
	return n;
}

static void test_runner_cancel_then_resume_same_model(void **state)
{
	(void)state;
	char set_a[200], set_b[200], dir_b[128];
	snprintf(set_a, sizeof set_a, "checkpoint={dir=\"%s/ra\",every=4}", root);
	snprintf(dir_b, sizeof dir_b, "%s/rb", root);
	snprintf(set_b, sizeof set_b, "checkpoint={dir=\"%s\",every=4,keep=2}", dir_b);
	const char *sa[] = { set_a, NULL }, *sb[] = { set_b, NULL };
	st_runner_opts_t o = { .digest = 1 };

	rec_t whole = { 0 };
	st_runner_result_t w;
	assert_int_equal(run(sa, &o, &whole, &w), ST_OK);
	assert_true(w.totals.has_digest);

	/* Cancelled at batch 10, after two interval checkpoints: stopped, no
	 * final checkpoint, nothing half-written. */
	rec_t cut = { .cancel_at = 10, .cancel_signo = SIGINT };
	st_runner_result_t c;
	assert_int_equal(run(sb, &o, &cut, &c), ST_ECANCELED);
	assert_int_equal(c.status, ST_RUNNER_INTERRUPTED);
	assert_int_equal(c.signo, SIGINT);
	assert_false(c.trained);
	assert_int_equal(c.ckpts_written, 0);
	assert_null(strchr(cut.events, 'C'));
	int tmp = 0;
	assert_true(count_ckpts(dir_b, &tmp) >= 1);
	assert_int_equal(tmp, 0);

	/* Resumed: the same model as the run that was never stopped. */
	rec_t rest = { 0 };
	st_runner_result_t e;
	o.resume = ST_RUNNER_RESUME;
	assert_int_equal(run(sb, &o, &rest, &e), ST_OK);
	assert_true(e.resumed && e.resumed_step > 0);
	assert_non_null(strstr(rest.messages, "resuming from"));
	assert_int_equal(e.totals.digest, w.totals.digest);
	assert_int_equal(e.totals.digest_rows, w.totals.digest_rows);
	assert_true(e.eval.auc == w.eval.auc && e.eval.logloss == w.eval.logloss);
}

static void test_runner_final_checkpoint_failure_still_exports_and_evals(void **state)
{
	(void)state;
	char set_ca[300], set_xa[300], set_cb[300], set_xb[300], path[256];
	snprintf(set_ca, sizeof set_ca, "checkpoint={dir=\"%s/fa/ck\"}", root);
	snprintf(set_xa, sizeof set_xa, "export={dir=\"%s/fa/ex\"}", root);
	const char *sa[] = { set_ca, set_xa, NULL };
	st_runner_opts_t o = { 0 };
	rec_t ref = { 0 };
	st_runner_result_t a;
	assert_int_equal(run(sa, &o, &ref, &a), ST_OK);
	assert_string_equal(ref.events, "(tt)TCX(ee)E");
	assert_int_equal(ref.art[0].rc, ST_OK);
	assert_true(ref.art[0].num > 0);
	assert_int_equal(a.ckpts_written, 1);
	assert_int_equal(a.exports_written, 1);

	/* A file where the final checkpoint's folder goes. */
	snprintf(path, sizeof path, "%s/fb", root);
	assert_int_equal(mkdir(path, 0777), 0);
	snprintf(path, sizeof path, "%s/fb/ck", root);
	assert_int_equal(mkdir(path, 0777), 0);
	snprintf(path, sizeof path, "%s/fb/ck/ckpt-%012" PRId64, root, ref.art[0].num);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("not a directory\n", f);
	assert_int_equal(fclose(f), 0);
	snprintf(set_cb, sizeof set_cb, "checkpoint={dir=\"%s/fb/ck\"}", root);
	snprintf(set_xb, sizeof set_xb, "export={dir=\"%s/fb/ex\"}", root);
	const char *sb[] = { set_cb, set_xb, NULL };
	rec_t r = { 0 };
	st_runner_result_t b;
	int rc = run(sb, &o, &r, &b);
	assert_true(rc < 0);
	/* Reported, and the export and the eval still happen; the run fails. */
	assert_string_equal(r.events, "(tt)TCX(ee)E");
	assert_int_equal(r.art[0].kind, ST_RUNNER_CHECKPOINT);
	assert_true(r.art[0].rc < 0);
	assert_true(r.art_err[0][0] != 0);
	assert_int_equal(r.art[1].kind, ST_RUNNER_EXPORT);
	assert_int_equal(r.art[1].rc, ST_OK);
	assert_int_equal(b.status, ST_RUNNER_FAILED);
	assert_int_equal(b.ckpt_failed, 1);
	assert_int_equal(b.exports_written, 1);
	assert_true(b.has_eval);
	assert_int_equal(b.eval.examples, 1000);
	assert_non_null(strstr(r.messages, "final checkpoint not written"));
	assert_non_null(strstr(r.messages, "the job ran to its end, but 1 checkpoint was not "
				"written"));
}

/* A model that diverged (weights overflow at once; "warn" trains on): every
 * eval score is NaN and the result says how many. */
static void test_runner_eval_counts_nonfinite_scores(void **state)
{
	(void)state;
	const char *sets[] = {
		"model=st.model.lr{optimizer=st.optim.adagrad{lr=1e38,lr_dense=1e38}}",
		"stages.train.on_nonfinite=\"warn\"", NULL,
	};
	rec_t r = { 0 };
	st_runner_result_t res;
	st_runner_opts_t o = { 0 };
	assert_int_equal(run(sets, &o, &r, &res), ST_OK);
	assert_true(res.has_eval);
	assert_int_equal(res.eval.examples, 1000);
	assert_int_equal(res.eval.nonfinite, 1000);
	assert_true(isnan(res.eval.auc));
}

static void test_runner_cancel_before_run_is_interrupted(void **state)
{
	(void)state;
	st_job_t *job = load(NULL);
	rec_t r = { 0 };
	st_runner_t *rn = NULL;
	st_runner_opts_t o = { 0 };
	assert_int_equal(st_runner_create(&rn, job, &o, &obs, &r), ST_OK);
	st_runner_cancel(rn, SIGTERM);
	st_runner_cancel(rn, SIGINT);   /* the first one counts */
	assert_int_equal(st_runner_run(rn), ST_ECANCELED);
	const st_runner_result_t *res = st_runner_result(rn);
	assert_int_equal(res->status, ST_RUNNER_INTERRUPTED);
	assert_int_equal(res->signo, SIGTERM);
	assert_false(res->trained);
	assert_false(res->has_eval);
	st_runner_destroy(rn);
	st_job_free(job);
}

static void test_runner_job_error(void **state)
{
	(void)state;
	rec_t r = { 0 };
	st_runner_result_t res;
	st_runner_opts_t o = { .resume = ST_RUNNER_RESUME };
	assert_int_equal(run(NULL, &o, &r, &res), ST_EJOB);
	assert_int_equal(res.status, ST_RUNNER_JOB_ERROR);
	assert_false(res.trained);
	assert_non_null(strstr(r.messages, "--resume needs checkpoint.dir in the job"));
	assert_string_equal(r.events, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_runner_plain_run_returns_result),
		cmocka_unit_test(test_runner_same_numbers_as_cli),
		cmocka_unit_test(test_runner_phases_in_order),
		cmocka_unit_test(test_runner_cancel_then_resume_same_model),
		cmocka_unit_test(test_runner_final_checkpoint_failure_still_exports_and_evals),
		cmocka_unit_test(test_runner_eval_counts_nonfinite_scores),
		cmocka_unit_test(test_runner_cancel_before_run_is_interrupted),
		cmocka_unit_test(test_runner_job_error),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
