// Who is calling: resolves a flow to exactly one identity from the evidence the proxy
// has (CONTRACT.md `identities`, `listeners[].identity`).
//
// Resolution order (first level that applies decides; lower levels are not consulted):
//   1. listener binding  — the listener's fixed identity; the client cannot change it.
//   2. mTLS client certificate — identities whose client_cert matches the certificate
//      (URI SAN exact, e.g. a SPIFFE id, or subject CN exact).
//   3. Proxy-Authorization — Basic (RFC 7617: user name must match, password hashed)
//      or Bearer (RFC 6750 token syntax); SHA-256 of the secret compared in constant time.
//   4. source address — identities whose source_cidrs contain the client address.
// At a level, two matching identities are ambiguous and one presented credential that
// matches nobody is a failure: both are unresolved (never fall through to a weaker level,
// so a wrong token cannot be "rescued" by the source address).
// Thread safety: pure functions over immutable data.
#pragma once

#include "sluice/dlp/policy.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dlp {

/// Facts about the peer's client certificate (already verified by the TLS layer).
struct client_certificate {
    std::vector<std::string> uri_sans;
    std::string subject_cn;
};

struct caller_evidence {
    std::optional<std::string> listener_identity;
    std::optional<ip_address> source;
    std::optional<std::string> proxy_authorization; ///< raw header value, if present
    std::optional<client_certificate> certificate;
};

struct caller_resolution {
    std::optional<std::string> identity; ///< resolved name, or nullopt
    /// Why it is unresolved: "" (resolved), "no_identity", "ambiguous_identity",
    /// "bad_credentials", "malformed_credentials". Never contains credential bytes.
    std::string reason;
    /// True when the answer should be 407 + Proxy-Authenticate: some identity can be
    /// reached by Proxy-Authorization, so asking for credentials can help.
    bool challenge = false;
    /// The level that decided: "listener", "client_cert", "proxy_auth", "source", "".
    std::string via;
};

caller_resolution resolve_caller(const std::vector<identity>& identities,
                                 const caller_evidence& evidence);

/// Lower-case hex SHA-256 of `data` (64 digits).
std::string sha256_hex(std::string_view data);

} // namespace sluice::dlp
