/*
 * ckpt_list.c — the names of checkpoint and export directories and the
 * listings of a root (see ckpt.h): only final names are listed (ckpt.c's
 * rename publishes a directory), stale .tmp ones only for the writer to
 * clean. Also the helpers the writer and the readers share
 * (ckpt_internal.h).
 *
 * Threads: the caller's only.
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

/* ---------------------------------------------------------------- names */

char *st__ckpt_path_join(const char *a, const char *b)
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
	char *p = st__ckpt_path_join(dir, name);
	struct stat st;
	int ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
	free(p);
	return ok;
}

/* Scans root: complete entries (want_export selects the family) and, with
 * tmps non-NULL, stale .tmp directories of that family. */
int st__ckpt_scan(const char *root, int want_export, st_ckpt_entry_t **out, size_t *n,
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
			if (!((*tmps)[*n_tmps] = st__ckpt_path_join(root, de->d_name))) {
				rc = ST_ENOMEM;
				break;
			}
			(*n_tmps)++;
			continue;
		}
		char *path = st__ckpt_path_join(root, de->d_name);
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

int st__ckpt_cmp_newest_first(const void *a, const void *b)
{
	const st_ckpt_entry_t *x = a, *y = b;
	if (x->num != y->num)
		return x->num > y->num ? -1 : 1;
	return (int)x->kind - (int)y->kind;
}

int st__ckpt_cmp_oldest_first(const void *a, const void *b)
{
	return st__ckpt_cmp_newest_first(b, a);
}

int st_ckpt_list(const char *root, st_ckpt_entry_t **out, size_t *n, char *err, size_t errlen)
{
	int rc = st__ckpt_scan(root, 0, out, n, NULL, NULL, err, errlen);
	if (rc == ST_OK && *n > 1)
		qsort(*out, *n, sizeof **out, st__ckpt_cmp_newest_first);
	return rc;
}

void st__ckpt_report(st_ckpt_msg_fn *msg, void *arg, const char *fmt, ...)
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
