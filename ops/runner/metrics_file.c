/*
 * metrics_file.c — what a run writes to the metrics file besides the
 * progress reporter's records (runtime/metrics.h): the truncation at the
 * start of a job with phases, each phase's records appended from their
 * temporary file, and the {"phase": ...} line after each phase.
 *
 * Every open, write, flush and close is checked: a failure is logged with
 * the path and returned, so the run can end with a non-zero status instead
 * of leaving a silently truncated file (a full disk gave a 0-byte metrics
 * file and exit 0). Strings go through st_json_quote, so a phase named
 * with quotes, backslashes or newlines still gives one valid JSON line.
 *
 * Called on the thread running the job only, between passes.
 */
#include "ops/runner/runner_internal.h"
#include "runtime/err.h"
#include "runtime/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Logs the failure of `what` on path with errno e; returns its code. */
static int fail(const char *what, const char *path, int e)
{
	int rc = e > 0 ? -e : ST_EIO;
	st_error("cannot %s the metrics file %s: %s", what, path, st_strerror(rc));
	return rc;
}

/* Closes f; the first error of its writes (ferror) or of the close. */
static int close_checked(FILE *f, const char *path)
{
	int e = ferror(f) ? (errno ? errno : EIO) : 0;
	if (fclose(f) != 0 && !e)
		e = errno ? errno : EIO;
	return e ? fail("write", path, e) : ST_OK;
}

int st__runner_metrics_truncate(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return fail("create", path, errno);
	return close_checked(f, path);
}

int st__runner_metrics_append(const char *to, const char *from)
{
	FILE *in = fopen(from, "rb");
	if (!in) {
		int rc = fail("read", from, errno);
		remove(from);
		return rc;
	}
	FILE *out = fopen(to, "ab");
	if (!out) {
		int rc = fail("append to", to, errno);
		fclose(in);
		remove(from);
		return rc;
	}
	char buf[8192];
	size_t n;
	int rc = ST_OK;
	errno = 0;
	while ((n = fread(buf, 1, sizeof buf, in)) > 0)
		if (fwrite(buf, 1, n, out) != n)
			break;
	if (ferror(in))
		rc = fail("read", from, errno);
	fclose(in);
	int wrc = close_checked(out, to);
	remove(from);
	return rc < 0 ? rc : wrc;
}

/* Appends a number: JSON has no NaN or Inf, so those are null. */
static void num(FILE *f, const char *key, double v)
{
	if (isfinite(v))
		fprintf(f, ",\"%s\":%.6f", key, v);
	else
		fprintf(f, ",\"%s\":null", key);
}

/* Appends "key":<s as a JSON string>. */
static void str(FILE *f, const char *key, const char *s)
{
	char small[256];
	if (!s)
		s = "";
	size_t n = st_json_quote(small, sizeof small, s);
	char *q = n < sizeof small ? small : malloc(n + 1);
	if (q && q != small)
		st_json_quote(q, n + 1, s);
	fprintf(f, "%s\"%s\":%s", strcmp(key, "phase") ? "," : "", key, q ? q : "null");
	if (q != small)
		free(q);
}

int st__runner_metrics_phase(const char *path, const st_runner_phase_result_t *r)
{
	FILE *f = fopen(path, "a");
	if (!f)
		return fail("append to", path, errno);
	errno = 0;
	fputc('{', f);
	str(f, "phase", r->name);
	fprintf(f, ",\"index\":%d", r->index + 1);
	str(f, "sync", r->sync);
	fprintf(f, ",\"examples\":%llu,\"secs\":%.3f", (unsigned long long)r->examples, r->secs);
	num(f, "auc", r->auc);
	num(f, "logloss", r->logloss);
	fprintf(f, ",\"sync_switches\":%llu", (unsigned long long)r->switches);
	/* Ranks other than 0 have no eval numbers (NaN): no eval fields. */
	if (r->has_eval && isfinite(r->eval_auc)) {
		num(f, "eval_auc", r->eval_auc);
		num(f, "eval_logloss", r->eval_logloss);
	}
	/* Heads after the first (multi-task): auc_<label>, eval_auc_<label>, ... */
	for (int h = 1; h < r->heads.n; h++) {
		char k[64];
		snprintf(k, sizeof k, "auc_%s", r->heads.name[h]);
		num(f, k, r->heads.auc[h]);
		snprintf(k, sizeof k, "logloss_%s", r->heads.name[h]);
		num(f, k, r->heads.logloss[h]);
	}
	for (int h = 1; r->has_eval && h < r->eval_heads.n; h++) {
		char k[64];
		if (!isfinite(r->eval_heads.auc[h]))
			continue;
		snprintf(k, sizeof k, "eval_auc_%s", r->eval_heads.name[h]);
		num(f, k, r->eval_heads.auc[h]);
		snprintf(k, sizeof k, "eval_logloss_%s", r->eval_heads.name[h]);
		num(f, k, r->eval_heads.logloss[h]);
	}
	if (r->has_slice) {
		num(f, "slice_auc", r->slice_auc);
		num(f, "slice_logloss", r->slice_logloss);
		fprintf(f, ",\"slice_examples\":%llu", (unsigned long long)r->slice_examples);
	}
	fputs("}\n", f);
	return close_checked(f, path);
}
