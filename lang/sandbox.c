/*
 * sandbox.c — the job sandbox: a fresh lua_State's allocator with a memory
 * cap, the watchdog that stops a job running too long, the allow-listed
 * global table, and reading a job file's source.
 *
 * The sandbox is an allow-list:
 *   - base library without dofile, loadfile, collectgarbage; `load` accepts
 *     only strings and only text chunks; `require` is ours (below);
 *   - string (without string.dump), table, math, utf8, coroutine;
 *   - os reduced to time, clock, date, getenv; no io, no debug, no package;
 *   - the global table has a locked metatable: reading an undefined global
 *     raises "undefined global 'x'", creating one raises
 *     "assignment to undeclared global 'x'";
 *   - memory is capped (the load's sb->limit) and a count hook stops a job
 *     that runs longer than ST__LOAD_TIME_LIMIT_S (an endless loop in a job
 *     file must not hang `strata check`).
 * `require` only loads Lua text files from stdlib_dir/?.lua,
 * stdlib_dir/?/init.lua and the job's folder/?.lua; module names are dotted
 * identifiers, so no path can escape those folders, and no C module is ever
 * loaded. Stdlib modules get a private `core` table as their third chunk
 * argument (where, glob, read_header, error_text); job-folder modules do
 * not.
 *
 * Everything here is per load: the state's allocator userdata is the load's
 * st__sandbox_t, reached with lua_getallocf, so loads on different threads
 * share nothing.
 */
#include "lang/lang.h"
#include "lang/lang_internal.h"
#include "ops/sync/registry.h"
#include "runtime/err.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#define HOOK_EVERY (1 << 20)        /* instructions between time checks */

/* ---- state: allocator and watchdog --------------------------------- */

void *st__sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	st__sandbox_t *sb = ud;
	size_t old = ptr ? osize : 0;
	if (nsize == 0) {
		free(ptr);
		sb->used -= old;
		return NULL;
	}
	if (nsize > old && sb->used - old + nsize > sb->limit)
		return NULL;
	void *p = realloc(ptr, nsize);
	if (p)
		sb->used = sb->used - old + nsize;
	return p;
}

/* The watchdog. A job must not be able to outlive its time limit, and the
 * ways it could are closed one by one:
 *   - a loop in Lua: the count hook checks the clock every HOOK_EVERY
 *     instructions;
 *   - a loop in C that calls functions (string.gsub(s, ".", pcall),
 *     table.sort with a comparator): the call hook counts calls and checks
 *     the clock every CALLS_EVERY of them;
 *   - catching the timeout (pcall in a loop, coroutine.resume, an xpcall
 *     handler): once stopped, the load stays stopped. The hook of any thread
 *     that notices raises on every instruction and call from then on, and
 *     pcall, xpcall, coroutine.resume and coroutine.close are wrapped to
 *     raise again after they return (guard_call), so the error climbs to
 *     the loader whatever catches it on the way;
 *   - an xpcall message handler: Lua calls it for an error raised in a hook
 *     while hooks are still off, so once stopped the job's handler is not
 *     called at all (guard_handler);
 *   - finalizers: Lua runs __gc with hooks disabled (lgc.c, GCTM), so a
 *     finalizer with a loop, run by the collector or by lua_close, would
 *     be out of reach; setmetatable refuses __gc (guard_setmetatable);
 *   - C pattern matching runs no instruction and calls nothing: pattern.c
 *     bounds each match and charges its cost here (st__sandbox_charge).
 * An interrupt (st_job_load_interrupt, from a SIGINT handler) stops every
 * running load the same way. The first stop's message, with the job's
 * line, is kept in sb->stop_msg: the loader reports it whatever error
 * object the unwinding ended with. */

#define CALLS_EVERY 1024           /* calls between time checks */
#define CHARGE_EVERY 1e6           /* pattern steps between time checks */

/* Bumped by st_job_load_interrupt; each load remembers its value at start. */
static unsigned interrupt_gen;

void st_job_load_interrupt(void)
{
	/* A lock-free atomic, so this is async-signal-safe. */
	__atomic_fetch_add(&interrupt_gen, 1, __ATOMIC_RELAXED);
}

