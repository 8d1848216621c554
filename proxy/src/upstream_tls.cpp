// Client-side TLS for upstream connections (upstream_tls.hpp): the context per
// configuration generation, and per connection SNI, host-name verification and session
// resumption.
#include "sluice/proxy/upstream_tls.hpp"

#include "tls_names.hpp"

#include <boost/asio/ssl/error.hpp>
#include <boost/system/system_error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <mutex>
#include <string>
#include <system_error>
#include <unordered_map>

namespace sluice::proxy {

namespace ssl = boost::asio::ssl;
namespace fs = std::filesystem;

namespace {

// Upstream TLS sessions by "host:port" (or host name alone when the caller gives no
// port: the same SNI and verified name, RFC 8446 section 4.6.1), one cache per upstream context (so
// per config generation: a reload with another trust store starts empty). A session is only ever
// offered to the host and port it was verified for, so resumption skips the full
// handshake and chain verification without widening what is trusted (a server that
// does not know the ticket answers with a full handshake).
class upstream_sessions {
public:
    ~upstream_sessions() {
        for (auto& [key, s] : by_key_)
            SSL_SESSION_free(s);
    }
    // Returns a new reference (caller frees) or null.
    SSL_SESSION* get(const std::string& key) {
        std::lock_guard lock(mu_);
        auto it = by_key_.find(key);
        if (it == by_key_.end())
            return nullptr;
        SSL_SESSION_up_ref(it->second);
        return it->second;
    }
    // Takes the reference.
    void put(const std::string& key, SSL_SESSION* s) {
        std::lock_guard lock(mu_);
        auto it = by_key_.find(key);
        if (it != by_key_.end()) {
            SSL_SESSION_free(it->second);
            it->second = s;
            return;
        }
        if (by_key_.size() >= capacity) { // bounded: drop one entry, any
            SSL_SESSION_free(by_key_.begin()->second);
            by_key_.erase(by_key_.begin());
        }
        by_key_.emplace(key, s);
    }

private:
    static constexpr std::size_t capacity = 4096;
    std::mutex mu_;
    std::unordered_map<std::string, SSL_SESSION*> by_key_;
};

void free_sessions(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
    delete static_cast<upstream_sessions*>(ptr);
}
void free_key(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
    delete static_cast<std::string*>(ptr);
}

int sessions_index() {
    static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, &free_sessions);
    return index;
}
int session_key_index() {
    static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, &free_key);
    return index;
}

// OpenSSL hands over each new session (TLS 1.3 tickets arrive after the handshake);
// returning 1 keeps the reference.
int store_upstream_session(SSL* ssl, SSL_SESSION* session) {
    auto* key = static_cast<std::string*>(SSL_get_ex_data(ssl, session_key_index()));
    auto* cache = static_cast<upstream_sessions*>(
        SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), sessions_index()));
    if (key == nullptr || cache == nullptr || !SSL_SESSION_is_resumable(session))
        return 0;
    cache->put(*key, session);
    return 1;
}

} // namespace

ssl::context make_upstream_context(const fs::path& ca_file) {
    ssl::context ctx(ssl::context::tls_client);
    SSL_CTX* c = ctx.native_handle();
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    // Idle connections give their read/write buffers back (RSS per idle connection).
    SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS);
    // Sessions are kept by host:port in upstream_sessions, not in OpenSSL's internal
    // store (which a client would never look up by itself).
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_set_ex_data(c, sessions_index(), new upstream_sessions());
    SSL_CTX_sess_set_new_cb(c, &store_upstream_session);
    if (SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1)
        throw boost::system::system_error(
            boost::system::error_code(static_cast<int>(ERR_get_error()),
                                      boost::asio::error::get_ssl_category()),
            "SSL_CTX_set_min_proto_version");
    ctx.set_verify_mode(ssl::verify_peer);
    if (ca_file.empty()) {
        ctx.set_default_verify_paths();
    } else {
        std::error_code ec;
        if (fs::is_directory(ca_file, ec))
            ctx.add_verify_path(ca_file.string()); // c_rehash-style directory
        else
            ctx.load_verify_file(ca_file.string());
    }
    static constexpr unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    if (SSL_CTX_set_alpn_protos(c, alpn, sizeof alpn) != 0) // 0 is success here
        throw boost::system::system_error(
            boost::system::error_code(static_cast<int>(ERR_get_error()),
                                      boost::asio::error::get_ssl_category()),
            "SSL_CTX_set_alpn_protos");
    return ctx;
}

bool prepare_upstream_ssl(void* ssl_handle, std::string_view host, std::uint16_t port) {
    auto* s = static_cast<SSL*>(ssl_handle);
    auto h = normalize_tls_host(host);
    if (!s || !h)
        return false;
    {
        auto* cache = static_cast<upstream_sessions*>(
            SSL_CTX_get_ex_data(SSL_get_SSL_CTX(s), sessions_index()));
        if (cache != nullptr) {
            auto* key = new std::string(port != 0 ? h->text + ":" + std::to_string(port) : h->text);
            if (SSL_set_ex_data(s, session_key_index(), key) != 1) {
                delete key;
            } else if (SSL_SESSION* prior = cache->get(*key)) {
                SSL_set_session(s, prior); // takes its own reference
                SSL_SESSION_free(prior);
            }
        }
    }
    if (h->is_ip) {
        // RFC 6066 3: SNI carries host names only, never IP literals.
        return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), h->text.c_str()) == 1;
    }
    SSL_set_hostflags(s, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    return SSL_set_tlsext_host_name(s, h->text.c_str()) == 1 &&
           SSL_set1_host(s, h->text.c_str()) == 1;
}

} // namespace sluice::proxy
