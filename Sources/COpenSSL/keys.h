#ifndef HERALD_COPENSSL_KEYS_H
#define HERALD_COPENSSL_KEYS_H

#include <openssl/bio.h>
#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>

/* Keys, RS256 signatures and a small certificate authority, in C: a dozen OpenSSL calls each, most of them through
   macros or out-parameters Swift cannot call well. Every text returned is malloc'ed (the caller frees it with free);
   every function returns 1 on success and 0 on failure (OpenSSL's error queue says why). */

/* What a memory BIO holds, as a NUL-terminated malloc'ed string. */
static inline char *herald_bio_string(BIO *bio) {
    char *data = NULL;
    long length = BIO_get_mem_data(bio, &data);
    if (length < 0 || data == NULL) return NULL;
    char *text = (char *)malloc((size_t)length + 1);
    if (text == NULL) return NULL;
    memcpy(text, data, (size_t)length);
    text[length] = 0;
    return text;
}

static inline char *herald_private_key_pem(EVP_PKEY *key) {
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL) return NULL;
    char *text = PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) == 1 ? herald_bio_string(bio) : NULL;
    BIO_free(bio);
    return text;
}

static inline char *herald_public_key_pem(EVP_PKEY *key) {
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL) return NULL;
    char *text = PEM_write_bio_PUBKEY(bio, key) == 1 ? herald_bio_string(bio) : NULL;
    BIO_free(bio);
    return text;
}

/* A new RSA key of `bits`: its private key as PKCS#8 PEM ("BEGIN PRIVATE KEY") and its public key as PEM
   (SubjectPublicKeyInfo). */
static inline int herald_rsa_generate(unsigned int bits, char **private_pem, char **public_pem) {
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)bits);
    if (key == NULL) return 0;
    *private_pem = herald_private_key_pem(key);
    *public_pem = herald_public_key_pem(key);
    EVP_PKEY_free(key);
    if (*private_pem == NULL || *public_pem == NULL) {
        free(*private_pem);
        free(*public_pem);
        return 0;
    }
    return 1;
}

/* The public key in `pem` (SubjectPublicKeyInfo); NULL when it is not one. Free it with EVP_PKEY_free. */
static inline EVP_PKEY *herald_public_key_read(const char *pem) {
    BIO *bio = BIO_new_mem_buf(pem, -1);
    if (bio == NULL) return NULL;
    EVP_PKEY *key = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
    BIO_free(bio);
    return key;
}

/* The private key in `pem` (PKCS#8 "PRIVATE KEY", or SEC1 "EC PRIVATE KEY" for EC keys); NULL when it is not one. */
static inline EVP_PKEY *herald_private_key_read(const char *pem) {
    BIO *bio = BIO_new_mem_buf(pem, -1);
    if (bio == NULL) return NULL;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
    BIO_free(bio);
    return key;
}

/* Whether `key` is RSA (RS256 needs it). */
static inline int herald_key_is_rsa(EVP_PKEY *key) { return EVP_PKEY_is_a(key, "RSA"); }

/* RS256 (RSASSA-PKCS1-v1_5 with SHA-256): 1 when `signature` is `key`'s over `data`. */
static inline int herald_rs256_verify(EVP_PKEY *key, const unsigned char *data, size_t length, const unsigned char *signature,
                                      size_t signature_length) {
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    if (context == NULL) return 0;
    int valid = EVP_DigestVerifyInit(context, NULL, EVP_sha256(), NULL, key) == 1 &&
                EVP_DigestVerify(context, signature, signature_length, data, length) == 1;
    EVP_MD_CTX_free(context);
    return valid;
}

