/*
 * ckpt.c — writing checkpoint and export directories (see ckpt.h; their
 * names and listings are in ckpt_list.c, verifying and loading in
 * ckpt_read.c).
 *
 * Crash-safety rests on one ordering: every data file is fsynced when it is
 * closed, then manifest.yaml is written and fsynced, then the .tmp directory
 * is fsynced, renamed to its final name, and the root is fsynced. Only final
 * names are ever listed, and a final name only appears through that rename,
 * so a listed directory has a whole manifest, and the manifest's sizes and
 * checksums catch any file that is missing or damaged afterwards.
 *
 * Removal mirrors it: a directory leaves its final name by a rename to a
 * .tmp name before its files are deleted, so a crash in the middle of
 * retention leaves garbage that the next writer cleans, never a final name
 * with half its files.
 *
 * Any failed write removes the whole .tmp directory at once and poisons the
 * writer: later calls return the same error and commit publishes nothing.
 */
#include "ops/dump/ckpt.h"
#include "ops/dump/ckpt_internal.h"
#include "runtime/err.h"

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

struct st_ckpt_writer {
	char *root;
	char *tmp;            /* <root>/<name>.tmp */
	char *final;          /* <root>/<name> */
	st_manifest_kind_t kind;
	int64_t num;          /* step or seq */
	st_manifest_file_t *files;
	size_t n_files, cap_files;
	int err;
	int committed;
	int joined;           /* st_ckpt_join: another process owns the .tmp */
	char msg[1024];
};

/* ---------------------------------------------------------------- writing */

static int mkdir_p(const char *path, char *err, size_t errlen)
{
	char *p = strdup(path);
	if (!p)
		return ST_ENOMEM;
	for (char *s = p + 1; ; s++) {
		if (*s == '/' || !*s) {
			char c = *s;
			*s = 0;
			if (mkdir(p, 0755) < 0 && errno != EEXIST) {
				int e = errno;
				st__dumpio_seterr(err, errlen, "%s: cannot create directory: %s", p, strerror(e));
				free(p);
				return st__dumpio_errno(e);
			}
			*s = c;
			if (!c)
				break;
		}
	}
	free(p);
	struct stat st;
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
		st__dumpio_seterr(err, errlen, "%s: not a directory", path);
		return ST_EIO;
	}
	return ST_OK;
}

/* Removes a directory that has a final name: rename to .tmp first (see the
 * top of the file), then delete. */
static int remove_entry(const char *path)
{
	size_t l = strlen(path);
	char *t = malloc(l + 5);
	if (!t)
		return ST_ENOMEM;
	memcpy(t, path, l);
	memcpy(t + l, ".tmp", 5);
	st__dumpio_rmtree(t);
	int rc = rename(path, t) < 0 ? -errno : st__dumpio_rmtree(t);
	free(t);
	return rc;
}

static void remove_tmps(char **tmps, size_t n, const char *keep, st_ckpt_msg_fn *msg, void *arg)
{
	for (size_t i = 0; i < n; i++) {
		if (keep && !strcmp(tmps[i], keep))
			continue;
		int rc = st__dumpio_rmtree(tmps[i]);
		if (rc < 0)
			st__ckpt_report(msg, arg, "%s: cannot remove stale directory: %s", tmps[i], st_strerror(rc));
	}
}

