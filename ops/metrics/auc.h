/*
 * auc.h — evaluation metrics for binary labels: AUC, logloss, calibration.
 *
 * Exact functions take arrays of predictions (probabilities) and labels
 * (> 0.5 is positive). The streaming accumulator keeps a histogram of
 * predictions per label (2^bits equal-width buckets over [0, 1]) plus running
 * sums, so the progressive AUC of a long run costs O(1) per example and
 * O(2^bits) per read; examples in one bucket count as ties (half a pair), which
 * with 2^16 buckets moves the AUC by far less than 1e-3 on realistic data.
 */
#ifndef ST_AUC_H
#define ST_AUC_H

#include <stddef.h>
#include <stdint.h>

/* Probabilities are clamped to [ST_LOGLOSS_EPS, 1 - ST_LOGLOSS_EPS]. */
#define ST_LOGLOSS_EPS 1e-7

/* Exact ROC AUC with tied predictions counted as half a pair (the average-rank
 * formula), over the finite predictions only: a NaN or infinite score (a
 * model that diverged) has no place in a ranking, so it is left out of the
 * AUC and counted in *n_nonfinite (which may be NULL). *auc is NaN
 * ("unavailable") when the finite predictions do not hold both labels: all
 * labels equal, n == 0, or every score non-finite. Returns ST_OK or
 * ST_ENOMEM (it sorts a copy). Thread-safe (pure). */
int st_auc_exact_finite(const float *pred, const float *label, size_t n, double *auc,
			size_t *n_nonfinite);

/* st_auc_exact_finite without the count. */
int st_auc_exact(const float *pred, const float *label, size_t n, double *auc);

/* Mean logloss (0 when n == 0); NaN when any prediction is NaN (infinite
 * ones are clamped like any other). Pure. */
double st_logloss(const float *pred, const float *label, size_t n);

/* Mean prediction / mean label (NaN when there is no positive). Pure. */
double st_calibration(const float *pred, const float *label, size_t n);

/* Streaming accumulator. One writer thread per accumulator (st_auc_acc_add);
 * readers on other threads may call st_auc_acc_read concurrently: every field
 * is read and written with relaxed atomics, so a read sees a slightly stale
 * but never torn state. Give each writer thread its own accumulator and pass
 * all of them to st_auc_acc_read to merge. */
typedef struct st_auc_acc st_auc_acc_t;

typedef struct st_auc_stats {
	uint64_t n, pos;
	double auc;          /* NaN while one class is absent */
	double logloss;      /* mean; 0 when n == 0 */
	double calibration;  /* mean pred / observed rate; NaN without positives */
} st_auc_stats_t;

/* bits in [4, 24]; 0 = 16. ST_OK / ST_EINVAL / ST_ENOMEM. Caller destroys. */
int st_auc_acc_create(st_auc_acc_t **out, unsigned bits);
void st_auc_acc_destroy(st_auc_acc_t *a);

/* Adds one example. Not thread-safe against other writers of a. */
void st_auc_acc_add(st_auc_acc_t *a, float pred, float label);

/* Empties a (no writer may run). */
void st_auc_acc_reset(st_auc_acc_t *a);

/* Merged statistics of accs[0 .. n-1] (NULL entries are skipped; all must
 * have the same bits). Thread-safe against the writers (see above). */
void st_auc_acc_read(const st_auc_acc_t *const *accs, int n, st_auc_stats_t *out);

#endif