unsigned st__sandbox_interrupt_gen(void)
{
	return __atomic_load_n(&interrupt_gen, __ATOMIC_RELAXED);
}

static st__sandbox_t *sandbox_of(lua_State *L)
{
	void *ud;
	lua_getallocf(L, &ud);
	return ud;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void watchdog_hook(lua_State *L, lua_Debug *ar);

/* Stops the load (once) and raises its message; never returns. Inside a
 * hook luaL_error cannot see the running line, so the message is located
 * at the innermost Lua function with a line. */
static int stop(lua_State *L, st__sandbox_t *sb, int why)
{
	if (!sb->stopped) {
		sb->stopped = why;
		char where[LUA_IDSIZE + 32] = "";
		lua_Debug d;
		for (int level = 0; lua_getstack(L, level, &d); level++) {
			if (lua_getinfo(L, "Sl", &d) && d.currentline > 0) {
				snprintf(where, sizeof where, "%s:%d: ", d.short_src, d.currentline);
				break;
			}
		}
		if (why == ST__STOP_INTERRUPT)
			snprintf(sb->stop_msg, sizeof sb->stop_msg, "%sinterrupted while the job "
				 "file ran", where);
		else
			snprintf(sb->stop_msg, sizeof sb->stop_msg, "%sthe job file ran for more "
				 "than %g s; is there an endless loop?", where, sb->time_limit_s);
	}
	/* From now on this thread raises on every instruction and call. */
	lua_sethook(L, watchdog_hook, LUA_MASKCOUNT | LUA_MASKCALL, 1);
	lua_pushstring(L, sb->stop_msg);
	return lua_error(L);
}

static void check(lua_State *L, st__sandbox_t *sb)
{
	if (sb->stopped)
		stop(L, sb, sb->stopped);
	if (st__sandbox_interrupt_gen() != sb->interrupt_gen0)
		stop(L, sb, ST__STOP_INTERRUPT);
	if (now_s() > sb->deadline)
		stop(L, sb, ST__STOP_TIMEOUT);
}

static void watchdog_hook(lua_State *L, lua_Debug *ar)
{
	st__sandbox_t *sb = sandbox_of(L);
	if (ar->event != LUA_HOOKCOUNT && !sb->stopped && (++sb->calls % CALLS_EVERY) != 0)
		return;
	check(L, sb);
}

void st__sandbox_watch(lua_State *L)
{
	lua_sethook(L, watchdog_hook, LUA_MASKCOUNT | LUA_MASKCALL, HOOK_EVERY);
}

void st__sandbox_charge(lua_State *L, double steps)
{
	st__sandbox_t *sb = sandbox_of(L);
	sb->charged += steps;
	if (sb->charged >= CHARGE_EVERY || sb->stopped) {
		sb->charged = 0;
		check(L, sb);
	}
}

/* Tail and continuation of guard_call. Stack: [results] -> [results]. */
static int guard_done(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	(void)ctx;
	check(L, sandbox_of(L));
	return lua_gettop(L);
}

/* pcall, xpcall, coroutine.resume and coroutine.close (the original is
 * upvalue 1): the same call, but a stopped load raises again once it
 * returns. lua_callk keeps yields across pcall working inside coroutines.
 * The callers below check the arguments first, so that a bad one is
 * reported under the name the job used (the original, called from here,
 * would say '?'). Stack: [args] -> [results]. */
static int guard_call(lua_State *L)
{
	check(L, sandbox_of(L));
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_callk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, guard_done);
	return guard_done(L, LUA_OK, 0);
}

/* The message handler xpcall gets instead of the job's (upvalue 1). An
 * error raised inside a hook (the watchdog's) calls the handler while
 * hooks are still off, so the job's handler is skipped once the load is
 * stopped: a loop in it would be out of the watchdog's reach. Stack:
 * [msg] -> [handled msg]. */
static int guard_handler(lua_State *L)
{
	st__sandbox_t *sb = sandbox_of(L);
	if (sb->stopped) {
		lua_pushstring(L, sb->stop_msg);
		return 1;
	}
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, 1);
	return 1;
}

static int guard_pcall(lua_State *L)
{
	luaL_checkany(L, 1);
	return guard_call(L);
}

