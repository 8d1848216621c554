// The WebSocket session pair (websocket_relay.hpp): the coroutine bodies, run over
// any_stream, and the explicit instantiations for the stream pairs the exchange runs on.
// Beast's WebSocket templates (with permessage-deflate) are compiled once, for
// any_stream, in this translation unit.
#include "any_stream.hpp"
#include "http_fields.hpp"
#include "ref_layer.hpp"
#include "tls_stream.hpp"
#include "websocket_relay.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace sluice::proxy {

namespace ws_detail {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
inline constexpr auto as_tuple = net::as_tuple(net::use_awaitable);

inline constexpr auto handshake_timeout = std::chrono::seconds(15);
inline constexpr auto idle_timeout = std::chrono::seconds(300);

/// Fields of the client's upgrade request (as brokered) that go to the origin: not the
/// ones Beast writes itself for its own handshake.
bool forwarded_field(std::string_view name);

struct session_state {
    audit_record rec;
    const void* generation = nullptr; ///< the configuration messages are decided under
    std::shared_ptr<const void> keep; ///< keeps that configuration live
    std::uint64_t messages_up = 0;
    std::uint64_t messages_down = 0;
    bool closing = false; ///< one side started shutting the session down
    bool interrupted = false;
};

template <class WsFrom, class WsTo>
net::awaitable<void> close_pair(WsFrom& a, WsTo& b, websocket::close_reason why) {
    co_await a.async_close(why, as_tuple);
    co_await b.async_close(why, as_tuple);
}

/// Payload bytes read per step while a message is assembled.
inline constexpr std::size_t read_step = 64 * 1024;

/// Reads one whole message into `buf`, refusing it as soon as it holds more than
/// `max_message` bytes (decompressed): `too_big` is then set and the rest is not read.
/// Checked here rather than by Beast's read_message_max alone, whose error is replaced
/// by the TLS teardown's when it closes the session itself.
template <class Ws>
net::awaitable<std::tuple<boost::system::error_code, std::size_t, bool>>
read_message(Ws& ws, beast::flat_buffer& buf, std::size_t max_message) {
    std::size_t total = 0;
    for (;;) {
        auto [ec, n] = co_await ws.async_read_some(buf, read_step, as_tuple);
        total += n;
        if (ec)
            co_return std::tuple{ec, total, false};
        if (buf.size() > max_message)
            co_return std::tuple{boost::system::error_code{}, total, true};
        if (ws.is_message_done())
            co_return std::tuple{boost::system::error_code{}, total, false};
    }
}

// One client message refused: its record, then both sides closed with `why`.
template <class WsClient, class WsUp>
net::awaitable<void> refuse_message(WsClient& cl, WsUp& up, ws_session_context& ctx,
                                    session_state& st, std::string reason,
                                    std::vector<audit_finding> found, websocket::close_reason why) {
    st.closing = true;
    audit_record r = st.rec;
    r.decision = "deny";
    r.reason = std::move(reason);
    r.findings = std::move(found);
    r.bytes_up = r.bytes_down = 0;
    if (ctx.stats)
        ctx.stats->on_ws_message("up", "deny");
    ctx.audit(std::move(r));
    co_await close_pair(up, cl, why);
}

// Before a client message is inspected: the audit can take records, and the live
// configuration still allows the session. After a reload the inspector is rebuilt under
// the live policy and rules, carrying the tail. Empty: go on; else why the session ends.
std::optional<std::string> live_gate(ws_session_context& ctx, session_state& st,
                                     std::unique_ptr<ws_message_inspector>& ins) {
    if (ctx.audit_healthy && !ctx.audit_healthy())
        return "audit_unavailable";
    if (!ctx.refresh)
        return std::nullopt;
    std::optional<ws_live_config> now = ctx.refresh();
    if (!now)
        return "policy_deny";
    if (now->generation == st.generation)
        return std::nullopt;
    std::unique_ptr<ws_message_inspector> next;
    if (now->inspect) {
        next = std::make_unique<ws_message_inspector>(*now->policy, now->rules, now->variants,
                                                      ws_message_inspector::tail_for(*now->rules));
        if (ins)
            next->continue_from(*ins);
    }
    ins = std::move(next);
    st.generation = now->generation;
    st.keep = std::move(now->keep);
    return std::nullopt;
}

// The verdict on one client message (inspected, held for a person if it must be): true
// to relay it, false when the session was closed here (its record written).
template <class WsClient, class WsUp>
net::awaitable<bool> decide_message(WsClient& cl, WsUp& up, ws_session_context& ctx,
                                    session_state& st, ws_message_inspector& ins,
                                    std::string_view msg) {
    auto started = std::chrono::steady_clock::now();
    dlp::verdict v = ins.on_message(msg);
    if (ctx.stats)
        count_scan(*ctx.stats, started, msg.size());
    std::vector<audit_finding> found;
    for (const auto& f : v.findings)
        found.push_back({f.rule, f.location, f.variant, f.offset, f.fingerprint});
    if (v.kind == dlp::verdict_kind::supervise && ctx.hold) {
        auto out = co_await ctx.hold(found);
        audit_record r = st.rec;
        r.findings = found;
        r.bytes_up = r.bytes_down = 0;
        r.approval = audit_approval{out.id, out.by, out.at, out.reason};
        using k = approval_outcome::kind;
        if (out.result == k::approved) {
            r.decision = "supervise_approved";
            if (!ctx.audit(std::move(r))) { // not relayed without its record
                co_await refuse_message(cl, up, ctx, st, "audit_unavailable", {},
                                        websocket::close_code::internal_error);
                co_return false;
            }
            co_return true; // its findings are recorded with the approval, not again
        }
        st.closing = true;
        r.decision = "supervise_denied";
        r.reason = out.result == k::denied      ? "approval_denied"
                   : out.result == k::timed_out ? "approval_timeout"
                   : out.result == k::withdrawn ? "approval_withdrawn"
                                                : "killed";
        if (ctx.stats)
            ctx.stats->on_ws_message("up", "deny");
        ctx.audit(std::move(r));
        if (out.result == k::denied || out.result == k::timed_out) {
            co_await close_pair(up, cl, websocket::close_code::policy_error);
        } else {
            st.interrupted = true;
            co_await up.async_close(websocket::close_code::going_away, as_tuple);
        }
        co_return false;
    }
    if (v.kind != dlp::verdict_kind::forward) {
        std::string reason =
            v.kind == dlp::verdict_kind::supervise ? "approval_unavailable" : v.reason;
        co_await refuse_message(cl, up, ctx, st, std::move(reason), std::move(found),
                                v.status == 500 ? websocket::close_code::internal_error
                                                : websocket::close_code::policy_error);
        co_return false;
    }
    // Logged findings (on_finding: log) go into the session's record.
    for (auto& f : found)
        st.rec.findings.push_back(std::move(f));
    co_return true;
}

// A client read that ended the session: the close is passed on to the origin.
template <class WsClient, class WsUp>
net::awaitable<void> client_ended(WsClient& cl, WsUp& up, session_state& st,
                                  boost::system::error_code ec) {
    if (st.closing)
        co_return;
    st.closing = true;
    if (ec == websocket::error::closed) {
        // The client closed: pass its code on (not its reason text, unscanned).
        websocket::close_reason why(cl.reason().code);
        co_await up.async_close(why, as_tuple);
    } else if (ec == websocket::error::message_too_big) {
        // Beast's backstop limit (not reached while read_message checks first).
        co_await up.async_close(websocket::close_code::too_big, as_tuple);
    } else {
        st.interrupted = true;
        co_await up.async_close(websocket::close_code::going_away, as_tuple);
    }
}

// Client to origin: whole messages, each decided under the live configuration and
// inspected before a byte of it goes upstream.
template <class WsClient, class WsUp>
net::awaitable<void> pump_up(WsClient& cl, WsUp& up, ws_session_context& ctx, session_state& st,
                             std::unique_ptr<ws_message_inspector>& ins, std::size_t max_message) {
    beast::flat_buffer buf;
    for (;;) {
        auto [ec, n, too_big] = co_await read_message(cl, buf, max_message);
        if (too_big) { // 1009 both ways; the message never went upstream
            co_await refuse_message(cl, up, ctx, st, "body_too_large", {},
                                    websocket::close_code::too_big);
            co_return;
        }
        if (ec) {
            co_await client_ended(cl, up, st, ec);
            co_return;
        }
        const bool text = cl.got_text();
        if (auto why = live_gate(ctx, st, ins)) {
            co_await refuse_message(cl, up, ctx, st, *why, {},
                                    *why == "audit_unavailable"
                                        ? websocket::close_code::internal_error
                                        : websocket::close_code::policy_error);
            co_return;
        }
        std::string_view msg(static_cast<const char*>(buf.data().data()), buf.size());
        if (ins && !co_await decide_message(cl, up, ctx, st, *ins, msg))
            co_return;
        ++st.messages_up;
        st.rec.bytes_up += n;
        if (ctx.stats)
            ctx.stats->on_ws_message("up", "allow");
        up.text(text);
        auto [wec, wn] = co_await up.async_write(buf.data(), as_tuple);
        buf.consume(buf.size());
        if (wec) {
            if (!st.closing) {
                st.closing = true;
                st.interrupted = true;
                co_await cl.async_close(websocket::close_code::going_away, as_tuple);
            }
            co_return;
        }
    }
}

// Origin to client: relayed as they come, type preserved, brokered secrets masked.
// One origin message masked for brokered secrets into `masked`, together with `tail`
// (the last bytes of the earlier messages, as received): a secret split across messages
// is masked in this message's part too. Returns the bytes of this message masked.
std::size_t mask_message(const dlp::secret_masker& masker, std::size_t keep, std::string& tail,
                         std::string_view message, std::string& masked) {
    std::string joined = tail;
    joined.append(message);
    masker.mask(joined);
    masked.assign(joined, tail.size(), std::string::npos);
    std::size_t n = 0;
    for (std::size_t i = 0; i < message.size(); ++i)
        n += masked[i] != message[i];
    tail.append(message);
    if (tail.size() > keep)
        tail.erase(0, tail.size() - keep);
    return n;
}

template <class WsUp, class WsClient>
net::awaitable<void> pump_down(WsUp& up, WsClient& cl, ws_session_context& ctx, session_state& st) {
    beast::flat_buffer buf;
    std::string masked;
    std::string tail; // the origin's last ctx.mask_tail bytes, unmasked
    for (;;) {
        auto [ec, n] = co_await up.async_read(buf, as_tuple);
        if (ec) {
            if (st.closing)
                co_return;
            st.closing = true;
            if (ec == websocket::error::closed) {
                websocket::close_reason why = up.reason();
                if (ctx.masker != nullptr && ctx.masker->active()) {
                    std::string reason(why.reason.data(), why.reason.size());
                    st.rec.masked_bytes += ctx.masker->mask(reason);
                    why.reason = reason;
                }
                co_await cl.async_close(why, as_tuple);
            } else if (ec == websocket::error::message_too_big) {
                co_await cl.async_close(websocket::close_code::too_big, as_tuple);
            } else {
                st.interrupted = true;
                co_await cl.async_close(websocket::close_code::going_away, as_tuple);
            }
            co_return;
        }
        const bool text = up.got_text();
        ++st.messages_down;
        st.rec.bytes_down += n;
        if (ctx.stats)
            ctx.stats->on_ws_message("down", "allow");
        cl.text(text);
        boost::system::error_code wec;
        if (ctx.masker != nullptr && ctx.masker->active()) {
            const std::string message = beast::buffers_to_string(buf.data());
            st.rec.masked_bytes += mask_message(*ctx.masker, ctx.mask_tail, tail, message, masked);
            std::tie(wec, std::ignore) = co_await cl.async_write(net::buffer(masked), as_tuple);
        } else {
            std::tie(wec, std::ignore) = co_await cl.async_write(buf.data(), as_tuple);
        }
        buf.consume(buf.size());
        if (wec) {
            if (!st.closing) {
                st.closing = true;
                st.interrupted = true;
                co_await up.async_close(websocket::close_code::going_away, as_tuple);
            }
            co_return;
        }
    }
}

template <class Ws>
void common_options(Ws& ws, std::size_t max_message, bool server) {
    websocket::stream_base::timeout t{};
    t.handshake_timeout = handshake_timeout;
    t.idle_timeout = idle_timeout;
    t.keep_alive_pings = true;
    ws.set_option(t);
    websocket::permessage_deflate pmd;
    pmd.server_enable = server;
    pmd.client_enable = !server;
    ws.set_option(pmd);
    ws.read_message_max(max_message);
    ws.auto_fragment(false);
}

using request = http::request<http::string_body>;

// The subprotocols a request offers, in order (RFC 6455 section 11.3.4: a comma-separated
// list, possibly over several fields).
std::vector<std::string> offers(const request& r) {
    std::vector<std::string> out;
    const auto range = r.equal_range(http::field::sec_websocket_protocol);
    for (auto it = range.first; it != range.second; ++it) {
        std::string_view v = it->value();
        while (!v.empty()) {
            const std::size_t comma = std::min(v.find(','), v.size());
            std::string_view item = v.substr(0, comma);
            while (!item.empty() && (item.front() == ' ' || item.front() == '\t'))
                item.remove_prefix(1);
            while (!item.empty() && (item.back() == ' ' || item.back() == '\t'))
                item.remove_suffix(1);
            if (!item.empty())
                out.emplace_back(item);
            v.remove_prefix(std::min(comma + 1, v.size()));
        }
    }
    return out;
}

// The origin's subprotocol choice (`chosen`, from its 101) as the client offered it.
// The upstream offer is the client's with brokered values in place of placeholders:
// the choice is answered by its position, or, when a credential's template changed the
// number of items, as the client's only offer. Empty when none was chosen; nullopt when
// the choice was not offered (RFC 6455 section 4.1: the handshake fails). Either way no
// brokered value, nor anything else of the origin's, reaches the client's 101.
std::optional<std::string> offered_choice(const request& client, const request& upstream,
                                          std::string_view chosen) {
    if (chosen.empty())
        return std::string();
    const auto mine = offers(client);
    const auto sent = offers(upstream);
    const auto at = std::find(sent.begin(), sent.end(), chosen);
    if (at == sent.end())
        return std::nullopt;
    if (mine.size() == sent.size())
        return mine[static_cast<std::size_t>(at - sent.begin())];
    if (mine.size() == 1)
        return mine.front();
    return std::nullopt;
}

// The session over erased streams; `client_tcp` and `upstream_tcp` are their lowest
// layers (deadlines).
net::awaitable<ws_outcome> relay_any(any_stream& client, beast::tcp_stream& client_tcp,
                                     const request& req, const request& out, any_stream& upstream,
                                     beast::tcp_stream& upstream_tcp, ws_session_context& ctx,
                                     audit_record& rec) {
    using namespace boost::asio::experimental::awaitable_operators;
    auto started = std::chrono::steady_clock::now();
    const std::size_t max_message = ctx.policy->dlp.max_body;

    // The websocket streams keep their own deadlines (ws_detail timeouts).
    client_tcp.expires_never();
    upstream_tcp.expires_never();

    websocket::stream<any_stream&> up(upstream);
    common_options(up, max_message, false);
    up.set_option(websocket::stream_base::decorator([&out](websocket::request_type& r) {
        std::vector<std::string> replaced;
        for (const auto& f : out) {
            std::string name(f.name_string());
            if (!forwarded_field(name))
                continue;
            if (std::find(replaced.begin(), replaced.end(), name) == replaced.end()) {
                r.erase(name);
                replaced.push_back(name);
            }
            r.insert(f.name_string(), f.value());
        }
    }));
    websocket::response_type res;
    auto [hec] = co_await up.async_handshake(res, out[http::field::host], out.target(), as_tuple);
    if (hec == websocket::error::upgrade_declined) {
        // The origin answered, just not with 101: that answer is the client's (masked).
        // A coded body would hide a brokered secret from the masker: refused instead.
        if (ctx.masker != nullptr && ctx.masker->active() && !only_identity_coded(res))
            co_return ws_outcome::upstream_encoded;
        // By number: result() is status::unknown for codes Beast has no name for (418).
        http::response<http::string_body> answer;
        answer.version(11);
        answer.result(res.result_int());
        std::string reason(res.reason());
        if (ctx.masker != nullptr)
            rec.masked_bytes += ctx.masker->mask(reason);
        answer.reason(reason);
        for (const auto& f : res) {
            if (f.name() == http::field::connection || f.name() == http::field::keep_alive ||
                f.name() == http::field::transfer_encoding ||
                f.name() == http::field::content_length || f.name() == http::field::upgrade)
                continue;
            std::string v(f.value());
            if (ctx.masker != nullptr)
                rec.masked_bytes += ctx.masker->mask(v);
            answer.insert(f.name_string(), v);
        }
        answer.body() = std::move(res.body());
        if (ctx.masker != nullptr)
            rec.masked_bytes += ctx.masker->mask(answer.body());
        answer.keep_alive(false);
        answer.prepare_payload();
        client_tcp.expires_after(handshake_timeout);
        auto [wec, wn] = co_await http::async_write(client, answer, as_tuple);
        rec.decision = rec.approval ? "supervise_approved" : "allow";
        rec.reason = wec ? "relay_interrupted" : "";
        rec.bytes_down = answer.body().size();
        rec.duration_ms =
            static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - started)
                                           .count());
        ctx.audit(rec);
        co_return ws_outcome::answered;
    }
    if (hec)
        co_return ws_outcome::upstream_failed;

    // The client's session: the origin's subprotocol choice as the client offered it, our
    // own extension answer.
    const auto protocol = offered_choice(req, out, res[http::field::sec_websocket_protocol]);
    if (!protocol)
        co_return ws_outcome::upstream_failed;
    websocket::stream<any_stream&> cl(client);
    common_options(cl, max_message, true);
    // read_message enforces max_message; Beast's own limit is only a backstop above it.
    cl.read_message_max(max_message + read_step + 1);
    cl.set_option(websocket::stream_base::decorator([&](websocket::response_type& r) {
        r.erase(http::field::server);
        if (!protocol->empty())
            r.set(http::field::sec_websocket_protocol, *protocol);
        r.set("X-Sluice-Flow", ctx.flow);
    }));
    auto [aec] = co_await cl.async_accept(req, as_tuple);
    session_state st;
    st.rec = rec;
    st.rec.websocket = true;
    if (aec) {
        co_await up.async_close(websocket::close_code::going_away, as_tuple);
        st.interrupted = true;
    } else {
        std::unique_ptr<ws_message_inspector> ins;
        if (ctx.inspect)
            ins = std::make_unique<ws_message_inspector>(
                *ctx.policy, ctx.rules, ctx.variants, ws_message_inspector::tail_for(*ctx.rules));
        st.generation = ctx.generation;
        co_await (pump_up(cl, up, ctx, st, ins, max_message) && pump_down(up, cl, ctx, st));
    }
    // A session whose upgrade was approved is recorded as such, like an approved request.
    st.rec.decision = st.rec.approval ? "supervise_approved" : "allow";
    st.rec.reason = st.interrupted ? "relay_interrupted" : "";
    st.rec.ws_messages_up = st.messages_up;
    st.rec.ws_messages_down = st.messages_down;
    st.rec.duration_ms =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now() - started)
                                       .count());
    ctx.audit(std::move(st.rec));
    co_return ws_outcome::relayed;
}

} // namespace ws_detail

