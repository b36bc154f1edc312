/*
 * rows.c — the sparse row file: writer, builder, streaming and whole-file
 * readers (format in rows.h and docs/formats.md).
 *
 * The writer sorts descriptors (key, metadata, pointer), never the floats,
 * and streams the floats from where they are. The reader checks everything
 * that can be checked before reading a row (header checksum, exact file
 * size, footer) so that truncation, the common failure after a crash or a
 * full disk, is reported at open; the body's checksum is known only at the
 * end of the stream.
 */
#include "ops/dump/rows.h"
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

static const char magic[8] = { 'S', 'T', 'R', 'A', 'T', 'A', 'R', 'W' };
static const char footer_magic[8] = { 'S', 'T', 'R', 'A', 'T', 'A', 'F', 'T' };

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static size_t row_bytes(const st_rows_info_t *i)
{
	return 16 + 4 * ((size_t)i->dim + i->state_dim);
}

static void encode_header(uint8_t h[ST_ROWS_HEADER_SIZE], const st_rows_info_t *i)
{
	memset(h, 0, ST_ROWS_HEADER_SIZE);
	memcpy(h, magic, 8);
	put32(h + 8, ST_ROWS_VERSION);
	put32(h + 12, i->flags);
	put64(h + 16, i->table_id);
	put32(h + 24, i->dim);
	put32(h + 28, i->state_dim);
	put64(h + 32, i->n_rows);
	put64(h + 40, i->n_deleted);
	/* 48..55 reserved, zero */
	put64(h + 56, XXH3_64bits(h, 56));
}

/* ---------------------------------------------------------------- writer */

