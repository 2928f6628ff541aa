// How many tests the test process runs at once.
//
// Swift Testing starts every test of the package at the same time unless told otherwise, and each Herald test holds
// a loop, its threads and its sockets while it waits: some 600 tests at once open more than 1,300 descriptors and
// 680 threads. Past about 1,360 open descriptors, Foundation's `Process.run` (which lists /proc/self/fd to close
// the inherited ones in the child) reads past the end of readdir's buffer and can crash the test process in
// whichever test starts a child then. Sixteen at a time keeps both small and takes no longer on two cores.
//
// This runs before `main` in the test process only (this target is linked into the test bundle, into nothing
// else); a width already set in the environment is kept.

#include "TestParallelism.h"

#include <stdlib.h>

__attribute__((constructor)) static void heraldLimitTestParallelism(void) {
    setenv("SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH", HERALD_TEST_PARALLELISM, 0);
}