template <class ClientStream, class UpstreamStream>
boost::asio::awaitable<ws_outcome>
relay_websocket(ClientStream& client, const ws_detail::request& req, const ws_detail::request& out,
                UpstreamStream& upstream, ws_session_context& ctx, audit_record& rec) {
    any_stream c(client);
    any_stream u(upstream);
    co_return co_await ws_detail::relay_any(c, boost::beast::get_lowest_layer(client), req, out, u,
                                            boost::beast::get_lowest_layer(upstream), ctx, rec);
}

// The stream pairs of flow.cpp's run_exchange: plain client (absolute-form ws://), TLS
// proxy listener client (ws://), intercepted CONNECT (wss://), and CONNECT inside an
// HTTPS proxy listener (TLS inside TLS). Both legs of an intercepted CONNECT are
// tls_stream (tls_stream.hpp); a proxy listener's own TLS is Beast's ssl_stream.
namespace {
using tcp_s = boost::beast::tcp_stream;
using tls_s = boost::beast::ssl_stream<tcp_s>;
using mitm_s = tls_stream<tcp_s>;
using inner_s = tls_stream<ref_layer<tls_s>>;
using request = boost::beast::http::request<boost::beast::http::string_body>;
} // namespace

template boost::asio::awaitable<ws_outcome> relay_websocket<tcp_s, tcp_s>(tcp_s&, const request&,
                                                                          const request&, tcp_s&,
                                                                          ws_session_context&,
                                                                          audit_record&);
template boost::asio::awaitable<ws_outcome> relay_websocket<tls_s, tcp_s>(tls_s&, const request&,
                                                                          const request&, tcp_s&,
                                                                          ws_session_context&,
                                                                          audit_record&);
template boost::asio::awaitable<ws_outcome> relay_websocket<mitm_s, mitm_s>(mitm_s&, const request&,
                                                                            const request&, mitm_s&,
                                                                            ws_session_context&,
                                                                            audit_record&);
template boost::asio::awaitable<ws_outcome>
relay_websocket<inner_s, mitm_s>(inner_s&, const request&, const request&, mitm_s&,
                                 ws_session_context&, audit_record&);

} // namespace sluice::proxy
