#include "exchange_http1.hpp"

#include "flow_audit.hpp"
#include "forward.hpp"
#include "http1_client.hpp"
#include "response_relay.hpp"
#include "stream_types.hpp"
#include "websocket_relay.hpp"

#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace sluice::proxy {

namespace {

exchange begin_exchange(const http::request_parser<http::empty_body>& hp, exchange_target& tgt,
                        flow_context& fc) {
    const auto& head = hp.get();
    exchange ex;
    ex.tgt = &tgt;
    ex.method = std::string(head.method_string());
    ex.url_prefix = tgt.scheme + "://" + tgt.host_header;
    ex.client_keep_alive = head.keep_alive();
    if (hp.content_length())
        ex.declared_length = *hp.content_length();
    ex.no_payload = head.payload_size().value_or(1) == 0;
    ex.rec.method = ex.method;
    ex.rec.url = audit_log::redact_query(ex.url_prefix + tgt.origin_form, false);
    // A declared body is on its way until it is read (a client that asked for 100 Continue
    // waits for it): an exchange refused before then ends the connection with a lingering
    // close, and never reads the body as the next request.
    const bool expects_continue = beast::iequals(head[http::field::expect], "100-continue");
    fc.unread_body = expects_continue ? 0 : hp.content_length().value_or(0);
    return ex;
}

// Reads the whole body (unless it is streamed), answering Expect: 100-continue first.
template <class ClientStream>
net::awaitable<step_result> read_request_body(ClientStream& client, beast::flat_buffer& cbuf,
                                              http::request_parser<http::string_body>& bp,
                                              exchange& ex, flow_context& fc) {
    if (beast::iequals(bp.get()[http::field::expect], "100-continue")) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        auto [ec, n] = co_await http::async_write(client, cont, as_tuple);
        if (ec)
            co_return refusal{0, "", false, 0, true};
        fc.unread_body = ex.declared_length.value_or(0);
    }
    bp.body_limit(fc.policy->dlp.max_body);
    // Chunk extensions carry nothing sluice forwards (the body is re-framed); a long one
    // is an attack on parsers downstream, so it is refused (RFC 9112 section 7.1.1).
    // The parser keeps a reference to the callback: it lives in this frame, which the
    // whole body read runs in.
    auto on_chunk_header = [](std::uint64_t, beast::string_view extensions, beast::error_code& ec) {
        if (extensions.size() > 256)
            ec = http::error::bad_chunk_extension;
    };
    bp.on_chunk_header(on_chunk_header);
    beast::get_lowest_layer(client).expires_after(client_idle_timeout);
    if (ex.streamed)
        co_return std::nullopt;
    auto [ec, n] = co_await http::async_read(client, cbuf, bp, as_tuple);
    fc.unread_body = 0; // read, or the connection is done
    if (ec == http::error::body_limit)
        co_return refusal{413, "body_too_large"};
    if (ec == http::error::end_of_stream || ec == net::error::eof)
        co_return refusal{0, "", false, 0, true};
    if (ec)
        co_return refusal{400, "bad_request"};
    co_return std::nullopt;
}

