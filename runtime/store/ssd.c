/*
 * ssd.c — the SSD tier: an append-only log of row records in files, with a
 * stale counter per file and a compactor (hierarchical-gpu-parameter-
 * server.md, Section 6 "SSD-PS" and Appendix E "SSD-PS implementation").
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
 *   st-ssd-cmpct-0   the background compactor ("st-ssd-compact-0" is one
 *                 byte over the kernel's 15-character thread-name limit).
 * Appenders block when all N_WBUF buffers are sealed and waiting for the
 * writer (backpressure). Records of a buffer not yet on disk are served
 * from the buffer; a buffer whose write failed is kept in memory for good,
 * so no row that was appended is ever lost.
 *
 * Stale counts and compaction (Appendix E, "File compaction"). The store
 * does not know which records are stale, only how many per file: release
 * counts one. When disk bytes exceed compact_ratio x live bytes (and the
 * compact_min_bytes floor), the compactor takes every file more than 50%
 * stale, reads it whole, and for each record that passes its checksum puts
 * a copy (same key and lsn) into its own output buffer and calls
 * relocate(key, from, to) with no store lock held. A 0 answer means the
 * record was stale; nobody was told about the copy, so its slot is reused
 * for the next record and the output holds live records only (copying the
 * stale ones too would give output files as stale as their sources, merged
 * again and again; reusing a slot needs a buffer only the compactor fills,
 * which also keeps compaction from waiting behind appenders for the write
 * buffers). Full outputs are written like any file, by the compactor; when
 * the last one is on disk the sources are deleted. A relocated record
 * counts as stale in its source. Merging only > 50% stale files
 * bounds the files at 2x the live bytes (Appendix E) plus headers.
 *
 * Deleting is the delicate step, with two conditions. (1) Every record
 * of the file was released or relocated: relocate answers 0 also for a
 * record its owner took out of the map but has not released yet (the
 * table's load: out of the map under the shard lock, read without it, then
 * released), and that read must still find the file. Such a merged file
 * waits, "draining", for those releases (st_ssd_release dooms it); with
 * exact releases this is the common case's no-op. (2) Every record
 * appended before its rows went stale is on disk: the record that
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
 * Damage. A record failing its check is never returned: reads report it
 * (ST_ECORRUPT, file and offset), recovery skips it, and compaction copies
 * the rest of its file but keeps the file (never merged again), so the
 * owner's location keeps reporting the damage instead of dangling.
 *
 * Reads. A call sorts its locations by (file, index). Records in buffers are
 * copied under mu; for files on disk the needed byte ranges are read through
 * a reader ring (a pool of up to MAX_RCTX, each with a registered staging
 * buffer of two files), the spans of a call going out in batches as large
 * as the staging buffer, queue_depth at a time: BLOCK reads the 4 KiB
 * blocks covering the records (adjacent or overlapping blocks coalesced),
 * FILE reads the whole file (Appendix E, "Load parameters"), AUTO reads
 * the whole file when the blocks needed are more than auto_file_frac of it.
 * Every record read from disk is checked (key, lsn below the next lsn,
 * checksum) before its payload is copied out.
 *
 * Lock order. One store lock, mu; compaction is serialised by the
 * `compacting` flag under mu, reader rings by their `busy` flags. No lock is
 * held while calling relocate or recovered, or during file I/O, except
 * unlinks of merged files and the copies from write buffers.
 */
#include "ssd.h"

#include <assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/err.h"
#include "runtime/io/uring.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "the .sst format is little-endian; add byte swaps for this host");

#define BLK 4096u
#define HDR_BYTES 4096u
#define REC_HEAD 16u       /* key + lsn */
#define N_WBUF 4           /* write buffers: one filling, three in flight */
#define MAX_RCTX 4         /* concurrent st_ssd_read calls doing disk I/O */
#define FORMAT_VERSION 1u
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
 * so the crossover is near 0.3 of the file. */
#define DEFAULT_AUTO_FRAC 0.3

static const char MAGIC[8] = { 'S', 'T', 'S', 'S', 'D', 'L', 'O', 'G' };

