// The request-head path: byte-level strictness checks on a raw HTTP/1.1 request head
// and its parse with Beast, with the framing checks a proxy needs against smuggling
// (RFC 9112 sections 2.2, 5.1, 5.2, 6.1, 6.3). Used by the flow for every request head
// and by fuzz/request_head_fuzz.cpp. Thread safety: pure functions.
#pragma once

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <cstddef>
#include <string_view>

namespace sluice::proxy {

/// Upper bound of a request head in bytes (request line + fields + empty line).
inline constexpr std::size_t request_header_limit = 64 * 1024;

/// True if `head` (request line through the terminating empty line, CRLF endings) has
/// no bare CR or LF, NUL or other control bytes, no obs-fold, a token method and only
/// token header names (RFC 9110 section 5.6.2),
/// version HTTP/1.0 or HTTP/1.1 (so an HTTP/2 preface fails), and at most 128 fields.
bool head_is_strict(std::string_view head);

/// Runs head_is_strict on `head`, then feeds it to `parser` (which must be fresh) and
/// checks framing: at most one Content-Length, and Transfer-Encoding only as a single
/// "chunked" on HTTP/1.1. Returns false for anything malformed or ambiguous.
bool parse_request_head(std::string_view head,
                        boost::beast::http::request_parser<boost::beast::http::empty_body>& parser);

} // namespace sluice::proxy
