/*
 * ckpt_read.c — verifying checkpoint and export directories against their
 * manifests, finding the newest intact checkpoint, the compatibility and
 * lineage checks, and the apply order of an export chain (see ckpt.h).
 *
 * Threads: the caller's only.
 */
#include "ops/dump/ckpt.h"
#include "ops/dump/ckpt_internal.h"
#include "runtime/err.h"
#include "runtime/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- reading */

/* The progress line of a verification (st_ckpt_verify): bytes of the
 * files done before this one, and the meter. */
typedef struct verify_meter {
	st_meter_t m;
	uint64_t before;
} verify_meter_t;

static void verify_progress(void *arg, uint64_t bytes)
{
	verify_meter_t *v = arg;
	st_meter_update(&v->m, (int64_t)((v->before + bytes) >> 20), v->m.total);
}

static int verify_file(const char *dir, const st_manifest_file_t *f, int size_only,
		       verify_meter_t *v, char *err, size_t errlen);

int st_ckpt_verify_file(const char *dir, const st_manifest_file_t *f, char *err, size_t errlen)
{
	return verify_file(dir, f, 0, NULL, err, errlen);
}

int st_ckpt_check_size(const char *dir, const st_manifest_file_t *f, char *err, size_t errlen)
{
	return verify_file(dir, f, 1, NULL, err, errlen);
}

int st_ckpt_check_sum(const st_manifest_file_t *f, const st_dumpio_sum_t *sum, char *err,
		      size_t errlen)
{
	if (sum->xxh3 == f->xxh3 && sum->bytes == f->bytes)
		return ST_OK;
	st__dumpio_seterr(err, errlen, "file '%s': checksum mismatch (the manifest says xxh3 %016"
			  PRIx64 ", the file hashes to %016" PRIx64 ")", f->name, f->xxh3, sum->xxh3);
	return ST_ECORRUPT;
}

static int verify_file(const char *dir, const st_manifest_file_t *f, int size_only,
		       verify_meter_t *v, char *err, size_t errlen)
{
	char *path = st__ckpt_path_join(dir, f->name);
	if (!path)
		return ST_ENOMEM;
	struct stat st;
	if (stat(path, &st) < 0) {
		int e = errno;
		free(path);
		if (e == ENOENT) {
			st__dumpio_seterr(err, errlen, "file '%s': missing", f->name);
			return ST_ENOENT;
		}
		st__dumpio_seterr(err, errlen, "file '%s': %s", f->name, strerror(e));
		return st__dumpio_errno(e);
	}
	/* The size first: it is free, and a short file is the common damage. */
	if ((uint64_t)st.st_size != f->bytes) {
		free(path);
		st__dumpio_seterr(err, errlen, "file '%s': size mismatch (the manifest says %" PRIu64
				  " bytes, the file has %lld)", f->name, f->bytes, (long long)st.st_size);
		return ST_ECORRUPT;
	}
	if (size_only) {
		free(path);
		return ST_OK;
	}
	st_dumpio_sum_t sum;
	char e2[512] = "";
	int rc = st__dumpio_hash_file_cb(path, &sum, e2, sizeof e2, v ? verify_progress : NULL, v);
	free(path);
	if (rc < 0) {
		st__dumpio_seterr(err, errlen, "file '%s': %s", f->name, e2);
		return rc;
	}
	return st_ckpt_check_sum(f, &sum, err, errlen);
}

