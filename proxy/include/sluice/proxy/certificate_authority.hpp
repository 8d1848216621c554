// The local CA used for TLS interception, and leaf certificates minted from it.
// Formats: X.509 v3 (RFC 5280), SubjectAltName dNSName / iPAddress (RFC 5280 4.2.1.6),
// keys ECDSA P-256 (RFC 5480), PEM files (RFC 7468).
#pragma once

#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sluice::proxy {

/// Creates a new self-signed CA (ECDSA P-256, 10 years, basicConstraints CA:TRUE,
/// keyUsage keyCertSign|cRLSign) at `cert` and `key`. The key file is created with mode
/// 0600 and the parent directories with 0700. Fails (no overwrite) if either exists.
/// Returns an error message on failure; never throws.
std::expected<void, std::string> create_ca(const std::filesystem::path& cert,
                                           const std::filesystem::path& key);

/// Makes sure a CA exists at `cert`/`key`: creates one (as `create_ca`) when both are
/// missing, does nothing when both exist, and fails when only one of them exists (a lone
/// certificate or key is never silently replaced). Returns `cert`. Used by `sluice run` on
/// first start and by `sluice ca init`. Never throws.
std::expected<std::filesystem::path, std::string> ensure_ca(const std::filesystem::path& cert,
                                                            const std::filesystem::path& key);

/// A loaded CA that mints and caches leaf certificates per host.
/// Thread safety: all member functions may be called from any thread (internal mutex).
class certificate_authority {
public:
    /// Loads the CA certificate and private key (PEM). Refuses a key file readable by
    /// group or others. Error message names the file.
    static std::expected<std::shared_ptr<certificate_authority>, std::string>
    load(const std::filesystem::path& cert, const std::filesystem::path& key,
         std::size_t cache_capacity = 4096);

    ~certificate_authority();

    /// A server-side TLS context presenting a leaf for `host` (an IP literal gets an
    /// iPAddress SAN, anything else a dNSName SAN), valid from 1 hour ago for 30 days,
    /// signed by this CA, chain = leaf + CA. ALPN offers only http/1.1. Cached per host
    /// (LRU, `cache_capacity` entries). nullptr on failure.
    /// `host` may carry IPv6 brackets ("[::1]"); it is normalised (lower case, brackets
    /// and a trailing dot removed) and the cache is keyed on the normalised form. Hosts
    /// with bytes outside printable ASCII, or longer than 253 bytes, are refused.
    /// All leaves of one `certificate_authority` share one ECDSA P-256 key generated at
    /// load time, so a cache miss costs one signature plus building the context (about
    /// 1 ms on the 2-core dev VM, mostly OpenSSL 3 key encoding and SSL_CTX_new; a hit
    /// about 3 us); the key never leaves memory except through `mint_leaf_pem`.
    std::shared_ptr<boost::asio::ssl::context> server_context(std::string_view host);

    /// Mints a fresh leaf (uncached) as PEM: certificate then private key. For tests/tools.
    std::expected<std::string, std::string> mint_leaf_pem(std::string_view host);

    /// Number of leaves minted so far (cache misses). For tests and metrics.
    std::size_t minted() const;

    const std::filesystem::path& cert_path() const noexcept { return cert_path_; }

private:
    certificate_authority() = default;
    struct impl;
    std::unique_ptr<impl> impl_;
    std::filesystem::path cert_path_;
};

} // namespace sluice::proxy
