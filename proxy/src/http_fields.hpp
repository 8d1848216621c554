// Questions about HTTP header fields that every exchange step asks, whatever protocol
// carried the message (RFC 9110 field semantics, not HTTP/1 syntax). Internal to proxy/.
// Pure functions: thread safe.
#pragma once

#include "sluice/dlp/credential_broker.hpp"

#include <boost/beast/http/message.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::proxy {

/// Hop-by-hop fields (RFC 9110 section 7.6.1) plus sluice's own (`X-Sluice-*`) and proxy
/// credentials: none of them reaches an upstream. Case-insensitive.
bool is_hop_by_hop(std::string_view name);

/// The field names a Connection header lists, which are hop-by-hop too (RFC 9110 section
/// 7.6.1: a proxy removes them before forwarding), e.g. "Connection: close, X-Token".
std::vector<std::string> connection_tokens(const boost::beast::http::fields& fields);
bool names_connection_option(const std::vector<std::string>& tokens, std::string_view name);

/// Masks brokered secrets in a response head: every field value and the reason phrase.
/// Returns the bytes masked.
std::size_t mask_head(boost::beast::http::response_header<>& head,
                      const dlp::secret_masker& masker);

/// True when every Content-Encoding token is "identity" and every Transfer-Encoding token
/// is "chunked" (over all fields of each name).
bool only_identity_coded(const boost::beast::http::fields& fields);

/// A request body with no Content-Encoding, or only `identity` (RFC 9110 section 8.4).
bool identity_coded_request(const boost::beast::http::fields& fields);

} // namespace sluice::proxy
