/*
 * safetensors.c — safetensors writer and strict reader (see safetensors.h).
 *
 * The writer builds the JSON header from the shapes alone, so it can stream
 * the tensor data straight from the caller's arrays after it; offsets are
 * assigned in the caller's order, each F32 tensor 4-byte aligned because the
 * header is padded to a multiple of 8 and every length is a multiple of 4.
 *
 * The reader does not use a general JSON library: the header has a fixed
 * schema (an object of objects, plus one object of strings), so a small
 * schema-directed parser is both shorter and stricter. It never recurses
 * past that fixed depth, never reads past the header, and decodes strings
 * into one arena of header-length bytes (a decoded JSON string is never
 * longer than its source), so hostile input costs at most O(N) memory.
 */
#include "ops/dump/safetensors.h"
#include "runtime/err.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *name;
	size_t size;
} dtypes[ST_SAFETENSORS_NDTYPES] = {
	[ST_SAFETENSORS_BOOL] = { "BOOL", 1 },   [ST_SAFETENSORS_U8] = { "U8", 1 },
	[ST_SAFETENSORS_I8] = { "I8", 1 },       [ST_SAFETENSORS_F8_E5M2] = { "F8_E5M2", 1 },
	[ST_SAFETENSORS_F8_E4M3] = { "F8_E4M3", 1 }, [ST_SAFETENSORS_I16] = { "I16", 2 },
	[ST_SAFETENSORS_U16] = { "U16", 2 },     [ST_SAFETENSORS_F16] = { "F16", 2 },
	[ST_SAFETENSORS_BF16] = { "BF16", 2 },   [ST_SAFETENSORS_I32] = { "I32", 4 },
	[ST_SAFETENSORS_U32] = { "U32", 4 },     [ST_SAFETENSORS_F32] = { "F32", 4 },
	[ST_SAFETENSORS_F64] = { "F64", 8 },     [ST_SAFETENSORS_I64] = { "I64", 8 },
	[ST_SAFETENSORS_U64] = { "U64", 8 },
};

const char *st_safetensors_dtype_name(st_safetensors_dtype_t d)
{
	return (unsigned)d < ST_SAFETENSORS_NDTYPES ? dtypes[d].name : "?";
}

size_t st_safetensors_dtype_size(st_safetensors_dtype_t d)
{
	return (unsigned)d < ST_SAFETENSORS_NDTYPES ? dtypes[d].size : 0;
}

/* ---------------------------------------------------------------- writer */

