/*
 * gen.c — synthetic Criteo-like data (see gen.h for the model of a row).
 *
 * Determinism: a row is a pure function of (seed, row index). Its randomness
 * comes from a splitmix64 stream whose start is a hash of both, and the hidden
 * per-value weights and printed values are hashes of (seed, slot, value
 * index). Nothing depends on which thread made a row or when.
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

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/read/read.h"
#include "runtime/err.h"

/* ---- hashing and the counter-based RNG ---------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static inline uint64_t hash3(uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t h = mix64(seed ^ UINT64_C(0x9e3779b97f4a7c15));
	h = mix64(h ^ (a * UINT64_C(0xd6e8feb86659fd93)));
	return mix64(h ^ b ^ UINT64_C(0xa0761d6478bd642f));
}

typedef struct { uint64_t s; } rng_t;

static inline uint64_t rng_next(rng_t *r)
{
	r->s += UINT64_C(0x9e3779b97f4a7c15);
	return mix64(r->s);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rng_unif(rng_t *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Approximately N(0, 1) from 64 random bits: Irwin-Hall sum of four 16-bit
 * uniforms, rescaled. Its tails stop at ±3.46; that is fine for synthetic
 * weights and far cheaper than Box-Muller on the per-value hot path. */
static inline double normal_from_bits(uint64_t h)
{
	double s = (double)(h & 0xffff) + (double)((h >> 16) & 0xffff) +
		   (double)((h >> 32) & 0xffff) + (double)(h >> 48);
	return (s * (1.0 / 65536.0) - 2.0) * 1.7320508075688772;
}

/* ---- Zipf by rejection-inversion (Hörmann & Derflinger 1996) ------------ */

typedef struct {
	double s, n;           /* exponent, number of elements */
	double h_x1, h_n, sdiv;
	int ipow;              /* 1/(1-s) when it is a small integer, else 0 */
} zipf_t;

