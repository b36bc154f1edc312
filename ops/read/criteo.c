/*
 * criteo.c — the Criteo Kaggle "dac" line: label TAB I1..I13 TAB C1..C26.
 *
 * label is 0 or 1. I fields are (possibly negative) integers stored raw as
 * floats, empty = missing = 0 (the model transforms them); with the source's
 * dense_indicator, dense[13 + j] is 1 where I(j+1) was empty, else 0. C fields are
 * hashed with their slot 0..25 (st_read_key); empty = missing = no key, or
 * the slot's missing key (st_read_missing_key) under missing = key.
 * Lines whose trailing TABs were stripped (fewer than 40 fields, at least
 * label + I1..I13 = 14) are accepted and the absent fields are missing.
 *
 * Speed: this is the hot loop of the read stage. One pass over the line's
 * bytes both finds the TABs and accumulates the integers; keys are hashed
 * with xxh3 inlined; nothing is allocated or copied per line.
 *
 * Fields are numbered from 0 (label) in messages: field 3 is I3, field 14 C1.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "read_internal.h"

#include "runtime/err.h"

#define CRITEO_FIELDS 40
#define CRITEO_MIN_FIELDS 14

static const char *const names[CRITEO_FIELDS] = {
	"label", "I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9", "I10",
	"I11", "I12", "I13", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8",
	"C9", "C10", "C11", "C12", "C13", "C14", "C15", "C16", "C17", "C18",
	"C19", "C20", "C21", "C22", "C23", "C24", "C25", "C26",
};

static inline const char *find_tab(const char *p, const char *e)
{
	while (p < e && *p != '\t')
		p++;
	return p;
}

static int bad_value(st_reader_t *r, int f, const char *p, const char *e,
		     const char *what)
{
	char q[200];
	st__read_quote(q, sizeof q, p, (size_t)(find_tab(p, e) - p));
	return st__reader_bad(r, f, names[f], "'%s' %s", q, what);
}

int st__criteo_parse(st_reader_t *r, st_batch_t *b, const char *line, size_t len)
{
	const char *e = line + len;
	if (len == 0)
		return st__reader_bad(r, -1, NULL, "empty line");
	int rc = st_batch_reserve_keys(b, 26);
	if (rc < 0)
		return rc;
	const uint32_t n = b->n;
	float *d = b->dense + (size_t)n * r->n_dense;
	uint32_t k = b->row_off[n];
	uint64_t *keys = b->keys;
	uint16_t *kslot = b->key_slot;
	float *kval = b->key_val;

	const char *t = find_tab(line, e);
	if (t - line != 1 || (line[0] != '0' && line[0] != '1'))
		return bad_value(r, 0, line, e, "is not a label (0 or 1)");
	const float label = (float)(line[0] - '0');

	uint32_t nmiss = 0;
	if (r->dense_indicator)
		for (int j = 0; j < 13; j++)
			d[13 + j] = 0.0f;
	int f = 1;
	for (; f <= 13 && t < e; f++) {
		const char *p = t + 1, *q = p;
		int neg = 0;
		if (q < e && *q == '-') {
			neg = 1;
			q++;
		}
		const char *ds = q;
		uint64_t v = 0;
		for (; q < e; q++) {
			unsigned dd = (unsigned)(unsigned char)*q - '0';
			if (dd > 9)
				break;
			v = v * 10 + dd;
		}
		if (q < e && *q != '\t')
			return bad_value(r, f, p, e, "is not an integer");
		if (q == ds) {
			if (neg)
				return bad_value(r, f, p, e, "is not an integer");
			d[f - 1] = 0.0f;         /* missing */
			if (r->dense_indicator)
				d[13 + f - 1] = 1.0f;   /* "was missing" */
		} else if (q - ds > 18) {
			return bad_value(r, f, p, e, "is out of range");
		} else {
			d[f - 1] = neg ? -(float)v : (float)v;
		}
		t = q;
	}
	if (f <= 13)
		return st__reader_bad(r, -1, NULL,
				      "%d fields, expected %d to %d",
				      f, CRITEO_MIN_FIELDS, CRITEO_FIELDS);
	for (; f < CRITEO_FIELDS && t < e; f++) {
		const char *p = t + 1;
		t = find_tab(p, e);
		if (t > p) {
			keys[k] = XXH3_64bits_withSeed(p, (size_t)(t - p),
						       (uint64_t)(f - 14));
			kslot[k] = (uint16_t)(f - 14);
			kval[k] = 1.0f;
			k++;
		} else if (r->missing == ST_MISSING_KEY) {
			keys[k] = st_read_missing_key((uint32_t)(f - 14));
			kslot[k] = (uint16_t)(f - 14);
			kval[k] = 1.0f;
			k++;
			nmiss++;
		}
	}
	if (t < e) {
		int nf = CRITEO_FIELDS;
		for (; t < e; t++)
			nf += *t == '\t';
		return st__reader_bad(r, -1, NULL, "%d fields, expected %d to %d",
				      nf, CRITEO_MIN_FIELDS, CRITEO_FIELDS);
	}
	if (r->missing == ST_MISSING_KEY) {
		/* Fields a stripped line leaves out are missing too. */
		for (; f < CRITEO_FIELDS; f++, nmiss++) {
			keys[k] = st_read_missing_key((uint32_t)(f - 14));
			kslot[k] = (uint16_t)(f - 14);
			kval[k] = 1.0f;
			k++;
		}
		r->stats.missing_keys += nmiss;
	}
	b->labels[n] = label;
	b->row_off[n + 1] = k;
	b->n = n + 1;
	return ST__ROW_OK;
}
