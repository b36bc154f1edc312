/*
 * dumpio.c — buffered, hashed, fsynced file writes and the file helpers of
 * ops/dump (see dumpio.h).
 *
 * Invariant of a writer: every byte handed to st__dumpio_write is hashed
 * exactly once, in order, before it reaches the kernel, so the digest at close
 * describes the bytes of the file if and only if every write and the fsync
 * succeeded. Any failure unlinks the file: a caller that ignores an error
 * still cannot leave a short file behind under the final name.
 */
#include "ops/dump/dumpio.h"
#include "runtime/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

ssize_t (*st__dumpio_write_hook)(int fd, const void *buf, size_t n);
int (*st__dumpio_fsync_hook)(int fd);

enum { BUF_SIZE = 1 << 20 };

struct st__dumpio {
	int fd;
	int err;            /* first error (ST_E code), 0 while healthy */
	char *path;
	uint8_t *buf;
	size_t used;
	uint64_t bytes;     /* accepted bytes (written + buffered) */
	XXH3_state_t *xxh;
	char msg[512];
};

void st__dumpio_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int st__dumpio_errno(int e)
{
	if (e == ENOSPC || e == EDQUOT)
		return ST_ENOSPC;
	if (e == ENOENT)
		return ST_ENOENT;
	return e > 0 ? -e : ST_EIO;
}

int st__dumpio_open(st__dumpio_t **out, const char *path, char *err, size_t errlen)
{
	*out = NULL;
	st__dumpio_t *f = calloc(1, sizeof *f);
	if (!f)
		return ST_ENOMEM;
	f->path = strdup(path);
	f->buf = malloc(BUF_SIZE);
	f->xxh = XXH3_createState();
	if (!f->path || !f->buf || !f->xxh) {
		XXH3_freeState(f->xxh);
		free(f->buf);
		free(f->path);
		free(f);
		st__dumpio_seterr(err, errlen, "%s: out of memory", path);
		return ST_ENOMEM;
	}
	XXH3_64bits_reset(f->xxh);
	f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (f->fd < 0) {
		int e = errno;
		st__dumpio_seterr(err, errlen, "%s: cannot create: %s", path, strerror(e));
		XXH3_freeState(f->xxh);
		free(f->buf);
		free(f->path);
		free(f);
		return st__dumpio_errno(e);
	}
	*out = f;
	return ST_OK;
}

/* Records the first failure, closes and unlinks the file. */
static int fail(st__dumpio_t *f, int e, const char *what)
{
	if (!f->err) {
		f->err = st__dumpio_errno(e);
		snprintf(f->msg, sizeof f->msg, "%s: %s failed: %s", f->path, what, strerror(e));
	}
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
		unlink(f->path);
	}
	return f->err;
}

static int flush(st__dumpio_t *f)
{
	const uint8_t *p = f->buf;
	size_t left = f->used;
	while (left > 0) {
		ssize_t w = st__dumpio_write_hook ? st__dumpio_write_hook(f->fd, p, left)
						  : write(f->fd, p, left);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return fail(f, errno, "write");
		}
		if (w == 0)   /* a regular file never does this; treat as full */
			return fail(f, ENOSPC, "write");
		p += w;
		left -= (size_t)w;
	}
	f->used = 0;
	return ST_OK;
}

int st__dumpio_write(st__dumpio_t *f, const void *buf, size_t n)
{
	if (f->err)
		return f->err;
	XXH3_64bits_update(f->xxh, buf, n);
	f->bytes += n;
	const uint8_t *p = buf;
	while (n > 0) {
		size_t room = BUF_SIZE - f->used;
		size_t k = n < room ? n : room;
		memcpy(f->buf + f->used, p, k);
		f->used += k;
		p += k;
		n -= k;
		if (f->used == BUF_SIZE) {
			int rc = flush(f);
			if (rc < 0)
				return rc;
		}
	}
	return ST_OK;
}

uint64_t st__dumpio_tell(const st__dumpio_t *f)
{
	return f->bytes;
}

static void destroy(st__dumpio_t *f)
{
	XXH3_freeState(f->xxh);
	free(f->buf);
	free(f->path);
	free(f);
}