/* xpcall(f, handler, ...) with the handler wrapped (guard_handler). */
static int guard_xpcall(lua_State *L)
{
	luaL_checktype(L, 2, LUA_TFUNCTION);
	lua_pushvalue(L, 2);
	lua_pushcclosure(L, guard_handler, 1);
	lua_replace(L, 2);
	return guard_call(L);
}

/* coroutine.resume(co, ...) and coroutine.close(co). */
static int guard_coroutine(lua_State *L)
{
	luaL_argexpected(L, lua_type(L, 1) == LUA_TTHREAD, 1, "coroutine");
	return guard_call(L);
}

/* setmetatable(t, mt) refusing a metatable with a __gc field: finalizers
 * run with hooks off, where the watchdog cannot reach them. (A __gc added
 * to mt later does not mark t for finalization in Lua 5.4.) The original
 * is upvalue 1. Stack: [t, mt] -> [t]. */
static int guard_setmetatable(lua_State *L)
{
	if (lua_type(L, 2) == LUA_TTABLE && lua_getfield(L, 2, "__gc") != LUA_TNIL)
		return luaL_error(L, "setmetatable: a job file may not use __gc (finalizers run "
				  "where the time limit cannot stop them)");
	lua_settop(L, 2);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, 2, 1);
	return 1;
}

/* Replaces field `name` of the table at -1 with `fn` closed over the
 * original. Stack: unchanged. */
static void guard_field(lua_State *L, const char *name, lua_CFunction fn)
{
	lua_getfield(L, -1, name);
	lua_pushcclosure(L, fn, 1);
	lua_setfield(L, -2, name);
}

/* ---- sandbox functions ------------------------------------------------ */

/* __index of the global table. Stack: [t, key] -> raises. */
static int strict_index(lua_State *L)
{
	return luaL_error(L, "undefined global '%s'", luaL_tolstring(L, 2, NULL));
}

/* __newindex of the global table. Stack: [t, key, value] -> raises. */
static int strict_newindex(lua_State *L)
{
	return luaL_error(L, "assignment to undeclared global '%s'",
			  luaL_tolstring(L, 2, NULL));
}

/* load(chunk [, chunkname [, mode [, env]]]) restricted to strings and text.
 * Stack: [args] -> [function] or [nil, message]. */
static int sandbox_load(lua_State *L)
{
	size_t len;
	const char *s = lua_tolstring(L, 1, &len);
	if (!s || lua_type(L, 1) != LUA_TSTRING)
		return luaL_error(L, "load: only strings can be loaded in a job file");
	const char *name = luaL_optstring(L, 2, s);
	int has_env = !lua_isnone(L, 4);
	if (luaL_loadbufferx(L, s, len, name, "t") != LUA_OK) {
		lua_pushnil(L);
		lua_insert(L, -2);
		return 2;
	}
	if (has_env) {
		lua_pushvalue(L, 4);
		if (!lua_setupvalue(L, -2, 1))
			lua_pop(L, 1);
	}
	return 1;
}

/* core.where(level): "short_src:line" of the function `level` frames above
 * the caller's caller, or nil when unknown (tail call, C function).
 * Stack: [level] -> [string|nil]. */
static int core_where(lua_State *L)
{
	int level = (int)luaL_checkinteger(L, 1);
	lua_Debug ar;
	if (level >= 1 && lua_getstack(L, level - 1, &ar)) {
		lua_getinfo(L, "t", &ar);
		if (ar.istailcall) {
			lua_pushnil(L);
			return 1;
		}
	}
	if (!lua_getstack(L, level, &ar) || !lua_getinfo(L, "Sl", &ar) ||
	    ar.currentline <= 0) {
		lua_pushnil(L);
		return 1;
	}
	lua_pushfstring(L, "%s:%d", ar.short_src, ar.currentline);
	return 1;
}

/* core.glob(pattern): sorted list of matching paths (empty when none).
 * Stack: [pattern] -> [table]. */
static int core_glob(lua_State *L)
{
	const char *pat = luaL_checkstring(L, 1);
	glob_t g;
	memset(&g, 0, sizeof(g));
	int rc = glob(pat, 0, NULL, &g);
	lua_createtable(L, rc == 0 ? (int)g.gl_pathc : 0, 0);
	if (rc == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++) {
			lua_pushstring(L, g.gl_pathv[i]);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
	}
	globfree(&g);
	return 1;
}