enum fstate {
	F_MEM = 0,  /* in a write buffer (active, sealed, or being written) */
	F_DISK,     /* on disk, fd open */
	F_FAILED,   /* its write failed: served from its buffer for good */
	F_DOOMED,   /* merged away: unlink when durable, free when unused */
};

struct wbuf {
	uint8_t *mem;   /* file image: header + records + padding */
	int reg;        /* registered index in the owning ring */
	int busy;
};

struct sfile {
	uint32_t seq;
	int state;
	int hot;           /* counted in s->hot_files */
	int compacting;    /* taken by a compaction pass */
	int bad;           /* could not be read for compaction: leave it */
	int draining;      /* merged; waits for releases of its last records */
	int unlinked;
	int fd;
	int refs;          /* readers and compaction using fd */
	uint32_t n;        /* records */
	uint32_t stale;
	uint64_t length;   /* file bytes (set when sealed) */
	uint64_t first_lsn;  /* writer files: lsn of record 0 */
	uint64_t stale_mark; /* next_lsn at the latest release */
	uint64_t doom_mark;  /* next_lsn when merged away */
	struct wbuf *buf;  /* F_MEM, F_FAILED */
	int own_buf;       /* buf is a failed compaction output's: free it */
};

struct rctx {
	st_uring_t *ring;
	uint8_t *stage;
	size_t cap;
	int busy;
};

struct st_ssd {
	char *dir;
	int dirfd;
	uint32_t payload_bytes, record_bytes, cap_records;
	uint64_t file_cap;      /* bytes of a full file */
	unsigned qd;
	uint64_t budget;
	double ratio, auto_frac;
	uint64_t compact_min;
	int read_mode;
	int no_uring;
	int direct;             /* -1 not yet known, 1 O_DIRECT, 0 buffered */
	int (*relocate)(void *, uint64_t, st_ssd_loc_t, st_ssd_loc_t);
	void *arg;

	pthread_mutex_t mu;
	pthread_cond_t buf_cv;     /* a write buffer came free, or sticky */
	pthread_cond_t work_cv;    /* writer: a buffer was sealed, or stop */
	pthread_cond_t done_cv;    /* writer finished a buffer */
	pthread_cond_t compact_cv; /* compactor: maybe work, or stop */
	pthread_cond_t idle_cv;    /* compaction pass ended; a reader ring freed */

	/* Everything below is under mu. */
	struct sfile **files;      /* sorted by seq */
	size_t nfiles, files_cap;
	struct wbuf wbufs[N_WBUF];
	struct sfile *active;
	struct sfile *queue[N_WBUF]; /* sealed, oldest first */
	unsigned qhead, qlen;
	uint64_t sealed, done;     /* buffers sealed / finished by the writer */
	uint64_t failed_min_lsn;   /* lowest first_lsn of a failed writer file */
	uint32_t next_seq;
	uint64_t next_lsn;
	int sticky;
	int stop_writer, stop_compactor, compacting;
	uint64_t disk_bytes, live_disk, hot_files;
	uint64_t appended, bytes_written, read_records, bytes_read, buffer_hits;
	uint64_t compactions, read_ios;
	double compact_seconds;

	st_uring_t *wring;         /* writer thread (recovery before it) */
	/* Compaction context: used by whoever set `compacting`. */
	st_uring_t *cring;
	struct wbuf *cbuf;         /* output file image */
	struct sfile *cout;        /* the output file being filled */
	uint8_t *crd;              /* source file image (records only) */
	size_t crd_cap;
	int crd_reg;               /* registered index of crd, or -1 */
	struct rctx rctx[MAX_RCTX];

	pthread_t writer, compactor;
	int threads;
};

/* ---- small helpers ---- */

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void file_name(char *out, size_t n, uint32_t seq, const char *ext)
{
	snprintf(out, n, "%08u.%s", seq, ext);
}

static st_ssd_loc_t make_loc(uint32_t seq, uint32_t idx)
{
	return (uint64_t)seq << 32 | idx;
}

static uint32_t rec_sum(const uint8_t *rec, uint32_t payload_bytes)
{
	return (uint32_t)XXH3_64bits(rec, REC_HEAD + payload_bytes);
}

/* A record passes when its checksum matches and its lsn is one the store
 * could have given (1 .. next_lsn-1). */
