/*
 * ssd.c — the SSD tier: an append-only log of row records in files, with a
 * stale counter per file and a compactor (hierarchical-gpu-parameter-
 * server.md, Section 6 "SSD-PS" and Appendix E "SSD-PS implementation").
 * This module holds the file format, the file table and the rules for
 * deleting files, the write path (append, flush, release, the writer
 * thread), open, close and stats. The other modules of the tier, sharing
 * ssd_internal.h: ssd_read.c (st_ssd_read), ssd_recover.c (the directory
 * scan at open), ssd_compact.c (the compactor, st_ssd_compact_now).
 *
 * Files (Section 6, "Parameter files"; Appendix E, "Dump parameters").
 * Records are never updated in place: a new version of a row is appended to
 * the current write buffer, and a full buffer becomes a new file written
 * sequentially. "<seq>.sst" (seq printed as %08u; seq is also the file id
 * in a location) is
 *
 *   header, 4096 bytes: magic "STSSDLOG", u32 version, u32 payload_bytes,
 *     u32 record_bytes, u32 n_records, u32 seq, u32 0, u64 XXH3_64bits of
 *     the preceding 32 bytes; zeros to 4096
 *   n_records records of record_bytes each, back to back:
 *     u64 key | u64 lsn | payload | u32 checksum | 0 or 4 zero bytes
 *     (checksum = low 32 bits of XXH3_64bits(key, lsn, payload);
 *     record_bytes = 16 + payload_bytes + 4 rounded up to 8)
 *   zeros up to a multiple of 4096, so O_DIRECT can read and write it whole
 *
 * all little-endian. A buffer is written as "<seq>.tmp" (O_DIRECT unless
 * the filesystem refuses it), fsynced, renamed to "<seq>.sst" and the
 * directory fsynced, so an .sst is complete by construction: a bad record
 * in one is damage on the disk, never a torn write.
 *
 * lsn. A store-wide counter (from 1) orders the versions of a key; a
 * compaction copy keeps its record's lsn, so recovery can keep the highest
 * lsn per key whatever files a crash left behind (a copy and its source
 * both present hold the same data).
 *
 * Threads.
 *   callers       append (copy into the active buffer under mu; seal it when
 *                 full), read, release, flush, compact_now.
 *   st-ssd-writer-0  writes sealed buffers in seal order through its ring
 *                 (registered buffers), then returns the buffer to the pool.
 *   st-ssd-cmpct-0   the background compactor (ssd_compact.c;
 *                 "st-ssd-compact-0" is one byte over the kernel's
 *                 15-character thread-name limit).
 * With a trace recording (runtime/trace.h) the writer records a "write
 * file" span per file (arg file: its seq), the compactor a "compaction"
 * span per pass, and readers (ssd_read.c) the "ssd reads in flight"
 * counter; each thread's track is named after the thread.
 * Appenders block when all N_WBUF buffers are sealed and waiting for the
 * writer (backpressure). Records of a buffer not yet on disk are served
 * from the buffer; a buffer whose write failed is kept in memory for good,
 * so no row that was appended is ever lost.
 *
 * Deleting a file is the delicate step, with two conditions (compaction,
 * in ssd_compact.c, merges files away; the budget below dooms dead ones).
 * (1) Every record of the file was released or relocated: relocate answers
 * 0 also for a record its owner took out of the map but has not released
 * yet (the table's load: out of the map under the shard lock, read without
 * it, then released), and that read must still find the file. Such a
 * merged file waits, "draining", for those releases (st_ssd_release dooms
 * it); with exact releases this is the common case's no-op. (2) Every
 * record appended before its rows went stale is on disk: the record that
 * superseded a stale row may still sit in a write buffer, and deleting the
 * old version first would make a crash recover an even older one. Each
 * doomed file carries a mark (next lsn at the time), and is unlinked once
 * the durable horizon (the lowest lsn still only in memory) passes it; the
 * writer re-checks after every file. Open file descriptors are
 * reference-counted by readers, so an unlinked file's fd closes only when
 * the last reader lets go.
 *
 * Budget. Before writing a file that would take the files over
 * budget_bytes, the writer dooms the files with no live record left and
 * deletes those the durable horizon allows (the synchronous compaction
 * that needs no callback); merged files that become deletable as soon as
 * this very file is on disk count as free, so the files may pass the
 * budget by one file for that moment. A full compaction cannot run in the
 * writer: it calls relocate, which takes the owner's shard locks, while
 * appenders may hold those locks and wait for this writer (ssd.h allows
 * append under the caller's locks): a deadlock. Nor can the writer wait
 * for the compactor, for the same reason. The compactor starts early
 * instead, at 3/4 of the budget. If the file still does not fit, the error
 * is ST_ENOSPC, sticky, and the file's rows stay in memory.
 *
 * The directory lock. Two stores on one directory would append to each
 * other's files and, opening fresh, delete them; st_ssd_open therefore
 * takes an exclusive flock(2) on "LOCK" in the directory before it reads or
 * removes anything, non-blocking (a second store is refused at once, with
 * the holder's pid written in the file, never left waiting on a job that
 * may run for days). flock, not fcntl locks: an flock belongs to the open
 * file, so a second open in the same process conflicts too, and the kernel
 * drops it when the holder dies. A store with remove_on_close unlinks LOCK
 * while holding it; an opener that raced with that unlink may then hold a
 * lock on a file no longer in the directory, so after locking it checks
 * that the name still leads to the file it locked, and tries again if not.
 *
 * Lock order. One store lock, mu, taken alone (never with another store
 * lock; callers may hold their own locks when they call in). Compaction is
 * serialised by the `compacting` flag under mu, reader rings by their
 * `busy` flags. No lock is held while calling relocate or recovered, or
 * during file I/O, except unlinks of merged files and the copies from write
 * buffers.
 */
