/*
 * runlog.c — the metrics-file reader of runlog.h: a small recursive JSON
 * parser (RFC 8259 syntax, depth-limited) that flattens each line's object
 * into dotted keys as it goes, so the report looks values up by name
 * without a tree.
 *
 * Why a parser of its own: the metrics file is the one JSON input with
 * nesting (the trace reader, runtime/trace_read.c, is line-and-key based
 * because every trace event is flat), and a report must say which line is
 * broken rather than draw from half a record.
 */
#include "ops/report/runlog.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define MAX_DEPTH 16
#define MAX_KEY 256

typedef struct {
	const char *s, *p;
	st_runlog_rec_t *rec;
	char *err;
	size_t errlen;
	int failed;      /* 1: err set; -ENOMEM: out of memory */
} parser_t;

static int fail(parser_t *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parser_t *ps, const char *fmt, ...)
{
	if (!ps->failed && ps->errlen) {
		char what[200];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(what, sizeof what, fmt, ap);
		va_end(ap);
		snprintf(ps->err, ps->errlen, "%s (column %d)", what, (int)(ps->p - ps->s) + 1);
	}
	if (!ps->failed)
		ps->failed = 1;
	return -EINVAL;
}

static void skip_ws(parser_t *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
		ps->p++;
}

static int add(parser_t *ps, const char *key, char *str, double num)
{
	st_runlog_rec_t *r = ps->rec;
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 32;
		st_runlog_kv_t *kv = realloc(r->kv, cap * sizeof *kv);
		if (!kv) {
			free(str);
			ps->failed = -ENOMEM;
			return -ENOMEM;
		}
		r->kv = kv;
		r->cap = cap;
	}
	char *k = strdup(key);
	if (!k) {
		free(str);
		ps->failed = -ENOMEM;
		return -ENOMEM;
	}
	r->kv[r->n++] = (st_runlog_kv_t){ .key = k, .str = str, .num = num };
	return 0;
}

