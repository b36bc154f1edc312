/*
 * dumpio.h — file plumbing shared by the checkpoint and export formats.
 * The st__dumpio functions are private to ops/dump/ and its tests;
 * st_dumpio_sum_t is part of the public API of the writers.
 *
 * A st__dumpio_t writes one file through a buffer while it hashes every byte
 * with XXH3-64, so a checkpoint's manifest gets each file's size and checksum
 * without reading the file back. It uses O_DIRECT where the file system has
 * it; large writes of 4096-aligned memory then go from the caller's memory to
 * the device without a copy. Closing fsyncs. Every failure (ENOSPC included)
 * closes and unlinks the partial file, so a failed write never leaves a file
 * that looks whole.
 *
 * The helpers below also read files whole or hashed, fsync directories and
 * remove checkpoint directories.
 *
 * Library-grade: includes only the C library, libxxhash and err.h codes.
 * Not thread-safe per object; distinct objects may be used by distinct
 * threads (except the test hooks, which are process-wide, and are called
 * from the staging thread too).
 */
#ifndef ST_DUMP_DUMPIO_H
#define ST_DUMP_DUMPIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Every on-disk integer and float of ops/dump is little-endian. The float
 * payloads are copied with memcpy, so a big-endian host would need byte
 * swaps that this version does not have. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ops/dump writes little-endian files with memcpy; big-endian hosts are not supported"
#endif

/* Size and XXH3-64 (seed 0) of a whole file, as written or as read back. */
typedef struct st_dumpio_sum {
	uint64_t bytes;
	uint64_t xxh3;
} st_dumpio_sum_t;

typedef struct st__dumpio st__dumpio_t;

/*
 * Test hooks: when non-NULL they replace open(2), write(2) and fsync(2) for
 * every dumpio writer (same contract: return -1 and set errno on failure).
 * Tests use them to simulate a full disk or a file system that refuses
 * O_DIRECT; production code never sets them. Set them only while no writer
 * runs.
 */
extern int (*st__dumpio_open_hook)(const char *path, int flags, mode_t mode);
extern ssize_t (*st__dumpio_write_hook)(int fd, const void *buf, size_t n);
extern int (*st__dumpio_fsync_hook)(int fd);

/* Creates (truncates) path for writing. Returns ST_OK and *out, or a negative
 * errno-style code with "path: reason" in err (err may be NULL). The caller
 * must finish the object with st__dumpio_close or st__dumpio_abort. */
int st__dumpio_open(st__dumpio_t **out, const char *path, char *err, size_t errlen);

/* Appends n bytes (copied or written before it returns: buf is the
 * caller's again afterwards). Returns ST_OK or an error (ST_ENOSPC for a full
 * disk); after an error the file is already closed and unlinked, later writes
 * return the same error, and close returns it too. */
int st__dumpio_write(st__dumpio_t *f, const void *buf, size_t n);

/* Bytes accepted so far. */
uint64_t st__dumpio_tell(const st__dumpio_t *f);

/* XXH3-64 (seed 0) of the bytes accepted so far: a file format's own
 * checksum of "every byte before this point" without hashing them twice. */
uint64_t st__dumpio_digest(const st__dumpio_t *f);

/* Flushes, fsyncs and closes; frees f. On success fills *sum (may be NULL)
 * and returns ST_OK; on failure unlinks the file and returns the error with
 * the message in err. */
int st__dumpio_close(st__dumpio_t *f, st_dumpio_sum_t *sum, char *err, size_t errlen);

/* Closes, unlinks and frees (NULL-safe). */
void st__dumpio_abort(st__dumpio_t *f);

/*
 * Staged writing for large files: st__dumpio_stage_put copies the caller's
 * bytes into 4096-aligned buffers of up to 8 MiB, each handed whole to
 * st__dumpio_write (so O_DIRECT writes them without another copy). For a
 * file larger than one buffer a thread, st-dump-write, writes one buffer
 * while the caller fills the next; it alone uses f between stage_open and
 * stage_close, so the caller must not touch f in between.
 *
 * stage_open: total is the number of bytes the caller will put (it sizes
 * the buffers; putting more is allowed). ST_OK and *out, or ST_ENOMEM.
 * stage_put: ST_OK or the first write error so far (then f has failed and
 * is unlinked, as with st__dumpio_write; the bytes are dropped).
 * stage_close: writes what is left, stops the thread, frees *o; returns the
 * first error of every write. f stays open for the caller (more writes,
 * st__dumpio_digest, st__dumpio_close).
 */
typedef struct st__dumpio_stage st__dumpio_stage_t;
int st__dumpio_stage_open(st__dumpio_stage_t **out, st__dumpio_t *f, uint64_t total);
int st__dumpio_stage_put(st__dumpio_stage_t *o, const void *p, size_t n);
int st__dumpio_stage_close(st__dumpio_stage_t *o);

/* Maps an errno value to an ST_E code: ENOSPC and EDQUOT to ST_ENOSPC,
 * ENOENT to ST_ENOENT, the rest to -errno. */
int st__dumpio_errno(int e);

/* Reads the whole regular file into a malloc'ed buffer (*buf, *len; the
 * caller frees *buf). Files longer than max_len give ST_EFORMAT. Returns
 * ST_OK, ST_ENOENT, ST_EIO, ST_ENOMEM, with "path: reason" in err. */
int st__dumpio_read_all(const char *path, size_t max_len, uint8_t **buf, size_t *len,
			char *err, size_t errlen);

/* Size and XXH3-64 of a file, read in chunks. ST_OK or an errno-style code. */
int st__dumpio_hash_file(const char *path, st_dumpio_sum_t *sum, char *err, size_t errlen);
/* The same, calling progress(arg, bytes so far) after each buffer read
 * (progress may be NULL). */
int st__dumpio_hash_file_cb(const char *path, st_dumpio_sum_t *sum, char *err, size_t errlen,
			    void (*progress)(void *arg, uint64_t bytes), void *arg);

/* fsyncs a directory (so renames and creations in it are durable). */
int st__dumpio_fsync_dir(const char *path, char *err, size_t errlen);

/* Removes a directory and everything below it (no symlinks are followed).
 * ST_OK if it is gone (also if it never existed), else an errno code. */
int st__dumpio_rmtree(const char *path);

/* snprintf into err when err is non-NULL. */
void st__dumpio_seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
