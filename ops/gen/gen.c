/*
 * gen.c — synthetic Criteo-like data (see gen.h for the model of a row).
 *
 * Determinism: a row is a pure function of (seed, day, row index). Its
 * randomness comes from a splitmix64 stream whose start is a hash of the
 * three (day 0 hashes exactly as before days existed, so days = 0 output is
 * unchanged), and the hidden per-value weights and printed values are hashes
 * of (seed, slot, value index) and, for drift, of the day. Nothing depends on
 * which thread made a row or when.
 *
 * Drift costs no memory: a weight of day d is its day-0 weight carried
 * through d AR(1) steps whose innovations are a splitmix64 stream keyed by
 * the value's hash, so every weight is recomputed on demand. b0 is
 * calibrated once per day in st_gen_create on one fixed sample of features
 * (ranks and dense values drawn once, mapped through each day's popularity
 * and weighted by each day's model). The weights of fixed-popularity slots
 * are stepped one day at a time (O(D) for D days); those of the rotating
 * slots change value every day and are recomputed, which is O(D^2) but small
 * (0.25 s for 64 days, 3 s for 365 on one core).
 *
 * Files (st_gen_write, its threads): gen_write.c.
 */
#include "ops/gen/gen.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gen/conv.h"
#include "ops/gen/cross.h"
#include "ops/gen/history.h"
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
/* Days after day 0 calibrate on the first CALIB_ROWS_DAY rows of the
 * sample: 4096 rows put the day's positive rate within about +-0.005 of the
 * target and keep creating a generator of many days fast. */
#define CALIB_ROWS_DAY 4096
#define CALIB_BASE (UINT64_C(3) << 62)

/* Slots whose popularity drifts from day to day (see gen.h). */
#define ROTATES(s) (((s) & 3) == 3)

struct st_gen {
	st_gen_opts_t o;
	zipf_t zipf;
	int n_days;           /* max(days, 1) */
	double keep, fresh;   /* sqrt(1 - drift), sqrt(drift) */
	double coef[ST_GEN_N_CAT];   /* per slot: fresh * sigma * sqrt(3) / 65536 */
	double *b0;           /* [n_days] */
};

