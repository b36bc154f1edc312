/*
 * auc.c — AUC (exact and streaming), logloss and calibration.
 *
 * Exact AUC sorts (prediction, label) pairs and walks groups of equal
 * predictions: each positive scores the negatives strictly below it plus half
 * of the negatives tied with it, which is the Mann-Whitney U with average
 * ranks. Non-finite predictions (NaN, +-inf: a diverged model) are left out
 * of the exact AUC and counted, so a NaN can neither break the sort nor stall
 * the walk. The streaming accumulator does the same walk over histogram
 * buckets; there a NaN lands in the lowest bucket (as in the GPU twin,
 * cuda/interact.cu) and an infinity in an end bucket, which needs no special
 * case to terminate.
 *
 * Threads: exact functions are pure. An accumulator has one writer; its
 * counters are updated with relaxed atomic load+store (no read-modify-write:
 * there is one writer) so concurrent readers never race.
 */
#include "ops/metrics/auc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

typedef struct {
	float p, y;
} pair_t;

static int cmp_pair(const void *a, const void *b)
{
	float x = ((const pair_t *)a)->p, y = ((const pair_t *)b)->p;
	return (x > y) - (x < y);
}

int st_auc_exact_finite(const float *pred, const float *label, size_t n, double *auc,
			size_t *n_nonfinite)
{
	pair_t *v = malloc(sizeof(pair_t) * (n ? n : 1));
	if (!v)
		return ST_ENOMEM;
	/* Non-finite scores are dropped before sorting: cmp_pair cannot order
	 * a NaN (every comparison is false, so qsort's order is undefined) and
	 * the tie walk below would never step past one (NaN != NaN). */
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(pred[i]))
			continue;
		v[m].p = pred[i];
		v[m].y = label[i];
		m++;
	}
	if (n_nonfinite)
		*n_nonfinite = n - m;
	qsort(v, m, sizeof *v, cmp_pair);
	double num = 0.0, neg_below = 0.0, pos_total = 0.0;
	for (size_t i = 0; i < m;) {
		size_t j = i;
		double pos = 0.0, neg = 0.0;
		while (j < m && v[j].p == v[i].p) {
			if (v[j].y > 0.5f)
				pos += 1.0;
			else
				neg += 1.0;
			j++;
		}
		num += pos * (neg_below + 0.5 * neg);
		neg_below += neg;
		pos_total += pos;
		i = j;
	}
	free(v);
	*auc = (pos_total > 0.0 && neg_below > 0.0) ? num / (pos_total * neg_below) : NAN;
	return ST_OK;
}

int st_auc_exact(const float *pred, const float *label, size_t n, double *auc)
{
	return st_auc_exact_finite(pred, label, n, auc, NULL);
}

static inline double clampp(double p)
{
	if (p < ST_LOGLOSS_EPS)
		return ST_LOGLOSS_EPS;
	if (p > 1.0 - ST_LOGLOSS_EPS)
		return 1.0 - ST_LOGLOSS_EPS;
	return p;
}

static inline double logloss1(double p, double y)
{
	p = clampp(p);
	return -(y * log(p) + (1.0 - y) * log(1.0 - p));
}

double st_logloss(const float *pred, const float *label, size_t n)
{
	double s = 0.0;
	for (size_t i = 0; i < n; i++)
		s += logloss1(pred[i], label[i]);
	return n ? s / (double)n : 0.0;
}

double st_calibration(const float *pred, const float *label, size_t n)
{
	double sp = 0.0, sy = 0.0;
	for (size_t i = 0; i < n; i++) {
		sp += pred[i];
		sy += label[i];
	}
	return sy > 0.0 ? sp / sy : NAN;
}

struct st_auc_acc {
	unsigned bits;
	uint64_t n, pos;
	double sum_pred, sum_loss;
	uint64_t *hist;       /* [2 << bits]: negatives then positives */
};

int st_auc_acc_create(st_auc_acc_t **out, unsigned bits)
{
	if (bits == 0)
		bits = 16;
	if (bits < 4 || bits > 24)
		return ST_EINVAL;
	st_auc_acc_t *a = calloc(1, sizeof *a);
	if (!a)
		return ST_ENOMEM;
	a->bits = bits;
	a->hist = calloc((size_t)2 << bits, sizeof(uint64_t));
	if (!a->hist) {
		free(a);
		return ST_ENOMEM;
	}
	*out = a;
	return ST_OK;
}

void st_auc_acc_destroy(st_auc_acc_t *a)
{
	if (!a)
		return;
	free(a->hist);
	free(a);
}

void st_auc_acc_reset(st_auc_acc_t *a)
{
	memset(a->hist, 0, sizeof(uint64_t) * ((size_t)2 << a->bits));
	a->n = a->pos = 0;
	a->sum_pred = a->sum_loss = 0.0;
}

#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

static inline void add_d(double *p, double d)
{
	double v;
	__atomic_load(p, &v, __ATOMIC_RELAXED);
	v += d;
	__atomic_store(p, &v, __ATOMIC_RELAXED);
}

static inline double ld_d(const double *p)
{
	double v;
	__atomic_load(p, &v, __ATOMIC_RELAXED);
	return v;
}

void st_auc_acc_add(st_auc_acc_t *a, float pred, float label)
{
	double p = pred;
	int y = label > 0.5f;
	size_t nb = (size_t)1 << a->bits;
	/* !(p > 0) also catches NaN, which lands in bucket 0. */
	size_t b = !(p > 0.0) ? 0 : p >= 1.0 ? nb - 1 : (size_t)(p * (double)nb);
	uint64_t *h = &a->hist[(size_t)y * nb + b];
	ST(h, LD(h) + 1);
	ST(&a->n, LD(&a->n) + 1);
	if (y)
		ST(&a->pos, LD(&a->pos) + 1);
	add_d(&a->sum_pred, p);
	add_d(&a->sum_loss, logloss1(p, label));
}

void st_auc_acc_read(const st_auc_acc_t *const *accs, int n, st_auc_stats_t *out)
{
	memset(out, 0, sizeof *out);
	double sp = 0.0, sl = 0.0;
	unsigned bits = 0;
	for (int i = 0; i < n; i++) {
		if (!accs[i])
			continue;
		bits = accs[i]->bits;
		out->n += LD(&accs[i]->n);
		out->pos += LD(&accs[i]->pos);
		sp += ld_d(&accs[i]->sum_pred);
		sl += ld_d(&accs[i]->sum_loss);
	}
	out->logloss = out->n ? sl / (double)out->n : 0.0;
	out->calibration = out->pos ? (sp / (double)out->n) / ((double)out->pos / (double)out->n) : NAN;
	if (!bits) {
		out->auc = NAN;
		return;
	}
	/* Counts are re-read from the histograms themselves so the AUC is
	 * consistent with its own pair totals even while writers run. */
	size_t nb = (size_t)1 << bits;
	double num = 0.0, neg_below = 0.0, pos_total = 0.0;
	for (size_t b = 0; b < nb; b++) {
		double neg = 0.0, pos = 0.0;
		for (int i = 0; i < n; i++) {
			if (!accs[i])
				continue;
			neg += (double)LD(&accs[i]->hist[b]);
			pos += (double)LD(&accs[i]->hist[nb + b]);
		}
		num += pos * (neg_below + 0.5 * neg);
		neg_below += neg;
		pos_total += pos;
	}
	out->auc = (pos_total > 0.0 && neg_below > 0.0) ? num / (pos_total * neg_below) : NAN;
}
