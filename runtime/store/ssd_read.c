/*
 * ssd_read.c — the SSD tier's read path, st_ssd_read (hierarchical-gpu-
 * parameter-server.md, Appendix E "Load parameters"), and the choice
 * between reading blocks and reading whole files.
 *
 * A call sorts its locations by (file, index). Records in buffers (files
 * not on disk yet, or whose write failed) are copied under mu; for files on
 * disk the needed byte ranges are read through a reader ring (a pool of up
 * to MAX_RCTX, each with a registered staging buffer of two files), the
 * spans of a call going out in batches as large as the staging buffer,
 * queue_depth at a time: BLOCK reads the 4 KiB blocks covering the records
 * (adjacent or overlapping blocks coalesced), FILE reads the whole file,
 * AUTO reads the whole file when the blocks needed are more than
 * auto_file_frac of it (the default, 0.3, and its measurement are with
 * DEFAULT_AUTO_FRAC in ssd.c). Every record read from disk is checked (key,
 * lsn below the next lsn, checksum) before its payload is copied out; one
 * that fails is reported (ST_ECORRUPT, file and offset) and never returned.
 *
 * Threads. Runs in the callers' threads, any number at once; at most
 * MAX_RCTX of them do disk I/O at a time (the others wait on idle_cv for a
 * ring). A reader ring belongs to the call that set its `busy` flag.
 *
 * Invariants. A file a call reads from disk holds a reference (refs) from
 * the planning under mu to the end of the call, so its fd stays open even
 * if compaction dooms and unlinks it meanwhile (ssd.c frees it at the last
 * unref).
 *
 * Lock order. Only the store's mu, never with another store lock; it is
 * not held during the disk reads.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"
#include "runtime/io/uring.h"
#include "runtime/store/ssd_internal.h"
#include "runtime/trace.h"

struct rq {
	st_ssd_loc_t loc;
	uint32_t i;  /* index into the caller's arrays */
};

static int cmp_rq(const void *a, const void *b)
{
	const struct rq *x = a, *y = b;
	if (x->loc != y->loc)
		return x->loc < y->loc ? -1 : 1;
	return (x->i > y->i) - (x->i < y->i);
}

struct span {
	struct sfile *f;
	uint64_t off;      /* file offset, 4 KiB aligned */
	uint32_t len;
	uint32_t r0, r1;   /* requests [r0, r1) in sorted order */
	uint8_t *buf;
	int own;           /* buf allocated for this span alone */
};

struct group {
	struct sfile *f;
	uint32_t r0, r1;
};

/* What one st_ssd_read call carries around. */
struct rcall {
	st_ssd_t *s;
	const uint64_t *keys;
	void *const *dst;
	struct rq *rq;
	uint64_t next_lsn;
	uint64_t records, bytes, ios;
	int rc;
};

static void note(struct rcall *c, int rc)
{
	if (c->rc == 0)
		c->rc = rc;
}

/* Takes a free reader ring, creating its ring and staging buffer on first
 * use. Under mu (dropped while creating). NULL with *err on failure. */
static struct rctx *rctx_get(st_ssd_t *s, int *err)
{
	struct rctx *c;
	for (;;) {
		c = NULL;
		for (int i = 0; i < MAX_RCTX && !c; i++)
			if (!s->rctx[i].busy && s->rctx[i].ring)
				c = &s->rctx[i];
		for (int i = 0; i < MAX_RCTX && !c; i++)
			if (!s->rctx[i].busy)
				c = &s->rctx[i];
		if (c)
			break;
		pthread_cond_wait(&s->idle_cv, &s->mu);
	}
	c->busy = 1;
	if (c->ring)
		return c;
	pthread_mutex_unlock(&s->mu);
	/* Staging for two whole files per batch: FILE mode keeps two large
	 * reads in flight, BLOCK mode up to 2 x file_cap / 4 KiB spans. */
	size_t cap = 2 * s->file_cap > (2u << 20) ? 2 * s->file_cap : (2u << 20);
	st_uring_t *ring;
	uint8_t *stage = NULL;
	int rc = st_uring_create(&ring, s->qd, s->no_uring);
	if (rc == 0) {
		stage = aligned_alloc_blk(cap);
		if (!stage) {
			rc = ST_ENOMEM;
			st_uring_destroy(ring);
		} else {
			struct iovec iov = { stage, cap };
			st_uring_register(ring, &iov, 1);
		}
	}
	pthread_mutex_lock(&s->mu);
	if (rc < 0) {
		c->busy = 0;
		pthread_cond_broadcast(&s->idle_cv);
		*err = rc;
		return NULL;
	}
	c->ring = ring;
	c->stage = stage;
	c->cap = cap;
	return c;
}

void st__ssd_read_fini(st_ssd_t *s)
{
	for (int i = 0; i < MAX_RCTX; i++) {
		st_uring_destroy(s->rctx[i].ring);
		free(s->rctx[i].stage);
	}
}

