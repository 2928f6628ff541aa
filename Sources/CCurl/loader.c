/* The libcurl functions Herald calls, each forwarding to libcurl, which is loaded with dlopen the first time one of
   them is called (see CCurl.h). The prototypes are curl.h's: __typeof__ makes the compiler check every pointer
   against the header. The variadic three are called through their own variadic type by the typed wrappers. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include "CCurl.h"

#define HERALD_CURL_FUNCTIONS(X) \
    X(curl_global_init) \
    X(curl_easy_init) \
    X(curl_easy_cleanup) \
    X(curl_easy_setopt) \
    X(curl_easy_getinfo) \
    X(curl_easy_strerror) \
    X(curl_free) \
    X(curl_multi_init) \
    X(curl_multi_cleanup) \
    X(curl_multi_setopt) \
    X(curl_multi_add_handle) \
    X(curl_multi_remove_handle) \
    X(curl_multi_info_read) \
    X(curl_multi_socket_action) \
    X(curl_multi_strerror) \
    X(curl_slist_append) \
    X(curl_slist_free_all) \
    X(curl_url) \
    X(curl_url_cleanup) \
    X(curl_url_get) \
    X(curl_url_set) \
    X(curl_url_strerror)

#define DECLARE(name) static __typeof__(&name) loaded_##name;
HERALD_CURL_FUNCTIONS(DECLARE)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char failure[512];

static void load(void) {
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(failure, sizeof failure, "the HTTP client needs libcurl (Debian's libcurl4): %s", dlerror());
        return;
    }
#define RESOLVE(name) \
    loaded_##name = (__typeof__(&name))dlsym(library, #name); \
    if (loaded_##name == NULL) { \
        snprintf(failure, sizeof failure, "libcurl.so.4 has no %s: a libcurl older than 7.88?", #name); \
        return; \
    }
    HERALD_CURL_FUNCTIONS(RESOLVE)
    loaded = 1;
}

int herald_curl_load(void) {
    pthread_once(&once, load);
    return loaded;
}

const char *herald_curl_load_failure(void) { return herald_curl_load() ? NULL : failure; }

#define NOT_LOADED "(libcurl not loaded)"

CURLcode curl_global_init(long flags) { return herald_curl_load() ? loaded_curl_global_init(flags) : CURLE_FAILED_INIT; }
CURL *curl_easy_init(void) { return herald_curl_load() ? loaded_curl_easy_init() : NULL; }
void curl_easy_cleanup(CURL *easy) { if (herald_curl_load()) loaded_curl_easy_cleanup(easy); }
const char *curl_easy_strerror(CURLcode code) { return herald_curl_load() ? loaded_curl_easy_strerror(code) : NOT_LOADED; }
void curl_free(void *pointer) { if (herald_curl_load()) loaded_curl_free(pointer); }
CURLM *curl_multi_init(void) { return herald_curl_load() ? loaded_curl_multi_init() : NULL; }
CURLMcode curl_multi_cleanup(CURLM *multi) { return herald_curl_load() ? loaded_curl_multi_cleanup(multi) : CURLM_INTERNAL_ERROR; }
CURLMcode curl_multi_add_handle(CURLM *multi, CURL *easy) {
    return herald_curl_load() ? loaded_curl_multi_add_handle(multi, easy) : CURLM_INTERNAL_ERROR;
}
CURLMcode curl_multi_remove_handle(CURLM *multi, CURL *easy) {
    return herald_curl_load() ? loaded_curl_multi_remove_handle(multi, easy) : CURLM_INTERNAL_ERROR;
}
CURLMsg *curl_multi_info_read(CURLM *multi, int *queued) {
    return herald_curl_load() ? loaded_curl_multi_info_read(multi, queued) : NULL;
}
CURLMcode curl_multi_socket_action(CURLM *multi, curl_socket_t socket, int mask, int *running) {
    return herald_curl_load() ? loaded_curl_multi_socket_action(multi, socket, mask, running) : CURLM_INTERNAL_ERROR;
}
const char *curl_multi_strerror(CURLMcode code) { return herald_curl_load() ? loaded_curl_multi_strerror(code) : NOT_LOADED; }
struct curl_slist *curl_slist_append(struct curl_slist *list, const char *text) {
    return herald_curl_load() ? loaded_curl_slist_append(list, text) : NULL;
}
void curl_slist_free_all(struct curl_slist *list) { if (herald_curl_load()) loaded_curl_slist_free_all(list); }
CURLU *curl_url(void) { return herald_curl_load() ? loaded_curl_url() : NULL; }
void curl_url_cleanup(CURLU *url) { if (herald_curl_load()) loaded_curl_url_cleanup(url); }
CURLUcode curl_url_get(CURLU *url, CURLUPart part, char **text, unsigned int flags) {
    return herald_curl_load() ? loaded_curl_url_get(url, part, text, flags) : CURLUE_OUT_OF_MEMORY;
}
CURLUcode curl_url_set(CURLU *url, CURLUPart part, const char *text, unsigned int flags) {
    return herald_curl_load() ? loaded_curl_url_set(url, part, text, flags) : CURLUE_OUT_OF_MEMORY;
}
const char *curl_url_strerror(CURLUcode code) { return herald_curl_load() ? loaded_curl_url_strerror(code) : NOT_LOADED; }

CURLcode herald_curl_easy_setopt_long(CURL *easy, CURLoption option, long value) {
    return herald_curl_load() ? loaded_curl_easy_setopt(easy, option, value) : CURLE_FAILED_INIT;
}
CURLcode herald_curl_easy_setopt_pointer(CURL *easy, CURLoption option, const void *value) {
    return herald_curl_load() ? loaded_curl_easy_setopt(easy, option, value) : CURLE_FAILED_INIT;
}
CURLcode herald_curl_easy_setopt_offset(CURL *easy, CURLoption option, curl_off_t value) {
    return herald_curl_load() ? loaded_curl_easy_setopt(easy, option, value) : CURLE_FAILED_INIT;
}
CURLcode herald_curl_easy_setopt_write_function(CURL *easy, CURLoption option, curl_write_callback value) {
    return herald_curl_load() ? loaded_curl_easy_setopt(easy, option, value) : CURLE_FAILED_INIT;
}
CURLcode herald_curl_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) {
    return herald_curl_load() ? loaded_curl_easy_getinfo(easy, info, value) : CURLE_FAILED_INIT;
}
CURLcode herald_curl_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value) {
    return herald_curl_load() ? loaded_curl_easy_getinfo(easy, info, value) : CURLE_FAILED_INIT;
}
CURLMcode herald_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return herald_curl_load() ? loaded_curl_multi_setopt(multi, option, value) : CURLM_INTERNAL_ERROR;
}
CURLMcode herald_curl_multi_setopt_pointer(CURLM *multi, CURLMoption option, void *value) {
    return herald_curl_load() ? loaded_curl_multi_setopt(multi, option, value) : CURLM_INTERNAL_ERROR;
}
CURLMcode herald_curl_multi_setopt_socket_function(CURLM *multi, curl_socket_callback value) {
    return herald_curl_load() ? loaded_curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, value) : CURLM_INTERNAL_ERROR;
}
CURLMcode herald_curl_multi_setopt_timer_function(CURLM *multi, curl_multi_timer_callback value) {
    return herald_curl_load() ? loaded_curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, value) : CURLM_INTERNAL_ERROR;
}
