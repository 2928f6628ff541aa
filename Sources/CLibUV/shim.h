#ifndef HERALD_CLIBUV_SHIM_H
#define HERALD_CLIBUV_SHIM_H

#include <uv.h>
#include <sys/prctl.h>

/* Names the calling thread (the kernel keeps 15 bytes); shows in top -H, gdb and crash reports. */
static inline int herald_set_thread_name(const char *name) { return prctl(PR_SET_NAME, name, 0, 0, 0); }

/* Sizes of libuv's handle and request structs, for allocating them from Swift at stable addresses. */
static inline size_t herald_uv_tcp_size(void) { return sizeof(uv_tcp_t); }
static inline size_t herald_uv_pipe_size(void) { return sizeof(uv_pipe_t); }

/* libuv's handles all begin with the uv_handle_t fields; these casts keep the Swift side free of
   pointer rebinding for the common "treat this handle as a uv_handle_t / uv_stream_t" case. */
static inline uv_handle_t *herald_as_handle(void *h) { return (uv_handle_t *)h; }
static inline uv_stream_t *herald_as_stream(void *h) { return (uv_stream_t *)h; }

#endif