#include "ssd.h"

#include <assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/err.h"
#include "runtime/io/uring.h"
#include "runtime/store/ssd_internal.h"
#include "runtime/trace.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "the .sst format is little-endian; add byte swaps for this host");

#define MAX_FILE_BYTES (1ull << 30)
#define DEFAULT_FILE_BYTES (4ull << 20)
#define DEFAULT_QD 32u
#define DEFAULT_RATIO 1.5
#define DEFAULT_MIN_COMPACT (64ull << 20)
/* AUTO reads a whole file when the needed 4 KiB blocks are more than this
 * fraction of it. Measured on the development machine (2-vCPU KVM guest,
 * virtio disk, ext4, Linux 6.18): bench_ssd_raw gives 0.9-1.15 GB/s for
 * 1 MiB sequential reads and 47-57k IOPS (190-235 MB/s) for random 4 KiB
 * reads at depth 32, so isolated blocks pay off below about 0.2 of a file;
 * adjacent needed blocks coalesce into larger reads, which moves the break
 * even up. A sweep of st_ssd_read over 16 files of 4 MiB (280-byte
 * records, a random fraction q of each file's records, median of 7 calls,
 * O_DIRECT) gave, BLOCK vs FILE in ms for 64 MiB of files:
 *   blocks needed 0.15: 43 vs 61   0.21: 45-65 vs 44-75   0.27: 52-67 vs 63-83
 *   blocks needed 0.33: 70-73 vs 44-56   0.38: 68-83 vs 61-64   0.47: 70 vs 45-64
 * so the crossover is near 0.3 of the file. (The rule itself is
 * plan_group in ssd_read.c.) */
#define DEFAULT_AUTO_FRAC 0.3

static const char MAGIC[8] = { 'S', 'T', 'S', 'S', 'D', 'L', 'O', 'G' };

/* Opens name in the store directory with O_DIRECT while the filesystem
 * takes it. tmpfs before Linux 6.6 (and some FUSE filesystems) fail
 * O_DIRECT opens with EINVAL; buffered I/O gives the same bytes, only
 * through the page cache, so say it once and go on. */
int st__ssd_open_at(st_ssd_t *s, const char *name, int flags, mode_t mode)
{
	if (__atomic_load_n(&s->direct, __ATOMIC_RELAXED) != 0) {
		int fd = openat(s->dirfd, name, flags | O_DIRECT | O_CLOEXEC, mode);
		if (fd >= 0) {
			__atomic_store_n(&s->direct, 1, __ATOMIC_RELAXED);
			return fd;
		}
		if (errno != EINVAL)
			return -errno;
		if (__atomic_exchange_n(&s->direct, 0, __ATOMIC_RELAXED) != 0)
			st_warn("%s: the filesystem refuses O_DIRECT (EINVAL); using "
				"buffered I/O through the page cache", s->dir);
	}
	int fd = openat(s->dirfd, name, flags | O_CLOEXEC, mode);
	return fd >= 0 ? fd : -errno;
}

/* ---- the file table (under mu) ---- */

struct sfile *st__ssd_find_file(const st_ssd_t *s, uint32_t seq)
{
	size_t lo = 0, hi = s->nfiles;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->files[mid]->seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nfiles && s->files[lo]->seq == seq ? s->files[lo] : NULL;
}