static inline double sigmoid(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

/* Start of the random stream of a row of day `day`; day 0 keeps the key of
 * the generator without days. */
static inline uint64_t row_key(uint64_t seed, int day, uint64_t row)
{
	return hash3(seed, 0x726f77 /* "row" */ ^ ((uint64_t)day << 32), row);
}

/* How many ranks the rotating slots have shifted by on day `day`. */
static inline uint64_t day_shift(const st_gen_t *g, int day)
{
	if (day == 0)
		return 0;
	return (uint64_t)floor(10.0 * g->o.drift * (double)day + 1e-9) % g->o.vocab;
}

/* Value index of Zipf rank r (0-based) of slot s on a day shifted by `shift`. */
static inline uint64_t rank_value(const st_gen_t *g, int s, uint64_t r, uint64_t shift)
{
	if (!shift || !ROTATES(s))
		return r;
	return r >= shift ? r - shift : r + (g->o.vocab - shift);
}

/* Day-0 weight of the value whose hash3(seed, slot + 1, v) is h. */
static inline double weight0(int s, uint64_t h)
{
	return CAT_SCALE * cat_sigma[s] * normal_from_bits(mix64(h ^ UINT64_C(0x5851f42d4c957f2d)));
}

/* One AR(1) step: the weight of day `day` from the one of day - 1. The
 * innovation of (value, day) is normal_from_bits of element `day` of a
 * splitmix64 stream keyed by the value's hash (independent of the day-0
 * weight's bits), times sqrt(drift) * sigma: g->coef[s] folds those and
 * normal_from_bits's scale, and the four 16-bit fields are summed as
 * integers two at a time. This is the generator's hot loop with days. */
static inline double drift_step(const st_gen_t *g, int s, uint64_t h, int day, double w)
{
	uint64_t k = (h ^ UINT64_C(0x2545f4914f6cdd1d)) + (uint64_t)day * UINT64_C(0x9e3779b97f4a7c15);
	uint64_t b = mix64(k);
	uint64_t t = (b & UINT64_C(0x0000ffff0000ffff)) + ((b >> 16) & UINT64_C(0x0000ffff0000ffff));
	int64_t sum = (int64_t)((t & 0xffffffffu) + (t >> 32)) - 131072;
	return g->keep * w + g->coef[s] * (double)sum;
}

/* Weight of day `day` of the value whose hash is h: `day` steps from day 0. */
static inline double cat_weight(const st_gen_t *g, int day, int s, uint64_t h)
{
	double w = weight0(s, h);
	if (g->fresh == 0.0)   /* drift 0: every day is day 0 */
		return w;
	for (int d = 1; d <= day; d++)
		w = drift_step(g, s, h, d, w);
	return w;
}

/* Multi-hot field s of a row whose key 0 is value v (hash h): draws the
 * list length and keys 1..n-1 (stored when r->list_idx is set) and returns
 * the field's term of the logit, sum of weights / sqrt(n) (gen.h). */
static double list_features(const st_gen_t *g, int mday, uint64_t shift, int s, uint64_t v,
			    uint64_t h, st_gen_row_t *r, rng_t *rng, int dense_only)
{
	int nk = 1 + (int)(rng_next(rng) % (uint64_t)g->o.multi_hot);
	uint64_t *idx = r->list_idx ? r->list_idx + (size_t)s * ST_GEN_MAX_LIST : NULL;
	r->n_keys[s] = (uint8_t)nk;
	double w = cat_sigma[s] > 0.0 ? cat_weight(g, mday, s, h) : 0.0;
	if (idx)
		idx[0] = v;
	for (int i = 1; i < nk; i++) {
		uint64_t vi = rank_value(g, s, zipf_sample(&g->zipf, rng) - 1, shift);
		if (idx)
			idx[i] = vi;
		if (cat_sigma[s] > 0.0)
			w += cat_weight(g, mday, s, hash3(g->o.seed, (uint64_t)s + 1, vi));
	}
	return cat_sigma[s] > 0.0 && !dense_only ? w / sqrt((double)nk) : 0.0;
}

/* The planted cross terms of a row's features (cross.h): pairs whose two
 * fields are both present. Used by gen_features and st_gen_logit alike, so
 * both add the same numbers in the same order. */
static double cross_term(const st_gen_t *g, const st_gen_row_t *r)
{
	double t = 0.0;
	for (int k = 0; k < g->o.cross; k++) {
		int a, b;
		st__gen_cross_pair(k, &a, &b);
		if (r->cat_missing & ((1u << a) | (1u << b)))
			continue;
		double za = st__gen_cross_latent(hash3(g->o.seed, (uint64_t)a + 1, r->cat_idx[a]));
		double zb = st__gen_cross_latent(hash3(g->o.seed, (uint64_t)b + 1, r->cat_idx[b]));
		t += ST_GEN_CROSS_BETA * za * zb;
	}
	return t;
}

/* Everything about a row except b0 and the label: the row's randomness comes
 * from stream day `sday`, its popularity and weights from model day `mday`
 * (the same day for rows; calibration keeps one sample across days). Returns
 * the logit without b0; with dense_only, only its dense part (cat fields are
 * still drawn, their weights left out). */
static double gen_features(const st_gen_t *g, int sday, int mday, uint64_t row,
			   st_gen_row_t *r, rng_t *rng, int dense_only)
{
	uint64_t seed = g->o.seed;
	uint64_t shift = day_shift(g, mday);
	rng->s = row_key(seed, sday, row);
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
		uint64_t v = rank_value(g, s, zipf_sample(&g->zipf, rng) - 1, shift);
		double u = rng_unif(rng);
		r->cat_idx[s] = v;
		r->n_keys[s] = 1;
		uint64_t h = hash3(seed, (uint64_t)s + 1, v);
		r->cat[s] = (uint32_t)h;
		if (u < cat_missing_p[s]) {
			r->cat_missing |= 1u << s;
			continue;
		}
		if (g->o.multi_hot) {
			logit += list_features(g, mday, shift, s, v, h, r, rng, dense_only);
			continue;
		}
		if (cat_sigma[s] > 0.0 && !dense_only)
			logit += cat_weight(g, mday, s, h);
	}
	/* Without --cross not even 0.0 is added: default output byte-identical. */
	if (g->o.cross && !dense_only)
		logit += cross_term(g, r);
	r->has_hist = g->o.history > 0;
	if (r->has_hist) {
		r->hist_seed = seed;
		double t = st__gen_history(seed, row, g->o.history, &r->n_hist, r->hist_cat,
					   &r->cand_cat);
		if (!dense_only)
			logit += t;
	}
	return logit;
}

