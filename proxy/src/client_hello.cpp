// The server name of a ClientHello, read by OpenSSL (client_hello.hpp).
#include "client_hello.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <stdexcept>

namespace sluice::proxy {

namespace {

struct probe_result {
    bool called = false;
    std::string name;
};

// Called by OpenSSL once it has read the whole ClientHello and its extensions, with or
// without a server_name. The handshake goes no further: the probe only reads.
int on_servername(SSL* ssl, int* alert, void* /*arg*/) {
    auto* r = static_cast<probe_result*>(SSL_get_app_data(ssl));
    r->called = true;
    if (const char* n = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name))
        r->name = n;
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

// Every protocol version and cipher OpenSSL knows, so that a ClientHello of any client
// a server might still accept gets as far as its extensions.
SSL_CTX* probe_context() {
    static SSL_CTX* const ctx = [] {
        SSL_CTX* c = SSL_CTX_new(TLS_server_method());
        if (c == nullptr)
            throw std::runtime_error("client_hello_probe: SSL_CTX_new failed");
        SSL_CTX_set_security_level(c, 0);
        SSL_CTX_set_min_proto_version(c, 0);
        SSL_CTX_set_max_proto_version(c, 0);
        SSL_CTX_set_tlsext_servername_callback(c, on_servername);
        return c;
    }();
    return ctx;
}

} // namespace

struct client_hello_probe::impl {
    SSL* ssl = nullptr;
    BIO* in = nullptr;  // owned by ssl
    BIO* out = nullptr; // owned by ssl
    probe_result r;

    impl() {
        ssl = SSL_new(probe_context());
        in = BIO_new(BIO_s_mem());
        out = BIO_new(BIO_s_mem());
        if (ssl == nullptr || in == nullptr || out == nullptr) {
            BIO_free(in);
            BIO_free(out);
            SSL_free(ssl);
            throw std::runtime_error("client_hello_probe: out of memory");
        }
        SSL_set_bio(ssl, in, out);
        SSL_set_accept_state(ssl);
        SSL_set_app_data(ssl, &r);
    }
    ~impl() { SSL_free(ssl); }
    impl(const impl&) = delete;
    impl& operator=(const impl&) = delete;
};

client_hello_probe::client_hello_probe()
    : impl_(std::make_unique<impl>()) {}

client_hello_probe::~client_hello_probe() = default;

client_hello_probe::state client_hello_probe::feed(std::string_view bytes) {
    if (state_ != state::need_more || bytes.empty())
        return state_;
    // RFC 8446 section 5.1: a TLS connection opens with a handshake record (type 22).
    // Another record type first (change_cipher_spec 20, alert 21, application_data 23,
    // heartbeat 24) is TLS that does not start with a ClientHello: not passed as "not TLS"
    // in case a lenient server reads on to a hello behind it.
    if (fed_ == 0) {
        const auto type = static_cast<unsigned char>(bytes.front());
        if (type >= 20 && type <= 24 && type != 22)
            return state_ = state::malformed;
        if (type != 22)
            return state_ = state::not_tls;
    }
    fed_ += bytes.size();
    auto& i = *impl_;
    ERR_clear_error();
    if (BIO_write(i.in, bytes.data(), static_cast<int>(bytes.size())) !=
        static_cast<int>(bytes.size())) {
        ERR_clear_error();
        return state_ = state::malformed;
    }
    const int rc = SSL_do_handshake(i.ssl);
    const int err = SSL_get_error(i.ssl, rc);
    ERR_clear_error();
    if (!i.r.called && err == SSL_ERROR_WANT_READ && rc < 0 && fed_ <= max_hello)
        return state_;
    char buf[64];
    for (int n; (n = BIO_read(i.out, buf, sizeof buf)) > 0;)
        alert_.append(buf, static_cast<std::size_t>(n));
    if (!i.r.called)
        return state_ = state::malformed;
    name_ = std::move(i.r.name);
    return state_ = name_.empty() ? state::unnamed : state::named;
}

} // namespace sluice::proxy
