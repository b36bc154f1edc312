/*
 * ckpt.c — checkpoint and export directories (see ckpt.h).
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
	char msg[1024];
};

/* ---------------------------------------------------------------- names */

static char *path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);
	if (!p)
		return NULL;
	memcpy(p, a, la);
	p[la] = '/';
	memcpy(p + la + 1, b, lb + 1);
	return p;
}

/* Parses "ckpt-<digits>", "export-<digits>-full" or "export-<digits>-delta",
 * optionally followed by ".tmp". Returns 1 and the fields, or 0 for any
 * other name. */
static int parse_name(const char *s, st_manifest_kind_t *kind, int64_t *num, int *tmp)
{
	const char *p;
	int is_export;
	if (!strncmp(s, "ckpt-", 5))
		p = s + 5, is_export = 0;
	else if (!strncmp(s, "export-", 7))
		p = s + 7, is_export = 1;
	else
		return 0;
	int64_t v = 0;
	int nd = 0;
	while (*p >= '0' && *p <= '9' && nd < 18) {
		v = v * 10 + (*p++ - '0');
		nd++;
	}
	if (!nd || (*p >= '0' && *p <= '9'))
		return 0;
	if (is_export) {
		if (!strncmp(p, "-full", 5))
			*kind = ST_MANIFEST_EXPORT_FULL, p += 5;
		else if (!strncmp(p, "-delta", 6))
			*kind = ST_MANIFEST_EXPORT_DELTA, p += 6;
		else
			return 0;
	} else {
		*kind = ST_MANIFEST_CHECKPOINT;
	}
	if (!strcmp(p, ".tmp"))
		*tmp = 1;
	else if (!*p)
		*tmp = 0;
	else
		return 0;
	*num = v;
	return 1;
}

static int is_file(const char *dir, const char *name)
{
	char *p = path_join(dir, name);
	struct stat st;
	int ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
	free(p);
	return ok;
}

/* Scans root: complete entries (want_export selects the family) and, with
 * tmps non-NULL, stale .tmp directories of that family. */
static int scan(const char *root, int want_export, st_ckpt_entry_t **out, size_t *n,
		char ***tmps, size_t *n_tmps, char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	if (tmps)
		*tmps = NULL, *n_tmps = 0;
	DIR *d = opendir(root);
	if (!d) {
		if (errno == ENOENT)
			return ST_OK;
		int e = errno;
		st__dumpio_seterr(err, errlen, "%s: cannot list: %s", root, strerror(e));
		return st__dumpio_errno(e);
	}
	size_t cap = 0, cap_t = 0;
	int rc = ST_OK;
	struct dirent *de;
	while ((de = readdir(d))) {
		st_manifest_kind_t kind;
		int64_t num;
		int tmp;
		if (!parse_name(de->d_name, &kind, &num, &tmp))
			continue;
		if ((kind != ST_MANIFEST_CHECKPOINT) != want_export)
			continue;
		if (tmp) {
			if (!tmps)
				continue;
			if (*n_tmps == cap_t) {
				cap_t = cap_t ? 2 * cap_t : 8;
				char **t = realloc(*tmps, cap_t * sizeof *t);
				if (!t) {
					rc = ST_ENOMEM;
					break;
				}
				*tmps = t;
			}
			if (!((*tmps)[*n_tmps] = path_join(root, de->d_name))) {
				rc = ST_ENOMEM;
				break;
			}
			(*n_tmps)++;
			continue;
		}
		char *path = path_join(root, de->d_name);
		if (!path) {
			rc = ST_ENOMEM;
			break;
		}
		if (!is_file(path, ST_MANIFEST_NAME)) {
			free(path);    /* not ours, or damaged beyond use: never listed */
			continue;
		}
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			st_ckpt_entry_t *e = realloc(*out, cap * sizeof *e);
			if (!e) {
				free(path);
				rc = ST_ENOMEM;
				break;
			}
			*out = e;
		}
		st_ckpt_entry_t *e = &(*out)[*n];
		e->path = path;
		e->name = strdup(de->d_name);
		e->kind = kind;
		e->num = num;
		(*n)++;
		if (!e->name) {
			rc = ST_ENOMEM;
			break;
		}
	}
	closedir(d);
	if (rc < 0) {
		st_ckpt_entries_free(*out, *n);
		*out = NULL;
		*n = 0;
		if (tmps) {
			for (size_t i = 0; i < *n_tmps; i++)
				free((*tmps)[i]);
			free(*tmps);
			*tmps = NULL;
			*n_tmps = 0;
		}
		st__dumpio_seterr(err, errlen, "%s: out of memory", root);
	}
	return rc;
}

void st_ckpt_entries_free(st_ckpt_entry_t *e, size_t n)
{
	if (!e)
		return;
	for (size_t i = 0; i < n; i++) {
		free(e[i].path);
		free(e[i].name);
	}
	free(e);
}

static int cmp_newest_first(const void *a, const void *b)
{
	const st_ckpt_entry_t *x = a, *y = b;
	if (x->num != y->num)
		return x->num > y->num ? -1 : 1;
	return (int)x->kind - (int)y->kind;
}

static int cmp_oldest_first(const void *a, const void *b)
{
	return cmp_newest_first(b, a);
}

int st_ckpt_list(const char *root, st_ckpt_entry_t **out, size_t *n, char *err, size_t errlen)
{
	int rc = scan(root, 0, out, n, NULL, NULL, err, errlen);
	if (rc == ST_OK && *n > 1)
		qsort(*out, *n, sizeof **out, cmp_newest_first);
	return rc;
}

