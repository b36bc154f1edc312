/*
 * html.h — a growing text buffer for writing an HTML page, with the one
 * escaping rule every string from outside (file names, metric names, trace
 * texts, job files) must pass through: st_html_text.
 *
 * Out of memory is sticky: after a failed growth every later call is a
 * no-op and st_html_error says so once, at the end, so that the page
 * builder need not check each append.
 *
 * Library-grade: includes no runtime-wide header. Not thread-safe: one
 * writer per buffer.
 */
#ifndef ST_REPORT_HTML_H
#define ST_REPORT_HTML_H

#include <stddef.h>

typedef struct st_html {
	char *p;         /* NUL-terminated text; owned by the buffer */
	size_t len, cap;
	int oom;         /* a growth failed: the text is incomplete */
} st_html_t;

/* An empty buffer (caller-owned storage). */
void st_html_init(st_html_t *h);
/* Frees the text. Safe twice. */
void st_html_fini(st_html_t *h);

/* Appends markup as is: only for text the caller wrote itself. */
void st_html_raw(st_html_t *h, const char *s);
/* Appends printf output as is: formats with numbers and literals only;
 * strings from inputs go through st_html_text. */
void st_html_printf(st_html_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s with & < > " ' as entities (safe in text and in quoted
 * attributes) and control bytes other than tab and newline dropped. NULL
 * appends nothing. */
void st_html_text(st_html_t *h, const char *s);

/* 0, or -ENOMEM when any append failed. */
int st_html_error(const st_html_t *h);

#endif
