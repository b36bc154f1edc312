/*
 * ssd_recover.c — the SSD tier's directory scan and recovery, run by
 * st_ssd_open (ssd.h, "Recovery").
 *
 * The scan removes every "<seq>.tmp" (a crash mid-write: the writer renames
 * a file to .sst only once it is whole and fsynced) and, for a fresh store,
 * every .sst too. Recovery then reads each .sst in seq order, checks its
 * header and every record (checksum), and keeps for each key the record
 * with the highest lsn (a compaction copy keeps its source's lsn, so when a
 * crash left both, either holds the same data); every other record counts
 * stale in its file. Files that cannot be used (unreadable, bad header)
 * are reported and left on disk untouched; a bad record in a complete file
 * is damage on the disk, reported and skipped. next_seq continues after
 * the highest seq seen (.tmp included), next_lsn after the highest lsn.
 *
 * Threads. Runs once, in st_ssd_open's thread, before the writer and the
 * compactor start: nothing else can see the store, so the file table is
 * built without mu, and the owner hears of every recovered key (the
 * recovered callback) before the compactor can relocate one. It reads
 * through the writer's ring, which is not in use yet.
 *
 * Lock order. Takes no lock.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/err.h"
#include "runtime/io/uring.h"
#include "runtime/store/ssd_internal.h"

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
	int fd = st__ssd_open_at(s, name, O_RDONLY, 0);
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
	if (rc < 0 || !st__ssd_header_ok(h, seq)) {
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
	uint64_t length = round_up(rec_off(s, n), BLK);
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
	struct sfile *f = st__ssd_new_file(s, seq);
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
				 (unsigned long long)rec_off(s, i), (unsigned long long)get64(rec));
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
			struct sfile *old = st__ssd_find_file(s, (uint32_t)(m->loc[j] >> 32));
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
	for (size_t i = 0; i < s->nfiles; i++)
		st__ssd_count_on_disk(s, s->files[i]);
	return rc;
}

int st__ssd_recover(st_ssd_t *s, int fresh,
		    void (*recovered)(void *arg, uint64_t key, st_ssd_loc_t loc), void *arg)
{
	struct rmap m = { 0 };
	int rc = recover(s, fresh, &m);
	if (rc >= 0) {
		for (size_t i = 0; i < m.cap; i++)
			if (m.used[i])
				recovered(arg, m.key[i], m.loc[i]);
	}
	rmap_free(&m);
	return rc;
}