/* st_ckpt_verify, with the files defer picks checked by size only. */
static int verify_dir(const char *dir, st_ckpt_defer_fn *defer, void *arg, st_manifest_t **out,
		      char *err, size_t errlen)
{
	if (out)
		*out = NULL;
	char *path = st__ckpt_path_join(dir, ST_MANIFEST_NAME);
	if (!path)
		return ST_ENOMEM;
	st_manifest_t *m;
	int rc = st_manifest_read(path, &m, err, errlen);
	free(path);
	if (rc < 0)
		return rc;
	/* A multi-process checkpoint is whole only with every rank's shard. */
	rc = st_manifest_check_world(m, err, errlen);
	/* A checkpoint of many GB takes seconds to hash: a progress line on a
	 * terminal (runtime/metrics.h; nothing on a file or pipe). */
	verify_meter_t v = { .before = 0 };
	char what[96];
	const char *base = strrchr(dir, '/');
	snprintf(what, sizeof what, "verifying %s", base ? base + 1 : dir);
	st_meter_init(&v.m, what, "MiB");
	uint64_t all = 0;
	for (size_t i = 0; i < m->n_files; i++)
		if (!defer || !defer(arg, m, &m->files[i]))
			all += m->files[i].bytes;
	v.m.total = (int64_t)(all >> 20);
	for (size_t i = 0; i < m->n_files && rc == ST_OK; i++) {
		int later = defer && defer(arg, m, &m->files[i]);
		rc = verify_file(dir, &m->files[i], later, &v, err, errlen);
		if (!later)
			v.before += m->files[i].bytes;
	}
	st_meter_fini(&v.m);
	if (rc == ST_OK && out)
		*out = m;
	else
		st_manifest_free(m);
	return rc;
}

int st_ckpt_verify(const char *dir, st_manifest_t **out, char *err, size_t errlen)
{
	return verify_dir(dir, NULL, NULL, out, err, errlen);
}

int st_ckpt_find_latest(const char *root, char **dir, st_manifest_t **m,
			st_ckpt_msg_fn *msg, void *arg, char *err, size_t errlen)
{
	return st_ckpt_find_latest_opts(root, NULL, dir, m, msg, arg, err, errlen);
}

int st_ckpt_find_latest_opts(const char *root, const st_ckpt_find_opts_t *o, char **dir,
			     st_manifest_t **m, st_ckpt_msg_fn *msg, void *arg, char *err,
			     size_t errlen)
{
	*dir = NULL;
	*m = NULL;
	st_ckpt_entry_t *e;
	size_t n;
	int rc = st_ckpt_list(root, &e, &n, err, errlen);
	if (rc < 0)
		return rc;
	size_t i = 0;
	if (o && o->rejected) {
		/* The caller's verdict on a checkpoint this function chose
		 * before, said as a failed verification would be. */
		while (i < n && e[i].num >= o->rejected_step)
			i++;
		if (i < n)
			st__ckpt_report(msg, arg, "checkpoint %s: %s — falling back to %s", o->rejected,
					o->why, e[i].name);
		else
			st__ckpt_report(msg, arg, "checkpoint %s: %s — no older checkpoint left",
					o->rejected, o->why);
	}
	for (; i < n; i++) {
		char why[1024] = "";
		rc = verify_dir(e[i].path, o ? o->defer : NULL, o ? o->defer_arg : NULL, m, why,
				sizeof why);
		if (rc == ST_OK) {
			*dir = e[i].path;
			e[i].path = NULL;
			st_ckpt_entries_free(e, n);
			return ST_OK;
		}
		if (rc == ST_ENOMEM) {
			st_ckpt_entries_free(e, n);
			st__dumpio_seterr(err, errlen, "%s: out of memory", root);
			return rc;
		}
		if (i + 1 < n)
			st__ckpt_report(msg, arg, "checkpoint %s: %s — falling back to %s", e[i].name, why,
			       e[i + 1].name);
		else
			st__ckpt_report(msg, arg, "checkpoint %s: %s — no older checkpoint left", e[i].name, why);
	}
	if (n)
		st__dumpio_seterr(err, errlen, "%s: none of the %zu checkpoints verifies", root, n);
	else
		st__dumpio_seterr(err, errlen, "%s: no complete checkpoint", root);
	st_ckpt_entries_free(e, n);
	return ST_ENOENT;
}

int st_ckpt_check_compat(const st_manifest_t *m, const char *job_hash, const char *model,
			 char *err, size_t errlen)
{
	int hash_bad = job_hash && strcmp(m->job_hash, job_hash);
	int model_bad = model && (!m->model || strcmp(m->model, model));
	if (!hash_bad && !model_bad)
		return ST_OK;
	char a[512] = "", b[512] = "";
	if (hash_bad)
		snprintf(a, sizeof a, "job hash differs (checkpoint '%s', this job '%s')",
			 m->job_hash, job_hash);
	if (model_bad)
		snprintf(b, sizeof b, "%smodel differs (checkpoint '%s', this job '%s')",
			 hash_bad ? "; " : "", m->model ? m->model : "(none)", model);
	st__dumpio_seterr(err, errlen, "checkpoint of job '%s' at step %" PRId64 " does not fit this "
			  "job: %s%s. Restore the job that wrote it, or start without resuming",
			  m->job_name, m->step, a, b);
	return ST_EINVAL;
}

