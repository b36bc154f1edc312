/*
 * stage.c — the read stage: the graph's source op (st_read_stage_ops).
 *
 * Threads: the stage's n_threads threads ("st-read-<n>") each call produce.
 * Sharding is by file: a thread takes the next file index from a cursor
 * under `mu` (file i of pass p is index p * n_paths + i, over `epochs`
 * passes), reads it to its end into batches of batch_size rows, then takes
 * the next file. One big plain file is therefore read by one thread; it
 * could later be split by byte range (each part starting after the first
 * newline past its offset), which compressed files do not allow.
 *
 * Per-thread state (the open reader and the batch being filled) lives in
 * th[thread_idx], touched only by that thread, and by destroy after the
 * graph stopped. Shared state: the file cursor (mutex), batch seq numbers,
 * the row budget for src->limit, the totals and the bad-record report
 * counter (atomics). Only one lock, so no lock order.
 *
 * Ordering: seq numbers are unique and dense (0, 1, 2, ...) but batches of
 * different threads interleave; within one thread, seq grows with the
 * position in the file.
 *
 * Bad records: each reader counts its own; the totals (atomics) are added
 * when a reader closes, and `good` counts every good record read, also those
 * of batches dropped for other ranks, so that st_read_stage_check_bad judges
 * the share of bad records of the whole stream the same way on every rank.
 *
 * src->limit: each thread counts the rows it read against an atomic budget
 * after reading them and drops rows read past it from the end of its batch,
 * so exactly min(limit, rows available) rows come out whatever the threads'
 * interleaving.
 */
#include "read_internal.h"

#include "runtime/err.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct read_thread {
	st_reader_t *r;
	st_batch_t *b;
	uint64_t file;         /* cursor index of the open file */
	uint64_t rec;          /* records read from it so far */
	st_read_stats_t skipped; /* the reader's counts of records dropped by a
				    resume (skip): not part of the pass */
};

struct st_read_stage {
	st_source_t src;       /* deep copy: the job may go away first */
	uint32_t batch_size;
	int eval;
	uint64_t n_files;      /* n_paths * epochs */

	pthread_mutex_t mu;    /* guards next_file */
	uint64_t next_file;
	uint64_t seek_file;    /* st_read_stage_seek: skip seek_rec records */
	uint64_t seek_rec;     /* of file seek_file when it is opened */

	atomic_uint_fast64_t seq;
	int shard, shards;     /* st_read_stage_shard: keep batches seq % shards == shard */
	int limited;
	atomic_int_fast64_t remaining;
	atomic_uint_fast64_t rows, bad, bytes;
	atomic_uint_fast64_t lists_truncated, list_items_empty, lists_empty, missing_keys;
	atomic_uint_fast64_t good;  /* good records read, also other ranks' */
	atomic_uint_fast64_t reported;

	struct read_thread th[ST_MAX_STAGE_THREADS];
};

static void src_free(st_source_t *s)
{
	free(s->format);
	if (s->paths)
		for (int i = 0; i < s->n_paths; i++)
			free(s->paths[i]);
	free(s->paths);
	free(s->col_kind);
	free(s->slot_opt);
}

static void src_copy(st_source_t *dst, const st_source_t *src)
{
	*dst = *src;
	dst->format = src->format ? st_xstrdup(src->format) : NULL;
	dst->paths = st_xcalloc((size_t)src->n_paths, sizeof *dst->paths);
	for (int i = 0; i < src->n_paths; i++)
		dst->paths[i] = st_xstrdup(src->paths[i]);
	dst->label_names = NULL;   /* the readers number labels, never name them */
	dst->col_kind = NULL;
	if (src->col_kind && src->n_cols > 0) {
		dst->col_kind = st_xmalloc((size_t)src->n_cols);
		memcpy(dst->col_kind, src->col_kind, (size_t)src->n_cols);
	}
	dst->slot_opt = NULL;
	if (src->slot_opt && src->n_slots > 0) {
		dst->slot_opt = st_xmalloc((size_t)src->n_slots * sizeof *dst->slot_opt);
		memcpy(dst->slot_opt, src->slot_opt, (size_t)src->n_slots * sizeof *dst->slot_opt);
	}
}

