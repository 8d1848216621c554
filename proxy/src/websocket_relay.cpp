#include "websocket_relay.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace sluice::proxy {

namespace http = boost::beast::http;

bool is_websocket_upgrade(const http::request<http::string_body>& req) {
    if (req.method() != http::verb::get || req.version() != 11 || !req.body().empty())
        return false;
    auto has_token = [&](http::field name, std::string_view token) {
        auto range = req.equal_range(name);
        for (auto it = range.first; it != range.second; ++it)
            for (auto t : http::token_list{it->value()})
                if (boost::beast::iequals(t, token))
                    return true;
        return false;
    };
    if (!has_token(http::field::connection, "upgrade") ||
        !has_token(http::field::upgrade, "websocket"))
        return false;
    if (req.count(http::field::sec_websocket_key) != 1 ||
        req.count(http::field::sec_websocket_version) != 1)
        return false;
    return req[http::field::sec_websocket_version] == "13" &&
           !req[http::field::sec_websocket_key].empty();
}

namespace ws_detail {

bool forwarded_field(std::string_view name) {
    // Beast writes Host, Upgrade, Connection, the key and version for its own handshake,
    // and offers sluice's own permessage-deflate: the client's extension offer was made
    // to sluice, not to the origin. Content-Length: a GET upgrade has no body.
    static constexpr std::array<std::string_view, 8> beast_owned{
        "host",
        "upgrade",
        "connection",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "content-length",
        "transfer-encoding",
    };
    return std::none_of(beast_owned.begin(), beast_owned.end(),
                        [&](std::string_view n) { return boost::beast::iequals(n, name); });
}

} // namespace ws_detail

namespace {

dlp::policy lifted(const dlp::policy& p) {
    dlp::policy out = p;
    // The session reader enforces the message limit (Beast's read_message_max, close
    // 1009); the window handed to the inspector also holds the carried tail.
    out.dlp.max_body = std::numeric_limits<std::size_t>::max();
    return out;
}

} // namespace

ws_message_inspector::ws_message_inspector(const dlp::policy& p,
                                           std::shared_ptr<const detectors::ruleset> rules,
                                           dlp::variant_options o, std::size_t tail_bytes)
    : policy_(lifted(p))
    , scanner_(std::move(rules))
    , inspector_(policy_, scanner_, std::move(o))
    , tail_bytes_(tail_bytes) {}

void ws_message_inspector::continue_from(const ws_message_inspector& older) {
    const std::size_t keep = std::min({tail_bytes_, older.tail_len_, older.window_.size()});
    window_.assign(older.window_, older.window_.size() - keep, keep);
    tail_len_ = keep;
    index_ = older.index_;
    ends_ = older.ends_;
}

std::size_t ws_message_inspector::tail_for(const detectors::ruleset& rules) noexcept {
    return std::clamp<std::size_t>(rules.max_width() * 2, 256, 16 * 1024);
}

// The seam with the previous message (dlp/seam.hpp): its last values joined with this
// message's first ones. The ends move on only when this message is let through.
dlp::verdict ws_message_inspector::with_seam(dlp::verdict v, std::string_view message,
                                             const std::string& location) {
    dlp::message_ends ends = dlp::ends_of(message);
    dlp::verdict sv = inspector_.on_seam(ends_, ends, location);
    v.findings.insert(v.findings.end(), sv.findings.begin(), sv.findings.end());
    if (sv.kind == dlp::verdict_kind::deny ||
        (sv.kind == dlp::verdict_kind::supervise && v.kind == dlp::verdict_kind::forward)) {
        v.kind = sv.kind;
        v.status = sv.status;
        v.reason = std::move(sv.reason);
    }
    if (v.kind != dlp::verdict_kind::deny)
        ends_ = std::move(ends);
    return v;
}

dlp::verdict ws_message_inspector::on_message(std::string_view message) {
    try {
        ++index_;
        // Window = last tail_len_ bytes of the previous message + this one. The previous
        // message's bytes were already scanned on their own, so a finding that ends inside
        // the tail is not this message's.
        window_.append(message);
        inspector_.next_message(); // the decode budget is per message, not per session
        dlp::verdict v = inspector_.on_body(window_);
        const std::string location = "ws:message:" + std::to_string(index_);
        std::vector<dlp::finding_record> mine;
        for (auto& f : v.findings) {
            if (f.offset + std::max<std::size_t>(f.length, 1) <= tail_len_)
                continue;
            f.location = location;
            f.offset = f.offset >= tail_len_ ? f.offset - tail_len_ : 0;
            mine.push_back(std::move(f));
        }
        const bool finding_verdict =
            v.reason == "dlp_finding" && v.kind != dlp::verdict_kind::forward;
        v.findings = std::move(mine);
        if (finding_verdict && v.findings.empty()) {
            // Only the previous message's findings, which were let through (log, an
            // approval, or a policy a reload has since replaced). A secret that appears
            // again in this message is reported once, at its first place in the window:
            // this message is scanned on its own to find it.
            inspector_.next_message(); // its own budget, as the first scan had
            v = inspector_.on_body(std::string_view(window_).substr(tail_len_));
            for (auto& f : v.findings)
                f.location = location;
        }
        if (v.kind != dlp::verdict_kind::deny)
            v = with_seam(std::move(v), message, location);
        // Carry the tail for the next message.
        const std::size_t keep = std::min(tail_bytes_, window_.size());
        window_.erase(0, window_.size() - keep);
        tail_len_ = keep;
        return v;
    } catch (...) {
        // Allocation failure: fail closed.
        window_.clear();
        tail_len_ = 0;
        ends_ = {};
        dlp::verdict v;
        v.kind = dlp::verdict_kind::deny;
        v.status = 500;
        v.reason = "internal";
        return v;
    }
}

} // namespace sluice::proxy