void st_gen_day_row(const st_gen_t *g, int day, uint64_t row, st_gen_row_t *r)
{
	assert(day >= 0 && day < g->n_days);
	rng_t rng;
	double l = gen_features(g, day, day, row, r, &rng, 0) + g->b0[day];
	r->logit = l;
	r->label = rng_unif(&rng) < sigmoid(l);
	r->conv = (int8_t)(g->o.labels > 1 ? st__gen_conv(g->o.seed, day, row, r->label,
				l - g->b0[day], r->cat, r->cat_missing) : -1);
}

void st_gen_row(const st_gen_t *g, uint64_t row, st_gen_row_t *r)
{
	st_gen_day_row(g, 0, row, r);
}

double st_gen_logit(const st_gen_t *g, int day, const st_gen_row_t *r)
{
	assert(day >= 0 && day < g->n_days);
	/* The same additions in the same order as gen_features, so that the
	 * row's own day gives back r->logit exactly. */
	double l = 0.0;
	for (int j = 0; j < ST_GEN_N_DENSE; j++)
		if (!(r->dense_missing & (1u << j)) && dense_c[j] != 0.0 && r->dense[j] > 0)
			l += dense_c[j] * log1p((double)r->dense[j]);
	for (int s = 0; s < ST_GEN_N_CAT; s++) {
		if ((r->cat_missing & (1u << s)) || cat_sigma[s] <= 0.0)
			continue;
		if (!g->o.multi_hot) {
			l += cat_weight(g, day, s, hash3(g->o.seed, (uint64_t)s + 1, r->cat_idx[s]));
			continue;
		}
		assert(r->list_idx);
		const uint64_t *idx = r->list_idx + (size_t)s * ST_GEN_MAX_LIST;
		double w = 0.0;
		for (int i = 0; i < r->n_keys[s]; i++)
			w += cat_weight(g, day, s, hash3(g->o.seed, (uint64_t)s + 1, idx[i]));
		l += w / sqrt((double)r->n_keys[s]);
	}
	if (g->o.cross)
		l += cross_term(g, r);
	if (r->has_hist)
		l += st__gen_history_term(r->n_hist, r->hist_cat, r->cand_cat);
	return l + g->b0[day];
}

double st_gen_weight(const st_gen_t *g, int day, int slot, uint64_t v)
{
	assert(day >= 0 && day < g->n_days && slot >= 0 && slot < ST_GEN_N_CAT);
	if (cat_sigma[slot] <= 0.0)
		return 0.0;
	return cat_weight(g, day, slot, hash3(g->o.seed, (uint64_t)slot + 1, v));
}

double st_gen_b0(const st_gen_t *g, int day)
{
	assert(day >= 0 && day < g->n_days);
	return g->b0[day];
}

/* Finds b0 with mean sigmoid(b0 + l[i]) == TARGET_CTR over n logits, by
 * `iters` bisection steps on [lo, hi] (the mean is monotone in b0).
 * Day 0 uses the bracket [-30, 30] the generator always used, which keeps its
 * b0, and with it the days = 0 output, bit for bit. */
static double solve_b0(const double *l, int n, double lo, double hi, int iters)
{
	for (int it = 0; it < iters; it++) {
		double mid = 0.5 * (lo + hi), m = 0.0;
		for (int i = 0; i < n; i++)
			m += sigmoid(mid + l[i]);
		if (m / n < TARGET_CTR)
			lo = mid;
		else
			hi = mid;
	}
	return 0.5 * (lo + hi);
}

/* Calibrates b0 of every day on one fixed sample of rows from a stream of
 * their own (CALIB_BASE + i of day 0's stream). Day 0 is the calibration of
 * the generator without days; later days reuse the sample's ranks and dense
 * values under their own popularity and weights. The weights of non-rotating
 * slots (fixed values) are stepped from day to day in w[]; rotating slots
 * change value with the day and are computed from scratch (cat_weight).
 * Returns ST_OK or ST_ENOMEM. */
