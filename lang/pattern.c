/*
 * pattern.c — string.find, match, gmatch and gsub for the job sandbox, each
 * refusing a pattern whose worst case on its subject is too much work.
 *
 * Why: Lua's matcher is C that backtracks. It runs no Lua instruction and
 * calls no function while it works, so the watchdog's hooks never fire in
 * it, and a pattern like string.rep("a*", 10) .. "b" on a few thousand
 * bytes runs for centuries. A wrapper that counted steps would need a
 * matcher of its own; instead each call's worst case is bounded before the
 * stock matcher runs, and a call over the budget is refused with a message.
 * Calls under it are charged to the sandbox (st__sandbox_charge), so many
 * cheap calls still meet the time limit.
 *
 * The bound follows how the matcher backtracks. Reading the pattern from
 * its end, C is the cost of matching the rest at one position (1 at the
 * end), and each item adds:
 *   - a single class (., %a, [set], a literal) that matches at most r
 *     subject bytes in a row (r: its longest run in the subject):
 *     alone 1 + C; with * or - (r + 1)(C + 1); with + r(C + 1) + 1; with ?
 *     1 + 2C; and 1 when r = 0, since the item then fails at once (1 + C
 *     for * - ?, which may match nothing);
 *   - %b and back-references %1-%9 scan up to n bytes once: n + 1 + C;
 *   - captures, %f and a final $: 1 + C.
 * When the rest matches wherever it starts (it can match the empty string:
 * only captures and items with * - ?), its first try succeeds, so a * before
 * it costs r + 1 + C and a - costs 1 + C; a find or match whose whole
 * pattern is like that succeeds at its first position. Otherwise the total
 * is C times the start positions the call tries (1 when anchored with ^;
 * n + 1 for find, match and gsub; 2(n + 1) for gmatch, whose iterator may
 * retry where a match ended), with two refinements for the first item: a
 * class without quantifier sends only the positions where it matches on to
 * the rest; and in gmatch and gsub, a greedy * or + followed by a rest that
 * always matches costs n over the whole iteration (each match ends after
 * its run and the next one starts there: "[^,]+", "%S+").
 * The bound overestimates (every item gets its longest run at every
 * position) but never underestimates, so only a call that could be slow is
 * refused, while the patterns jobs write (split on a separator, trim, %d+)
 * cost about n. A malformed pattern is bounded up to where it is malformed
 * (the matcher raises there); the stock function still reports it.
 *
 * Threads: none of its own; the functions run in the job's state.
 */
#include "lang/lang_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#define CAP 1e30          /* costs saturate here (no overflow to inf) */
#define MEASURE_MAX 1e8   /* class tests spent measuring runs, at most */

/* Items: a class with its quantifier; a capture bracket (matches empty);
 * an anchor ($ at the end, %f) or a malformed rest; %b or a back-reference
 * (scans up to n bytes once). */
enum { I_SINGLE, I_UNIT, I_ANCHOR, I_SCAN };
enum { Q_NONE, Q_STAR, Q_PLUS, Q_MINUS, Q_OPT };

typedef struct item {
	unsigned char kind, quant;
	const char *cls, *cls_end;   /* I_SINGLE: the class, [cls, cls_end) */
} item_t;

/* What each wrapper needs: the budget and where to charge (upvalue 2). */
typedef struct guard_cfg {
	double budget;
	void (*charge)(lua_State *L, double steps);
} guard_cfg_t;

/* %a, %d, ... (uppercase: the complement); any other character is itself. */
static int class_match(int c, int cl)
{
	int res;
	switch (tolower(cl)) {
	case 'a': res = isalpha(c); break;
	case 'c': res = iscntrl(c); break;
	case 'd': res = isdigit(c); break;
	case 'g': res = isgraph(c); break;
	case 'l': res = islower(c); break;
	case 'p': res = ispunct(c); break;
	case 's': res = isspace(c); break;
	case 'u': res = isupper(c); break;
	case 'w': res = isalnum(c); break;
	case 'x': res = isxdigit(c); break;
	default: return cl == c;
	}
	if (isupper(cl))
		res = !res;
	return res != 0;
}

/* [set] from p ('[') to ec (its ']'): ranges a-z, %classes, ^ complement,
 * a ']' right after [ or [^ taken literally. */
