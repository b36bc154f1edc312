/*
 * err.h — error codes and logging shared by every layer.
 *
 * Functions that can fail return int: >= 0 on success, a negative ST_E* code
 * on failure (errno-compatible: ST_ENOMEM == -ENOMEM). st_strerror() turns a
 * code into text. Logging is line-atomic and thread-safe; it writes to stderr.
 */
#ifndef ST_ERR_H
#define ST_ERR_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>

enum {
	ST_OK = 0,
	ST_ENOMEM = -ENOMEM,
	ST_EINVAL = -EINVAL,
	ST_EIO = -EIO,
	ST_ENOENT = -ENOENT,
	ST_ECANCELED = -ECANCELED,
	ST_ENOSPC = -ENOSPC,
	ST_EPIPE = -EPIPE,      /* queue closed */
	ST_EAGAIN = -EAGAIN,    /* try_push/try_pop would block */
	ST_EBUSY = -EBUSY,      /* held by another process (an SSD store directory) */
	ST_ERANGE = -ERANGE,    /* a value out of range (a non-finite training loss) */
	/* strata-specific codes live below -4096 so they never clash with errno */
	ST_EBADREC = -4097,     /* malformed data record (on_bad_record = "fail") */
	ST_EJOB = -4098,        /* invalid job file */
	ST_ESTAGE = -4099,      /* a pipeline stage failed */
	ST_EFORMAT = -4100,     /* unsupported or unknown file format */
	ST_ECORRUPT = -4101,    /* stored data failed its checksum or framing */
	ST_EPEER = -4102,       /* a peer process died, refused us, or sent a bad message */
};

/* Returns a static string for an ST_E* code (or any -errno). Thread-safe. */
const char *st_strerror(int code);

enum st_log_level { ST_LOG_DEBUG = 0, ST_LOG_INFO, ST_LOG_WARN, ST_LOG_ERROR };

/* Messages below this level are dropped. Default ST_LOG_INFO; the environment
 * variable STRATA_LOG=debug|info|warn|error overrides it at first use. */
void st_log_set_level(enum st_log_level level);
enum st_log_level st_log_get_level(void);

/* Writes one line "strata: <level>: <message>\n" to stderr atomically.
 * Thread-safe. A trailing newline in fmt is not needed. */
void st_log(enum st_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void st_vlog(enum st_log_level level, const char *fmt, va_list ap);

#define st_debug(...) st_log(ST_LOG_DEBUG, __VA_ARGS__)
#define st_info(...) st_log(ST_LOG_INFO, __VA_ARGS__)
#define st_warn(...) st_log(ST_LOG_WARN, __VA_ARGS__)
#define st_error(...) st_log(ST_LOG_ERROR, __VA_ARGS__)

/* Impossible failures (a pthread_create of a named thread, say): print and abort. */
_Noreturn void st_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Allocation helpers that abort on failure; use only for small, bounded
 * bookkeeping. Data-sized allocations must use malloc and return ST_ENOMEM. */
void *st_xmalloc(size_t n);
void *st_xcalloc(size_t n, size_t size);
char *st_xstrdup(const char *s);

#endif