static int calibrate(st_gen_t *g)
{
	int n0 = CALIB_ROWS, n1 = g->n_days > 1 ? CALIB_ROWS_DAY : 0;
	double *l = malloc(sizeof(double) * CALIB_ROWS);
	double *base = n1 ? malloc(sizeof(double) * (size_t)n1) : NULL;
	st_gen_row_t *rows = n1 ? malloc(sizeof(st_gen_row_t) * (size_t)n1) : NULL;
	double *w = n1 ? malloc(sizeof(double) * (size_t)n1 * ST_GEN_N_CAT) : NULL;
	if (!l || (n1 && (!base || !rows || !w))) {
		free(l);
		free(base);
		free(rows);
		free(w);
		return ST_ENOMEM;
	}
	st_gen_row_t r;
	r.list_idx = NULL;
	rng_t rng;
	for (int i = 0; i < n0; i++)
		l[i] = gen_features(g, 0, 0, CALIB_BASE + (uint64_t)i, &r, &rng, 0);
	g->b0[0] = solve_b0(l, n0, -30.0, 30.0, 60);
	if (n1) {
		for (int i = 0; i < n1; i++) {
			rows[i].list_idx = NULL;
			base[i] = gen_features(g, 0, 0, CALIB_BASE + (uint64_t)i, &rows[i], &rng, 1);
			for (int s = 0; s < ST_GEN_N_CAT; s++) {
				uint64_t h = hash3(g->o.seed, (uint64_t)s + 1, rows[i].cat_idx[s]);
				w[(size_t)i * ST_GEN_N_CAT + (size_t)s] =
					cat_sigma[s] > 0.0 ? weight0(s, h) : 0.0;
			}
		}
	}
	for (int d = 1; d < g->n_days; d++) {
		uint64_t shift = day_shift(g, d);
		for (int i = 0; i < n1; i++) {
			const st_gen_row_t *ri = &rows[i];
			double *wi = w + (size_t)i * ST_GEN_N_CAT;
			double x = base[i];
			for (int s = 0; s < ST_GEN_N_CAT; s++) {
				/* The missing mask is the same every day. */
				if (cat_sigma[s] <= 0.0 || (ri->cat_missing & (1u << s)))
					continue;
				/* On day 0 the sample's value index is its rank. */
				uint64_t r0 = ri->cat_idx[s];
				if (ROTATES(s)) {
					uint64_t v = rank_value(g, s, r0, shift);
					x += cat_weight(g, d, s, hash3(g->o.seed, (uint64_t)s + 1, v));
				} else {
					wi[s] = drift_step(g, s, hash3(g->o.seed, (uint64_t)s + 1, r0),
							   d, wi[s]);
					x += wi[s];
				}
			}
			l[i] = x;
		}
		/* A day's b0 is near the one before: bracket it by +-8 around it
		 * (widened if that misses) and bisect to 2^-40 of the bracket. */
		double lo = g->b0[d - 1] - 8.0, hi = g->b0[d - 1] + 8.0;
		g->b0[d] = solve_b0(l, n1, lo, hi, 44);
		if (g->b0[d] <= lo + 1e-6 || g->b0[d] >= hi - 1e-6)
			g->b0[d] = solve_b0(l, n1, -60.0, 60.0, 60);
	}
	free(l);
	free(base);
	free(rows);
	free(w);
	return ST_OK;
}

