/*
 * ssd_raw.c — the physical reference for the SSD tier (runtime/store/ssd.c):
 * what the disk under a directory gives to O_DIRECT io_uring I/O, measured
 * the way the tier uses it.
 *
 *   bench_ssd_raw [DIR] [--size BYTES[K|M|G]] [--qd N] [--seq-qd N]
 *                 [--seconds S] [--no-uring]
 *
 * DIR defaults to $TMPDIR or /tmp; the file (default 1 GiB) is
 * DIR/ssd_raw.<pid>.dat and is removed at the end. In order:
 *   seq1m_write   the file written front to back in 1 MiB writes, seq-qd
 *                 (default 4) in flight, then fsync (counted);
 *   seq1m_read    read back the same way (the tier's FILE reads and its
 *                 compaction reads are large sequential reads);
 *   rand4k_read   random 4 KiB-aligned 4 KiB reads, qd (default 32) in
 *                 flight, for --seconds (default 5) (the tier's BLOCK reads).
 * Buffers are registered with the ring and filled with random bytes. The
 * last line of output is one JSON object (bench/storage.sh reads it); the
 * machine and commit are recorded by the script that runs it. MB = 10^6
 * bytes. With O_DIRECT the page cache is not involved; where the
 * filesystem refuses O_DIRECT (tmpfs before Linux 6.6) the numbers are
 * page-cache numbers and "direct" is 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/io/uring.h"

enum { SEQ_IO = 1 << 20, SEQ_BATCH = 16, RAND_IO = 4096, RAND_BATCH = 4096 };
#define BUF_BYTES ((size_t)SEQ_IO * SEQ_BATCH) /* = RAND_IO * RAND_BATCH */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	switch (*end) {
	case 'k': case 'K': v *= 1024; break;
	case 'm': case 'M': v *= 1024 * 1024; break;
	case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
	default: break;
	}
	return (uint64_t)v;
}

static const char *fs_name(long type)
{
	switch ((unsigned long)type) {
	case 0xEF53: return "ext4";
	case 0x58465342: return "xfs";
	case 0x9123683E: return "btrfs";
	case 0x01021994: return "tmpfs";
	case 0x794c7630: return "overlayfs";
	case 0xF2F52010: return "f2fs";
	case 0x6969: return "nfs";
	default: return "other";
	}
}

/* Sequential pass over the file in 1 MiB requests. Returns seconds. */
static double seq_pass(st_uring_t *r, int fd, int op, uint64_t size, char *buf, st_io_t *ios)
{
	double t0 = now_s();
	for (uint64_t off = 0; off < size;) {
		unsigned n = 0;
		for (; n < SEQ_BATCH && off < size; n++, off += SEQ_IO)
			ios[n] = (st_io_t){ .fd = fd, .op = op, .off = off, .len = SEQ_IO,
					    .buf = buf + (size_t)n * SEQ_IO, .buf_index = 0 };
		int rc = st_uring_submit_wait(r, ios, n);
		if (rc < 0) {
			fprintf(stderr, "bench_ssd_raw: %s at offset %llu: %s\n",
				op == ST_IO_READ ? "read" : "write", (unsigned long long)off,
				st_strerror(rc));
			exit(1);
		}
	}
	if (op == ST_IO_WRITE) {
		int rc = st_uring_fsync(r, fd);
		if (rc < 0) {
			fprintf(stderr, "bench_ssd_raw: fsync: %s\n", st_strerror(rc));
			exit(1);
		}
	}
	return now_s() - t0;
}