static int begin(const char *root, st_manifest_kind_t kind, int64_t num, st_ckpt_writer_t **out,
		 char *err, size_t errlen)
{
	*out = NULL;
	if (!root || !*root || num < 0) {
		st__dumpio_seterr(err, errlen, "checkpoint: bad root or step/sequence number");
		return ST_EINVAL;
	}
	int rc = mkdir_p(root, err, errlen);
	if (rc < 0)
		return rc;
	char name[64];
	if (kind == ST_MANIFEST_CHECKPOINT)
		snprintf(name, sizeof name, "ckpt-%012" PRId64, num);
	else
		snprintf(name, sizeof name, "export-%012" PRId64 "-%s", num,
			 kind == ST_MANIFEST_EXPORT_FULL ? "full" : "delta");
	st_ckpt_writer_t *w = calloc(1, sizeof *w);
	char tname[80];
	snprintf(tname, sizeof tname, "%s.tmp", name);
	if (!w || !(w->root = strdup(root)) || !(w->final = st__ckpt_path_join(root, name)) ||
	    !(w->tmp = st__ckpt_path_join(root, tname))) {
		st_ckpt_writer_destroy(w);
		return ST_ENOMEM;
	}
	w->committed = 1;   /* nothing to clean up until the .tmp exists */
	w->kind = kind;
	w->num = num;

	/* Leftovers of crashed or failed writers: a .tmp is never complete. */
	st_ckpt_entry_t *e;
	size_t n, nt;
	char **tmps;
	rc = st__ckpt_scan(root, kind != ST_MANIFEST_CHECKPOINT, &e, &n, &tmps, &nt, err, errlen);
	if (rc < 0) {
		st_ckpt_writer_destroy(w);
		return rc;
	}
	remove_tmps(tmps, nt, NULL, NULL, NULL);
	for (size_t i = 0; i < nt; i++)
		free(tmps[i]);
	free(tmps);
	st_ckpt_entries_free(e, n);
	st__dumpio_rmtree(w->tmp);   /* not listed if its name is odd */
	if (mkdir(w->tmp, 0755) < 0) {
		int e2 = errno;
		st__dumpio_seterr(err, errlen, "%s: cannot create directory: %s", w->tmp, strerror(e2));
		st_ckpt_writer_destroy(w);
		return st__dumpio_errno(e2);
	}
	w->committed = 0;
	*out = w;
	return ST_OK;
}

int st_ckpt_begin(const char *root, int64_t step, st_ckpt_writer_t **out, char *err, size_t errlen)
{
	return begin(root, ST_MANIFEST_CHECKPOINT, step, out, err, errlen);
}

int st_ckpt_export_begin(const char *root, int64_t seq, int delta, st_ckpt_writer_t **out,
			 char *err, size_t errlen)
{
	return begin(root, delta ? ST_MANIFEST_EXPORT_DELTA : ST_MANIFEST_EXPORT_FULL, seq, out,
		     err, errlen);
}

static int join(const char *root, st_manifest_kind_t kind, int64_t step,
		st_ckpt_writer_t **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!root || !*root || step < 0) {
		st__dumpio_seterr(err, errlen, "checkpoint: bad root or step number");
		return ST_EINVAL;
	}
	char name[64], tname[80];
	if (kind == ST_MANIFEST_CHECKPOINT)
		snprintf(name, sizeof name, "ckpt-%012" PRId64, step);
	else
		snprintf(name, sizeof name, "export-%012" PRId64 "-%s", step,
			 kind == ST_MANIFEST_EXPORT_FULL ? "full" : "delta");
	snprintf(tname, sizeof tname, "%s.tmp", name);
	st_ckpt_writer_t *w = calloc(1, sizeof *w);
	if (!w || !(w->root = strdup(root)) || !(w->final = st__ckpt_path_join(root, name)) ||
	    !(w->tmp = st__ckpt_path_join(root, tname))) {
		st_ckpt_writer_destroy(w);
		return ST_ENOMEM;
	}
	w->kind = kind;
	w->num = step;
	w->joined = 1;
	struct stat sb;
	if (stat(w->tmp, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
		int e = errno;
		if (e == ENOENT || !e)
			st__dumpio_seterr(err, errlen, "%s: no such directory: rank 0 did not create "
					  "it, or this process does not see rank 0's folder (the ranks "
					  "of a job must share the %s folder)", w->tmp,
					  kind == ST_MANIFEST_CHECKPOINT ? "checkpoint" : "export");
		else
			st__dumpio_seterr(err, errlen, "%s: %s", w->tmp, strerror(e));
		st_ckpt_writer_destroy(w);
		return e == ENOENT || !e ? ST_ENOENT : st__dumpio_errno(e);
	}
	*out = w;
	return ST_OK;
}

int st_ckpt_join(const char *root, int64_t step, st_ckpt_writer_t **out, char *err,
		 size_t errlen)
{
	return join(root, ST_MANIFEST_CHECKPOINT, step, out, err, errlen);
}