int st_gen_create(st_gen_t **out, const st_gen_opts_t *o)
{
	/* An infinite exponent would never leave the Zipf sampler's rejection
	 * loop: refused like zero. */
	if (o->rows < 0 || o->eval_rows < 0 || o->files < 1 || !(o->zipf > 0.0) || !isfinite(o->zipf) ||
	    o->vocab < 1 || o->vocab > (UINT64_C(1) << 52)) {
		st_error("gen: bad options (rows %lld, eval_rows %lld, files %d, zipf %g, vocab %llu): "
			 "need rows, eval_rows >= 0, files >= 1, finite zipf > 0, 1 <= vocab <= 2^52",
			 (long long)o->rows, (long long)o->eval_rows, o->files, o->zipf,
			 (unsigned long long)o->vocab);
		return ST_EINVAL;
	}
	if (o->days < 0 || o->days > ST_GEN_MAX_DAYS ||
	    (o->days > 0 && !(o->drift >= 0.0 && o->drift <= 1.0))) {
		st_error("gen: bad options (days %d, drift %g): need 0 <= days <= %d and, "
			 "with days, 0 <= drift <= 1", o->days, o->drift, ST_GEN_MAX_DAYS);
		return ST_EINVAL;
	}
	/* Planted signals (--history, --cross, --labels) are single-hot, no drift. */
	if (o->history < 0 || o->history > ST_GEN_MAX_LIST || o->cross < 0 || o->labels < 0 ||
	    o->labels > ST_GEN_MAX_LABELS || o->cross > ST_GEN_MAX_CROSS ||
	    ((o->history || o->cross || o->labels > 1) && (o->days || o->multi_hot))) {
		st_error("gen: bad options (history %d, cross %d, labels %d, days %d, multi_hot %d): "
			 "need 0 <= history <= %d, 0 <= cross <= %d, labels <= %d, and no days or "
			 "multi_hot with any", o->history, o->cross, o->labels, o->days, o->multi_hot,
			 ST_GEN_MAX_LIST, ST_GEN_MAX_CROSS, ST_GEN_MAX_LABELS);
		return ST_EINVAL;
	}
	if (o->multi_hot < 0 || o->multi_hot > ST_GEN_MAX_LIST || (o->multi_hot && o->days)) {
		st_error("gen: bad options (multi_hot %d, days %d): need 0 <= multi_hot <= %d, "
			 "and no days with multi_hot", o->multi_hot, o->days, ST_GEN_MAX_LIST);
		return ST_EINVAL;
	}
	st_gen_t *g = calloc(1, sizeof *g);
	if (!g)
		return ST_ENOMEM;
	g->o = *o;
	g->o.dir = NULL;
	g->n_days = o->days > 0 ? o->days : 1;
	if (o->days == 0)
		g->o.drift = 0.0;
	g->keep = sqrt(1.0 - g->o.drift);
	g->fresh = sqrt(g->o.drift);
	for (int s = 0; s < ST_GEN_N_CAT; s++)
		g->coef[s] = g->fresh * CAT_SCALE * cat_sigma[s] * 1.7320508075688772 / 65536.0;
	g->b0 = malloc(sizeof(double) * (size_t)g->n_days);
	zipf_init(&g->zipf, o->zipf, o->vocab);
	if (!g->b0 || calibrate(g) < 0) {
		st_gen_destroy(g);
		return ST_ENOMEM;
	}
	*out = g;
	return ST_OK;
}