/* Opens path for reading without blocking (a FIFO would block open until a
 * writer came) and checks it is a regular file. Returns the descriptor and
 * *size, or -1 with why set. */
static int open_regular(const char *path, off_t *size, char *why, size_t whylen)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, whylen, "%s", strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		snprintf(why, whylen, "%s", strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, S_ISDIR(st.st_mode) ? "it is a directory, not a file"
			 : "it is not a regular file (a device, FIFO or socket)");
		close(fd);
		return -1;
	}
	*size = st.st_size;
	return fd;
}

char *st__sandbox_read_file(const char *path, size_t *len, char *why, size_t whylen)
{
	off_t size;
	int fd = open_regular(path, &size, why, whylen);
	if (fd < 0)
		return NULL;
	/* At most the limit plus one byte is read, so a file that grows
	 * while it is read cannot slip past the limit either. */
	size_t cap = size > ST__SOURCE_MAX ? (size_t)ST__SOURCE_MAX + 1 : (size_t)size + 1;
	char *buf = malloc(cap);
	size_t n = 0;
	if (!buf) {
		snprintf(why, whylen, "%s", strerror(ENOMEM));
		close(fd);
		return NULL;
	}
	while (n < cap) {
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(why, whylen, "%s", strerror(errno));
			free(buf);
			close(fd);
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (n > ST__SOURCE_MAX) {
		snprintf(why, whylen, "it is %.1f MiB; a job file or module may be at most %d MiB",
			 (double)(size > (off_t)n ? (size_t)size : n) / (1 << 20),
			 ST__SOURCE_MAX >> 20);
		free(buf);
		return NULL;
	}
	/* A UTF-8 byte order mark, and a first line starting with '#' (a
	 * #! line), are blanked, as luaL_loadfile skips them; blanks keep
	 * the line numbers and columns. */
	size_t i = 0;
	if (n >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3)) {
		memset(buf, ' ', 3);
		i = 3;
	}
	if (i < n && buf[i] == '#')
		for (; i < n && buf[i] != '\n'; i++)
			buf[i] = ' ';
	*len = n;
	return buf;
}

/* core.read_header(path, sep): the first line of a CSV file split on sep,
 * surrounding double quotes removed. Stack: [path, sep] -> [table] or
 * [nil, message]. */
static int core_read_header(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	const char *sep = luaL_checkstring(L, 2);
	char why[128];
	off_t size;
	int fd = open_regular(path, &size, why, sizeof why);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
	if (!f) {
		if (fd >= 0) {
			snprintf(why, sizeof why, "%s", strerror(errno));
			close(fd);
		}
		lua_pushnil(L);
		lua_pushstring(L, why);
		return 2;
	}
	char line[65536];
	char *ok = fgets(line, sizeof(line), f);
	fclose(f);
	if (!ok) {
		lua_pushnil(L);
		lua_pushliteral(L, "the file is empty");
		return 2;
	}
	line[strcspn(line, "\r\n")] = '\0';
	lua_newtable(L);
	int n = 0;
	char *p = line;
	for (;;) {
		char *end = strchr(p, sep[0]);
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *q = p;
		if (len >= 2 && q[0] == '"' && q[len - 1] == '"') {
			q++;
			len -= 2;
		}
		lua_pushlstring(L, q, len);
		lua_rawseti(L, -2, ++n);
		if (!end)
			break;
		p = end + 1;
	}
	return 1;
}