/* RS256 signature of `data` with the private key in `private_pem` (for tests and tools); `*signature` malloc'ed. */
static inline int herald_rs256_sign(const char *private_pem, const unsigned char *data, size_t length, unsigned char **signature,
                                    size_t *signature_length) {
    EVP_PKEY *key = herald_private_key_read(private_pem);
    if (key == NULL) return 0;
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    int ok = 0;
    size_t size = 0;
    if (context != NULL && EVP_DigestSignInit(context, NULL, EVP_sha256(), NULL, key) == 1 &&
        EVP_DigestSign(context, NULL, &size, data, length) == 1) {
        *signature = (unsigned char *)malloc(size);
        if (*signature != NULL && EVP_DigestSign(context, *signature, &size, data, length) == 1) {
            *signature_length = size;
            ok = 1;
        } else {
            free(*signature);
        }
    }
    EVP_MD_CTX_free(context);
    EVP_PKEY_free(key);
    return ok;
}

/* P-256 keys and ES256 signatures (ECDSA over P-256 with SHA-256, the signature as JWS writes it: r and s, 32 bytes
   each, big-endian): APNs provider tokens and VAPID. */

/* Whether `key` is an EC key on P-256. */
static inline int herald_key_is_p256(EVP_PKEY *key) {
    char group[32];
    size_t length = 0;
    return EVP_PKEY_is_a(key, "EC") &&
           EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &length) == 1 &&
           strcmp(group, "prime256v1") == 0;
}

/* Whether `key`'s public half is a point of its curve (OpenSSL's full public-key check). */
static inline int herald_key_public_check(EVP_PKEY *key) {
    EVP_PKEY_CTX *context = EVP_PKEY_CTX_new_from_pkey(NULL, key, NULL);
    int ok = context != NULL && EVP_PKEY_public_check(context) == 1;
    EVP_PKEY_CTX_free(context);
    return ok;
}

/* The P-256 public key whose point is `point` (X9.63 uncompressed: 0x04, x, y; 65 bytes); NULL when it is not one
   (another length or form, or not on the curve). */
static inline EVP_PKEY *herald_p256_public_key_from_point(const unsigned char *point, size_t length) {
    if (length != 65 || point[0] != 0x04) return NULL;
    OSSL_PARAM parameters[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, (char *)"prime256v1", 0),
        OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, (void *)point, length),
        OSSL_PARAM_construct_end(),
    };
    EVP_PKEY_CTX *context = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    EVP_PKEY *key = NULL;
    if (context == NULL || EVP_PKEY_fromdata_init(context) != 1 ||
        EVP_PKEY_fromdata(context, &key, EVP_PKEY_PUBLIC_KEY, parameters) != 1) {
        key = NULL;
    }
    EVP_PKEY_CTX_free(context);
    if (key != NULL && !herald_key_public_check(key)) {
        EVP_PKEY_free(key);
        key = NULL;
    }
    return key;
}

/* `key`'s public point, X9.63 uncompressed (65 bytes for P-256), into `point` (room for `capacity`); its length,
   0 on failure. */
static inline size_t herald_ec_public_point(EVP_PKEY *key, unsigned char *point, size_t capacity) {
    size_t length = 0;
    if (EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, point, capacity, &length) != 1) return 0;
    return length;
}