static int set_match(int c, const char *p, const char *ec)
{
	int in = 1;
	p++;
	if (*p == '^') {
		in = 0;
		p++;
	}
	for (; p < ec; p++) {
		if (*p == '%' && p + 1 < ec) {
			p++;
			if (class_match(c, (unsigned char)*p))
				return in;
		} else if (p[1] == '-' && p + 2 < ec) {
			if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2])
				return in;
			p += 2;
		} else if ((unsigned char)*p == c) {
			return in;
		}
	}
	return !in;
}

static int single_match(int c, const char *p, const char *ep)
{
	switch (*p) {
	case '.': return 1;
	case '%': return class_match(c, (unsigned char)p[1]);
	case '[': return set_match(c, p, ep - 1);
	default: return (unsigned char)*p == c;
	}
}

/* End of the class at p, or NULL when it is malformed (a trailing %, a
 * [set] without its ]). */
static const char *class_end(const char *p, const char *pe)
{
	if (*p == '%')
		return p + 1 < pe ? p + 2 : NULL;
	if (*p != '[')
		return p + 1;
	p++;
	if (p < pe && *p == '^')
		p++;
	do {
		if (p >= pe)
			return NULL;
		if (*p++ == '%' && p < pe)
			p++;
	} while (p >= pe || *p != ']');
	return p + 1;
}

/* Splits p into items (at most one per pattern byte); a malformed rest
 * becomes one anchor item (the matcher raises when it gets there). Returns
 * the count. */
static size_t parse(const char *p, const char *pe, item_t *it)
{
	size_t k = 0;
	while (p < pe) {
		item_t *x = &it[k++];
		memset(x, 0, sizeof *x);
		x->kind = I_UNIT;
		if (*p == '(') {
			p += p + 1 < pe && p[1] == ')' ? 2 : 1;
			continue;
		}
		if (*p == ')') {
			p++;
			continue;
		}
		x->kind = I_ANCHOR;
		if (*p == '$' && p + 1 == pe) {
			p++;
			continue;
		}
		if (*p == '%' && p + 1 < pe) {
			char c = p[1];
			if (c == 'b') {
				if (p + 3 >= pe)
					return k;
				x->kind = I_SCAN;
				p += 4;
				continue;
			}
			if (c == 'f') {
				p += 2;
				const char *e = p < pe && *p == '[' ? class_end(p, pe) : NULL;
				if (!e)
					return k;
				p = e;
				continue;
			}
			if (c >= '0' && c <= '9') {
				x->kind = I_SCAN;
				p += 2;
				continue;
			}
		}
		const char *e = class_end(p, pe);
		if (!e)
			return k;
		x->kind = I_SINGLE;
		x->cls = p;
		x->cls_end = e;
		p = e;
		if (p < pe) {
			switch (*p) {
			case '*': x->quant = Q_STAR; p++; break;
			case '+': x->quant = Q_PLUS; p++; break;
			case '-': x->quant = Q_MINUS; p++; break;
			case '?': x->quant = Q_OPT; p++; break;
			default: break;
			}
		}
	}
	return k;
}

/* Longest run of subject bytes the class matches, and how many bytes it
 * matches in all. */
static void runs(const item_t *x, const char *s, size_t n, double *longest, double *count)
{
	size_t best = 0, cur = 0, all = 0;
	for (size_t i = 0; i < n; i++) {
		if (single_match((unsigned char)s[i], x->cls, x->cls_end)) {
			cur++;
			all++;
			if (cur > best)
				best = cur;
		} else {
			cur = 0;
		}
	}
	*longest = (double)best;
	*count = (double)all;
}

/* Cost of items[from..k) at one position, and in *always whether they
 * match (the empty string) wherever they start: then every item's first
 * try succeeds, and a quantifier before them costs its run, not its run
 * times their cost. exact: measure runs in s (else every run is n, the
 * cheap first guess). */
static double fold(const item_t *it, size_t from, size_t k, const char *s, size_t n, int exact,
		   int *always)
{
	double c = 1.0, dn = (double)n;
	int ok = 1;
	for (size_t i = k; i-- > from;) {
		const item_t *x = &it[i];
		if (x->kind == I_UNIT) {
			c = 1 + c;
		} else if (x->kind == I_ANCHOR) {
			c = 1 + c;
			ok = 0;
		} else if (x->kind == I_SCAN) {
			c = dn + 1 + c;
			ok = 0;
		} else {
			double r = dn, all;
			if (exact)
				runs(x, s, n, &r, &all);
			switch (x->quant) {
			case Q_NONE:
				c = r > 0 ? 1 + c : 1;
				ok = 0;
				break;
			case Q_STAR:
				c = ok ? r + 1 + c : (r + 1) * (c + 1);
				break;
			case Q_MINUS:
				c = ok ? 1 + c : (r + 1) * (c + 1);
				break;
			case Q_PLUS:
				c = r == 0 ? 1 : ok ? r + 1 + c : r * (c + 1) + 1;
				ok = 0;
				break;
			default:
				c = ok || r == 0 ? 1 + c : 1 + 2 * c;
				break;
			}
		}
		if (c > CAP)
			c = CAP;
	}
	if (always)
		*always = ok;
	return c;
}

