/*
 * read.c — the reader object: opening a file for a format, the row loop of
 * st_reader_next, the bad-record policy, keys and number parsing.
 *
 * Format parsers live in criteo.c, libsvm.c and csv.c and see one line at a
 * time; buffered (and decompressed) input lives in lines.c; the read stage
 * (threads, file cursor, batches) in stage.c.
 *
 * Threads: a reader is used by one thread at a time. The only state shared
 * between readers is the optional bad-record report counter (an atomic).
 *
 * Bad records: the parser describes the problem (field, reason) and returns
 * ST__ROW_BAD without committing the row; this file counts it, logs the
 * first max_report with "path:line: field N (NAME): reason", then one line
 * saying the rest are counted only, and under ST_BAD_FAIL stops with
 * ST_EBADREC and the message in st_reader_error.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "read_internal.h"

#include "runtime/err.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t st_read_key(uint32_t slot, const char *val, size_t len)
{
	return XXH3_64bits_withSeed(val, len, slot);
}

uint64_t st_read_missing_key(uint32_t slot)
{
	return XXH3_64bits_withSeed(ST_READ_MISSING, sizeof ST_READ_MISSING - 1, slot);
}

int st__read_int(const char *p, size_t n, int64_t *out)
{
	const char *e = p + n;
	int neg = 0;
	if (p < e && *p == '-') {
		neg = 1;
		p++;
	}
	/* 18 digits always fit in int64 without overflow checks. */
	if (p == e || e - p > 18)
		return ST_EINVAL;
	int64_t v = 0;
	for (; p < e; p++) {
		unsigned d = (unsigned char)*p - '0';
		if (d > 9)
			return ST_EINVAL;
		v = v * 10 + d;
	}
	*out = neg ? -v : v;
	return 0;
}

