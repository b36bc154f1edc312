/*
 * rows_read.c — the sparse row file's streaming and whole-file readers
 * (format in rows.h and docs/formats.md; the writer is in rows.c).
 *
 * The reader checks everything that can be checked before reading a row
 * (header checksum, exact file size, footer) so that truncation, the common
 * failure after a crash or a full disk, is reported at open; the body's
 * checksum is known only at the end of the stream. It reads and hashes in
 * large pieces and hands out rows in batches.
 *
 * Threads: the caller's only.
 */
#include "ops/dump/rows.h"
#include "ops/dump/rows_internal.h"
#include "runtime/err.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ---------------------------------------------------------------- reader */

/* The reader's chunk: the file is read (and hashed) in pieces this large. */
enum { READ_BYTES = 8 << 20 };

struct st_rows_reader {
	int fd;
	char *path;
	st_rows_info_t info;
	size_t rsize;          /* bytes per row record */
	uint64_t next_row;     /* rows returned so far */
	uint64_t last_key;
	uint64_t footer_sum;
	uint8_t footer[ST_ROWS_FOOTER_SIZE]; /* read at open, hashed last */
	uint64_t size;         /* bytes of the file */
	XXH3_state_t *xxh;     /* every byte consumed so far, header first */
	uint8_t *buf;          /* file bytes read ahead; [pos, len) not consumed yet */
	size_t cap, pos, len;
	size_t hpos;           /* [hpos, pos) consumed but not hashed yet */
	uint64_t *deleted;
	int done;              /* 1 once the checksum is verified */
	int summed;            /* 1 once file_sum holds the whole file's XXH3 */
	uint64_t file_sum;
	int err;
	char msg[512];
};

static int rfail(st_rows_reader_t *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int rfail(st_rows_reader_t *r, int code, const char *fmt, ...)
{
	char what[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	snprintf(r->msg, sizeof r->msg, "%s: %s", r->path, what);
	r->err = code;
	return code;
}

/* Reads exactly n bytes at offset off (for header and footer). */
static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return 1;   /* short */
		got += (size_t)k;
	}
	return 0;
}

/* Decodes and checks a header. Returns ST_OK or a code with r->msg set. */
static int check_header(st_rows_reader_t *r, const uint8_t *h, uint64_t size)
{
	st_rows_info_t *i = &r->info;
	if (memcmp(h, st__rows_magic, 8))
		return rfail(r, ST_EFORMAT, "not a strata row file (no \"STRATARW\" magic)");
	if (st__rows_get64(h + 56) != XXH3_64bits(h, 56))
		return rfail(r, ST_ECORRUPT, "header checksum mismatch (the header is damaged)");
	i->version = st__rows_get32(h + 8);
	i->flags = st__rows_get32(h + 12);
	i->table_id = st__rows_get64(h + 16);
	i->dim = st__rows_get32(h + 24);
	i->state_dim = st__rows_get32(h + 28);
	i->n_rows = st__rows_get64(h + 32);
	i->n_deleted = st__rows_get64(h + 40);
	if (i->version != ST_ROWS_VERSION)
		return rfail(r, ST_EFORMAT, "row file version %u; this strata reads version %d",
			     i->version, ST_ROWS_VERSION);
	if (i->flags & ~(uint32_t)ST_ROWS_DELTA)
		return rfail(r, ST_EFORMAT, "unknown flags 0x%x", i->flags);
	if (st__rows_get64(h + 48))
		return rfail(r, ST_EFORMAT, "reserved header bytes 48..55 are not zero");
	if (!st__rows_check_info(i))
		return rfail(r, ST_EFORMAT, "bad table shape: dim %u, state_dim %u", i->dim, i->state_dim);
	if (i->n_deleted && !(i->flags & ST_ROWS_DELTA))
		return rfail(r, ST_EFORMAT, "a full row file with %" PRIu64 " deleted keys", i->n_deleted);
	r->rsize = st__rows_row_bytes(i);
	/* expected size, with every product checked against overflow */
	uint64_t body = ST_ROWS_HEADER_SIZE + ST_ROWS_FOOTER_SIZE;
	if (i->n_rows > (UINT64_MAX - body) / r->rsize)
		return rfail(r, ST_ECORRUPT, "row count %" PRIu64 " cannot fit in a file", i->n_rows);
	body += i->n_rows * r->rsize;
	if (i->n_deleted > (UINT64_MAX - body) / 8)
		return rfail(r, ST_ECORRUPT, "deleted count %" PRIu64 " cannot fit in a file", i->n_deleted);
	body += i->n_deleted * 8;
	if (size < body)
		return rfail(r, ST_ECORRUPT, "truncated: the header promises %" PRIu64 " rows and %" PRIu64
			     " deleted keys (%" PRIu64 " bytes) but the file has %" PRIu64 " bytes",
			     i->n_rows, i->n_deleted, body, size);
	if (size > body)
		return rfail(r, ST_ECORRUPT, "%" PRIu64 " bytes after the footer (the header promises %"
			     PRIu64 " bytes)", size - body, body);
	return ST_OK;
}

