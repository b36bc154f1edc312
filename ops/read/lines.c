/*
 * lines.c — buffered line input: plain files via read(2), gzip via zlib's
 * inflate, zstd via ZSTD_decompressStream, or a memory buffer (fuzzers).
 *
 * Invariants: the valid bytes are buf[pos, end); a line handed out points
 * into buf and stays valid until the next call. When no '\n' is left in
 * [pos, end) the partial line is moved to the front and the buffer refilled;
 * because max_line < buf_size there is always room to read more. A partial
 * line that grows past max_line is discarded up to its newline (skip mode),
 * so the memory used is fixed whatever the input.
 *
 * Threads: none; one reader thread owns an object.
 */
#include "lines.h"

#include "runtime/err.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

enum { SRC_PLAIN, SRC_GZ, SRC_ZST, SRC_MEM };

#define IN_BUF_SIZE ((size_t)256 << 10)

struct st__lines {
	int kind;
	int fd;
	char *path;
	char *buf;
	size_t cap, max_line;
	size_t pos, end;
	int eof;               /* the source has no more bytes */
	uint64_t lineno, bytes;
	/* compressed input */
	unsigned char *in;
	size_t in_pos, in_end;
	int in_eof;
	z_stream z;
	int z_init, z_done;    /* z_done: a gzip member just ended */
	ZSTD_DCtx *zd;
	size_t zst_last;       /* last ZSTD_decompressStream hint: 0 = frame done */
	/* memory source */
	const char *mem;
	size_t mem_len, mem_pos;
	char err[256];
};

static int lines_alloc(st__lines_t **out, size_t buf_size, size_t max_line)
{
	st__lines_t *l = calloc(1, sizeof *l);
	if (!l)
		return ST_ENOMEM;
	l->fd = -1;
	l->cap = buf_size ? buf_size : ST__LINES_BUF_DEFAULT;
	l->max_line = max_line ? max_line : ST__LINES_MAX_DEFAULT;
	if (l->max_line >= l->cap)
		l->max_line = l->cap - 1;
	l->buf = malloc(l->cap);
	if (!l->buf) {
		free(l);
		return ST_ENOMEM;
	}
	*out = l;
	return ST_OK;
}

static int ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n >= m && strcmp(s + n - m, suf) == 0;
}

int st__lines_open(st__lines_t **out, const char *path, char *errbuf,
		   size_t errlen)
{
	st__lines_t *l;
	int rc = lines_alloc(&l, 0, 0);
	if (rc < 0) {
		if (errbuf)
			snprintf(errbuf, errlen, "%s: out of memory", path);
		return rc;
	}
	l->path = strdup(path);
	l->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!l->path || l->fd < 0) {
		/* read.h promises ST_ENOENT or ST_EIO; the text keeps errno's. */
		int e = errno;
		rc = !l->path ? ST_ENOMEM : e == ENOENT ? ST_ENOENT : ST_EIO;
		if (errbuf)
			snprintf(errbuf, errlen, "%s: cannot open: %s", path,
				 l->path ? st_strerror(-e) : "out of memory");
		st__lines_close(l);
		return rc;
	}
	/* Sequential reads of a whole file: let the kernel read ahead more. */
	(void)posix_fadvise(l->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	if (ends_with(path, ".gz"))
		l->kind = SRC_GZ;
	else if (ends_with(path, ".zst") || ends_with(path, ".zstd"))
		l->kind = SRC_ZST;
	else
		l->kind = SRC_PLAIN;
	if (l->kind != SRC_PLAIN) {
		l->in = malloc(IN_BUF_SIZE);
		if (!l->in)
			goto nomem;
	}
	if (l->kind == SRC_GZ) {
		/* 15 + 32: a gzip or zlib header, detected automatically. */
		if (inflateInit2(&l->z, 15 + 32) != Z_OK)
			goto nomem;
		l->z_init = 1;
	} else if (l->kind == SRC_ZST) {
		l->zd = ZSTD_createDCtx();
		if (!l->zd)
			goto nomem;
	}
	*out = l;
	return ST_OK;
nomem:
	if (errbuf)
		snprintf(errbuf, errlen, "%s: out of memory", path);
	st__lines_close(l);
	return ST_ENOMEM;
}

