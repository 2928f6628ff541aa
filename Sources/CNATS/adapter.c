/* Compiles cnats's libuv adapter (a header of function definitions) exactly once, and wraps its attach
   callback so Herald can learn the adapter's state for a connection and wait for its handles to close. */
#include <nats/adapters/libuv.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "CNATS.h"

struct herald_nats_loop {
    uv_loop_t *loop;
    /* Written on the first attach (on the loop thread), read by later attaches on cnats's reconnect thread. */
    void *_Atomic adapter;
};

herald_nats_loop *herald_nats_loop_create(uv_loop_t *loop) {
    herald_nats_loop *place = calloc(1, sizeof *place);
    if (place != NULL) place->loop = loop;
    return place;
}

void herald_nats_loop_free(herald_nats_loop *place) { free(place); }

void herald_nats_bind_loop_thread(uv_loop_t *loop) {
    natsLibuv_Init();
    natsLibuv_SetThreadLocalLoop(loop);
}

static natsStatus herald_attach(void **userData, void *loop, natsConnection *nc, natsSock socket) {
    herald_nats_loop *place = (herald_nats_loop *)loop;
    natsStatus status = natsLibuv_Attach(userData, place->loop, nc, socket);
    if (status == NATS_OK) atomic_store(&place->adapter, *userData);
    return status;
}

natsStatus herald_nats_use_loop(natsOptions *opts, herald_nats_loop *place) {
    natsLibuv_Init();
    return natsOptions_SetEventLoop(opts, place, herald_attach, natsLibuv_Read, natsLibuv_Write, natsLibuv_Detach);
}

struct herald_count { void *adapter; int count; };

static void herald_count_handle(uv_handle_t *handle, void *arg) {
    struct herald_count *count = (struct herald_count *)arg;
    if (handle->data == count->adapter) count->count += 1;
}

int herald_nats_open_adapter_handles(herald_nats_loop *place) {
    struct herald_count count = { atomic_load(&place->adapter), 0 };
    if (count.adapter == NULL) return 0;
    uv_walk(place->loop, herald_count_handle, &count);
    return count.count;
}

int64_t herald_nats_reconnect_delay(natsConnection *nc, int attempts, void *closure) {
    /* cnats calls this from its reconnect thread; the jitter generator is per thread (xorshift, seeded from the
       clock and the connection's address), so a fleet that lost its server at once does not return at once. */
    static _Thread_local uint64_t state = 0;
    if (state == 0) state = (uint64_t)uv_hrtime() ^ (uint64_t)(uintptr_t)nc ^ 0x9E3779B97F4A7C15ull;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const int64_t *limits = (const int64_t *)closure;
    int64_t delay = limits[0];
    for (int i = 1; i < attempts && delay < limits[1]; i++) delay *= 2;
    if (delay > limits[1]) delay = limits[1];
    return delay + (int64_t)(state % (uint64_t)(delay / 5 + 1));
}
