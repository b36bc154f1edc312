/*
 * fuzz_libsvm2.c — libFuzzer target: arbitrary bytes through the libsvm
 * reader of a source with labels = 2 (the first two tokens of a line are
 * its labels; docs/formats.md, "Training data: several labels"), so lines
 * with one label token, a feature where a label should be, and the label
 * loop's token scanning are all reached. Checks as fuzz_libsvm.c, plus
 * every label is 0 or 1.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	st_source_t src;
	fuzz_source_libsvm(&src);
	src.n_labels = 2;
	fuzz_read_all(&src, data, size);
	return 0;
}
