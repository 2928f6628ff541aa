// malloc-count: an LD_PRELOAD library that counts a process's allocations, for scripts/peers.
//
//     cc -O2 -shared -fPIC -o malloc-count.so malloc-count.c
//     MALLOC_COUNT_FILE=/tmp/x.count LD_PRELOAD=./malloc-count.so server ...
//
// malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign and valloc each add one to a 64-bit counter kept
// in the first 8 bytes of MALLOC_COUNT_FILE (created, mapped shared), so another process reads it while this one
// runs: `od -An -t u8 -N8 FILE`. The calls go on to glibc's own functions (__libc_malloc, ...), so no dlsym is needed
// before the first allocation. Without MALLOC_COUNT_FILE nothing is counted.

#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);

static uint64_t* counter;

__attribute__((constructor)) static void open_counter(void) {
    const char* path = getenv("MALLOC_COUNT_FILE");
    if (!path) return;
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) return;
    if (ftruncate(fd, 4096) == 0) {
        void* page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (page != MAP_FAILED) counter = page;
    }
    close(fd);
}

static inline void count(void) {
    if (counter) __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

void* malloc(size_t size) { count(); return __libc_malloc(size); }
void* calloc(size_t n, size_t size) { count(); return __libc_calloc(n, size); }
void* realloc(void* p, size_t size) { count(); return __libc_realloc(p, size); }
void* memalign(size_t alignment, size_t size) { count(); return __libc_memalign(alignment, size); }
void* aligned_alloc(size_t alignment, size_t size) { count(); return __libc_memalign(alignment, size); }
void* valloc(size_t size) { count(); return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), size); }
int posix_memalign(void** out, size_t alignment, size_t size) {
    count();
    void* p = __libc_memalign(alignment, size);
    if (!p) return 12;  // ENOMEM
    *out = p;
    return 0;
}
