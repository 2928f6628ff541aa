#ifndef HERALD_CCURL_SHIM_H
#define HERALD_CCURL_SHIM_H

#include <curl/curl.h>

/* curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are variadic, which Swift cannot call: one typed
   wrapper per kind of argument. */
static inline CURLcode herald_curl_easy_setopt_long(CURL *easy, CURLoption option, long value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode herald_curl_easy_setopt_pointer(CURL *easy, CURLoption option, const void *value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode herald_curl_easy_setopt_offset(CURL *easy, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode herald_curl_easy_setopt_write_function(CURL *easy, CURLoption option, curl_write_callback value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode herald_curl_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) {
    return curl_easy_getinfo(easy, info, value);
}
static inline CURLcode herald_curl_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value) {
    return curl_easy_getinfo(easy, info, value);
}
static inline CURLMcode herald_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}
static inline CURLMcode herald_curl_multi_setopt_pointer(CURLM *multi, CURLMoption option, void *value) {
    return curl_multi_setopt(multi, option, value);
}
static inline CURLMcode herald_curl_multi_setopt_socket_function(CURLM *multi, curl_socket_callback value) {
    return curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, value);
}
static inline CURLMcode herald_curl_multi_setopt_timer_function(CURLM *multi, curl_multi_timer_callback value) {
    return curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, value);
}

/* CURLMsg holds its result in a union. */
static inline CURLcode herald_curl_message_result(const CURLMsg *message) { return message->data.result; }

#endif
