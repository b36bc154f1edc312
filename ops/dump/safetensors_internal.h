/*
 * safetensors_internal.h — what the safetensors writer (safetensors.c) and
 * reader (safetensors_read.c) share. Nothing outside ops/dump/safetensors*.c
 * includes it.
 */
#ifndef ST_SAFETENSORS_INTERNAL_H
#define ST_SAFETENSORS_INTERNAL_H

#include <stddef.h>

/* The length (1..4) of the valid UTF-8 sequence at s, which ends before
 * end, or 0 when s does not start one (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF). Pure. */
size_t st__safetensors_utf8_len(const unsigned char *s, const unsigned char *end);

#endif