static const double pow10_tab[] = {
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* Decimal floats "[-+]digits[.digits][e[-+]digits]" and ".5"-style forms.
 * Results are stored as float, so a mantissa kept to 19 digits and a power
 * of ten applied in double are more than precise enough; no locale, no
 * strtod, no NUL terminator needed. Returns ST_OK, ST_EINVAL (syntax) or
 * ST_ERANGE (out of a float's range). */
int st__read_float(const char *p, size_t n, float *out)
{
	const char *e = p + n;
	int neg = 0;
	if (p < e && (*p == '-' || *p == '+')) {
		neg = *p == '-';
		p++;
	}
	uint64_t m = 0;
	long exp10 = 0;
	size_t nd = 0;
	for (; p < e && (unsigned)(*p - '0') <= 9; p++, nd++) {
		if (m < UINT64_C(1000000000000000000))
			m = m * 10 + (uint64_t)(*p - '0');
		else
			exp10++;
	}
	if (p < e && *p == '.') {
		for (p++; p < e && (unsigned)(*p - '0') <= 9; p++, nd++) {
			if (m < UINT64_C(1000000000000000000)) {
				m = m * 10 + (uint64_t)(*p - '0');
				exp10--;
			}
		}
	}
	if (nd == 0)
		return ST_EINVAL;
	if (p < e && (*p == 'e' || *p == 'E')) {
		p++;
		int eneg = 0;
		if (p < e && (*p == '-' || *p == '+')) {
			eneg = *p == '-';
			p++;
		}
		if (p == e)
			return ST_EINVAL;
		long ev = 0;
		for (; p < e && (unsigned)(*p - '0') <= 9; p++)
			if (ev < 100000)
				ev = ev * 10 + (*p - '0');
		exp10 += eneg ? -ev : ev;
	}
	if (p != e)
		return ST_EINVAL;
	double v = (double)m;
	if (m == 0 || exp10 < -400) {
		v = 0;
	} else if (exp10 > 400) {
		return ST_ERANGE;
	} else {
		while (exp10 > 22) {
			v *= 1e22;
			exp10 -= 22;
		}
		while (exp10 < -22) {
			v /= 1e22;
			exp10 += 22;
		}
		v = exp10 >= 0 ? v * pow10_tab[exp10] : v / pow10_tab[-exp10];
	}
	if (v > FLT_MAX)
		return ST_ERANGE;
	*out = (float)(neg ? -v : v);
	return 0;
}

void st__read_quote(char *dst, size_t dstlen, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, lim = 40;
	if (dstlen < 8) {
		if (dstlen)
			dst[0] = 0;
		return;
	}
	for (size_t i = 0; i < n && o + 5 < dstlen; i++) {
		if (i == lim) {
			if (o + 4 < dstlen) {
				memcpy(dst + o, "...", 3);
				o += 3;
			}
			break;
		}
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '\\') {
			dst[o++] = (char)c;
		} else {
			dst[o++] = '\\';
			dst[o++] = 'x';
			dst[o++] = hex[c >> 4];
			dst[o++] = hex[c & 15];
		}
	}
	dst[o] = 0;
}

int st__reader_bad(st_reader_t *r, int field, const char *name,
		   const char *fmt, ...)
{
	va_list ap;
	r->bad_field = field;
	r->bad_name = name;
	va_start(ap, fmt);
	vsnprintf(r->bad_reason, sizeof r->bad_reason, fmt, ap);
	va_end(ap);
	return ST__ROW_BAD;
}

static int fmt_of(const char *name)
{
	if (!name)
		return 0;
	if (strcmp(name, "criteo") == 0)
		return ST__FMT_CRITEO;
	if (strcmp(name, "libsvm") == 0 || strcmp(name, "libffm") == 0)
		return ST__FMT_LIBSVM;
	if (strcmp(name, "csv") == 0)
		return ST__FMT_CSV;
	return 0;
}

/* Checks that the source's shape matches its format; sets up the reader's
 * copy of the schema. */
static int reader_init(st_reader_t *r, const st_source_t *src, char *errbuf,
		       size_t errlen)
{
	r->fmt = fmt_of(src->format);
	r->on_bad = src->on_bad;
	r->max_report = src->max_report < 0 ? 0 : src->max_report;
	r->n_dense = src->n_dense < 0 ? 0 : (uint32_t)src->n_dense;
	r->n_slots = src->n_slots < 0 ? 0 : (uint32_t)src->n_slots;
	r->n_labels = (uint32_t)st_source_labels(src);
	r->reported = &r->own_reported;
	atomic_init(&r->own_reported, 0);
	r->missing = src->missing == ST_MISSING_KEY ? ST_MISSING_KEY : ST_MISSING_DROP;
	r->dense_indicator = src->dense_indicator != 0;
	const int dmul = r->dense_indicator ? 2 : 1;
	switch (r->fmt) {
	case ST__FMT_CRITEO:
		if (src->n_dense != 13 * dmul || src->n_slots != 26) {
			snprintf(errbuf, errlen,
				 "%s: criteo needs n_dense %d and n_slots 26, source has %d/%d",
				 r->path, 13 * dmul, src->n_dense, src->n_slots);
			return ST_EINVAL;
		}
		if (r->n_labels != 1) {
			snprintf(errbuf, errlen, "%s: criteo has one label per line, the source "
				 "says %u", r->path, r->n_labels);
			return ST_EINVAL;
		}
		return ST_OK;
	case ST__FMT_LIBSVM:
		if (src->n_dense != 0 || src->n_slots < 1 || src->n_slots > 65536) {
			snprintf(errbuf, errlen,
				 "%s: libsvm needs n_dense 0 and 1 <= n_slots <= 65536, source has %d/%d",
				 r->path, src->n_dense, src->n_slots);
			return ST_EINVAL;
		}
		if (r->n_labels > ST_BATCH_MAX_LABELS) {
			snprintf(errbuf, errlen, "%s: libsvm labels %u, at most %d", r->path,
				 r->n_labels, ST_BATCH_MAX_LABELS);
			return ST_EINVAL;
		}
		return ST_OK;
	case ST__FMT_CSV:
		break;
	default:
		snprintf(errbuf, errlen, "%s: unknown format '%s' (expected criteo, libsvm or csv)",
			 r->path, src->format ? src->format : "(null)");
		return ST_EFORMAT;
	}
	int nd = 0, ns = 0, nl = 0;
	if (src->n_cols < 1 || !src->col_kind || src->sep == '"' ||
	    src->sep == '\n' || src->sep == '\r') {
		snprintf(errbuf, errlen, "%s: csv needs a schema (n_cols >= 1) and a separator other than quote or newline",
			 r->path);
		return ST_EINVAL;
	}
	for (int i = 0; i < src->n_cols; i++) {
		nd += src->col_kind[i] == ST_COL_DENSE;
		ns += src->col_kind[i] == ST_COL_CAT;
		nl += src->col_kind[i] == ST_COL_LABEL;
		if (src->col_kind[i] > ST_COL_CAT) {
			snprintf(errbuf, errlen, "%s: csv column %d has unknown kind %d",
				 r->path, i, src->col_kind[i]);
			return ST_EINVAL;
		}
	}
	if (nl != (int)r->n_labels || nd * dmul != src->n_dense || ns != src->n_slots ||
	    ns > 65536) {
		snprintf(errbuf, errlen,
			 "%s: csv schema has %d label, %d dense, %d cat columns; source says n_labels %u, n_dense %d, n_slots %d",
			 r->path, nl, nd, ns, r->n_labels, src->n_dense, src->n_slots);
		return ST_EINVAL;
	}
	r->sep = src->sep;
	r->header = src->header;
	r->n_cols = src->n_cols;
	r->col_kind = malloc((size_t)src->n_cols);
	r->scratch = malloc(st__lines_max_line(r->lines) + 1);
	r->slot_opt = calloc((size_t)ns + 1, sizeof *r->slot_opt);
	if (!r->col_kind || !r->scratch || !r->slot_opt) {
		snprintf(errbuf, errlen, "%s: out of memory", r->path);
		return ST_ENOMEM;
	}
	memcpy(r->col_kind, src->col_kind, (size_t)src->n_cols);
	for (int i = 0; i < ns; i++) {
		if (src->slot_opt) {
			r->slot_opt[i] = src->slot_opt[i];
		} else {
			r->slot_opt[i].missing = (uint8_t)r->missing;
		}
		char ls = r->slot_opt[i].list_sep;
		if (ls == src->sep || ls == '"' || ls == '\n' || ls == '\r') {
			snprintf(errbuf, errlen, "%s: csv slot %d has list separator '%c', which "
				 "cannot separate items of a field separated by '%c'",
				 r->path, i, ls, src->sep);
			return ST_EINVAL;
		}
	}
	return ST_OK;
}

int st__reader_open_ex(st_reader_t **out, const st_source_t *src,
		       const char *path, char *errbuf, size_t errlen)
{
	st_reader_t *r = calloc(1, sizeof *r);
	if (!r || !(r->path = strdup(path))) {
		free(r);
		snprintf(errbuf, errlen, "%s: out of memory", path);
		return ST_ENOMEM;
	}
	int rc = st__lines_open(&r->lines, path, errbuf, errlen);
	if (rc >= 0)
		rc = reader_init(r, src, errbuf, errlen);
	if (rc < 0) {
		st_reader_close(r);
		return rc;
	}
	*out = r;
	return ST_OK;
}

int st__reader_open_mem(st_reader_t **out, const st_source_t *src,
			const char *name, const void *data, size_t len,
			size_t buf_size, size_t max_line)
{
	char errbuf[256];
	st_reader_t *r = calloc(1, sizeof *r);
	if (!r || !(r->path = strdup(name))) {
		free(r);
		return ST_ENOMEM;
	}
	int rc = st__lines_open_mem(&r->lines, data, len, buf_size, max_line);
	if (rc >= 0)
		rc = reader_init(r, src, errbuf, sizeof errbuf);
	if (rc < 0) {
		st_reader_close(r);
		return rc;
	}
	*out = r;
	return ST_OK;
}

int st_reader_open(st_reader_t **out, const st_source_t *src, const char *path)
{
	char errbuf[512];
	int rc = st__reader_open_ex(out, src, path, errbuf, sizeof errbuf);
	if (rc < 0)
		st_error("%s", errbuf);
	return rc;
}

void st__reader_share_reported(st_reader_t *r, atomic_uint_fast64_t *counter)
{
	r->reported = counter;
}

/* Counts the current bad record and reports it per the policy. Returns
 * ST_OK to go on or ST_EBADREC to stop. */
static int handle_bad(st_reader_t *r)
{
	uint64_t line = st__lines_lineno(r->lines);
	r->stats.bad++;
	if (r->bad_field >= 0) {
		snprintf(r->err, sizeof r->err, "%s:%llu: field %d%s%s%s: %s",
			 r->path, (unsigned long long)line, r->bad_field,
			 r->bad_name ? " (" : "", r->bad_name ? r->bad_name : "",
			 r->bad_name ? ")" : "", r->bad_reason);
	} else {
		snprintf(r->err, sizeof r->err, "%s:%llu: %s", r->path,
			 (unsigned long long)line, r->bad_reason);
	}
	if (r->on_bad == ST_BAD_FAIL)
		return ST_EBADREC;
	uint64_t k = atomic_fetch_add(r->reported, 1);
	if (k < (uint64_t)r->max_report)
		st_warn("%s", r->err);
	if (k == (uint64_t)r->max_report)
		st_warn("%s: more bad records; further ones are counted only", r->path);
	return ST_OK;
}

int st_reader_next(st_reader_t *r, st_batch_t *b, uint32_t max_rows)
{
	if (b->n_dense != r->n_dense || b->n_slots != r->n_slots || b->n_labels != r->n_labels) {
		snprintf(r->err, sizeof r->err,
			 "%s: batch has n_dense %u / n_slots %u / n_labels %u, reader needs %u / %u / %u",
			 r->path, b->n_dense, b->n_slots, b->n_labels, r->n_dense, r->n_slots,
			 r->n_labels);
		return ST_EINVAL;
	}
	uint32_t room = b->cap - b->n;
	if (max_rows < room)
		room = max_rows;
	if (room > INT32_MAX)  /* the count is returned as int */
		room = INT32_MAX;
	uint32_t added = 0;
	while (added < room) {
		const char *line;
		size_t len;
		int rc = st__lines_next(r->lines, &line, &len);
		if (rc == ST__LINE_EOF)
			break;
		if (rc < 0) {
			snprintf(r->err, sizeof r->err, "%s", st__lines_error(r->lines));
			r->stats.bytes = st__lines_bytes(r->lines);
			return rc;
		}
		if (rc == ST__LINE_LONG) {
			rc = st__reader_bad(r, -1, NULL, "line longer than %zu bytes",
					    st__lines_max_line(r->lines));
		} else if (r->fmt == ST__FMT_CRITEO) {
			rc = st__criteo_parse(r, b, line, len);
		} else if (r->fmt == ST__FMT_LIBSVM) {
			rc = st__libsvm_parse(r, b, line, len);
		} else if (r->header && st__lines_lineno(r->lines) == 1) {
			rc = st__csv_header(r, line, len);
			if (rc == ST__ROW_OK)
				continue;
		} else {
			rc = st__csv_parse(r, b, line, len);
		}
		if (rc == ST__ROW_OK) {
			added++;
			continue;
		}
		if (rc < 0) {
			snprintf(r->err, sizeof r->err, "%s:%llu: %s", r->path,
				 (unsigned long long)st__lines_lineno(r->lines),
				 st_strerror(rc));
			return rc;
		}
		rc = handle_bad(r);
		if (rc < 0) {
			r->stats.rows += added;
			r->stats.bytes = st__lines_bytes(r->lines);
			return rc;
		}
	}
	r->stats.rows += added;
	r->stats.bytes = st__lines_bytes(r->lines);
	return (int)added;
}

const char *st_reader_error(const st_reader_t *r)
{
	return r ? r->err : "no reader";
}

void st_reader_stats(const st_reader_t *r, st_read_stats_t *out)
{
	*out = r->stats;
}

void st_reader_close(st_reader_t *r)
{
	if (!r)
		return;
	st__lines_close(r->lines);
	if (r->col_name) {
		for (int i = 0; i < r->n_cols; i++)
			free(r->col_name[i]);
		free(r->col_name);
	}
	free(r->col_kind);
	free(r->slot_opt);
	free(r->scratch);
	free(r->path);
	free(r);
}