static int rec_ok(const st_ssd_t *s, const uint8_t *rec, uint64_t next_lsn)
{
	uint64_t lsn = get64(rec + 8);
	if (lsn == 0 || (next_lsn && lsn >= next_lsn))
		return 0;
	return get32(rec + REC_HEAD + s->payload_bytes) == rec_sum(rec, s->payload_bytes);
}

static void *aligned_alloc_blk(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, BLK, n ? n : BLK) != 0)
		return NULL;
	return p;
}

/* Opens name in the store directory with O_DIRECT while the filesystem
 * takes it. tmpfs before Linux 6.6 (and some FUSE filesystems) fail
 * O_DIRECT opens with EINVAL; buffered I/O gives the same bytes, only
 * through the page cache, so say it once and go on. */
static int open_at(st_ssd_t *s, const char *name, int flags, mode_t mode)
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

static struct sfile *find_file(const st_ssd_t *s, uint32_t seq)
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
static struct sfile *new_file(st_ssd_t *s, uint32_t seq)
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

/* A file is hot (worth merging) when it is on disk, not being merged, and
 * more than half stale (Appendix E's 50% threshold). Without a relocate
 * callback records cannot move, so only files with nothing live count. */
static void update_hot(st_ssd_t *s, struct sfile *f)
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

static void maybe_wake_compactor(st_ssd_t *s)
{
	if (want_compact(s))
		pthread_cond_signal(&s->compact_cv);
}

/* The durable horizon: every record with a lower lsn is on disk (or was
 * only ever a compaction copy of one that is). */
static uint64_t horizon(const st_ssd_t *s)
{
	uint64_t h = s->next_lsn;
	if (s->failed_min_lsn < h)
		h = s->failed_min_lsn;
	if (s->qlen && s->queue[s->qhead]->first_lsn < h)
		h = s->queue[s->qhead]->first_lsn;
	if (s->active && s->active->n && s->active->first_lsn < h)
		h = s->active->first_lsn;
	return h;
}