int main(int argc, char **argv)
{
	const char *dir = getenv("TMPDIR");
	if (!dir || !*dir)
		dir = "/tmp";
	uint64_t size = 1ull << 30;
	unsigned qd = 32, seq_qd = 4;
	double seconds = 5;
	int no_uring = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = parse_size(argv[++i]);
		else if (!strcmp(argv[i], "--qd") && i + 1 < argc)
			qd = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seq-qd") && i + 1 < argc)
			seq_qd = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--no-uring"))
			no_uring = 1;
		else if (argv[i][0] != '-')
			dir = argv[i];
		else {
			fprintf(stderr, "usage: bench_ssd_raw [DIR] [--size BYTES[K|M|G]] [--qd N] "
				"[--seq-qd N] [--seconds S] [--no-uring]\n");
			return 2;
		}
	}
	size = size / SEQ_IO * SEQ_IO;
	if (size < SEQ_IO || qd < 1 || seq_qd < 1) {
		fprintf(stderr, "bench_ssd_raw: --size must be at least 1M, depths at least 1\n");
		return 2;
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/ssd_raw.%d.dat", dir, (int)getpid());
	int direct = 1;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	if (fd < 0 && errno == EINVAL) {
		direct = 0;
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	}
	if (fd < 0) {
		fprintf(stderr, "bench_ssd_raw: %s: %s\n", path, strerror(errno));
		return 1;
	}
	struct statfs sfs;
	const char *fs = fstatfs(fd, &sfs) == 0 ? fs_name(sfs.f_type) : "unknown";

	/* Sequential batches go out seq_qd at a time; random ones qd. Two
	 * rings keep the depths honest. */
	st_uring_t *rs, *rr;
	if (st_uring_create(&rs, seq_qd, no_uring) < 0 || st_uring_create(&rr, qd, no_uring) < 0) {
		fprintf(stderr, "bench_ssd_raw: io_uring setup failed\n");
		return 1;
	}
	char *buf;
	if (posix_memalign((void **)&buf, 4096, BUF_BYTES)) {
		fprintf(stderr, "bench_ssd_raw: out of memory\n");
		return 1;
	}
	uint64_t seed = 12345;
	for (size_t i = 0; i < BUF_BYTES; i += 8) {
		uint64_t v = rnd(&seed);
		memcpy(buf + i, &v, 8);
	}
	struct iovec iov = { buf, BUF_BYTES };
	st_uring_register(rs, &iov, 1);
	st_uring_register(rr, &iov, 1);
	int reg = st_uring_registered(rs) && st_uring_registered(rr);
	st_io_t *ios = malloc(sizeof *ios * RAND_BATCH);

	fprintf(stderr, "bench_ssd_raw: %s (%s, %s), %llu MiB\n", path, fs,
		direct ? "O_DIRECT" : "buffered", (unsigned long long)(size >> 20));
	double tw = seq_pass(rs, fd, ST_IO_WRITE, size, buf, ios);
	double tr = seq_pass(rs, fd, ST_IO_READ, size, buf, ios);

	uint64_t blocks = size / RAND_IO, done = 0;
	double t0 = now_s(), t = 0;
	while (t < seconds) {
		for (unsigned i = 0; i < RAND_BATCH; i++)
			ios[i] = (st_io_t){ .fd = fd, .op = ST_IO_READ,
					    .off = rnd(&seed) % blocks * RAND_IO, .len = RAND_IO,
					    .buf = buf + (size_t)i * RAND_IO, .buf_index = 0 };
		int rc = st_uring_submit_wait(rr, ios, RAND_BATCH);
		if (rc < 0) {
			fprintf(stderr, "bench_ssd_raw: random read: %s\n", st_strerror(rc));
			return 1;
		}
		done += RAND_BATCH;
		t = now_s() - t0;
	}
	close(fd);
	unlink(path);

	struct utsname u;
	uname(&u);
	double mb = (double)size / 1e6;
	printf("{\"bench\": \"ssd_raw\", \"dir\": \"%s\", \"fs\": \"%s\", \"direct\": %d, "
	       "\"uring\": %d, \"registered\": %d, \"file_bytes\": %llu, \"seq_qd\": %u, "
	       "\"qd\": %u, \"seq1m_write_mb_s\": %.1f, \"seq1m_read_mb_s\": %.1f, "
	       "\"rand4k_read_iops\": %.0f, \"rand4k_read_mb_s\": %.1f, \"kernel\": \"%s\", "
	       "\"cores\": %ld}\n",
	       dir, fs, direct, st_uring_is_uring(rr), reg, (unsigned long long)size, seq_qd, qd,
	       mb / tw, mb / tr, (double)done / t, (double)done * RAND_IO / 1e6 / t, u.release,
	       sysconf(_SC_NPROCESSORS_ONLN));
	st_uring_destroy(rs);
	st_uring_destroy(rr);
	free(ios);
	free(buf);
	return 0;
}
