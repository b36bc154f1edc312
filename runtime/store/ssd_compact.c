/*
 * ssd_compact.c — compaction of the SSD tier (hierarchical-gpu-parameter-
 * server.md, Appendix E "File compaction"): when to compact (the hot flag
 * of a file, the trigger), the background compactor thread and
 * st_ssd_compact_now. The file format, the file table and the rules for
 * deleting a merged file are ssd.c's (see "Deleting" there).
 *
 * Stale counts. The store does not know which records are stale, only how
 * many per file: release counts one. When disk bytes exceed compact_ratio x
 * live bytes (and the compact_min_bytes floor), or the files near 3/4 of
 * the budget, a pass takes every file more than 50% stale, reads it whole,
 * and for each record that passes its checksum puts a copy (same key and
 * lsn) into its own output buffer and calls relocate(key, from, to) with no
 * store lock held. A 0 answer means the record was stale; nobody was told
 * about the copy, so its slot is reused for the next record and the output
 * holds live records only (copying the stale ones too would give output
 * files as stale as their sources, merged again and again; reusing a slot
 * needs a buffer only the compactor fills, which also keeps compaction from
 * waiting behind appenders for the write buffers). Full outputs are written
 * like any file, by the compactor; when the last one is on disk the sources
 * are doomed (deleted once durable and unused). A relocated record counts
 * as stale in its source. Merging only > 50% stale files bounds the files
 * at 2x the live bytes (Appendix E) plus headers.
 *
 * Damage. A record failing its check is never copied: compaction copies
 * the rest of its file but keeps the file (never merged again), so the
 * owner's location keeps reporting the damage instead of dangling.
 *
 * Threads. st-ssd-cmpct-0 runs passes while want_compact says so, and
 * ends a pass between two source files when st_ssd_close asks it to stop
 * (a pass can span thousands of files; close waits for one);
 * st_ssd_compact_now runs one in the caller's thread. Passes are serialised
 * by s->compacting (under mu): whoever set it owns the compaction context
 * (cring, cbuf, cout, crd), which nobody else touches.
 *
 * Lock order. Only the store's mu, never with another store lock. It is
 * dropped around relocate (which takes the owner's shard locks) and around
 * all file I/O.
 */
#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/err.h"
#include "runtime/io/uring.h"
#include "runtime/store/ssd_internal.h"
#include "runtime/trace.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- when to compact (under mu) ---- */

/* A file is hot (worth merging) when it is on disk, not being merged, and
 * more than half stale (Appendix E's 50% threshold). Without a relocate
 * callback records cannot move, so only files with nothing live count. */
void st__ssd_update_hot(st_ssd_t *s, struct sfile *f)
{
	int h = f->state == F_DISK && !f->compacting && !f->bad && !f->draining && f->n > 0 &&
		(s->relocate ? 2 * (uint64_t)f->stale > f->n : f->stale == f->n);
	if (h != f->hot) {
		f->hot = h;
		if (h)
			s->hot_files++;
		else
			s->hot_files--;
	}
}

static int want_compact(const st_ssd_t *s)
{
	if (s->sticky || s->hot_files == 0 || s->compacting)
		return 0;
	if (s->budget && (double)s->disk_bytes + (double)s->file_cap > 0.75 * (double)s->budget)
		return 1;
	if (s->disk_bytes <= s->compact_min)
		return 0;
	return (double)s->disk_bytes > s->ratio * (double)s->live_disk * s->record_bytes;
}

void st__ssd_maybe_wake_compactor(st_ssd_t *s)
{
	if (want_compact(s))
		pthread_cond_signal(&s->compact_cv);
}

/* ---- one pass ---- */

/* Sets up the compactor's ring and buffers (first pass, after a failed
 * output write, or when a source is bigger than the read buffer). */
static int compact_ctx_init(st_ssd_t *s, uint64_t need_rd)
{
	if (!s->cring) {
		int rc = st_uring_create(&s->cring, s->qd, s->no_uring);
		if (rc < 0)
			return rc;
	}
	int changed = 0;
	if (!s->cbuf) {
		struct wbuf *b = calloc(1, sizeof *b);
		if (!b)
			return ST_ENOMEM;
		b->mem = aligned_alloc_blk(s->file_cap);
		if (!b->mem) {
			free(b);
			return ST_ENOMEM;
		}
		b->reg = -1;
		s->cbuf = b;
		changed = 1;
	}
	if (!s->crd || need_rd > s->crd_cap) {
		size_t cap = need_rd > s->file_cap ? need_rd : s->file_cap;
		uint8_t *p = aligned_alloc_blk(cap);
		if (!p)
			return ST_ENOMEM;
		free(s->crd);
		s->crd = p;
		s->crd_cap = cap;
		changed = 1;
	}
	if (changed) {
		struct iovec iov[2] = { { s->cbuf->mem, s->file_cap }, { s->crd, s->crd_cap } };
		int ok = st_uring_register(s->cring, iov, 2) == 0;
		s->cbuf->reg = ok ? 0 : -1;
		s->crd_reg = ok ? 1 : -1;
	}
	return 0;
}

