#include "answers.hpp"

#include <boost/beast/http/field.hpp>
#include <boost/json.hpp>

#include <cstdio>

namespace sluice::proxy {

namespace http = boost::beast::http;

std::string_view error_kind(unsigned status) noexcept {
    switch (status) {
    case 400:
        return "bad_request";
    case 403:
        return "forbidden";
    case 407:
        return "proxy_authentication_required";
    case 413:
        return "payload_too_large";
    case 429:
        return "too_many_requests";
    case 500:
        return "internal_error";
    case 502:
        return "bad_gateway";
    case 503:
        return "service_unavailable";
    case 504:
        return "gateway_timeout";
    default:
        return "error";
    }
}

namespace {

// "sluice: dlp_finding github-pat-classic, flow 1a2b3c4d-000001": what a person reads in a
// reason phrase or a git message. At most three rule ids, then "+N".
std::string why(std::string_view reason, std::string_view flow,
                const std::vector<std::string>& rules) {
    std::string out = "sluice: " + std::string(reason);
    for (std::size_t i = 0; i < rules.size() && i < 3; ++i)
        out += (i == 0 ? " " : ",") + rules[i];
    if (rules.size() > 3)
        out += ",+" + std::to_string(rules.size() - 3);
    out += ", flow " + std::string(flow);
    return out;
}

// A reason phrase is HTAB / SP / VCHAR / obs-text (RFC 9112 section 4); rule ids and
// flow ids are, but anything else becomes '?'.
std::string phrase_safe(std::string s) {
    for (auto& c : s)
        if (c != '\t' && (static_cast<unsigned char>(c) < 0x20 || c == 0x7f))
            c = '?';
    return s;
}

// git's pkt-line: four hex digits of length (including themselves), then the payload
// (gitprotocol-common.txt "pkt-line Format").
std::string pkt_line(std::string_view payload) {
    char len[5];
    std::snprintf(len, sizeof len, "%04zx", payload.size() + 4);
    return std::string(len, 4) + std::string(payload);
}

enum class git_endpoint { none, info_refs, receive_pack, upload_pack };

git_endpoint git_endpoint_of(std::string_view method, std::string_view url) {
    if (auto scheme = url.find("://"); scheme != std::string_view::npos) {
        url.remove_prefix(scheme + 3);
        auto slash = url.find('/');
        url.remove_prefix(slash == std::string_view::npos ? url.size() : slash);
    }
    auto q = url.find('?');
    std::string_view path = url.substr(0, q);
    std::string_view query = q == std::string_view::npos ? "" : url.substr(q + 1);
    if (method == "GET" && path.ends_with("/info/refs") && query.starts_with("service="))
        return git_endpoint::info_refs;
    if (method == "POST" && path.ends_with("/git-receive-pack"))
        return git_endpoint::receive_pack;
    if (method == "POST" && path.ends_with("/git-upload-pack"))
        return git_endpoint::upload_pack;
    return git_endpoint::none;
}

} // namespace

bool offers_ignore_hint(std::string_view rule) noexcept {
    return rule == "http-bearer-token";
}

std::string ignore_snippet(const std::vector<ignore_hint>& hints) {
    std::string out = "ignore:\n";
    for (const auto& h : hints)
        out += "  - {rule: " + h.rule + ", fingerprint: \"" + h.fingerprint + "\"}\n";
    return out;
}

answer make_answer(unsigned status, std::string_view reason, std::string_view flow,
                   const std::vector<std::string>& rules, bool keep_alive, unsigned http_version,
                   const std::vector<ignore_hint>& hints) {
    answer res{static_cast<http::status>(status), http_version};
    if (http_version < 20)
        res.reason(phrase_safe(std::string(http::obsolete_reason(res.result())) + " (" +
                               why(reason, flow, rules) + ")"));
    res.set(http::field::server, "sluice");
    res.set("X-Sluice-Flow", flow);
    res.set(http::field::content_type, "application/json");
    res.set(http::field::cache_control, "no-store");
    if (status == 407)
        res.set(http::field::proxy_authenticate, "Basic realm=\"sluice\"");
    boost::json::array rule_ids;
    for (const auto& r : rules)
        rule_ids.emplace_back(r);
    boost::json::object body{{"error", error_kind(status)},
                             {"reason", reason},
                             {"flow", flow},
                             {"rules", std::move(rule_ids)}};
    if (!hints.empty()) {
        boost::json::array entries;
        for (const auto& h : hints)
            entries.push_back({{"rule", h.rule}, {"fingerprint", h.fingerprint}});
        body["ignore"] = std::move(entries);
        body["hint"] = "if this is the agent's own credential for this host, allow it under "
                       "policies[].dlp of its identity:\n" +
                       ignore_snippet(hints);
    }
    res.body() = boost::json::serialize(body) + "\n";
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
}

bool is_receive_pack_advertisement(std::string_view method, std::string_view target) noexcept {
    return git_endpoint_of(method, target) == git_endpoint::info_refs &&
           target.find("service=git-receive-pack") != std::string_view::npos;
}

answer make_answer_for(std::string_view method, std::string_view url, unsigned status,
                       std::string_view reason, std::string_view flow,
                       const std::vector<std::string>& rules, bool keep_alive,
                       const std::vector<ignore_hint>& hints, std::string_view where) {
    auto res = make_answer(status, reason, flow, rules, keep_alive, 11, hints);
    auto git = git_endpoint_of(method, url);
    if (git == git_endpoint::none)
        return res;
    std::string said = why(reason, flow, rules);
    if (const auto at = said.find(", flow "); where.starts_with("git:"))
        said.insert(at == std::string::npos ? said.size() : at, " in " + std::string(where));
    if (reason == "bad_encoding" && git == git_endpoint::receive_pack)
        said += "; the push could not be read whole (a thin pack? try git push --no-thin)";
    std::string message = phrase_safe(said) + " (" + std::to_string(status) + " " +
                          std::string(error_kind(status)) + "; the audit record has the details)\n";
    switch (git) {
    case git_endpoint::info_refs:
        res.set(http::field::content_type, "text/plain; charset=utf-8");
        res.body() = std::move(message);
        break;
    case git_endpoint::receive_pack:
        res.result(http::status::ok);
        res.reason("OK");
        res.set(http::field::content_type, "application/x-git-receive-pack-result");
        res.body() = pkt_line("\x03" + message);
        break;
    case git_endpoint::upload_pack:
        res.result(http::status::ok);
        res.reason("OK");
        res.set(http::field::content_type, "application/x-git-upload-pack-result");
        res.body() = pkt_line("ERR " + message);
        break;
    case git_endpoint::none:
        break;
    }
    res.prepare_payload();
    return res;
}

} // namespace sluice::proxy
