/*
 * rows.c — the sparse row file's writer and builder (format in rows.h and
 * docs/formats.md; the readers are in rows_read.c).
 *
 * The writer sorts 16-byte items (key, where the row is) with a radix sort,
 * never the floats, and gathers the rows in key order into large aligned
 * buffers that dumpio writes (O_DIRECT where it can) while the next one
 * fills; every byte is hashed once. The builder keeps rows as file records
 * in chunks that never move, and its memory across resets, so a caller that
 * builds the same table again (the trainer's checkpoints) copies into pages
 * that are already mapped.
 *
 * Threads: a write of a file larger than one staging buffer runs dumpio's
 * writer thread for the duration of the call (dumpio.h, st__dumpio_stage);
 * everything else runs on the caller's thread.
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

static void encode_header(uint8_t h[ST_ROWS_HEADER_SIZE], const st_rows_info_t *i)
{
	memset(h, 0, ST_ROWS_HEADER_SIZE);
	memcpy(h, st__rows_magic, 8);
	st__rows_put32(h + 8, ST_ROWS_VERSION);
	st__rows_put32(h + 12, i->flags);
	st__rows_put64(h + 16, i->table_id);
	st__rows_put32(h + 24, i->dim);
	st__rows_put32(h + 28, i->state_dim);
	st__rows_put64(h + 32, i->n_rows);
	st__rows_put64(h + 40, i->n_deleted);
	/* 48..55 reserved, zero */
	st__rows_put64(h + 56, XXH3_64bits(h, 56));
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
		st__rows_put64(m, r->key);
		st__rows_put32(m + 8, r->last_step);
		st__rows_put32(m + 12, r->freq);
		st__dumpio_stage_put(o, m, 16);
		rc = st__dumpio_stage_put(o, r->vals, nf4);
	}
	for (size_t i = 0; i < n_deleted && rc == ST_OK; i++) {
		uint8_t k[8];
		st__rows_put64(k, deleted[i]);
		rc = st__dumpio_stage_put(o, k, 8);
	}
	if (st__dumpio_stage_close(o) == ST_OK) {
		uint8_t ft[ST_ROWS_FOOTER_SIZE];
		memcpy(ft, st__rows_footer_magic, 8);
		st__rows_put64(ft + 8, n);
		st__rows_put64(ft + 16, n_deleted);
		st__rows_put64(ft + 24, st__dumpio_digest(f));
		st__dumpio_write(f, ft, sizeof ft);
	}
	return st__dumpio_close(f, sum, err, errlen);
}

/* ---------------------------------------------------------------- writer */

int st_rows_write(const char *path, const st_rows_info_t *info, st_rows_row_t *rows, size_t n,
		  uint64_t *deleted, size_t n_deleted, st_dumpio_sum_t *sum, char *err, size_t errlen)
{
	if (!st__rows_check_info(info)) {
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
		source_t src = { rows, st__rows_row_bytes(info) };
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
	if (!st__rows_check_info(info))
		return ST_EINVAL;
	st_rows_writer_t *w = calloc(1, sizeof *w);
	if (!w)
		return ST_ENOMEM;
	w->info = *info;
	w->row_size = st__rows_row_bytes(info);
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
	st__rows_put64(p, key);
	st__rows_put32(p + 8, last_step);
	st__rows_put32(p + 12, freq);
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
