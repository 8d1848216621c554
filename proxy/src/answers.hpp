// Answers that sluice itself produces (CONTRACT.md "What a client gets"): a status, the
// X-Sluice-Flow header and a JSON body {"error", "reason", "flow", "rules"}.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace sluice::proxy {

using answer = boost::beast::http::response<boost::beast::http::string_body>;

/// Builds the answer. `rules` are rule ids only (never secret bytes). `keep_alive`
/// mirrors the request's wish; denials inside a tunnel keep the connection usable.
answer make_answer(unsigned status, std::string_view reason, std::string_view flow,
                   const std::vector<std::string>& rules = {}, bool keep_alive = false,
                   unsigned http_version = 11);

/// The "error" kind for a status, e.g. 403 -> "forbidden".
std::string_view error_kind(unsigned status) noexcept;

} // namespace sluice::proxy
