/*
 * safetensors_read.c — the strict safetensors reader (see safetensors.h; the
 * writer is in safetensors.c).
 *
 * The reader does not use a general JSON library: the header has a fixed
 * schema (an object of objects, plus one object of strings), so a small
 * schema-directed parser is both shorter and stricter. It never recurses
 * past that fixed depth, never reads past the header, and decodes strings
 * into one arena of header-length bytes (a decoded JSON string is never
 * longer than its source), so hostile input costs at most O(N) memory.
 *
 * Threads: the caller's only.
 */
#include "ops/dump/safetensors.h"
#include "ops/dump/safetensors_internal.h"
#include "runtime/err.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
		size_t n = st__safetensors_utf8_len(j->p, j->end);
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
			if (!strcmp(s, st_safetensors_dtype_name((st_safetensors_dtype_t)d))) {
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
		size_t es = st_safetensors_dtype_size(t->dtype);
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
					  name, t->name, st_safetensors_dtype_name(t->dtype), numel * es, b, e, e - b);
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