/* Marks a merged (or fully stale) file for deletion; reap unlinks it. */
static void doom(st_ssd_t *s, struct sfile *f, uint64_t mark)
{
	assert(f->state == F_DISK);
	f->compacting = 0;
	f->state = F_DOOMED;
	update_hot(s, f);
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
static void reap_locked(st_ssd_t *s)
{
	uint64_t h = horizon(s);
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

static void unref_locked(st_ssd_t *s, struct sfile *f)
{
	assert(f->refs > 0);
	if (--f->refs == 0 && f->state == F_DOOMED && f->unlinked)
		reap_locked(s);
}

/* ---- writing files ---- */

static void seal_image(st_ssd_t *s, struct sfile *f)
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
	uint64_t end = HDR_BYTES + (uint64_t)f->n * s->record_bytes;
	f->length = round_up(end, BLK);
	memset(h + end, 0, f->length - end);
}

/* Writes a sealed image as <seq>.tmp, fsyncs, renames it to <seq>.sst and
 * fsyncs the directory (Section 6: whole files, written sequentially, never
 * updated). Returns an fd of the .sst open for reading, or a negative errno
 * with the partial file removed. */
static int write_file(st_ssd_t *s, st_uring_t *ring, const struct sfile *f)
{
	char tmp[32], sst[32];
	file_name(tmp, sizeof tmp, f->seq, "tmp");
	file_name(sst, sizeof sst, f->seq, "sst");
	const char *step = "open";
	int renamed = 0;
	int fd = open_at(s, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
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
	rc = open_at(s, sst, O_RDONLY, 0);
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

/* A write failed: from now on appends fail, and the file's rows stay in
 * its buffer. Called with mu held. */
static void set_sticky(st_ssd_t *s, int rc)
{
	if (!s->sticky)
		s->sticky = rc;
	pthread_cond_broadcast(&s->buf_cv);
}

static void file_on_disk(st_ssd_t *s, struct sfile *f, int fd)
{
	f->fd = fd;
	f->state = F_DISK;
	f->buf = NULL;
	s->disk_bytes += f->length;
	s->bytes_written += f->length;
	s->live_disk += f->n - f->stale;
	update_hot(s, f);
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
			doom(s, f, f->stale_mark);
	}
	reap_locked(s);
	uint64_t h = s->next_lsn;
	if (s->failed_min_lsn < h)
		h = s->failed_min_lsn;
	if (s->qlen > 1 && s->queue[(s->qhead + 1) % N_WBUF]->first_lsn < h)
		h = s->queue[(s->qhead + 1) % N_WBUF]->first_lsn;
	if (s->active && s->active->n && s->active->first_lsn < h)
		h = s->active->first_lsn;
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
			 * file until reap_locked below deletes them. */
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
			}
		}
		if (rc == 0) {
			pthread_mutex_unlock(&s->mu);
			rc = write_file(s, s->wring, f);
			pthread_mutex_lock(&s->mu);
			if (rc < 0 && !s->sticky)
				st_error("%s/%08u.tmp: %s — the SSD tier stops accepting rows; "
					 "rows already stored remain readable", s->dir, f->seq,
					 st_strerror(rc));
		}
		s->qhead = (s->qhead + 1) % N_WBUF;
		s->qlen--;
		if (rc >= 0) {
			struct wbuf *b = f->buf;
			file_on_disk(s, f, rc);
			b->busy = 0;
			pthread_cond_broadcast(&s->buf_cv);
		} else {
			f->state = F_FAILED;
			if (f->first_lsn < s->failed_min_lsn)
				s->failed_min_lsn = f->first_lsn;
			set_sticky(s, rc);
		}
		s->done++;
		pthread_cond_broadcast(&s->done_cv);
		reap_locked(s);
		maybe_wake_compactor(s);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Hands the active buffer to the writer. Under mu. */
static void seal_active(st_ssd_t *s)
{
	struct sfile *f = s->active;
	seal_image(s, f);
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
		struct sfile *f = new_file(s, s->next_seq);
		if (!f) {
			rc = ST_ENOMEM;
			goto out;
		}
		s->next_seq++;
		b->busy = 1;
		f->buf = b;
		s->active = f;
	}
	if (s->sticky) {
		rc = s->sticky;
		goto out;
	}
	struct sfile *f = s->active;
	uint32_t idx = f->n;
	uint64_t lsn = s->next_lsn++;
	uint8_t *rec = f->buf->mem + HDR_BYTES + (uint64_t)idx * s->record_bytes;
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
	reap_locked(s);
	int rc = s->sticky;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void st_ssd_release(st_ssd_t *s, st_ssd_loc_t loc)
{
	if (loc == ST_SSD_NOLOC)
		return;
	pthread_mutex_lock(&s->mu);
	struct sfile *f = find_file(s, (uint32_t)(loc >> 32));
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
				doom(s, f, s->next_lsn);
				s->compactions++;
				reap_locked(s);
			} else {
				update_hot(s, f);
				maybe_wake_compactor(s);
			}
		}
	}
out:
	pthread_mutex_unlock(&s->mu);
}

/* ---- compaction ---- */

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
		reap_locked(s);
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	seal_image(s, f);
	pthread_mutex_unlock(&s->mu);
	int rc = write_file(s, s->cring, f);
	pthread_mutex_lock(&s->mu);
	s->cout = NULL;
	if (rc >= 0) {
		file_on_disk(s, f, rc);
		rc = 0;
	} else {
		if (!s->sticky)
			st_error("%s/%08u.tmp: %s — the SSD tier stops accepting rows; rows "
				 "already stored remain readable", s->dir, f->seq, st_strerror(rc));
		/* The owner points at these copies now: the buffer stays with
		 * the file, in memory, and the compactor needs a new one. */
		f->state = F_FAILED;
		f->own_buf = 1;
		s->cbuf = NULL;
		set_sticky(s, rc);
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
				 "kept as it is", path,
				 (unsigned long long)(HDR_BYTES + (uint64_t)i * s->record_bytes),
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
			struct sfile *o = new_file(s, s->next_seq);
			if (!o) {
				pthread_mutex_unlock(&s->mu);
				return ST_ENOMEM;
			}
			s->next_seq++;
			o->buf = s->cbuf;
			s->cout = o;
		}
		struct sfile *o = s->cout;
		uint32_t j = o->n;
		/* The copy is byte for byte: same key, lsn and checksum. */
		memcpy(o->buf->mem + HDR_BYTES + (uint64_t)j * s->record_bytes, rec,
		       s->record_bytes);
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

