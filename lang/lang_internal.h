/*
 * lang_internal.h — functions shared by the lang module only.
 */
#ifndef ST_LANG_INTERNAL_H
#define ST_LANG_INTERNAL_H

#include "lang/job.h"

#include <limits.h>
#include <stddef.h>
#include <time.h>

#include <lua.h>

/* ---- sandbox.c: the job sandbox -------------------------------------- */

#define ST__LOAD_TIME_LIMIT_S 10.0  /* default of st_load_opts_t.time_limit_s */
/* Worst-case steps one string.find/match/gmatch/gsub may take in a job
 * (about 0.6 s of Lua's matcher at 6 ns a step). */
#define ST__PATTERN_BUDGET 1e8

enum { ST__STOP_TIMEOUT = 1, ST__STOP_INTERRUPT = 2 };

/* One load's sandbox: the allocator's accounting, the watchdog's clock and
 * the folders require searches. Owned by st_job_load, which fills the
 * fields above the line before creating the state; the state's allocator
 * userdata points at it. One thread uses it (the load's). */
typedef struct st__sandbox {
	size_t used, limit;        /* bytes the state holds / may hold */
	double time_limit_s;       /* the job's run time limit */
	double deadline;           /* CLOCK_MONOTONIC seconds when it is reached */
	unsigned interrupt_gen0;   /* st__sandbox_interrupt_gen() at the start */
	char stdlib[PATH_MAX];     /* holds strata/<module>.lua */
	char jobdir[PATH_MAX];     /* the job file's folder */
	/* ---- the watchdog's state */
	int stopped;               /* 0, ST__STOP_TIMEOUT or ST__STOP_INTERRUPT */
	char stop_msg[LUA_IDSIZE + 160]; /* "file:line: the job file ran for more than..." */
	unsigned calls;            /* call events since the last clock check */
	double charged;            /* pattern steps since the last clock check */
} st__sandbox_t;

/* The count st_job_load_interrupt bumps. Async-signal-safe. */
unsigned st__sandbox_interrupt_gen(void);

/* lua_Alloc over the st__sandbox_t in ud: fails (NULL) past sb->limit. */
void *st__sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize);

/* Installs the watchdog hook, which raises "file:line: the job file ran for
 * more than N s" once the load is past its deadline, or "interrupted" after
 * st_job_load_interrupt (see sandbox.c for what it covers). Stack:
 * unchanged. */
void st__sandbox_watch(lua_State *L);

/* Records `steps` of work done in C without hook events (pattern
 * matching) and polls once they add up. */
void st__sandbox_charge(lua_State *L, double steps);

/* Builds the sandboxed global table (libraries, load, require with its
 * core table). Stack: [] -> []. */
void st__sandbox_open(lua_State *L);

/* Makes the global table strict (reading or creating an undeclared global
 * raises). Stack: [] -> []. */
void st__sandbox_lock(lua_State *L);

/* Message handler for job code: logs the traceback at debug level and
 * keeps the message. Stack: [msg] -> [msg as string]. */
int st__sandbox_msgh(lua_State *L);

/* Largest job file or module (`strata check /dev/zero` used to read until
 * memory ran out). */
#define ST__SOURCE_MAX (16 << 20)

/* Reads a job file or module: a regular file (not a directory, device,
 * FIFO or socket; opened without blocking) of at most ST__SOURCE_MAX bytes.
 * A UTF-8 byte order mark and a first line starting with '#' are blanked
 * (line numbers stay right). Returns a malloc'd buffer (caller frees) and
 * *len, or NULL with a reason for people in why ("it is a directory, not
 * a file", "it is 20.0 MiB; ...", strerror). */
char *st__sandbox_read_file(const char *path, size_t *len, char *why, size_t whylen);

/* ---- pattern.c: bounded pattern matching ------------------------------- */

/* Replaces find, match, gmatch and gsub of the string table at -1 with
 * wrappers that refuse a call whose worst case exceeds `budget` steps and
 * pass each call's bound to charge (may be NULL). Stack: unchanged. */
void st__pattern_guard(lua_State *L, double budget, void (*charge)(lua_State *L, double steps));

/* What is being bounded: one find or match (a leading ^ anchors); a whole
 * gsub (^ anchors); a whole gmatch iteration (^ is a plain character). */
enum { ST__PATTERN_FIND, ST__PATTERN_GSUB, ST__PATTERN_GMATCH };

/* Worst-case steps of matching pattern p (m bytes) against s (n bytes)
 * from `starts` positions in the given mode. A first rough bound at most
 * `enough` is returned without measuring the subject (pass 0 for the
 * tightest bound). Pure; exposed for the tests. */
double st__pattern_cost(const char *s, size_t n, const char *p, size_t m, int mode,
			double starts, double enough);

/* ---- job.c ------------------------------------------------------------ */

/* Expands src->globs into src->paths (sorted, duplicates removed), replacing
 * any previous paths. Returns ST_OK, or ST_ENOENT when no glob matches a file
 * (paths unchanged; logged as an error when `log` is non-zero). */
int st__job_expand(st_source_t *src, int log);

#endif