int st_ckpt_export_join(const char *root, int64_t seq, int delta, st_ckpt_writer_t **out,
			char *err, size_t errlen)
{
	return join(root, delta ? ST_MANIFEST_EXPORT_DELTA : ST_MANIFEST_EXPORT_FULL, seq, out,
		    err, errlen);
}

const st_manifest_file_t *st_ckpt_writer_files(const st_ckpt_writer_t *w, size_t *n)
{
	*n = w->n_files;
	return w->files;
}

const char *st_ckpt_writer_tmpdir(const st_ckpt_writer_t *w)
{
	return w->tmp;
}

const char *st_ckpt_writer_dir(const st_ckpt_writer_t *w)
{
	return w->final;
}

const char *st_ckpt_error(const st_ckpt_writer_t *w)
{
	return w->msg;
}

/* Records the writer's first error and removes the .tmp directory, so a
 * failed checkpoint costs no disk space and cannot be mistaken for one. */
static int wfail(st_ckpt_writer_t *w, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int wfail(st_ckpt_writer_t *w, int rc, const char *fmt, ...)
{
	if (!w->err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(w->msg, sizeof w->msg, fmt, ap);
		va_end(ap);
		w->err = rc;
	}
	if (!w->committed) {
		if (!w->joined)
			st__dumpio_rmtree(w->tmp);
		w->committed = 1;   /* nothing left to publish or clean */
	}
	return w->err;
}

/* Checks a file name before anything is written under it. */
static int check_file(st_ckpt_writer_t *w, const char *file)
{
	if (w->err)
		return w->err;
	if (!file || !*file || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, "..") ||
	    !strcmp(file, ST_MANIFEST_NAME))
		return wfail(w, ST_EINVAL, "%s: '%s' is not a usable file name", w->tmp,
			     file ? file : "(null)");
	for (size_t i = 0; i < w->n_files; i++)
		if (!strcmp(w->files[i].name, file))
			return wfail(w, ST_EINVAL, "%s: file '%s' written twice", w->tmp, file);
	return ST_OK;
}

static int add_entry(st_ckpt_writer_t *w, const char *file, const st_dumpio_sum_t *sum)
{
	if (w->n_files == w->cap_files) {
		size_t cap = w->cap_files ? 2 * w->cap_files : 8;
		st_manifest_file_t *f = realloc(w->files, cap * sizeof *f);
		if (!f)
			return wfail(w, ST_ENOMEM, "out of memory");
		w->files = f;
		w->cap_files = cap;
	}
	char *n = strdup(file);
	if (!n)
		return wfail(w, ST_ENOMEM, "out of memory");
	w->files[w->n_files++] = (st_manifest_file_t){ n, sum->bytes, sum->xxh3 };
	return ST_OK;
}

/* A delta export holds delta row files, everything else full ones. */
static int check_flags(st_ckpt_writer_t *w, const char *file, const st_rows_info_t *info)
{
	int want = w->kind == ST_MANIFEST_EXPORT_DELTA;
	if (!(info->flags & ST_ROWS_DELTA) == !want)
		return ST_OK;
	return wfail(w, ST_EINVAL, "%s: a %s holds %s row files (flags %s ST_ROWS_DELTA)", file,
		     w->kind == ST_MANIFEST_CHECKPOINT ? "checkpoint" : want ? "delta export" : "full export",
		     want ? "delta" : "full", want ? "with" : "without");
}

int st_ckpt_add_entry(st_ckpt_writer_t *w, const char *file, uint64_t bytes, uint64_t xxh3)
{
	int rc = check_file(w, file);
	if (rc < 0)
		return rc;
	char *path = st__ckpt_path_join(w->tmp, file);
	if (!path)
		return wfail(w, ST_ENOMEM, "out of memory");
	struct stat sb;
	if (stat(path, &sb) < 0) {
		int e = errno;
		rc = wfail(w, e == ENOENT ? ST_ENOENT : st__dumpio_errno(e), "%s: %s", path,
			   strerror(e));
		free(path);
		return rc;
	}
	free(path);
	if ((uint64_t)sb.st_size != bytes)
		return wfail(w, ST_ECORRUPT, "%s/%s: %lld bytes, its writer reported %" PRIu64,
			     w->tmp, file, (long long)sb.st_size, bytes);
	st_dumpio_sum_t sum = { .bytes = bytes, .xxh3 = xxh3 };
	return add_entry(w, file, &sum);
}