/* One pass (Appendix E, "File compaction"): merges every hot file. The
 * caller has set s->compacting. Returns files merged away or an error. */
static int compact_pass(st_ssd_t *s)
{
	double t0 = now_s();
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
		update_hot(s, f);
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
		pthread_mutex_unlock(&s->mu);
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
			pthread_mutex_lock(&s->mu);
			f->bad = 1;
			pthread_mutex_unlock(&s->mu);
			continue;
		}
		uint32_t corrupt = 0;
		rc = copy_source(s, f, next_lsn, &corrupt);
		if (rc == 0 && corrupt == 0)
			merged[k] = 1;
		if (corrupt) {
			pthread_mutex_lock(&s->mu);
			f->bad = 1;
			pthread_mutex_unlock(&s->mu);
		}
	}
	if (rc == 0 && s->cout)
		rc = write_cout(s);

	pthread_mutex_lock(&s->mu);
	/* The sources may go only once their copies are on disk (above), and
	 * only once the records that superseded their other rows are on disk
	 * too: the doom mark (see the file comment). After a failure the
	 * sources stay; the copies already taken are the same data. */
	uint64_t mark = s->next_lsn;
	int n_merged = 0;
	for (size_t k = 0; k < nsrc; k++) {
		struct sfile *f = src[k];
		if (rc == 0 && merged[k] && f->stale == f->n) {
			doom(s, f, mark);
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
			update_hot(s, f);
		} else {
			f->compacting = 0;
			update_hot(s, f);
		}
	}
	for (size_t k = 0; k < nsrc; k++)
		unref_locked(s, src[k]);
	reap_locked(s);
	s->compact_seconds += now_s() - t0;
	pthread_mutex_unlock(&s->mu);
	free(src);
	free(merged);
	return rc < 0 ? rc : n_merged;
}

static void *compactor_main(void *p)
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
	maybe_wake_compactor(s);
	pthread_mutex_unlock(&s->mu);
	/* Writing the buffered records lets the merged files go now rather
	 * than once the current write buffer fills. */
	int frc = st_ssd_flush(s);
	return rc < 0 ? rc : frc < 0 ? frc : rc;
}

/* ---- reads ---- */

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

/* Copies the requests of a span out of its buffer, checking each record. */
static void deliver_span(struct rcall *c, const struct span *sp)
{
	st_ssd_t *s = c->s;
	for (uint32_t r = sp->r0; r < sp->r1; r++) {
		uint32_t idx = (uint32_t)c->rq[r].loc;
		uint32_t i = c->rq[r].i;
		if (idx >= sp->f->n)
			continue; /* reported when planned */
		uint64_t off = HDR_BYTES + (uint64_t)idx * s->record_bytes;
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
	st_uring_submit_wait(x->ring, ios, (unsigned)m);
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
 * file. Appends to *sp (which has room for r1 - r0 + 1 more). */
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
				 (unsigned long long)(HDR_BYTES + (uint64_t)idx * s->record_bytes),
				 (unsigned long long)c->keys[c->rq[r].i], f->n);
			note(c, ST_ECORRUPT);
			continue;
		}
		uint64_t a = HDR_BYTES + (uint64_t)idx * s->record_bytes;
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
		struct sfile *f = c.rq[r].loc == ST_SSD_NOLOC ? NULL : find_file(s, seq);
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
				const uint8_t *rec = f->buf->mem + HDR_BYTES +
						     (uint64_t)idx * s->record_bytes;
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
		unref_locked(s, g[k].f);
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

/* ---- recovery ---- */

/* key -> (lsn, loc), open addressing; only alive during st_ssd_open. */
struct rmap {
	uint64_t *key, *lsn, *loc;
	uint8_t *used;
	size_t cap, n;
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	x *= UINT64_C(0xc4ceb9fe1a85ec53);
	return x ^ (x >> 33);
}

static void rmap_free(struct rmap *m)
{
	free(m->key);
	free(m->lsn);
	free(m->loc);
	free(m->used);
}

static size_t rmap_find(const struct rmap *m, uint64_t key)
{
	size_t i = mix64(key) & (m->cap - 1);
	while (m->used[i] && m->key[i] != key)
		i = (i + 1) & (m->cap - 1);
	return i;
}

