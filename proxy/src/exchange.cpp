#include "exchange.hpp"

#include "answers.hpp"
#include "flow_audit.hpp"
#include "http_fields.hpp"
#include "websocket_relay.hpp"

#include "sluice/dlp/policy.hpp"
#include "sluice/proxy/metrics.hpp"

#include <boost/asio/this_coro.hpp>

#include <algorithm>

namespace sluice::proxy {

step_result admit(flow_context& fc, exchange& ex) {
    if (!refresh_generation(fc)) {
        ex.rec.url = audit_log::redact_query(ex.url_prefix + ex.tgt->origin_form, true);
        return refusal{403, "policy_deny"};
    }
    if (!fc.state->audit->healthy())
        return refusal{503, "audit_unavailable"};
    if (killed_now(fc)) // before every request on a kept-alive connection or tunnel
        return refusal{kill_status(fc), std::string(kill_reason(fc))};
    // Limits: one request token per exchange, and the upload budget for a declared body
    // before a byte of it is read (a body of unknown length is charged once read).
    const auto& limits = fc.policy->limits;
    if (auto wait = fc.state->limits.admit_request(fc.identity, limits); wait != 0)
        return refusal{429, "rate_limit", ex.client_keep_alive && ex.no_payload, wait};
    ex.upload_charged = ex.declared_length.has_value();
    if (ex.upload_charged)
        if (auto wait = fc.state->limits.admit_upload(fc.identity, limits, *ex.declared_length);
            wait != 0)
            return refusal{429, "upload_budget", false, wait};
    return std::nullopt;
}

step_result route(flow_context& fc, exchange& ex, const http::fields& head) {
    // Policy per request: method and path rules apply inside the tunnel too.
    const auto& policy = *fc.policy;
    std::string_view path = ex.tgt->origin_form;
    path = path.substr(0, path.find('?'));
    ex.rule = rule_for(policy, *ex.tgt->dest, ex.method, path);
    if (ex.rule == nullptr || ex.rule->act == dlp::action::deny)
        return refusal{403, "policy_deny", ex.client_keep_alive && ex.no_payload};
    // There is no TLS to keep opaque on plain http: `inspect: false` applies to tunnels.
    ex.inspect = ex.rule->inspect || ex.tgt->scheme == "http";
    // supervise: the request is read and inspected like any other, then held.
    if (ex.rule->act == dlp::action::supervise)
        ex.supervise_reason = "policy_supervise";
    // A declared length over the limit is refused before a byte of it is read, unless the
    // policy streams large bodies (`dlp.large_bodies: stream`). Only an identity-coded
    // body of an allowed (not supervised) request streams (a compressed stream inside it
    // is decoded across windows by dlp::body_stream); a held request cannot hold a stream.
    // A git push is never streamed: its pack is only readable whole (dlp/git.hpp).
    if (ex.declared_length && *ex.declared_length > policy.dlp.max_body) {
        ex.streamed = policy.dlp.stream_large_bodies && ex.rule->act == dlp::action::allow &&
                      identity_coded_request(head) &&
                      head.find(http::field::upgrade) == head.end() &&
                      !path.ends_with("/git-receive-pack");
        if (!ex.streamed) // the body, if it is being sent, is read off by the front end
            return refusal{413, "body_too_large"};
    }
    return std::nullopt;
}

step_result charge_upload(flow_context& fc, exchange& ex, std::uint64_t body_bytes) {
    if (ex.upload_charged)
        return std::nullopt;
    if (auto wait = fc.state->limits.admit_upload(fc.identity, fc.policy->limits, body_bytes);
        wait != 0)
        return refusal{429, "upload_budget", false, wait};
    return std::nullopt;
}

namespace {

// The head's verdict and the body's, merged: the body's findings follow the head's, and a
// supervised head stays supervised when the body alone would forward.
dlp::verdict merged(dlp::verdict head_v, dlp::verdict body_v) {
    body_v.findings.insert(body_v.findings.begin(), head_v.findings.begin(), head_v.findings.end());
    if (head_v.kind == dlp::verdict_kind::supervise && body_v.kind == dlp::verdict_kind::forward) {
        body_v.kind = head_v.kind;
        body_v.status = head_v.status;
        body_v.reason = std::move(head_v.reason);
    }
    return body_v;
}

// A secret cut over two requests to one destination (issue 21): the first values of this
// body are scanned joined with the last values of the previous body the same identity sent
// there within seam_ttl (dlp/seam.hpp). A request that is refused leaves no ends: its
// bytes never left, and the previous request's ends stay for the next one.
dlp::verdict joined_with_previous(flow_context& fc, const exchange& ex, dlp::inspector& ins,
                                  dlp::verdict v) {
    const auto& dest = *ex.tgt->dest;
    const std::string key = (fc.identity.empty() ? fc.source : fc.identity) + '\n' + dest.host +
                            ':' + std::to_string(dest.port);
    const auto now = std::chrono::steady_clock::now();
    v = merged(std::move(v), ins.on_seam(fc.state->seams.recent(key, now), ins.ends(), "body"));
    if (v.kind != dlp::verdict_kind::deny)
        fc.state->seams.keep(key, ins.ends(), now);
    return v;
}

} // namespace

step_result inspect_request(flow_context& fc, exchange& ex,
                            const http::request<http::string_body>& req) {
    if (ex.inspect) {
        std::vector<dlp::header_view> headers;
        for (const auto& f : req) {
            if (f.name() == http::field::proxy_authorization)
                continue; // proxy credentials are sluice's, stripped before upstream
            headers.push_back({f.name_string(), f.value()});
        }
        const auto& tgt = *ex.tgt;
        dlp::request_view view{ex.method, tgt.origin_form, tgt.dest->host, tgt.dest->port, headers};
        auto scan_started = std::chrono::steady_clock::now();
        dlp::variant_options vo;
        vo.protect = fc.gen->protect;
        dlp::inspector ins(*fc.policy, thread_scanner(fc.gen->settings->rules), std::move(vo));
        dlp::verdict v = ins.on_head(view);
        // The body is scanned unless the head alone denies: a held request must show the
        // approver (and the audit) every finding it carries, not just the head's.
        if (v.kind != dlp::verdict_kind::deny && !ex.streamed)
            v = merged(std::move(v), ins.on_body(req.body()));
        if (v.kind != dlp::verdict_kind::deny && !ex.streamed)
            v = joined_with_previous(fc, ex, ins, std::move(v));
        ex.findings = v.findings;
        if (fc.state->stats)
            count_scan(*fc.state->stats, scan_started, tgt.origin_form.size() + req.body().size());
        ex.rec.url = audit_url(ex.url_prefix, tgt.origin_form, ex.findings);
        if (v.kind == dlp::verdict_kind::supervise) {
            ex.supervise_reason = "dlp_finding";
        } else if (v.kind != dlp::verdict_kind::forward) {
            const auto status = static_cast<unsigned>(v.status);
            const bool keep = ex.client_keep_alive && status == 403 && fc.unread_body == 0;
            return refusal{status, v.reason, keep};
        }
    }
    ex.rec.inspected = ex.inspect;
    if (ex.streamed && !ex.supervise_reason.empty()) // a finding to supervise in the head
        return refusal{403, "dlp_finding"};
    return std::nullopt;
}

net::awaitable<step_result> hold_for_approval(flow_context& fc, exchange& ex, tcp::socket& client) {
    if (!fc.state->ctl)
        co_return refusal{403, "approval_unavailable"};
    // Nobody is asked to approve a request that would be refused anyway: the last
    // exchange's record must be durable first.
    if (!co_await settle_audit(fc))
        co_return refusal{503, "audit_unavailable"};
    // What the approver sees holds no secret either (as the record).
    approval_request held{fc.flow,
                          fc.identity,
                          fc.source,
                          scrubbed(fc, ex.method),
                          scrubbed(fc, ex.rec.url),
                          ex.supervise_reason,
                          to_audit(ex.findings)};
    auto out = co_await fc.state->ctl->hold(std::move(held), fc.handle.get(), client,
                                            fc.gen->settings->supervise_timeout);
    auto& rec = ex.rec;
    rec.approval = audit_approval{out.id, out.by, out.at, out.reason};
    using kind = approval_outcome::kind;
    if (out.result == kind::approved)
        co_return std::nullopt;
    rec.decision = "supervise_denied";
    rec.duration_ms = elapsed_ms(ex.started);
    // No co_await inside a switch (docs/ARCHITECTURE.md, "Coroutines").
    if (out.result == kind::denied)
        co_return refusal{403, "approval_denied", ex.client_keep_alive};
    if (out.result == kind::timed_out)
        co_return refusal{403, "approval_timeout", ex.client_keep_alive};
    if (out.result == kind::withdrawn) { // the client went away: nobody to answer
        rec.reason = "approval_withdrawn";
        rec.findings = to_audit(ex.findings);
        if (co_await settle_audit(fc)) // in order, as in deny
            audit(fc, std::move(rec));
        co_return refusal{403, "approval_withdrawn", false, 0, true};
    }
    co_return refusal{503, "killed"}; // killed: the socket is closed, the 503 rarely gets out
}

step_result prepare_forward(flow_context& fc, exchange& ex, http::request<http::string_body>& req,
                            forward_plan& plan) {
    // The request as it goes upstream: origin-form, Host from the target, no hop-by-hop.
    std::vector<dlp::broker_header> fwd;
    const auto connection_options = connection_tokens(req);
    for (const auto& f : req) {
        if (is_hop_by_hop(f.name_string()) || f.name() == http::field::host ||
            names_connection_option(connection_options, f.name_string()))
            continue;
        fwd.push_back({f.name_string(), f.value()});
    }
    // Credential brokering, after DLP so the real secret is never scanned: placeholders
    // in scope are replaced in what goes upstream, any other one in the head denies.
    // The live generation's broker, not the flow's: a credential removed or rotated by a
    // reload stops being injected on tunnels that were already open.
    plan.live = fc.state->current.load();
    const auto& broker = *plan.live->broker;
    const auto& tgt = *ex.tgt;
    dlp::broker_result brokered;
    if (!broker.empty()) {
        brokered = broker.apply(fc.identity, *fc.policy, tgt.dest->host, tgt.dest->port,
                                tgt.origin_form, fwd);
        ex.rec.credentials = brokered.credentials;
        // A secret is only ever sent encrypted: a placeholder in a plain http:// request
        // is out of scope whatever the credential's hosts and ports say.
        if (brokered.outcome == dlp::broker_result::kind::out_of_scope ||
            (brokered.outcome == dlp::broker_result::kind::inject && tgt.scheme != "https"))
            return refusal{403, "credential_scope", ex.client_keep_alive && fc.unread_body == 0};
    }
    // Every response is masked for every brokered secret, injected here or not: an API
    // may store what it was sent and return it later, or on another exchange.
    plan.masker.emplace(broker.reflection_index());

    auto& out = plan.out;
    out = http::request<http::string_body>{req.method(), brokered.target.value_or(tgt.origin_form),
                                           11};
    if (req.method() == http::verb::unknown)
        out.method_string(req.method_string());
    std::size_t next_edit = 0;
    std::sort(brokered.header_values.begin(), brokered.header_values.end());
    for (std::size_t i = 0; i < fwd.size(); ++i) {
        if (next_edit < brokered.header_values.size() &&
            brokered.header_values[next_edit].first == i) {
            out.insert(fwd[i].name, brokered.header_values[next_edit++].second);
            continue;
        }
        out.insert(fwd[i].name, fwd[i].value);
    }
    // Reflections are masked in the raw bytes: with any brokered secret configured, every
    // response is asked for unencoded. Not only on a flow that injected one: an API may
    // store the secret and return it later to a request on another connection.
    // A push's advertisement is relayed with `no-thin` added (response_relay.cpp), which
    // needs its bytes as sent.
    ex.git_advertisement = ex.inspect && is_receive_pack_advertisement(ex.method, tgt.origin_form);
    if (plan.masker->active() || ex.git_advertisement)
        out.set(http::field::accept_encoding, "identity");
    out.set(http::field::host, tgt.host_header);
    out.body() = std::move(req.body());
    out.keep_alive(true);
    out.prepare_payload();
    if (ex.streamed)
        out.content_length(*ex.declared_length);
    ex.rec.findings = to_audit(ex.findings);
    return std::nullopt;
}

net::awaitable<void> record_exchange(flow_context& fc, exchange& ex, bool relay_ok,
                                     const dlp::secret_masker& masker) {
    auto& rec = ex.rec;
    rec.decision = rec.approval ? "supervise_approved" : "allow";
    rec.reason = relay_ok ? "" : killed_now(fc) ? kill_reason(fc) : "relay_interrupted";
    rec.findings = to_audit(ex.findings);
    rec.masked_bytes += masker.masked();
    rec.duration_ms = elapsed_ms(ex.started);
    audit_batched(fc, std::move(rec), co_await net::this_coro::executor);
}

std::optional<ws_live_config> ws_live(flow_context& fc, const exchange_target& tgt,
                                      std::string_view path, bool approved) {
    if (!refresh_generation(fc))
        return std::nullopt;
    const dlp::policy_rule* rule = rule_for(*fc.policy, *tgt.dest, "GET", path);
    if (rule == nullptr || rule->act == dlp::action::deny ||
        (rule->act == dlp::action::supervise && !approved))
        return std::nullopt;
    ws_live_config live;
    live.keep = fc.gen;
    live.policy = fc.policy;
    live.rules = fc.gen->settings->rules;
    live.variants.protect = fc.gen->protect;
    live.inspect = rule->inspect || tgt.scheme == "http";
    live.generation = fc.gen.get();
    return live;
}

} // namespace sluice::proxy
