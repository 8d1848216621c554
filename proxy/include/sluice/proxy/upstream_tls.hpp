// Client-side TLS for upstream connections (the origin leg of every intercepted or
// absolute-form https:// exchange, and the supervise webhook): TLS 1.2+ (RFC 8446,
// RFC 5246), peer verification against the configured trust store, RFC 6125 host-name
// verification, SNI (RFC 6066 section 3) and session resumption per destination.
//
// Thread safety: a context is built once per configuration generation (start-up, reload)
// and then shared by every io thread; prepare_upstream_ssl() may be called concurrently
// on different SSL objects of one context (its session cache has a mutex).
#pragma once

#include <boost/asio/ssl/context.hpp>

#include <cstdint>
#include <filesystem>
#include <string_view>

namespace sluice::proxy {

/// A client-side TLS context for upstream connections: verify peer against `ca_file`
/// (or the system default store when empty), TLS 1.2+, ALPN http/1.1 only. The caller
/// sets SNI and host-name verification per connection (see `prepare_upstream_ssl`).
/// Throws boost::system::system_error if `ca_file` cannot be loaded (start-up only).
boost::asio::ssl::context make_upstream_context(const std::filesystem::path& ca_file);

/// Sets SNI (not for IP literals) and RFC 6125 host-name / IP verification on `ssl`.
/// Also offers the TLS session last established to that host (and `port`, when not 0)
/// with the same context (resumption) and records the new one it gets; sessions are
/// kept per context (thread-safe, bounded to 4096 destinations). Returns false on
/// failure.
bool prepare_upstream_ssl(void* ssl /* SSL* */, std::string_view host, std::uint16_t port = 0);

} // namespace sluice::proxy
