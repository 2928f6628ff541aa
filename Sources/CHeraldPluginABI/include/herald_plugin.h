/*
 * herald_plugin.h — the C ABI of Herald's dynamic handler plugins, version 1.
 *
 * A dynamic plugin is a shared object (ELF .so) that exports one function:
 *
 *     const herald_plugin_v1 *herald_plugin_entry_v1(void);
 *
 * Herald loads it with dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE), looks the entry point up with dlsym,
 * calls it once per load and reads the descriptor it returns, then calls init_plugin with the plugin's
 * configuration. The descriptor says which calls the plugin answers: every function pointer may be NULL (but
 * not all five handler calls, and `name` is required), and Herald registers the plugin in exactly the roles
 * whose functions are set:
 *
 *     will_present, did_receive_response  ->  notification handler (display notifications, responses)
 *     did_receive_message                  ->  message handler (data-only messages)
 *     fetch                                ->  background-fetch worker (silent, content-available messages)
 *     did_receive_token                    ->  token handler (the registration token)
 *
 * Herald refuses, with an error naming the file, a file that is missing or not a shared object, a library
 * without herald_plugin_entry_v1, an abi_version other than HERALD_PLUGIN_ABI_VERSION, a NULL descriptor or
 * name, a descriptor with no handler call, and an init_plugin that returns an error; a daemon given several
 * plugins loads all of them or none.
 *
 * Messages are JSON (UTF-8 bytes, pointer + length, NOT NUL-terminated). Every message call gets one object:
 *
 *     {"userInfo": {...},          the payload as an Apple app's userInfo: "aps", the data keys, "gcm.message_id", "from"
 *      "messageID": "...",         gcm.message_id, when the message has one
 *      "from": "...",              the sender ID, or "/topics/<name>"
 *      "topic": "...",             the topic, for topic messages
 *      "collapseKey": "...",       when set
 *      "priority": "high" | "normal",
 *      "expiration": <seconds since 1970>,   when the message expires
 *      "receivedAt": <milliseconds since 1970>,
 *      "isReplay": true | false}   true when the durable inbox delivers it again after a restart
 *
 * and did_receive_response gets the same object with two more members:
 *
 *      "action": "..."             com.apple.UNNotificationDefaultActionIdentifier (opened),
 *                                  com.apple.UNNotificationDismissActionIdentifier (dismissed) or a category action
 *      "userText": "..." | null    what the person typed, for a text-input action
 *
 * Members may be added in later releases without a new ABI version: ignore the ones you do not know.
 *
 * Rules:
 *  - Threads. Calls come from threads Herald keeps for the plugin (a few per loaded plugin), never from its
 *    event loop, and may come from several threads at once unless the descriptor's flags include
 *    HERALD_PLUGIN_SERIAL: then Herald makes at most one call at a time into that loaded plugin (its one
 *    thread). init_plugin returns before any other call for its context starts; deinit_plugin is called once,
 *    after every other call for that context has returned, and nothing is called with that context afterwards.
 *    The same library may be loaded more than once (with two configurations, say): each load has its own
 *    init_plugin call and context.
 *  - Blocking. A call may block (network, disk): the threads are the plugin's own, so a slow plugin holds up
 *    neither Herald's event loop nor other plugins. A `fetch` that runs past Herald's background-fetch
 *    deadline is counted as failed, but its thread stays busy until the call returns: honour deadlines of
 *    your own.
 *  - Memory. Input buffers (json, config_json, token) belong to Herald and are valid only during the call:
 *    copy what you keep. `name` and the descriptor itself must stay valid while the library is loaded, which
 *    is until the process exits: Herald opens plugins with RTLD_NODELETE and never unmaps them (a library
 *    with Swift code cannot be unloaded safely).
 *  - Results. Return values are plain integers: a bitmask of HERALD_PRESENT_* options, a herald_fetch_result,
 *    or a status (HERALD_PLUGIN_OK = 0; anything else is an error Herald logs and records).
 *  - Versions. abi_version must be HERALD_PLUGIN_ABI_VERSION (1); any other value is refused before any
 *    other field is read. An incompatible future ABI gets a new entry point symbol (herald_plugin_entry_v2).
 *    Compatible additions raise HERALD_PLUGIN_ABI_MINOR and come as a longer descriptor that begins with
 *    herald_plugin_v1, announced by a flag: a plugin that sets HERALD_PLUGIN_V1_1 returns a herald_plugin_v1_1
 *    (cast to herald_plugin_v1 *). A Herald that predates the flag ignores it and reads version 1.0's fields; a
 *    plugin without it is read as version 1.0. Version 1.1 adds notification categories.
 *
 * Categories (1.1). categories_json, when not NULL, is a NUL-terminated JSON object of the notification
 * categories the plugin's notifications name in aps.category (UNNotificationCategory), read once after
 * init_plugin and registered as if the host had registered them (the daemon's own config file wins for an
 * identifier both declare). The same shape as herald serve's config file section:
 *
 *     {"message": {"custom-dismiss-action": true,
 *                  "actions": [{"identifier": "reply", "title": "Reply",
 *                               "text-input": {"button-title": "Send", "placeholder": "Your answer"}},
 *                              {"identifier": "delete", "title": "Delete", "destructive": true,
 *                               "authentication-required": true},
 *                              {"identifier": "open", "title": "Open", "foreground": true}]}}
 *
 * A member Herald does not know, or a value of the wrong type, refuses the library with an error naming the
 * file and the member.
 */