int st_ckpt_write_dense(st_ckpt_writer_t *w, const char *file, const st_safetensors_tensor_t *t,
			int n, const st_kv_t *meta, int n_meta)
{
	int rc = check_file(w, file);
	if (rc < 0)
		return rc;
	char *path = st__ckpt_path_join(w->tmp, file);
	if (!path)
		return wfail(w, ST_ENOMEM, "out of memory");
	char err[512] = "";
	st_dumpio_sum_t sum;
	rc = st_safetensors_write(path, t, n, meta, n_meta, &sum, err, sizeof err);
	free(path);
	if (rc < 0)
		return wfail(w, rc, "%s", err);
	return add_entry(w, file, &sum);
}

int st_ckpt_write_rows(st_ckpt_writer_t *w, const char *file, const st_rows_info_t *info,
		       st_rows_row_t *rows, size_t n, uint64_t *deleted, size_t n_deleted)
{
	int rc = check_file(w, file);
	if (rc < 0)
		return rc;
	if ((rc = check_flags(w, file, info)) < 0)
		return rc;
	char *path = st__ckpt_path_join(w->tmp, file);
	if (!path)
		return wfail(w, ST_ENOMEM, "out of memory");
	char err[512] = "";
	st_dumpio_sum_t sum;
	rc = st_rows_write(path, info, rows, n, deleted, n_deleted, &sum, err, sizeof err);
	free(path);
	if (rc < 0)
		return wfail(w, rc, "%s", err);
	return add_entry(w, file, &sum);
}

int st_ckpt_write_rows_from(st_ckpt_writer_t *w, const char *file, st_rows_writer_t *b)
{
	int rc = check_file(w, file);
	if (rc < 0 || (rc = check_flags(w, file, st_rows_writer_info(b))) < 0)
		return rc;
	char *path = st__ckpt_path_join(w->tmp, file);
	if (!path)
		return wfail(w, ST_ENOMEM, "out of memory");
	char err[512] = "";
	st_dumpio_sum_t sum;
	rc = st_rows_writer_finish(b, path, &sum, err, sizeof err);
	free(path);
	if (rc < 0)
		return wfail(w, rc, "%s", err);
	return add_entry(w, file, &sum);
}

int st_ckpt_add_file(st_ckpt_writer_t *w, const char *file)
{
	int rc = check_file(w, file);
	if (rc < 0)
		return rc;
	char *path = st__ckpt_path_join(w->tmp, file);
	if (!path)
		return wfail(w, ST_ENOMEM, "out of memory");
	char err[512] = "";
	st_dumpio_sum_t sum;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		rc = wfail(w, st__dumpio_errno(e), "%s: cannot open: %s", path, strerror(e));
		free(path);
		return rc;
	}
	int s = st__dumpio_fsync_hook ? st__dumpio_fsync_hook(fd) : fsync(fd);
	int e = errno;
	close(fd);
	if (s < 0) {
		rc = wfail(w, st__dumpio_errno(e), "%s: fsync failed: %s", path, strerror(e));
		free(path);
		return rc;
	}
	rc = st__dumpio_hash_file(path, &sum, err, sizeof err);
	free(path);
	if (rc < 0)
		return wfail(w, rc, "%s", err);
	return add_entry(w, file, &sum);
}

/* Puts tmp under the final name. When the final name exists (the same step
 * written again after a resume), the two are swapped atomically and the old
 * one, now under the .tmp name, is deleted. */
static int publish(st_ckpt_writer_t *w)
{
	if (rename(w->tmp, w->final) == 0)
		return ST_OK;
	if (errno != ENOTEMPTY && errno != EEXIST)
		return -errno;
	if (renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->final, RENAME_EXCHANGE) == 0) {
		st__dumpio_rmtree(w->tmp);
		return ST_OK;
	}
	/* No RENAME_EXCHANGE (old kernels, some file systems): a short window
	 * in which neither exists; older checkpoints still cover it. */
	int rc = remove_entry(w->final);
	if (rc < 0)
		return rc;
	return rename(w->tmp, w->final) == 0 ? ST_OK : -errno;
}

