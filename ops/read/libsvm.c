/*
 * libsvm.c — libsvm "label idx:val ..." and libffm "label field:idx:val ..."
 * lines (both may be mixed in one line).
 *
 * The label is a decimal number; label > 0 gives 1, anything else 0, so
 * -1/+1 and 0/1 files both work. A source with `labels = k` reads the
 * first k tokens as the example's k labels, each the same way (the
 * extension docs/formats.md describes; k = 1 is plain libsvm); a line with
 * fewer than k label tokens, or an idx:val among them, is a bad record. idx is hashed as bytes with its slot:
 * slot 0 for idx:val, the field for field:idx:val (field must be an integer
 * below the source's n_slots). key_val is val. Tokens are separated by runs
 * of spaces or TABs. Messages number tokens from 0 (the label).
 *
 * Several tokens of one field (libffm "2:7:1 2:9:1", or every idx:val of a
 * libsvm line, which are all slot 0) are several keys of that slot, in line
 * order: a multi-valued field, pooled by the model like any list field. The
 * same index twice is kept twice (its row counts twice in a sum). A field
 * with no token has no key (libsvm has no "empty field" to make a missing
 * key of).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "read_internal.h"

#include "runtime/err.h"

#include <string.h>

static inline int is_space(char c)
{
	return c == ' ' || c == '\t';
}

static int bad_token(st_reader_t *r, int f, const char *p, const char *te,
		     const char *what)
{
	char q[200];
	st__read_quote(q, sizeof q, p, (size_t)(te - p));
	return st__reader_bad(r, f, NULL, "'%s' %s", q, what);
}

int st__libsvm_parse(st_reader_t *r, st_batch_t *b, const char *line, size_t len)
{
	const char *p = line, *e = line + len;
	while (p < e && is_space(*p))
		p++;
	if (p == e)
		return st__reader_bad(r, -1, NULL, "empty line");
	const uint32_t n = b->n;
	const uint32_t k0 = b->row_off[n];
	uint32_t k = k0;

	const char *te = p;
	float label[ST_BATCH_MAX_LABELS];
	const uint32_t nl = r->n_labels;
	for (uint32_t l = 0; l < nl; l++) {
		if (l > 0) {
			p = te;
			while (p < e && is_space(*p))
				p++;
			if (p == e)
				return st__reader_bad(r, (int)l, NULL, "has %u labels, the source "
						      "declares labels = %u", l, nl);
		}
		te = p;
		while (te < e && !is_space(*te))
			te++;
		if (st__read_float(p, (size_t)(te - p), &label[l]) < 0)
			return bad_token(r, (int)l, p, te,
					 nl > 1 ? "is not a label (a number; the source declares "
						  "several labels)"
						: "is not a label (a number)");
		label[l] = label[l] > 0 ? 1.0f : 0.0f;
	}

	for (int f = (int)nl;; f++) {
		p = te;
		while (p < e && is_space(*p))
			p++;
		if (p == e)
			break;
		te = p;
		while (te < e && !is_space(*te))
			te++;
		const char *c1 = memchr(p, ':', (size_t)(te - p));
		if (!c1)
			return bad_token(r, f, p, te, "is not idx:val or field:idx:val");
		const char *c2 = memchr(c1 + 1, ':', (size_t)(te - c1 - 1));
		uint32_t slot = 0;
		const char *ip = p, *ie = c1, *vp = c1 + 1;
		if (c2) {
			int64_t fld;
			if (memchr(c2 + 1, ':', (size_t)(te - c2 - 1)))
				return bad_token(r, f, p, te, "has more than two ':'");
			if (st__read_int(p, (size_t)(c1 - p), &fld) < 0 || fld < 0)
				return bad_token(r, f, p, te, "has a field that is not a non-negative integer");
			if (fld >= (int64_t)r->n_slots)
				return st__reader_bad(r, f, NULL,
						      "field %lld is not below the source's %u slots",
						      (long long)fld, r->n_slots);
			slot = (uint32_t)fld;
			ip = c1 + 1;
			ie = c2;
			vp = c2 + 1;
		}
		if (ie == ip)
			return bad_token(r, f, p, te, "has an empty index");
		float val;
		int prc = st__read_float(vp, (size_t)(te - vp), &val);
		if (prc < 0)
			return bad_token(r, f, p, te, prc == ST_ERANGE ? "has a value out of range" : "has a value that is not a number");
		if (k == b->key_cap) {
			int rc = st_batch_reserve_keys(b, k - k0 + 1);
			if (rc < 0)
				return rc;
		}
		b->keys[k] = XXH3_64bits_withSeed(ip, (size_t)(ie - ip), slot);
		b->key_slot[k] = (uint16_t)slot;
		b->key_val[k] = val;
		k++;
	}
	memcpy(b->labels + (size_t)n * nl, label, sizeof(float) * nl);
	b->row_off[n + 1] = k;
	b->n = n + 1;
	return ST__ROW_OK;
}