/* A new P-256 key. */
static inline EVP_PKEY *herald_p256_generate(void) { return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256"); }

/* ES256: 1 when `signature` (r and s, 32 bytes each) is `key`'s over `data`. */
static inline int herald_es256_verify(EVP_PKEY *key, const unsigned char *data, size_t length, const unsigned char *signature,
                                      size_t signature_length) {
    if (signature_length != 64) return 0;
    ECDSA_SIG *parts = ECDSA_SIG_new();
    BIGNUM *r = BN_bin2bn(signature, 32, NULL);
    BIGNUM *s = BN_bin2bn(signature + 32, 32, NULL);
    if (parts == NULL || r == NULL || s == NULL || ECDSA_SIG_set0(parts, r, s) != 1) {
        BN_free(r);
        BN_free(s);
        ECDSA_SIG_free(parts);
        return 0;
    }
    unsigned char *der = NULL;
    int der_length = i2d_ECDSA_SIG(parts, &der);
    ECDSA_SIG_free(parts);
    if (der_length <= 0) return 0;
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    int valid = context != NULL && EVP_DigestVerifyInit(context, NULL, EVP_sha256(), NULL, key) == 1 &&
                EVP_DigestVerify(context, der, (size_t)der_length, data, length) == 1;
    EVP_MD_CTX_free(context);
    OPENSSL_free(der);
    return valid;
}

/* ES256 signature of `data` with the P-256 private `key`: r and s, 32 bytes each, into `signature` (64 bytes). */
static inline int herald_es256_sign(EVP_PKEY *key, const unsigned char *data, size_t length, unsigned char *signature) {
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    unsigned char der[80];
    size_t der_length = sizeof der;
    int ok = context != NULL && EVP_DigestSignInit(context, NULL, EVP_sha256(), NULL, key) == 1 &&
             EVP_DigestSign(context, der, &der_length, data, length) == 1;
    EVP_MD_CTX_free(context);
    if (!ok) return 0;
    const unsigned char *cursor = der;
    ECDSA_SIG *parts = d2i_ECDSA_SIG(NULL, &cursor, (long)der_length);
    if (parts == NULL) return 0;
    const BIGNUM *r = NULL, *s = NULL;
    ECDSA_SIG_get0(parts, &r, &s);
    ok = BN_bn2binpad(r, signature, 32) == 32 && BN_bn2binpad(s, signature + 32, 32) == 32;
    ECDSA_SIG_free(parts);
    return ok;
}

/* SHA-256 of `data` into `digest` (32 bytes). */
static inline int herald_sha256(const unsigned char *data, size_t length, unsigned char *digest) {
    return EVP_Digest(data, length, digest, NULL, EVP_sha256(), NULL);
}

/* Adds the extension `name` = `value` (openssl.cnf syntax) to `certificate`, issued by `issuer`. */
static inline int herald_add_extension(X509 *certificate, X509 *issuer, int nid, const char *value) {
    X509V3_CTX context;
    X509V3_set_ctx(&context, issuer, certificate, NULL, NULL, 0);
    X509_EXTENSION *extension = X509V3_EXT_conf_nid(NULL, &context, nid, value);
    if (extension == NULL) return 0;
    int ok = X509_add_ext(certificate, extension, -1);
    X509_EXTENSION_free(extension);
    return ok;
}

static inline char *herald_certificate_pem(X509 *certificate) {
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL) return NULL;
    char *text = PEM_write_bio_X509(bio, certificate) == 1 ? herald_bio_string(bio) : NULL;
    BIO_free(bio);
    return text;
}

/* A certificate for `key` named `common_name`, valid from an hour ago for `days`, with a random serial number;
   signed by `issuer_key` as `issuer` (NULL: self-signed). Its extensions are added by the caller before signing. */
static inline X509 *herald_certificate_begin(EVP_PKEY *key, const char *common_name, int days, X509 *issuer) {
    X509 *certificate = X509_new();
    if (certificate == NULL) return NULL;
    unsigned char serial[16];
    BIGNUM *number = NULL;
    int ok = X509_set_version(certificate, X509_VERSION_3) == 1 && RAND_bytes(serial, sizeof serial) == 1;
    if (ok) {
        serial[0] &= 0x7F; /* positive */
        number = BN_bin2bn(serial, sizeof serial, NULL);
        ok = number != NULL && BN_to_ASN1_INTEGER(number, X509_get_serialNumber(certificate)) != NULL;
        BN_free(number);
    }
    X509_NAME *name = X509_get_subject_name(certificate);
    ok = ok && X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, (const unsigned char *)"Herald", -1, -1, 0) == 1 &&
         X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)common_name, -1, -1, 0) == 1 &&
         X509_set_issuer_name(certificate, issuer != NULL ? X509_get_subject_name(issuer) : name) == 1 &&
         X509_gmtime_adj(X509_getm_notBefore(certificate), -3600) != NULL &&
         X509_gmtime_adj(X509_getm_notAfter(certificate), (long)days * 86400) != NULL && X509_set_pubkey(certificate, key) == 1;
    if (!ok) {
        X509_free(certificate);
        return NULL;
    }
    return certificate;
}

