/*
 * gen_write.c — st_gen_write: the synthetic data set as TSV files (train
 * files or one file per day, and eval.tsv), written by several threads in
 * one deterministic order. The rows themselves come from gen.c.
 *
 * Threads of st_gen_write ("st-gen-<n>"): the output is cut into chunks of at
 * most CHUNK_ROWS rows that never span two files, numbered in output order.
 * Workers take chunk numbers from a shared counter, format a chunk into their
 * own buffer without any lock, then wait for their turn (next_write == chunk)
 * and append it to its file. The turn makes writes, file opens/renames and
 * progress calls serial and ordered without holding the mutex during I/O.
 * One lock (gen->mu); it is never held while writing or calling progress.
 */
#include "ops/gen/gen.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/err.h"

/* ---- files ---------------------------------------------------------------- */

#define CHUNK_ROWS 16384

typedef struct {
	int file;          /* index into files[]; files[n_train] is eval.tsv */
	int day;           /* whose rows (0 without days) */
	uint64_t first;    /* first row index within the day */
	uint32_t n;
	int first_of_file, last_of_file;
} chunk_t;

typedef struct {
	char *tmp, *final;
} fname_t;

typedef struct {
	const st_gen_t *g;
	chunk_t *chunks;
	int n_chunks;
	fname_t *files;
	int n_files;
	void (*progress)(int64_t, int64_t, void *);
	void *arg;
	int64_t rows_total, rows_done;

	pthread_mutex_t mu;
	pthread_cond_t turn_cv;
	int next_take;     /* under mu */
	int next_write;    /* under mu */
	int err;           /* under mu; first error */
	int fd;            /* only touched by the thread whose turn it is */
} writer_t;

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Runs with the turn held: appends one formatted chunk to its file, opening
 * and renaming as needed. Returns ST_OK or ST_EIO (logged). */
static int emit_chunk(writer_t *w, const chunk_t *c, const char *buf, size_t len)
{
	const fname_t *f = &w->files[c->file];
	if (c->first_of_file) {
		w->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (w->fd < 0) {
			st_error("gen: cannot create %s: %s", f->tmp, strerror(errno));
			return ST_EIO;
		}
	}
	int rc = write_all(w->fd, buf, len);
	if (rc < 0) {
		st_error("gen: write to %s failed: %s", f->tmp, strerror(-rc));
		return ST_EIO;
	}
	if (c->last_of_file) {
		int fd = w->fd;
		w->fd = -1;
		if (close(fd) < 0) {
			st_error("gen: closing %s failed: %s", f->tmp, strerror(errno));
			return ST_EIO;
		}
		if (rename(f->tmp, f->final) < 0) {
			st_error("gen: cannot rename %s to %s: %s", f->tmp, f->final,
				 strerror(errno));
			return ST_EIO;
		}
	}
	w->rows_done += c->n;
	if (w->progress)
		w->progress(w->rows_done, w->rows_total, w->arg);
	return ST_OK;
}

typedef struct {
	writer_t *w;
	int idx;
	pthread_t tid;
} worker_t;

static void *writer_main(void *arg)
{
	worker_t *self = arg;
	writer_t *w = self->w;
	char name[16];
	snprintf(name, sizeof name, "st-gen-%d", self->idx);
	pthread_setname_np(pthread_self(), name);

	/* A multi-hot line can be st_gen_max_line long, but averages far less:
	 * the buffer starts at the single-hot size and grows as needed. */
	size_t cap = (size_t)CHUNK_ROWS * ST_GEN_MAX_LINE, maxl = st_gen_max_line(w->g);
	char *buf = malloc(cap);
	uint64_t *idx = maxl > ST_GEN_MAX_LINE
		? malloc(sizeof(uint64_t) * ST_GEN_N_CAT * ST_GEN_MAX_LIST) : NULL;
	if (!buf || (maxl > ST_GEN_MAX_LINE && !idx)) {
		free(buf);
		free(idx);
		buf = NULL;
		pthread_mutex_lock(&w->mu);
		if (!w->err)
			w->err = ST_ENOMEM;
		pthread_cond_broadcast(&w->turn_cv);
		pthread_mutex_unlock(&w->mu);
		return NULL;
	}
	st_gen_row_t r;
	r.list_idx = idx;
	for (;;) {
		pthread_mutex_lock(&w->mu);
		int k = w->err ? w->n_chunks : w->next_take++;
		pthread_mutex_unlock(&w->mu);
		if (k >= w->n_chunks)
			break;
		const chunk_t *c = &w->chunks[k];
		size_t len = 0;
		int oom = 0;
		for (uint32_t i = 0; i < c->n && !oom; i++) {
			if (len + maxl > cap) {
				char *nb = realloc(buf, cap * 2);
				if (!nb) {
					oom = 1;
					break;
				}
				buf = nb;
				cap *= 2;
			}
			st_gen_day_row(w->g, c->day, c->first + i, &r);
			len += (size_t)(idx ? st_gen_format_list(w->g, &r, buf + len)
					    : st_gen_format(&r, buf + len));
		}
		if (oom) {
			pthread_mutex_lock(&w->mu);
			if (!w->err)
				w->err = ST_ENOMEM;
			pthread_cond_broadcast(&w->turn_cv);
			pthread_mutex_unlock(&w->mu);
			break;
		}
		pthread_mutex_lock(&w->mu);
		while (w->next_write != k && !w->err)
			pthread_cond_wait(&w->turn_cv, &w->mu);
		int stop = w->err != 0;
		pthread_mutex_unlock(&w->mu);
		if (stop)
			break;
		int rc = emit_chunk(w, c, buf, len);
		pthread_mutex_lock(&w->mu);
		if (rc < 0 && !w->err)
			w->err = rc;
		w->next_write++;
		pthread_cond_broadcast(&w->turn_cv);
		pthread_mutex_unlock(&w->mu);
		if (rc < 0)
			break;
	}
	free(buf);
	free(idx);
	return NULL;
}