/* seqs are handed out in increasing order, so a new file goes last. */
struct sfile *st__ssd_new_file(st_ssd_t *s, uint32_t seq)
{
	if (s->nfiles == s->files_cap) {
		size_t cap = s->files_cap ? s->files_cap * 2 : 64;
		struct sfile **f = realloc(s->files, cap * sizeof *f);
		if (!f)
			return NULL;
		s->files = f;
		s->files_cap = cap;
	}
	struct sfile *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->seq = seq;
	f->fd = -1;
	assert(s->nfiles == 0 || s->files[s->nfiles - 1]->seq < seq);
	s->files[s->nfiles++] = f;
	return f;
}

struct sfile *st__ssd_next_file(st_ssd_t *s, struct wbuf *b)
{
	struct sfile *f = st__ssd_new_file(s, s->next_seq);
	if (!f)
		return NULL;
	s->next_seq++;
	f->buf = b;
	return f;
}

void st__ssd_count_on_disk(st_ssd_t *s, struct sfile *f)
{
	s->disk_bytes += f->length;
	s->live_disk += f->n - f->stale;
	st__ssd_update_hot(s, f);
}

/* The durable horizon once the `written` oldest sealed buffers are on
 * disk: every record with a lower lsn is on disk (or was only ever a
 * compaction copy of one that is). */
static uint64_t horizon_after(const st_ssd_t *s, unsigned written)
{
	uint64_t h = s->next_lsn;
	if (s->failed_min_lsn < h)
		h = s->failed_min_lsn;
	if (s->qlen > written && s->queue[(s->qhead + written) % N_WBUF]->first_lsn < h)
		h = s->queue[(s->qhead + written) % N_WBUF]->first_lsn;
	if (s->active && s->active->n && s->active->first_lsn < h)
		h = s->active->first_lsn;
	return h;
}

void st__ssd_doom(st_ssd_t *s, struct sfile *f, uint64_t mark)
{
	assert(f->state == F_DISK);
	f->compacting = 0;
	f->state = F_DOOMED;
	st__ssd_update_hot(s, f);
	s->live_disk -= f->n - f->stale;
	f->doom_mark = mark;
}

static void free_file(struct sfile *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->own_buf) {
		free(f->buf->mem);
		free(f->buf);
	}
	free(f);
}

/* Unlinks doomed files the durable horizon has passed and frees those no
 * reader holds. The unlinks run under mu: they happen once per merged file,
 * and doing them here keeps disk_bytes exact for the budget check. */
void st__ssd_reap_locked(st_ssd_t *s)
{
	uint64_t h = horizon_after(s, 0);
	size_t w = 0;
	for (size_t i = 0; i < s->nfiles; i++) {
		struct sfile *f = s->files[i];
		if (f->state == F_DOOMED && !f->unlinked && f->doom_mark <= h) {
			char name[32];
			file_name(name, sizeof name, f->seq, "sst");
			if (unlinkat(s->dirfd, name, 0) < 0 && errno != ENOENT)
				st_warn("%s/%s: unlink of a merged file: %s; it stays on "
					"disk (recovery counts it stale)", s->dir, name,
					strerror(errno));
			f->unlinked = 1;
			s->disk_bytes -= f->length;
		}
		if (f->state == F_DOOMED && f->unlinked && f->refs == 0) {
			free_file(f);
			continue;
		}
		s->files[w++] = f;
	}
	s->nfiles = w;
}

void st__ssd_unref_locked(st_ssd_t *s, struct sfile *f)
{
	assert(f->refs > 0);
	if (--f->refs == 0 && f->state == F_DOOMED && f->unlinked)
		st__ssd_reap_locked(s);
}

/* ---- writing files ---- */

void st__ssd_seal_image(st_ssd_t *s, struct sfile *f)
{
	uint8_t *h = f->buf->mem;
	memset(h, 0, HDR_BYTES);
	memcpy(h, MAGIC, 8);
	put32(h + 8, FORMAT_VERSION);
	put32(h + 12, s->payload_bytes);
	put32(h + 16, s->record_bytes);
	put32(h + 20, f->n);
	put32(h + 24, f->seq);
	put64(h + 32, XXH3_64bits(h, 32));
	uint64_t end = rec_off(s, f->n);
	f->length = round_up(end, BLK);
	memset(h + end, 0, f->length - end);
}

int st__ssd_header_ok(const uint8_t *h, uint32_t seq)
{
	return !memcmp(h, MAGIC, 8) && get32(h + 8) == FORMAT_VERSION &&
	       get64(h + 32) == XXH3_64bits(h, 32) && get32(h + 24) == seq;
}