int st__lines_open_mem(st__lines_t **out, const void *data, size_t len,
		       size_t buf_size, size_t max_line)
{
	st__lines_t *l;
	int rc = lines_alloc(&l, buf_size, max_line);
	if (rc < 0)
		return rc;
	l->kind = SRC_MEM;
	l->mem = data;
	l->mem_len = len;
	*out = l;
	return ST_OK;
}

/* read(2) that retries on EINTR. Returns bytes, 0 at EOF, or -errno. */
static ssize_t read_fd(int fd, void *dst, size_t n)
{
	for (;;) {
		ssize_t r = read(fd, dst, n);
		if (r >= 0)
			return r;
		if (errno != EINTR)
			return -errno;
	}
}

/* Refills the compressed input buffer when it is empty. */
static int fill_in(st__lines_t *l)
{
	if (l->in_pos < l->in_end || l->in_eof)
		return ST_OK;
	ssize_t r = read_fd(l->fd, l->in, IN_BUF_SIZE);
	if (r < 0) {
		snprintf(l->err, sizeof l->err, "%s: read: %s", l->path,
			 st_strerror((int)r));
		return ST_EIO;
	}
	l->in_pos = 0;
	l->in_end = (size_t)r;
	if (r == 0)
		l->in_eof = 1;
	return ST_OK;
}

static ssize_t fill_gz(st__lines_t *l, char *dst, size_t n)
{
	for (;;) {
		int rc = fill_in(l);
		if (rc < 0)
			return rc;
		if (l->in_pos == l->in_end) {
			/* No more input: fine only between gzip members. */
			if (l->z_done)
				return 0;
			snprintf(l->err, sizeof l->err,
				 "%s: truncated gzip data", l->path);
			return ST_EIO;
		}
		if (l->z_done) {
			/* Another member follows (concatenated .gz files). */
			if (inflateReset(&l->z) != Z_OK)
				return ST_EIO;
			l->z_done = 0;
		}
		l->z.next_in = l->in + l->in_pos;
		l->z.avail_in = (uInt)(l->in_end - l->in_pos);
		l->z.next_out = (unsigned char *)dst;
		l->z.avail_out = (uInt)(n > UINT32_MAX ? UINT32_MAX : n);
		int zr = inflate(&l->z, Z_NO_FLUSH);
		l->in_pos = l->in_end - l->z.avail_in;
		size_t got = (size_t)((char *)l->z.next_out - dst);
		if (zr == Z_STREAM_END)
			l->z_done = 1;
		else if (zr != Z_OK && zr != Z_BUF_ERROR) {
			snprintf(l->err, sizeof l->err, "%s: gzip data error: %s",
				 l->path, l->z.msg ? l->z.msg : "corrupt");
			return ST_EIO;
		}
		if (got)
			return (ssize_t)got;
	}
}

static ssize_t fill_zst(st__lines_t *l, char *dst, size_t n)
{
	for (;;) {
		int rc = fill_in(l);
		if (rc < 0)
			return rc;
		if (l->in_pos == l->in_end) {
			if (l->zst_last == 0)
				return 0;
			snprintf(l->err, sizeof l->err,
				 "%s: truncated zstd data", l->path);
			return ST_EIO;
		}
		ZSTD_inBuffer ib = { l->in, l->in_end, l->in_pos };
		ZSTD_outBuffer ob = { dst, n, 0 };
		size_t zr = ZSTD_decompressStream(l->zd, &ob, &ib);
		if (ZSTD_isError(zr)) {
			snprintf(l->err, sizeof l->err, "%s: zstd data error: %s",
				 l->path, ZSTD_getErrorName(zr));
			return ST_EIO;
		}
		l->in_pos = ib.pos;
		l->zst_last = zr;
		if (ob.pos)
			return (ssize_t)ob.pos;
	}
}