static int rmap_grow(struct rmap *m)
{
	struct rmap g = { .cap = m->cap ? m->cap * 2 : 1024 };
	g.key = malloc(g.cap * sizeof *g.key);
	g.lsn = malloc(g.cap * sizeof *g.lsn);
	g.loc = malloc(g.cap * sizeof *g.loc);
	g.used = calloc(g.cap, 1);
	if (!g.key || !g.lsn || !g.loc || !g.used) {
		rmap_free(&g);
		return ST_ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->used[i])
			continue;
		size_t j = rmap_find(&g, m->key[i]);
		g.used[j] = 1;
		g.key[j] = m->key[i];
		g.lsn[j] = m->lsn[i];
		g.loc[j] = m->loc[i];
	}
	g.n = m->n;
	rmap_free(m);
	*m = g;
	return 0;
}

/* Parses "<digits>.sst" / "<digits>.tmp". Returns 1 (sst), 2 (tmp) or 0. */
static int parse_name(const char *name, uint32_t *seq)
{
	char *end;
	if (name[0] < '0' || name[0] > '9')
		return 0;
	errno = 0;
	unsigned long long v = strtoull(name, &end, 10);
	if (errno || v > UINT32_MAX)
		return 0;
	*seq = (uint32_t)v;
	if (!strcmp(end, ".sst"))
		return 1;
	if (!strcmp(end, ".tmp"))
		return 2;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* Lists the store's files: removes .tmp files always and .sst files when
 * fresh; returns the .sst seqs (sorted) for recovery. */
static int scan_dir(st_ssd_t *s, int fresh, uint32_t **seqs, size_t *nseq, uint32_t *max_seq,
		    int *any)
{
	*seqs = NULL;
	*nseq = 0;
	*any = 0;
	int dfd = dup(s->dirfd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		int e = errno;
		if (dfd >= 0)
			close(dfd);
		st_error("%s: cannot list the store directory: %s", s->dir, strerror(e));
		return ST_EIO;
	}
	size_t cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		uint32_t seq;
		int kind = parse_name(e->d_name, &seq);
		if (!kind)
			continue;
		if (!*any || seq > *max_seq)
			*max_seq = seq;
		*any = 1;
		if (kind == 2 || fresh) {
			if (kind == 2 && !fresh)
				st_info("%s/%s: removed an unfinished file (the process "
					"stopped while writing it)", s->dir, e->d_name);
			if (unlinkat(s->dirfd, e->d_name, 0) < 0 && errno != ENOENT) {
				st_error("%s/%s: cannot remove: %s", s->dir, e->d_name,
					 strerror(errno));
				closedir(d);
				free(*seqs);
				*seqs = NULL;
				return ST_EIO;
			}
			continue;
		}
		if (*nseq == cap) {
			cap = cap ? cap * 2 : 64;
			uint32_t *p = realloc(*seqs, cap * sizeof *p);
			if (!p) {
				closedir(d);
				free(*seqs);
				*seqs = NULL;
				return ST_ENOMEM;
			}
			*seqs = p;
		}
		(*seqs)[(*nseq)++] = seq;
	}
	closedir(d);
	if (*nseq)
		qsort(*seqs, *nseq, sizeof **seqs, cmp_u32);
	return 0;
}

/* Reads one .sst and merges its records into m. Files that cannot be used
 * (unreadable, bad header) are reported and left on disk untouched. */
