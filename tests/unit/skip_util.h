/*
 * skip_util.h — honest skips for the cmocka tests (STYLE.md, "Tests").
 *
 * A case that lacks something it truly needs (the shared real data, python3
 * or one of its modules) says what is missing, and cmocka reports it as
 * SKIPPED, never as passed. Only that case skips: the others still run. A
 * program whose every case skipped exits 77, so that meson reports SKIP
 * rather than OK. Things the repository itself provides (tests/data) are
 * never a reason to skip: their absence is a failure.
 *
 * Header-only with static functions and a static counter: each test is one
 * program. Include after <cmocka.h>.
 */
#ifndef ST_TEST_SKIP_UTIL_H
#define ST_TEST_SKIP_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int tu_skips;

/* Skips the running case; the arguments (printf-style) say why. */
#define TU_SKIP(...)                                  \
	do {                                          \
		printf("skip: " __VA_ARGS__);         \
		printf("\n");                         \
		fflush(stdout);                       \
		tu_skips++;                           \
		skip();                               \
	} while (0)

/* main's exit status: the failures, else 77 when every one of n_tests
 * cases skipped, else 0. */
static inline int tu_exit(int failed, size_t n_tests)
{
	if (failed)
		return failed;
	return (size_t)tu_skips == n_tests ? 77 : 0;
}

/* $ST_SHARED_DATA/rel when that file is readable, else NULL. The returned
 * string is one of four static buffers (a few paths can be held at once). */
static inline const char *tu_shared(const char *rel)
{
	static char buf[4][1024];
	static int i;
	const char *d = getenv("ST_SHARED_DATA");
	if (!d || !*d)
		return NULL;
	char *p = buf[i++ & 3];
	snprintf(p, sizeof buf[0], "%s/%s", d, rel);
	return access(p, R_OK) == 0 ? p : NULL;
}

/* Skips the running case unless $ST_SHARED_DATA/rel is readable. */
#define TU_NEED_SHARED(rel)                                                        \
	do {                                                                       \
		if (!tu_shared(rel))                                               \
			TU_SKIP("%s needs the real data file $ST_SHARED_DATA/%s, " \
				"absent here (a clone without ../shared/data); "   \
				"the synthetic cases cover the same reader paths", \
				__func__, rel);                                    \
	} while (0)

/* tests/data (meson test sets ST_TEST_DATA): part of the repository, so
 * its absence fails the case. */
static inline const char *tu_test_data(void)
{
	const char *td = getenv("ST_TEST_DATA");
	if (!td || !*td)
		fail_msg("ST_TEST_DATA is not set: run through `meson test`, or set it to "
			 "the source tree's tests/data");
	return td;
}

#endif