/* Worst-case steps of a call (see the top of the file). */
static double bound(const item_t *it, size_t k, const char *s, size_t n, double starts,
		    int iterate, int exact)
{
	int always, rest_always;
	double c = fold(it, 0, k, s, n, exact, &always);
	if (!iterate && always)
		return c;                 /* the first start matches */
	double cost = starts * c;
	if (k == 0 || it[0].kind != I_SINGLE)
		return cost;
	double c1 = fold(it, 1, k, s, n, exact, &rest_always);
	double r = (double)n, all = (double)n;
	if (exact)
		runs(&it[0], s, n, &r, &all);
	if (it[0].quant == Q_NONE) {
		/* Only where the first class matches does the rest run. */
		double refined = starts + all * c1;
		if (refined < cost)
			cost = refined;
	} else if (iterate && rest_always && (it[0].quant == Q_STAR || it[0].quant == Q_PLUS)) {
		/* gmatch, gsub: a match ends at or after the greedy run, and
		 * the next start is there, so the runs counted over the whole
		 * iteration add up to at most n. */
		double refined = (double)n + starts * (2 + c1);
		if (refined < cost)
			cost = refined;
	}
	return cost;
}

/* Worst-case steps of matching p against s from `starts` positions (see the
 * top of the file); a first guess at most `enough` is returned as is.
 * Returns CAP when the items cannot be held. */
static double estimate(const char *s, size_t n, const char *p, size_t m, double starts,
		       int iterate, double enough)
{
	item_t *it = malloc(sizeof(item_t) * (m ? m : 1));
	if (!it)
		return CAP;
	size_t k = parse(p, p + m, it);
	/* First guess with every run = n: enough for short subjects. */
	double cost = bound(it, k, s, n, starts, iterate, 0);
	/* Measuring runs costs n per class item; when that is a slow call
	 * itself, the guess stands. */
	if (cost > enough && (double)(k + 1) * (double)n <= MEASURE_MAX)
		cost = bound(it, k, s, n, starts, iterate, 1);
	free(it);
	return cost > CAP ? CAP : cost;
}

double st__pattern_cost(const char *s, size_t n, const char *p, size_t m, int mode,
			double starts, double enough)
{
	if (mode != ST__PATTERN_GMATCH && m > 0 && p[0] == '^') {
		p++;
		m--;
		if (starts > 1)
			starts = 1;
	}
	return estimate(s, n, p, m, starts, mode != ST__PATTERN_FIND, enough);
}

static double budget_of(lua_State *L)
{
	const guard_cfg_t *cfg = lua_touserdata(L, lua_upvalueindex(2));
	return cfg->budget;
}

/* Start positions of find/match from init (1-based, negative from the
 * end, as Lua reads it); 0 when init is past the end. */
static double starts_from(lua_Integer init, size_t n)
{
	lua_Integer len = (lua_Integer)n;
	if (init == 0 || init < -len)
		init = 1;
	else if (init < 0)
		init = len + init + 1;
	if (init > len + 1)
		return 0;
	return (double)(len - init + 2);
}

/* A location prefix (file:line:) at the start of msg? */
static int has_location(const char *msg)
{
	const char *c = strchr(msg, ':');
	if (!c || c == msg || !isdigit((unsigned char)c[1]))
		return 0;
	c++;
	while (isdigit((unsigned char)*c))
		c++;
	return *c == ':';
}

/* Checks the cost, charges it and calls the original (upvalue 1) on the
 * arguments. Errors the matcher raises from under this wrapper would carry
 * no location (its caller is C), so they get the job's. Stack: [args] ->
 * [results]. */