static int recover_file(st_ssd_t *s, uint32_t seq, struct rmap *m, uint8_t **buf,
			size_t *buf_cap, uint64_t *max_lsn, uint64_t *twins)
{
	char name[32], path[4200];
	file_name(name, sizeof name, seq, "sst");
	snprintf(path, sizeof path, "%s/%s", s->dir, name);
	int fd = open_at(s, name, O_RDONLY, 0);
	if (fd < 0) {
		st_error("%s: cannot open: %s; its records are not recovered", path,
			 st_strerror(fd));
		return 0;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < HDR_BYTES) {
		st_error("%s: shorter than its header; ignored (left on disk)", path);
		close(fd);
		return 0;
	}
	st_io_t io = { .fd = fd, .op = ST_IO_READ, .off = 0, .len = HDR_BYTES, .buf = *buf,
		       .buf_index = -1 };
	int rc = st_uring_submit_wait(s->wring, &io, 1);
	const uint8_t *h = *buf;
	if (rc < 0 || memcmp(h, MAGIC, 8) || get32(h + 8) != FORMAT_VERSION ||
	    get64(h + 32) != XXH3_64bits(h, 32) || get32(h + 24) != seq) {
		st_error("%s: %s; ignored (left on disk)", path,
			 rc < 0 ? st_strerror(rc) : "bad header (magic, version, seq or checksum)");
		close(fd);
		return 0;
	}
	if (get32(h + 12) != s->payload_bytes || get32(h + 16) != s->record_bytes) {
		st_error("%s: records have %u payload bytes, but the store was opened with "
			 "payload_bytes = %u (a different model's store?)", path, get32(h + 12),
			 s->payload_bytes);
		close(fd);
		return ST_EINVAL;
	}
	uint32_t n = get32(h + 20);
	uint64_t length = round_up(HDR_BYTES + (uint64_t)n * s->record_bytes, BLK);
	uint32_t avail = n;
	if ((uint64_t)st.st_size < length) {
		avail = (uint32_t)(((uint64_t)st.st_size - HDR_BYTES) / s->record_bytes);
		st_error("%s: %lld bytes, its header says %llu; the %u records past the end "
			 "are lost", path, (long long)st.st_size, (unsigned long long)length,
			 n - avail);
	}
	uint64_t data = round_up((uint64_t)avail * s->record_bytes, BLK);
	if (data > *buf_cap) {
		uint8_t *p = aligned_alloc_blk(data);
		if (!p) {
			close(fd);
			return ST_ENOMEM;
		}
		free(*buf);
		*buf = p;
		*buf_cap = data;
	}
	if (data) {
		io = (st_io_t){ .fd = fd, .op = ST_IO_READ, .off = HDR_BYTES, .len = (uint32_t)data,
				.buf = *buf, .buf_index = -1 };
		rc = st_uring_submit_wait(s->wring, &io, 1);
		if (rc < 0) {
			st_error("%s: %s; ignored (left on disk)", path, st_strerror(rc));
			close(fd);
			return 0;
		}
	}
	struct sfile *f = new_file(s, seq);
	if (!f) {
		close(fd);
		return ST_ENOMEM;
	}
	f->state = F_DISK;
	f->fd = fd;
	f->n = n;
	f->length = length;
	f->stale = n - avail;
	for (uint32_t i = 0; i < avail; i++) {
		const uint8_t *rec = *buf + (uint64_t)i * s->record_bytes;
		if (!rec_ok(s, rec, 0)) {
			/* Complete by construction, so this is damage on disk. */
			st_error("%s: corrupt record at offset %llu (key %llx); skipped", path,
				 (unsigned long long)(HDR_BYTES + (uint64_t)i * s->record_bytes),
				 (unsigned long long)get64(rec));
			f->stale++;
			continue;
		}
		uint64_t key = get64(rec), lsn = get64(rec + 8);
		if (lsn > *max_lsn)
			*max_lsn = lsn;
		if (2 * (m->n + 1) > m->cap && rmap_grow(m) < 0)
			return ST_ENOMEM;
		size_t j = rmap_find(m, key);
		if (!m->used[j]) {
			m->used[j] = 1;
			m->key[j] = key;
			m->lsn[j] = lsn;
			m->loc[j] = make_loc(seq, i);
			m->n++;
		} else if (lsn > m->lsn[j]) {
			struct sfile *old = find_file(s, (uint32_t)(m->loc[j] >> 32));
			old->stale++;
			m->lsn[j] = lsn;
			m->loc[j] = make_loc(seq, i);
		} else {
			/* Older, or the same lsn: a compaction copy and its
			 * source both survived a crash; same data. */
			if (lsn == m->lsn[j])
				(*twins)++;
			f->stale++;
		}
	}
	return 0;
}

