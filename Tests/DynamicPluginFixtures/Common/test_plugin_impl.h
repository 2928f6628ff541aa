// The test plugins' implementation, included by Concurrent/ and Serial/ with FIXTURE_NAME and FIXTURE_FLAGS set.
//
// Configuration (a flat JSON object, read with a few string searches: this is test code, not a JSON parser):
//   "record": "<file>"       append one line per call: "<call>\t<argument>\n" (the JSON, the token, or a number)
//   "fail_init": N           init_plugin returns N
//   "sleep_ms": N            every message call sleeps N ms (to see calls overlap, or not)
//   "present": N             will_present answers N (default HERALD_PRESENT_LIST | HERALD_PRESENT_BANNER)
//   "fetch": N               fetch answers N (default HERALD_FETCH_NEW_DATA)
//   "message_status": N      did_receive_message answers N (default HERALD_PLUGIN_OK)
//   "record_threads": 1      also record "thread\t<name of the calling thread>" after each call's line
// At deinit_plugin it records "max_concurrent\t<the most calls that ran at once>" and then "deinit".
//
// The environment variable TEST_PLUGIN_CRASH_FLAG names a file: while it exists, did_receive_message of a message
// with a "crash" key removes it and aborts the process (a handler that crashes the daemon, once). With
// TEST_PLUGIN_CRASH_ALWAYS set, such a message aborts the process every time (a poison message).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // pthread_getname_np
#endif
#include <herald_plugin.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct fixture {
    char *record;
    long sleep_ms;
    uint32_t present;
    int32_t fetch;
    int32_t message_status;
    int record_threads;
    pthread_mutex_t lock;
    atomic_int running;
    atomic_int max_running;
};

static const char *find_value(const char *config, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *found = strstr(config, pattern);
    return found ? found + strlen(pattern) : NULL;
}

static long config_int(const char *config, const char *key, long fallback) {
    const char *value = find_value(config, key);
    return value ? strtol(value, NULL, 10) : fallback;
}

static char *config_string(const char *config, const char *key) {
    const char *value = find_value(config, key);
    if (!value || *value != '"') return NULL;
    const char *end = strchr(value + 1, '"');
    return end ? strndup(value + 1, (size_t)(end - value - 1)) : NULL;
}