int st_read_stage_create(st_read_stage_t **out, const st_source_t *src,
			 uint32_t batch_size, int epochs, int eval)
{
	if (!src || src->n_paths < 1 || !src->paths || batch_size < 1 || epochs < 1)
		return ST_EINVAL;
	st_read_stage_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	src_copy(&s->src, src);
	s->batch_size = batch_size;
	s->eval = eval;
	s->n_files = (uint64_t)src->n_paths * (uint64_t)epochs;
	pthread_mutex_init(&s->mu, NULL);
	s->seek_file = UINT64_MAX;
	atomic_init(&s->seq, 0);
	s->limited = src->limit >= 0;
	atomic_init(&s->remaining, src->limit >= 0 ? src->limit : 0);
	atomic_init(&s->rows, 0);
	atomic_init(&s->bad, 0);
	atomic_init(&s->good, 0);
	atomic_init(&s->bytes, 0);
	atomic_init(&s->lists_truncated, 0);
	atomic_init(&s->list_items_empty, 0);
	atomic_init(&s->lists_empty, 0);
	atomic_init(&s->missing_keys, 0);
	atomic_init(&s->reported, 0);
	*out = s;
	return ST_OK;
}

static void close_reader(st_read_stage_t *s, struct read_thread *t)
{
	if (!t->r)
		return;
	st_read_stats_t rs;
	st_reader_stats(t->r, &rs);
	rs.lists_truncated -= t->skipped.lists_truncated;
	rs.list_items_empty -= t->skipped.list_items_empty;
	rs.lists_empty -= t->skipped.lists_empty;
	rs.missing_keys -= t->skipped.missing_keys;
	t->skipped = (st_read_stats_t){ 0 };
	atomic_fetch_add(&s->bad, rs.bad);
	atomic_fetch_add(&s->bytes, rs.bytes);
	atomic_fetch_add(&s->lists_truncated, rs.lists_truncated);
	atomic_fetch_add(&s->list_items_empty, rs.list_items_empty);
	atomic_fetch_add(&s->lists_empty, rs.lists_empty);
	atomic_fetch_add(&s->missing_keys, rs.missing_keys);
	st_reader_close(t->r);
	t->r = NULL;
}

/* Hands out t's batch: 1, or 0 when the batch belongs to another rank of a
 * multi-process job (st_read_stage_shard; it is emptied for reuse). */
static int emit(st_read_stage_t *s, struct read_thread *t, st_batch_t **out)
{
	st_batch_t *b = t->b;
	b->seq = atomic_fetch_add(&s->seq, 1);
	if (s->shards > 1 && b->seq % (uint64_t)s->shards != (uint64_t)s->shard) {
		st_batch_clear(b);
		return 0;
	}
	b->eval = s->eval;
	b->src_file = t->file;
	b->src_rec = t->rec;
	atomic_fetch_add(&s->rows, b->n);
	t->b = NULL;
	*out = b;
	return 1;
}

/* Key capacity to start a batch with: a guess per row, grown on demand. */
static uint32_t key_cap_guess(const st_read_stage_t *s)
{
	uint64_t per_row = s->src.n_slots > 16 ? (uint64_t)s->src.n_slots : 16;
	uint64_t cap = per_row * s->batch_size;
	return cap > (1u << 24) ? (1u << 24) : (uint32_t)cap;
}

