/*
 * eval.c — the trainer's eval predictions: kept as the train stage scores
 * eval batches, their AUC / logloss / calibration (st_trainer_eval_result),
 * and, in a multi-process job, every rank's sent to rank 0
 * (st_trainer_dist_eval_gather) so that its result covers them all.
 *
 * Threads: the train stage's thread keeps them; the other calls run with
 * no train stage running (between passes).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dist/dist.h"
#include "ops/train/trainer_internal.h"
#include "runtime/err.h"

int st__trainer_eval_keep(st_trainer_t *tr, const st_batch_t *b)
{
	if (tr->eval.n + b->n > tr->eval.cap) {
		size_t cap = tr->eval.cap ? tr->eval.cap : 4096;
		while (cap < tr->eval.n + b->n)
			cap *= 2;
		float *p = realloc(tr->eval.pred, sizeof(float) * cap);
		if (!p)
			return ST_ENOMEM;
		tr->eval.pred = p;
		float *l = realloc(tr->eval.label, sizeof(float) * cap);
		if (!l)
			return ST_ENOMEM;
		tr->eval.label = l;
		tr->eval.cap = cap;
	}
	memcpy(tr->eval.pred + tr->eval.n, b->pred, sizeof(float) * b->n);
	memcpy(tr->eval.label + tr->eval.n, b->labels, sizeof(float) * b->n);
	tr->eval.n += b->n;
	return ST_OK;
}

void st__trainer_eval_free(st_trainer_t *tr)
{
	free(tr->eval.pred);
	free(tr->eval.label);
	memset(&tr->eval, 0, sizeof tr->eval);
}

void st_trainer_reset_eval(st_trainer_t *tr)
{
	tr->eval.n = 0;
}

int st_trainer_eval_result(st_trainer_t *tr, double *auc, double *logloss,
			   double *calib, uint64_t *n)
{
	double a = NAN;
	size_t nf = 0;
	int rc = st_auc_exact_finite(tr->eval.pred, tr->eval.label, tr->eval.n, &a, &nf);
	if (rc < 0)
		return rc;
	if (nf)
		st_warn("eval: %zu of %zu scores are not finite (NaN or infinite): the model "
			"diverged; the AUC ranks the finite ones only", nf, tr->eval.n);
	if (auc)
		*auc = a;
	if (logloss)
		*logloss = st_logloss(tr->eval.pred, tr->eval.label, tr->eval.n);
	if (calib)
		*calib = st_calibration(tr->eval.pred, tr->eval.label, tr->eval.n);
	if (n)
		*n = tr->eval.n;
	return ST_OK;
}

uint64_t st_trainer_eval_nonfinite(const st_trainer_t *tr)
{
	uint64_t nf = 0;
	for (size_t i = 0; i < tr->eval.n; i++)
		nf += !isfinite(tr->eval.pred[i]);
	return nf;
}

int st_trainer_dist_eval_gather(st_trainer_t *tr)
{
	enum { CH_EVAL = 5 };
	st_net_t *net = st_dist_net(tr->dist.d);
	const int rank = st_net_rank(net), P = st_net_size(net);
	if (rank != 0) {
		uint64_t n = tr->eval.n;
		int rc = st_net_send2(net, 0, CH_EVAL, &n, sizeof n, tr->eval.pred,
				      sizeof(float) * tr->eval.n);
		if (rc >= 0)
			rc = st_net_send(net, 0, CH_EVAL, tr->eval.label, sizeof(float) * tr->eval.n);
		return rc;
	}
	for (int r = 1; r < P; r++) {
		if (!st_net_alive(net, r))
			continue;
		void *a = NULL, *l = NULL;
		size_t alen, llen;
		int from;
		int rc = st_net_recv(net, r, CH_EVAL, &a, &alen, &from, -1);
		if (rc >= 0)
			rc = st_net_recv(net, r, CH_EVAL, &l, &llen, &from, -1);
		uint64_t n = 0;
		if (rc >= 0 && alen >= sizeof n)
			memcpy(&n, a, sizeof n);
		if (rc >= 0 && (alen != sizeof n + sizeof(float) * n || llen != sizeof(float) * n)) {
			st_error("rank %d sent a malformed eval result (%zu + %zu bytes)", r, alen,
				 llen);
			rc = ST_EPEER;
		}
		if (rc >= 0) {
			st_batch_t b = { .n = (uint32_t)n, .pred = (float *)((uint8_t *)a + sizeof n),
					 .labels = l };
			rc = n > UINT32_MAX ? ST_EINVAL : st__trainer_eval_keep(tr, &b);
		}
		free(a);
		free(l);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}
