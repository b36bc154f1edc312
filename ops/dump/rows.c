/*
 * rows.c — the sparse row file: writer, builder, streaming and whole-file
 * readers (format in rows.h and docs/formats.md).
 *
 * The writer sorts 16-byte items (key, where the row is) with a radix sort,
 * never the floats, and gathers the rows in key order into large aligned
 * buffers that dumpio writes (O_DIRECT where it can) while the next one
 * fills; every byte is hashed once. The builder keeps rows as file records
 * in chunks that never move, and its memory across resets, so a caller that
 * builds the same table again (the trainer's checkpoints) copies into pages
 * that are already mapped. The reader checks everything that can be checked
 * before reading a row (header checksum, exact file size, footer) so that
 * truncation, the common failure after a crash or a full disk, is reported
 * at open; the body's checksum is known only at the end of the stream. It
 * reads and hashes in large pieces and hands out rows in batches.
 *
 * Threads: a write of a file larger than one staging buffer runs dumpio's
 * writer thread for the duration of the call (dumpio.h, st__dumpio_stage);
 * everything else runs on the caller's thread.
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

/* ---------------------------------------------------------------- sorting */

/* A sort item: a key and where its row is (an index into the caller's rows
 * or, in a builder, the address of the row's record). */
typedef struct item {
	uint64_t key;
	uint64_t at;
} item_t;

enum { RADIX_BITS = 8, RADIX = 1 << RADIX_BITS, RADIX_PASSES = 64 / RADIX_BITS };

/*
 * Sorts n items by key: a stable LSD radix sort, RADIX_BITS of the key per
 * pass, with every pass's histogram counted in one read of the input and the
 * passes over digits that all keys share skipped (small or clustered keys
 * need fewer than all of them). Uses tmp (n items) and returns the array that
 * holds the result: a or tmp, or NULL when the histograms cannot be
 * allocated. Linear time: the comparison sort it replaced was the largest
 * cost of writing a big table.
 */
static item_t *radix_sort(item_t *a, item_t *tmp, size_t n)
{
	size_t (*cnt)[RADIX] = calloc(RADIX_PASSES, sizeof *cnt);
	if (!cnt)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		uint64_t k = a[i].key;
		for (int d = 0; d < RADIX_PASSES; d++)
			cnt[d][(k >> (d * RADIX_BITS)) & (RADIX - 1)]++;
	}
	for (int d = 0; d < RADIX_PASSES && n > 1; d++) {
		unsigned shift = (unsigned)d * RADIX_BITS;
		size_t *c = cnt[d];
		if (c[(a[0].key >> shift) & (RADIX - 1)] == n)
			continue;   /* every key has this digit: the pass would not move anything */
		size_t sum = 0;
		for (int b = 0; b < RADIX; b++) {
			size_t k = c[b];
			c[b] = sum;
			sum += k;
		}
		for (size_t i = 0; i < n; i++)
			tmp[c[(a[i].key >> shift) & (RADIX - 1)]++] = a[i];
		item_t *t = a;
		a = tmp;
		tmp = t;
	}
	free(cnt);
	return a;
}