/* Copies the requests of a span out of its buffer, checking each record. */
static void deliver_span(struct rcall *c, const struct span *sp)
{
	st_ssd_t *s = c->s;
	for (uint32_t r = sp->r0; r < sp->r1; r++) {
		uint32_t idx = (uint32_t)c->rq[r].loc;
		uint32_t i = c->rq[r].i;
		if (idx >= sp->f->n)
			continue; /* reported when planned */
		uint64_t off = rec_off(s, idx);
		const uint8_t *rec = sp->buf + (off - sp->off);
		if (get64(rec) != c->keys[i] || !rec_ok(s, rec, c->next_lsn)) {
			st_error("%s/%08u.sst: corrupt record at offset %llu (key %llx)", s->dir,
				 sp->f->seq, (unsigned long long)off,
				 (unsigned long long)c->keys[i]);
			note(c, ST_ECORRUPT);
			continue;
		}
		memcpy(c->dst[i], rec + REC_HEAD, s->payload_bytes);
		c->records++;
	}
}

static void run_batch(struct rcall *c, struct rctx *x, struct span *sp, size_t n, st_io_t *ios)
{
	st_ssd_t *s = c->s;
	size_t m = 0;
	for (size_t k = 0; k < n; k++) {
		if (!sp[k].buf)
			continue;
		ios[m++] = (st_io_t){ .fd = sp[k].f->fd, .op = ST_IO_READ, .off = sp[k].off,
				      .len = sp[k].len, .buf = sp[k].buf,
				      .buf_index = sp[k].own ? -1 : 0 };
	}
	/* The count of reads in flight goes up at the submit and down at the
	 * completion, so the counter's track falls back to 0 between reads;
	 * MAX_RCTX callers can be reading at once. */
	const int tr = m && st_trace_enabled();
	if (tr)
		st_trace_counter("ssd reads in flight", (double)__atomic_add_fetch(
			&s->reads_in_flight, (int64_t)m, __ATOMIC_RELAXED));
	st_uring_submit_wait(x->ring, ios, (unsigned)m);
	if (tr)
		st_trace_counter("ssd reads in flight", (double)__atomic_sub_fetch(
			&s->reads_in_flight, (int64_t)m, __ATOMIC_RELAXED));
	c->ios += m;
	m = 0;
	for (size_t k = 0; k < n; k++) {
		if (!sp[k].buf) {
			note(c, ST_ENOMEM);
			continue;
		}
		const st_io_t *io = &ios[m++];
		if (io->res != (int)io->len) {
			int rc = io->res < 0 ? io->res : ST_EIO;
			st_error("%s/%08u.sst: read of %u bytes at offset %llu: %s", s->dir,
				 sp[k].f->seq, sp[k].len, (unsigned long long)sp[k].off,
				 io->res < 0 ? st_strerror(rc) : "end of file");
			note(c, rc);
			continue;
		}
		c->bytes += sp[k].len;
		deliver_span(c, &sp[k]);
	}
	for (size_t k = 0; k < n; k++)
		if (sp[k].own) {
			free(sp[k].buf);
			sp[k].buf = NULL;
			sp[k].own = 0;
		}
}

/* Plans the spans of one file: blocks covering the records, or the whole
 * file (the read mode's choice). Appends to *sp (which has room for
 * r1 - r0 + 1 more). */
static size_t plan_group(struct rcall *c, const struct group *g, struct span *sp)
{
	st_ssd_t *s = c->s;
	const struct sfile *f = g->f;
	size_t n = 0;
	uint64_t need = 0;
	uint32_t last_valid = g->r0;
	for (uint32_t r = g->r0; r < g->r1; r++) {
		uint32_t idx = (uint32_t)c->rq[r].loc;
		if (idx >= f->n) {
			st_error("%s/%08u.sst: corrupt record at offset %llu (key %llx): the "
				 "file has %u records", s->dir, f->seq,
				 (unsigned long long)rec_off(s, idx),
				 (unsigned long long)c->keys[c->rq[r].i], f->n);
			note(c, ST_ECORRUPT);
			continue;
		}
		uint64_t a = rec_off(s, idx);
		uint64_t b0 = a / BLK * BLK, b1 = round_up(a + s->record_bytes, BLK);
		if (n > 0 && b0 <= sp[n - 1].off + sp[n - 1].len) {
			uint64_t end = sp[n - 1].off + sp[n - 1].len;
			if (b1 > end) {
				need += b1 - end;
				sp[n - 1].len = (uint32_t)(b1 - sp[n - 1].off);
			}
			sp[n - 1].r1 = r + 1;
		} else {
			sp[n++] = (struct span){ .f = g->f, .off = b0, .len = (uint32_t)(b1 - b0),
						 .r0 = r, .r1 = r + 1 };
			need += b1 - b0;
		}
		last_valid = r + 1;
	}
	if (n == 0)
		return 0;
	uint64_t data = f->length - HDR_BYTES;
	int whole = s->read_mode == ST_SSD_READ_FILE ||
		    (s->read_mode == ST_SSD_READ_AUTO && (double)need > s->auto_frac * (double)data);
	if (whole && n > 1) {
		sp[0] = (struct span){ .f = g->f, .off = HDR_BYTES, .len = (uint32_t)data,
				       .r0 = g->r0, .r1 = last_valid };
		n = 1;
	} else if (whole) {
		sp[0].off = HDR_BYTES;
		sp[0].len = (uint32_t)data;
	}
	return n;
}

