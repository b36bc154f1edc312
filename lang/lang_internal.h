/*
 * lang_internal.h — functions shared by the lang module only.
 */
#ifndef ST_LANG_INTERNAL_H
#define ST_LANG_INTERNAL_H

#include "lang/job.h"

/* Expands src->globs into src->paths (sorted, duplicates removed), replacing
 * any previous paths. Returns ST_OK, or ST_ENOENT when no glob matches a file
 * (paths unchanged; logged as an error when `log` is non-zero). */
int st__job_expand(st_source_t *src, int log);

#endif