/* Reads and drops the first n records of t's new file (resume). */
static int skip(st_read_stage_t *s, struct read_thread *t, uint64_t n)
{
	st_batch_t *b;
	int rc = st_batch_create(&b, 4096, (uint32_t)s->src.n_dense, (uint32_t)s->src.n_slots,
				 key_cap_guess(s));
	if (rc < 0)
		return rc;
	rc = st_batch_set_labels(b, (uint32_t)st_source_labels(&s->src));
	if (rc < 0) {
		st_batch_destroy(b);
		return rc;
	}
	while (n > 0) {
		st_batch_clear(b);
		uint32_t want = n < 4096 ? (uint32_t)n : 4096;
		int got = st_reader_next(t->r, b, want);
		if (got < 0) {
			st_batch_destroy(b);
			return ST_EIO;
		}
		if (b->n == 0) {
			st_batch_destroy(b);
			return ST_ENOENT;
		}
		n -= b->n;
		t->rec += b->n;
	}
	st_batch_destroy(b);
	/* The file was opened for this skip: everything counted so far is
	 * the dropped records'. */
	st_reader_stats(t->r, &t->skipped);
	return ST_OK;
}

int st_read_stage_seek(st_read_stage_t *s, uint64_t file, uint64_t records, uint64_t seq,
		       uint64_t consumed)
{
	if (file > s->n_files)
		return ST_EINVAL;
	s->next_file = file;
	s->seek_file = file;
	s->seek_rec = records;
	atomic_store(&s->seq, seq);
	if (s->limited)
		atomic_fetch_sub(&s->remaining, (int64_t)consumed);
	return ST_OK;
}

int st_read_stage_shard(st_read_stage_t *s, int shard, int shards)
{
	if (shards < 1 || shard < 0 || shard >= shards)
		return ST_EINVAL;
	s->shard = shard;
	s->shards = shards;
	return ST_OK;
}

static int read_produce(void *state, st_stage_ctx_t *ctx, st_batch_t **out)
{
	st_read_stage_t *s = state;
	struct read_thread *t = &s->th[ctx->thread_idx];
	int rc;
	for (;;) {
		if (st_graph_canceled(ctx->graph))
			return 0;
		if (s->limited && atomic_load(&s->remaining) <= 0)
			break;
		if (!t->r) {
			uint64_t idx;
			pthread_mutex_lock(&s->mu);
			idx = s->next_file < s->n_files ? s->next_file++ : UINT64_MAX;
			pthread_mutex_unlock(&s->mu);
			if (idx == UINT64_MAX)
				break;
			char errbuf[512];
			const char *path = s->src.paths[idx % (uint64_t)s->src.n_paths];
			rc = st__reader_open_ex(&t->r, &s->src, path, errbuf, sizeof errbuf);
			if (rc < 0)
				return st_stage_fail(ctx, rc, "%s", errbuf);
			st__reader_share_reported(t->r, &s->reported);
			t->file = idx;
			t->rec = 0;
			if (idx == s->seek_file && s->seek_rec) {
				rc = skip(s, t, s->seek_rec);
				if (rc < 0)
					return st_stage_fail(ctx, rc, "%s: resuming at record %llu: %s", path,
							     (unsigned long long)s->seek_rec,
							     rc == ST_EIO ? st_reader_error(t->r)
									  : "the file is shorter than the checkpoint says");
			}
		}
		if (!t->b) {
			rc = st_batch_create(&t->b, s->batch_size, (uint32_t)s->src.n_dense,
					     (uint32_t)s->src.n_slots, key_cap_guess(s));
			if (rc >= 0) {
				rc = st_batch_set_labels(t->b,
							 (uint32_t)st_source_labels(&s->src));
				if (rc < 0) {
					st_batch_destroy(t->b);
					t->b = NULL;
				}
			}
			if (rc < 0)
				return st_stage_fail(ctx, rc, "read: cannot allocate a batch of %u rows",
						     s->batch_size);
		}
		uint32_t want = s->batch_size - t->b->n;
		if (s->limited) {
			int64_t left = atomic_load(&s->remaining);
			if (left < (int64_t)want)
				want = left > 0 ? (uint32_t)left : 0;
		}
		uint32_t before = t->b->n;
		int got = st_reader_next(t->r, t->b, want);
		if (got < 0)
			return st_stage_fail(ctx, got, "%s", st_reader_error(t->r));
		t->rec += t->b->n - before;
		atomic_fetch_add(&s->good, (uint64_t)(t->b->n - before));
		if (s->limited && got > 0) {
			int64_t prev = atomic_fetch_sub(&s->remaining, got);
			if (prev < got)  /* another thread took part of the budget */
				t->b->n -= (uint32_t)(got - (prev > 0 ? prev : 0));
		}
		if (got == 0 && want > 0) {
			close_reader(s, t);
			if (t->b->n > 0 && emit(s, t, out))
				return 1;
			continue;
		}
		if ((t->b->n == s->batch_size ||
		     (s->limited && atomic_load(&s->remaining) <= 0 && t->b->n > 0)) &&
		    emit(s, t, out))
			return 1;
	}
	if (t->b && t->b->n > 0)
		return emit(s, t, out);
	return 0;
}