/* Writes a sealed image as <seq>.tmp, fsyncs, renames it to <seq>.sst and
 * fsyncs the directory (Section 6: whole files, written sequentially, never
 * updated). Returns an fd of the .sst open for reading, or a negative errno
 * with the partial file removed. */
int st__ssd_write_file(st_ssd_t *s, st_uring_t *ring, const struct sfile *f)
{
	char tmp[32], sst[32];
	file_name(tmp, sizeof tmp, f->seq, "tmp");
	file_name(sst, sizeof sst, f->seq, "sst");
	const char *step = "open";
	int renamed = 0;
	int fd = st__ssd_open_at(s, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int rc = fd;
	if (fd < 0)
		goto fail;
	st_io_t io = { .fd = fd, .op = ST_IO_WRITE, .off = 0, .len = (uint32_t)f->length,
		       .buf = f->buf->mem, .buf_index = f->buf->reg };
	step = "write";
	rc = st_uring_submit_wait(ring, &io, 1);
	if (rc == 0) {
		step = "fsync";
		rc = st_uring_fsync(ring, fd);
	}
	close(fd);
	if (rc < 0)
		goto fail;
	step = "rename";
	if (renameat(s->dirfd, tmp, s->dirfd, sst) < 0) {
		rc = -errno;
		goto fail;
	}
	renamed = 1;
	step = "directory fsync";
	rc = st_uring_fsync(ring, s->dirfd);
	if (rc < 0)
		goto fail;
	step = "reopen";
	rc = st__ssd_open_at(s, sst, O_RDONLY, 0);
	if (rc < 0)
		goto fail;
	return rc;
fail:
	st_debug("%s/%s: %s failed: %s", s->dir, tmp, step, st_strerror(rc));
	/* A file whose write failed is served from memory; a copy on disk
	 * that might be incomplete must not be found by recovery. */
	unlinkat(s->dirfd, renamed ? sst : tmp, 0);
	return rc;
}

/* From now on appends fail with rc (the first error stays). Under mu. */
static void set_sticky(st_ssd_t *s, int rc)
{
	if (!s->sticky)
		s->sticky = rc;
	pthread_cond_broadcast(&s->buf_cv);
}

/* A write failed: the file's rows stay in its buffer, and appends fail
 * from now on. Under mu. */
void st__ssd_write_failed(st_ssd_t *s, struct sfile *f, int rc)
{
	if (!s->sticky)
		st_error("%s/%08u.tmp: %s — the SSD tier stops accepting rows; rows "
			 "already stored remain readable", s->dir, f->seq, st_strerror(rc));
	f->state = F_FAILED;
	set_sticky(s, rc);
}

void st__ssd_file_on_disk(st_ssd_t *s, struct sfile *f, int fd)
{
	f->fd = fd;
	f->state = F_DISK;
	f->buf = NULL;
	s->bytes_written += f->length;
	st__ssd_count_on_disk(s, f);
}

/* The budget's callback-free compaction: dooms the files with no live
 * record and unlinks what the durable horizon allows. Returns the bytes of
 * doomed files that writing the queue head will make deletable (their
 * marks are below the horizon as it will be once the head is on disk).
 * Under mu, with the head not yet written. */
static uint64_t reclaim_dead_locked(st_ssd_t *s)
{
	for (size_t i = 0; i < s->nfiles; i++) {
		struct sfile *f = s->files[i];
		if (f->state == F_DISK && !f->compacting && f->n && f->stale == f->n)
			st__ssd_doom(s, f, f->stale_mark);
	}
	st__ssd_reap_locked(s);
	uint64_t h = horizon_after(s, 1);
	uint64_t soon = 0;
	for (size_t i = 0; i < s->nfiles; i++) {
		const struct sfile *f = s->files[i];
		if (f->state == F_DOOMED && !f->unlinked && f->doom_mark <= h)
			soon += f->length;
	}
	return soon;
}

static void *writer_main(void *p)
{
	st_ssd_t *s = p;
	pthread_setname_np(pthread_self(), "st-ssd-writer-0");
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->qlen == 0 && !s->stop_writer)
			pthread_cond_wait(&s->work_cv, &s->mu);
		if (s->qlen == 0)
			break;
		struct sfile *f = s->queue[s->qhead];
		int rc = 0;
		if (s->budget && s->disk_bytes + f->length > s->budget) {
			/* Merged files that this write makes deletable count
			 * as free: the files may pass the budget by this one
			 * file until st__ssd_reap_locked below deletes them. */
			uint64_t soon = reclaim_dead_locked(s);
			if (s->disk_bytes - soon + f->length > s->budget) {
				rc = ST_ENOSPC;
				if (!s->sticky)
					st_error("%s: writing %08u.sst (%llu bytes) would take the "
						 "files to %llu bytes, over the budget of %llu bytes "
						 "— the SSD tier stops accepting rows; rows already "
						 "stored remain readable", s->dir, f->seq,
						 (unsigned long long)f->length,
						 (unsigned long long)(s->disk_bytes - soon + f->length),
						 (unsigned long long)s->budget);
				/* Sticky now, so st__ssd_write_failed below
				 * does not report a write that never ran. */
				set_sticky(s, rc);
			}
		}
		if (rc == 0) {
			pthread_mutex_unlock(&s->mu);
			uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
			rc = st__ssd_write_file(s, s->wring, f);
			if (t0)
				st_trace_span("file", "write file", NULL, t0, st_trace_now(),
					      (int64_t)f->seq);
			pthread_mutex_lock(&s->mu);
		}
		s->qhead = (s->qhead + 1) % N_WBUF;
		s->qlen--;
		if (rc >= 0) {
			struct wbuf *b = f->buf;
			st__ssd_file_on_disk(s, f, rc);
			b->busy = 0;
			pthread_cond_broadcast(&s->buf_cv);
		} else {
			if (f->first_lsn < s->failed_min_lsn)
				s->failed_min_lsn = f->first_lsn;
			st__ssd_write_failed(s, f, rc);
		}
		s->done++;
		pthread_cond_broadcast(&s->done_cv);
		st__ssd_reap_locked(s);
		st__ssd_maybe_wake_compactor(s);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Hands the active buffer to the writer. Under mu. */
static void seal_active(st_ssd_t *s)
{
	struct sfile *f = s->active;
	st__ssd_seal_image(s, f);
	assert(s->qlen < N_WBUF);
	s->queue[(s->qhead + s->qlen) % N_WBUF] = f;
	s->qlen++;
	s->active = NULL;
	s->sealed++;
	pthread_cond_signal(&s->work_cv);
}

/* ---- the public write path ---- */

int st_ssd_append(st_ssd_t *s, uint64_t key, const void *payload, st_ssd_loc_t *loc)
{
	pthread_mutex_lock(&s->mu);
	int rc = ST_OK;
	while (!s->active && !s->sticky) {
		struct wbuf *b = NULL;
		for (int i = 0; i < N_WBUF && !b; i++)
			if (!s->wbufs[i].busy)
				b = &s->wbufs[i];
		if (!b) {
			pthread_cond_wait(&s->buf_cv, &s->mu);
			continue;
		}
		struct sfile *f = st__ssd_next_file(s, b);
		if (!f) {
			rc = ST_ENOMEM;
			goto out;
		}
		b->busy = 1;
		s->active = f;
	}
	if (s->sticky) {
		rc = s->sticky;
		goto out;
	}
	struct sfile *f = s->active;
	uint32_t idx = f->n;
	uint64_t lsn = s->next_lsn++;
	uint8_t *rec = f->buf->mem + rec_off(s, idx);
	put64(rec, key);
	put64(rec + 8, lsn);
	memcpy(rec + REC_HEAD, payload, s->payload_bytes);
	put32(rec + REC_HEAD + s->payload_bytes, rec_sum(rec, s->payload_bytes));
	uint32_t used = REC_HEAD + s->payload_bytes + 4;
	if (used < s->record_bytes)
		memset(rec + used, 0, s->record_bytes - used);
	if (idx == 0)
		f->first_lsn = lsn;
	f->n++;
	s->appended++;
	*loc = make_loc(f->seq, idx);
	if (f->n == s->cap_records)
		seal_active(s);
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int st_ssd_flush(st_ssd_t *s)
{
	pthread_mutex_lock(&s->mu);
	if (s->active && s->active->n > 0)
		seal_active(s);
	uint64_t target = s->sealed;
	while (s->done < target)
		pthread_cond_wait(&s->done_cv, &s->mu);
	st__ssd_reap_locked(s);
	int rc = s->sticky;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void st_ssd_release(st_ssd_t *s, st_ssd_loc_t loc)
{
	if (loc == ST_SSD_NOLOC)
		return;
	pthread_mutex_lock(&s->mu);
	struct sfile *f = st__ssd_find_file(s, (uint32_t)(loc >> 32));
	/* A doomed file's records were all relocated or stale; its counts
	 * no longer matter. */
	if (f && f->state != F_DOOMED) {
		assert((uint32_t)loc < f->n && "st_ssd_release: location past the file's records");
		assert(f->stale < f->n && "st_ssd_release: more releases than records (double release?)");
		if ((uint32_t)loc >= f->n || f->stale >= f->n)
			goto out; /* misuse with asserts off: keep the counts sane */
		f->stale++;
		f->stale_mark = s->next_lsn;
		if (f->state == F_DISK) {
			s->live_disk--;
			if (f->draining && f->stale == f->n) {
				/* The last record of a merged file that was
				 * in nobody's map but still being read. */
				st__ssd_doom(s, f, s->next_lsn);
				s->compactions++;
				st__ssd_reap_locked(s);
			} else {
				st__ssd_update_hot(s, f);
				st__ssd_maybe_wake_compactor(s);
			}
		}
	}
out:
	pthread_mutex_unlock(&s->mu);
}

/* ---- open, close, stats ---- */

#define LOCK_NAME "LOCK"

/* Takes the directory's lock (see "The directory lock" above): *lockfd is
 * the locked LOCK file, holding our pid. ST_OK, ST_EBUSY (held elsewhere,
 * logged with the holder's pid when the file names one) or ST_EIO. */
static int lock_dir(const char *dir, int dirfd, int *lockfd)
{
	*lockfd = -1;
	for (int tries = 0; tries < 16; tries++) {
		int fd = openat(dirfd, LOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0) {
			st_error("%s/%s: cannot create the SSD store's lock file: %s", dir, LOCK_NAME,
				 strerror(errno));
			return ST_EIO;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;
			if (e == EINTR) {
				close(fd);
				continue;
			}
			if (e != EWOULDBLOCK) {
				st_error("%s/%s: cannot lock the SSD store directory: %s", dir,
					 LOCK_NAME, strerror(e));
				close(fd);
				return ST_EIO;
			}
			/* The holder writes its pid right after locking: an
			 * empty file is a holder that has not yet done so. */
			char buf[24] = "";
			ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
			close(fd);
			long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
			if (pid > 0)
				st_error("%s: the SSD store directory is in use by another store "
					 "(process %ld holds %s/%s); one directory serves one "
					 "store at a time, nothing in it was touched", dir, pid, dir,
					 LOCK_NAME);
			else
				st_error("%s: the SSD store directory is in use by another store "
					 "(its %s is locked); one directory serves one store at a "
					 "time, nothing in it was touched", dir, LOCK_NAME);
			return ST_EBUSY;
		}
		struct stat mine, named;
		if (fstat(fd, &mine) == 0 &&
		    fstatat(dirfd, LOCK_NAME, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
		    mine.st_dev == named.st_dev && mine.st_ino == named.st_ino) {
			char buf[24];
			int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
			/* The pid is only for the message above: failing to
			 * write it does not weaken the lock. */
			if (ftruncate(fd, 0) == 0 && pwrite(fd, buf, (size_t)n, 0) != n)
				st_debug("%s/%s: cannot write the pid", dir, LOCK_NAME);
			*lockfd = fd;
			return ST_OK;
		}
		close(fd);   /* a closing store unlinked it under us: again */
	}
	st_error("%s/%s: the lock file keeps disappearing while the SSD store opens "
		 "(another process is removing the directory?)", dir, LOCK_NAME);
	return ST_EBUSY;
}

/* remove_on_close: the store's files, LOCK and the directory, while the lock
 * is still held. Failures only leave files behind: logged, not returned. */
static void remove_store_files(st_ssd_t *s)
{
	/* A fresh open file, not a dup of dirfd: a dup shares the offset that
	 * the scan at open left at the end of the directory. */
	int dfd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		st_warn("%s: cannot list the store directory to remove it: %s", s->dir,
			strerror(errno));
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n > 4 && (!strcmp(e->d_name + n - 4, ".sst") ||
			      !strcmp(e->d_name + n - 4, ".tmp")) &&
		    unlinkat(s->dirfd, e->d_name, 0) < 0 && errno != ENOENT)
			st_warn("%s/%s: cannot remove: %s", s->dir, e->d_name, strerror(errno));
	}
	closedir(d);
	unlinkat(s->dirfd, LOCK_NAME, 0);
	if (rmdir(s->dir) < 0 && errno != ENOENT)
		st_warn("%s: the store directory was not removed: %s", s->dir, strerror(errno));
}

static void destroy(st_ssd_t *s)
{
	for (size_t i = 0; i < s->nfiles; i++)
		free_file(s->files[i]);
	free(s->files);
	for (int i = 0; i < N_WBUF; i++)
		free(s->wbufs[i].mem);
	st__ssd_read_fini(s);
	st__ssd_compact_fini(s);
	st_uring_destroy(s->wring);
	if (s->dirfd >= 0)
		close(s->dirfd);
	pthread_cond_destroy(&s->buf_cv);
	pthread_cond_destroy(&s->work_cv);
	pthread_cond_destroy(&s->done_cv);
	pthread_cond_destroy(&s->compact_cv);
	pthread_cond_destroy(&s->idle_cv);
	pthread_mutex_destroy(&s->mu);
	if (s->lockfd >= 0)
		close(s->lockfd);   /* releases the directory's lock, last */
	free(s->dir);
	free(s);
}

static int bad_opts(const char *what)
{
	st_error("ssd: bad options: %s", what);
	return ST_EINVAL;
}

int st_ssd_open(st_ssd_t **out, const st_ssd_opts_t *o,
		void (*recovered)(void *arg, uint64_t key, st_ssd_loc_t loc), void *arg)
{
	*out = NULL;
	if (!o || !o->dir || !o->dir[0])
		return bad_opts("dir is required");
	if (o->payload_bytes < 4 || o->payload_bytes % 4)
		return bad_opts("payload_bytes must be a multiple of 4, at least 4");
	if (o->file_bytes > MAX_FILE_BYTES)
		return bad_opts("file_bytes is at most 1 GiB");
	if (o->payload_bytes > MAX_FILE_BYTES - HDR_BYTES - 32)
		return bad_opts("payload_bytes does not fit a 1 GiB file");
	if (o->read_mode < ST_SSD_READ_AUTO || o->read_mode > ST_SSD_READ_FILE)
		return bad_opts("read_mode must be ST_SSD_READ_AUTO, _BLOCK or _FILE");
	if (!(o->auto_file_frac >= 0 && o->auto_file_frac <= 1))
		return bad_opts("auto_file_frac must be in [0, 1]");
	if (!(o->compact_ratio == 0 || o->compact_ratio >= 1))
		return bad_opts("compact_ratio must be 0 (default) or >= 1");
	if (!o->fresh && !recovered)
		return bad_opts("fresh = 0 needs a recovered callback");

	if (mkdir(o->dir, 0755) < 0 && errno != EEXIST) {
		st_error("%s: cannot create the SSD store directory: %s", o->dir, strerror(errno));
		return ST_EIO;
	}
	int dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		st_error("%s: %s", o->dir, errno == ENOTDIR ? "not a directory (the SSD store "
			 "needs one of its own)" : strerror(errno));
		return ST_EIO;
	}
	if (faccessat(dirfd, ".", W_OK | X_OK, AT_EACCESS) < 0) {
		st_error("%s: the SSD store directory is not writable: %s", o->dir, strerror(errno));
		close(dirfd);
		return ST_EIO;
	}
	/* Before anything in the directory is read or removed. */
	int lockfd;
	int lrc = lock_dir(o->dir, dirfd, &lockfd);
	if (lrc < 0) {
		close(dirfd);
		return lrc;
	}

	st_ssd_t *s = calloc(1, sizeof *s);
	char *dir = strdup(o->dir);
	if (!s || !dir) {
		free(s);
		free(dir);
		close(lockfd);
		close(dirfd);
		return ST_ENOMEM;
	}
	s->dir = dir;
	s->dirfd = dirfd;
	s->lockfd = lockfd;
	s->remove_on_close = o->remove_on_close;
	s->payload_bytes = o->payload_bytes;
	s->record_bytes = st_ssd_record_bytes(o->payload_bytes);
	uint64_t fb = round_up(o->file_bytes ? o->file_bytes : DEFAULT_FILE_BYTES, BLK);
	if (fb < HDR_BYTES + s->record_bytes)
		fb = round_up(HDR_BYTES + s->record_bytes, BLK);
	s->cap_records = (uint32_t)((fb - HDR_BYTES) / s->record_bytes);
	s->file_cap = round_up(rec_off(s, s->cap_records), BLK);
	s->qd = o->queue_depth ? o->queue_depth : DEFAULT_QD;
	s->budget = o->budget_bytes;
	s->ratio = o->compact_ratio > 0 ? o->compact_ratio : DEFAULT_RATIO;
	s->auto_frac = o->auto_file_frac > 0 ? o->auto_file_frac : DEFAULT_AUTO_FRAC;
	s->read_mode = o->read_mode;
	s->compact_min = o->compact_min_bytes ? o->compact_min_bytes
		: 4 * s->file_cap > DEFAULT_MIN_COMPACT ? 4 * s->file_cap : DEFAULT_MIN_COMPACT;
	const char *env = getenv("STRATA_NO_URING");
	s->no_uring = o->no_uring || (env && !strcmp(env, "1"));
	s->direct = -1;
	s->relocate = o->relocate;
	s->arg = o->arg;
	s->failed_min_lsn = UINT64_MAX;
	s->next_lsn = 1;
	s->next_seq = 1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->buf_cv, NULL);
	pthread_cond_init(&s->work_cv, NULL);
	pthread_cond_init(&s->done_cv, NULL);
	pthread_cond_init(&s->compact_cv, NULL);
	pthread_cond_init(&s->idle_cv, NULL);

	int rc = st_uring_create(&s->wring, s->qd, s->no_uring);
	if (rc < 0) {
		st_error("%s: io_uring_queue_init: %s", s->dir, st_strerror(rc));
		destroy(s);
		return rc == ST_ENOMEM ? rc : ST_EIO;
	}
	struct iovec iov[N_WBUF];
	for (int i = 0; i < N_WBUF; i++) {
		s->wbufs[i].mem = aligned_alloc_blk(s->file_cap);
		if (!s->wbufs[i].mem) {
			destroy(s);
			return ST_ENOMEM;
		}
		iov[i] = (struct iovec){ s->wbufs[i].mem, s->file_cap };
	}
	int reg = st_uring_register(s->wring, iov, N_WBUF) == 0;
	for (int i = 0; i < N_WBUF; i++)
		s->wbufs[i].reg = reg ? i : -1;

	/* No thread runs yet: the owner sees every recovered key before the
	 * compactor can relocate one. */
	rc = st__ssd_recover(s, o->fresh, recovered, arg);
	if (rc < 0) {
		destroy(s);
		return rc;
	}

	if (pthread_create(&s->writer, NULL, writer_main, s) != 0 ||
	    pthread_create(&s->compactor, NULL, st__ssd_compactor_main, s) != 0)
		st_die("ssd: pthread_create failed");
	s->threads = 1;
	*out = s;
	return ST_OK;
}