#ifndef HERALD_PLUGIN_H
#define HERALD_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header's ABI. */
#define HERALD_PLUGIN_ABI_VERSION 1u
/* The compatible additions to version 1 this header has (see Versions above). */
#define HERALD_PLUGIN_ABI_MINOR 1u

/* The name of the entry point every plugin exports. */
#define HERALD_PLUGIN_ENTRY_SYMBOL "herald_plugin_entry_v1"

/* Descriptor flags. */
enum {
    /* Call into this plugin from one thread at a time (per context). Without it calls may be concurrent. */
    HERALD_PLUGIN_SERIAL = 1u << 0,
    /* The descriptor is a herald_plugin_v1_1: it has version 1.1's fields after version 1.0's. */
    HERALD_PLUGIN_V1_1 = 1u << 1
};

/* Presentation options answered by will_present: the raw values of UNNotificationPresentationOptions and of
 * Herald's PresentationOptions. 0 presents nothing; unknown bits are ignored. */
enum {
    HERALD_PRESENT_BADGE = 1u << 0,
    HERALD_PRESENT_SOUND = 1u << 1,
    HERALD_PRESENT_ALERT = 1u << 2, /* deprecated on Apple platforms in favour of LIST and BANNER */
    HERALD_PRESENT_LIST = 1u << 3,
    HERALD_PRESENT_BANNER = 1u << 4
};

/* What a background fetch found, as UIBackgroundFetchResult. Any other value counts as FAILED. */
typedef enum herald_fetch_result {
    HERALD_FETCH_NEW_DATA = 0,
    HERALD_FETCH_NO_DATA = 1,
    HERALD_FETCH_FAILED = 2
} herald_fetch_result;

/* Status of init_plugin and did_receive_message. */
enum {
    HERALD_PLUGIN_OK = 0
    /* any other value: an error (the number is logged and recorded) */
};

/* What herald_plugin_entry_v1 returns. Fields are read in this order; the layout never changes for version 1. */
typedef struct herald_plugin_v1 {
    /* HERALD_PLUGIN_ABI_VERSION. Read first: anything else and Herald refuses the library. */
    uint32_t abi_version;
    /* HERALD_PLUGIN_* flags, or 0. */
    uint32_t flags;
    /* The plugin's name for logs and analytics (plugin=<name>), UTF-8, NUL-terminated. Required. */
    const char *name;

    /* Called once per load, before anything else, with the plugin's configuration as a NUL-terminated JSON
     * object ("{}" when there is none). Under herald serve it is the plugin's section of the config file's
     * plugin-settings, keyed by the path plugins names it by; YAML's null, booleans, integers and floats become
     * JSON's, every other scalar a string, sequences arrays and mappings objects:
     *
     *     plugins: [/usr/lib/herald/libweather.so]
     *     plugin-settings:
     *       /usr/lib/herald/libweather.so: {cache: /var/lib/weather.json, interval: 600, units: [metric]}
     *
     * gives {"cache": "/var/lib/weather.json", "interval": 600, "units": ["metric"]}. Store your state in *ctx (it starts as NULL); it is passed to every
     * other call. Return HERALD_PLUGIN_OK, or an error status to refuse to load (deinit_plugin is then not called).
     * May be NULL: ctx stays NULL. */
    int32_t (*init_plugin)(const char *config_json, void **ctx);
    /* Called once when Herald drops the plugin (the instance stopped, or loading another plugin failed), after
     * every other call for ctx has returned. Free ctx here. May be NULL. */
    void (*deinit_plugin)(void *ctx);

    /* A display notification arrived: answer how to present it, as HERALD_PRESENT_* bits. Answers of several
     * handlers are combined as a union. */
    uint32_t (*will_present)(const uint8_t *json, size_t json_len, void *ctx);
    /* A person acted on a notification (json has "action" and "userText"). */
    void (*did_receive_response)(const uint8_t *json, size_t json_len, void *ctx);
    /* A data-only message arrived. Return HERALD_PLUGIN_OK, or an error status (logged and recorded as a
     * handler failure; it never stops other handlers). */
    int32_t (*did_receive_message)(const uint8_t *json, size_t json_len, void *ctx);
    /* A silent (content-available) message arrived: fetch what it announces. */
    herald_fetch_result (*fetch)(const uint8_t *json, size_t json_len, void *ctx);
    /* The registration token, at every start and whenever it changes; NULL after it was deleted, until a new
     * one is minted. */
    void (*did_receive_token)(const char *token, void *ctx);
} herald_plugin_v1;

/* Version 1.1's descriptor: version 1.0's, then the fields 1.1 added. Set HERALD_PLUGIN_V1_1 in base.flags and
 * return &descriptor.base from the entry point. */
typedef struct herald_plugin_v1_1 {
    herald_plugin_v1 base;
    /* The plugin's notification categories as JSON (see Categories above), or NULL. Must stay valid while the
     * library is loaded. */
    const char *categories_json;
} herald_plugin_v1_1;

/* Mark the entry point with this, so that it is exported even with -fvisibility=hidden:
 *     HERALD_PLUGIN_EXPORT const herald_plugin_v1 *herald_plugin_entry_v1(void) { return &my_descriptor; } */
#define HERALD_PLUGIN_EXPORT __attribute__((visibility("default")))

/* The entry point's type. It returns the plugin's descriptor; it is called once per load, from any thread. */
typedef const herald_plugin_v1 *(*herald_plugin_entry_v1_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* HERALD_PLUGIN_H */