int st__dumpio_close(st__dumpio_t *f, st_dumpio_sum_t *sum, char *err, size_t errlen)
{
	int rc = f->err ? f->err : flush(f);
	if (rc == ST_OK) {
		int s = st__dumpio_fsync_hook ? st__dumpio_fsync_hook(f->fd) : fsync(f->fd);
		if (s < 0)
			rc = fail(f, errno, "fsync");
	}
	if (rc == ST_OK) {
		int fd = f->fd;
		f->fd = -1;
		if (close(fd) < 0) {
			/* NFS reports deferred write errors at close. */
			int e = errno;
			unlink(f->path);
			rc = st__dumpio_errno(e);
			snprintf(f->msg, sizeof f->msg, "%s: close failed: %s", f->path, strerror(e));
		}
	}
	if (rc == ST_OK) {
		if (sum) {
			sum->bytes = f->bytes;
			sum->xxh3 = XXH3_64bits_digest(f->xxh);
		}
	} else {
		st__dumpio_seterr(err, errlen, "%s", f->msg);
	}
	destroy(f);
	return rc;
}

void st__dumpio_abort(st__dumpio_t *f)
{
	if (!f)
		return;
	if (f->fd >= 0) {
		close(f->fd);
		unlink(f->path);
	}
	destroy(f);
}

int st__dumpio_read_all(const char *path, size_t max_len, uint8_t **buf, size_t *len,
			char *err, size_t errlen)
{
	*buf = NULL;
	*len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		st__dumpio_seterr(err, errlen, "%s: cannot open: %s", path, strerror(e));
		return st__dumpio_errno(e);
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		st__dumpio_seterr(err, errlen, "%s: not a regular file", path);
		close(fd);
		return ST_EIO;
	}
	if ((uint64_t)st.st_size > max_len) {
		st__dumpio_seterr(err, errlen, "%s: %lld bytes, more than the %zu this reader accepts",
				  path, (long long)st.st_size, max_len);
		close(fd);
		return ST_EFORMAT;
	}
	size_t n = (size_t)st.st_size;
	uint8_t *b = malloc(n ? n : 1);
	if (!b) {
		st__dumpio_seterr(err, errlen, "%s: out of memory for %zu bytes", path, n);
		close(fd);
		return ST_ENOMEM;
	}
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			st__dumpio_seterr(err, errlen, "%s: read failed: %s", path, strerror(e));
			free(b);
			close(fd);
			return st__dumpio_errno(e);
		}
		if (r == 0)   /* shrank since fstat: use what is there */
			break;
		got += (size_t)r;
	}
	close(fd);
	*buf = b;
	*len = got;
	return ST_OK;
}

int st__dumpio_hash_file(const char *path, st_dumpio_sum_t *sum, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		st__dumpio_seterr(err, errlen, "%s: cannot open: %s", path, strerror(e));
		return st__dumpio_errno(e);
	}
	XXH3_state_t *x = XXH3_createState();
	uint8_t *b = malloc(BUF_SIZE);
	if (!x || !b) {
		XXH3_freeState(x);
		free(b);
		close(fd);
		return ST_ENOMEM;
	}
	XXH3_64bits_reset(x);
	uint64_t total = 0;
	int rc = ST_OK;
	for (;;) {
		ssize_t r = read(fd, b, BUF_SIZE);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			st__dumpio_seterr(err, errlen, "%s: read failed: %s", path, strerror(e));
			rc = st__dumpio_errno(e);
			break;
		}
		if (r == 0)
			break;
		XXH3_64bits_update(x, b, (size_t)r);
		total += (uint64_t)r;
	}
	if (rc == ST_OK) {
		sum->bytes = total;
		sum->xxh3 = XXH3_64bits_digest(x);
	}
	XXH3_freeState(x);
	free(b);
	close(fd);
	return rc;
}

int st__dumpio_fsync_dir(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		st__dumpio_seterr(err, errlen, "%s: cannot open directory: %s", path, strerror(e));
		return st__dumpio_errno(e);
	}
	int s = st__dumpio_fsync_hook ? st__dumpio_fsync_hook(fd) : fsync(fd);
	int e = errno;
	close(fd);
	if (s < 0) {
		st__dumpio_seterr(err, errlen, "%s: fsync failed: %s", path, strerror(e));
		return st__dumpio_errno(e);
	}
	return ST_OK;
}

static int rmtree_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return ST_OK;
		if (errno == ENOTDIR || errno == ELOOP)
			return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -errno : ST_OK;
		return -errno;
	}
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	int rc = ST_OK;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (de->d_type == DT_DIR) {
			int r = rmtree_at(fd, de->d_name);
			if (r < 0)
				rc = r;
		} else if (unlinkat(fd, de->d_name, 0) < 0 && errno != ENOENT) {
			/* d_type may be DT_UNKNOWN on some file systems */
			if (errno == EISDIR) {
				int r = rmtree_at(fd, de->d_name);
				if (r < 0)
					rc = r;
			} else {
				rc = -errno;
			}
		}
	}
	closedir(d);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && rc == ST_OK)
		rc = -errno;
	return rc;
}

int st__dumpio_rmtree(const char *path)
{
	return rmtree_at(AT_FDCWD, path);
}
