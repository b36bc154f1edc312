/*
 * ssd_internal.h — the SSD tier's private layout, shared by its four
 * modules: ssd.c (the file format, the file table and its deletion rules,
 * open/close, append, release, flush, stats, the writer thread),
 * ssd_read.c (st_ssd_read and the choice between block and whole-file
 * reads), ssd_recover.c (the directory scan and recovery at open) and
 * ssd_compact.c (when to compact, the compactor thread, st_ssd_compact_now).
 * Nothing else includes it; callers use ssd.h.
 *
 * Locking: everything in st_ssd below `mu` is guarded by mu, the store's
 * only lock; the functions declared here say whether they expect it held
 * ("_locked" or "under mu") or take it themselves.
 */
#ifndef ST_SSD_INTERNAL_H
#define ST_SSD_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <xxhash.h>

#include "runtime/io/uring.h"
#include "runtime/store/ssd.h"

#define BLK 4096u
#define HDR_BYTES 4096u
#define REC_HEAD 16u       /* key + lsn */
#define N_WBUF 4           /* write buffers: one filling, three in flight */
#define MAX_RCTX 4         /* concurrent st_ssd_read calls doing disk I/O */
#define FORMAT_VERSION 1u

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

/* A reader ring (ssd_read.c). */
struct rctx {
	st_uring_t *ring;
	uint8_t *stage;
	size_t cap;
	int busy;
};

struct st_ssd {
	char *dir;
	int dirfd;
	int lockfd;             /* LOCK, flock()ed for the store's life; -1 */
	int remove_on_close;
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
	uint64_t compact_passes;   /* passes run (the trace's round count) */
	double compact_seconds;

	st_uring_t *wring;         /* writer thread (recovery before it) */
	/* Compaction context (ssd_compact.c): used by whoever set `compacting`. */
	st_uring_t *cring;
	struct wbuf *cbuf;         /* output file image */
	struct sfile *cout;        /* the output file being filled */
	uint8_t *crd;              /* source file image (records only) */
	size_t crd_cap;
	int crd_reg;               /* registered index of crd, or -1 */
	struct rctx rctx[MAX_RCTX];
	/* Disk reads submitted and not completed, all callers together
	 * (atomic, not under mu): the trace's "ssd reads in flight". Kept
	 * only while tracing. */
	int64_t reads_in_flight;

	pthread_t writer, compactor;
	int threads;
};

/* ---- small helpers ---- */

static inline uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static inline void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static inline void file_name(char *out, size_t n, uint32_t seq, const char *ext)
{
	snprintf(out, n, "%08u.%s", seq, ext);
}

static inline st_ssd_loc_t make_loc(uint32_t seq, uint32_t idx)
{
	return (uint64_t)seq << 32 | idx;
}

/* Byte offset of record idx in its file (and in a file image). */
static inline uint64_t rec_off(const st_ssd_t *s, uint32_t idx)
{
	return HDR_BYTES + (uint64_t)idx * s->record_bytes;
}

static inline uint32_t rec_sum(const uint8_t *rec, uint32_t payload_bytes)
{
	return (uint32_t)XXH3_64bits(rec, REC_HEAD + payload_bytes);
}

/* A record passes when its checksum matches and its lsn is one the store
 * could have given (1 .. next_lsn-1). */
static inline int rec_ok(const st_ssd_t *s, const uint8_t *rec, uint64_t next_lsn)
{
	uint64_t lsn = get64(rec + 8);
	if (lsn == 0 || (next_lsn && lsn >= next_lsn))
		return 0;
	return get32(rec + REC_HEAD + s->payload_bytes) == rec_sum(rec, s->payload_bytes);
}

static inline void *aligned_alloc_blk(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, BLK, n ? n : BLK) != 0)
		return NULL;
	return p;
}

/* ---- ssd.c: files, the file table, writing ---- */

/* Opens name in the store directory, O_DIRECT while the filesystem takes
 * it. Returns an fd or a negative errno. Any thread, mu not needed. */
int st__ssd_open_at(st_ssd_t *s, const char *name, int flags, mode_t mode);
/* 1 when the 4096-byte header h is a valid header of file seq (magic,
 * version, seq and checksum; the record sizes are the caller's check). */
int st__ssd_header_ok(const uint8_t *h, uint32_t seq);

/* Under mu: */
struct sfile *st__ssd_find_file(const st_ssd_t *s, uint32_t seq);
/* A new file seq, last in the table (seqs only grow); NULL when out of
 * memory. */
struct sfile *st__ssd_new_file(st_ssd_t *s, uint32_t seq);
/* A new file with the next seq, filling buffer b; NULL when out of
 * memory (then no seq was used). */
struct sfile *st__ssd_next_file(st_ssd_t *s, struct wbuf *b);
/* Adds an on-disk file to disk_bytes and live_disk and updates its hot
 * flag. */
void st__ssd_count_on_disk(st_ssd_t *s, struct sfile *f);
/* Marks a merged (or fully stale) file for deletion once the durable
 * horizon passes mark; reap unlinks it. */
void st__ssd_doom(st_ssd_t *s, struct sfile *f, uint64_t mark);
void st__ssd_reap_locked(st_ssd_t *s);
/* Drops a reference to f's fd taken by a reader or the compactor. */
void st__ssd_unref_locked(st_ssd_t *s, struct sfile *f);
/* Fills in the header and padding of f's buffer and sets f->length. */
void st__ssd_seal_image(st_ssd_t *s, struct sfile *f);
/* f's write succeeded with fd: it is served from disk from now on. */
void st__ssd_file_on_disk(st_ssd_t *s, struct sfile *f, int fd);
/* f's write failed with rc: logs it (unless an error is sticky already),
 * marks f F_FAILED (served from its buffer) and makes rc sticky. */
void st__ssd_write_failed(st_ssd_t *s, struct sfile *f, int rc);

/* Without mu: writes f's sealed image; returns an fd of the .sst open for
 * reading, or a negative errno with the partial file removed. */
int st__ssd_write_file(st_ssd_t *s, st_uring_t *ring, const struct sfile *f);

/* ---- ssd_recover.c ---- */

/* Without mu, before any store thread runs: removes .tmp files (and .sst
 * files when fresh), rebuilds the file table, next_seq and next_lsn from
 * the .sst files, and reports every live key through recovered. */
int st__ssd_recover(st_ssd_t *s, int fresh,
		    void (*recovered)(void *arg, uint64_t key, st_ssd_loc_t loc), void *arg);

/* ---- ssd_read.c ---- */

/* Frees the reader rings (st_ssd_close, no thread left). */
void st__ssd_read_fini(st_ssd_t *s);

/* ---- ssd_compact.c ---- */

/* Under mu: recomputes f's hot flag (worth merging) and s->hot_files. */
void st__ssd_update_hot(st_ssd_t *s, struct sfile *f);
/* Under mu: signals the compactor when a pass is due. */
void st__ssd_maybe_wake_compactor(st_ssd_t *s);
/* The compactor thread, st-ssd-cmpct-0. */
void *st__ssd_compactor_main(void *p);
/* Frees the compaction context (st_ssd_close, no thread left). */
void st__ssd_compact_fini(st_ssd_t *s);

#endif
