#ifndef HERALD_CCURL_H
#define HERALD_CCURL_H

/* libcurl (Debian's libcurl4-openssl-dev), the outgoing HTTP client's transfers. herald is not linked against it:
   libcurl is loaded with dlopen the first time one of its functions is called (loader.c), so a daemon that sends
   nothing over HTTP (no token webhook, no image to download) never maps libcurl nor what it brings (Kerberos, LDAP,
   GnuTLS for LDAP, libssh2, ...: 3 MB of resident memory). */
#include <curl/curl.h>

/* Loads libcurl now if need be; answers 1 when it is loaded. herald_curl_load_failure is NULL then, else why it
   could not be. When libcurl cannot be loaded, curl_global_init answers CURLE_FAILED_INIT, the functions answering
   a pointer NULL, the texts "(libcurl not loaded)", and the others an error code or nothing. */
int herald_curl_load(void);
const char *herald_curl_load_failure(void);

/* curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are variadic, which Swift cannot call: one typed
   wrapper per kind of argument. */
CURLcode herald_curl_easy_setopt_long(CURL *easy, CURLoption option, long value);
CURLcode herald_curl_easy_setopt_pointer(CURL *easy, CURLoption option, const void *value);
CURLcode herald_curl_easy_setopt_offset(CURL *easy, CURLoption option, curl_off_t value);
CURLcode herald_curl_easy_setopt_write_function(CURL *easy, CURLoption option, curl_write_callback value);
CURLcode herald_curl_easy_getinfo_long(CURL *easy, CURLINFO info, long *value);
CURLcode herald_curl_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value);
CURLMcode herald_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value);
CURLMcode herald_curl_multi_setopt_pointer(CURLM *multi, CURLMoption option, void *value);
CURLMcode herald_curl_multi_setopt_socket_function(CURLM *multi, curl_socket_callback value);
CURLMcode herald_curl_multi_setopt_timer_function(CURLM *multi, curl_multi_timer_callback value);

/* CURLMsg holds its result in a union. */
static inline CURLcode herald_curl_message_result(const CURLMsg *message) { return message->data.result; }

#endif
