/*
 * uring.c — batched reads and writes through io_uring (see uring.h), or
 * through pread/pwrite loops when io_uring is unavailable or refused.
 *
 * A batch is driven by one loop: keep up to depth requests in the ring,
 * submit and wait for at least one completion, then reap every completion
 * that is ready. A completion short of the request's length (a read or write
 * split by the kernel, a read ending at end of file) or one that failed with
 * -EAGAIN/-EINTR puts the request back on a retry stack with its progress,
 * so the next submission covers only the remaining bytes. The loop ends when
 * every request is finished, so no buffer of the batch is still in the
 * kernel's hands when st_uring_submit_wait returns.
 *
 * The SQ has depth entries and the CQ twice that (liburing's default), and at
 * most depth requests are outstanding, so the CQ never overflows.
 *
 * No locks: a ring belongs to one thread at a time. The only shared state is
 * the process-wide "already warned" flags, which are atomics.
 */
#include "uring.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/err.h"

struct st_uring {
	struct io_uring ring;
	int on;          /* 1: ring initialised and used */
	int registered;  /* 1: fixed buffers registered */
	unsigned depth;
	/* Per-batch scratch, grown as needed: bytes done per request and the
	 * stack of requests waiting to be (re)submitted. */
	uint32_t *done;
	uint32_t *retry;
	size_t cap;
};

static int warned_fallback, warned_asked, warned_register;

/* Returns 1 the first time it is called for *flag in this process. */
static int first_time(int *flag)
{
	return __atomic_exchange_n(flag, 1, __ATOMIC_RELAXED) == 0;
}