int st_rows_reader_open(const char *path, st_rows_reader_t **out, char *err, size_t errlen)
{
	*out = NULL;
	st_rows_reader_t *r = calloc(1, sizeof *r);
	if (r)
		r->fd = -1;
	if (!r || !(r->path = strdup(path)) || !(r->xxh = XXH3_createState())) {
		if (r)
			free(r->path);
		free(r);
		st__dumpio_seterr(err, errlen, "%s: out of memory", path);
		return ST_ENOMEM;
	}
	XXH3_64bits_reset(r->xxh);
	int rc;
	r->fd = -1;
	r->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0) {
		int e = errno;
		rc = rfail(r, st__dumpio_errno(e), "cannot open: %s", strerror(e));
		goto fail;
	}
	struct stat st;
	if (fstat(r->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = rfail(r, ST_EIO, "not a regular file");
		goto fail;
	}
	uint64_t size = (uint64_t)st.st_size;
	uint8_t h[ST_ROWS_HEADER_SIZE];
	if (size < ST_ROWS_HEADER_SIZE) {
		/* A prefix of a row file is a truncated row file; anything else is
		 * some other file. */
		size_t k = size < 8 ? (size_t)size : 8;
		if (pread_full(r->fd, h, k, 0) == 0 && !memcmp(h, st__rows_magic, k))
			rc = rfail(r, ST_ECORRUPT, "truncated: %" PRIu64 " bytes, shorter than the "
				   "%d-byte header", size, ST_ROWS_HEADER_SIZE);
		else
			rc = rfail(r, ST_EFORMAT, "not a strata row file (no \"STRATARW\" magic)");
		goto fail;
	}
	int k = pread_full(r->fd, h, sizeof h, 0);
	if (k) {
		rc = k < 0 ? rfail(r, ST_EIO, "read failed: %s", strerror(-k))
			   : rfail(r, ST_ECORRUPT, "truncated while reading the header");
		goto fail;
	}
	if ((rc = check_header(r, h, size)) < 0)
		goto fail;
	uint8_t ft[ST_ROWS_FOOTER_SIZE];
	k = pread_full(r->fd, ft, sizeof ft, size - ST_ROWS_FOOTER_SIZE);
	if (k) {
		rc = k < 0 ? rfail(r, ST_EIO, "read failed: %s", strerror(-k))
			   : rfail(r, ST_ECORRUPT, "truncated while reading the footer");
		goto fail;
	}
	if (memcmp(ft, st__rows_footer_magic, 8) || st__rows_get64(ft + 8) != r->info.n_rows ||
	    st__rows_get64(ft + 16) != r->info.n_deleted) {
		rc = rfail(r, ST_ECORRUPT, "bad footer: magic or counts (%" PRIu64 " rows, %" PRIu64
			   " deleted) differ from the header's (%" PRIu64 ", %" PRIu64 ")",
			   st__rows_get64(ft + 8), st__rows_get64(ft + 16), r->info.n_rows, r->info.n_deleted);
		goto fail;
	}
	r->footer_sum = st__rows_get64(ft + 24);
	memcpy(r->footer, ft, sizeof ft);
	r->size = size;
	XXH3_64bits_update(r->xxh, h, sizeof h);
	/* Large reads: the file is read once, front to back (and hashed in the
	 * same large pieces). A batch is what fits (at least one row), so the
	 * buffer stays READ_BYTES however wide a row is (a header may ask for
	 * rows of ST_ROWS_MAX_FLOATS floats: 4 MiB each). */
	r->cap = r->rsize > READ_BYTES ? r->rsize : READ_BYTES;
	r->buf = malloc(r->cap);
	posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	r->deleted = malloc(r->info.n_deleted ? r->info.n_deleted * 8 : 8);
	if (!r->buf || !r->deleted) {
		rc = rfail(r, ST_ENOMEM, "out of memory");
		goto fail;
	}
	if (lseek(r->fd, ST_ROWS_HEADER_SIZE, SEEK_SET) < 0) {
		rc = rfail(r, ST_EIO, "seek failed: %s", strerror(errno));
		goto fail;
	}
	*out = r;
	return ST_OK;
fail:
	st__dumpio_seterr(err, errlen, "%s", r->msg);
	st_rows_reader_close(r);
	return rc;
}

