/*
 * csv.c — delimited text with a schema from the job (st_source_t): sep,
 * header, and a kind per column (LABEL, DENSE, CAT, IGNORE).
 *
 * LABEL and DENSE are decimal numbers (DENSE empty = 0, and with the
 * source's dense_indicator dense[n_dense/2 + j] = 1 for an empty DENSE j;
 * LABEL must be present and is stored as is). Several LABEL columns are
 * the example's labels in column order (labels[i * n_labels + l] for the
 * l-th LABEL column; one column keeps the one-label layout). CAT values are hashed as raw bytes with
 * their slot, slots numbered in column order among CAT columns, so ids that
 * do not fit in int64 (Avazu's 20-digit ids) are just bytes. An empty CAT
 * field is missing: the slot's missing key (st_read_missing_key) or no key,
 * as the slot's option says.
 *
 * List fields (a slot with list_sep): the field's items, split by list_sep,
 * are each one key of the slot, in order. Empty items ("a^^b", a leading or
 * trailing separator) are skipped and counted; a list with no item left is
 * an empty field (missing); a list longer than max_len keeps its first or
 * last max_len items (keep_last) and is counted as truncated. Counts go to
 * the reader's stats only when the row is committed. Quoting, the minimum: a field that starts with '"' runs to the
 * next lone '"' and may hold the separator; "" inside is one quote. Quoted
 * fields cannot span lines. Every row must have exactly n_cols columns.
 *
 * Messages number columns from 0 and name them from the header when there
 * is one ("field 2 (hour)").
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "read_internal.h"

#include "runtime/err.h"

#include <stdlib.h>
#include <string.h>

enum { FIELD_OK = 0, FIELD_UNTERMINATED = -1, FIELD_JUNK = -2 };

/* Splits off the next field at *pp. On success the field's bytes are
 * [*fp, *fp + *fl) (in r->scratch for a quoted field) and *more says whether
 * a separator followed. */
static int next_field(st_reader_t *r, const char **pp, const char *e,
		      const char **fp, size_t *fl, int *more)
{
	const char *p = *pp;
	const char sep = r->sep;
	if (p < e && *p == '"') {
		char *o = r->scratch;
		p++;
		for (;;) {
			const char *q = memchr(p, '"', (size_t)(e - p));
			if (!q)
				return FIELD_UNTERMINATED;
			memcpy(o, p, (size_t)(q - p));
			o += q - p;
			p = q + 1;
			if (p < e && *p == '"') {
				*o++ = '"';
				p++;
				continue;
			}
			break;
		}
		if (p < e && *p != sep)
			return FIELD_JUNK;
		*fp = r->scratch;
		*fl = (size_t)(o - r->scratch);
	} else {
		const char *q = memchr(p, sep, (size_t)(e - p));
		if (!q)
			q = e;
		*fp = p;
		*fl = (size_t)(q - p);
		p = q;
	}
	*more = p < e;
	*pp = p < e ? p + 1 : e;
	return FIELD_OK;
}

static const char *col_name(const st_reader_t *r, int c)
{
	return r->col_name && c < r->n_cols ? r->col_name[c] : NULL;
}

static int bad_field(st_reader_t *r, int c, int frc)
{
	return st__reader_bad(r, c, col_name(r, c), "%s",
			      frc == FIELD_UNTERMINATED ? "quoted field has no closing quote"
							: "text after a closing quote");
}

static int bad_number(st_reader_t *r, int c, const char *fp, size_t fl,
		      int prc, const char *what)
{
	char q[200];
	st__read_quote(q, sizeof q, fp, fl);
	return st__reader_bad(r, c, col_name(r, c), "'%s' %s", q,
			      prc == ST_ERANGE ? "is out of range" : what);
}

/* Counts the columns of a line whose first `seen` were already split. */
static int count_cols(st_reader_t *r, const char *p, const char *e, int seen)
{
	int more = 1;
	while (more) {
		const char *fp;
		size_t fl;
		if (next_field(r, &p, e, &fp, &fl, &more) < 0)
			break;
		seen++;
	}
	return seen;
}

int st__csv_header(st_reader_t *r, const char *line, size_t len)
{
	const char *p = line, *e = line + len;
	int nc = count_cols(r, p, e, 0);
	if (nc != r->n_cols)
		return st__reader_bad(r, -1, NULL,
				      "header has %d columns, the schema has %d",
				      nc, r->n_cols);
	char **names = calloc((size_t)r->n_cols, sizeof *names);
	if (!names)
		return ST_ENOMEM;
	for (int c = 0; c < r->n_cols; c++) {
		const char *fp;
		size_t fl;
		int more;
		char q[64];
		if (next_field(r, &p, e, &fp, &fl, &more) < 0)
			break;
		st__read_quote(q, sizeof q, fp, fl);
		names[c] = strdup(q);
		if (!names[c]) {
			for (int i = 0; i < c; i++)
				free(names[i]);
			free(names);
			return ST_ENOMEM;
		}
	}
	r->col_name = names;
	return ST__ROW_OK;
}

/* Appends the items of list field [fp, fp + fl) of slot si at key index k
 * (`used` keys of the row are before it). *got = keys appended (0: the
 * list is empty). The keys of the row may be reallocated: the caller reads
 * b->keys again. Returns ST_OK or ST_ENOMEM. */