static int mkdir_p(const char *dir)
{
	char *p = st_xstrdup(dir);
	size_t n = strlen(p);
	int rc = ST_OK;
	for (size_t i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		char c = p[i];
		p[i] = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST) {
			st_error("gen: cannot create directory %s: %s", p, strerror(errno));
			rc = ST_EIO;
			break;
		}
		p[i] = c;
	}
	free(p);
	return rc;
}

static char *path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = st_xmalloc(n);
	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* Appends the chunks of rows [first, first+rows) of day `day` to file f. */
static void add_chunks(chunk_t *chunks, int *n, int f, int day, uint64_t first, int64_t rows)
{
	int64_t done = 0;
	do {
		int64_t m = rows - done;
		if (m > CHUNK_ROWS)
			m = CHUNK_ROWS;
		chunk_t *c = &chunks[(*n)++];
		c->file = f;
		c->day = day;
		c->first = first + (uint64_t)done;
		c->n = (uint32_t)m;
		c->first_of_file = done == 0;
		done += m;
		c->last_of_file = done == rows;
	} while (done < rows);
}

int st_gen_write(const st_gen_opts_t *o,
		 void (*progress)(int64_t rows_done, int64_t rows_total, void *arg),
		 void *arg)
{
	if (!o->dir || !*o->dir) {
		st_error("gen: no output directory given");
		return ST_EINVAL;
	}
	if (o->days > 0 && (o->files != 1 || o->rows < o->days)) {
		st_error("gen: with days (%d) each day is one file day-NNN.tsv of at least "
			 "one row: need files = 1 (got %d) and rows >= days (got %lld)",
			 o->days, o->files, (long long)o->rows);
		return ST_EINVAL;
	}
	st_gen_t *g;
	int rc = st_gen_create(&g, o);
	if (rc < 0)
		return rc;
	rc = mkdir_p(o->dir);
	if (rc < 0) {
		st_gen_destroy(g);
		return rc;
	}

	writer_t w;
	memset(&w, 0, sizeof w);
	w.g = g;
	w.progress = progress;
	w.arg = arg;
	w.fd = -1;
	/* With days, the train files are the days. */
	int n_train = o->days > 0 ? o->days : o->files;
	w.n_files = n_train + (o->eval_rows > 0);
	w.files = st_xcalloc((size_t)w.n_files, sizeof *w.files);
	for (int f = 0; f < w.n_files; f++) {
		char name[64];
		if (f < n_train && o->days > 0)
			snprintf(name, sizeof name, "day-%03d.tsv", f);
		else if (f < n_train)
			snprintf(name, sizeof name, "train-%05d.tsv", f);
		else
			snprintf(name, sizeof name, "eval.tsv");
		char tname[80];
		snprintf(tname, sizeof tname, ".%s.tmp", name);
		w.files[f].final = path_join(o->dir, name);
		w.files[f].tmp = path_join(o->dir, tname);
	}
	/* Upper bound: every file needs ceil(rows/CHUNK) chunks, at least one. */
	size_t max_chunks = (size_t)w.n_files +
			    (size_t)((o->rows + o->eval_rows) / CHUNK_ROWS) + (size_t)w.n_files;
	w.chunks = malloc(sizeof(chunk_t) * max_chunks);
	if (!w.chunks) {
		rc = ST_ENOMEM;
		goto out;
	}
	/* Without days, file f holds rows [a, b) of the one stream; with days,
	 * day f holds rows [0, b - a) of its own stream. */
	for (int f = 0; f < n_train; f++) {
		int64_t a = o->rows * f / n_train, b = o->rows * (f + 1) / n_train;
		if (o->days > 0)
			add_chunks(w.chunks, &w.n_chunks, f, f, 0, b - a);
		else
			add_chunks(w.chunks, &w.n_chunks, f, 0, (uint64_t)a, b - a);
	}
	if (o->eval_rows > 0)
		add_chunks(w.chunks, &w.n_chunks, n_train, o->days > 0 ? o->days - 1 : 0,
			   ST_GEN_EVAL_BASE, o->eval_rows);
	w.rows_total = o->rows + o->eval_rows;

	int nt = o->threads;
	if (nt <= 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		nt = c > 0 ? (int)c : 1;
	}
	if (nt > w.n_chunks)
		nt = w.n_chunks;
	if (nt > 256)
		nt = 256;
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.turn_cv, NULL);
	worker_t *ws = st_xcalloc((size_t)nt, sizeof *ws);
	for (int i = 0; i < nt; i++) {
		ws[i].w = &w;
		ws[i].idx = i;
		if (pthread_create(&ws[i].tid, NULL, writer_main, &ws[i]) != 0)
			st_die("gen: cannot start writer thread %d", i);
	}
	for (int i = 0; i < nt; i++)
		pthread_join(ws[i].tid, NULL);
	free(ws);
	pthread_cond_destroy(&w.turn_cv);
	pthread_mutex_destroy(&w.mu);
	rc = w.err;
	if (rc < 0) {
		/* Leave nothing that looks like output of this run behind. */
		if (w.fd >= 0)
			close(w.fd);
		for (int f = 0; f < w.n_files; f++)
			unlink(w.files[f].tmp);
	}
out:
	for (int f = 0; f < w.n_files; f++) {
		free(w.files[f].tmp);
		free(w.files[f].final);
	}
	free(w.files);
	free(w.chunks);
	st_gen_destroy(g);
	return rc;
}
