/*
 * rows_internal.h — what the row file's writer (rows.c) and reader
 * (rows_read.c) share: the magics, little-endian field access, the record
 * size and the header checks of rows.h's format. Nothing outside
 * ops/dump/rows*.c includes it.
 */
#ifndef ST_ROWS_INTERNAL_H
#define ST_ROWS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ops/dump/rows.h"

static const char st__rows_magic[8] = { 'S', 'T', 'R', 'A', 'T', 'A', 'R', 'W' };
static const char st__rows_footer_magic[8] = { 'S', 'T', 'R', 'A', 'T', 'A', 'F', 'T' };

static inline void st__rows_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void st__rows_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t st__rows_get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t st__rows_get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static inline size_t st__rows_row_bytes(const st_rows_info_t *i)
{
	return 16 + 4 * ((size_t)i->dim + i->state_dim);
}

static inline int st__rows_check_info(const st_rows_info_t *info)
{
	return info->dim >= 1 && (uint64_t)info->dim + info->state_dim <= ST_ROWS_MAX_FLOATS &&
	       !(info->flags & ~(uint32_t)ST_ROWS_DELTA);
}

#endif
