/*
 * runlog.h — a run's metrics file (`strata run --metrics FILE`, the JSON
 * lines of runtime/metrics.c and ops/runner/metrics_file.c) read back as
 * records of flat key/value pairs, for `strata report`.
 *
 * Each line is one JSON object. Nested objects and arrays are flattened
 * into dotted keys: {"t":1,"metrics":{"auc":0.7},"stages":[{"name":"read"}]}
 * gives "t", "metrics.auc" and "stages.0.name". A metric name that holds
 * dots itself ("cache.hit") stays whole after its prefix
 * ("metrics.cache.hit"); lookups are by the full key, so nothing is split.
 * A {"phase": ...} line (the end of a phase) has is_phase set.
 *
 * Errors name the file and line: "m.jsonl:3: expected ':' after a key
 * (column 17)". Blank lines are skipped. A last line without its newline
 * that does not parse is what a run killed in mid-write leaves: it is left
 * out (cut_line says which) rather than failing the whole report.
 *
 * Library-grade: includes no runtime-wide header; errors are negative
 * errno values (== ST_E* codes). Not thread-safe per log.
 */
#ifndef ST_REPORT_RUNLOG_H
#define ST_REPORT_RUNLOG_H

#include <stddef.h>

typedef struct st_runlog_kv {
	char *key;
	char *str;        /* a string value (owned), or NULL */
	double num;       /* a number, true 1, false 0; NAN for null and strings */
} st_runlog_kv_t;

typedef struct st_runlog_rec {
	int line;         /* 1-based line of the file */
	int is_phase;     /* a {"phase": ...} record */
	size_t n, cap;
	st_runlog_kv_t *kv;
} st_runlog_rec_t;

typedef struct st_runlog {
	size_t n;
	st_runlog_rec_t *rec;
	int cut_line;     /* > 0: the last line, cut short (no newline and not
			   * a whole object), was left out: the run was killed
			   * while writing it */
} st_runlog_t;

/* Reads every line of path into log (caller-owned storage, filled; free
 * with st_runlog_fini, also after a failure). ST_OK; -errno when the file
 * cannot be read; -EINVAL for a line that is not one JSON object, with
 * "path:line: what" in err (errlen bytes, may be 0). */
int st_runlog_read(const char *path, st_runlog_t *log, char *err, size_t errlen);

/* Parses one line (text, NUL-terminated) into rec (filled; free with
 * st_runlog_rec_fini). ST_OK or -EINVAL with "what (column c)" in err. */
int st_runlog_parse(const char *text, st_runlog_rec_t *rec, char *err, size_t errlen);

/* The pair with this key, or NULL. */
const st_runlog_kv_t *st_runlog_get(const st_runlog_rec_t *rec, const char *key);
/* The number under key: 1 and *out set when present and a finite number, else 0. */
int st_runlog_num(const st_runlog_rec_t *rec, const char *key, double *out);
/* The string under key, or NULL. */
const char *st_runlog_str(const st_runlog_rec_t *rec, const char *key);

void st_runlog_rec_fini(st_runlog_rec_t *rec);
/* Frees every record. Safe twice. */
void st_runlog_fini(st_runlog_t *log);

#endif