/* Appends up to n bytes of the source at dst. Returns bytes, 0 at the end of
 * the source, or a negative code with l->err set. */
static ssize_t fill(st__lines_t *l, char *dst, size_t n)
{
	ssize_t r;
	switch (l->kind) {
	case SRC_MEM:
		r = (ssize_t)(l->mem_len - l->mem_pos < n ? l->mem_len - l->mem_pos : n);
		memcpy(dst, l->mem + l->mem_pos, (size_t)r);
		l->mem_pos += (size_t)r;
		return r;
	case SRC_GZ:
		return fill_gz(l, dst, n);
	case SRC_ZST:
		return fill_zst(l, dst, n);
	default:
		r = read_fd(l->fd, dst, n);
		if (r < 0) {
			snprintf(l->err, sizeof l->err, "%s: read: %s", l->path,
				 st_strerror((int)r));
			return ST_EIO;
		}
		return r;
	}
}

/* Moves the partial line to the front and reads more after it. Returns
 * ST_OK (l->eof set when the source ended) or an error. */
static int refill(st__lines_t *l)
{
	size_t have = l->end - l->pos;
	if (l->pos) {
		memmove(l->buf, l->buf + l->pos, have);
		l->pos = 0;
		l->end = have;
	}
	ssize_t r = fill(l, l->buf + l->end, l->cap - l->end);
	if (r < 0)
		return (int)r;
	if (r == 0)
		l->eof = 1;
	l->end += (size_t)r;
	return ST_OK;
}

int st__lines_next(st__lines_t *l, const char **line, size_t *len)
{
	for (;;) {
		char *p = l->buf + l->pos;
		size_t have = l->end - l->pos;
		char *nl = have ? memchr(p, '\n', have) : NULL;
		if (nl || (l->eof && have)) {
			size_t n = nl ? (size_t)(nl - p) : have;
			l->pos += n + (nl != NULL);
			l->bytes += n + (nl != NULL);
			l->lineno++;
			if (n && p[n - 1] == '\r')
				n--;
			if (n > l->max_line) {
				*line = p;
				*len = 0;
				return ST__LINE_LONG;
			}
			*line = p;
			*len = n;
			return ST__LINE_OK;
		}
		if (l->eof)
			return ST__LINE_EOF;
		if (have > l->max_line) {
			/* Overlong line: drop what we have and everything up
			 * to the next newline, then report the line once. */
			l->bytes += have;
			l->pos = l->end = 0;
			for (;;) {
				int rc = refill(l);
				if (rc < 0)
					return rc;
				nl = memchr(l->buf, '\n', l->end);
				if (nl || l->eof) {
					size_t n = nl ? (size_t)(nl - l->buf) + 1 : l->end;
					l->bytes += n;
					l->pos = n;
					l->lineno++;
					*line = l->buf;
					*len = 0;
					return ST__LINE_LONG;
				}
				l->bytes += l->end;
				l->end = 0;
			}
		}
		int rc = refill(l);
		if (rc < 0)
			return rc;
	}
}

uint64_t st__lines_lineno(const st__lines_t *l) { return l->lineno; }
uint64_t st__lines_bytes(const st__lines_t *l) { return l->bytes; }
size_t st__lines_max_line(const st__lines_t *l) { return l->max_line; }
const char *st__lines_error(const st__lines_t *l) { return l->err; }

void st__lines_close(st__lines_t *l)
{
	if (!l)
		return;
	if (l->fd >= 0)
		close(l->fd);
	if (l->z_init)
		inflateEnd(&l->z);
	ZSTD_freeDCtx(l->zd);
	free(l->in);
	free(l->buf);
	free(l->path);
	free(l);
}