static int put_list(st_reader_t *r, st_batch_t *b, const st_slot_opt_t *o, uint32_t si,
		    const char *fp, size_t fl, uint32_t k, uint32_t used, uint32_t *got,
		    st_read_stats_t *cnt)
{
	const char ls = o->list_sep, *e = fp + fl;
	uint32_t items = 0, empty = 0;
	*got = 0;
	if (fl == 0) {
		cnt->lists_empty++;
		return ST_OK;
	}
	for (const char *p = fp;;) {
		const char *q = memchr(p, ls, (size_t)(e - p));
		if (!q)
			q = e;
		if (q > p)
			items++;
		else
			empty++;
		if (q == e)
			break;
		p = q + 1;
	}
	cnt->list_items_empty += empty;
	if (items == 0) {
		cnt->lists_empty++;
		return ST_OK;
	}
	uint32_t keep = items, skip = 0;
	if (o->max_len && items > o->max_len) {
		keep = o->max_len;
		skip = o->keep_last ? items - keep : 0;
		cnt->lists_truncated++;
	}
	/* The n_slots keys reserved for the row hold one per slot; a list
	 * needs keep - 1 more (and its slot's share is already counted). */
	int rc = st_batch_reserve_keys(b, used + keep + r->n_slots);
	if (rc < 0)
		return rc;
	uint32_t i = 0, out = 0;
	for (const char *p = fp; out < keep;) {
		const char *q = memchr(p, ls, (size_t)(e - p));
		if (!q)
			q = e;
		if (q > p) {
			if (i >= skip) {
				b->keys[k + out] = XXH3_64bits_withSeed(p, (size_t)(q - p), si);
				b->key_slot[k + out] = (uint16_t)si;
				b->key_val[k + out] = 1.0f;
				out++;
			}
			i++;
		}
		if (q == e)
			break;
		p = q + 1;
	}
	*got = out;
	return ST_OK;
}

int st__csv_parse(st_reader_t *r, st_batch_t *b, const char *line, size_t len)
{
	const char *p = line, *e = line + len;
	if (len == 0)
		return st__reader_bad(r, -1, NULL, "empty line");
	int rc = st_batch_reserve_keys(b, r->n_slots);
	if (rc < 0)
		return rc;
	const uint32_t n = b->n;
	float *d = b->dense + (size_t)n * r->n_dense;
	uint32_t k = b->row_off[n];
	uint32_t di = 0, si = 0, li = 0;
	float label[ST_BATCH_MAX_LABELS] = { 0 };
	st_read_stats_t cnt = { 0 };
	int c = 0, more = 1;
	for (; more; c++) {
		const char *fp;
		size_t fl;
		if (c == r->n_cols) {
			int nc = count_cols(r, p, e, c);
			return st__reader_bad(r, -1, NULL, "%d columns, expected %d",
					      nc, r->n_cols);
		}
		int frc = next_field(r, &p, e, &fp, &fl, &more);
		if (frc < 0)
			return bad_field(r, c, frc);
		int prc;
		switch (r->col_kind[c]) {
		case ST_COL_LABEL:
			if (fl == 0)
				return st__reader_bad(r, c, col_name(r, c), "empty label");
			/* li < n_labels: reader_init counted the LABEL columns */
			prc = st__read_float(fp, fl, &label[li]);
			if (prc < 0)
				return bad_number(r, c, fp, fl, prc, "is not a label (a number)");
			li++;
			break;
		case ST_COL_DENSE:
			if (r->dense_indicator)
				d[r->n_dense / 2 + di] = fl == 0 ? 1.0f : 0.0f;
			if (fl == 0) {
				d[di++] = 0.0f;
				break;
			}
			prc = st__read_float(fp, fl, &d[di]);
			if (prc < 0)
				return bad_number(r, c, fp, fl, prc, "is not a number");
			di++;
			break;
		case ST_COL_CAT: {
			const st_slot_opt_t *o = &r->slot_opt[si];
			uint32_t got = 0;
			if (o->list_sep) {
				rc = put_list(r, b, o, si, fp, fl, k, k - b->row_off[n], &got, &cnt);
				if (rc < 0)
					return rc;
			} else if (fl) {
				b->keys[k] = XXH3_64bits_withSeed(fp, fl, si);
				b->key_slot[k] = (uint16_t)si;
				b->key_val[k] = 1.0f;
				got = 1;
			}
			if (!got && o->missing == ST_MISSING_KEY) {
				/* room: the n_slots keys reserved up front, plus what
				 * put_list reserved; one key per slot at most here */
				b->keys[k] = st_read_missing_key(si);
				b->key_slot[k] = (uint16_t)si;
				b->key_val[k] = 1.0f;
				got = 1;
				cnt.missing_keys++;
			}
			k += got;
			si++;
			break;
		}
		default:
			break;
		}
	}
	if (c != r->n_cols)
		return st__reader_bad(r, -1, NULL, "%d columns, expected %d",
				      c, r->n_cols);
	memcpy(b->labels + (size_t)n * r->n_labels, label, sizeof(float) * r->n_labels);
	b->row_off[n + 1] = k;
	b->n = n + 1;
	r->stats.lists_truncated += cnt.lists_truncated;
	r->stats.list_items_empty += cnt.list_items_empty;
	r->stats.lists_empty += cnt.lists_empty;
	r->stats.missing_keys += cnt.missing_keys;
	return ST__ROW_OK;
}
