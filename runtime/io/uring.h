/*
 * uring.h — batched file I/O through io_uring, with a pread/pwrite fallback.
 *
 * A ring carries batches of reads and writes (fd, offset, length, buffer or
 * registered-buffer index) and waits until every one of them is complete:
 * short transfers and -EAGAIN/-EINTR completions are resubmitted for the
 * rest, so a caller sees each request either done whole or failed.
 *
 * When io_uring cannot be used (io_uring_queue_init fails with EPERM, ENOSYS
 * or ENOMEM: a seccomp filter, kernel.io_uring_disabled, an old kernel's
 * memlock limit) or the caller asks for it, the same calls run as
 * pread/pwrite loops; the process logs once that it fell back and why.
 *
 * Threads: a ring is not thread-safe; one thread uses it at a time (callers
 * keep one ring per thread or serialise). Different rings are independent.
 * Errors are returned as negative errno values (ST_E* compatible); errno is
 * not set.
 */
#ifndef ST_IO_URING_H
#define ST_IO_URING_H

#include <stdint.h>
#include <sys/uio.h>

typedef struct st_uring st_uring_t;

enum st_io_op { ST_IO_READ = 0, ST_IO_WRITE = 1 };

/* One request. The caller fills fd..buf_index; st_uring_submit_wait fills
 * res: bytes transferred (== len, or less for a read that met end of file),
 * or a negative errno. */
typedef struct st_io {
	int fd;
	int op;          /* enum st_io_op */
	uint64_t off;
	uint32_t len;
	void *buf;       /* for a registered buffer: an address inside it */
	int buf_index;   /* registered buffer index, or -1 */
	int res;
} st_io_t;

/* Creates a ring of `depth` entries (0 = 32). no_uring = 1 forces the
 * pread/pwrite fallback. Returns ST_OK (0), -ENOMEM, or the negative errno
 * of io_uring_queue_init for failures other than those that fall back.
 * The caller owns *out and frees it with st_uring_destroy. */
int st_uring_create(st_uring_t **out, unsigned depth, int no_uring);

/* Frees the ring (NULL-safe). Registered buffers stay the caller's. */
void st_uring_destroy(st_uring_t *r);

/* 1 if requests go through io_uring, 0 for the fallback. */
int st_uring_is_uring(const st_uring_t *r);

/* Registers n buffers (replacing earlier ones) for fixed-buffer I/O; the
 * memory stays the caller's and must outlive the registration (until
 * st_uring_unregister or st_uring_destroy). Returns 0, or a negative errno
 * (-ENOMEM under a small RLIMIT_MEMLOCK): then the ring keeps working and
 * treats buf_index as -1. In the fallback it returns 0 and does nothing. */
int st_uring_register(st_uring_t *r, const struct iovec *iov, unsigned n);
void st_uring_unregister(st_uring_t *r);

/* 1 if buffers are registered (buf_index is honoured). */
int st_uring_registered(const st_uring_t *r);

/* Runs n requests with at most depth in flight and waits for all. Returns
 * 0 when every request transferred len bytes; otherwise the first failing
 * request's negative errno, or -EIO for a read cut short by end of file
 * (each request's res tells which). Ordering between requests of one batch
 * is not defined; the batch is complete when this returns. */
int st_uring_submit_wait(st_uring_t *r, st_io_t *ios, unsigned n);

/* fsync(2) of fd through the ring. Returns 0 or a negative errno. */
int st_uring_fsync(st_uring_t *r, int fd);

#endif