int st_ssd_read(st_ssd_t *s, uint32_t n, const uint64_t *keys, const st_ssd_loc_t *locs,
		void *const *dst)
{
	if (n == 0)
		return ST_OK;
	struct rcall c = { .s = s, .keys = keys, .dst = dst };
	c.rq = malloc(n * sizeof *c.rq);
	struct group *g = malloc(n * sizeof *g);
	if (!c.rq || !g) {
		free(c.rq);
		free(g);
		return ST_ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		c.rq[i] = (struct rq){ locs[i], i };
	qsort(c.rq, n, sizeof *c.rq, cmp_rq);

	uint64_t hits = 0;
	size_t ng = 0;
	pthread_mutex_lock(&s->mu);
	c.next_lsn = s->next_lsn;
	for (uint32_t r = 0; r < n;) {
		uint32_t seq = (uint32_t)(c.rq[r].loc >> 32), r1 = r;
		while (r1 < n && (uint32_t)(c.rq[r1].loc >> 32) == seq)
			r1++;
		struct sfile *f = c.rq[r].loc == ST_SSD_NOLOC ? NULL : st__ssd_find_file(s, seq);
		if (!f) {
			for (; r < r1; r++)
				st_error("%s/%08u.sst: record %u of key %llx asked for, but the "
					 "file is not in the store (a released or relocated "
					 "location?)", s->dir, seq, (uint32_t)c.rq[r].loc,
					 (unsigned long long)keys[c.rq[r].i]);
			note(&c, ST_ENOENT);
			continue;
		}
		if (f->buf) {
			/* Not on disk yet (or never will be): from the buffer. */
			for (; r < r1; r++) {
				uint32_t idx = (uint32_t)c.rq[r].loc, i = c.rq[r].i;
				const uint8_t *rec = f->buf->mem + rec_off(s, idx);
				if (idx >= f->n || get64(rec) != keys[i]) {
					st_error("%s/%08u.sst (in memory): record %u does not hold "
						 "key %llx (a wrong location?)", s->dir, seq, idx,
						 (unsigned long long)keys[i]);
					note(&c, ST_ECORRUPT);
					continue;
				}
				memcpy(dst[i], rec + REC_HEAD, s->payload_bytes);
				hits++;
			}
			continue;
		}
		f->refs++;
		g[ng++] = (struct group){ f, r, r1 };
		r = r1;
	}
	struct rctx *x = NULL;
	if (ng) {
		int err = 0;
		x = rctx_get(s, &err);
		if (!x)
			note(&c, err);
	}
	pthread_mutex_unlock(&s->mu);

	if (x) {
		/* At most one span per request, plus one per group for the
		 * whole-file rewrite. */
		struct span *sp = malloc((n + ng) * sizeof *sp);
		st_io_t *ios = malloc((n + ng) * sizeof *ios);
		size_t nsp = 0;
		if (!sp || !ios) {
			note(&c, ST_ENOMEM);
		} else {
			for (size_t k = 0; k < ng; k++)
				nsp += plan_group(&c, &g[k], sp + nsp);
			/* Batches fill the registered staging buffer; a span
			 * larger than it goes alone in its own buffer. */
			for (size_t k = 0; k < nsp;) {
				size_t k0 = k, used = 0;
				while (k < nsp) {
					if (sp[k].len > x->cap) {
						if (k == k0) {
							sp[k].buf = aligned_alloc_blk(sp[k].len);
							sp[k].own = sp[k].buf != NULL;
							k++;
						}
						break;
					}
					if (used + sp[k].len > x->cap)
						break;
					sp[k].buf = x->stage + used;
					used += sp[k].len;
					k++;
				}
				run_batch(&c, x, sp + k0, k - k0, ios);
			}
		}
		free(sp);
		free(ios);
	}

	pthread_mutex_lock(&s->mu);
	for (size_t k = 0; k < ng; k++)
		st__ssd_unref_locked(s, g[k].f);
	if (x) {
		x->busy = 0;
		pthread_cond_broadcast(&s->idle_cv);
	}
	s->buffer_hits += hits;
	s->read_records += hits + c.records;
	s->bytes_read += c.bytes;
	s->read_ios += c.ios;
	pthread_mutex_unlock(&s->mu);
	free(c.rq);
	free(g);
	return c.rc;
}
