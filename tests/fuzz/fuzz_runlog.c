/*
 * fuzz_runlog.c — libFuzzer target: arbitrary bytes as one line of a
 * metrics file through the report's JSON-lines parser (ops/report/runlog.h),
 * the one parser of `strata report` that takes nested input. A parse either
 * fails with a message or gives pairs whose keys and strings are readable
 * (the lookups below walk them all); nothing leaks either way.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/report/runlog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	st_runlog_rec_t rec;
	char err[256];
	if (st_runlog_parse(text, &rec, err, sizeof err) == 0) {
		size_t n = 0;
		for (size_t i = 0; i < rec.n; i++) {
			n += strlen(rec.kv[i].key) + (rec.kv[i].str ? strlen(rec.kv[i].str) : 0);
			if (st_runlog_get(&rec, rec.kv[i].key) == NULL)
				abort();   /* every key found again */
		}
		(void)n;
	} else if (!err[0]) {
		abort();           /* a failed parse says why */
	}
	st_runlog_rec_fini(&rec);
	free(text);
	return 0;
}
