/*
 * err.c — st_strerror and the process-wide logger.
 *
 * The logger formats each message into a local buffer and writes it with one
 * write(2) call, so lines from concurrent threads never interleave. While a
 * trace records (runtime/trace.h), every error message is also an "error"
 * instant on the logging thread's track: errors are rare, and the instant's
 * cost (the recorder's mutex, a copy of the text) is paid only then; the
 * recorder's mutex is a leaf lock, so logging under another lock stays safe.
 */
#include "err.h"
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int log_level = -1;

static void log_init_level(void)
{
	const char *e = getenv("STRATA_LOG");
	int lvl = ST_LOG_INFO, bad = 0;
	if (e) {
		if (!strcmp(e, "debug"))
			lvl = ST_LOG_DEBUG;
		else if (!strcmp(e, "warn"))
			lvl = ST_LOG_WARN;
		else if (!strcmp(e, "error"))
			lvl = ST_LOG_ERROR;
		else
			bad = strcmp(e, "info") != 0;
	}
	__atomic_store_n(&log_level, lvl, __ATOMIC_RELAXED);
	/* After the store: st_warn reads the level, and must not come back here. */
	if (bad)
		st_warn("STRATA_LOG=%s: expected debug, info, warn or error; using info", e);
}

void st_log_set_level(enum st_log_level level)
{
	__atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

enum st_log_level st_log_get_level(void)
{
	if (__atomic_load_n(&log_level, __ATOMIC_RELAXED) < 0)
		log_init_level();
	return (enum st_log_level)__atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

const char *st_strerror(int code)
{
	switch (code) {
	case ST_OK: return "success";
	case ST_EBADREC: return "malformed data record";
	case ST_EJOB: return "invalid job file";
	case ST_ESTAGE: return "pipeline stage failed";
	case ST_EFORMAT: return "unknown or unsupported format";
	case ST_ECORRUPT: return "corrupt stored data (checksum or framing)";
	case ST_EPEER: return "a peer process failed (died, refused the connection, or sent a bad message)";
	case ST_ECANCELED: return "canceled";
	case ST_EPIPE: return "queue closed";
	default: break;
	}
	if (code < 0 && code > -4096)
		return strerror(-code);
	return "unknown error";
}

void st_vlog(enum st_log_level level, const char *fmt, va_list ap)
{
	static const char *names[] = { "debug", "info", "warning", "error" };
	if ((int)level < (int)st_log_get_level())
		return;
	char buf[2048];
	int n = snprintf(buf, sizeof buf, "strata: %s: ", names[level]);
	int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof buf - 2)
		len = sizeof buf - 2;
	while (len > 0 && buf[len - 1] == '\n')
		len--;
	if (level == ST_LOG_ERROR && st_trace_enabled())
		st_trace_instant("error", "%.*s", (int)(len - (size_t)n), buf + n);
	buf[len++] = '\n';
	ssize_t w = write(2, buf, len);
	(void)w;
}

void st_log(enum st_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	st_vlog(level, fmt, ap);
	va_end(ap);
}

_Noreturn void st_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	st_vlog(ST_LOG_ERROR, fmt, ap);
	va_end(ap);
	abort();
}

void *st_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		st_die("out of memory allocating %zu bytes", n);
	return p;
}

void *st_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		st_die("out of memory allocating %zu x %zu bytes", n, size);
	return p;
}

char *st_xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		st_die("out of memory");
	return p;
}
