/*
 * dumpio.c — buffered, hashed, fsynced file writes and the file helpers of
 * ops/dump (see dumpio.h).
 *
 * Invariant of a writer: every byte handed to st__dumpio_write is hashed
 * exactly once, in order, before it reaches the kernel, so the digest at close
 * describes the bytes of the file if and only if every write and the fsync
 * succeeded. Any failure unlinks the file: a caller that ignores an error
 * still cannot leave a short file behind under the final name.
 *
 * Direct I/O. A writer opens its file with O_DIRECT where the file system
 * allows it, and writes whole aligned blocks from memory (its own buffer, or
 * the caller's when the caller hands over large aligned pieces) straight to
 * the device: no copy into the page cache, no dirty pages for the kernel to
 * write back later, and no cache full of checkpoint pages that training will
 * never read. What is not a whole aligned block (the tail of a file, a short
 * write, a write the file system refuses with EINVAL) drops O_DIRECT for the
 * rest of the file and goes through the page cache; fsync at close makes
 * both kinds durable. Nothing of this shows in the file's bytes.
 *
 * Threads: the staged writer (st__dumpio_stage) runs one thread,
 * st-dump-write, between its open and close; it takes one lock of its own
 * and calls nothing that locks. Everything else runs on the caller's thread.
 */
#include "ops/dump/dumpio.h"
#include "runtime/err.h"
#include "runtime/trace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

int (*st__dumpio_open_hook)(const char *path, int flags, mode_t mode);
ssize_t (*st__dumpio_write_hook)(int fd, const void *buf, size_t n);
int (*st__dumpio_fsync_hook)(int fd);

/* BUF_SIZE: the writer's buffer and the readers' chunk. ALIGN: what O_DIRECT
 * needs of addresses, lengths and file offsets (the logical block size;
 * 4096 covers the devices in use). PASS_MIN: writes at least this large go
 * from the caller's memory when the buffer is empty. */
enum { BUF_SIZE = 4 << 20, ALIGN = 4096, PASS_MIN = 1 << 20 };

struct st__dumpio {
	int fd;
	int direct;         /* fd has O_DIRECT: writes must be whole aligned blocks */
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
	if (posix_memalign((void **)&f->buf, ALIGN, BUF_SIZE))
		f->buf = NULL;
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
	/* EINVAL: the file system has no direct I/O (tmpfs before Linux 6.6,
	 * some FUSE file systems); write through the page cache instead. */
	const int fl = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
	f->fd = st__dumpio_open_hook ? st__dumpio_open_hook(path, fl | O_DIRECT, 0644)
				     : open(path, fl | O_DIRECT, 0644);
	f->direct = f->fd >= 0;
	if (f->fd < 0 && errno == EINVAL)
		f->fd = st__dumpio_open_hook ? st__dumpio_open_hook(path, fl, 0644)
					     : open(path, fl, 0644);
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

/* Turns O_DIRECT off for the rest of the file (its writes go through the
 * page cache from here on). */
static int drop_direct(st__dumpio_t *f)
{
	int fl = fcntl(f->fd, F_GETFL);
	if (fl < 0 || fcntl(f->fd, F_SETFL, fl & ~O_DIRECT) < 0)
		return fail(f, errno, "fcntl");
	f->direct = 0;
	return ST_OK;
}

/* Writes n bytes at p to the file: whole aligned blocks directly while the
 * file is in direct mode, anything else through the page cache. */
static int put_out(st__dumpio_t *f, const uint8_t *p, size_t n)
{
	while (n > 0) {
		size_t k = n;
		if (f->direct) {
			if ((uintptr_t)p % ALIGN || n < ALIGN) {
				int rc = drop_direct(f);
				if (rc < 0)
					return rc;
			} else {
				k = n - n % ALIGN;
			}
		}
		ssize_t w = st__dumpio_write_hook ? st__dumpio_write_hook(f->fd, p, k)
						  : write(f->fd, p, k);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EINVAL && f->direct) {
				/* refused as a direct write: try again through the cache */
				int rc = drop_direct(f);
				if (rc < 0)
					return rc;
				continue;
			}
			return fail(f, errno, "write");
		}
		if (w == 0)   /* a regular file never does this; treat as full */
			return fail(f, ENOSPC, "write");
		if (f->direct && (size_t)w % ALIGN) {
			/* a short write left the file offset unaligned */
			int rc = drop_direct(f);
			if (rc < 0)
				return rc;
		}
		p += w;
		n -= (size_t)w;
	}
	return ST_OK;
}

static int flush(st__dumpio_t *f)
{
	int rc = put_out(f, f->buf, f->used);
	if (rc == ST_OK)
		f->used = 0;
	return rc;
}