static void record(struct fixture *fixture, const char *call, const char *argument, size_t length) {
    if (!fixture->record) return;
    pthread_mutex_lock(&fixture->lock);
    int fd = open(fixture->record, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (fd >= 0) {
        size_t line_length = strlen(call) + 1 + length + 1;
        char *line = malloc(line_length);
        memcpy(line, call, strlen(call));
        line[strlen(call)] = '\t';
        if (length) memcpy(line + strlen(call) + 1, argument, length);
        line[line_length - 1] = '\n';
        ssize_t written = write(fd, line, line_length);
        (void)written;
        free(line);
        close(fd);
    }
    pthread_mutex_unlock(&fixture->lock);
}

// A call starts: count it, record it, then sleep for "sleep_ms" (so the record shows the call has begun).
static void enter(struct fixture *fixture, const char *call, const char *argument, size_t length) {
    int now = atomic_fetch_add(&fixture->running, 1) + 1;
    int max = atomic_load(&fixture->max_running);
    while (now > max && !atomic_compare_exchange_weak(&fixture->max_running, &max, now)) {}
    record(fixture, call, argument, length);
    if (fixture->record_threads) {
        char name[16] = "";
        pthread_getname_np(pthread_self(), name, sizeof name);
        record(fixture, "thread", name, strlen(name));
    }
    if (fixture->sleep_ms > 0) {
        struct timespec pause = {fixture->sleep_ms / 1000, (fixture->sleep_ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
}

static void leave(struct fixture *fixture) {
    atomic_fetch_sub(&fixture->running, 1);
}

static int32_t fixture_init(const char *config, void **ctx) {
    long fail = config_int(config, "fail_init", 0);
    if (fail != 0) return (int32_t)fail;
    struct fixture *fixture = calloc(1, sizeof *fixture);
    fixture->record = config_string(config, "record");
    fixture->sleep_ms = config_int(config, "sleep_ms", 0);
    fixture->present = (uint32_t)config_int(config, "present", HERALD_PRESENT_LIST | HERALD_PRESENT_BANNER);
    fixture->fetch = (int32_t)config_int(config, "fetch", HERALD_FETCH_NEW_DATA);
    fixture->message_status = (int32_t)config_int(config, "message_status", HERALD_PLUGIN_OK);
    fixture->record_threads = config_int(config, "record_threads", 0) != 0;
    pthread_mutex_init(&fixture->lock, NULL);
    record(fixture, "init", config, strlen(config));
    *ctx = fixture;
    return HERALD_PLUGIN_OK;
}

static void fixture_deinit(void *ctx) {
    struct fixture *fixture = ctx;
    char max[16];
    int length = snprintf(max, sizeof max, "%d", atomic_load(&fixture->max_running));
    record(fixture, "max_concurrent", max, (size_t)length);
    record(fixture, "deinit", "", 0);
    pthread_mutex_destroy(&fixture->lock);
    free(fixture->record);
    free(fixture);
}

static uint32_t fixture_will_present(const uint8_t *json, size_t length, void *ctx) {
    enter(ctx, "will_present", (const char *)json, length);
    leave(ctx);
    return ((struct fixture *)ctx)->present;
}

static void fixture_did_receive_response(const uint8_t *json, size_t length, void *ctx) {
    enter(ctx, "did_receive_response", (const char *)json, length);
    leave(ctx);
}

static void crash_if_asked(const uint8_t *json, size_t length) {
    if (getenv("TEST_PLUGIN_CRASH_ALWAYS") && memmem(json, length, "\"crash\":", 8)) abort();
    const char *flag = getenv("TEST_PLUGIN_CRASH_FLAG");
    if (!flag || !memmem(json, length, "\"crash\":", 8)) return;
    if (unlink(flag) == 0) abort();
}

static int32_t fixture_did_receive_message(const uint8_t *json, size_t length, void *ctx) {
    enter(ctx, "did_receive_message", (const char *)json, length);
    crash_if_asked(json, length);
    leave(ctx);
    return ((struct fixture *)ctx)->message_status;
}

static herald_fetch_result fixture_fetch(const uint8_t *json, size_t length, void *ctx) {
    enter(ctx, "fetch", (const char *)json, length);
    leave(ctx);
    return (herald_fetch_result)((struct fixture *)ctx)->fetch;
}

static void fixture_did_receive_token(const char *token, void *ctx) {
    enter(ctx, "did_receive_token", token ? token : "(null)", strlen(token ? token : "(null)"));
    leave(ctx);
}

#define FIXTURE_BASE_DESCRIPTOR(flag_bits)                     \
    {                                                          \
        .abi_version = HERALD_PLUGIN_ABI_VERSION,              \
        .flags = (flag_bits),                                  \
        .name = FIXTURE_NAME,                                  \
        .init_plugin = fixture_init,                           \
        .deinit_plugin = fixture_deinit,                       \
        .will_present = fixture_will_present,                  \
        .did_receive_response = fixture_did_receive_response,  \
        .did_receive_message = fixture_did_receive_message,    \
        .fetch = fixture_fetch,                                \
        .did_receive_token = fixture_did_receive_token,        \
    }

#ifdef FIXTURE_CATEGORIES
// ABI 1.1: the longer descriptor, announced by HERALD_PLUGIN_V1_1, with the plugin's categories.
static const herald_plugin_v1_1 fixture_descriptor = {
    .base = FIXTURE_BASE_DESCRIPTOR(FIXTURE_FLAGS | HERALD_PLUGIN_V1_1),
    .categories_json = FIXTURE_CATEGORIES,
};

HERALD_PLUGIN_EXPORT const herald_plugin_v1 *herald_plugin_entry_v1(void) {
    return &fixture_descriptor.base;
}
#else
// ABI 1.0: the descriptor as version 1.0 defined it.
static const herald_plugin_v1 fixture_descriptor = FIXTURE_BASE_DESCRIPTOR(FIXTURE_FLAGS);

HERALD_PLUGIN_EXPORT const herald_plugin_v1 *herald_plugin_entry_v1(void) {
    return &fixture_descriptor;
}
#endif