static int cmp_row(const void *a, const void *b)
{
	uint64_t x = ((const st_rows_row_t *)a)->key, y = ((const st_rows_row_t *)b)->key;
	return x < y ? -1 : x > y;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int check_info(const st_rows_info_t *info)
{
	return info->dim >= 1 && (uint64_t)info->dim + info->state_dim <= ST_ROWS_MAX_FLOATS &&
	       !(info->flags & ~(uint32_t)ST_ROWS_DELTA);
}

int st_rows_write(const char *path, const st_rows_info_t *info, st_rows_row_t *rows, size_t n,
		  uint64_t *deleted, size_t n_deleted, st_dumpio_sum_t *sum, char *err, size_t errlen)
{
	if (!check_info(info)) {
		st__dumpio_seterr(err, errlen, "%s: bad table shape or flags (dim %u, state_dim %u, "
				  "flags 0x%x)", path, info->dim, info->state_dim, info->flags);
		return ST_EINVAL;
	}
	if (n_deleted && !(info->flags & ST_ROWS_DELTA)) {
		st__dumpio_seterr(err, errlen, "%s: deleted keys given for a full row file", path);
		return ST_EINVAL;
	}
	if ((n && !rows) || (n_deleted && !deleted)) {
		st__dumpio_seterr(err, errlen, "%s: NULL rows or deleted keys", path);
		return ST_EINVAL;
	}
	if (n)
		qsort(rows, n, sizeof *rows, cmp_row);
	if (n_deleted)
		qsort(deleted, n_deleted, sizeof *deleted, cmp_u64);
	for (size_t i = 0; i < n; i++) {
		if ((i && rows[i].key == rows[i - 1].key) || !rows[i].vals) {
			st__dumpio_seterr(err, errlen, "%s: key 0x%016" PRIx64 " %s", path, rows[i].key,
					  rows[i].vals ? "is given twice" : "has no values");
			return ST_EINVAL;
		}
	}
	/* Deleted keys: no repeats, and none that is also written as a row (a
	 * merge of two sorted lists). */
	for (size_t i = 0, r = 0; i < n_deleted; i++) {
		if (i && deleted[i] == deleted[i - 1]) {
			st__dumpio_seterr(err, errlen, "%s: deleted key 0x%016" PRIx64 " is given twice",
					  path, deleted[i]);
			return ST_EINVAL;
		}
		while (r < n && rows[r].key < deleted[i])
			r++;
		if (r < n && rows[r].key == deleted[i]) {
			st__dumpio_seterr(err, errlen, "%s: key 0x%016" PRIx64 " is both a row and deleted",
					  path, deleted[i]);
			return ST_EINVAL;
		}
	}

	st_rows_info_t hi = *info;
	hi.n_rows = n;
	hi.n_deleted = n_deleted;
	uint8_t h[ST_ROWS_HEADER_SIZE];
	encode_header(h, &hi);

	st__dumpio_t *f;
	int rc = st__dumpio_open(&f, path, err, errlen);
	if (rc < 0)
		return rc;
	/* The footer's checksum covers everything before it; dumpio hashes the
	 * whole file, so keep a second hash of the body here. */
	XXH3_state_t *x = XXH3_createState();
	if (!x) {
		st__dumpio_abort(f);
		st__dumpio_seterr(err, errlen, "%s: out of memory", path);
		return ST_ENOMEM;
	}
	XXH3_64bits_reset(x);
	XXH3_64bits_update(x, h, sizeof h);
	rc = st__dumpio_write(f, h, sizeof h);
	size_t nf = (size_t)info->dim + info->state_dim;
	for (size_t i = 0; i < n && rc == ST_OK; i++) {
		uint8_t m[16];
		put64(m, rows[i].key);
		put32(m + 8, rows[i].last_step);
		put32(m + 12, rows[i].freq);
		XXH3_64bits_update(x, m, 16);
		XXH3_64bits_update(x, rows[i].vals, 4 * nf);
		rc = st__dumpio_write(f, m, 16);
		if (rc == ST_OK)
			rc = st__dumpio_write(f, rows[i].vals, 4 * nf);
	}
	for (size_t i = 0; i < n_deleted && rc == ST_OK; i++) {
		uint8_t k[8];
		put64(k, deleted[i]);
		XXH3_64bits_update(x, k, 8);
		rc = st__dumpio_write(f, k, 8);
	}
	uint8_t ft[ST_ROWS_FOOTER_SIZE];
	memcpy(ft, footer_magic, 8);
	put64(ft + 8, n);
	put64(ft + 16, n_deleted);
	put64(ft + 24, XXH3_64bits_digest(x));
	XXH3_freeState(x);
	if (rc == ST_OK)
		st__dumpio_write(f, ft, sizeof ft);
	return st__dumpio_close(f, sum, err, errlen);
}

/* ---------------------------------------------------------------- builder */

/* Rows are copied into chunks that never move, so descriptors can point
 * into them, and growth never needs a second copy of everything. */
enum { CHUNK_BYTES = 4 << 20 };

typedef struct chunk {
	struct chunk *next;
	size_t used;
	uint8_t data[];
} chunk_t;

struct st_rows_writer {
	st_rows_info_t info;
	size_t row_size;       /* 16 + 4 * floats, as in the file */
	size_t chunk_rows;
	chunk_t *head, *tail;
	size_t n;
	uint64_t *deleted;
	size_t n_deleted, cap_deleted;
};

int st_rows_writer_create(st_rows_writer_t **out, const st_rows_info_t *info)
{
	*out = NULL;
	if (!check_info(info))
		return ST_EINVAL;
	st_rows_writer_t *w = calloc(1, sizeof *w);
	if (!w)
		return ST_ENOMEM;
	w->info = *info;
	w->row_size = row_bytes(info);
	w->chunk_rows = CHUNK_BYTES / w->row_size;
	if (w->chunk_rows == 0)
		w->chunk_rows = 1;
	*out = w;
	return ST_OK;
}

int st_rows_writer_add(st_rows_writer_t *w, uint64_t key, uint32_t last_step, uint32_t freq,
		       const float *vals)
{
	if (!w->tail || w->tail->used == w->chunk_rows) {
		chunk_t *c = malloc(sizeof *c + w->chunk_rows * w->row_size);
		if (!c)
			return ST_ENOMEM;
		c->next = NULL;
		c->used = 0;
		if (w->tail)
			w->tail->next = c;
		else
			w->head = c;
		w->tail = c;
	}
	uint8_t *p = w->tail->data + w->tail->used++ * w->row_size;
	memcpy(p, &key, 8);
	memcpy(p + 8, &last_step, 4);
	memcpy(p + 12, &freq, 4);
	memcpy(p + 16, vals, w->row_size - 16);
	w->n++;
	return ST_OK;
}

int st_rows_writer_delete(st_rows_writer_t *w, uint64_t key)
{
	if (!(w->info.flags & ST_ROWS_DELTA))
		return ST_EINVAL;
	if (w->n_deleted == w->cap_deleted) {
		size_t cap = w->cap_deleted ? 2 * w->cap_deleted : 64;
		uint64_t *d = realloc(w->deleted, cap * sizeof *d);
		if (!d)
			return ST_ENOMEM;
		w->deleted = d;
		w->cap_deleted = cap;
	}
	w->deleted[w->n_deleted++] = key;
	return ST_OK;
}

size_t st_rows_writer_count(const st_rows_writer_t *w)
{
	return w->n;
}

const st_rows_info_t *st_rows_writer_info(const st_rows_writer_t *w)
{
	return &w->info;
}

int st_rows_writer_finish(st_rows_writer_t *w, const char *path, st_dumpio_sum_t *sum,
			  char *err, size_t errlen)
{
	st_rows_row_t *rows = malloc((w->n ? w->n : 1) * sizeof *rows);
	if (!rows) {
		st__dumpio_seterr(err, errlen, "%s: out of memory sorting %zu rows", path, w->n);
		return ST_ENOMEM;
	}
	size_t i = 0;
	for (chunk_t *c = w->head; c; c = c->next) {
		for (size_t k = 0; k < c->used; k++, i++) {
			const uint8_t *p = c->data + k * w->row_size;
			memcpy(&rows[i].key, p, 8);
			memcpy(&rows[i].last_step, p + 8, 4);
			memcpy(&rows[i].freq, p + 12, 4);
			rows[i].vals = (const float *)(const void *)(p + 16);
		}
	}
	int rc = st_rows_write(path, &w->info, rows, w->n, w->deleted, w->n_deleted, sum, err, errlen);
	free(rows);
	return rc;
}

void st_rows_writer_destroy(st_rows_writer_t *w)
{
	if (!w)
		return;
	for (chunk_t *c = w->head, *next; c; c = next) {
		next = c->next;
		free(c);
	}
	free(w->deleted);
	free(w);
}

/* ---------------------------------------------------------------- reader */

struct st_rows_reader {
	int fd;
	char *path;
	st_rows_info_t info;
	size_t rsize;          /* bytes per row record */
	uint64_t next_row;     /* rows returned so far */
	uint64_t last_key;
	uint64_t footer_sum;
	XXH3_state_t *xxh;
	uint8_t *buf;          /* holds file bytes [buf_off, buf_off + len) */
	size_t cap, pos, len;
	uint64_t *deleted;
	int done;              /* 1 once the checksum is verified */
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
	if (memcmp(h, magic, 8))
		return rfail(r, ST_EFORMAT, "not a strata row file (no \"STRATARW\" magic)");
	if (get64(h + 56) != XXH3_64bits(h, 56))
		return rfail(r, ST_ECORRUPT, "header checksum mismatch (the header is damaged)");
	i->version = get32(h + 8);
	i->flags = get32(h + 12);
	i->table_id = get64(h + 16);
	i->dim = get32(h + 24);
	i->state_dim = get32(h + 28);
	i->n_rows = get64(h + 32);
	i->n_deleted = get64(h + 40);
	if (i->version != ST_ROWS_VERSION)
		return rfail(r, ST_EFORMAT, "row file version %u; this strata reads version %d",
			     i->version, ST_ROWS_VERSION);
	if (i->flags & ~(uint32_t)ST_ROWS_DELTA)
		return rfail(r, ST_EFORMAT, "unknown flags 0x%x", i->flags);
	if (get64(h + 48))
		return rfail(r, ST_EFORMAT, "reserved header bytes 48..55 are not zero");
	if (!check_info(i))
		return rfail(r, ST_EFORMAT, "bad table shape: dim %u, state_dim %u", i->dim, i->state_dim);
	if (i->n_deleted && !(i->flags & ST_ROWS_DELTA))
		return rfail(r, ST_EFORMAT, "a full row file with %" PRIu64 " deleted keys", i->n_deleted);
	r->rsize = row_bytes(i);
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
		if (pread_full(r->fd, h, k, 0) == 0 && !memcmp(h, magic, k))
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
	if (memcmp(ft, footer_magic, 8) || get64(ft + 8) != r->info.n_rows ||
	    get64(ft + 16) != r->info.n_deleted) {
		rc = rfail(r, ST_ECORRUPT, "bad footer: magic or counts (%" PRIu64 " rows, %" PRIu64
			   " deleted) differ from the header's (%" PRIu64 ", %" PRIu64 ")",
			   get64(ft + 8), get64(ft + 16), r->info.n_rows, r->info.n_deleted);
		goto fail;
	}
	r->footer_sum = get64(ft + 24);
	XXH3_64bits_update(r->xxh, h, sizeof h);
	r->cap = r->rsize * 64 > (1u << 20) ? r->rsize * 64 : (1u << 20);
	r->buf = malloc(r->cap);
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

/* Makes n bytes available at buf + pos; hashes nothing. The buffer only
 * compacts to offsets that keep records 4-aligned: every record starts at a
 * multiple of 4 in the file, and the buffer's start maps to such an offset. */
static int need(st_rows_reader_t *r, size_t n)
{
	if (r->len - r->pos >= n)
		return ST_OK;
	memmove(r->buf, r->buf + r->pos, r->len - r->pos);
	r->len -= r->pos;
	r->pos = 0;
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

int st_rows_reader_next(st_rows_reader_t *r, st_rows_row_t *row)
{
	if (r->err)
		return r->err;
	if (r->done)
		return 0;
	if (r->next_row < r->info.n_rows) {
		int rc = need(r, r->rsize);
		if (rc < 0)
			return rc;
		const uint8_t *p = r->buf + r->pos;
		uint64_t key = get64(p);
		if (r->next_row && key <= r->last_key)
			return rfail(r, ST_ECORRUPT, "row %" PRIu64 ": key 0x%016" PRIx64 " is not above the "
				     "previous key 0x%016" PRIx64, r->next_row, key, r->last_key);
		XXH3_64bits_update(r->xxh, p, r->rsize);
		r->pos += r->rsize;
		r->last_key = key;
		r->next_row++;
		row->key = key;
		row->last_step = get32(p + 8);
		row->freq = get32(p + 12);
		row->vals = (const float *)(const void *)(p + 16);
		return 1;
	}
	for (uint64_t i = 0; i < r->info.n_deleted; i++) {
		int rc = need(r, 8);
		if (rc < 0)
			return rc;
		uint64_t k = get64(r->buf + r->pos);
		XXH3_64bits_update(r->xxh, r->buf + r->pos, 8);
		r->pos += 8;
		if (i && k <= r->deleted[i - 1])
			return rfail(r, ST_ECORRUPT, "deleted key %" PRIu64 " (0x%016" PRIx64 ") is not above "
				     "the previous one", i, k);
		r->deleted[i] = k;
	}
	uint64_t h = XXH3_64bits_digest(r->xxh);
	if (h != r->footer_sum)
		return rfail(r, ST_ECORRUPT, "checksum mismatch: the content hashes to %016" PRIx64
			     " but the footer says %016" PRIx64, h, r->footer_sum);
	r->done = 1;
	return 0;
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
	st_rows_row_t row;
	size_t k = 0;
	while ((rc = st_rows_reader_next(r, &row)) == 1) {
		f->keys[k] = row.key;
		f->last_step[k] = row.last_step;
		f->freq[k] = row.freq;
		memcpy(f->vals + k * nf, row.vals, nf * 4);
		k++;
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