static int file_readable(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* require(name) restricted to Lua text modules in the stdlib folder and the
 * job's folder. Upvalues: 1 = loaded-modules table, 2 = core table.
 * Stack: [name] -> [module]. */
static int sandbox_require(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	lua_settop(L, 1);
	lua_getfield(L, lua_upvalueindex(1), name);
	if (!lua_isnil(L, -1))
		return 1;
	lua_pop(L, 1);

	/* A module name is dotted identifiers: nothing like "../x", "/etc/x"
	 * or "x.so" can be spelled, so the search cannot leave its folders. */
	size_t len = strlen(name);
	int ok = len > 0 && len < 200;
	for (size_t i = 0; ok && i < len; i++) {
		char c = name[i];
		int ident = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || c == '_';
		if (c == '.')
			ok = i > 0 && i + 1 < len && name[i - 1] != '.';
		else
			ok = ident;
	}
	if (!ok)
		return luaL_error(L, "module '%s' not allowed: a job may only require "
				  "modules by dotted name (like \"strata\" or \"mylib.util\") "
				  "from the strata library or the job's own folder", name);
	char rel[256];
	snprintf(rel, sizeof(rel), "%s", name);
	for (char *c = rel; *c; c++)
		if (*c == '.')
			*c = '/';

	void *ud;
	lua_getallocf(L, &ud);
	st__sandbox_t *sb = ud;
	char cand[3][PATH_MAX + 300];
	snprintf(cand[0], sizeof(cand[0]), "%s/%s.lua", sb->stdlib, rel);
	snprintf(cand[1], sizeof(cand[1]), "%s/%s/init.lua", sb->stdlib, rel);
	snprintf(cand[2], sizeof(cand[2]), "%s/%s.lua", sb->jobdir, rel);
	for (int i = 0; i < 3; i++) {
		if (!file_readable(cand[i]))
			continue;
		/* Through the job file's reader: the same size limit, and no
		 * chance to block on a FIFO swapped in since the stat. */
		char why[128];
		size_t srclen;
		char *src = st__sandbox_read_file(cand[i], &srclen, why, sizeof why);
		if (!src)
			return luaL_error(L, "module '%s': cannot read %s: %s", name, cand[i], why);
		lua_pushfstring(L, "@%s", cand[i]);
		int rc = luaL_loadbufferx(L, src, srclen, lua_tostring(L, -1), "t");
		free(src);
		if (rc != LUA_OK)
			return lua_error(L);
		lua_remove(L, -2);      /* the chunk name */
		lua_pushvalue(L, 1);
		lua_pushstring(L, cand[i]);
		int nargs = 2;
		if (i < 2) {    /* only the strata library sees core */
			lua_pushvalue(L, lua_upvalueindex(2));
			nargs = 3;
		}
		lua_call(L, nargs, 1);
		if (lua_isnil(L, -1)) {
			lua_pop(L, 1);
			lua_pushboolean(L, 1);
		}
		lua_pushvalue(L, -1);
		lua_setfield(L, lua_upvalueindex(1), name);
		return 1;
	}
	return luaL_error(L, "module '%s' not found:\n\tno file '%s'\n\tno file '%s'\n\tno file '%s'",
			  name, cand[0], cand[1], cand[2]);
}

/* One value for a message: a string quoted (cut at 40 bytes), a number or
 * boolean as Lua writes it, anything else by its type. Stack: [] -> [text]. */
static void push_value_text(lua_State *L, int i)
{
	if (lua_type(L, i) == LUA_TSTRING) {
		size_t n;
		const char *v = lua_tolstring(L, i, &n);
		luaL_Buffer b;
		luaL_buffinit(L, &b);
		luaL_addchar(&b, '"');
		luaL_addlstring(&b, v, n > 40 ? 40 : n);
		luaL_addstring(&b, n > 40 ? "...\"" : "\"");
		luaL_pushresult(&b);
	} else if (lua_type(L, i) == LUA_TNUMBER || lua_type(L, i) == LUA_TBOOLEAN) {
		luaL_tolstring(L, i, NULL);   /* these have no metatable in a job */
	} else {
		lua_pushstring(L, luaL_typename(L, i));
	}
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "{code = 3, detail = \"x\"}" for a table error object: its fields in
 * order, at most 8, read raw (no metamethod of the job runs here).
 * Stack: [] -> [text]. */
static void push_table_text(lua_State *L, int t)
{
	enum { MAX = 8 };
	t = lua_absindex(L, t);
	lua_createtable(L, MAX, 0);          /* the "k = v" texts, anchored */
	int arr = lua_gettop(L), n = 0, more = 0;
	lua_pushnil(L);
	while (lua_next(L, t)) {
		if (n == MAX) {
			more = 1;
			lua_pop(L, 2);
			break;
		}
		int v = lua_gettop(L), k = v - 1;
		if (lua_type(L, k) == LUA_TSTRING) {
			lua_pushvalue(L, k);
		} else {
			push_value_text(L, k);
			lua_pushfstring(L, "[%s]", lua_tostring(L, -1));
			lua_remove(L, -2);
		}
		push_value_text(L, v);
		lua_pushfstring(L, "%s = %s", lua_tostring(L, -2), lua_tostring(L, -1));
		lua_rawseti(L, arr, ++n);
		lua_settop(L, k);                /* the key, for lua_next */
	}
	const char *field[MAX];
	for (int i = 0; i < n; i++) {
		lua_rawgeti(L, arr, i + 1);
		field[i] = lua_tostring(L, -1);  /* anchored by arr */
		lua_pop(L, 1);
	}
	qsort(field, (size_t)n, sizeof field[0], cmp_str);
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	luaL_addchar(&b, '{');
	for (int i = 0; i < n; i++) {
		if (i)
			luaL_addstring(&b, ", ");
		luaL_addstring(&b, field[i]);
	}
	luaL_addstring(&b, more ? ", ...}" : "}");
	luaL_pushresult(&b);
	lua_remove(L, arr);
}

/* The text of an error object that is not a string (error({}), error(nil),
 * error(42), error(setmetatable({}, {__tostring = ...}))): a number as
 * written; its __tostring when it has one; a table's `message` (or `msg`)
 * field, else its fields; else its type. Stack: [] -> [text]. */
static void push_error_text(lua_State *L, int e)
{
	e = lua_absindex(L, e);
	if (lua_type(L, e) == LUA_TSTRING || lua_type(L, e) == LUA_TNUMBER) {
		lua_pushstring(L, lua_tostring(L, e));
	} else if (luaL_getmetafield(L, e, "__tostring") != LUA_TNIL) {
		lua_pop(L, 1);
		luaL_tolstring(L, e, NULL);
	} else if (lua_type(L, e) == LUA_TTABLE) {
		lua_pushliteral(L, "error object is a table ");
		int found = 0;
		static const char *const keys[] = { "message", "msg" };
		for (int i = 0; i < 2 && !found; i++) {
			lua_pushstring(L, keys[i]);
			if (lua_rawget(L, e) == LUA_TSTRING) {
				lua_pushfstring(L, "with %s \"%s\"", keys[i], lua_tostring(L, -1));
				lua_remove(L, -2);
				found = 1;
			} else {
				lua_pop(L, 1);
			}
		}
		if (!found)
			push_table_text(L, e);
		lua_concat(L, 2);
	} else {
		lua_pushfstring(L, "error object is a %s value", luaL_typename(L, e));
		if (lua_type(L, e) == LUA_TBOOLEAN) {
			lua_pushfstring(L, " (%s)", lua_toboolean(L, e) ? "true" : "false");
			lua_concat(L, 2);
		}
	}
}

/* core.error_text(obj): push_error_text for the validator, which reports
 * errors raised by --set values. Stack: [obj] -> [text]. */
static int core_error_text(lua_State *L)
{
	luaL_checkany(L, 1);
	push_error_text(L, 1);
	return 1;
}

/* Message handler for job code: logs the traceback at debug level and keeps
 * the message itself (which already carries file:line) for the diagnostic;
 * an error object that is not a string is described (push_error_text).
 * Stack: [msg] -> [msg as string]. */
int st__sandbox_msgh(lua_State *L)
{
	if (lua_type(L, 1) != LUA_TSTRING) {
		/* Lua adds no position to such errors: the innermost Lua line. */
		lua_Debug d;
		lua_pushliteral(L, "");
		for (int level = 1; lua_getstack(L, level, &d); level++) {
			if (lua_getinfo(L, "Sl", &d) && d.currentline > 0) {
				lua_pushfstring(L, "%s:%d: ", d.short_src, d.currentline);
				lua_replace(L, -2);
				break;
			}
		}
		push_error_text(L, 1);
		lua_concat(L, 2);
		lua_replace(L, 1);
	}
	const char *msg = lua_tostring(L, 1);
	if (st_log_get_level() <= ST_LOG_DEBUG) {
		luaL_traceback(L, L, msg, 1);
		st_debug("%s", lua_tostring(L, -1));
		lua_pop(L, 1);
	}
	lua_pushstring(L, msg);
	return 1;
}

/* Copies fields `names` of the table at -1 into a new table at -1 (replacing
 * it). Stack: [lib] -> [reduced lib]. */
static void keep_fields(lua_State *L, const char *const *names)
{
	lua_newtable(L);
	for (const char *const *n = names; *n; n++) {
		lua_getfield(L, -2, *n);
		lua_setfield(L, -2, *n);
	}
	lua_remove(L, -2);
}

/* The sync policies the job language accepts, from the registry's table
 * (ops/sync/policies.def; the ops themselves are not linked here): a list
 * of { name = ..., meta = bool } in table order. Stack: [] -> [list]. */
static void push_policies(lua_State *L)
{
	static const struct { const char *name; unsigned caps; } pol[] = {
#define ST_POLICY(name, local, dist, caps, lag, ckpt, summary) { #name, caps },
#include "ops/sync/policies.def"
#undef ST_POLICY
	};
	lua_createtable(L, (int)(sizeof pol / sizeof pol[0]), 0);
	for (size_t i = 0; i < sizeof pol / sizeof pol[0]; i++) {
		lua_createtable(L, 0, 2);
		lua_pushstring(L, pol[i].name);
		lua_setfield(L, -2, "name");
		lua_pushboolean(L, (pol[i].caps & ST_POL_META) != 0);
		lua_setfield(L, -2, "meta");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
}

/* Builds the sandboxed global table. Stack: [] -> []. */
void st__sandbox_open(lua_State *L)
{
	static const struct { const char *name; lua_CFunction open; } libs[] = {
		{ LUA_GNAME, luaopen_base },
		{ LUA_STRLIBNAME, luaopen_string },
		{ LUA_TABLIBNAME, luaopen_table },
		{ LUA_MATHLIBNAME, luaopen_math },
		{ LUA_UTF8LIBNAME, luaopen_utf8 },
		{ LUA_COLIBNAME, luaopen_coroutine },
	};
	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
		luaL_requiref(L, libs[i].name, libs[i].open, 1);
		lua_pop(L, 1);
	}
	lua_pushglobaltable(L);
	static const char *const removed[] = { "dofile", "loadfile", "collectgarbage", NULL };
	for (const char *const *n = removed; *n; n++) {
		lua_pushnil(L);
		lua_setfield(L, -2, *n);
	}
	guard_field(L, "pcall", guard_pcall);
	guard_field(L, "xpcall", guard_xpcall);
	guard_field(L, "setmetatable", guard_setmetatable);
	lua_getfield(L, -1, LUA_COLIBNAME);
	guard_field(L, "resume", guard_coroutine);
	guard_field(L, "close", guard_coroutine);
	lua_pop(L, 1);
	lua_pushcfunction(L, sandbox_load);
	lua_setfield(L, -2, "load");

	lua_getfield(L, -1, LUA_STRLIBNAME);
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
	/* The string metatable's __index is this table, so s:find() gets the
	 * wrappers too. */
	st__pattern_guard(L, ST__PATTERN_BUDGET, st__sandbox_charge);
	lua_pop(L, 1);

	static const char *const os_keep[] = { "time", "clock", "date", "getenv", NULL };
	luaL_requiref(L, LUA_OSLIBNAME, luaopen_os, 0);
	keep_fields(L, os_keep);
	lua_setfield(L, -2, LUA_OSLIBNAME);

	/* require, with its loaded table and the private core table */
	lua_newtable(L);
	static const luaL_Reg core[] = {
		{ "where", core_where },
		{ "glob", core_glob },
		{ "read_header", core_read_header },
		{ "error_text", core_error_text },
		{ NULL, NULL },
	};
	luaL_newlib(L, core);
	push_policies(L);
	lua_setfield(L, -2, "policies");
	lua_pushcclosure(L, sandbox_require, 2);
	lua_setfield(L, -2, "require");
	lua_pop(L, 1);
}

/* Makes the global table strict. Stack: [] -> []. */
void st__sandbox_lock(lua_State *L)
{
	lua_pushglobaltable(L);
	lua_newtable(L);
	lua_pushcfunction(L, strict_index);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, strict_newindex);
	lua_setfield(L, -2, "__newindex");
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, -2);
	lua_pop(L, 1);
}