static double helper1(double x)
{
	return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

static double helper2(double x)
{
	return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

static inline double zipf_h(const zipf_t *z, double x)
{
	return exp(-z->s * log(x));
}

static inline double zipf_hint(const zipf_t *z, double x)
{
	double lx = log(x);
	return helper2((1.0 - z->s) * lx) * lx;
}

/* y^e for a small nonzero integer e, by squaring. */
static inline double ipow(double y, int e)
{
	double r = 1.0, b = e < 0 ? 1.0 / y : y;
	unsigned n = (unsigned)(e < 0 ? -e : e);
	while (n) {
		if (n & 1)
			r *= b;
		b *= b;
		n >>= 1;
	}
	return r;
}

static inline double zipf_hint_inv(const zipf_t *z, double x)
{
	double t = x * (1.0 - z->s);
	if (t < -1.0)
		t = -1.0;
	/* exp(log1p(t) / (1 - s)) is (1 + t)^(1/(1-s)); for the usual
	 * exponents (1.1, 1.2, 1.5, 2) that power is an integer and a few
	 * multiplications replace log1p + exp, the generator's main cost. */
	if (z->ipow && t > -1.0)
		return ipow(1.0 + t, z->ipow);
	return exp(helper1(t) * x);
}

static void zipf_init(zipf_t *z, double s, uint64_t n)
{
	z->s = s;
	z->n = (double)n;
	z->ipow = 0;
	if (s != 1.0) {
		double q = 1.0 / (1.0 - s), r = nearbyint(q);
		if (fabs(q - r) < 1e-9 && fabs(r) <= 64)
			z->ipow = (int)r;
	}
	z->h_x1 = zipf_hint(z, 1.5) - 1.0;
	z->h_n = zipf_hint(z, z->n + 0.5);
	z->sdiv = 2.0 - zipf_hint_inv(z, zipf_hint(z, 2.5) - zipf_h(z, 2.0));
}

/* Returns k in [1, n] with P(k) proportional to k^-s. */
static inline uint64_t zipf_sample(const zipf_t *z, rng_t *r)
{
	for (;;) {
		double u = z->h_n + rng_unif(r) * (z->h_x1 - z->h_n);
		double x = zipf_hint_inv(z, u);
		double kf = floor(x + 0.5);
		if (kf < 1.0)
			kf = 1.0;
		else if (kf > z->n)
			kf = z->n;
		if (kf - x <= z->sdiv || u >= zipf_hint(z, kf + 0.5) - zipf_h(z, kf))
			return (uint64_t)kf;
	}
}

/* ---- the data model ------------------------------------------------------ */

/* Spread of the hidden weight of each slot's values: the first slots carry
 * most of the signal, the last ones are pure noise (sigma 0). Scaled by
 * CAT_SCALE, tuned (zipf 1.1, vocab 1e6) so a hashed-key AdaGrad LR reaches a
 * progressive AUC of ~0.77 in one pass over 2M rows while the Bayes AUC (the
 * true logit as score) is ~0.835: values in the Zipf tail are too rare to
 * learn, and that gap is what more data and better models can close. */
static const double cat_sigma[ST_GEN_N_CAT] = {
	1.0, 0.9, 0.8, 0.7, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3, 0.3, 0.25,
	0.25, 0.2, 0.2, 0.15, 0.15, 0.1, 0.1, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0,
};
#define CAT_SCALE 0.7

/* Probability that a slot is empty: small for most, large for a few. */
static const double cat_missing_p[ST_GEN_N_CAT] = {
	0.0, 0.0, 0.02, 0.02, 0.0, 0.1, 0.0, 0.0, 0.02, 0.0, 0.0, 0.03, 0.0,
	0.0, 0.0, 0.03, 0.0, 0.0, 0.35, 0.35, 0.0, 0.02, 0.4, 0.0, 0.02, 0.4,
};

/* Integer fields: value = floor(exp(mu + sd * (0.7 z + 0.71 e))) with z the
 * row's latent and e private noise; present with probability dense_p. The
 * hidden linear term is dense_c[j] * log1p(max(x, 0)). */
static const double dense_mu[ST_GEN_N_DENSE] = {
	0.5, 2.0, 1.5, 1.8, 7.5, 3.5, 1.5, 2.5, 4.0, 0.2, 1.0, 0.1, 1.8,
};
static const double dense_sd[ST_GEN_N_DENSE] = {
	1.0, 1.4, 1.2, 0.9, 1.8, 1.6, 1.3, 1.0, 1.3, 0.6, 0.9, 0.8, 1.0,
};
static const double dense_p[ST_GEN_N_DENSE] = {
	0.55, 1.0, 0.8, 0.78, 0.97, 0.78, 0.96, 1.0, 0.96, 0.55, 0.96, 0.23, 0.78,
};
static const double dense_c[ST_GEN_N_DENSE] = {
	0.20, -0.08, 0.0, 0.12, -0.04, 0.06, 0.15, 0.0, -0.10, 0.25, 0.05, 0.0, -0.08,
};

#define TARGET_CTR 0.25
#define CALIB_ROWS 16384
#define CALIB_BASE (UINT64_C(3) << 62)

struct st_gen {
	st_gen_opts_t o;
	zipf_t zipf;
	double b0;
};

static inline double sigmoid(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

/* Everything about a row except b0 and the label; returns the logit without b0. */
static double gen_features(const st_gen_t *g, uint64_t row, st_gen_row_t *r, rng_t *rng)
{
	uint64_t seed = g->o.seed;
	rng->s = hash3(seed, 0x726f77 /* "row" */, row);
	double logit = 0.0;

	double z = normal_from_bits(rng_next(rng));
	r->dense_missing = 0;
	for (int j = 0; j < ST_GEN_N_DENSE; j++) {
		uint64_t bits = rng_next(rng);
		double u = (double)(bits >> 40) * 0x1.0p-24;
		if (u >= dense_p[j]) {
			r->dense_missing |= 1u << j;
			r->dense[j] = 0;
			continue;
		}
		int64_t x;
		if (j == 1 && (bits & 0xff) < 38) {
			/* I2 in Criteo holds small negative values (-1 mostly). */
			x = -1 - (int64_t)((bits >> 8) & 3) / 3;
		} else {
			double e = normal_from_bits(rng_next(rng));
			double lv = dense_mu[j] + dense_sd[j] * (0.7 * z + 0.71 * e);
			if (lv > 20.0)
				lv = 20.0;
			x = (int64_t)floor(exp(lv)) - 1;
		}
		r->dense[j] = x;
		if (dense_c[j] != 0.0 && x > 0)
			logit += dense_c[j] * log1p((double)x);
	}

	r->cat_missing = 0;
	for (int s = 0; s < ST_GEN_N_CAT; s++) {
		uint64_t v = zipf_sample(&g->zipf, rng) - 1;
		double u = rng_unif(rng);
		r->cat_idx[s] = v;
		uint64_t h = hash3(seed, (uint64_t)s + 1, v);
		r->cat[s] = (uint32_t)h;
		if (u < cat_missing_p[s]) {
			r->cat_missing |= 1u << s;
			continue;
		}
		if (cat_sigma[s] > 0.0) {
			uint64_t hw = mix64(h ^ UINT64_C(0x5851f42d4c957f2d));
			logit += CAT_SCALE * cat_sigma[s] * normal_from_bits(hw);
		}
	}
	return logit;
}

void st_gen_row(const st_gen_t *g, uint64_t row, st_gen_row_t *r)
{
	rng_t rng;
	double l = gen_features(g, row, r, &rng) + g->b0;
	r->logit = l;
	r->label = rng_unif(&rng) < sigmoid(l);
}

/* Finds b0 with mean sigmoid(b0 + logit) == TARGET_CTR over a fixed sample of
 * rows from a stream of its own, by bisection (the mean is monotone in b0). */
static double calibrate_b0(const st_gen_t *g, double *tmp)
{
	st_gen_row_t r;
	rng_t rng;
	for (int i = 0; i < CALIB_ROWS; i++)
		tmp[i] = gen_features(g, CALIB_BASE + (uint64_t)i, &r, &rng);
	double lo = -30.0, hi = 30.0;
	for (int it = 0; it < 60; it++) {
		double mid = 0.5 * (lo + hi), m = 0.0;
		for (int i = 0; i < CALIB_ROWS; i++)
			m += sigmoid(mid + tmp[i]);
		if (m / CALIB_ROWS < TARGET_CTR)
			lo = mid;
		else
			hi = mid;
	}
	return 0.5 * (lo + hi);
}

int st_gen_create(st_gen_t **out, const st_gen_opts_t *o)
{
	if (o->rows < 0 || o->eval_rows < 0 || o->files < 1 || !(o->zipf > 0.0) ||
	    o->vocab < 1 || o->vocab > (UINT64_C(1) << 52)) {
		st_error("gen: bad options (rows %lld, eval_rows %lld, files %d, zipf %g, vocab %llu): "
			 "need rows, eval_rows >= 0, files >= 1, zipf > 0, 1 <= vocab <= 2^52",
			 (long long)o->rows, (long long)o->eval_rows, o->files, o->zipf,
			 (unsigned long long)o->vocab);
		return ST_EINVAL;
	}
	st_gen_t *g = calloc(1, sizeof *g);
	double *tmp = malloc(sizeof(double) * CALIB_ROWS);
	if (!g || !tmp) {
		free(g);
		free(tmp);
		return ST_ENOMEM;
	}
	g->o = *o;
	g->o.dir = NULL;
	zipf_init(&g->zipf, o->zipf, o->vocab);
	g->b0 = calibrate_b0(g, tmp);
	free(tmp);
	*out = g;
	return ST_OK;
}

void st_gen_destroy(st_gen_t *g)
{
	free(g);
}

/* ---- text ---------------------------------------------------------------- */

static const char hexd[] = "0123456789abcdef";

static inline char *put_hex8(char *p, uint32_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = hexd[v & 15];
		v >>= 4;
	}
	return p + 8;
}

static inline char *put_int(char *p, int64_t v)
{
	char tmp[24];
	int n = 0;
	uint64_t u;
	if (v < 0) {
		*p++ = '-';
		u = (uint64_t)0 - (uint64_t)v;
	} else {
		u = (uint64_t)v;
	}
	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	while (n)
		*p++ = tmp[--n];
	return p;
}

int st_gen_format(const st_gen_row_t *r, char *buf)
{
	char *p = buf;
	*p++ = r->label ? '1' : '0';
	for (int j = 0; j < ST_GEN_N_DENSE; j++) {
		*p++ = '\t';
		if (!(r->dense_missing & (1u << j)))
			p = put_int(p, r->dense[j]);
	}
	for (int s = 0; s < ST_GEN_N_CAT; s++) {
		*p++ = '\t';
		if (!(r->cat_missing & (1u << s)))
			p = put_hex8(p, r->cat[s]);
	}
	*p++ = '\n';
	return (int)(p - buf);
}

/* ---- batches ------------------------------------------------------------- */

int st_gen_fill_batch(const st_gen_t *g, uint64_t first_row, st_batch_t *b,
		      uint32_t n)
{
	if (b->n_dense != ST_GEN_N_DENSE || b->n_slots != ST_GEN_N_CAT ||
	    n > b->cap - b->n)
		return ST_EINVAL;
	int rc = st_batch_reserve_keys(b, n * ST_GEN_N_CAT);
	if (rc < 0)
		return rc;
	st_gen_row_t r;
	char hex[8];
	for (uint32_t i = 0; i < n; i++) {
		st_gen_row(g, first_row + i, &r);
		uint32_t e = b->n;
		b->labels[e] = (float)r.label;
		float *d = b->dense + (size_t)e * ST_GEN_N_DENSE;
		for (int j = 0; j < ST_GEN_N_DENSE; j++)
			d[j] = (float)r.dense[j];
		uint32_t k = b->row_off[e];
		for (int s = 0; s < ST_GEN_N_CAT; s++) {
			if (r.cat_missing & (1u << s))
				continue;
			put_hex8(hex, r.cat[s]);
			b->keys[k] = st_read_key((uint32_t)s, hex, 8);
			b->key_slot[k] = (uint16_t)s;
			b->key_val[k] = 1.0f;
			k++;
		}
		b->row_off[e + 1] = k;
		b->n = e + 1;
	}
	return ST_OK;
}

/* ---- files ---------------------------------------------------------------- */

#define CHUNK_ROWS 16384

typedef struct {
	int file;          /* index into files[]; files[n_train] is eval.tsv */
	uint64_t first;    /* first row index */
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

	char *buf = malloc((size_t)CHUNK_ROWS * ST_GEN_MAX_LINE);
	if (!buf) {
		pthread_mutex_lock(&w->mu);
		if (!w->err)
			w->err = ST_ENOMEM;
		pthread_cond_broadcast(&w->turn_cv);
		pthread_mutex_unlock(&w->mu);
		return NULL;
	}
	st_gen_row_t r;
	for (;;) {
		pthread_mutex_lock(&w->mu);
		int k = w->err ? w->n_chunks : w->next_take++;
		pthread_mutex_unlock(&w->mu);
		if (k >= w->n_chunks)
			break;
		const chunk_t *c = &w->chunks[k];
		size_t len = 0;
		for (uint32_t i = 0; i < c->n; i++) {
			st_gen_row(w->g, c->first + i, &r);
			len += (size_t)st_gen_format(&r, buf + len);
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

/* Appends the chunks of rows [first, first+rows) of file f. */
static void add_chunks(chunk_t *chunks, int *n, int f, uint64_t first, int64_t rows)
{
	int64_t done = 0;
	do {
		int64_t m = rows - done;
		if (m > CHUNK_ROWS)
			m = CHUNK_ROWS;
		chunk_t *c = &chunks[(*n)++];
		c->file = f;
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
	w.n_files = o->files + (o->eval_rows > 0);
	w.files = st_xcalloc((size_t)w.n_files, sizeof *w.files);
	for (int f = 0; f < w.n_files; f++) {
		char name[64];
		if (f < o->files)
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
	for (int f = 0; f < o->files; f++) {
		int64_t a = o->rows * f / o->files, b = o->rows * (f + 1) / o->files;
		add_chunks(w.chunks, &w.n_chunks, f, (uint64_t)a, b - a);
	}
	if (o->eval_rows > 0)
		add_chunks(w.chunks, &w.n_chunks, o->files, ST_GEN_EVAL_BASE, o->eval_rows);
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