/* Finds the first key given twice in sorted items; returns its index or n. */
static size_t first_repeat(const item_t *it, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (it[i].key == it[i - 1].key)
			return i;
	return n;
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

/* Sorts the deleted keys and checks them against the sorted rows: no
 * repeats, and none that is also a row (a merge of two sorted lists). */
static int check_deleted(const char *path, const item_t *it, size_t n, uint64_t *deleted,
			 size_t n_deleted, char *err, size_t errlen)
{
	if (n_deleted)
		qsort(deleted, n_deleted, sizeof *deleted, cmp_u64);
	for (size_t i = 0, r = 0; i < n_deleted; i++) {
		if (i && deleted[i] == deleted[i - 1]) {
			st__dumpio_seterr(err, errlen, "%s: deleted key 0x%016" PRIx64 " is given twice",
					  path, deleted[i]);
			return ST_EINVAL;
		}
		while (r < n && it[r].key < deleted[i])
			r++;
		if (r < n && it[r].key == deleted[i]) {
			st__dumpio_seterr(err, errlen, "%s: key 0x%016" PRIx64 " is both a row and deleted",
					  path, deleted[i]);
			return ST_EINVAL;
		}
	}
	return ST_OK;
}

/* ---------------------------------------------------------------- output */

/* The reader's chunk: the file is read (and hashed) in pieces this large. */
enum { READ_BYTES = 8 << 20 };

/* Rows come either from the caller's array (item.at indexes rows) or from a
 * builder (item.at is the address of a record laid out as in the file). */
typedef struct source {
	const st_rows_row_t *rows;   /* NULL: builder records */
	size_t rsize;                /* bytes per record */
} source_t;

/* Records prefetched ahead of the copy: the rows are scattered in memory in
 * key order, and a row is three cache lines. */
enum { PREFETCH_ROWS = 16 };

/* Writes path: the header, the rows in the order of it[] (sorted, checked),
 * the deleted keys (sorted, checked), the footer; fsyncs. As st_rows_write. */
static int write_sorted(const char *path, const st_rows_info_t *info, const item_t *it, size_t n,
			const source_t *src, const uint64_t *deleted, size_t n_deleted,
			st_dumpio_sum_t *sum, char *err, size_t errlen)
{
	st_rows_info_t hi = *info;
	hi.n_rows = n;
	hi.n_deleted = n_deleted;
	uint8_t h[ST_ROWS_HEADER_SIZE];
	encode_header(h, &hi);
	uint64_t total = ST_ROWS_HEADER_SIZE + (uint64_t)n * src->rsize + 8 * (uint64_t)n_deleted +
			 ST_ROWS_FOOTER_SIZE;
	st__dumpio_t *f;
	int rc = st__dumpio_open(&f, path, err, errlen);
	if (rc < 0)
		return rc;
	/* The bytes go through dumpio's staging buffers, which overlap the
	 * gathering of rows here with the hashing and the device's write; the
	 * footer's checksum is dumpio's running hash just before the footer, so
	 * the rows are hashed once, not once for the footer and again for the
	 * manifest. */
	st__dumpio_stage_t *o;
	if (st__dumpio_stage_open(&o, f, total) < 0) {
		st__dumpio_abort(f);
		st__dumpio_seterr(err, errlen, "%s: out of memory", path);
		return ST_ENOMEM;
	}
	rc = st__dumpio_stage_put(o, h, sizeof h);
	size_t nf4 = src->rsize - 16;
	for (size_t i = 0; i < n && rc == ST_OK; i++) {
		if (!src->rows) {
			if (i + PREFETCH_ROWS < n) {
				const char *q = (const char *)(uintptr_t)it[i + PREFETCH_ROWS].at;
				for (size_t b = 0; b < src->rsize; b += 64)
					__builtin_prefetch(q + b);
				__builtin_prefetch(q + src->rsize - 1);
			}
			rc = st__dumpio_stage_put(o, (const void *)(uintptr_t)it[i].at, src->rsize);
			continue;
		}
		const st_rows_row_t *r = &src->rows[it[i].at];
		uint8_t m[16];
		put64(m, r->key);
		put32(m + 8, r->last_step);
		put32(m + 12, r->freq);
		st__dumpio_stage_put(o, m, 16);
		rc = st__dumpio_stage_put(o, r->vals, nf4);
	}
	for (size_t i = 0; i < n_deleted && rc == ST_OK; i++) {
		uint8_t k[8];
		put64(k, deleted[i]);
		rc = st__dumpio_stage_put(o, k, 8);
	}
	if (st__dumpio_stage_close(o) == ST_OK) {
		uint8_t ft[ST_ROWS_FOOTER_SIZE];
		memcpy(ft, footer_magic, 8);
		put64(ft + 8, n);
		put64(ft + 16, n_deleted);
		put64(ft + 24, st__dumpio_digest(f));
		st__dumpio_write(f, ft, sizeof ft);
	}
	return st__dumpio_close(f, sum, err, errlen);
}

/* ---------------------------------------------------------------- writer */

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
	item_t *a = malloc((n ? n : 1) * sizeof *a), *tmp = malloc((n ? n : 1) * sizeof *tmp);
	st_rows_row_t *sorted = malloc((n ? n : 1) * sizeof *sorted);
	item_t *it = NULL;
	if (a && tmp && sorted) {
		for (size_t i = 0; i < n; i++)
			a[i] = (item_t){ rows[i].key, i };
		it = radix_sort(a, tmp, n);
	}
	if (!it) {
		free(a);
		free(tmp);
		free(sorted);
		st__dumpio_seterr(err, errlen, "%s: out of memory sorting %zu rows", path, n);
		return ST_ENOMEM;
	}
	/* rows[] is reordered in place, as documented. */
	for (size_t i = 0; i < n; i++)
		sorted[i] = rows[it[i].at];
	if (n)
		memcpy(rows, sorted, n * sizeof *rows);
	free(sorted);
	for (size_t i = 0; i < n; i++)
		it[i].at = i;
	int rc = ST_OK;
	for (size_t i = 0; i < n; i++) {
		if ((i && rows[i].key == rows[i - 1].key) || !rows[i].vals) {
			st__dumpio_seterr(err, errlen, "%s: key 0x%016" PRIx64 " %s", path, rows[i].key,
					  rows[i].vals ? "is given twice" : "has no values");
			rc = ST_EINVAL;
			break;
		}
	}
	if (rc == ST_OK)
		rc = check_deleted(path, it, n, deleted, n_deleted, err, errlen);
	if (rc == ST_OK) {
		source_t src = { rows, row_bytes(info) };
		rc = write_sorted(path, info, it, n, &src, deleted, n_deleted, sum, err, errlen);
	}
	free(a);
	free(tmp);
	return rc;
}