void st_gen_destroy(st_gen_t *g)
{
	if (!g)
		return;
	free(g->b0);
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

/* The history's two columns (when the row has them) and the newline. */
static char *put_history(const st_gen_row_t *r, char *p)
{
	if (r->has_hist) {
		*p++ = '\t';
		p = put_hex8(p, st__gen_history_value(r->hist_seed, 0, r->cand_cat));
		*p++ = '\t';
		for (int t = 0; t < r->n_hist; t++) {
			if (t)
				*p++ = '^';
			p = put_hex8(p, st__gen_history_value(r->hist_seed, 1, r->hist_cat[t]));
		}
	}
	*p++ = '\n';
	return p;
}

int st_gen_format(const st_gen_row_t *r, char *buf)
{
	char *p = buf;
	*p++ = r->label ? '1' : '0';
	p = r->conv >= 0 ? (*p++ = '\t', *p++ = (char)('0' + r->conv), p) : p;
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
	return (int)(put_history(r, p) - buf);
}

size_t st_gen_max_line(const st_gen_t *g)
{
	return ST_GEN_MAX_LINE + (size_t)ST_GEN_N_CAT * 9 *
		(size_t)(g->o.multi_hot > 1 ? g->o.multi_hot - 1 : 0) +
		(size_t)(g->o.history ? 10 + 9 * g->o.history : 0);
}

int st_gen_format_list(const st_gen_t *g, const st_gen_row_t *r, char *buf)
{
	if (!g->o.multi_hot || !r->list_idx)
		return st_gen_format(r, buf);
	char *p = buf;
	*p++ = r->label ? '1' : '0';
	p = r->conv >= 0 ? (*p++ = '\t', *p++ = (char)('0' + r->conv), p) : p;
	for (int j = 0; j < ST_GEN_N_DENSE; j++) {
		*p++ = '\t';
		if (!(r->dense_missing & (1u << j)))
			p = put_int(p, r->dense[j]);
	}
	for (int s = 0; s < ST_GEN_N_CAT; s++) {
		*p++ = '\t';
		if (r->cat_missing & (1u << s))
			continue;
		const uint64_t *idx = r->list_idx + (size_t)s * ST_GEN_MAX_LIST;
		for (int i = 0; i < r->n_keys[s]; i++) {
			if (i)
				*p++ = '^';
			p = put_hex8(p, (uint32_t)hash3(g->o.seed, (uint64_t)s + 1, idx[i]));
		}
	}
	*p++ = '\n';
	return (int)(p - buf);
}

/* ---- batches ------------------------------------------------------------- */

int st_gen_fill_batch(const st_gen_t *g, uint64_t first_row, st_batch_t *b,
		      uint32_t n)
{
	return st_gen_day_fill_batch(g, 0, first_row, b, n);
}

int st_gen_fill_batch_ex(const st_gen_t *g, uint64_t first_row, st_batch_t *b,
			 uint32_t n, int first_only)
{
	if (g->o.history)
		return ST_EINVAL;   /* files only (gen.h) */
	if (!g->o.multi_hot)
		return st_gen_day_fill_batch(g, 0, first_row, b, n);
	if (b->n_dense != ST_GEN_N_DENSE || b->n_slots != ST_GEN_N_CAT ||
	    n > b->cap - b->n)
		return ST_EINVAL;
	uint64_t *idx = malloc(sizeof(uint64_t) * ST_GEN_N_CAT * ST_GEN_MAX_LIST);
	if (!idx)
		return ST_ENOMEM;
	st_gen_row_t r;
	r.list_idx = idx;
	char hex[8];
	int rc = ST_OK;
	for (uint32_t i = 0; i < n && rc == ST_OK; i++) {
		st_gen_day_row(g, 0, first_row + i, &r);
		if ((rc = st_batch_reserve_keys(b, ST_GEN_N_CAT * (uint32_t)g->o.multi_hot)) < 0)
			break;
		uint32_t e = b->n;
		b->labels[e] = (float)r.label;
		float *d = b->dense + (size_t)e * ST_GEN_N_DENSE;
		for (int j = 0; j < ST_GEN_N_DENSE; j++)
			d[j] = (float)r.dense[j];
		uint32_t k = b->row_off[e];
		for (int s = 0; s < ST_GEN_N_CAT; s++) {
			if (r.cat_missing & (1u << s))
				continue;
			int nk = first_only ? 1 : r.n_keys[s];
			for (int q = 0; q < nk; q++) {
				uint64_t h = hash3(g->o.seed, (uint64_t)s + 1,
						   idx[(size_t)s * ST_GEN_MAX_LIST + (size_t)q]);
				put_hex8(hex, (uint32_t)h);
				b->keys[k] = st_read_key((uint32_t)s, hex, 8);
				b->key_slot[k] = (uint16_t)s;
				b->key_val[k] = 1.0f;
				k++;
			}
		}
		b->row_off[e + 1] = k;
		b->n = e + 1;
	}
	free(idx);
	return rc;
}

int st_gen_day_fill_batch(const st_gen_t *g, int day, uint64_t first_row,
			  st_batch_t *b, uint32_t n)
{
	if ((g->o.multi_hot || g->o.history) && day == 0)
		return st_gen_fill_batch_ex(g, first_row, b, n, 0);
	if (b->n_dense != ST_GEN_N_DENSE || b->n_slots != ST_GEN_N_CAT ||
	    n > b->cap - b->n)
		return ST_EINVAL;
	int rc = st_batch_reserve_keys(b, n * ST_GEN_N_CAT);
	if (rc < 0)
		return rc;
	st_gen_row_t r;
	r.list_idx = NULL;
	char hex[8];
	for (uint32_t i = 0; i < n; i++) {
		st_gen_day_row(g, day, first_row + i, &r);
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
