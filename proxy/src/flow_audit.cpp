#include "flow_audit.hpp"

#include "sluice/proxy/metrics.hpp"

#include <boost/asio/this_coro.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cassert>

namespace sluice::proxy {

namespace {

// The fields of a record the client chose, with whatever a detector finds in them
// redacted: every record, inspected exchange or not, starts and completions alike.
void scrub_client_fields(flow_context& fc, audit_record& r) {
    r.url = scrubbed(fc, r.url);
    // The methods of RFC 9110 section 9 and RFC 5789 need no scan; any other was chosen
    // by the client.
    static constexpr std::array<std::string_view, 10> known{
        "", "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"};
    if (std::find(known.begin(), known.end(), r.method) == known.end())
        r.method = scrubbed(fc, r.method);
    if (r.approval) {
        r.approval->by = scrubbed(fc, r.approval->by);
        r.approval->reason = scrubbed(fc, r.approval->reason);
    }
}

} // namespace

void stamp(flow_context& fc, audit_record& r) {
    scrub_client_fields(fc, r);
    r.flow = fc.flow;
    r.identity = fc.identity;
    r.source = fc.source;
    if (fc.handle) {
        fc.handle->bytes_up.fetch_add(r.bytes_up, std::memory_order_relaxed);
        fc.handle->bytes_down.fetch_add(r.bytes_down, std::memory_order_relaxed);
    }
    if (fc.state->stats)
        count_decision(*fc.state->stats, r);
}

bool audit(flow_context& fc, audit_record r) {
    stamp(fc, r);
    if (!fc.state->audit->append(r)) {
        spdlog::error("flow {}: audit write failed; denying", fc.flow);
        return false;
    }
    return true;
}

void audit_batched(flow_context& fc, audit_record r, const net::any_io_executor& ex) {
    stamp(fc, r);
    auto pending = std::make_shared<audit_result_channel>(ex, 1);
    fc.pending_audit = pending;
    fc.state->audit->async_append(std::move(r), [pending, flow = fc.flow](bool ok) {
        if (!ok) // logged here: the flow may have ended and never settle it
            spdlog::error("flow {}: audit write failed", flow);
        // Capacity 1 and one send per channel: the send cannot find the channel full.
        [[maybe_unused]] bool sent = pending->try_send(boost::system::error_code{}, ok);
        assert(sent);
    });
}

net::awaitable<bool> settle_audit(flow_context& fc) {
    auto pending = std::move(fc.pending_audit);
    if (!pending)
        co_return true;
    bool ok = false;
    if (pending->try_receive([&ok](boost::system::error_code ec, bool done) { ok = !ec && done; }))
        co_return ok; // already durable: no trip through the io_context
    auto [ec, done] = co_await pending->async_receive(as_tuple);
    co_return !ec && done;
}

std::vector<audit_finding> to_audit(const std::vector<dlp::finding_record>& fs) {
    std::vector<audit_finding> out;
    out.reserve(fs.size());
    for (const auto& f : fs)
        out.push_back({f.rule, f.location, f.variant, f.offset, f.fingerprint});
    return out;
}

net::awaitable<bool> record_start(flow_context& fc, audit_record& rec, std::string decision,
                                  std::string reason) {
    audit_record start = rec;
    start.event = "start";
    start.decision = std::move(decision);
    start.reason = std::move(reason);
    // Not stamp(): the exchange is counted once, by its completion. Scrubbed like it.
    scrub_client_fields(fc, start);
    start.flow = fc.flow;
    start.identity = fc.identity;
    start.source = fc.source;
    auto seq_ch = std::make_shared<audit_seq_channel>(co_await net::this_coro::executor, 1);
    fc.state->audit->async_append_seq(std::move(start), [seq_ch](std::uint64_t seq) {
        // Capacity 1 and one send per channel: the send cannot find the channel full.
        [[maybe_unused]] bool sent = seq_ch->try_send(boost::system::error_code{}, seq);
        assert(sent);
    });
    std::uint64_t seq = 0;
    if (!seq_ch->try_receive([&seq](boost::system::error_code, std::uint64_t s) { seq = s; })) {
        auto [ec, s] = co_await seq_ch->async_receive(as_tuple);
        seq = ec ? 0 : s;
    }
    // Queued before the start, so already settled: this only reads its result.
    const bool last_ok = co_await settle_audit(fc);
    if (seq == 0) {
        spdlog::error("flow {}: start record not written; denying", fc.flow);
        co_return false;
    }
    rec.event = "end";
    rec.completes = seq;
    co_return last_ok;
}

std::vector<std::string> rule_ids(const std::vector<dlp::finding_record>& fs) {
    std::vector<std::string> ids;
    for (const auto& f : fs)
        if (std::find(ids.begin(), ids.end(), f.rule) == ids.end())
            ids.push_back(f.rule);
    return ids;
}

std::string audit_url(std::string_view prefix, std::string_view target,
                      const std::vector<dlp::finding_record>& fs) {
    std::string t(target);
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    bool url_finding = false;
    for (const auto& f : fs) {
        // A secret joined at the seam with the previous request (dlp/seam.hpp) is found in
        // the body, but its parts may be anywhere in the request: nothing of the path or
        // the query is kept.
        const bool seam = f.variant.starts_with("seam");
        if (f.location != "url" && !seam)
            continue;
        url_finding = true;
        // Offsets of extractions (path segments, query values, host labels, joined views)
        // are into the extracted buffer, not the target. The whole path goes for those of
        // the path ("/[redacted]"), never a piece; query values all go below.
        if (seam || f.variant.starts_with("path") || f.variant.starts_with("joined:path")) {
            const std::size_t q = std::min(t.find('?'), t.size());
            const std::size_t from = t.starts_with("/") ? 1 : 0;
            if (q > from)
                ranges.emplace_back(from, q - from);
            continue;
        }
        if (f.variant.starts_with("query") || f.variant.starts_with("joined:") ||
            f.variant.starts_with("host"))
            continue;
        if (f.length > 0 && f.offset < t.size())
            ranges.emplace_back(f.offset, std::min(f.length, t.size() - f.offset));
    }
    // Overlapping ranges are merged first, so a range inside another cannot keep bytes.
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<std::size_t, std::size_t>> merged; // begin, end
    for (const auto& [off, len] : ranges) {
        if (!merged.empty() && off <= merged.back().second)
            merged.back().second = std::max(merged.back().second, off + len);
        else
            merged.emplace_back(off, off + len);
    }
    for (auto it = merged.rbegin(); it != merged.rend(); ++it)
        t.replace(it->first, it->second - it->first, "[redacted]");
    return audit_log::redact_query(std::string(prefix) + t, url_finding);
}

audit_record ws_record(const flow_context& fc, audit_record r) {
    const bool final_record = r.decision == "allow" || r.reason == "relay_interrupted" ||
                              r.bytes_up + r.bytes_down + r.ws_messages_up + r.ws_messages_down > 0;
    if (!final_record) {
        r.event.clear();
        r.completes = 0;
    }
    if (r.reason == "relay_interrupted" && killed_now(fc))
        r.reason = std::string(kill_reason(fc));
    return r;
}

std::vector<ignore_hint> ignore_hints(const flow_context& fc, unsigned status,
                                      const std::vector<dlp::finding_record>& findings) {
    std::vector<ignore_hint> hints;
    if (status != 403)
        return hints;
    for (const auto& f : findings)
        if (offers_ignore_hint(f.rule) &&
            std::none_of(hints.begin(), hints.end(),
                         [&](const ignore_hint& h) { return h.fingerprint == f.fingerprint; }))
            hints.push_back({f.rule, f.fingerprint});
    for (const auto& h : hints) // one line each: the entry to paste, never the value
        spdlog::warn("flow {}: denied {} for identity {}; if it is the agent's own credential "
                     "for this host, allow it in that policy's dlp.ignore: - {{rule: {}, "
                     "fingerprint: \"{}\"}}",
                     fc.flow, h.rule, fc.identity.empty() ? "-" : fc.identity, h.rule,
                     h.fingerprint);
    return hints;
}

} // namespace sluice::proxy
