/*
 * fixture.c — reads the STFX1 golden fixtures of tests/reference (see
 * fixture.h and README.md there). Single-threaded; every record's data is
 * copied into its own malloc'ed, aligned buffer so callers may cast it.
 * Assumes a little-endian host (as the fixtures are little-endian).
 */
#include "tests/reference/fixture.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const size_t elem_size[] = { 4, 8, 4, 2, 1, 8 };

static int take(const unsigned char *buf, size_t len, size_t *pos, void *dst, size_t n)
{
	if (n > len - *pos)
		return -EINVAL;
	memcpy(dst, buf + *pos, n);
	*pos += n;
	return 0;
}

void st_fixture_free(st_fixture_t *fx)
{
	if (!fx)
		return;
	for (int i = 0; i < fx->n; i++) {
		free(fx->recs[i].name);
		free(fx->recs[i].data);
	}
	free(fx->recs);
	free(fx);
}

static int parse(st_fixture_t *fx, const unsigned char *buf, size_t len)
{
	size_t pos = 0;
	uint32_t n;
	char magic[6];

	if (take(buf, len, &pos, magic, 6) || memcmp(magic, "STFX1\n", 6) ||
	    take(buf, len, &pos, &n, 4))
		return -EINVAL;
	fx->recs = calloc(n ? n : 1, sizeof *fx->recs);
	if (!fx->recs)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		st_fx_rec_t *r = &fx->recs[i];
		uint32_t nlen, ndim;
		uint8_t dt;

		if (take(buf, len, &pos, &nlen, 4) || nlen > len - pos)
			return -EINVAL;
		r->name = malloc(nlen + 1);
		if (!r->name)
			return -ENOMEM;
		fx->n = (int)i + 1;     /* so that st_fixture_free frees it */
		take(buf, len, &pos, r->name, nlen);
		r->name[nlen] = 0;
		if (take(buf, len, &pos, &dt, 1) || take(buf, len, &pos, &ndim, 4) ||
		    dt > ST_FX_F64 || ndim > 4)
			return -EINVAL;
		r->dtype = dt;
		r->ndim = (int)ndim;
		r->count = 1;
		for (uint32_t d = 0; d < ndim; d++) {
			if (take(buf, len, &pos, &r->dims[d], 8))
				return -EINVAL;
			r->count *= r->dims[d];
		}
		size_t bytes = r->count * elem_size[dt];
		if (bytes > len - pos)
			return -EINVAL;
		r->data = malloc(bytes + 1);
		if (!r->data)
			return -ENOMEM;
		take(buf, len, &pos, r->data, bytes);
		((char *)r->data)[bytes] = 0;   /* strings end with a NUL */
	}
	return pos == len ? 0 : -EINVAL;
}

int st_fixture_load(st_fixture_t **out, const char *path)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long len;
	int rc;

	*out = NULL;
	if (!f) {
		rc = -errno;
		fprintf(stderr, "fixture %s: %s\n", path, strerror(errno));
		return rc;
	}
	if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) ||
	    !(buf = malloc((size_t)len + 1)) || fread(buf, 1, (size_t)len, f) != (size_t)len) {
		rc = buf ? -EIO : -ENOMEM;
		free(buf);
		fclose(f);
		fprintf(stderr, "fixture %s: read failed\n", path);
		return rc;
	}
	fclose(f);
	st_fixture_t *fx = calloc(1, sizeof *fx);
	if (!fx) {
		free(buf);
		return -ENOMEM;
	}
	rc = parse(fx, buf, (size_t)len);
	free(buf);
	if (rc) {
		fprintf(stderr, "fixture %s: malformed (not STFX1 or truncated)\n", path);
		st_fixture_free(fx);
		return rc;
	}
	*out = fx;
	return 0;
}

const st_fx_rec_t *st_fixture_find(const st_fixture_t *fx, const char *name)
{
	for (int i = 0; i < fx->n; i++)
		if (!strcmp(fx->recs[i].name, name))
			return &fx->recs[i];
	return NULL;
}

static const void *typed(const st_fixture_t *fx, const char *name, int dt, size_t *count)
{
	const st_fx_rec_t *r = st_fixture_find(fx, name);

	if (!r || r->dtype != dt)
		return NULL;
	if (count)
		*count = r->count;
	return r->data;
}

const float *st_fixture_f32(const st_fixture_t *fx, const char *name, size_t *count)
{
	return typed(fx, name, ST_FX_F32, count);
}

const uint64_t *st_fixture_u64(const st_fixture_t *fx, const char *name, size_t *count)
{
	return typed(fx, name, ST_FX_U64, count);
}

const uint32_t *st_fixture_u32(const st_fixture_t *fx, const char *name, size_t *count)
{
	return typed(fx, name, ST_FX_U32, count);
}

const uint16_t *st_fixture_u16(const st_fixture_t *fx, const char *name, size_t *count)
{
	return typed(fx, name, ST_FX_U16, count);
}

const double *st_fixture_f64(const st_fixture_t *fx, const char *name, size_t *count)
{
	return typed(fx, name, ST_FX_F64, count);
}

const char *st_fixture_str(const st_fixture_t *fx, const char *name)
{
	return typed(fx, name, ST_FX_STR, NULL);
}
