/*
 * ssd.h — the SSD tier of the parameter store: an append-only log of row
 * records in files, with an in-memory stale counter per file and a background
 * compactor (hierarchical-gpu-parameter-server.md, Section 6 and Appendix E).
 *
 * The store does not own the key -> location map: its owner (the host table,
 * runtime/store/table.c) keeps it, next to the RAM rows, under the same
 * shard locks. The store gives every appended record a location, tells the
 * owner when compaction moves a record (relocate callback), and is told by
 * the owner when a record stops being live (st_ssd_release: the row was
 * loaded back into RAM, or superseded).
 *
 * Files. Appended records fill an in-memory write buffer of file_bytes; a
 * full (or flushed) buffer is sealed and written by a writer thread as a new
 * file "<seq>.sst" through O_DIRECT io_uring (registered buffers, queue depth
 * queue_depth), fsynced, then renamed from "<seq>.tmp": a file either exists
 * whole or not at all. Until a sealed file is on disk its records are served
 * from its buffer. Each record is key, lsn (a store-wide sequence number
 * that orders versions of a key), payload and a checksum; a record failing
 * its checksum is reported with file and offset and never returned.
 *
 * One process per directory. st_ssd_open takes an exclusive flock(2) on
 * "<dir>/LOCK" (created if absent; it holds the holder's pid as text) before
 * it reads or removes any file, and the store keeps it until st_ssd_close.
 * A second open of the same directory, from another process or from this
 * one, fails with ST_EBUSY and touches nothing: two stores appending to and
 * wiping the same files would corrupt each other. The kernel drops the lock
 * when its holder dies, so a crashed run never blocks the next one.
 *
 * Recovery. st_ssd_open with fresh = 0 scans the directory's .sst files,
 * keeps for each key the record with the highest lsn among complete files,
 * reports it through the recovered callback, and counts the others stale;
 * .tmp files (a crash mid-write) are deleted.
 *
 * Threads: every function is thread-safe. The store runs st-ssd-writer-0
 * and st-ssd-cmpct-0 (the kernel's 15-character thread names). Lock order:
 * callers may hold their own locks (the table's shard locks) when calling
 * append/release/read/flush; the store never calls relocate with one of its
 * locks held. st_ssd_compact_now runs relocate in the caller's thread, so
 * it must not be called with a lock that relocate takes.
 *
 * Durability: a record is on disk once st_ssd_flush returned after it was
 * appended. Compaction deletes a merged file only after the records that
 * superseded its rows are on disk, so a crash never brings back a version
 * older than the last flushed one.
 */
#ifndef ST_SSD_H
#define ST_SSD_H

#include <stdint.h>

typedef struct st_ssd st_ssd_t;

/* A record's location: file id in the high 32 bits, record index in the
 * low 32. */
typedef uint64_t st_ssd_loc_t;
#define ST_SSD_NOLOC UINT64_MAX

enum st_ssd_read_mode {
	ST_SSD_READ_AUTO = 0, /* per file: whole file when enough of it is needed */
	ST_SSD_READ_BLOCK,    /* only the 4 KiB blocks holding needed records */
	ST_SSD_READ_FILE,     /* whole file whenever one of its records is needed */
};

typedef struct st_ssd_opts {
	const char *dir;         /* created (one level) if absent */
	uint32_t payload_bytes;  /* bytes per record payload; multiple of 4, >= 4 */
	uint64_t file_bytes;     /* target file size; 0 = 4 MiB; rounded up to 4 KiB */
	uint32_t queue_depth;    /* io_uring depth; 0 = 32 */
	uint64_t budget_bytes;   /* disk budget; 0 = unlimited. Appends fail with
				    ST_ENOSPC once files would exceed it and
				    compaction cannot make room. The files may
				    pass it by one file for a moment (a write
				    that lets merged files be deleted), and
				    compaction output is not held to it */
	double compact_ratio;    /* compaction starts when disk bytes exceed
				    compact_ratio x live bytes (and 64 MiB or 4
				    files); 0 = 1.5. It merges the files more
				    than 50% stale, so disk stays under 2x live */
	int read_mode;           /* enum st_ssd_read_mode */
	double auto_file_frac;   /* AUTO reads the whole file when the needed
				    blocks are more than this fraction of it;
				    0 = 0.3, the measured default (ssd.c) */
	int fresh;               /* 1: delete existing .sst/.tmp files; 0: recover */
	int remove_on_close;     /* 1: the store is one run's scratch space:
				    st_ssd_close deletes its files, LOCK and the
				    directory while it still holds the lock, so
				    no other store can be using them meanwhile */
	int no_uring;            /* 1: use pread/pwrite (tests); the env variable
				    STRATA_NO_URING=1 does the same */
	/* The owner's map: compaction copied key's record from `from` to `to`.
	 * Return 1 if the map pointed at `from` and now points at `to`; 0 if the
	 * record was no longer live (then `to` is never used: its slot takes
	 * the next copy). Called from st-ssd-cmpct-0 or st_ssd_compact_now's
	 * thread. NULL: records never move, and compaction only deletes files
	 * whose records were all released. */
	int (*relocate)(void *arg, uint64_t key, st_ssd_loc_t from, st_ssd_loc_t to);
	void *arg;
	/* Compaction waits until the files hold more than this many bytes;
	 * 0 = max(64 MiB, 4 files). Tests set it small with small files. */
	uint64_t compact_min_bytes;
} st_ssd_opts_t;

