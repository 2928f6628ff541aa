#ifndef HERALD_CLIBUV_SHIM_H
#define HERALD_CLIBUV_SHIM_H

#include <uv.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <string.h>
#include <sys/prctl.h>

/* Names the calling thread (the kernel keeps 15 bytes); shows in top -H, gdb and crash reports. */
static inline int herald_set_thread_name(const char *name) { return prctl(PR_SET_NAME, name, 0, 0, 0); }

/* Sizes of libuv's handle and request structs, for allocating them from Swift at stable addresses. */
static inline size_t herald_uv_tcp_size(void) { return sizeof(uv_tcp_t); }
static inline size_t herald_uv_pipe_size(void) { return sizeof(uv_pipe_t); }
static inline size_t herald_uv_process_size(void) { return sizeof(uv_process_t); }

/* Bytes written to a socket that its peer has not taken yet (SIOCOUTQ: for TCP, not yet acknowledged; for a Unix
   socket, not yet read, counted as the kernel charges them), or -1 when it cannot be asked. */
static inline int herald_socket_untaken(int fd) {
    int count = 0;
    return ioctl(fd, SIOCOUTQ, &count) == 0 ? count : -1;
}

/* libuv's handles all begin with the uv_handle_t fields; these casts keep the Swift side free of
   pointer rebinding for the common "treat this handle as a uv_handle_t / uv_stream_t" case. */
static inline uv_handle_t *herald_as_handle(void *h) { return (uv_handle_t *)h; }
static inline uv_stream_t *herald_as_stream(void *h) { return (uv_stream_t *)h; }

/* Spawns `file` (argv `args`, environment `env` or the parent's when NULL, working directory `cwd` or the
   parent's when NULL) with its standard input, output and error connected to the pipes `in`, `out` and `err`,
   which are initialised (uv_pipe_init) and not yet open. Keeps the uv_process_options_t and its stdio
   containers (a C union) on the C side. As uv_spawn: `process` is initialised even when this fails. */
static inline int herald_uv_spawn_piped(uv_loop_t *loop, uv_process_t *process, uv_exit_cb exit_cb,
                                        const char *file, char **args, char **env, const char *cwd,
                                        unsigned int flags, uv_pipe_t *in, uv_pipe_t *out, uv_pipe_t *err) {
    uv_stdio_container_t stdio[3];
    stdio[0].flags = (uv_stdio_flags)(UV_CREATE_PIPE | UV_READABLE_PIPE);
    stdio[0].data.stream = (uv_stream_t *)in;
    stdio[1].flags = (uv_stdio_flags)(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
    stdio[1].data.stream = (uv_stream_t *)out;
    stdio[2].flags = (uv_stdio_flags)(UV_CREATE_PIPE | UV_WRITABLE_PIPE);
    stdio[2].data.stream = (uv_stream_t *)err;
    uv_process_options_t options;
    memset(&options, 0, sizeof options);
    options.exit_cb = exit_cb;
    options.file = file;
    options.args = args;
    options.env = env;
    options.cwd = cwd;
    options.flags = flags;
    options.stdio_count = 3;
    options.stdio = stdio;
    return uv_spawn(loop, process, &options);
}

#endif
