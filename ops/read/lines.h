/*
 * lines.h — buffered line input for the readers (private to ops/read/).
 *
 * Yields the lines of a plain, gzip (.gz) or zstd (.zst/.zstd) file, or of a
 * memory buffer, as (pointer, length) pairs into an internal buffer: no copy
 * and no allocation per line. The '\n' and one trailing '\r' are not part of
 * the line; a missing final newline is tolerated. A line longer than max_line
 * bytes is skipped whole and reported as ST__LINE_LONG, so arbitrary input
 * never makes the buffer grow.
 *
 * Not thread-safe: one reader thread owns a st__lines_t.
 */
#ifndef ST_READ_LINES_H
#define ST_READ_LINES_H

#include <stddef.h>
#include <stdint.h>

typedef struct st__lines st__lines_t;

#define ST__LINES_BUF_DEFAULT ((size_t)4 << 20)   /* 4 MiB read buffer */
#define ST__LINES_MAX_DEFAULT ((size_t)1 << 20)   /* 1 MiB longest line */

/* st__lines_next results besides errors */
enum { ST__LINE_EOF = 0, ST__LINE_OK = 1, ST__LINE_LONG = 2 };

/* Opens path; the decompressor is chosen by extension (.gz, .zst, .zstd).
 * Returns ST_OK, ST_ENOENT / ST_EIO (errno-style codes from open) or
 * ST_ENOMEM; on failure errbuf (if non-NULL) holds "path: reason". */
int st__lines_open(st__lines_t **out, const char *path, char *errbuf,
		   size_t errlen);

/* Lines of a memory buffer (not copied; it must outlive the object).
 * buf_size and max_line may be 0 for the defaults; tests and fuzzers pass
 * small values to exercise refills. Requires max_line < buf_size. */
int st__lines_open_mem(st__lines_t **out, const void *data, size_t len,
		       size_t buf_size, size_t max_line);

/* Next line: ST__LINE_OK with *line and *len (valid until the next call),
 * ST__LINE_LONG for a line over max_line (skipped; *len is 0),
 * ST__LINE_EOF at the end, or ST_EIO / ST_ENOMEM (message from
 * st__lines_error). */
int st__lines_next(st__lines_t *l, const char **line, size_t *len);

/* 1-based number of the line last returned. */
uint64_t st__lines_lineno(const st__lines_t *l);
/* Uncompressed bytes consumed so far (newlines included). */
uint64_t st__lines_bytes(const st__lines_t *l);
size_t st__lines_max_line(const st__lines_t *l);
const char *st__lines_error(const st__lines_t *l);

void st__lines_close(st__lines_t *l);

#endif