typedef struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *q = realloc(b->p, cap);
		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void sb_puts(sbuf_t *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
	char tmp[128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	sb_put(b, tmp, (size_t)n);   /* callers print numbers only: n < 128 */
}

/* Length of the valid UTF-8 sequence at s (s < end), or 0 if invalid
 * (overlong forms, surrogates and code points above U+10FFFF are invalid,
 * as in RFC 3629). */
static size_t utf8_len(const unsigned char *s, const unsigned char *end)
{
	unsigned c = s[0];
	size_t n;
	unsigned cp;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, cp = c & 0x07;
	else
		return 0;
	if ((size_t)(end - s) < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static int valid_utf8(const char *s)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
	while (p < end) {
		size_t n = utf8_len(p, end);
		if (!n)
			return 0;
		p += n;
	}
	return 1;
}

static void sb_json_string(sbuf_t *b, const char *s)
{
	sb_put(b, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			char e[2] = { '\\', (char)*p };
			sb_put(b, e, 2);
		} else if (*p < 0x20) {
			sb_printf(b, "\\u%04x", *p);
		} else {
			sb_put(b, (const char *)p, 1);
		}
	}
	sb_put(b, "\"", 1);
}

/* Checks the arguments and computes each tensor's byte length. */
static int check_write_args(const char *path, const st_safetensors_tensor_t *t, int n,
			    const st_kv_t *meta, int n_meta, uint64_t *lens,
			    char *err, size_t errlen)
{
	if (n < 0 || n_meta < 0 || (n > 0 && !t) || (n_meta > 0 && !meta)) {
		st__dumpio_seterr(err, errlen, "%s: bad tensor or metadata count", path);
		return ST_EINVAL;
	}
	for (int i = 0; i < n; i++) {
		const char *nm = t[i].name;
		if (!nm || !*nm || !strcmp(nm, "__metadata__") || !valid_utf8(nm)) {
			st__dumpio_seterr(err, errlen, "%s: tensor %d: name must be non-empty UTF-8 "
					  "and not \"__metadata__\"", path, i);
			return ST_EINVAL;
		}
		for (int j = 0; j < i; j++) {
			if (!strcmp(nm, t[j].name)) {
				st__dumpio_seterr(err, errlen, "%s: tensor name '%s' given twice", path, nm);
				return ST_EINVAL;
			}
		}
		if (t[i].ndim < 0 || t[i].ndim > ST_SAFETENSORS_MAX_DIMS) {
			st__dumpio_seterr(err, errlen, "%s: tensor '%s': %d dimensions (0..%d allowed)",
					  path, nm, t[i].ndim, ST_SAFETENSORS_MAX_DIMS);
			return ST_EINVAL;
		}
		uint64_t numel = 1;
		for (int d = 0; d < t[i].ndim; d++) {
			if (t[i].shape[d] < 0 ||
			    (t[i].shape[d] > 0 && numel > (UINT64_MAX / 4) / (uint64_t)t[i].shape[d])) {
				st__dumpio_seterr(err, errlen, "%s: tensor '%s': bad shape", path, nm);
				return ST_EINVAL;
			}
			numel *= (uint64_t)t[i].shape[d];
		}
		if (numel > 0 && !t[i].f32) {
			st__dumpio_seterr(err, errlen, "%s: tensor '%s': no data", path, nm);
			return ST_EINVAL;
		}
		lens[i] = numel * 4;
	}
	for (int i = 0; i < n_meta; i++) {
		if (!meta[i].key || !meta[i].value || !valid_utf8(meta[i].key) ||
		    !valid_utf8(meta[i].value)) {
			st__dumpio_seterr(err, errlen, "%s: metadata %d: key and value must be UTF-8 strings",
					  path, i);
			return ST_EINVAL;
		}
		for (int j = 0; j < i; j++) {
			if (!strcmp(meta[i].key, meta[j].key)) {
				st__dumpio_seterr(err, errlen, "%s: metadata key '%s' given twice",
						  path, meta[i].key);
				return ST_EINVAL;
			}
		}
	}
	return ST_OK;
}

int st_safetensors_write(const char *path, const st_safetensors_tensor_t *t, int n,
			 const st_kv_t *meta, int n_meta, st_dumpio_sum_t *sum,
			 char *err, size_t errlen)
{
	uint64_t *lens = calloc((size_t)(n > 0 ? n : 1), sizeof *lens);
	if (!lens)
		return ST_ENOMEM;
	int rc = check_write_args(path, t, n, meta, n_meta, lens, err, errlen);
	if (rc < 0) {
		free(lens);
		return rc;
	}
	sbuf_t b = { 0 };
	sb_puts(&b, "{");
	if (n_meta > 0) {
		sb_puts(&b, "\"__metadata__\":{");
		for (int i = 0; i < n_meta; i++) {
			if (i)
				sb_puts(&b, ",");
			sb_json_string(&b, meta[i].key);
			sb_puts(&b, ":");
			sb_json_string(&b, meta[i].value);
		}
		sb_puts(&b, "}");
	}
	uint64_t off = 0;
	for (int i = 0; i < n; i++) {
		if (i || n_meta > 0)
			sb_puts(&b, ",");
		sb_json_string(&b, t[i].name);
		sb_puts(&b, ":{\"dtype\":\"F32\",\"shape\":[");
		for (int d = 0; d < t[i].ndim; d++)
			sb_printf(&b, d ? ",%" PRId64 : "%" PRId64, t[i].shape[d]);
		sb_printf(&b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + lens[i]);
		off += lens[i];
	}
	sb_puts(&b, "}");
	while (b.len % 8)   /* so the data starts 8-aligned, as the reference writer does */
		sb_puts(&b, " ");
	if (b.oom) {
		free(b.p);
		free(lens);
		st__dumpio_seterr(err, errlen, "%s: out of memory for the header", path);
		return ST_ENOMEM;
	}

	st__dumpio_t *f;
	rc = st__dumpio_open(&f, path, err, errlen);
	if (rc < 0) {
		free(b.p);
		free(lens);
		return rc;
	}
	uint8_t n8[8];
	for (int i = 0; i < 8; i++)
		n8[i] = (uint8_t)((uint64_t)b.len >> (8 * i));
	st__dumpio_write(f, n8, 8);
	st__dumpio_write(f, b.p, b.len);
	for (int i = 0; i < n; i++)
		if (lens[i])
			st__dumpio_write(f, t[i].f32, lens[i]);
	/* write errors are sticky: close reports the first one */
	rc = st__dumpio_close(f, sum, err, errlen);
	free(b.p);
	free(lens);
	return rc;
}

/* ---------------------------------------------------------------- reader */

typedef struct priv {
	char *arena;          /* decoded strings */
	size_t arena_used;
	uint8_t *file;        /* the file image; data lives inside it */
} priv_t;

typedef struct jp {
	const unsigned char *start, *p, *end;
	const char *name;
	char *err;
	size_t errlen;
	priv_t *pv;
} jp_t;

/* Reports a header syntax or schema error at the current position (as a
 * byte offset in the file, which is what a hex dump shows). */
static int jerr(jp_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jerr(jp_t *j, const char *fmt, ...)
{
	char what[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	st__dumpio_seterr(j->err, j->errlen, "%s: malformed safetensors header at byte %zu: %s",
			  j->name, (size_t)(j->p - j->start) + 8, what);
	return ST_EFORMAT;
}

static void ws(jp_t *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int expect(jp_t *j, char c, const char *where)
{
	ws(j);
	if (j->p >= j->end)
		return jerr(j, "header ends where '%c' %s was expected", c, where);
	if (*j->p != c)
		return jerr(j, "expected '%c' %s", c, where);
	j->p++;
	return ST_OK;
}

/* Four hex digits: ST_OK and *out, or ST_EFORMAT. */
static int hex4(const unsigned char *p, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		int c = p[i], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return ST_EFORMAT;
		v = v << 4 | (unsigned)d;
	}
	*out = v;
	return ST_OK;
}

static char *put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		*o++ = (char)cp;
	} else if (cp < 0x800) {
		*o++ = (char)(0xc0 | cp >> 6);
		*o++ = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		*o++ = (char)(0xe0 | cp >> 12);
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
		*o++ = (char)(0x80 | (cp & 0x3f));
	} else {
		*o++ = (char)(0xf0 | cp >> 18);
		*o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
		*o++ = (char)(0x80 | (cp & 0x3f));
	}
	return o;
}

/* Parses a JSON string into the arena; *out is NUL-terminated. */
static int jstring(jp_t *j, const char **out, const char *what)
{
	ws(j);
	if (j->p >= j->end)
		return jerr(j, "header ends where a string (%s) was expected", what);
	if (*j->p != '"')
		return jerr(j, "expected a string (%s)", what);
	j->p++;
	char *o = j->pv->arena + j->pv->arena_used, *o0 = o;
	for (;;) {
		if (j->p >= j->end)
			return jerr(j, "unterminated string (%s)", what);
		unsigned c = *j->p;
		if (c == '"') {
			j->p++;
			break;
		}
		if (c < 0x20)
			return jerr(j, "control character 0x%02x in a string (%s)", c, what);
		if (c == '\\') {
			if (j->end - j->p < 2)
				return jerr(j, "unterminated escape (%s)", what);
			unsigned e = j->p[1];
			const char *simple = strchr("\"\\/bfnrt", (int)e);
			if (e && simple) {
				static const char map[] = "\"\\/\b\f\n\r\t";
				*o++ = map[simple - "\"\\/bfnrt"];
				j->p += 2;
				continue;
			}
			if (e != 'u')
				return jerr(j, "invalid escape '\\%c' (%s)", e >= 0x20 && e < 0x7f ? (char)e : '?', what);
			unsigned cp, lo;
			if (j->end - j->p < 6 || hex4(j->p + 2, &cp) < 0)
				return jerr(j, "invalid \\u escape (%s)", what);
			j->p += 6;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return jerr(j, "lone low surrogate in \\u escape (%s)", what);
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' ||
				    hex4(j->p + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
					return jerr(j, "lone high surrogate in \\u escape (%s)", what);
				j->p += 6;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			if (cp == 0)
				return jerr(j, "NUL character in a string (%s)", what);
			o = put_utf8(o, cp);
			continue;
		}
		size_t n = utf8_len(j->p, j->end);
		if (!n)
			return jerr(j, "invalid UTF-8 in a string (%s)", what);
		memcpy(o, j->p, n);
		o += n;
		j->p += n;
	}
	*o++ = 0;
	j->pv->arena_used += (size_t)(o - o0);
	*out = o0;
	return ST_OK;
}

/* A non-negative integer that fits in max. */
static int juint(jp_t *j, uint64_t max, uint64_t *out, const char *what)
{
	ws(j);
	if (j->p >= j->end)
		return jerr(j, "header ends where a number (%s) was expected", what);
	if (*j->p == '-')
		return jerr(j, "negative number (%s)", what);
	if (*j->p < '0' || *j->p > '9')
		return jerr(j, "expected a number (%s)", what);
	if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
		return jerr(j, "number with a leading zero (%s)", what);
	uint64_t v = 0;
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
		unsigned d = (unsigned)(*j->p - '0');
		if (v > (max - d) / 10)
			return jerr(j, "number too large (%s)", what);
		v = v * 10 + d;
		j->p++;
	}
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return jerr(j, "not an integer (%s)", what);
	*out = v;
	return ST_OK;
}

/* '[' u, u, ... ']' with at most max_n entries; *n is set. */
static int juint_array(jp_t *j, uint64_t *v, int max_n, int *n, uint64_t max, const char *what)
{
	int rc = expect(j, '[', what);
	if (rc < 0)
		return rc;
	*n = 0;
	ws(j);
	if (j->p < j->end && *j->p == ']') {
		j->p++;
		return ST_OK;
	}
	for (;;) {
		if (*n == max_n)
			return jerr(j, "too many entries in %s (at most %d)", what, max_n);
		rc = juint(j, max, &v[*n], what);
		if (rc < 0)
			return rc;
		(*n)++;
		ws(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		return expect(j, ']', what);
	}
}

/* The members of an object; calls fn for each key with j->p at the value. */
typedef int member_fn(jp_t *j, const char *key, void *arg);

static int jobject(jp_t *j, member_fn *fn, void *arg, const char *what)
{
	int rc = expect(j, '{', what);
	if (rc < 0)
		return rc;
	ws(j);
	if (j->p < j->end && *j->p == '}') {
		j->p++;
		return ST_OK;
	}
	for (;;) {
		const char *key;
		if ((rc = jstring(j, &key, what)) < 0 || (rc = expect(j, ':', "after a key")) < 0 ||
		    (rc = fn(j, key, arg)) < 0)
			return rc;
		ws(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		return expect(j, '}', what);
	}
}

/* Growable arrays of the result. */
typedef struct acc {
	st_safetensors_t *f;
	int cap_t, cap_m;
	int seen_meta;
	const unsigned char *tensor_pos;   /* start of the current tensor entry */
} acc_t;

static int meta_member(jp_t *j, const char *key, void *arg)
{
	acc_t *a = arg;
	st_safetensors_t *f = a->f;
	const char *val;
	int rc = jstring(j, &val, "a __metadata__ value must be a string");
	if (rc < 0)
		return rc;
	if (f->n_meta == a->cap_m) {
		int cap = a->cap_m ? 2 * a->cap_m : 8;
		st_kv_t *m = realloc(f->meta, (size_t)cap * sizeof *m);
		if (!m)
			return ST_ENOMEM;
		f->meta = m;
		a->cap_m = cap;
	}
	f->meta[f->n_meta++] = (st_kv_t){ key, val };
	return ST_OK;
}

typedef struct tinfo {
	st_safetensors_tensor_t *t;
	uint64_t off[2];
	int have_dtype, have_shape, have_off;
} tinfo_t;

static int tensor_member(jp_t *j, const char *key, void *arg)
{
	tinfo_t *ti = arg;
	int rc, n;
	if (!strcmp(key, "dtype")) {
		if (ti->have_dtype++)
			return jerr(j, "tensor '%s': \"dtype\" appears twice", ti->t->name);
		const char *s;
		if ((rc = jstring(j, &s, "dtype")) < 0)
			return rc;
		for (int d = 0; d < ST_SAFETENSORS_NDTYPES; d++) {
			if (!strcmp(s, dtypes[d].name)) {
				ti->t->dtype = (st_safetensors_dtype_t)d;
				return ST_OK;
			}
		}
		return jerr(j, "tensor '%s': unknown dtype '%s'", ti->t->name, s);
	}
	if (!strcmp(key, "shape")) {
		if (ti->have_shape++)
			return jerr(j, "tensor '%s': \"shape\" appears twice", ti->t->name);
		uint64_t v[ST_SAFETENSORS_MAX_DIMS];
		if ((rc = juint_array(j, v, ST_SAFETENSORS_MAX_DIMS, &n, INT64_MAX, "shape")) < 0)
			return rc;
		ti->t->ndim = n;
		for (int d = 0; d < n; d++)
			ti->t->shape[d] = (int64_t)v[d];
		return ST_OK;
	}
	if (!strcmp(key, "data_offsets")) {
		if (ti->have_off++)
			return jerr(j, "tensor '%s': \"data_offsets\" appears twice", ti->t->name);
		if ((rc = juint_array(j, ti->off, 2, &n, UINT64_MAX, "data_offsets")) < 0)
			return rc;
		if (n != 2)
			return jerr(j, "tensor '%s': data_offsets needs [begin, end]", ti->t->name);
		return ST_OK;
	}
	return jerr(j, "tensor '%s': unknown field '%s'", ti->t->name, key);
}

static int top_member(jp_t *j, const char *key, void *arg)
{
	acc_t *a = arg;
	st_safetensors_t *f = a->f;
	if (!strcmp(key, "__metadata__")) {
		if (a->seen_meta++)
			return jerr(j, "\"__metadata__\" appears twice");
		return jobject(j, meta_member, a, "__metadata__");
	}
	if (f->n_tensors == a->cap_t) {
		int cap = a->cap_t ? 2 * a->cap_t : 16;
		st_safetensors_tensor_t *t = realloc(f->tensors, (size_t)cap * sizeof *t);
		if (!t)
			return ST_ENOMEM;
		f->tensors = t;
		a->cap_t = cap;
	}
	st_safetensors_tensor_t *t = &f->tensors[f->n_tensors];
	memset(t, 0, sizeof *t);
	t->name = key;
	tinfo_t ti = { .t = t };
	const unsigned char *pos = j->p;
	int rc = jobject(j, tensor_member, &ti, "a tensor entry");
	if (rc < 0)
		return rc;
	if (!ti.have_dtype || !ti.have_shape || !ti.have_off) {
		j->p = pos;
		return jerr(j, "tensor '%s' lacks \"%s\"", key,
			    !ti.have_dtype ? "dtype" : !ti.have_shape ? "shape" : "data_offsets");
	}
	/* Stash the offsets in data/nbytes until the data is located. */
	t->data = (const void *)(uintptr_t)ti.off[0];
	t->nbytes = ti.off[1];
	f->n_tensors++;
	return ST_OK;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Finds a name given twice among n strings at base + i * stride (sorting
 * pointers, so a header with many entries costs O(n log n), not O(n^2)). */
static int find_dup(const void *base, int n, size_t stride, const char **dup)
{
	if (n < 2)
		return 0;
	const char **v = malloc((size_t)n * sizeof *v);
	if (!v)
		return ST_ENOMEM;
	for (int i = 0; i < n; i++)
		v[i] = *(const char *const *)(const void *)((const char *)base + (size_t)i * stride);
	qsort(v, (size_t)n, sizeof *v, cmp_str);
	int found = 0;
	for (int i = 1; i < n && !found; i++)
		if (!strcmp(v[i - 1], v[i]))
			*dup = v[i], found = 1;
	free(v);
	return found;
}

static int cmp_begin(const void *a, const void *b)
{
	const st_safetensors_tensor_t *x = a, *y = b;
	uint64_t bx = (uint64_t)(uintptr_t)x->data, by = (uint64_t)(uintptr_t)y->data;
	if (bx != by)
		return bx < by ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

void st_safetensors_free(st_safetensors_t *f)
{
	if (!f)
		return;
	priv_t *pv = f->priv_;
	if (pv) {
		free(pv->arena);
		free(pv->file);
		free(pv);
	}
	free(f->tensors);
	free(f->meta);
	free(f);
}

/* Parses the image in buf (len bytes), taking ownership of buf. */
static int parse_owned(uint8_t *buf, size_t len, const char *name, st_safetensors_t **out,
		       char *err, size_t errlen)
{
	*out = NULL;
	if (len < 8) {
		free(buf);
		st__dumpio_seterr(err, errlen, "%s: truncated: %zu bytes, shorter than the 8-byte "
				  "header length", name, len);
		return ST_ECORRUPT;
	}
	uint64_t n = 0;
	for (int i = 0; i < 8; i++)
		n |= (uint64_t)buf[i] << (8 * i);
	if (n > ST_SAFETENSORS_MAX_HEADER) {
		free(buf);
		st__dumpio_seterr(err, errlen, "%s: not a safetensors file: header length %" PRIu64
				  " is over the %" PRIu64 "-byte limit", name, n, ST_SAFETENSORS_MAX_HEADER);
		return ST_EFORMAT;
	}
	if (n > len - 8) {
		free(buf);
		st__dumpio_seterr(err, errlen, "%s: truncated: the header is %" PRIu64 " bytes but "
				  "only %zu follow the length", name, n, len - 8);
		return ST_ECORRUPT;
	}
	st_safetensors_t *f = calloc(1, sizeof *f);
	priv_t *pv = calloc(1, sizeof *pv);
	char *arena = malloc((size_t)n + 1);
	if (!f || !pv || !arena) {
		free(f);
		free(pv);
		free(arena);
		free(buf);
		return ST_ENOMEM;
	}
	pv->arena = arena;
	pv->file = buf;
	f->priv_ = pv;
	f->header_len = n;
	jp_t j = { .start = buf + 8, .p = buf + 8, .end = buf + 8 + n, .name = name,
		   .err = err, .errlen = errlen, .pv = pv };
	acc_t a = { .f = f };
	int rc;
	if (n == 0 || buf[8] != '{') {
		rc = jerr(&j, "the header must be a JSON object starting with '{'");
		goto fail;
	}
	rc = jobject(&j, top_member, &a, "the header");
	if (rc < 0)
		goto fail;
	ws(&j);
	if (j.p != j.end) {
		rc = jerr(&j, "unexpected bytes after the header object");
		goto fail;
	}
	const char *dup;
	for (int k = 0; k < 2; k++) {
		rc = k == 0 ? find_dup(f->tensors, f->n_tensors, sizeof *f->tensors, &dup)
			    : find_dup(f->meta, f->n_meta, sizeof *f->meta, &dup);
		if (rc > 0) {
			st__dumpio_seterr(err, errlen, "%s: malformed safetensors header: %s '%s' "
					  "appears twice", name, k == 0 ? "tensor" : "metadata key", dup);
			rc = ST_EFORMAT;
		}
		if (rc < 0)
			goto fail;
	}

	/* Place the data where each element is aligned: malloc aligns the
	 * buffer to 16, so move the data to its start unless 8 + n already is
	 * a multiple of 8 (always, for files from the reference writer). */
	uint64_t data_len = len - 8 - n;
	uint8_t *data = buf + 8 + n;
	if ((8 + n) % 8) {
		memmove(buf, data, data_len);
		data = buf;
	}
	if (f->n_tensors > 1)
		qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_begin);
	uint64_t expect_at = 0;
	for (int i = 0; i < f->n_tensors; i++) {
		st_safetensors_tensor_t *t = &f->tensors[i];
		uint64_t b = (uint64_t)(uintptr_t)t->data, e = t->nbytes;
		size_t es = dtypes[t->dtype].size;
		if (e < b) {
			st__dumpio_seterr(err, errlen, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
					  "] end before they begin", name, t->name, b, e);
			rc = ST_EFORMAT;
			goto fail;
		}
		uint64_t numel = 1;
		for (int d = 0; d < t->ndim; d++) {
			uint64_t s = (uint64_t)t->shape[d];
			if (s && numel > UINT64_MAX / es / s) {
				st__dumpio_seterr(err, errlen, "%s: tensor '%s': shape overflows", name, t->name);
				rc = ST_EFORMAT;
				goto fail;
			}
			numel *= s;
		}
		if (numel * es != e - b) {
			st__dumpio_seterr(err, errlen, "%s: tensor '%s': shape x %s is %" PRIu64
					  " bytes but data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64,
					  name, t->name, dtypes[t->dtype].name, numel * es, b, e, e - b);
			rc = ST_EFORMAT;
			goto fail;
		}
		if (b != expect_at) {
			st__dumpio_seterr(err, errlen, "%s: tensor '%s': data begins at %" PRIu64 " but the "
					  "previous tensor ends at %" PRIu64 " (%s)", name, t->name, b,
					  expect_at, b > expect_at ? "a gap" : "they overlap");
			rc = ST_EFORMAT;
			goto fail;
		}
		if (e > data_len) {
			st__dumpio_seterr(err, errlen, "%s: truncated: tensor '%s' ends at data byte %" PRIu64
					  " but the file has %" PRIu64 " data bytes", name, t->name, e, data_len);
			rc = ST_ECORRUPT;
			goto fail;
		}
		if (b % es) {
			st__dumpio_seterr(err, errlen, "%s: tensor '%s': data offset %" PRIu64 " is not a "
					  "multiple of its element size %zu", name, t->name, b, es);
			rc = ST_EFORMAT;
			goto fail;
		}
		expect_at = e;
		t->numel = numel;
		t->nbytes = e - b;
		t->data = data + b;
		t->f32 = t->dtype == ST_SAFETENSORS_F32 ? (const float *)(const void *)(data + b) : NULL;
	}
	if (expect_at != data_len) {
		st__dumpio_seterr(err, errlen, "%s: %" PRIu64 " bytes after the last tensor's data "
				  "(the tensors cover %" PRIu64 " of %" PRIu64 ")", name,
				  data_len - expect_at, expect_at, data_len);
		rc = ST_EFORMAT;
		goto fail;
	}
	*out = f;
	return ST_OK;
fail:
	if (rc == ST_ENOMEM)
		st__dumpio_seterr(err, errlen, "%s: out of memory", name);
	st_safetensors_free(f);
	return rc;
}

int st_safetensors_parse(const void *buf, size_t len, const char *name,
			 st_safetensors_t **out, char *err, size_t errlen)
{
	uint8_t *copy = malloc(len ? len : 1);
	if (!copy)
		return ST_ENOMEM;
	memcpy(copy, buf, len);
	return parse_owned(copy, len, name, out, err, errlen);
}

int st_safetensors_read(const char *path, st_safetensors_t **out, char *err, size_t errlen)
{
	uint8_t *buf;
	size_t len;
	*out = NULL;
	int rc = st__dumpio_read_all(path, SIZE_MAX / 2, &buf, &len, err, errlen);
	if (rc < 0)
		return rc;
	return parse_owned(buf, len, path, out, err, errlen);
}

const st_safetensors_tensor_t *st_safetensors_find(const st_safetensors_t *f, const char *name)
{
	for (int i = 0; i < f->n_tensors; i++)
		if (!strcmp(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}

const char *st_safetensors_meta(const st_safetensors_t *f, const char *key)
{
	for (int i = 0; i < f->n_meta; i++)
		if (!strcmp(f->meta[i].key, key))
			return f->meta[i].value;
	return NULL;
}