int st_ckpt_check_lineage(const st_manifest_t *base, const char *base_name,
			  const st_manifest_t *m, const char *name, char *err, size_t errlen)
{
	const char *bl = base->lineage, *ml = m->lineage;
	if (!strcmp(base->job_name, m->job_name) && (bl ? ml && !strcmp(bl, ml) : !ml))
		return ST_OK;
	st__dumpio_seterr(err, errlen, "export %s was written by another run than %s (job '%s', "
			  "lineage %s; %s has job '%s', lineage %s): it does not apply on top of "
			  "it. Two runs wrote into one export directory: give each run its own "
			  "export.dir, or remove the other run's exports", name, base_name,
			  m->job_name, ml ? ml : "(none)", base_name, base->job_name,
			  bl ? bl : "(none)");
	return ST_ECORRUPT;
}

int st_ckpt_list_exports(const char *root, int verify, st_ckpt_entry_t **out, size_t *n,
			 st_ckpt_msg_fn *msg, void *arg, char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	st_ckpt_entry_t *e;
	size_t ne;
	int rc = st__ckpt_scan(root, 1, &e, &ne, NULL, NULL, err, errlen);
	if (rc < 0 || ne == 0)
		return rc;
	qsort(e, ne, sizeof *e, st__ckpt_cmp_oldest_first);
	/* the newest full export that (optionally) verifies */
	ptrdiff_t base = -1;
	for (ptrdiff_t i = (ptrdiff_t)ne - 1; i >= 0 && base < 0; i--) {
		if (e[i].kind != ST_MANIFEST_EXPORT_FULL)
			continue;
		char why[1024] = "";
		if (!verify || (rc = st_ckpt_verify(e[i].path, NULL, why, sizeof why)) == ST_OK) {
			base = i;
			break;
		}
		if (rc == ST_ENOMEM)
			goto oom;
		ptrdiff_t prev = i - 1;
		while (prev >= 0 && e[prev].kind != ST_MANIFEST_EXPORT_FULL)
			prev--;
		if (prev >= 0)
			st__ckpt_report(msg, arg, "export %s: %s — falling back to %s", e[i].name, why, e[prev].name);
		else
			st__ckpt_report(msg, arg, "export %s: %s — no older full export left", e[i].name, why);
	}
	if (base < 0) {
		st_ckpt_entries_free(e, ne);
		return ST_OK;
	}
	size_t end = (size_t)base + 1;
	for (size_t i = end; i < ne; i++, end++) {
		int64_t want = e[base].num + (int64_t)(i - (size_t)base);
		if (e[i].num != want || e[i].kind != ST_MANIFEST_EXPORT_DELTA) {
			if (e[i].num != want)
				st__ckpt_report(msg, arg, "export %s: sequence gap (expected %" PRId64 ") — it and later "
				       "exports are not applied", e[i].name, want);
			else
				st__ckpt_report(msg, arg, "export %s: not a delta following %s — it and later exports "
				       "are not applied", e[i].name, e[base].name);
			break;
		}
		char why[1024] = "";
		if (verify && (rc = st_ckpt_verify(e[i].path, NULL, why, sizeof why)) < 0) {
			if (rc == ST_ENOMEM)
				goto oom;
			st__ckpt_report(msg, arg, "export %s: %s — the chain ends at the export before it",
			       e[i].name, why);
			break;
		}
	}
	/* move [base, end) to the front */
	size_t k = 0;
	for (size_t i = 0; i < ne; i++) {
		if (i >= (size_t)base && i < end) {
			e[k++] = e[i];
		} else {
			free(e[i].path);
			free(e[i].name);
		}
	}
	*out = e;
	*n = k;
	return ST_OK;
oom:
	st_ckpt_entries_free(e, ne);
	st__dumpio_seterr(err, errlen, "%s: out of memory", root);
	return ST_ENOMEM;
}