/* ---------------------------------------------------------------- builder */

/* Rows are copied into chunks that never move, as records laid out as in the
 * file, so that finishing sorts 16-byte items (key, record address) and
 * writes each record with one copy; growth never copies a row twice. */
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
	chunk_t *head, *tail;  /* tail: the chunk being filled (NULL: none yet); those
				  after it are spare */
	item_t *items;         /* [n] (key, record address), in the order added */
	size_t n, cap_items;
	item_t *scratch;       /* the radix sort's second array, kept like the rows */
	size_t cap_scratch;
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

void st_rows_writer_reset(st_rows_writer_t *w)
{
	for (chunk_t *c = w->head; c; c = c->next)
		c->used = 0;
	w->tail = w->head;
	w->n = 0;
	w->n_deleted = 0;
}

int st_rows_writer_reserve(st_rows_writer_t *w, size_t rows)
{
	if (w->cap_items < rows) {
		item_t *it = realloc(w->items, rows * sizeof *it);
		if (!it)
			return ST_ENOMEM;
		w->items = it;
		w->cap_items = rows;
	}
	if (w->cap_scratch < rows) {
		free(w->scratch);
		w->cap_scratch = 0;
		if (!(w->scratch = malloc(rows * sizeof *w->scratch)))
			return ST_ENOMEM;
		w->cap_scratch = rows;
	}
	/* Memory past what holds rows now is free to write (it may be fresh). */
	if (rows > w->n)
		memset(w->items + w->n, 0, (rows - w->n) * sizeof *w->items);
	memset(w->scratch, 0, rows * sizeof *w->scratch);
	if (w->tail)
		memset(w->tail->data + w->tail->used * w->row_size, 0,
		       (w->chunk_rows - w->tail->used) * w->row_size);
	size_t have = 0;
	chunk_t *last = NULL;
	for (chunk_t *c = w->head; c; c = c->next) {
		have += w->chunk_rows;
		last = c;
	}
	while (have < rows) {
		chunk_t *c = malloc(sizeof *c + w->chunk_rows * w->row_size);
		if (!c)
			return ST_ENOMEM;
		/* written once now, so that its pages are mapped before the
		 * rows come */
		memset(c->data, 0, w->chunk_rows * w->row_size);
		c->next = NULL;
		c->used = 0;
		if (last)
			last->next = c;
		else
			w->head = c;
		last = c;
		have += w->chunk_rows;
	}
	return ST_OK;
}