static int guarded(lua_State *L, const char *name, double cost)
{
	const guard_cfg_t *cfg = lua_touserdata(L, lua_upvalueindex(2));
	if (cfg->charge)
		cfg->charge(L, cost > cfg->budget ? cfg->budget : cost);
	if (cost > cfg->budget) {
		size_t m;
		const char *p = lua_tolstring(L, 2, &m);
		char msg[256];
		snprintf(msg, sizeof msg, "string.%s: the pattern '%.*s%s' could take %s%.3g "
			 "steps on a %zu-byte string, more than the %.3g a job file may spend on "
			 "one call; use a simpler pattern or a shorter string", name,
			 (int)(m > 40 ? 40 : m), p, m > 40 ? "..." : "",
			 cost >= CAP ? "more than " : "up to ", cost, (size_t)lua_rawlen(L, 1),
			 cfg->budget);
		return luaL_error(L, "%s", msg);
	}
	int nargs = lua_gettop(L);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	int rc = lua_pcall(L, nargs, LUA_MULTRET, 0);
	if (rc != LUA_OK) {
		/* (lua_error raises a memory error again as one.) */
		if (rc == LUA_ERRRUN && lua_type(L, -1) == LUA_TSTRING &&
		    !has_location(lua_tostring(L, -1))) {
			luaL_where(L, 1);
			lua_insert(L, -2);
			lua_concat(L, 2);
		}
		return lua_error(L);
	}
	return lua_gettop(L);
}

/* No pattern character in p (find then searches plainly, as Lua does). */
static int no_specials(const char *p, size_t m)
{
	for (size_t i = 0; i < m; i++)
		if (p[i] && memchr("^$*+?.([%-", p[i], 10))
			return 0;
	return 1;
}

/* string.find(s, p [, init [, plain]]) and string.match(s, p [, init]). */
static int guard_find_aux(lua_State *L, int find)
{
	size_t n, m;
	const char *s = luaL_checklstring(L, 1, &n);
	const char *p = luaL_checklstring(L, 2, &m);
	double starts = starts_from(luaL_optinteger(L, 3, 1), n);
	double cost;
	if (find && (lua_toboolean(L, 4) || no_specials(p, m)))
		cost = starts * ((double)m + 1);   /* a plain search: memchr and memcmp */
	else
		cost = st__pattern_cost(s, n, p, m, ST__PATTERN_FIND, starts, budget_of(L));
	return guarded(L, find ? "find" : "match", cost);
}

static int guard_find(lua_State *L)
{
	return guard_find_aux(L, 1);
}

static int guard_match(lua_State *L)
{
	return guard_find_aux(L, 0);
}

/* string.gmatch(s, p [, init]): the whole iteration is bounded here. */
static int guard_gmatch(lua_State *L)
{
	size_t n, m;
	const char *s = luaL_checklstring(L, 1, &n);
	const char *p = luaL_checklstring(L, 2, &m);
	double starts = 2 * starts_from(luaL_optinteger(L, 3, 1), n);
	return guarded(L, "gmatch", st__pattern_cost(s, n, p, m, ST__PATTERN_GMATCH, starts,
						    budget_of(L)));
}

/* string.gsub(s, p, repl [, n]). */
static int guard_gsub(lua_State *L)
{
	size_t n, m;
	const char *s = luaL_checklstring(L, 1, &n);
	const char *p = luaL_checklstring(L, 2, &m);
	int tr = lua_type(L, 3);
	luaL_argexpected(L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION ||
			 tr == LUA_TTABLE, 3, "string/function/table");
	luaL_optinteger(L, 4, 0);
	return guarded(L, "gsub", st__pattern_cost(s, n, p, m, ST__PATTERN_GSUB, (double)n + 1,
						  budget_of(L)));
}

void st__pattern_guard(lua_State *L, double budget, void (*charge)(lua_State *L, double steps))
{
	static const luaL_Reg fns[] = {
		{ "find", guard_find },
		{ "match", guard_match },
		{ "gmatch", guard_gmatch },
		{ "gsub", guard_gsub },
		{ NULL, NULL },
	};
	int t = lua_absindex(L, -1);
	guard_cfg_t *cfg = lua_newuserdatauv(L, sizeof *cfg, 0);
	cfg->budget = budget;
	cfg->charge = charge;
	for (const luaL_Reg *f = fns; f->name; f++) {
		lua_getfield(L, t, f->name);
		lua_pushvalue(L, -2);
		lua_pushcclosure(L, f->func, 2);
		lua_setfield(L, t, f->name);
	}
	lua_pop(L, 1);
}
