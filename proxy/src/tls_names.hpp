// Internal to proxy/: a host name as it goes into a certificate (a leaf's SAN) or into a
// TLS handshake (SNI, host-name verification), shared by the certificate authority and
// the upstream TLS contexts. Thread safety: pure function.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sluice::proxy {

struct normalized_host {
    std::string text;   ///< lower case, no brackets, no trailing dot
    bool is_ip = false; ///< an IPv4 or IPv6 literal (inet_pton)
};

/// Lower case, IPv6 brackets and a trailing dot removed; nullopt for what cannot be an
/// HTTP authority host (empty, over 253 bytes (RFC 1035 section 2.3.4), a control,
/// space or non-ASCII byte, brackets around something that is not IPv6), so that
/// nothing odd reaches a certificate field or the SNI extension.
std::optional<normalized_host> normalize_tls_host(std::string_view host);

} // namespace sluice::proxy
