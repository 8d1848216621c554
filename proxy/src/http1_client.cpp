#include "http1_client.hpp"

#include "sluice/proxy/metrics.hpp"

namespace sluice::proxy {

net::awaitable<std::pair<answer, bool>>
record_denial(flow_context& fc, unsigned status, std::string_view reason,
              const audit_record& head_rec, const std::vector<dlp::finding_record>& findings,
              bool keep_alive) {
    audit_record rec = head_rec;
    if (rec.decision.empty()) // "supervise_denied" when a person or the timeout said no
        rec.decision = "deny";
    // A kill (or a reload's cut) closed the flow's sockets, so whatever failed next (a body
    // read, a write upstream) failed because of it: the record says so, not bad_request.
    const std::string cut = killed_now(fc) ? std::string(kill_reason(fc)) : std::string();
    if (!cut.empty() && reason != cut && reason != "audit_unavailable") {
        status = kill_status(fc);
        reason = cut;
    }
    rec.reason = std::string(reason);
    rec.findings = to_audit(findings);
    if (fc.state->stats && status == 502)
        fc.state->stats->on_upstream_error(reason);
    // Records keep the order of events: the last exchange's allow record first, and when
    // that one failed, so does this answer.
    bool ok = co_await settle_audit(fc);
    ok = ok && audit(fc, std::move(rec));
    if (!ok) {
        status = 503;
        reason = "audit_unavailable";
        keep_alive = false;
    }
    // A push's message names what carried the finding (a file of the pack, already redacted).
    std::string_view where;
    for (const auto& f : findings)
        if (f.location.starts_with("git:")) {
            where = f.location;
            break;
        }
    co_return std::pair{make_answer_for(head_rec.method, head_rec.url, status, reason, fc.flow,
                                        rule_ids(findings), keep_alive,
                                        ignore_hints(fc, status, findings), where),
                        ok};
}

net::awaitable<std::pair<answer, bool>> record_limited(flow_context& fc, std::string_view reason,
                                                       std::uint32_t retry_after,
                                                       const audit_record& head_rec,
                                                       bool keep_alive) {
    audit_record rec = head_rec; // by reference, as for record_denial
    rec.decision = "deny";
    rec.reason = std::string(reason);
    bool ok = co_await settle_audit(fc); // in order, as in record_denial
    ok = ok && audit(fc, std::move(rec));
    auto res = make_answer(ok ? 429 : 503, ok ? reason : "audit_unavailable", fc.flow, {},
                           ok && keep_alive);
    if (ok)
        res.set(http::field::retry_after, std::to_string(retry_after));
    co_return std::pair{std::move(res), ok};
}

} // namespace sluice::proxy