/* Sets *stop, wakes the thread through cv and waits for it to end. */
void (*st__ssd_close_hook)(void *arg);
void *st__ssd_close_hook_arg;

static void stop_thread(st_ssd_t *s, int *stop, pthread_cond_t *cv, pthread_t t,
			void (*hook)(void *), void *arg)
{
	pthread_mutex_lock(&s->mu);
	*stop = 1;
	pthread_cond_signal(cv);
	pthread_mutex_unlock(&s->mu);
	if (hook)
		hook(arg);
	pthread_join(t, NULL);
}

int st_ssd_close(st_ssd_t *s)
{
	if (!s)
		return ST_OK;
	/* A pass in progress stops after its current source file
	 * (ssd_compact.c): the run's end waits for one file's copy. */
	stop_thread(s, &s->stop_compactor, &s->compact_cv, s->compactor, st__ssd_close_hook,
		    st__ssd_close_hook_arg);
	int rc = st_ssd_flush(s);
	stop_thread(s, &s->stop_writer, &s->work_cv, s->writer, NULL, NULL);
	if (s->remove_on_close)
		remove_store_files(s);
	destroy(s);
	return rc;
}

void st_ssd_stats(st_ssd_t *s, st_ssd_stats_t *out)
{
	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->nfiles; i++) {
		const struct sfile *f = s->files[i];
		if (f->state == F_DOOMED)
			continue;
		out->files++;
		if (f->state != F_DISK)
			out->pending_files++;
		if (f->draining)
			out->draining_files++;
		out->live_records += f->n - f->stale;
		out->stale_records += f->stale;
	}
	out->disk_bytes = s->disk_bytes;
	out->appended = s->appended;
	out->bytes_written = s->bytes_written;
	out->read_records = s->read_records;
	out->bytes_read = s->bytes_read;
	out->buffer_hits = s->buffer_hits;
	out->compactions = s->compactions;
	out->compact_seconds = s->compact_seconds;
	out->record_bytes = s->record_bytes;
	out->uring = st_uring_is_uring(s->wring);
	out->direct = __atomic_load_n(&s->direct, __ATOMIC_RELAXED) != 0;
	out->read_ios = s->read_ios;
	pthread_mutex_unlock(&s->mu);
}

const char *st_ssd_dir(const st_ssd_t *s)
{
	return s->dir;
}

uint32_t st_ssd_record_bytes(uint32_t payload_bytes)
{
	return (uint32_t)round_up(REC_HEAD + (uint64_t)payload_bytes + 4, 8);
}