int st_uring_create(st_uring_t **out, unsigned depth, int no_uring)
{
	*out = NULL;
	st_uring_t *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	r->depth = depth ? depth : 32;
	if (no_uring) {
		if (first_time(&warned_asked))
			st_warn("io: io_uring turned off by request (no_uring or "
				"STRATA_NO_URING=1); using pread/pwrite");
		*out = r;
		return 0;
	}
	int rc = io_uring_queue_init(r->depth, &r->ring, 0);
	if (rc == 0) {
		r->on = 1;
	} else if (rc == -EPERM || rc == -ENOSYS || rc == -ENOMEM) {
		/* EPERM: seccomp or kernel.io_uring_disabled; ENOSYS: a kernel
		 * without io_uring; ENOMEM: kernels before 5.12 charge the
		 * rings to RLIMIT_MEMLOCK. All are the environment, and
		 * pread/pwrite gives the same results, only slower. */
		if (first_time(&warned_fallback))
			st_warn("io: io_uring_queue_init(%u): %s; falling back to "
				"pread/pwrite (slower; check seccomp, "
				"kernel.io_uring_disabled or ulimit -l)",
				r->depth, strerror(-rc));
	} else {
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void st_uring_destroy(st_uring_t *r)
{
	if (!r)
		return;
	if (r->on)
		io_uring_queue_exit(&r->ring); /* also drops registered buffers */
	free(r->done);
	free(r->retry);
	free(r);
}

int st_uring_is_uring(const st_uring_t *r)
{
	return r->on;
}

int st_uring_registered(const st_uring_t *r)
{
	return r->registered;
}

int st_uring_register(st_uring_t *r, const struct iovec *iov, unsigned n)
{
	if (!r->on)
		return 0;
	st_uring_unregister(r);
	int rc = io_uring_register_buffers(&r->ring, iov, n);
	if (rc < 0) {
		/* Fixed buffers only save the per-I/O page pinning; plain
		 * buffers work the same. Say so once: it is a tuning hint. */
		if (first_time(&warned_register))
			st_info("io: io_uring_register_buffers(%u buffers): %s; using "
				"unregistered buffers (raise ulimit -l to register)",
				n, strerror(-rc));
		return rc;
	}
	r->registered = 1;
	return 0;
}

void st_uring_unregister(st_uring_t *r)
{
	if (r->on && r->registered)
		io_uring_unregister_buffers(&r->ring);
	r->registered = 0;
}

static int grow(st_uring_t *r, size_t n)
{
	if (n <= r->cap)
		return 0;
	uint32_t *d = realloc(r->done, n * sizeof *d);
	if (!d)
		return -ENOMEM;
	r->done = d;
	uint32_t *q = realloc(r->retry, n * sizeof *q);
	if (!q)
		return -ENOMEM;
	r->retry = q;
	r->cap = n;
	return 0;
}

static int fallback_one(st_io_t *io)
{
	uint32_t done = 0;
	char *p = io->buf;
	while (done < io->len) {
		ssize_t k = io->op == ST_IO_READ
			? pread(io->fd, p + done, io->len - done, (off_t)(io->off + done))
			: pwrite(io->fd, p + done, io->len - done, (off_t)(io->off + done));
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (k == 0) {
			if (io->op == ST_IO_READ)
				break; /* end of file: res tells how far it got */
			return -EIO;
		}
		done += (uint32_t)k;
	}
	return (int)done;
}

static int batch_result(const st_io_t *ios, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (ios[i].res < 0)
			return ios[i].res;
	for (unsigned i = 0; i < n; i++)
		if ((uint32_t)ios[i].res != ios[i].len)
			return -EIO;
	return 0;
}

static void prep(st_uring_t *r, struct io_uring_sqe *sqe, const st_io_t *io, uint32_t done)
{
	char *p = (char *)io->buf + done;
	unsigned len = io->len - done;
	uint64_t off = io->off + done;
	int fixed = r->registered && io->buf_index >= 0;
	if (io->op == ST_IO_READ) {
		if (fixed)
			io_uring_prep_read_fixed(sqe, io->fd, p, len, off, io->buf_index);
		else
			io_uring_prep_read(sqe, io->fd, p, len, off);
	} else {
		if (fixed)
			io_uring_prep_write_fixed(sqe, io->fd, p, len, off, io->buf_index);
		else
			io_uring_prep_write(sqe, io->fd, p, len, off);
	}
}

int st_uring_submit_wait(st_uring_t *r, st_io_t *ios, unsigned n)
{
	if (n == 0)
		return 0;
	if (!r->on) {
		for (unsigned i = 0; i < n; i++)
			ios[i].res = fallback_one(&ios[i]);
		return batch_result(ios, n);
	}
	if (grow(r, n) < 0)
		return -ENOMEM;
	/* The retry stack starts with every request, last on the bottom, so
	 * requests go out roughly in the caller's order (the disk sees
	 * ascending offsets when the caller sorted them). */
	unsigned nretry = 0;
	for (unsigned i = 0; i < n; i++) {
		r->done[i] = 0;
		ios[i].res = 0;
		r->retry[nretry++] = n - 1 - i;
	}
	unsigned remaining = n, inflight = 0;
	while (remaining > 0) {
		while (inflight < r->depth && nretry > 0) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
			if (!sqe)
				break;
			uint32_t idx = r->retry[--nretry];
			prep(r, sqe, &ios[idx], r->done[idx]);
			io_uring_sqe_set_data64(sqe, idx);
			inflight++;
		}
		int rc = io_uring_submit_and_wait(&r->ring, 1);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
			/* Only a broken ring or a bad pointer of ours gets
			 * here, and requests already in the kernel may still
			 * write into the caller's buffers: there is no safe
			 * way to return. */
			st_die("io: io_uring_submit_and_wait: %s", strerror(-rc));
		struct io_uring_cqe *cqe;
		while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
			uint32_t idx = (uint32_t)io_uring_cqe_get_data64(cqe);
			int res = cqe->res;
			io_uring_cqe_seen(&r->ring, cqe);
			inflight--;
			st_io_t *io = &ios[idx];
			if (res == -EAGAIN || res == -EINTR) {
				r->retry[nretry++] = idx;
			} else if (res < 0) {
				io->res = res;
				remaining--;
			} else if (res == 0) {
				/* A read at end of file stops there; a write
				 * that makes no progress would loop forever. */
				io->res = io->op == ST_IO_READ ? (int)r->done[idx] : -EIO;
				remaining--;
			} else {
				r->done[idx] += (uint32_t)res;
				if (r->done[idx] < io->len) {
					r->retry[nretry++] = idx;
				} else {
					io->res = (int)io->len;
					remaining--;
				}
			}
		}
	}
	return batch_result(ios, n);
}

int st_uring_fsync(st_uring_t *r, int fd)
{
	if (!r->on) {
		while (fsync(fd) < 0) {
			if (errno != EINTR)
				return -errno;
		}
		return 0;
	}
	for (;;) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
		if (!sqe)
			st_die("io: ring full outside a batch");
		io_uring_prep_fsync(sqe, fd, 0);
		io_uring_sqe_set_data64(sqe, 0);
		int rc;
		struct io_uring_cqe *cqe;
		do
			rc = io_uring_submit_and_wait(&r->ring, 1);
		while (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
		if (rc < 0)
			st_die("io: io_uring_submit_and_wait: %s", strerror(-rc));
		do
			rc = io_uring_wait_cqe(&r->ring, &cqe);
		while (rc == -EINTR);
		if (rc < 0)
			st_die("io: io_uring_wait_cqe: %s", strerror(-rc));
		int res = cqe->res;
		io_uring_cqe_seen(&r->ring, cqe);
		if (res == -EINTR || res == -EAGAIN)
			continue;
		return res < 0 ? res : 0;
	}
}