/* ---------------------------------------------------------------- writing */

static void report(st_ckpt_msg_fn *msg, void *arg, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void report(st_ckpt_msg_fn *msg, void *arg, const char *fmt, ...)
{
	char b[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b, sizeof b, fmt, ap);
	va_end(ap);
	if (msg)
		msg(arg, b);
	else
		st_warn("%s", b);
}

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
			report(msg, arg, "%s: cannot remove stale directory: %s", tmps[i], st_strerror(rc));
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
	if (!w || !(w->root = strdup(root)) || !(w->final = path_join(root, name)) ||
	    !(w->tmp = path_join(root, tname))) {
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
	rc = scan(root, kind != ST_MANIFEST_CHECKPOINT, &e, &n, &tmps, &nt, err, errlen);
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

int st_ckpt_write_dense(st_ckpt_writer_t *w, const char *file, const st_safetensors_tensor_t *t,
			int n, const st_kv_t *meta, int n_meta)
{
	int rc = check_file(w, file);
	if (rc < 0)
		return rc;
	char *path = path_join(w->tmp, file);
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
	char *path = path_join(w->tmp, file);
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
	char *path = path_join(w->tmp, file);
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
	char *path = path_join(w->tmp, file);
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
	if (scan(w->root, is_export, &e, &n, &tmps, &nt, err, sizeof err) < 0) {
		report(msg, arg, "retention skipped: %s", err);
		return;
	}
	remove_tmps(tmps, nt, NULL, msg, arg);
	for (size_t i = 0; i < nt; i++)
		free(tmps[i]);
	free(tmps);
	if (keep > 0 && n > 0) {
		qsort(e, n, sizeof *e, cmp_newest_first);
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
				report(msg, arg, "%s: cannot remove old %s: %s", e[i].path,
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
	if (w->committed)
		return wfail(w, ST_EINVAL, "%s: already committed", w->final);
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
	char *path = path_join(w->tmp, ST_MANIFEST_NAME);
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
	if (!w->committed && w->tmp)
		st__dumpio_rmtree(w->tmp);
	for (size_t i = 0; i < w->n_files; i++)
		free(w->files[i].name);
	free(w->files);
	free(w->root);
	free(w->tmp);
	free(w->final);
	free(w);
}

/* ---------------------------------------------------------------- reading */

int st_ckpt_verify_file(const char *dir, const st_manifest_file_t *f, char *err, size_t errlen)
{
	char *path = path_join(dir, f->name);
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
	st_dumpio_sum_t sum;
	char e2[512] = "";
	int rc = st__dumpio_hash_file(path, &sum, e2, sizeof e2);
	free(path);
	if (rc < 0) {
		st__dumpio_seterr(err, errlen, "file '%s': %s", f->name, e2);
		return rc;
	}
	if (sum.xxh3 != f->xxh3 || sum.bytes != f->bytes) {
		st__dumpio_seterr(err, errlen, "file '%s': checksum mismatch (the manifest says xxh3 %016"
				  PRIx64 ", the file hashes to %016" PRIx64 ")", f->name, f->xxh3, sum.xxh3);
		return ST_ECORRUPT;
	}
	return ST_OK;
}

int st_ckpt_verify(const char *dir, st_manifest_t **out, char *err, size_t errlen)
{
	if (out)
		*out = NULL;
	char *path = path_join(dir, ST_MANIFEST_NAME);
	if (!path)
		return ST_ENOMEM;
	st_manifest_t *m;
	int rc = st_manifest_read(path, &m, err, errlen);
	free(path);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < m->n_files && rc == ST_OK; i++)
		rc = st_ckpt_verify_file(dir, &m->files[i], err, errlen);
	if (rc == ST_OK && out)
		*out = m;
	else
		st_manifest_free(m);
	return rc;
}

int st_ckpt_find_latest(const char *root, char **dir, st_manifest_t **m,
			st_ckpt_msg_fn *msg, void *arg, char *err, size_t errlen)
{
	*dir = NULL;
	*m = NULL;
	st_ckpt_entry_t *e;
	size_t n;
	int rc = st_ckpt_list(root, &e, &n, err, errlen);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		char why[1024] = "";
		rc = st_ckpt_verify(e[i].path, m, why, sizeof why);
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
			report(msg, arg, "checkpoint %s: %s — falling back to %s", e[i].name, why,
			       e[i + 1].name);
		else
			report(msg, arg, "checkpoint %s: %s — no older checkpoint left", e[i].name, why);
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
	int rc = scan(root, 1, &e, &ne, NULL, NULL, err, errlen);
	if (rc < 0 || ne == 0)
		return rc;
	qsort(e, ne, sizeof *e, cmp_oldest_first);
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
			report(msg, arg, "export %s: %s — falling back to %s", e[i].name, why, e[prev].name);
		else
			report(msg, arg, "export %s: %s — no older full export left", e[i].name, why);
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
				report(msg, arg, "export %s: sequence gap (expected %" PRId64 ") — it and later "
				       "exports are not applied", e[i].name, want);
			else
				report(msg, arg, "export %s: not a delta following %s — it and later exports "
				       "are not applied", e[i].name, e[base].name);
			break;
		}
		char why[1024] = "";
		if (verify && (rc = st_ckpt_verify(e[i].path, NULL, why, sizeof why)) < 0) {
			if (rc == ST_ENOMEM)
				goto oom;
			report(msg, arg, "export %s: %s — the chain ends at the export before it",
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
