#ifndef HERALD_TEST_PARALLELISM_H
#define HERALD_TEST_PARALLELISM_H

/// How many tests Swift Testing runs at once in Herald's test process, unless
/// SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH is set already.
#define HERALD_TEST_PARALLELISM "16"

#endif