int st_rows_writer_add(st_rows_writer_t *w, uint64_t key, uint32_t last_step, uint32_t freq,
		       const float *vals)
{
	if (w->n == w->cap_items) {
		size_t cap = w->cap_items ? 2 * w->cap_items : 1024;
		item_t *it = realloc(w->items, cap * sizeof *it);
		if (!it)
			return ST_ENOMEM;
		w->items = it;
		w->cap_items = cap;
	}
	if (!w->tail || w->tail->used == w->chunk_rows) {
		/* the next chunk: a spare one (from before a reset, or reserved)
		 * or a new one */
		chunk_t *c = w->tail ? w->tail->next : w->head;
		if (!c) {
			c = malloc(sizeof *c + w->chunk_rows * w->row_size);
			if (!c)
				return ST_ENOMEM;
			c->next = NULL;
			if (w->tail)
				w->tail->next = c;
			else
				w->head = c;
		}
		c->used = 0;
		w->tail = c;
	}
	uint8_t *p = w->tail->data + w->tail->used++ * w->row_size;
	put64(p, key);
	put32(p + 8, last_step);
	put32(p + 12, freq);
	memcpy(p + 16, vals, w->row_size - 16);
	w->items[w->n++] = (item_t){ key, (uint64_t)(uintptr_t)p };
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
	/* The items are sorted in place (through the scratch array) and stay
	 * sorted: a second finish, or rows added after this one, sort again. */
	if (w->cap_scratch < w->n) {
		free(w->scratch);
		w->cap_scratch = 0;
		if (!(w->scratch = malloc(w->cap_items * sizeof *w->scratch))) {
			st__dumpio_seterr(err, errlen, "%s: out of memory sorting %zu rows", path, w->n);
			return ST_ENOMEM;
		}
		w->cap_scratch = w->cap_items;
	}
	item_t *it = w->items;
	if (w->n && !(it = radix_sort(w->items, w->scratch, w->n))) {
		st__dumpio_seterr(err, errlen, "%s: out of memory sorting %zu rows", path, w->n);
		return ST_ENOMEM;
	}
	if (it == w->scratch) {   /* the result is in the scratch array: swap the two */
		item_t *t = w->items;
		size_t c = w->cap_items;
		w->items = w->scratch;
		w->cap_items = w->cap_scratch;
		w->scratch = t;
		w->cap_scratch = c;
	}
	size_t rep = first_repeat(w->items, w->n);
	if (rep < w->n) {
		st__dumpio_seterr(err, errlen, "%s: key 0x%016" PRIx64 " is given twice", path,
				  w->items[rep].key);
		return ST_EINVAL;
	}
	int rc = check_deleted(path, w->items, w->n, w->deleted, w->n_deleted, err, errlen);
	if (rc < 0)
		return rc;
	source_t src = { NULL, w->row_size };
	return write_sorted(path, &w->info, w->items, w->n, &src, w->deleted, w->n_deleted, sum,
			    err, errlen);
}

void st_rows_writer_destroy(st_rows_writer_t *w)
{
	if (!w)
		return;
	for (chunk_t *c = w->head, *next; c; c = next) {
		next = c->next;
		free(c);
	}
	free(w->items);
	free(w->scratch);
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
	uint8_t *buf;          /* file bytes read ahead; [pos, len) not consumed yet */
	size_t cap, pos, len;
	size_t hpos;           /* [hpos, pos) consumed but not hashed yet */
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
		uint64_t k = get64(r->buf + r->pos);
		r->pos += 8;
		if (i && k <= r->deleted[i - 1])
			return rfail(r, ST_ECORRUPT, "deleted key %" PRIu64 " (0x%016" PRIx64 ") is not above "
				     "the previous one", i, k);
		r->deleted[i] = k;
	}
	hash_consumed(r);
	uint64_t h = XXH3_64bits_digest(r->xxh);
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
		uint64_t key = get64(p);
		if (r->next_row && key <= r->last_key)
			return rfail(r, ST_ECORRUPT, "row %" PRIu64 ": key 0x%016" PRIx64 " is not above the "
				     "previous key 0x%016" PRIx64, r->next_row, key, r->last_key);
		r->last_key = key;
		r->next_row++;
		rows[i].key = key;
		rows[i].last_step = get32(p + 8);
		rows[i].freq = get32(p + 12);
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