static int recover(st_ssd_t *s, int fresh, struct rmap *m)
{
	uint32_t *seqs, max_seq = 0;
	size_t nseq;
	int any;
	int rc = scan_dir(s, fresh, &seqs, &nseq, &max_seq, &any);
	if (rc < 0)
		return rc;
	s->next_seq = any ? max_seq + 1 : 1;
	size_t buf_cap = s->file_cap;
	uint8_t *buf = aligned_alloc_blk(buf_cap);
	uint64_t max_lsn = 0, twins = 0;
	if (!buf)
		rc = ST_ENOMEM;
	for (size_t k = 0; k < nseq && rc == 0; k++)
		rc = recover_file(s, seqs[k], m, &buf, &buf_cap, &max_lsn, &twins);
	if (twins)
		st_info("%s: %llu records are on disk twice (the process stopped before a "
			"compaction deleted the files it merged); the extra copies count as "
			"stale", s->dir,
			(unsigned long long)twins);
	free(buf);
	free(seqs);
	s->next_lsn = max_lsn + 1;
	for (size_t i = 0; i < s->nfiles; i++) {
		struct sfile *f = s->files[i];
		s->disk_bytes += f->length;
		s->live_disk += f->n - f->stale;
		update_hot(s, f);
	}
	return rc;
}

/* ---- open, close, stats ---- */

static void destroy(st_ssd_t *s)
{
	for (size_t i = 0; i < s->nfiles; i++)
		free_file(s->files[i]);
	free(s->files);
	for (int i = 0; i < N_WBUF; i++)
		free(s->wbufs[i].mem);
	for (int i = 0; i < MAX_RCTX; i++) {
		st_uring_destroy(s->rctx[i].ring);
		free(s->rctx[i].stage);
	}
	st_uring_destroy(s->cring);
	if (s->cbuf) {
		free(s->cbuf->mem);
		free(s->cbuf);
	}
	free(s->crd);
	st_uring_destroy(s->wring);
	if (s->dirfd >= 0)
		close(s->dirfd);
	pthread_cond_destroy(&s->buf_cv);
	pthread_cond_destroy(&s->work_cv);
	pthread_cond_destroy(&s->done_cv);
	pthread_cond_destroy(&s->compact_cv);
	pthread_cond_destroy(&s->idle_cv);
	pthread_mutex_destroy(&s->mu);
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

	st_ssd_t *s = calloc(1, sizeof *s);
	char *dir = strdup(o->dir);
	if (!s || !dir) {
		free(s);
		free(dir);
		close(dirfd);
		return ST_ENOMEM;
	}
	s->dir = dir;
	s->dirfd = dirfd;
	s->payload_bytes = o->payload_bytes;
	s->record_bytes = (uint32_t)round_up(REC_HEAD + o->payload_bytes + 4, 8);
	uint64_t fb = round_up(o->file_bytes ? o->file_bytes : DEFAULT_FILE_BYTES, BLK);
	if (fb < HDR_BYTES + s->record_bytes)
		fb = round_up(HDR_BYTES + s->record_bytes, BLK);
	s->cap_records = (uint32_t)((fb - HDR_BYTES) / s->record_bytes);
	s->file_cap = round_up(HDR_BYTES + (uint64_t)s->cap_records * s->record_bytes, BLK);
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

	struct rmap m = { 0 };
	rc = recover(s, o->fresh, &m);
	if (rc < 0) {
		rmap_free(&m);
		destroy(s);
		return rc;
	}
	/* No thread runs yet: the owner sees every recovered key before the
	 * compactor can relocate one. */
	for (size_t i = 0; i < m.cap; i++)
		if (m.used[i])
			recovered(arg, m.key[i], m.loc[i]);
	rmap_free(&m);

	if (pthread_create(&s->writer, NULL, writer_main, s) != 0 ||
	    pthread_create(&s->compactor, NULL, compactor_main, s) != 0)
		st_die("ssd: pthread_create failed");
	s->threads = 1;
	*out = s;
	return ST_OK;
}

int st_ssd_close(st_ssd_t *s)
{
	if (!s)
		return ST_OK;
	pthread_mutex_lock(&s->mu);
	s->stop_compactor = 1;
	pthread_cond_signal(&s->compact_cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->compactor, NULL);
	int rc = st_ssd_flush(s);
	pthread_mutex_lock(&s->mu);
	s->stop_writer = 1;
	pthread_cond_signal(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->writer, NULL);
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