void st__ssd_compact_fini(st_ssd_t *s)
{
	st_uring_destroy(s->cring);
	if (s->cbuf) {
		free(s->cbuf->mem);
		free(s->cbuf);
	}
	free(s->crd);
}

/* Writes the compactor's output file. Returns 0 or the (sticky) error. */
static int write_cout(st_ssd_t *s)
{
	pthread_mutex_lock(&s->mu);
	struct sfile *f = s->cout;
	if (f->n == 0) {
		/* Every record offered to it was stale: no file. */
		f->state = F_DOOMED;
		f->unlinked = 1;
		f->buf = NULL;
		s->cout = NULL;
		st__ssd_reap_locked(s);
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	st__ssd_seal_image(s, f);
	pthread_mutex_unlock(&s->mu);
	int rc = st__ssd_write_file(s, s->cring, f);
	pthread_mutex_lock(&s->mu);
	s->cout = NULL;
	if (rc >= 0) {
		st__ssd_file_on_disk(s, f, rc);
		rc = 0;
	} else {
		/* The owner points at these copies now: the buffer stays with
		 * the file, in memory, and the compactor needs a new one. */
		f->own_buf = 1;
		s->cbuf = NULL;
		st__ssd_write_failed(s, f, rc);
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* Reads the records of f (not its header) into s->crd. */
static int read_source(st_ssd_t *s, const struct sfile *f)
{
	st_io_t io = { .fd = f->fd, .op = ST_IO_READ, .off = HDR_BYTES,
		       .len = (uint32_t)(f->length - HDR_BYTES), .buf = s->crd,
		       .buf_index = s->crd_reg };
	return st_uring_submit_wait(s->cring, &io, 1);
}

/* Copies the records of one source that pass their checksum into the
 * output, asking the owner about each (relocate, no lock held). *corrupt
 * counts the records that failed. */
static int copy_source(st_ssd_t *s, struct sfile *f, uint64_t next_lsn, uint32_t *corrupt)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%08u.sst", s->dir, f->seq);
	for (uint32_t i = 0; i < f->n; i++) {
		const uint8_t *rec = s->crd + (uint64_t)i * s->record_bytes;
		uint64_t key = get64(rec);
		if (!rec_ok(s, rec, next_lsn)) {
			/* The owner may still point here; keeping the file
			 * (never merged again) makes its reads report the
			 * damage instead of a missing file. */
			st_error("%s: corrupt record at offset %llu (key %llx); the file is "
				 "kept as it is", path, (unsigned long long)rec_off(s, i),
				 (unsigned long long)key);
			(*corrupt)++;
			continue;
		}
		pthread_mutex_lock(&s->mu);
		if (s->sticky) {
			int rc = s->sticky;
			pthread_mutex_unlock(&s->mu);
			return rc;
		}
		if (!s->cout) {
			s->cout = st__ssd_next_file(s, s->cbuf);
			if (!s->cout) {
				pthread_mutex_unlock(&s->mu);
				return ST_ENOMEM;
			}
		}
		struct sfile *o = s->cout;
		uint32_t j = o->n;
		/* The copy is byte for byte: same key, lsn and checksum. */
		memcpy(o->buf->mem + rec_off(s, j), rec, s->record_bytes);
		o->n++;
		pthread_mutex_unlock(&s->mu);
		int moved = s->relocate(s->arg, key, make_loc(f->seq, i), make_loc(o->seq, j));
		pthread_mutex_lock(&s->mu);
		if (!moved) {
			/* Stale: nobody was told about slot j, so it is reused. */
			assert(o->n == j + 1);
			o->n = j;
		} else {
			/* The source's copy is stale now, which keeps its
			 * counts right should the source stay (corrupt). */
			f->stale++;
			s->live_disk--;
		}
		int full = o->n == s->cap_records;
		pthread_mutex_unlock(&s->mu);
		if (full) {
			int rc = write_cout(s);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* A source that could not be read, or holds damage: never merged again. */
static void set_bad(st_ssd_t *s, struct sfile *f)
{
	pthread_mutex_lock(&s->mu);
	f->bad = 1;
	pthread_mutex_unlock(&s->mu);
}

/* One pass (Appendix E, "File compaction"): merges every hot file. The
 * caller has set s->compacting. Returns files merged away or an error. */
static int compact_pass(st_ssd_t *s)
{
	double t0 = now_s();
	uint64_t tr0 = st_trace_enabled() ? st_trace_now() : 0;
	pthread_mutex_lock(&s->mu);
	size_t nsrc = 0, cap = s->hot_files;
	struct sfile **src = malloc((cap ? cap : 1) * sizeof *src);
	uint8_t *merged = calloc(cap ? cap : 1, 1);
	if (!src || !merged) {
		pthread_mutex_unlock(&s->mu);
		free(src);
		free(merged);
		return ST_ENOMEM;
	}
	uint64_t need_rd = 0;
	for (size_t i = 0; i < s->nfiles && nsrc < cap; i++) {
		struct sfile *f = s->files[i];
		if (!f->hot)
			continue;
		f->compacting = 1;
		f->refs++;
		st__ssd_update_hot(s, f);
		src[nsrc++] = f;
		if (f->length - HDR_BYTES > need_rd)
			need_rd = f->length - HDR_BYTES;
	}
	uint64_t next_lsn = s->next_lsn;
	pthread_mutex_unlock(&s->mu);

	int rc = nsrc ? compact_ctx_init(s, need_rd) : 0;
	for (size_t k = 0; k < nsrc && rc == 0; k++) {
		struct sfile *f = src[k];
		pthread_mutex_lock(&s->mu);
		int dead = f->stale == f->n;
		/* Closing: the pass ends here, between files, as a pass over
		 * the files before this one would (their copies are written
		 * below and they are doomed; the rest stay, hot, for the next
		 * open), so close never waits for a whole pass. */
		const int stop = s->stop_compactor;
		pthread_mutex_unlock(&s->mu);
		if (stop)
			break;
		if (dead) {
			/* Nothing live: no need to read it (Appendix E: the
			 * counter alone tells). */
			merged[k] = 1;
			continue;
		}
		if (!s->relocate)
			continue; /* records cannot move */
		int r = read_source(s, f);
		if (r < 0) {
			st_error("%s/%08u.sst: read for compaction: %s; the file is left as "
				 "it is", s->dir, f->seq, st_strerror(r));
			set_bad(s, f);
			continue;
		}
		uint32_t corrupt = 0;
		rc = copy_source(s, f, next_lsn, &corrupt);
		if (rc == 0 && corrupt == 0)
			merged[k] = 1;
		if (corrupt)
			set_bad(s, f);
	}
	if (rc == 0 && s->cout)
		rc = write_cout(s);

	pthread_mutex_lock(&s->mu);
	/* The sources may go only once their copies are on disk (above), and
	 * only once the records that superseded their other rows are on disk
	 * too: the doom mark (see "Deleting" in ssd.c). After a failure the
	 * sources stay; the copies already taken are the same data. */
	uint64_t mark = s->next_lsn;
	int n_merged = 0;
	for (size_t k = 0; k < nsrc; k++) {
		struct sfile *f = src[k];
		if (rc == 0 && merged[k] && f->stale == f->n) {
			st__ssd_doom(s, f, mark);
			s->compactions++;
			n_merged++;
		} else if (rc == 0 && merged[k]) {
			/* Some record was in nobody's map (relocate said 0)
			 * yet not released: an owner between taking a key
			 * out of its map and releasing it after reading it
			 * (a load). The file stays readable until those
			 * releases arrive; the last one dooms it. */
			f->compacting = 0;
			f->draining = 1;
			st__ssd_update_hot(s, f);
		} else {
			f->compacting = 0;
			st__ssd_update_hot(s, f);
		}
	}
	for (size_t k = 0; k < nsrc; k++)
		st__ssd_unref_locked(s, src[k]);
	st__ssd_reap_locked(s);
	s->compact_seconds += now_s() - t0;
	const uint64_t pass_no = ++s->compact_passes;
	pthread_mutex_unlock(&s->mu);
	/* On the thread that ran it: the compactor's track, or the caller's
	 * for st_ssd_compact_now. A pass with nothing hot is not one. */
	if (tr0 && nsrc)
		st_trace_span("round", "compaction", NULL, tr0, st_trace_now(),
			      (int64_t)pass_no);
	free(src);
	free(merged);
	return rc < 0 ? rc : n_merged;
}

/* ---- the compactor thread and compact_now ---- */

void *st__ssd_compactor_main(void *p)
{
	st_ssd_t *s = p;
	pthread_setname_np(pthread_self(), "st-ssd-cmpct-0");
	pthread_mutex_lock(&s->mu);
	while (!s->stop_compactor) {
		if (!want_compact(s)) {
			pthread_cond_wait(&s->compact_cv, &s->mu);
			continue;
		}
		s->compacting = 1;
		pthread_mutex_unlock(&s->mu);
		int rc = compact_pass(s);
		if (rc < 0)
			st_debug("%s: background compaction: %s", s->dir, st_strerror(rc));
		pthread_mutex_lock(&s->mu);
		s->compacting = 0;
		pthread_cond_broadcast(&s->idle_cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int st_ssd_compact_now(st_ssd_t *s)
{
	pthread_mutex_lock(&s->mu);
	while (s->compacting)
		pthread_cond_wait(&s->idle_cv, &s->mu);
	int rc = s->sticky;
	if (rc == 0)
		s->compacting = 1;
	pthread_mutex_unlock(&s->mu);
	if (rc < 0)
		return rc;
	rc = compact_pass(s);
	pthread_mutex_lock(&s->mu);
	s->compacting = 0;
	pthread_cond_broadcast(&s->idle_cv);
	st__ssd_maybe_wake_compactor(s);
	pthread_mutex_unlock(&s->mu);
	/* Writing the buffered records lets the merged files go now rather
	 * than once the current write buffer fills. */
	int frc = st_ssd_flush(s);
	return rc < 0 ? rc : frc < 0 ? frc : rc;
}