typedef struct st_ssd_stats {
	uint64_t files;          /* files on disk and pending */
	uint64_t disk_bytes;     /* bytes of files on disk */
	uint64_t live_records, stale_records;
	uint64_t appended;       /* records appended (incl. compaction copies) */
	uint64_t bytes_written;  /* bytes written to disk */
	uint64_t read_records;   /* records returned by st_ssd_read */
	uint64_t bytes_read;     /* bytes read from disk (amplification =
				    bytes_read / (read_records * record size)) */
	uint64_t buffer_hits;    /* records served from unwritten buffers */
	uint64_t compactions;    /* files merged away */
	double compact_seconds;  /* wall time in the compactor */
	uint32_t record_bytes;   /* on-disk bytes per record */
	int uring;               /* 1: io_uring, 0: pread/pwrite fallback */
	int direct;              /* 1: O_DIRECT, 0: the filesystem refused it */
	uint64_t read_ios;       /* read requests sent to the disk */
	uint64_t pending_files;  /* sealed or active files not on disk yet */
	uint64_t draining_files; /* merged files waiting for the release of a
				    record that was out of the owner's map */
} st_ssd_stats_t;

/* Opens (creating or recovering) a store. With fresh == 0 every recovered
 * key is reported once through recovered(arg, key, loc) before this returns
 * (recovered may be NULL with fresh == 1). ST_OK; ST_EINVAL for bad opts;
 * ST_EIO with a logged message naming the path (missing, not a directory,
 * not writable, LOCK cannot be created or locked); ST_EBUSY, logged with
 * the path and the holder's pid, when another open store holds the
 * directory (nothing in it was read or removed); ST_ENOMEM. */
int st_ssd_open(st_ssd_t **out, const st_ssd_opts_t *o,
		void (*recovered)(void *arg, uint64_t key, st_ssd_loc_t loc), void *arg);

/* Flushes (st_ssd_flush), stops the threads and frees the store (NULL-safe),
 * releasing the directory's lock (after removing the files, LOCK and the
 * directory with remove_on_close). Returns the flush's result. No other call may run, and the caller must
 * not hold a lock that relocate takes (a running background compaction
 * pass stops after the source file it is copying: close waits for one
 * file's copy, not the whole pass). Records only in memory (after a failed
 * write) are lost here. */
int st_ssd_close(st_ssd_t *s);

/* Test hook, set before close: runs in st_ssd_close once the compactor was
 * told to stop and before close waits for it (tests/unit/test_ssd.c). */
extern void (*st__ssd_close_hook)(void *arg);
extern void *st__ssd_close_hook_arg;

/* Appends a record for key; *loc receives its location. May block while
 * every write buffer is waiting for the disk. Returns ST_OK, or the sticky
 * error of a failed write (ST_ENOSPC, ST_EIO, or the write's own -errno
 * such as -EACCES or -EFBIG; logged once naming the file): then nothing was
 * appended, and every record appended before stays readable (from its
 * buffer if its file never reached the disk). */
int st_ssd_append(st_ssd_t *s, uint64_t key, const void *payload, st_ssd_loc_t *loc);

/* Reads n records: payload of (keys[i], locs[i]) into dst[i]
 * (payload_bytes each). Reads are grouped per file and submitted together
 * (read_mode decides whole file or blocks). A record whose checksum, key or
 * framing is wrong makes the call return ST_ECORRUPT after logging
 * "<path>: corrupt record at offset N (key K)"; its dst is left alone, and
 * the other records are still delivered. ST_OK.
 * A location stays readable until it is released, or until relocate
 * returned 1 for it (moved): a file is deleted only once each of its
 * records was released or moved, so an owner may take a key out of its map
 * under its lock, read the location without the lock, then release it.
 * Reading a location after that is ST_ENOENT (logged), as is a location
 * the store never gave; ST_EIO for a failed read; ST_ENOMEM. */
int st_ssd_read(st_ssd_t *s, uint32_t n, const uint64_t *keys, const st_ssd_loc_t *locs,
		void *const *dst);

/* The record at loc is no longer live (its file's stale count grows). */
void st_ssd_release(st_ssd_t *s, st_ssd_loc_t loc);

/* Seals the write buffer and waits until every sealed file is on disk
 * (written, fsynced, renamed, directory fsynced). ST_OK or the sticky
 * write error. */
int st_ssd_flush(st_ssd_t *s);

/* Runs one compaction pass now, in the caller's thread: every file more than
 * 50% stale is merged. Then flushes (as st_ssd_flush), so the merged files
 * are deleted before it returns. Returns files removed (>= 0) or an error
 * (the sticky write error included). Waits for a background pass to end
 * first. */
int st_ssd_compact_now(st_ssd_t *s);

void st_ssd_stats(st_ssd_t *s, st_ssd_stats_t *out);

/* On-disk bytes of one record with payload_bytes of payload (key, LSN and
 * checksum around it, 8-byte aligned): what a row costs on SSD besides the
 * file headers. Pure. */
uint32_t st_ssd_record_bytes(uint32_t payload_bytes);

/* The store's directory (as given). */
const char *st_ssd_dir(const st_ssd_t *s);

#endif