/* Appends the UTF-8 bytes of code point c to out (room for 4). */
static size_t utf8(char *out, unsigned c)
{
	if (c < 0x80) {
		out[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		out[0] = (char)(0xc0 | (c >> 6));
		out[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		out[0] = (char)(0xe0 | (c >> 12));
		out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		out[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (c >> 18));
	out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	out[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

static int hex4(const char *p, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

/* A string at ps->p (at its opening quote); *out: a malloc'd copy. */
static int string(parser_t *ps, char **out)
{
	ps->p++;
	size_t cap = 32, n = 0;
	char *b = malloc(cap);
	if (!b) {
		ps->failed = -ENOMEM;
		return -ENOMEM;
	}
	for (;;) {
		if (n + 5 > cap) {
			char *nb = realloc(b, cap *= 2);
			if (!nb) {
				free(b);
				ps->failed = -ENOMEM;
				return -ENOMEM;
			}
			b = nb;
		}
		unsigned char c = (unsigned char)*ps->p;
		if (c == '"') {
			ps->p++;
			break;
		}
		if (c == '\0') {
			free(b);
			return fail(ps, "unterminated string");
		}
		if (c < 0x20) {
			free(b);
			return fail(ps, "control character in a string");
		}
		if (c != '\\') {
			b[n++] = (char)c;
			ps->p++;
			continue;
		}
		char e = ps->p[1];
		ps->p += 2;
		switch (e) {
		case '"': b[n++] = '"'; break;
		case '\\': b[n++] = '\\'; break;
		case '/': b[n++] = '/'; break;
		case 'b': b[n++] = '\b'; break;
		case 'f': b[n++] = '\f'; break;
		case 'n': b[n++] = '\n'; break;
		case 'r': b[n++] = '\r'; break;
		case 't': b[n++] = '\t'; break;
		case 'u': {
			unsigned u, lo;
			if (hex4(ps->p, &u) < 0) {
				free(b);
				return fail(ps, "bad \\u escape");
			}
			ps->p += 4;
			if (u >= 0xd800 && u < 0xdc00 && ps->p[0] == '\\' && ps->p[1] == 'u' &&
			    hex4(ps->p + 2, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000) {
				u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
				ps->p += 6;
			}
			n += utf8(b + n, u);
			break;
		}
		default:
			ps->p -= 2;
			free(b);
			return fail(ps, "bad escape in a string");
		}
	}
	b[n] = '\0';
	*out = b;
	return 0;
}

static int number(parser_t *ps, double *out)
{
	const char *q = ps->p;
	if (*q == '-')
		q++;
	if (*q < '0' || *q > '9')
		return fail(ps, "expected a value");
	char *end;
	*out = strtod(ps->p, &end);
	if (end == ps->p)
		return fail(ps, "bad number");
	ps->p = end;
	return 0;
}

static int value(parser_t *ps, char *key, size_t klen, int depth);

/* Appends ".part" (or "part" at the top) to key; restores via klen. */
static int key_push(parser_t *ps, char *key, size_t klen, const char *part)
{
	int n = snprintf(key + klen, MAX_KEY - klen, "%s%s", klen ? "." : "", part);
	if (n < 0 || klen + (size_t)n >= MAX_KEY)
		return fail(ps, "key longer than %d bytes", MAX_KEY - 1);
	return 0;
}

static int object(parser_t *ps, char *key, size_t klen, int depth)
{
	ps->p++;
	skip_ws(ps);
	if (*ps->p == '}') {
		ps->p++;
		return 0;
	}
	for (;;) {
		skip_ws(ps);
		if (*ps->p != '"')
			return fail(ps, "expected a key in quotes");
		char *k;
		int rc = string(ps, &k);
		if (rc < 0)
			return rc;
		rc = key_push(ps, key, klen, k);
		free(k);
		if (rc < 0)
			return rc;
		skip_ws(ps);
		if (*ps->p != ':')
			return fail(ps, "expected ':' after a key");
		ps->p++;
		rc = value(ps, key, strlen(key), depth + 1);
		key[klen] = '\0';
		if (rc < 0)
			return rc;
		skip_ws(ps);
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		if (*ps->p == '}') {
			ps->p++;
			return 0;
		}
		return fail(ps, "expected ',' or '}' in an object");
	}
}

static int array(parser_t *ps, char *key, size_t klen, int depth)
{
	ps->p++;
	skip_ws(ps);
	if (*ps->p == ']') {
		ps->p++;
		return 0;
	}
	for (int i = 0;; i++) {
		char idx[16];
		snprintf(idx, sizeof idx, "%d", i);
		int rc = key_push(ps, key, klen, idx);
		if (rc < 0)
			return rc;
		rc = value(ps, key, strlen(key), depth + 1);
		key[klen] = '\0';
		if (rc < 0)
			return rc;
		skip_ws(ps);
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		if (*ps->p == ']') {
			ps->p++;
			return 0;
		}
		return fail(ps, "expected ',' or ']' in an array");
	}
}

static int value(parser_t *ps, char *key, size_t klen, int depth)
{
	if (depth > MAX_DEPTH)
		return fail(ps, "nested deeper than %d", MAX_DEPTH);
	skip_ws(ps);
	const char *p = ps->p;
	if (*p == '{')
		return object(ps, key, klen, depth);
	if (*p == '[')
		return array(ps, key, klen, depth);
	if (*p == '"') {
		char *s;
		int rc = string(ps, &s);
		return rc < 0 ? rc : add(ps, key, s, NAN);
	}
	if (!strncmp(p, "true", 4) || !strncmp(p, "null", 4)) {
		ps->p += 4;
		return add(ps, key, NULL, *p == 't' ? 1.0 : NAN);
	}
	if (!strncmp(p, "false", 5)) {
		ps->p += 5;
		return add(ps, key, NULL, 0.0);
	}
	double v = 0;
	int rc = number(ps, &v);
	return rc < 0 ? rc : add(ps, key, NULL, v);
}

int st_runlog_parse(const char *text, st_runlog_rec_t *rec, char *err, size_t errlen)
{
	memset(rec, 0, sizeof *rec);
	if (errlen)
		err[0] = '\0';
	parser_t ps = { .s = text, .p = text, .rec = rec, .err = err, .errlen = errlen };
	char key[MAX_KEY] = "";
	skip_ws(&ps);
	if (*ps.p != '{') {
		fail(&ps, "expected a JSON object");
		return -EINVAL;
	}
	int rc = object(&ps, key, 0, 0);
	if (rc == 0) {
		skip_ws(&ps);
		if (*ps.p)
			rc = fail(&ps, "text after the object");
	}
	if (ps.failed < 0)
		return ps.failed;
	if (rc < 0)
		return rc;
	rec->is_phase = st_runlog_get(rec, "phase") != NULL;
	return 0;
}

int st_runlog_read(const char *path, st_runlog_t *log, char *err, size_t errlen)
{
	memset(log, 0, sizeof *log);
	if (errlen)
		err[0] = '\0';
	FILE *f = fopen(path, "r");
	if (!f) {
		int rc = -errno;
		if (errlen)
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int lineno = 0, rc = 0;
	while (rc == 0 && (len = getline(&line, &cap, f)) > 0) {
		lineno++;
		if ((size_t)len != strlen(line)) {
			if (errlen)
				snprintf(err, errlen, "%s:%d: a NUL byte in the line", path, lineno);
			rc = -EINVAL;
			break;
		}
		const char *q = line;
		while (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')
			q++;
		if (!*q)
			continue;
		st_runlog_rec_t *r = realloc(log->rec, (log->n + 1) * sizeof *r);
		if (!r) {
			rc = -ENOMEM;
			break;
		}
		log->rec = r;
		char what[240];
		rc = st_runlog_parse(line, &r[log->n], what, sizeof what);
		r[log->n].line = lineno;
		log->n++;
		if (rc == -EINVAL && line[len - 1] != '\n') {
			/* The last line, cut short: a run killed mid-write. */
			st_runlog_rec_fini(&r[--log->n]);
			log->cut_line = lineno;
			rc = 0;
			break;
		}
		if (rc == -EINVAL && errlen)
			snprintf(err, errlen, "%s:%d: %s", path, lineno, what);
	}
	if (rc == 0 && ferror(f)) {
		rc = -EIO;
		if (errlen)
			snprintf(err, errlen, "%s: read error", path);
	}
	free(line);
	fclose(f);
	if (rc == -ENOMEM && errlen)
		snprintf(err, errlen, "%s: out of memory", path);
	return rc;
}

const st_runlog_kv_t *st_runlog_get(const st_runlog_rec_t *rec, const char *key)
{
	for (size_t i = 0; i < rec->n; i++)
		if (!strcmp(rec->kv[i].key, key))
			return &rec->kv[i];
	return NULL;
}

int st_runlog_num(const st_runlog_rec_t *rec, const char *key, double *out)
{
	const st_runlog_kv_t *kv = st_runlog_get(rec, key);
	if (!kv || kv->str || !isfinite(kv->num))
		return 0;
	*out = kv->num;
	return 1;
}

const char *st_runlog_str(const st_runlog_rec_t *rec, const char *key)
{
	const st_runlog_kv_t *kv = st_runlog_get(rec, key);
	return kv ? kv->str : NULL;
}

void st_runlog_rec_fini(st_runlog_rec_t *rec)
{
	for (size_t i = 0; i < rec->n; i++) {
		free(rec->kv[i].key);
		free(rec->kv[i].str);
	}
	free(rec->kv);
	rec->kv = NULL;
	rec->n = rec->cap = 0;
}

void st_runlog_fini(st_runlog_t *log)
{
	for (size_t i = 0; i < log->n; i++)
		st_runlog_rec_fini(&log->rec[i]);
	free(log->rec);
	log->rec = NULL;
	log->n = 0;
}
