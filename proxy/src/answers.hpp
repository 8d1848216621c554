// Answers that sluice itself produces (CONTRACT.md "What a client gets"): a status, the
// X-Sluice-Flow header and a JSON body {"error", "reason", "flow", "rules"}. On HTTP/1.x
// the reason phrase says why too, e.g. "403 Forbidden (sluice: dlp_finding
// github-pat-classic, flow 1a2b3c4d-000001)", because clients such as npm print the status
// line and nothing else. Rule ids, reason codes and flow ids only: never secret bytes.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace sluice::proxy {

using answer = boost::beast::http::response<boost::beast::http::string_body>;

/// A finding a deny answer offers to allow: the `policies[].dlp.ignore` entry (rule id and
/// the value's fingerprint, "sha256:<16 hex>"; never the value) that would let it pass.
struct ignore_hint {
    std::string rule;
    std::string fingerprint;
};

/// True for rules whose findings are often the agent's own credential going to the
/// service it belongs to (an opaque `Authorization: Bearer` token, rule
/// `http-bearer-token`): their denials carry ignore hints.
bool offers_ignore_hint(std::string_view rule) noexcept;

/// The YAML a person pastes under `policies[].dlp` to allow `hints`, one line per entry:
/// "ignore:\n  - {rule: http-bearer-token, fingerprint: \"sha256:...\"}\n".
std::string ignore_snippet(const std::vector<ignore_hint>& hints);

/// Builds the answer. `rules` are rule ids only (never secret bytes). `keep_alive`
/// mirrors the request's wish; denials inside a tunnel keep the connection usable.
/// Non-empty `hints` add "ignore": [{"rule", "fingerprint"}] and "hint" (the dlp.ignore
/// YAML) to the JSON body.
answer make_answer(unsigned status, std::string_view reason, std::string_view flow,
                   const std::vector<std::string>& rules = {}, bool keep_alive = false,
                   unsigned http_version = 11, const std::vector<ignore_hint>& hints = {});

/// The answer for a request of `method` to `url` (as in its audit record): for git's
/// smart-HTTP endpoints (Documentation/gitprotocol-http.txt) a body git prints, since git
/// shows neither a reason phrase nor the JSON:
///  - GET .../info/refs?service=...: the status, with a text/plain body (git prints each
///    line as "remote: ...");
///  - POST .../git-receive-pack: 200 with a side-band-64k channel 3 (fatal error) packet
///    (gitprotocol-pack.txt "Packfile Data"), printed as "remote: sluice: ..." and ending
///    the push (git shows no body of a 4xx answer to its RPC POST);
///  - POST .../git-upload-pack: 200 with an "ERR sluice: ..." pkt-line, which git
///    prints as "fatal: remote error: sluice: ...".
/// Every other request gets make_answer(). The audit keeps the real decision: the 200 is
/// only what git needs to show the message; nothing was forwarded. `where`: the first
/// finding's location when it names what a push carried ("git:blob:<path>", already
/// scanned and redacted), said in git's message ("... in git:blob:config/aws.env").
answer make_answer_for(std::string_view method, std::string_view url, unsigned status,
                       std::string_view reason, std::string_view flow,
                       const std::vector<std::string>& rules = {}, bool keep_alive = false,
                       const std::vector<ignore_hint>& hints = {}, std::string_view where = {});

/// GET .../info/refs?service=git-receive-pack: the advertisement a push starts from.
bool is_receive_pack_advertisement(std::string_view method, std::string_view target) noexcept;

/// The "error" kind for a status, e.g. 403 -> "forbidden".
std::string_view error_kind(unsigned status) noexcept;

} // namespace sluice::proxy
