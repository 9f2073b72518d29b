/* The TLS settings of an attach connection: see attach_tls.h. */
#include "kube/attach_tls.h"

#include "kube/config.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

static int ssl_fail(struct telo_err *err, const char *what)
{
    char detail[160] = "";
    unsigned long e = ERR_get_error();
    if (e != 0)
        ERR_error_string_n(e, detail, sizeof(detail));
    ERR_clear_error();
    return telo_err_set(err, TELO_EIO, "attach TLS: %s%s%s", what, detail[0] ? ": " : "", detail);
}

static int load_ca_pem(SSL_CTX *ctx, const char *pem, size_t len, struct telo_err *err)
{
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    STACK_OF(X509_INFO) *infos = bio ? PEM_X509_INFO_read_bio(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (infos == NULL)
        return ssl_fail(err, "certificate-authority-data holds no PEM certificate");
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    int added = 0;
    for (int i = 0; i < sk_X509_INFO_num(infos); i++) {
        X509_INFO *info = sk_X509_INFO_value(infos, i);
        if (info->x509 != NULL && X509_STORE_add_cert(store, info->x509) == 1)
            added++;
    }
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    if (added == 0)
        return ssl_fail(err, "certificate-authority-data holds no PEM certificate");
    return 0;
}

static int load_client_pem(SSL_CTX *ctx, const char *cert_pem, const char *key_pem,
                           struct telo_err *err)
{
    BIO *bio = BIO_new_mem_buf(cert_pem, -1);
    X509 *cert = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    int ok = cert != NULL && SSL_CTX_use_certificate(ctx, cert) == 1;
    X509_free(cert);
    /* Intermediates after the leaf go into the chain the handshake presents. */
    while (ok) {
        X509 *extra = PEM_read_bio_X509(bio, NULL, NULL, NULL);
        if (extra == NULL)
            break;
        if (SSL_CTX_add0_chain_cert(ctx, extra) != 1) {
            X509_free(extra);
            ok = 0;
        }
    }
    ERR_clear_error(); /* the end of the PEM stream is reported as an error */
    BIO_free(bio);
    if (!ok)
        return ssl_fail(err, "client-certificate-data is not a usable PEM certificate");
    bio = BIO_new_mem_buf(key_pem, -1);
    EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    ok = key != NULL && SSL_CTX_use_PrivateKey(ctx, key) == 1;
    EVP_PKEY_free(key);
    if (!ok || SSL_CTX_check_private_key(ctx) != 1)
        return ssl_fail(err, "client-key-data is not the PEM key of the client certificate");
    return 0;
}

SSL_CTX *kube_attach_ssl_ctx(const struct kube_attach_opts *opts, const char *host,
                             struct telo_err *err)
{
    struct kube_config *cfg = opts->cfg;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        ssl_fail(err, "cannot create a TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    int insecure = opts->insecure_skip_tls_verify || (cfg && cfg->insecure_skip_tls_verify);
    if (insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        int rc = 0;
        if (opts->ca_file != NULL) {
            if (SSL_CTX_load_verify_locations(ctx, opts->ca_file, NULL) != 1)
                rc = ssl_fail(err, opts->ca_file);
        } else if (cfg && cfg->ca_pem != NULL)
            rc = load_ca_pem(ctx, cfg->ca_pem, cfg->ca_pem_len, err);
        else if (cfg && cfg->ca_file != NULL &&
                 SSL_CTX_load_verify_locations(ctx, cfg->ca_file, NULL) != 1)
            rc = ssl_fail(err, cfg->ca_file);
        else if (!(cfg && (cfg->ca_pem || cfg->ca_file)) &&
                 SSL_CTX_set_default_verify_paths(ctx) != 1)
            rc = ssl_fail(err, "cannot load the system's certificate authorities");
        const char *name = cfg && cfg->tls_server_name ? cfg->tls_server_name : host;
        X509_VERIFY_PARAM *param = SSL_CTX_get0_param(ctx);
        if (rc == 0 && X509_VERIFY_PARAM_set1_ip_asc(param, name) != 1) {
            ERR_clear_error();
            X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            if (X509_VERIFY_PARAM_set1_host(param, name, 0) != 1)
                rc = ssl_fail(err, "bad server name");
        }
        if (rc != 0) {
            SSL_CTX_free(ctx);
            return NULL;
        }
    }
    if (cfg != NULL) {
        const char *cert_pem = NULL, *key_pem = NULL;
        int rc = kube_config_client_cert(cfg, &cert_pem, &key_pem, err);
        if (rc == 0 && cert_pem != NULL && key_pem != NULL)
            rc = load_client_pem(ctx, cert_pem, key_pem, err);
        else if (rc == 0 && cfg->client_cert_file != NULL && cfg->client_key_file != NULL) {
            if (SSL_CTX_use_certificate_chain_file(ctx, cfg->client_cert_file) != 1)
                rc = ssl_fail(err, cfg->client_cert_file);
            else if (SSL_CTX_use_PrivateKey_file(ctx, cfg->client_key_file, SSL_FILETYPE_PEM) != 1)
                rc = ssl_fail(err, cfg->client_key_file);
        }
        if (rc != 0) {
            SSL_CTX_free(ctx);
            return NULL;
        }
    }
    return ctx;
}
