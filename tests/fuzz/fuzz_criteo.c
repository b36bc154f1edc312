/*
 * fuzz_criteo.c — libFuzzer target: arbitrary bytes through the criteo reader.
 *
 * The input is parsed from memory (st__reader_open_mem) with a small read
 * buffer and line cap so that refills, lines split across refills and
 * overlong lines are all reached by short inputs. Every row is appended to
 * one batch; the invariants of the batch are checked after each call. Each
 * input is read twice: with the defaults, and with missing = key and
 * dense_missing = indicator.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	st_source_t src;
	fuzz_source_criteo(&src);
	fuzz_read_all(&src, data, size);
	/* and again with missing keys and dense indicators (issue 18) */
	src.missing = ST_MISSING_KEY;
	src.dense_indicator = 1;
	src.n_dense = 26;
	fuzz_read_all(&src, data, size);
	return 0;
}
