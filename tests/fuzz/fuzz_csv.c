/*
 * fuzz_csv.c — libFuzzer target: arbitrary bytes through the csv reader.
 *
 * The input is parsed from memory (st__reader_open_mem) with a small read
 * buffer and line cap so that refills, lines split across refills and
 * overlong lines are all reached by short inputs. Every row is appended to
 * one batch; the invariants of the batch are checked after each call.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	st_source_t src;
	fuzz_source_csv(&src);
	fuzz_read_all(&src, data, size);
	return 0;
}