/* A new certificate authority: a P-256 key and a self-signed CA certificate (basic constraints critical, CA:TRUE,
   path length 0; key usage keyCertSign and cRLSign), both PEM. With `name_constraints` ("permitted;DNS:a,
   permitted;DNS:b"), critical name constraints: the CA can vouch for those names only, whoever holds its key. */
static inline int herald_ca_create(const char *common_name, int days, const char *name_constraints, char **key_pem,
                                   char **certificate_pem) {
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (key == NULL) return 0;
    X509 *certificate = herald_certificate_begin(key, common_name, days, NULL);
    int ok = certificate != NULL &&
             herald_add_extension(certificate, certificate, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
             herald_add_extension(certificate, certificate, NID_key_usage, "critical,keyCertSign,cRLSign") &&
             herald_add_extension(certificate, certificate, NID_subject_key_identifier, "hash") &&
             (name_constraints == NULL || *name_constraints == 0 ||
              herald_add_extension(certificate, certificate, NID_name_constraints, name_constraints)) &&
             X509_sign(certificate, key, EVP_sha256()) > 0;
    *key_pem = ok ? herald_private_key_pem(key) : NULL;
    *certificate_pem = ok ? herald_certificate_pem(certificate) : NULL;
    X509_free(certificate);
    EVP_PKEY_free(key);
    if (*key_pem == NULL || *certificate_pem == NULL) {
        free(*key_pem);
        free(*certificate_pem);
        return 0;
    }
    return 1;
}

/* A server certificate for the names in `alt_names` ("DNS:a,DNS:b"), named `common_name`, with a new P-256 key,
   signed by the CA whose key and certificate are given (PEM): key usage digitalSignature, extended key usage
   serverAuth, not a CA. */
static inline int herald_ca_issue_server(const char *ca_key_pem, const char *ca_certificate_pem, const char *common_name,
                                         const char *alt_names, int days, char **key_pem, char **certificate_pem) {
    *key_pem = NULL;
    *certificate_pem = NULL;
    BIO *key_bio = BIO_new_mem_buf(ca_key_pem, -1);
    BIO *certificate_bio = BIO_new_mem_buf(ca_certificate_pem, -1);
    EVP_PKEY *ca_key = key_bio != NULL ? PEM_read_bio_PrivateKey(key_bio, NULL, NULL, NULL) : NULL;
    X509 *ca = certificate_bio != NULL ? PEM_read_bio_X509(certificate_bio, NULL, NULL, NULL) : NULL;
    BIO_free(key_bio);
    BIO_free(certificate_bio);
    EVP_PKEY *key = ca_key != NULL && ca != NULL ? EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256") : NULL;
    X509 *certificate = key != NULL ? herald_certificate_begin(key, common_name, days, ca) : NULL;
    int ok = certificate != NULL && X509_check_private_key(ca, ca_key) == 1 &&
             herald_add_extension(certificate, ca, NID_basic_constraints, "critical,CA:FALSE") &&
             herald_add_extension(certificate, ca, NID_key_usage, "critical,digitalSignature") &&
             herald_add_extension(certificate, ca, NID_ext_key_usage, "serverAuth") &&
             herald_add_extension(certificate, ca, NID_subject_alt_name, alt_names) &&
             herald_add_extension(certificate, ca, NID_subject_key_identifier, "hash") &&
             herald_add_extension(certificate, ca, NID_authority_key_identifier, "keyid:always") &&
             X509_sign(certificate, ca_key, EVP_sha256()) > 0;
    if (ok) {
        *key_pem = herald_private_key_pem(key);
        *certificate_pem = herald_certificate_pem(certificate);
    }
    X509_free(certificate);
    EVP_PKEY_free(key);
    X509_free(ca);
    EVP_PKEY_free(ca_key);
    if (*key_pem == NULL || *certificate_pem == NULL) {
        free(*key_pem);
        free(*certificate_pem);
        *key_pem = NULL;
        *certificate_pem = NULL;
        return 0;
    }
    return 1;
}

/* Reading a peer's certificate (DER): a string attribute of its subject and the strings an extension lists. */

/* Appends `value` as UTF-8 and a newline to `bio`; a value holding a newline or a NUL is skipped (it could not be
   told from two values). */
static inline void herald_bio_append_line(BIO *bio, const ASN1_STRING *value) {
    unsigned char *text = NULL;
    int length = ASN1_STRING_to_UTF8(&text, value);
    if (length > 0 && memchr(text, '\n', (size_t)length) == NULL && memchr(text, 0, (size_t)length) == NULL) {
        BIO_write(bio, text, length);
        BIO_write(bio, "\n", 1);
    }
    OPENSSL_free(text);
}

/* The values of the subject attribute `nid` (NID_userId: UID) of the certificate `der`, one per line; NULL when it
   is not a certificate. */
static inline char *herald_certificate_subject_values(const unsigned char *der, long length, int nid) {
    const unsigned char *cursor = der;
    X509 *certificate = d2i_X509(NULL, &cursor, length);
    if (certificate == NULL) return NULL;
    BIO *bio = BIO_new(BIO_s_mem());
    char *text = NULL;
    if (bio != NULL) {
        X509_NAME *subject = X509_get_subject_name(certificate);
        for (int index = X509_NAME_get_index_by_NID(subject, nid, -1); index >= 0;
             index = X509_NAME_get_index_by_NID(subject, nid, index)) {
            herald_bio_append_line(bio, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index)));
        }
        text = BIO_ctrl_pending(bio) > 0 ? herald_bio_string(bio) : strdup("");
        BIO_free(bio);
    }
    X509_free(certificate);
    return text;
}

