import Glibc
import Testing

/// Whether this test process runs under Thread Sanitizer (its runtime is linked in).
let runningUnderThreadSanitizer = dlsym(nil, "__tsan_init") != nil  // nil: RTLD_DEFAULT on Linux

/// Whether this test process runs under Address Sanitizer.
let runningUnderAddressSanitizer = dlsym(nil, "__asan_init") != nil

/// For tests of argument and configuration checking only: left out of the sanitizer runs, where each of the many
/// `herald` starts they make is slow and a sanitizer has nothing to find; the plain and release runs check them.
let argumentCheckingOnly = ConditionTrait.disabled(
    if: runningUnderThreadSanitizer || runningUnderAddressSanitizer,
    "argument and configuration checks only: run by the plain and release runs")
