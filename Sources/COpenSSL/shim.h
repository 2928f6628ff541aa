#ifndef HERALD_COPENSSL_SHIM_H
#define HERALD_COPENSSL_SHIM_H

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

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

/* An empty memory BIO asks the caller to retry (SSL_ERROR_WANT_READ) instead of reporting end of file. */
static inline void herald_bio_retry_when_empty(BIO *bio) { (void)BIO_set_mem_eof_return(bio, -1); }

/* The bytes waiting in a memory BIO, in place; BIO_reset then drops them. */
static inline long herald_bio_contents(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }
static inline int herald_bio_reset(BIO *bio) { return (int)BIO_reset(bio); }

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

#endif
