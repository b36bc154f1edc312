/*
 * safetensors.c — the safetensors writer and the dtype table (see
 * safetensors.h; the strict reader is in safetensors_read.c).
 *
 * The writer builds the JSON header from the shapes alone, so it can stream
 * the tensor data straight from the caller's arrays after it; offsets are
 * assigned in the caller's order, each F32 tensor 4-byte aligned because the
 * header is padded to a multiple of 8 and every length is a multiple of 4.
 */
#include "ops/dump/safetensors.h"
#include "ops/dump/safetensors_internal.h"
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
size_t st__safetensors_utf8_len(const unsigned char *s, const unsigned char *end)
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
		size_t n = st__safetensors_utf8_len(p, end);
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