static void retention(st_ckpt_writer_t *w, int keep, st_ckpt_msg_fn *msg, void *arg)
{
	st_ckpt_entry_t *e;
	size_t n, nt;
	char **tmps;
	char err[512] = "";
	int is_export = w->kind != ST_MANIFEST_CHECKPOINT;
	if (st__ckpt_scan(w->root, is_export, &e, &n, &tmps, &nt, err, sizeof err) < 0) {
		st__ckpt_report(msg, arg, "retention skipped: %s", err);
		return;
	}
	remove_tmps(tmps, nt, NULL, msg, arg);
	for (size_t i = 0; i < nt; i++)
		free(tmps[i]);
	free(tmps);
	if (keep > 0 && n > 0) {
		qsort(e, n, sizeof *e, st__ckpt_cmp_newest_first);
		int64_t cutoff = -1;   /* remove entries numbered below it */
		if (!is_export) {
			if (n > (size_t)keep)
				cutoff = e[keep - 1].num;
		} else {
			int fulls = 0;
			for (size_t i = 0; i < n && cutoff < 0; i++)
				if (e[i].kind == ST_MANIFEST_EXPORT_FULL && ++fulls == keep)
					cutoff = e[i].num;
		}
		for (size_t i = 0; i < n && cutoff >= 0; i++) {
			if (e[i].num >= cutoff)
				continue;
			int rc = remove_entry(e[i].path);
			if (rc < 0)
				st__ckpt_report(msg, arg, "%s: cannot remove old %s: %s", e[i].path,
				       is_export ? "export" : "checkpoint", st_strerror(rc));
		}
	}
	st_ckpt_entries_free(e, n);
}

int st_ckpt_commit(st_ckpt_writer_t *w, const st_manifest_t *m, int keep,
		   st_ckpt_msg_fn *msg, void *arg)
{
	if (w->err)
		return w->err;
	if (w->committed || w->joined)
		return wfail(w, ST_EINVAL, "%s: %s", w->final, w->joined ? "only rank 0 commits "
			     "a multi-process checkpoint" : "already committed");
	st_manifest_t mm = *m;
	mm.kind = w->kind;
	if (w->kind == ST_MANIFEST_CHECKPOINT) {
		mm.step = w->num;
		mm.seq = -1;
	} else {
		mm.seq = w->num;
	}
	if (!mm.created)
		mm.created = (int64_t)time(NULL);
	mm.files = w->files;
	mm.n_files = w->n_files;
	char *path = st__ckpt_path_join(w->tmp, ST_MANIFEST_NAME);
	if (!path)
		return wfail(w, ST_ENOMEM, "out of memory");
	char err[512] = "";
	int rc = st_manifest_write(path, &mm, NULL, err, sizeof err);
	free(path);
	if (rc < 0)
		return wfail(w, rc, "%s", err);
	if ((rc = st__dumpio_fsync_dir(w->tmp, err, sizeof err)) < 0)
		return wfail(w, rc, "%s", err);
	if ((rc = publish(w)) < 0)
		return wfail(w, rc, "%s: cannot rename to %s: %s", w->tmp, w->final, st_strerror(rc));
	w->committed = 1;
	/* The directory is complete under its final name now; a failing root
	 * fsync only means the rename may not survive a power cut. Report it,
	 * but do not delete a good checkpoint. */
	if ((rc = st__dumpio_fsync_dir(w->root, err, sizeof err)) < 0) {
		w->err = rc;
		snprintf(w->msg, sizeof w->msg, "%s (the checkpoint %s is complete but its "
			 "rename may not be durable)", err, w->final);
		return rc;
	}
	retention(w, keep, msg, arg);
	return ST_OK;
}

void st_ckpt_writer_destroy(st_ckpt_writer_t *w)
{
	if (!w)
		return;
	if (!w->committed && !w->joined && w->tmp)
		st__dumpio_rmtree(w->tmp);
	for (size_t i = 0; i < w->n_files; i++)
		free(w->files[i].name);
	free(w->files);
	free(w->root);
	free(w->tmp);
	free(w->final);
	free(w);
}
