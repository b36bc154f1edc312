/*
 * ckpt_internal.h — what the checkpoint writer (ckpt.c), the listings
 * (ckpt_list.c) and the readers (ckpt_read.c) share. Nothing outside
 * ops/dump/ckpt*.c includes it.
 */
#ifndef ST_CKPT_INTERNAL_H
#define ST_CKPT_INTERNAL_H

#include <stddef.h>

#include "ops/dump/ckpt.h"

/* "a/b", malloc'ed (the caller frees it); NULL when out of memory. */
char *st__ckpt_path_join(const char *a, const char *b);

/* Scans root: complete entries (want_export selects the family, in no
 * order) and, with tmps non-NULL, stale .tmp directories of that family.
 * ST_OK (a root that does not exist holds nothing), ST_EIO or ST_ENOMEM
 * with err set. The caller frees *out (st_ckpt_entries_free) and *tmps. */
int st__ckpt_scan(const char *root, int want_export, st_ckpt_entry_t **out, size_t *n,
		  char ***tmps, size_t *n_tmps, char *err, size_t errlen);

/* qsort orders of entries: newest (highest number) first, oldest first. */
int st__ckpt_cmp_newest_first(const void *a, const void *b);
int st__ckpt_cmp_oldest_first(const void *a, const void *b);

/* A note for msg(arg, text), or a warning when msg is NULL. */
void st__ckpt_report(st_ckpt_msg_fn *msg, void *arg, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
