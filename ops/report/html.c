/*
 * html.c — the page buffer of html.h: doubling growth, a sticky
 * out-of-memory flag, and the HTML escaping of input strings.
 */
#include "ops/report/html.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void st_html_init(st_html_t *h)
{
	memset(h, 0, sizeof *h);
}

void st_html_fini(st_html_t *h)
{
	free(h->p);
	memset(h, 0, sizeof *h);
}

/* Room for n more bytes and the NUL; 0 or -1 (and oom set). */
static int reserve(st_html_t *h, size_t n)
{
	if (h->oom)
		return -1;
	if (h->len + n + 1 <= h->cap)
		return 0;
	size_t cap = h->cap ? h->cap : 4096;
	while (cap < h->len + n + 1)
		cap *= 2;
	char *p = realloc(h->p, cap);
	if (!p) {
		h->oom = 1;
		return -1;
	}
	h->p = p;
	h->cap = cap;
	return 0;
}

static void put(st_html_t *h, const char *s, size_t n)
{
	if (reserve(h, n) < 0)
		return;
	memcpy(h->p + h->len, s, n);
	h->len += n;
	h->p[h->len] = '\0';
}

void st_html_raw(st_html_t *h, const char *s)
{
	if (s)
		put(h, s, strlen(s));
}

void st_html_printf(st_html_t *h, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || reserve(h, (size_t)n) < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(h->p + h->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	h->len += (size_t)n;
}

void st_html_text(st_html_t *h, const char *s)
{
	if (!s)
		return;
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		switch (*c) {
		case '&': put(h, "&amp;", 5); break;
		case '<': put(h, "&lt;", 4); break;
		case '>': put(h, "&gt;", 4); break;
		case '"': put(h, "&quot;", 6); break;
		case '\'': put(h, "&#39;", 5); break;
		default:
			if (*c >= 0x20 || *c == '\n' || *c == '\t')
				put(h, (const char *)c, 1);
			break;
		}
	}
}

int st_html_error(const st_html_t *h)
{
	return h->oom ? -ENOMEM : 0;
}
