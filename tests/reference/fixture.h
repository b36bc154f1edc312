/*
 * fixture.h — reader of the golden fixtures written by
 * tests/reference/make_fixtures.py (format "STFX1", see README.md there).
 *
 * A fixture is a list of named, typed, n-dimensional arrays. The whole file
 * is read into memory at load; records point into that buffer (data may be
 * unaligned in the file, so the loader copies each record's data into its
 * own aligned allocation).
 */
#ifndef ST_FIXTURE_H
#define ST_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

enum st_fx_dtype {
	ST_FX_F32 = 0, ST_FX_U64 = 1, ST_FX_U32 = 2, ST_FX_U16 = 3,
	ST_FX_STR = 4, ST_FX_F64 = 5,
};

typedef struct st_fx_rec {
	char *name;        /* NUL-terminated */
	int dtype;         /* enum st_fx_dtype */
	int ndim;
	uint64_t dims[4];
	size_t count;      /* product of dims (1 when ndim = 0) */
	void *data;        /* count elements; a string record is NUL-terminated */
} st_fx_rec_t;

typedef struct st_fixture {
	int n;
	st_fx_rec_t *recs;
} st_fixture_t;

/* Reads path. Returns 0 and *out (caller frees with st_fixture_free), or
 * -errno on I/O failure, -EINVAL on a malformed file (message on stderr). */
int st_fixture_load(st_fixture_t **out, const char *path);
void st_fixture_free(st_fixture_t *fx);

/* The record called name, or NULL. */
const st_fx_rec_t *st_fixture_find(const st_fixture_t *fx, const char *name);

/* Typed accessors: the record's data when it exists with that dtype (count
 * in *count when non-NULL), else NULL. */
const float *st_fixture_f32(const st_fixture_t *fx, const char *name, size_t *count);
const uint64_t *st_fixture_u64(const st_fixture_t *fx, const char *name, size_t *count);
const uint32_t *st_fixture_u32(const st_fixture_t *fx, const char *name, size_t *count);
const uint16_t *st_fixture_u16(const st_fixture_t *fx, const char *name, size_t *count);
const double *st_fixture_f64(const st_fixture_t *fx, const char *name, size_t *count);
const char *st_fixture_str(const st_fixture_t *fx, const char *name);

#endif
