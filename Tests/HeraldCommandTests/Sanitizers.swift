import Glibc

/// Whether this test process runs under Thread Sanitizer (its runtime is linked in).
let runningUnderThreadSanitizer = dlsym(nil, "__tsan_init") != nil  // nil: RTLD_DEFAULT on Linux

/// Whether this test process runs under Address Sanitizer.
let runningUnderAddressSanitizer = dlsym(nil, "__asan_init") != nil