/* The strings that the extension `oid` (dotted) of the certificate `der` holds as a DER SEQUENCE, one per line
   (members that are not strings, such as nested sequences, skipped). NULL when it is not a certificate, has no such
   extension, or its value is not a sequence. */
static inline char *herald_certificate_extension_strings(const unsigned char *der, long length, const char *oid) {
    const unsigned char *cursor = der;
    X509 *certificate = d2i_X509(NULL, &cursor, length);
    if (certificate == NULL) return NULL;
    ASN1_OBJECT *object = OBJ_txt2obj(oid, 1);
    int at = object != NULL ? X509_get_ext_by_OBJ(certificate, object, -1) : -1;
    char *text = NULL;
    if (at >= 0) {
        ASN1_OCTET_STRING *value = X509_EXTENSION_get_data(X509_get_ext(certificate, at));
        const unsigned char *bytes = ASN1_STRING_get0_data(value);
        ASN1_SEQUENCE_ANY *members = d2i_ASN1_SEQUENCE_ANY(NULL, &bytes, ASN1_STRING_length(value));
        BIO *bio = members != NULL ? BIO_new(BIO_s_mem()) : NULL;
        if (bio != NULL) {
            for (int index = 0; index < sk_ASN1_TYPE_num(members); index++) {
                ASN1_TYPE *member = sk_ASN1_TYPE_value(members, index);
                switch (member->type) {
                case V_ASN1_UTF8STRING:
                case V_ASN1_PRINTABLESTRING:
                case V_ASN1_IA5STRING:
                case V_ASN1_VISIBLESTRING:
                    herald_bio_append_line(bio, member->value.asn1_string);
                    break;
                default:
                    break;
                }
            }
            text = BIO_ctrl_pending(bio) > 0 ? herald_bio_string(bio) : strdup("");
            BIO_free(bio);
        }
        sk_ASN1_TYPE_pop_free(members, ASN1_TYPE_free);
    }
    ASN1_OBJECT_free(object);
    X509_free(certificate);
    return text;
}

#endif
