/*
 * view.c — the model view's checks and the shared lookup of scoring
 * (view.h).
 *
 * The lookup is the trainer's pull of an eval batch (ops/pull) without the
 * trainer: the batch's keys deduplicated into b->uniq in first-occurrence
 * order (PERSIA's layout, persia-hybrid-training.md Section 4.2.3) and
 * resolved table by table with create = 0, so a key without a row gets NULL
 * and the forward pass reads zeros for it, exactly as in training eval.
 *
 * Threads: any; a lookup uses only its own scratch and batch, and the
 * tables do their own locking.
 */
#include "ops/view/view.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"
#include "runtime/store/rowfmt.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return ST_EINVAL;
}

int st_view_check(const st_view_t *v, char *err, size_t errlen)
{
	if (!v->model || !v->cfg || !v->cfg->type)
		return fail(err, errlen, "model view: no model or no model type");
	if (v->n_slots < 1 || v->n_dense < 0 || v->minibatch < 1 || !v->slot_table)
		return fail(err, errlen, "model view: %d slots, %d dense features, minibatch %d",
			    v->n_slots, v->n_dense, v->minibatch);
	if (v->n_tables < 1 || v->n_tables > ST_VIEW_MAX_TABLES)
		return fail(err, errlen, "model view: %d tables (1..%d)", v->n_tables,
			    ST_VIEW_MAX_TABLES);
	int next = 0;   /* tables are numbered in slot order */
	int width[ST_VIEW_MAX_TABLES];
	for (int s = 0; s < v->n_slots; s++) {
		const int k = v->slot_table[s], rd = st_model_row_dim(v->model, s);
		if (k < 0 || k > next || k >= v->n_tables || !v->tables[k])
			return fail(err, errlen, "model view: slot %d is in table %d of %d "
				    "(tables are numbered in slot order)", s, k, v->n_tables);
		if (k == next)
			width[next++] = rd;
		else if (width[k] != rd)
			return fail(err, errlen, "model view: table %d holds rows of width %d and "
				    "%d (slot %d)", k, width[k], rd, s);
	}
	if (next != v->n_tables)
		return fail(err, errlen, "model view: %d tables, its slots use %d", v->n_tables,
			    next);
	/* One table per row width: st_view_release finds a row's table by its
	 * width. */
	for (int a = 0; a < next; a++)
		for (int b = a + 1; b < next; b++)
			if (width[a] == width[b])
				return fail(err, errlen, "model view: tables %d and %d have the same "
					    "row width %d", a, b, width[a]);
	return ST_OK;
}

st_table_t *st_view_table_for_slot(const st_view_t *v, int s)
{
	return s >= 0 && s < v->n_slots ? v->tables[v->slot_table[s]] : NULL;
}

int st_view_row_dim(const st_view_t *v, int k)
{
	for (int s = 0; s < v->n_slots; s++)
		if (v->slot_table[s] == k)
			return st_model_row_dim(v->model, s);
	return 0;
}

const char *st_view_lineage_new(const st_view_t *v)
{
	if (!v->lineage)
		return "";
	if (!*v->lineage && v->lineage_new)
		v->lineage_new(v->src);
	return v->lineage;
}

/* ---- lookup --------------------------------------------------------------- */

/* Compact rows (storage.row_precision): the forward pass reads fp32, so a
 * lookup hands out decoded copies in b->rowbuf (the batch frees it) and
 * unpins the table rows at once — scoring only reads, and the copy holds
 * the values as they were at the lookup, as a pinned row would. Rows of
 * fp32 tables stay the live rows. */