// A WebSocket upgrade becomes sluice's own pair of sessions (websocket_relay.hpp) on a
// fresh connection: every message is inspected, the raw head is never forwarded.
template <class ClientStream, class UpstreamStream>
net::awaitable<exchange_end> upgrade_websocket(ClientStream& client, beast::flat_buffer& cbuf,
                                               const http::request<http::string_body>& req,
                                               forward_plan& plan, upstream<UpstreamStream>& up,
                                               exchange& ex, flow_context& fc) {
    // Refusals are named, never temporaries inside `co_return co_await` (ARCHITECTURE.md,
    // "Coroutines": GCC 12 destroys such a temporary twice).
    if (cbuf.size() != 0) { // frames before the 101 (RFC 6455 section 4.1 forbids it)
        const refusal early{400, "bad_request"};
        co_return co_await refuse(client, fc, ex, early);
    }
    if (auto cr = co_await connect_upstream(up, *ex.tgt->dest, fc); cr != connect_result::ok) {
        const refusal failed{502, cr == connect_result::tls_failed ? "upstream_tls"
                                                                   : "upstream_connect"};
        co_return co_await refuse(client, fc, ex, failed);
    }
    std::string_view path = ex.tgt->origin_form;
    path = path.substr(0, path.find('?'));
    auto& rec = ex.rec;
    ws_session_context ws;
    ws.policy = fc.policy;
    ws.rules = fc.gen->settings->rules;
    ws.variants.protect = fc.gen->protect;
    ws.inspect = ex.inspect;
    ws.flow = fc.flow;
    ws.stats = fc.state->stats.get();
    ws.audit = [&fc](audit_record r) { return audit(fc, ws_record(fc, std::move(r))); };
    ws.audit_healthy = [&fc] { return fc.state->audit->healthy(); };
    ws.generation = fc.gen.get();
    ws.refresh = [&fc, tgt = ex.tgt, path, approved = rec.approval.has_value()] {
        return ws_live(fc, *tgt, path, approved);
    };
    ws.masker = &*plan.masker;
    for (const auto& form : plan.live->broker->reflections())
        ws.mask_tail = std::max(ws.mask_tail, form.size() - 1);
    if (fc.state->ctl) {
        if (fc.handle)
            fc.state->ctl->set_destination(*fc.handle, flow_kind::websocket, rec.url);
        ws.hold = [&fc, &client,
                   &rec](std::vector<audit_finding> found) -> net::awaitable<approval_outcome> {
            approval_request held{fc.flow,         fc.identity,           fc.source,
                                  "GET",           scrubbed(fc, rec.url), "dlp_finding",
                                  std::move(found)};
            co_return co_await fc.state->ctl->hold(std::move(held), fc.handle.get(),
                                                   beast::get_lowest_layer(client).socket(),
                                                   fc.gen->settings->supervise_timeout);
        };
    }
    rec.findings = to_audit(ex.findings);
    const auto pinned = fc.gen; // `policy` outlives a reload during the session
    const auto outcome = co_await relay_websocket(client, req, plan.out, *up.stream, ws, rec);
    if (outcome == ws_outcome::upstream_failed || outcome == ws_outcome::upstream_encoded) {
        const refusal failed{502, outcome == ws_outcome::upstream_failed ? "upstream_connect"
                                                                         : "upstream_encoding"};
        co_await refuse(client, fc, ex, failed);
    }
    up.stream.reset();
    co_return exchange_end::close;
}

} // namespace

// The exchange's steps, top to bottom (exchange.hpp): each returns nothing to go on, or
// the refusal this front end answers with.
template <class ClientStream, class UpstreamStream>
net::awaitable<exchange_end> run_exchange(ClientStream& client, beast::flat_buffer& cbuf,
                                          http::request_parser<http::empty_body>& hp,
                                          exchange_target& tgt, upstream<UpstreamStream>& up,
                                          flow_context& fc) {
    exchange ex = begin_exchange(hp, tgt, fc);
    if (auto r = admit(fc, ex))
        co_return co_await refuse(client, fc, ex, *r);
    if (auto r = route(fc, ex, hp.get()))
        co_return co_await refuse(client, fc, ex, *r);
    http::request_parser<http::string_body> bp{std::move(hp)};
    if (auto r = co_await read_request_body(client, cbuf, bp, ex, fc))
        co_return co_await refuse(client, fc, ex, *r);
    auto& req = bp.get();
    if (auto r = charge_upload(fc, ex, req.body().size()))
        co_return co_await refuse(client, fc, ex, *r);
    if (auto r = inspect_request(fc, ex, req))
        co_return co_await refuse(client, fc, ex, *r);
    if (!ex.supervise_reason.empty())
        if (auto r = co_await hold_for_approval(fc, ex, beast::get_lowest_layer(client).socket()))
            co_return co_await refuse(client, fc, ex, *r);
    forward_plan plan;
    if (auto r = prepare_forward(fc, ex, req, plan))
        co_return co_await refuse(client, fc, ex, *r);
    // The previous exchange's record, and this one's decision, are durable before this one
    // sends anything upstream (decide, record, then forward).
    if (!co_await record_start(fc, ex.rec, ex.rec.approval ? "supervise_approved" : "allow", "")) {
        const refusal unrecorded{503, "audit_unavailable"};
        co_return co_await refuse(client, fc, ex, unrecorded);
    }
    if (is_websocket_upgrade(req) && plan.out.body().empty())
        co_return co_await upgrade_websocket(client, cbuf, req, plan, up, ex, fc);
    if (auto r = co_await forward_request(client, cbuf, up, plan, ex, fc))
        co_return co_await refuse(client, fc, ex, *r);
    auto end = co_await relay_response(client, up, plan, ex, fc);
    if (end.refused)
        co_return co_await refuse(client, fc, ex, *end.refused);
    co_await record_exchange(fc, ex, end.relay_ok, *plan.masker);
    co_return end.relay_ok && !end.client_close ? exchange_end::keep_going : exchange_end::close;
}

#define SLUICE_INSTANTIATE(C, U)                                                                   \
    template net::awaitable<exchange_end> run_exchange<C, U>(                                      \
        C&, beast::flat_buffer&, http::request_parser<http::empty_body>&, exchange_target&,        \
        upstream<U>&, flow_context&);
SLUICE_FOR_EACH_STREAM_PAIR(SLUICE_INSTANTIATE)
#undef SLUICE_INSTANTIATE

} // namespace sluice::proxy
