#include "connect_tunnel.hpp"

#include "client_hello.hpp"
#include "client_tls.hpp"
#include "destination.hpp"
#include "exchange_http1.hpp"
#include "flow_audit.hpp"
#include "http1_client.hpp"
#include "stream_types.hpp"
#include "upstream.hpp"

#include "sluice/dlp/hostname.hpp"
#include "sluice/dlp/policy.hpp"
#include "sluice/proxy/certificate_authority.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/url/parse.hpp>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <array>

namespace sluice::proxy {

namespace {

// An opaque tunnel (policy `inspect: false`): bytes both ways, audited as uninspected.
// A tunnel follows the audit: while nothing can be recorded (audit_log::healthy), no
// byte more is relayed and the tunnel closes (its record then fails, and is counted).
template <class From, class To>
net::awaitable<void> pump(From& from, To& to, std::uint64_t& counted, const audit_log& log) {
    std::array<char, tunnel_chunk> buf;
    for (;;) {
        beast::get_lowest_layer(from).expires_after(client_idle_timeout * 5);
        auto [ec, n] = co_await from.async_read_some(net::buffer(buf), as_tuple);
        if (ec || n == 0 || !log.healthy())
            break;
        counted += n;
        beast::get_lowest_layer(to).expires_after(upstream_io_timeout);
        auto [wec, wn] = co_await net::async_write(to, net::buffer(buf.data(), n), as_tuple);
        if (wec)
            break;
    }
    boost::system::error_code ignored;
    beast::get_lowest_layer(to).socket().shutdown(tcp::socket::shutdown_send, ignored);
}

// 200 to a CONNECT (RFC 9110 section 9.3.6), naming the flow. A coroutine of its own, so
// the response and its serializer are not kept in the tunnel's frame for its whole life.
template <class Stream>
net::awaitable<bool> answer_connect(Stream& client, const flow_context& fc) {
    http::response<http::empty_body> ok{http::status::ok, 11};
    ok.set("X-Sluice-Flow", fc.flow);
    ok.keep_alive(true);
    http::response_serializer<http::empty_body> sr{ok};
    auto [ec, n] = co_await http::async_write_header(client, sr, as_tuple);
    co_return !ec;
}

// The client's first flight in an opaque tunnel, up to the end of its ClientHello. The
// tunnel carries bytes to the host its CONNECT named, and only there: a ClientHello whose
// server name is another host (domain fronting past a rule on that name, refused in an
// intercepted tunnel too) or that OpenSSL cannot read is answered with the alert OpenSSL
// wrote, and nothing reaches the upstream. Bytes that are not TLS pass as they are (the
// policy made the tunnel opaque). Empty: passed on (counted); else the refusal's reason.
template <class ClientStream, class Upstream>
net::awaitable<std::string_view> first_flight(ClientStream& client, Upstream& up,
                                              beast::flat_buffer& cbuf, const destination& d,
                                              std::uint64_t& counted, const flow_context& fc) {
    client_hello_probe probe;
    for (std::size_t fed = 0;;) {
        const auto* p = static_cast<const char*>(cbuf.data().data());
        probe.feed(std::string_view(p + fed, cbuf.size() - fed));
        fed = cbuf.size();
        if (probe.current() != client_hello_probe::state::need_more)
            break;
        beast::get_lowest_layer(client).expires_after(fed == 0 ? client_idle_timeout * 5
                                                               : tls_handshake_timeout);
        auto [ec, n] = co_await client.async_read_some(cbuf.prepare(tunnel_chunk), as_tuple);
        if (ec || n == 0) {
            cbuf.consume(cbuf.size()); // the client left: what it began is not passed on
            co_return "";
        }
        cbuf.commit(n);
    }
    using st = client_hello_probe::state;
    const st s = probe.current();
    const bool other_name = s == st::named && dlp::normalize_host(probe.name()) != d.host;
    if (other_name || s == st::malformed) {
        // Neither name goes into the log: the refused one was never inspected.
        spdlog::info("flow {}: opaque tunnel refused: {}", fc.flow,
                     other_name ? "the TLS ClientHello names another host than the CONNECT"
                                : "the TLS ClientHello cannot be read");
        if (!probe.alert().empty())
            co_await net::async_write(client, net::buffer(probe.alert()), as_tuple);
        cbuf.consume(cbuf.size());
        co_return other_name ? "policy_deny" : "client_tls";
    }
    if (!fc.state->audit->healthy())
        co_return "audit_unavailable";
    counted += cbuf.size();
    beast::get_lowest_layer(up).expires_after(upstream_io_timeout);
    auto [wec, wn] = co_await net::async_write(up, cbuf.data(), as_tuple);
    cbuf.consume(cbuf.size());
    cbuf.shrink_to_fit(); // the pumps have buffers of their own for the tunnel's life
    co_return wec ? std::string_view("relay_interrupted") : std::string_view();
}

// The client's side of an opaque tunnel: its first flight checked, then every byte.
// A refusal closes the upstream leg, so that the other direction ends too.
template <class ClientStream, class Upstream>
net::awaitable<void> client_side(ClientStream& client, Upstream& up, beast::flat_buffer& cbuf,
                                 const destination& d, audit_record& rec, const flow_context& fc,
                                 std::string_view& refused) {
    refused = co_await first_flight(client, up, cbuf, d, rec.bytes_up, fc);
    if (refused.empty()) {
        co_await pump(client, up, rec.bytes_up, *fc.state->audit);
        co_return;
    }
    boost::system::error_code ignored;
    beast::get_lowest_layer(up).socket().close(ignored);
}

template <class ClientStream>
net::awaitable<void> opaque_tunnel(ClientStream& client, beast::flat_buffer& cbuf, destination& d,
                                   flow_context& fc, audit_record&& rec) {
    using namespace net::experimental::awaitable_operators;
    auto started = std::chrono::steady_clock::now();
    rec.inspected = false;
    // Recorded before the tunnel carries a byte; a denial below completes the record.
    if (!co_await record_start(fc, rec, "allow", "uninspected")) {
        co_await deny(client, fc, 503, "audit_unavailable", rec, {}, false);
        co_return;
    }
    upstream<beast::tcp_stream> up;
    auto up_hook = close_on_kill(fc, up);
    if (co_await connect_upstream(up, d, fc) != connect_result::ok) {
        co_await deny(client, fc, 502, "upstream_connect", rec, {}, false);
        co_return;
    }
    const bool answered = co_await answer_connect(client, fc);
    const audit_log& log = *fc.state->audit;
    std::string_view refused;
    if (answered)
        co_await (client_side(client, *up.stream, cbuf, d, rec, fc, refused) &&
                  pump(*up.stream, client, rec.bytes_down, log));
    rec.decision = refused.empty() || refused == "relay_interrupted" ? "allow" : "deny";
    rec.reason = !answered          ? "relay_interrupted"
                 : killed_now(fc)   ? kill_reason(fc)
                 : !refused.empty() ? std::string(refused)
                                    : "uninspected";
    rec.inspected = false;
    rec.duration_ms = elapsed_ms(started);
    audit(fc, std::move(rec));
}

// TLS inside TLS (CONNECT on an HTTPS proxy listener): ref_layer.hpp.
template <class S>
struct tls_layer {
    using type = ref_layer<S>;
    static type make(S& s) { return type(s); }
};
template <>
struct tls_layer<beast::tcp_stream> {
    using type = beast::tcp_stream;
    // Beast's basic_stream leaves a valid, closed stream behind when moved from.
    static type make(beast::tcp_stream& s) { return type(std::move(s)); }
};

// The CONNECT's checks, up to its 200: fills `d` and `leaf` and returns true when the
// tunnel is to be intercepted; answers (deny, or an opaque tunnel to its end) and returns
// false otherwise. Its own coroutine, so what only the checks need is not kept in the
// interception's frame while the connection idles.
template <class ClientStream>
net::awaitable<bool> admit_connect(ClientStream& client, beast::flat_buffer& cbuf,
                                   http::request_parser<http::empty_body>& hp, flow_context& fc,
                                   destination& d, std::shared_ptr<ssl::context>& leaf) {
    audit_record rec;
    rec.method = "CONNECT";
    rec.url = std::string(hp.get().target());

    auto auth = boost::urls::parse_authority(hp.get().target());
    if (!auth || !auth->has_port() || auth->port_number() == 0 || auth->has_userinfo()) {
        co_await deny(client, fc, 400, "bad_request", rec, {}, false);
        co_return false;
    }
    d.host = dlp::normalize_host(auth->encoded_host_address());
    d.port = auth->port_number();
    if (d.host.empty()) {
        co_await deny(client, fc, 400, "bad_request", rec, {}, false);
        co_return false;
    }
    rec.url = host_port(d, 0);
    // Identity, then policy on the normalised name, then DLP on the name, then
    // resolution, then the address check: a denied or secret-bearing name is never
    // resolved.
    const auto* rule = dlp::match_rule(*fc.policy, d.host, d.port, "", "", true);
    if (rule == nullptr || rule->act == dlp::action::deny) {
        co_await deny(client, fc, 403, "policy_deny", rec, {}, false);
        co_return false;
    }
    if (!co_await admit_destination(client, fc, d, "", rec, &hp.get()))
        co_return false;
    if (fc.handle)
        fc.state->ctl->set_destination(*fc.handle, flow_kind::tunnel, rec.url);
    // No co_await inside a switch (docs/ARCHITECTURE.md, "Coroutines").
    if (const auto resolved = co_await resolve_destination(d, *fc.policy);
        resolved != resolve_result::ok) {
        const bool failed = resolved == resolve_result::failed;
        co_await deny(client, fc, failed ? 502 : 403,
                      failed ? "upstream_connect" : "private_destination", rec, {}, false);
        co_return false;
    }
    // An opaque tunnel could carry a request that an earlier method- or path-constrained
    // deny or supervise rule must decide, or one for another name of the same server that
    // an earlier rule refuses (the Host field picks the name, and only an intercepted
    // tunnel checks it): then the tunnel is intercepted instead.
    bool opaque =
        !rule->inspect && !dlp::constrained_rule_precedes(*fc.policy, *rule, d.host, d.port);
    if (opaque)
        opaque =
            !co_await reaches_same_server(d, dlp::refusing_hosts_before(*fc.policy, *rule, d.port));
    if (opaque) {
        // An opaque tunnel's requests are invisible: the CONNECT itself is the request
        // that counts against `requests_per_minute` (its bytes are not metered).
        if (auto wait = fc.state->limits.admit_request(fc.identity, fc.policy->limits); wait != 0) {
            co_await deny_limited(client, fc, "rate_limit", wait, rec, false);
            co_return false;
        }
        // An allowed exchange before this CONNECT on the same connection: its record is
        // durable before the tunnel carries a byte (as before any upstream write).
        if (!co_await settle_audit(fc)) {
            co_await deny(client, fc, 503, "audit_unavailable", rec, {}, false);
            co_return false;
        }
        co_await opaque_tunnel(client, cbuf, d, fc, std::move(rec));
        co_return false;
    }

    leaf = fc.state->ca->server_context(d.host);
    if (!leaf) {
        co_await deny(client, fc, 500, "internal", rec, {}, false);
        co_return false;
    }
    co_return co_await answer_connect(client, fc);
}

} // namespace

net::awaitable<void> record_client_tls(flow_context& fc, boost::system::error_code ec,
                                       const destination* d) {
    auto reason = client_tls_reason(ec);
    spdlog::info("flow {}: {} TLS handshake failed (source client): {} ({})", fc.flow,
                 d ? "client" : "proxy listener", ec.message(), reason);
    if (fc.state->stats)
        fc.state->stats->on_client_tls_error(reason);
    if (d && client_distrusts_certificate(reason))
        hint_client_tls(fc.flow, fc.source, reason, fc.gen->settings->ca_cert);
    audit_record rec;
    rec.method = d ? "CONNECT" : "";
    rec.url = d ? host_port(*d, 0) : "";
    rec.decision = "deny";
    rec.reason = "client_tls";
    if (co_await settle_audit(fc)) // in order after the connection's last exchange
        audit(fc, std::move(rec));
}

namespace {

// Waits (within the handshake deadline) for the first bytes of the client's ClientHello.
// Until they come, an answered CONNECT holds no TLS state: the SSL object and OpenSSL's
// handshake buffers (init and read buffers, ~33 KiB, allocated by the first
// SSL_do_handshake) cost more than an idle intercepted connection. False: nothing came.
template <class Stream>
net::awaitable<bool> await_client_hello(Stream& client, beast::flat_buffer& buf) {
    if (buf.size() != 0)
        co_return true; // sent along with the CONNECT
    beast::get_lowest_layer(client).expires_after(tls_handshake_timeout);
    auto [ec, n] = co_await client.async_read_some(buf.prepare(idle_read_size), as_tuple);
    if (ec)
        co_return false;
    buf.commit(n);
    co_return true;
}

} // namespace

template <class ClientStream>
net::awaitable<void> handle_connect(ClientStream& client, beast::flat_buffer& cbuf,
                                    http::request_parser<http::empty_body>& hp, flow_context& fc) {
    destination d;
    std::shared_ptr<ssl::context> leaf;
    if (!co_await admit_connect(client, cbuf, hp, fc, d, leaf))
        co_return;
    if (!co_await await_client_hello(client, cbuf)) {
        spdlog::info("flow {}: no TLS handshake after CONNECT (source client)", fc.flow);
        co_return;
    }

    // Not asio's ssl::stream: tls_stream.hpp keeps an idle connection small.
    tls_stream<typename tls_layer<ClientStream>::type> tls(tls_layer<ClientStream>::make(client),
                                                           *leaf);
    auto tls_hook = close_on_kill(fc, tls);
    beast::get_lowest_layer(tls).expires_after(tls_handshake_timeout);
    auto [hec, used] =
        co_await tls.async_handshake(ssl::stream_base::server, cbuf.data(), as_tuple);
    if (hec) {
        co_await record_client_tls(fc, hec, &d);
        co_return;
    }
    cbuf.consume(used);
    // The SNI must name the CONNECT host (domain fronting is denied).
    const char* sni = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
    const bool sni_mismatch = sni != nullptr && dlp::normalize_host(sni) != d.host;

    upstream<upstream_tls> up;
    auto up_hook = close_on_kill(fc, up);
    exchange_target tgt;
    tgt.scheme = "https";
    tgt.dest = &d;
    tgt.host_header = host_port(d, 443);
    for (;;) {
        http::request_parser<http::empty_body> inner;
        if (!co_await read_head(tls, cbuf, inner, fc))
            break;
        if (!tunnel_origin_form(inner.get().target(), d, tgt) ||
            inner.get().method() == http::verb::connect || sni_mismatch ||
            !host_field_matches(inner.get(), d, 443)) {
            co_await deny_bad_request(tls, fc, inner.get().method_string(),
                                      "https://" + tgt.host_header);
            break;
        }
        auto end = co_await run_exchange(tls, cbuf, inner, tgt, up, fc);
        if (fc.unread_body != 0) { // refused with its body still coming
            co_await linger(tls, cbuf, fc);
            break;
        }
        if (end != exchange_end::keep_going)
            break;
    }
    beast::get_lowest_layer(tls).expires_after(2s);
    co_await tls.async_shutdown(as_tuple);
}

template net::awaitable<void> handle_connect<plain_stream>(plain_stream&, beast::flat_buffer&,
                                                           http::request_parser<http::empty_body>&,
                                                           flow_context&);
template net::awaitable<void>
handle_connect<listener_tls_stream>(listener_tls_stream&, beast::flat_buffer&,
                                    http::request_parser<http::empty_body>&, flow_context&);

} // namespace sluice::proxy