int st__dumpio_write(st__dumpio_t *f, const void *buf, size_t n)
{
	if (f->err)
		return f->err;
	XXH3_64bits_update(f->xxh, buf, n);
	f->bytes += n;
	const uint8_t *p = buf;
	while (n > 0) {
		if (f->used == 0 && n >= PASS_MIN && (!f->direct || (uintptr_t)p % ALIGN == 0)) {
			/* Large and aligned: whole blocks go from the caller's
			 * memory, without a copy through the buffer. */
			size_t k = n - n % ALIGN;
			int rc = put_out(f, p, k);
			if (rc < 0)
				return rc;
			p += k;
			n -= k;
			continue;
		}
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

uint64_t st__dumpio_digest(const st__dumpio_t *f)
{
	return XXH3_64bits_digest(f->xxh);
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

/* ---------------------------------------------------------------- staging */

/*
 * Staged writes: the caller's bytes are copied into block-aligned buffers,
 * and each full buffer goes to st__dumpio_write as a whole, which writes it
 * from there (with O_DIRECT, straight to the device) and hashes it in one
 * pass. A file larger than one buffer gets two buffers and a thread,
 * st-dump-write, that writes one while the caller fills the other, so the
 * caller's work (gathering rows), the hashing and the device overlap. The
 * thread is the only one to touch the dumpio object from open to close;
 * close joins it. Where no thread can be started, the caller's thread
 * writes each buffer itself.
 */
enum { STAGE_BYTES = 8 << 20 };

struct st__dumpio_stage {
	st__dumpio_t *f;
	uint8_t *buf[2];
	size_t cap, used;
	int cur;                 /* the buffer being filled */
	int rc;                  /* first error as the filling thread knows it */
	int threaded;
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Under mu: the buffer handed to the thread (NULL: it is idle), the
	 * thread's first error, and the request to stop. */
	const uint8_t *pend;
	size_t pend_len;
	int wrc;
	int quit;
};

static void *stage_main(void *arg)
{
	st__dumpio_stage_t *o = arg;
	pthread_setname_np(pthread_self(), "st-dump-write");
	pthread_mutex_lock(&o->mu);
	for (;;) {
		while (!o->pend && !o->quit)
			pthread_cond_wait(&o->cv, &o->mu);
		if (!o->pend)
			break;
		const uint8_t *p = o->pend;
		size_t len = o->pend_len;
		int rc = o->wrc;
		pthread_mutex_unlock(&o->mu);
		if (rc == ST_OK) {
			uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
			rc = st__dumpio_write(o->f, p, len);
			if (t0)
				st_trace_span("work", "write buffer", NULL, t0, st_trace_now(), -1);
		}
		pthread_mutex_lock(&o->mu);
		if (o->wrc == ST_OK)
			o->wrc = rc;
		o->pend = NULL;
		pthread_cond_broadcast(&o->cv);
	}
	pthread_mutex_unlock(&o->mu);
	return NULL;
}

static void stage_free(st__dumpio_stage_t *o)
{
	free(o->buf[0]);
	free(o->buf[1]);
	free(o);
}

int st__dumpio_stage_open(st__dumpio_stage_t **out, st__dumpio_t *f, uint64_t total)
{
	*out = NULL;
	st__dumpio_stage_t *o = calloc(1, sizeof *o);
	if (!o)
		return ST_ENOMEM;
	o->f = f;
	o->cap = total < STAGE_BYTES ? (size_t)(total + ALIGN - 1) / ALIGN * ALIGN : STAGE_BYTES;
	if (!o->cap)
		o->cap = ALIGN;
	int two = total > STAGE_BYTES;
	for (int i = 0; i < 1 + two; i++) {
		if (posix_memalign((void **)&o->buf[i], ALIGN, o->cap)) {
			o->buf[i] = NULL;
			stage_free(o);
			return ST_ENOMEM;
		}
	}
	if (two && pthread_mutex_init(&o->mu, NULL) == 0) {
		if (pthread_cond_init(&o->cv, NULL) == 0) {
			if (pthread_create(&o->tid, NULL, stage_main, o) == 0)
				o->threaded = 1;
			else
				pthread_cond_destroy(&o->cv);
		}
		if (!o->threaded)
			pthread_mutex_destroy(&o->mu);
	}
	*out = o;
	return ST_OK;
}

/* Hands the filled part of the current buffer on (to the thread, or writes
 * it) and switches buffers. */
static void stage_flush(st__dumpio_stage_t *o)
{
	if (!o->used)
		return;
	if (!o->threaded) {
		if (o->rc == ST_OK)
			o->rc = st__dumpio_write(o->f, o->buf[o->cur], o->used);
		o->used = 0;
		return;
	}
	pthread_mutex_lock(&o->mu);
	while (o->pend)
		pthread_cond_wait(&o->cv, &o->mu);
	o->rc = o->wrc;
	if (o->rc == ST_OK) {
		o->pend = o->buf[o->cur];
		o->pend_len = o->used;
		pthread_cond_broadcast(&o->cv);
	}
	pthread_mutex_unlock(&o->mu);
	o->cur ^= 1;
	o->used = 0;
}

int st__dumpio_stage_put(st__dumpio_stage_t *o, const void *p, size_t n)
{
	const uint8_t *s = p;
	while (n > 0 && o->rc == ST_OK) {
		size_t k = o->cap - o->used < n ? o->cap - o->used : n;
		memcpy(o->buf[o->cur] + o->used, s, k);
		o->used += k;
		s += k;
		n -= k;
		if (o->used == o->cap)
			stage_flush(o);
	}
	return o->rc;
}

int st__dumpio_stage_close(st__dumpio_stage_t *o)
{
	stage_flush(o);
	if (o->threaded) {
		pthread_mutex_lock(&o->mu);
		o->quit = 1;
		pthread_cond_broadcast(&o->cv);
		pthread_mutex_unlock(&o->mu);
		pthread_join(o->tid, NULL);
		o->rc = o->wrc;
		pthread_cond_destroy(&o->cv);
		pthread_mutex_destroy(&o->mu);
	}
	int rc = o->rc;
	stage_free(o);
	return rc;
}

/* ---------------------------------------------------------------- helpers */

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
	return st__dumpio_hash_file_cb(path, sum, err, errlen, NULL, NULL);
}

int st__dumpio_hash_file_cb(const char *path, st_dumpio_sum_t *sum, char *err, size_t errlen,
			    void (*progress)(void *arg, uint64_t bytes), void *arg)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		st__dumpio_seterr(err, errlen, "%s: cannot open: %s", path, strerror(e));
		return st__dumpio_errno(e);
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
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
		if (progress)
			progress(arg, total);
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
