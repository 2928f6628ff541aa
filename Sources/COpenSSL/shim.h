#ifndef HERALD_COPENSSL_SHIM_H
#define HERALD_COPENSSL_SHIM_H

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "keys.h"

/* OpenSSL's macros (Swift imports functions, not function-like macros), and the ALPN callback, in C. */

/* TLS 1.2 at least; the highest the library knows (1.3) at most. */
static inline int herald_ssl_ctx_set_min_tls12(SSL_CTX *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
}

/* No renegotiation (a client could make the server redo handshakes), the server's cipher order, no compression. */
static inline void herald_ssl_ctx_set_server_options(SSL_CTX *ctx) {
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
}

/* Each connection's record buffers (about 17 KB for reading, as much for writing) are freed while they are empty, as
 * nginx does: an idle connection then holds none, and a request's record goes through buffers the allocator has just
 * used for another connection's, still in the cache, instead of its own buffers, gone cold while the others ran. */
static inline void herald_ssl_ctx_release_idle_buffers(SSL_CTX *ctx) {
    (void)SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
}

/* An empty memory BIO asks the caller to retry (SSL_ERROR_WANT_READ) instead of reporting end of file. */
static inline void herald_bio_retry_when_empty(BIO *bio) { (void)BIO_set_mem_eof_return(bio, -1); }

/* The bytes waiting in a memory BIO, in place; BIO_reset then drops them. */
static inline long herald_bio_contents(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }
static inline int herald_bio_reset(BIO *bio) { return (int)BIO_reset(bio); }
/* The room a memory BIO's buffer has (it keeps it while empty). */
static inline long herald_bio_capacity(BIO *bio) {
    BUF_MEM *memory = NULL;
    BIO_get_mem_ptr(bio, &memory);
    return memory != NULL ? (long)memory->max : 0;
}

/* A certificate's name on one line, as `openssl x509 -subject` prints it. */
static inline unsigned long herald_name_flags_one_line(void) { return XN_FLAG_ONELINE; }

/* The protocols a listener offers, in ALPN's wire format (each name preceded by its length), kept with each SSL. */
typedef struct {
    const unsigned char *protocols;
    unsigned int length;
} herald_alpn_offer;

/* Picks the first of the listener's protocols that the client offers; with none in common the handshake goes on
   without ALPN (the client may still speak the listener's protocol). */
static int herald_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                              unsigned int inlen, void *arg) {
    (void)arg;
    const herald_alpn_offer *offer = (const herald_alpn_offer *)SSL_get_app_data(ssl);
    if (offer == NULL || offer->length == 0) return SSL_TLSEXT_ERR_NOACK;
    unsigned char *selected = NULL;
    unsigned char length = 0;
    if (SSL_select_next_proto(&selected, &length, offer->protocols, offer->length, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = selected;
    *outlen = length;
    return SSL_TLSEXT_ERR_OK;
}

static inline void herald_ssl_ctx_use_alpn_offers(SSL_CTX *ctx) { SSL_CTX_set_alpn_select_cb(ctx, herald_alpn_select, NULL); }
static inline int herald_ssl_set_alpn_offer(SSL *ssl, herald_alpn_offer *offer) { return SSL_set_app_data(ssl, offer); }

/* SNI: the contexts a listener serves, the default first. The servername callback (set on the default context, the
   one each SSL begins with) moves a handshake to the first context whose certificate matches the name the client
   asked for, by OpenSSL's RFC 6125 matching (subjectAltName DNS names, or the subject's CN when there are none; a
   wildcard stands for one whole left-most label); no name or no match: the default. */
typedef struct {
    SSL_CTX *const *contexts;
    size_t count;
} herald_sni_contexts;

static int herald_sni_select(SSL *ssl, int *alert, void *arg) {
    (void)alert;
    const herald_sni_contexts *table = (const herald_sni_contexts *)arg;
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (table == NULL || name == NULL) return SSL_TLSEXT_ERR_OK;
    for (size_t index = 0; index < table->count; index++) {
        SSL_CTX *context = table->contexts[index];
        X509 *certificate = SSL_CTX_get0_certificate(context);
        if (certificate != NULL && X509_check_host(certificate, name, 0, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, NULL) == 1) {
            if (context != SSL_get_SSL_CTX(ssl) && SSL_set_SSL_CTX(ssl, context) == NULL) return SSL_TLSEXT_ERR_ALERT_FATAL;
            return SSL_TLSEXT_ERR_OK;
        }
    }
    ERR_clear_error();
    return SSL_TLSEXT_ERR_OK;
}

static inline void herald_ssl_ctx_use_sni(SSL_CTX *ctx, herald_sni_contexts *table) {
    SSL_CTX_set_tlsext_servername_callback(ctx, herald_sni_select);
    SSL_CTX_set_tlsext_servername_arg(ctx, table);
}

/* The DNS names of a certificate's subjectAltName, one per line (an empty string when it has none); NULL when out of
   memory. */
static inline char *herald_certificate_dns_names(X509 *certificate) {
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL) return NULL;
    GENERAL_NAMES *names = (GENERAL_NAMES *)X509_get_ext_d2i(certificate, NID_subject_alt_name, NULL, NULL);
    for (int index = 0; names != NULL && index < sk_GENERAL_NAME_num(names); index++) {
        GENERAL_NAME *name = sk_GENERAL_NAME_value(names, index);
        if (name->type == GEN_DNS) herald_bio_append_line(bio, name->d.dNSName);
    }
    GENERAL_NAMES_free(names);
    char *text = BIO_ctrl_pending(bio) > 0 ? herald_bio_string(bio) : strdup("");
    BIO_free(bio);
    return text;
}

#endif
