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

/* Appends n examples' predictions and labels, each [n × H] (H the model's
 * heads; the label of head h at [i * H + h]). */
static int keep_rows(st_trainer_t *tr, const float *pred, const float *label, size_t n)
{
	const size_t H = (size_t)st_model_nheads(tr->model);
	if (tr->eval.n + n > tr->eval.cap) {
		size_t cap = tr->eval.cap ? tr->eval.cap : 4096;
		while (cap < tr->eval.n + n)
			cap *= 2;
		float *p = realloc(tr->eval.pred, sizeof(float) * cap * H);
		if (!p)
			return ST_ENOMEM;
		tr->eval.pred = p;
		float *l = realloc(tr->eval.label, sizeof(float) * cap * H);
		if (!l)
			return ST_ENOMEM;
		tr->eval.label = l;
		tr->eval.cap = cap;
	}
	memcpy(tr->eval.pred + tr->eval.n * H, pred, sizeof(float) * n * H);
	if (label)
		memcpy(tr->eval.label + tr->eval.n * H, label, sizeof(float) * n * H);
	tr->eval.n += n;
	return ST_OK;
}

int st__trainer_eval_keep(st_trainer_t *tr, const st_batch_t *b)
{
	const int H = st_model_nheads(tr->model);
	if (H == 1 && b->n_labels == 1)
		return keep_rows(tr, b->pred, b->labels, b->n);
	/* Each head's own label beside its prediction. */
	size_t at = tr->eval.n;
	int rc = keep_rows(tr, b->pred, NULL, b->n);
	if (rc < 0)
		return rc;
	float *dst = tr->eval.label + at * (size_t)H;
	for (int h = 0; h < H; h++) {
		uint32_t l = (uint32_t)st_model_head_label(tr->model, h);
		for (uint32_t i = 0; i < b->n; i++)
			dst[(size_t)i * H + h] = b->labels[(size_t)i * b->n_labels + l];
	}
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
	return st_trainer_eval_result_head(tr, 0, auc, logloss, calib, n);
}

int st_trainer_eval_result_head(st_trainer_t *tr, int h, double *auc, double *logloss,
				double *calib, uint64_t *n)
{
	const int H = st_model_nheads(tr->model);
	if (h < 0 || h >= H)
		return ST_EINVAL;
	const float *pred = tr->eval.pred, *label = tr->eval.label;
	float *col = NULL;
	if (H > 1 && tr->eval.n) {
		/* head h's column of the n × H arrays */
		col = malloc(sizeof(float) * 2 * tr->eval.n);
		if (!col)
			return ST_ENOMEM;
		for (size_t i = 0; i < tr->eval.n; i++) {
			col[i] = tr->eval.pred[i * H + h];
			col[tr->eval.n + i] = tr->eval.label[i * H + h];
		}
		pred = col;
		label = col + tr->eval.n;
	}
	double a = NAN;
	size_t nf = 0;
	int rc = st_auc_exact_finite(pred, label, tr->eval.n, &a, &nf);
	if (rc < 0) {
		free(col);
		return rc;
	}
	if (nf)
		st_warn("eval%s%s: %zu of %zu scores are not finite (NaN or infinite): the model "
			"diverged; the AUC ranks the finite ones only", H > 1 ? " of head " : "",
			H > 1 ? st_model_head_name(tr->model, h) : "", nf, tr->eval.n);
	if (auc)
		*auc = a;
	if (logloss)
		*logloss = st_logloss(pred, label, tr->eval.n);
	if (calib)
		*calib = st_calibration(pred, label, tr->eval.n);
	if (n)
		*n = tr->eval.n;
	free(col);
	return ST_OK;
}

uint64_t st_trainer_eval_nonfinite(const st_trainer_t *tr)
{
	uint64_t nf = 0;
	const size_t H = (size_t)st_model_nheads(tr->model);
	for (size_t i = 0; i < tr->eval.n * H; i++)
		nf += !isfinite(tr->eval.pred[i]);
	return nf;
}

int st_trainer_dist_eval_gather(st_trainer_t *tr)
{
	enum { CH_EVAL = 5 };
	st_net_t *net = st_dist_net(tr->dist.d);
	const int rank = st_net_rank(net), P = st_net_size(net);
	const size_t H = (size_t)st_model_nheads(tr->model);   /* every rank's model */
	if (rank != 0) {
		uint64_t n = tr->eval.n;
		int rc = st_net_send2(net, 0, CH_EVAL, &n, sizeof n, tr->eval.pred,
				      sizeof(float) * tr->eval.n * H);
		if (rc >= 0)
			rc = st_net_send(net, 0, CH_EVAL, tr->eval.label,
					 sizeof(float) * tr->eval.n * H);
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
		if (rc >= 0 && (alen != sizeof n + sizeof(float) * n * H ||
				llen != sizeof(float) * n * H)) {
			st_error("rank %d sent a malformed eval result (%zu + %zu bytes)", r, alen,
				 llen);
			rc = ST_EPEER;
		}
		if (rc >= 0)
			rc = n > UINT32_MAX ? ST_EINVAL
					    : keep_rows(tr, (const float *)((uint8_t *)a + sizeof n),
							l, (size_t)n);
		free(a);
		free(l);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}