const st_rows_info_t *st_rows_reader_info(const st_rows_reader_t *r)
{
	return &r->info;
}

const char *st_rows_reader_error(const st_rows_reader_t *r)
{
	return r->msg;
}

/* Hashes the bytes consumed since the last call: the body is hashed in the
 * large pieces it was read in, not a record at a time. */
static void hash_consumed(st_rows_reader_t *r)
{
	if (r->pos > r->hpos)
		XXH3_64bits_update(r->xxh, r->buf + r->hpos, r->pos - r->hpos);
	r->hpos = r->pos;
}

/* Makes n bytes available at buf + pos (n <= cap). The buffer only compacts
 * to offsets that keep records 4-aligned: every record starts at a multiple
 * of 4 in the file, and the buffer's start maps to such an offset. */
static int need(st_rows_reader_t *r, size_t n)
{
	if (r->len - r->pos >= n)
		return ST_OK;
	hash_consumed(r);
	memmove(r->buf, r->buf + r->pos, r->len - r->pos);
	r->len -= r->pos;
	r->pos = 0;
	r->hpos = 0;
	while (r->len < n) {
		ssize_t k = read(r->fd, r->buf + r->len, r->cap - r->len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return rfail(r, ST_EIO, "read failed: %s", strerror(errno));
		if (k == 0)
			return rfail(r, ST_ECORRUPT, "truncated while reading (the file shrank)");
		r->len += (size_t)k;
	}
	return ST_OK;
}

/* After the last row: the deleted keys and the footer's checksum. */
static int finish_read(st_rows_reader_t *r)
{
	for (uint64_t i = 0; i < r->info.n_deleted; i++) {
		int rc = need(r, 8);
		if (rc < 0)
			return rc;
		uint64_t k = st__rows_get64(r->buf + r->pos);
		r->pos += 8;
		if (i && k <= r->deleted[i - 1])
			return rfail(r, ST_ECORRUPT, "deleted key %" PRIu64 " (0x%016" PRIx64 ") is not above "
				     "the previous one", i, k);
		r->deleted[i] = k;
	}
	hash_consumed(r);
	uint64_t h = XXH3_64bits_digest(r->xxh);
	/* The footer's checksum covers every byte before it; a manifest's
	 * covers the footer too. The state goes on over the footer read at
	 * open, so a loader can check the file against its manifest without
	 * a second pass over it (st_rows_reader_sum) — also when the footer
	 * disagrees, so that the damage is reported as a manifest mismatch. */
	XXH3_64bits_update(r->xxh, r->footer, sizeof r->footer);
	r->file_sum = XXH3_64bits_digest(r->xxh);
	r->summed = 1;
	if (h != r->footer_sum)
		return rfail(r, ST_ECORRUPT, "checksum mismatch: the content hashes to %016" PRIx64
			     " but the footer says %016" PRIx64, h, r->footer_sum);
	r->done = 1;
	return 0;
}

int st_rows_reader_next_batch(st_rows_reader_t *r, st_rows_row_t *rows, size_t max)
{
	if (r->err)
		return r->err;
	if (r->done)
		return 0;
	uint64_t left = r->info.n_rows - r->next_row;
	if (left == 0)
		return finish_read(r);
	if (max > ST_ROWS_BATCH_MAX)
		max = ST_ROWS_BATCH_MAX;
	if (max > r->cap / r->rsize)
		max = r->cap / r->rsize;
	if (max == 0)
		max = 1;
	size_t k = left < max ? (size_t)left : max;
	int rc = need(r, k * r->rsize);
	if (rc < 0)
		return rc;
	const uint8_t *p = r->buf + r->pos;
	for (size_t i = 0; i < k; i++, p += r->rsize) {
		uint64_t key = st__rows_get64(p);
		if (r->next_row && key <= r->last_key)
			return rfail(r, ST_ECORRUPT, "row %" PRIu64 ": key 0x%016" PRIx64 " is not above the "
				     "previous key 0x%016" PRIx64, r->next_row, key, r->last_key);
		r->last_key = key;
		r->next_row++;
		rows[i].key = key;
		rows[i].last_step = st__rows_get32(p + 8);
		rows[i].freq = st__rows_get32(p + 12);
		rows[i].vals = (const float *)(const void *)(p + 16);
	}
	r->pos += k * r->rsize;
	return (int)k;
}

int st_rows_reader_next(st_rows_reader_t *r, st_rows_row_t *row)
{
	int rc = st_rows_reader_next_batch(r, row, 1);
	return rc > 0 ? 1 : rc;
}

int st_rows_reader_sum(const st_rows_reader_t *r, st_dumpio_sum_t *sum)
{
	if (!r->summed)
		return ST_EAGAIN;
	sum->bytes = r->size;
	sum->xxh3 = r->file_sum;
	return ST_OK;
}

const uint64_t *st_rows_reader_deleted(const st_rows_reader_t *r, size_t *n)
{
	*n = r->done ? (size_t)r->info.n_deleted : 0;
	return r->deleted;
}

void st_rows_reader_close(st_rows_reader_t *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	XXH3_freeState(r->xxh);
	free(r->buf);
	free(r->deleted);
	free(r->path);
	free(r);
}

/* ---------------------------------------------------------------- whole file */

void st_rows_file_free(st_rows_file_t *f)
{
	if (!f)
		return;
	free(f->keys);
	free(f->last_step);
	free(f->freq);
	free(f->vals);
	free(f->deleted);
	free(f);
}

int st_rows_read(const char *path, st_rows_file_t **out, char *err, size_t errlen)
{
	*out = NULL;
	st_rows_reader_t *r;
	int rc = st_rows_reader_open(path, &r, err, errlen);
	if (rc < 0)
		return rc;
	const st_rows_info_t *i = st_rows_reader_info(r);
	size_t nf = (size_t)i->dim + i->state_dim;
	size_t n = (size_t)i->n_rows;   /* fits: the file holds n_rows * rsize bytes */
	st_rows_file_t *f = calloc(1, sizeof *f);
	if (f) {
		f->info = *i;
		f->keys = malloc((n ? n : 1) * 8);
		f->last_step = malloc((n ? n : 1) * 4);
		f->freq = malloc((n ? n : 1) * 4);
		f->vals = malloc((n ? n : 1) * nf * 4);
		f->deleted = malloc(i->n_deleted ? (size_t)i->n_deleted * 8 : 8);
	}
	if (!f || !f->keys || !f->last_step || !f->freq || !f->vals || !f->deleted) {
		st_rows_file_free(f);
		st_rows_reader_close(r);
		st__dumpio_seterr(err, errlen, "%s: out of memory for %zu rows", path, n);
		return ST_ENOMEM;
	}
	st_rows_row_t rows[256];
	size_t k = 0;
	while ((rc = st_rows_reader_next_batch(r, rows, 256)) > 0) {
		for (int j = 0; j < rc; j++, k++) {
			f->keys[k] = rows[j].key;
			f->last_step[k] = rows[j].last_step;
			f->freq[k] = rows[j].freq;
			memcpy(f->vals + k * nf, rows[j].vals, nf * 4);
		}
	}
	if (rc == 0) {
		size_t nd;
		const uint64_t *d = st_rows_reader_deleted(r, &nd);
		memcpy(f->deleted, d, nd * 8);
		/* A key both upserted and deleted would make apply order matter. */
		for (size_t a = 0, b = 0; a < nd && rc == 0; a++) {
			while (b < n && f->keys[b] < d[a])
				b++;
			if (b < n && f->keys[b] == d[a]) {
				st__dumpio_seterr(err, errlen, "%s: key 0x%016" PRIx64 " is both a row and "
						  "deleted", path, d[a]);
				rc = ST_ECORRUPT;
			}
		}
	} else {
		st__dumpio_seterr(err, errlen, "%s", st_rows_reader_error(r));
	}
	st_rows_reader_close(r);
	if (rc < 0) {
		st_rows_file_free(f);
		return rc;
	}
	*out = f;
	return ST_OK;
}
