#include "client_tls.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <string>
#include <unordered_set>

namespace sluice::proxy {

std::string_view client_tls_reason(const boost::system::error_code& ec) noexcept {
    namespace net = boost::asio;
    if (ec == boost::beast::error::timeout || ec == net::error::timed_out)
        return "timeout";
    if (ec == net::ssl::error::stream_truncated || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::broken_pipe)
        return "closed";
    if (ec.category() != net::error::get_ssl_category())
        return "other";
    switch (ERR_GET_REASON(static_cast<unsigned long>(ec.value()))) {
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
        return "unknown_ca";
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
        return "bad_certificate";
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
        return "certificate_unknown";
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
        return "handshake_failure";
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
        return "protocol_version";
    case SSL_R_NO_SHARED_CIPHER:
        return "no_shared_cipher";
    default:
        return "other";
    }
}

bool client_distrusts_certificate(std::string_view reason) noexcept {
    return reason == "unknown_ca" || reason == "bad_certificate" || reason == "certificate_unknown";
}

void hint_client_tls(std::string_view flow, std::string_view source, std::string_view reason,
                     const std::filesystem::path& ca_file) {
    // The address without the port: one hint per client host, not per connection.
    std::string_view ip = source.substr(0, source.rfind(':'));
    static std::mutex mutex;
    static std::unordered_set<std::string> hinted;
    {
        std::lock_guard lock(mutex);
        if (hinted.size() >= 4096 || !hinted.emplace(ip).second)
            return;
    }
    spdlog::warn("flow {}: the client at {} refused sluice's certificate ({}): it does not trust "
                 "sluice's CA. Give it {} (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, "
                 "NODE_EXTRA_CA_CERTS, NPM_CONFIG_CAFILE, GIT_SSL_CAINFO: the lines `sluice run` "
                 "prints). Shown once per client address.",
                 flow, ip, reason, ca_file.string());
}

} // namespace sluice::proxy
