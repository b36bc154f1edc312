/*
 * dump_util.h — helpers shared by the ops/dump tests (test_safetensors,
 * test_rows, test_manifest, test_ckpt): scratch directories, whole-file
 * I/O, a simulated full disk, and running a Python check script.
 *
 * Header-only with static functions: each test is one program.
 */
#ifndef ST_TEST_DUMP_UTIL_H
#define ST_TEST_DUMP_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ops/dump/dumpio.h"

/* A fresh directory under $TMPDIR (or /tmp); the caller removes it with
 * st__dumpio_rmtree and frees the string. */
static inline char *tu_mkdtemp(const char *tag)
{
	const char *base = getenv("TMPDIR");
	char *p = malloc(4096);
	snprintf(p, 4096, "%s/st-%s-XXXXXX", base && *base ? base : "/tmp", tag);
	if (!mkdtemp(p)) {
		fprintf(stderr, "mkdtemp %s: %s\n", p, strerror(errno));
		abort();
	}
	return p;
}

static inline char *tu_path(const char *dir, const char *name)
{
	char *p = malloc(4096);
	snprintf(p, 4096, "%s/%s", dir, name);
	return p;
}

static inline uint8_t *tu_read(const char *path, size_t *len)
{
	*len = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)n + 1);
	*len = fread(b, 1, (size_t)n, f);
	fclose(f);
	return b;
}

static inline void tu_write(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len) {
		fprintf(stderr, "cannot write %s\n", path);
		abort();
	}
	fclose(f);
}

static inline int tu_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* A disk that fills up: writes succeed until tu_space bytes have gone
 * through (the last one short), then fail with ENOSPC. tu_fsync_fail makes
 * fsync fail with ENOSPC instead (file systems with delayed allocation report
 * a full disk there): 1 for every fsync, 2 for directories only. */
static long long tu_space = -1;
static int tu_fsync_fail;

static inline ssize_t tu_write_hook(int fd, const void *buf, size_t n)
{
	if (tu_space >= 0 && (long long)n > tu_space)
		n = (size_t)tu_space;
	if (tu_space == 0) {
		errno = ENOSPC;
		return -1;
	}
	ssize_t w = write(fd, buf, n);
	if (w > 0 && tu_space >= 0)
		tu_space -= w;
	return w;
}

static inline int tu_fsync_hook(int fd)
{
	struct stat st;
	/* 1: every fsync fails; 2: only those of directories */
	if (tu_fsync_fail == 1 || (tu_fsync_fail == 2 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))) {
		errno = ENOSPC;
		return -1;
	}
	return fsync(fd);
}

static inline void tu_disk_limit(long long bytes, int fsync_fail)
{
	tu_space = bytes;
	tu_fsync_fail = fsync_fail;
	st__dumpio_write_hook = tu_write_hook;
	st__dumpio_fsync_hook = tu_fsync_hook;
}

static inline void tu_disk_unlimited(void)
{
	tu_space = -1;
	tu_fsync_fail = 0;
	st__dumpio_write_hook = NULL;
	st__dumpio_fsync_hook = NULL;
}

/* The Python used for format cross-checks: $ST_PYTHON, else /usr/bin/python3
 * when it exists, else NULL (the cross-check is skipped, and says so). */
static inline const char *tu_python(void)
{
	const char *p = getenv("ST_PYTHON");
	if (p && *p)
		return p;
	return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : NULL;
}

/* Writes script to dir/name and runs `python script args`. Returns the exit
 * status (77 = the script skipped), or -1 if it could not run. */
static inline int tu_run_python(const char *dir, const char *name, const char *script,
				const char *args)
{
	const char *py = tu_python();
	if (!py)
		return -1;
	char *sp = tu_path(dir, name);
	tu_write(sp, script, strlen(script));
	size_t n = strlen(py) + strlen(sp) + strlen(args) + 16;
	char *cmd = malloc(n);
	snprintf(cmd, n, "'%s' '%s' %s", py, sp, args);
	free(sp);
	fflush(stdout);
	int st = system(cmd);
	free(cmd);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* docs/formats.md, found through ST_SOURCE_ROOT (set by meson test). */
static inline const char *tu_formats_md(void)
{
	static char p[4096];
	const char *root = getenv("ST_SOURCE_ROOT");
	snprintf(p, sizeof p, "%s/docs/formats.md", root && *root ? root : ".");
	return p;
}

#endif