static int decode_compact(const st_view_t *v, st_batch_t *b, const uint16_t *uslot)
{
	float **rows = b->rows;
	size_t need = 0;
	for (uint32_t u = 0; u < b->n_uniq; u++)
		if (rows[u] && st_table_row_prec(v->tables[v->slot_table[uslot[u]]]) != ST_ROW_FP32)
			need += (size_t)st_model_row_dim(v->model, uslot[u]);
	if (!need)
		return ST_OK;
	float *buf = malloc(sizeof(float) * need);
	if (!buf)
		return ST_ENOMEM;
	free(b->rowbuf);
	b->rowbuf = buf;
	for (uint32_t u = 0; u < b->n_uniq; u++) {
		st_table_t *t = v->tables[v->slot_table[uslot[u]]];
		const int prec = st_table_row_prec(t);
		if (!rows[u] || prec == ST_ROW_FP32)
			continue;
		const int dim = st_model_row_dim(v->model, uslot[u]);
		st_rowfmt_decode(prec, rows[u], buf, (size_t)dim);
		st_table_unpin(t, &rows[u], 1);
		rows[u] = buf;
		buf += dim;
	}
	return ST_OK;
}

int st_view_lookup(const st_view_t *v, st_view_lookup_t *t, st_batch_t *b)
{
	if ((int)b->n_slots > v->n_slots)
		return ST_EINVAL;
	uint16_t *uslot = NULL;
	int rc = st_batch_dedup(&t->dd, b, 0, &uslot);
	if (rc < 0)
		return rc;
	const uint32_t nu = b->n_uniq;
	float **rows = realloc(b->rows, sizeof(float *) * (nu ? nu : 1));
	if (!rows) {
		free(uslot);
		return ST_ENOMEM;
	}
	b->rows = rows;
	const uint32_t step = (uint32_t)b->seq;   /* not recorded: create = 0 */
	if (v->n_tables == 1) {
		rc = st_table_resolve(v->tables[0], b->uniq, nu, step, 0, rows);
	} else {
		if (nu > t->tcap) {
			free(t->tkeys);
			free(t->tpos);
			free(t->trows);
			t->tkeys = malloc(sizeof(uint64_t) * nu);
			t->tpos = malloc(sizeof(uint32_t) * nu);
			t->trows = malloc(sizeof(float *) * nu);
			t->tcap = (t->tkeys && t->tpos && t->trows) ? nu : 0;
		}
		rc = t->tcap >= nu ? ST_OK : ST_ENOMEM;
		for (int k = 0; k < v->n_tables && rc >= 0; k++) {
			uint32_t m = 0;
			for (uint32_t u = 0; u < nu; u++)
				if (v->slot_table[uslot[u]] == k) {
					t->tkeys[m] = b->uniq[u];
					t->tpos[m++] = u;
				}
			rc = st_table_resolve(v->tables[k], t->tkeys, m, step, 0, t->trows);
			for (uint32_t i = 0; i < m && rc >= 0; i++)
				rows[t->tpos[i]] = t->trows[i];
		}
	}
	if (rc >= 0)
		rc = decode_compact(v, b, uslot);
	if (rc < 0) {
		free(uslot);
		return rc;
	}
	/* The row width of every unique key (b->aux, freed with the batch);
	 * the slot array is reused in place. */
	for (uint32_t u = 0; u < nu; u++)
		uslot[u] = (uint16_t)st_model_row_dim(v->model, uslot[u]);
	free(b->aux);
	b->aux = uslot;
	return ST_OK;
}

void st_view_release(const st_view_t *v, const st_batch_t *b)
{
	const uint16_t *width = b->aux;
	float **rows = b->rows;
	if (!width || !rows)
		return;
	for (int k = 0; k < v->n_tables; k++) {
		/* Compact tables' rows were copied and unpinned at lookup. */
		if (!st_table_ssd(v->tables[k]) || st_table_row_prec(v->tables[k]) != ST_ROW_FP32)
			continue;
		/* A row's table is the one of its width (st_view_check). */
		const int w = st_view_row_dim(v, k);
		for (uint32_t u = 0; u < b->n_uniq; u++)
			if (width[u] == w && rows[u])
				st_table_unpin(v->tables[k], &rows[u], 1);
	}
}

void st_view_lookup_fini(st_view_lookup_t *s)
{
	st_dedup_fini(&s->dd);
	free(s->tkeys);
	free(s->tpos);
	free(s->trows);
	memset(s, 0, sizeof *s);
}