static void read_thread_stop(void *state, st_stage_ctx_t *ctx)
{
	st_read_stage_t *s = state;
	struct read_thread *t = &s->th[ctx->thread_idx];
	close_reader(s, t);
	st_batch_destroy(t->b);
	t->b = NULL;
}

const st_stage_ops_t st_read_stage_ops = {
	.name = "read",
	.produce = read_produce,
	.thread_stop = read_thread_stop,
};

void st_read_stage_totals(const st_read_stage_t *s, st_read_stats_t *out)
{
	/* atomic_load takes a non-const pointer in older C11 libraries. */
	st_read_stage_t *m = (st_read_stage_t *)s;
	out->rows = atomic_load(&m->rows);
	out->bad = atomic_load(&m->bad);
	out->bytes = atomic_load(&m->bytes);
	out->lists_truncated = atomic_load(&m->lists_truncated);
	out->list_items_empty = atomic_load(&m->list_items_empty);
	out->lists_empty = atomic_load(&m->lists_empty);
	out->missing_keys = atomic_load(&m->missing_keys);
}

int st_read_stage_check_bad(const st_read_stage_t *s, const char *name)
{
	st_read_stage_t *m = (st_read_stage_t *)s;
	const uint64_t bad = atomic_load(&m->bad), good = atomic_load(&m->good);
	if (bad == 0 || s->src.on_bad == ST_BAD_FAIL)
		return ST_OK;
	const double frac = (double)bad / (double)(bad + good);
	const char *path = s->src.n_paths ? s->src.paths[0] : "?";
	const char *more = s->src.n_paths > 1 ? ", ..." : "";
	if (frac > s->src.max_bad_fraction) {
		st_error("the %s data (%s%s): %llu of %llu records (%.1f%%) are bad, more than "
			 "its max_bad_fraction (%g) allows%s; the pass failed. Check that the "
			 "files are %s data (the first bad records are reported above), or raise "
			 "the source's max_bad_fraction", name, path, more,
			 (unsigned long long)bad, (unsigned long long)(bad + good), 100.0 * frac,
			 s->src.max_bad_fraction, good ? "" : " (not one good record)",
			 s->src.format ? s->src.format : "the source's format");
		return ST_EBADREC;
	}
	st_warn("the %s data (%s%s): %llu of %llu records (%.2f%%) were bad and skipped "
		"(on_bad_record = \"skip\"; the pass fails above its max_bad_fraction, %g)", name,
		path, more, (unsigned long long)bad, (unsigned long long)(bad + good),
		100.0 * frac, s->src.max_bad_fraction);
	return ST_OK;
}

void st_read_stage_destroy(st_read_stage_t *s)
{
	if (!s)
		return;
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++) {
		close_reader(s, &s->th[i]);
		st_batch_destroy(s->th[i].b);
	}
	pthread_mutex_destroy(&s->mu);
	src_free(&s->src);
	free(s);
}
