// One client connection's walk (flow.hpp): who is calling, then absolute-form http://
// exchanges or one CONNECT (connect_tunnel.hpp). Each request is an exchange
// (exchange.hpp) run by the HTTP/1.1 front end (exchange_http1.hpp).
#include "flow.hpp"

#include "connect_tunnel.hpp"
#include "destination.hpp"
#include "exchange_http1.hpp"
#include "flow_audit.hpp"
#include "flow_context.hpp"
#include "http1_client.hpp"
#include "stream_types.hpp"
#include "upstream.hpp"

#include "sluice/dlp/caller.hpp"
#include "sluice/dlp/policy.hpp"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include <optional>

namespace sluice::proxy {

namespace {

// An absolute-form request's checks before its name is resolved, in the same order as a
// CONNECT's: policy on the normalised name with this request's method and path, then
// DLP on the name. A denied or secret-bearing name is never resolved. Otherwise the
// client has its answer: the connection serves the next request (a refused request
// without a body, on a keep-alive connection) or is done.
enum class admitted { go, next_request, close };
template <class ClientStream>
net::awaitable<admitted> admit_absolute(ClientStream& client, beast::flat_buffer& cbuf,
                                        http::request_parser<http::empty_body>& hp,
                                        const destination& d, const exchange_target& tgt,
                                        flow_context& fc, audit_record& rec) {
    std::string_view path = tgt.origin_form;
    path = path.substr(0, path.find('?'));
    const auto* rule =
        dlp::match_rule(*fc.policy, d.host, d.port, hp.get().method_string(), path, false);
    if (rule == nullptr || rule->act == dlp::action::deny) {
        // A declared body is read off before the close (a lingering close).
        const bool expects_continue = beast::iequals(hp.get()[http::field::expect], "100-continue");
        fc.unread_body = expects_continue ? 0 : hp.content_length().value_or(0);
        const bool keep = hp.get().keep_alive() && hp.get().payload_size().value_or(1) == 0;
        bool ok = co_await deny(client, fc, 403, "policy_deny", rec, {}, keep);
        if (fc.unread_body != 0)
            co_await linger(client, cbuf, fc);
        co_return ok&& keep ? admitted::next_request : admitted::close;
    }
    co_return co_await admit_destination(client, fc, d, "http://", rec) ? admitted::go
                                                                        : admitted::close;
}

// Who is calling, per request head (a Proxy-Authorization may come with any), and
// whether that caller may be served on this connection: not killed, a policy, under its
// connection limit, and the audit writable (no tunnel either while nothing can be
// recorded). Sets fc.gen (the configuration in force for this request), fc.identity and
// fc.policy.
step_result identify(flow_context& fc, dlp::caller_evidence& evidence, const http::fields& head) {
    auto pa = head.find(http::field::proxy_authorization);
    evidence.proxy_authorization.reset();
    if (pa != head.end())
        evidence.proxy_authorization = std::string(pa->value());
    fc.gen = fc.state->current.load();
    fc.policy = nullptr;
    auto who = dlp::resolve_caller(fc.gen->settings->identities, evidence);
    fc.identity = who.identity.value_or("");
    fc.policy = who.identity ? dlp::policy_for(fc.gen->settings->policies, fc.identity) : nullptr;
    // Registered first, checked second: a kill that lists the flows after this
    // registration closes it, one before it is seen by the check (control::kill).
    if (fc.handle)
        fc.state->ctl->set_identity(*fc.handle, fc.identity);
    if (killed_now(fc))
        return refusal{503, "killed"};
    if (fc.state->ctl && fc.state->ctl->store_refusing()) // fail_closed, store unreachable
        return refusal{503, "control_store_unavailable"};
    if (!who.identity)
        return refusal{who.challenge ? 407u : 403u, std::string(who.reason)};
    if (fc.policy == nullptr)
        return refusal{403, "policy_deny"};
    if (!fc.state->limits.acquire_connection(fc.identity, fc.policy->limits, fc.connection))
        return refusal{429, "connection_limit", false, 1};
    if (!fc.state->audit->healthy())
        return refusal{503, "audit_unavailable"};
    return std::nullopt;
}

// Answers a refusal of a request head (`rec`: its method and URL) and closes.
template <class ClientStream>
net::awaitable<void> refuse_head(ClientStream& client, flow_context& fc, const refusal& r,
                                 const audit_record& rec) {
    if (r.retry_after != 0)
        co_await deny_limited(client, fc, r.reason, r.retry_after, rec, false);
    else
        co_await deny(client, fc, r.status, r.reason, rec, {}, false);
}

// A plain request for another host:port than the last: the connection's upstream is
// dropped and `d` resolved and address-checked into `plain_dest` (resolved once per
// upstream host:port). False: refused and answered, the connection closes.
template <class ClientStream>
net::awaitable<bool> switch_destination(ClientStream& client, flow_context& fc, destination& d,
                                        destination& plain_dest, upstream<plain_stream>& plain_up,
                                        const audit_record& rec) {
    if (d.host == plain_dest.host && d.port == plain_dest.port)
        co_return true;
    plain_up.stream.reset();
    plain_dest = std::move(d);
    const auto resolved = co_await resolve_destination(plain_dest, *fc.policy);
    if (resolved == resolve_result::ok)
        co_return true;
    plain_dest = {};
    const bool failed = resolved == resolve_result::failed;
    co_await deny(client, fc, failed ? 502 : 403,
                  failed ? "upstream_connect" : "private_destination", rec, {}, false);
    co_return false;
}

// The requests on one client connection (plain TCP or an HTTPS proxy listener):
// absolute-form exchanges until a CONNECT takes the connection over.
template <class ClientStream>
net::awaitable<void> serve_requests(ClientStream& client, beast::flat_buffer& cbuf,
                                    flow_context& fc, dlp::caller_evidence& evidence) {
    fc.evidence = &evidence;
    upstream<plain_stream> plain_up;
    auto up_hook = close_on_kill(fc, plain_up);
    destination plain_dest; // resolved and checked once per upstream host:port
    for (;;) {
        http::request_parser<http::empty_body> hp;
        if (!co_await read_head(client, cbuf, hp, fc))
            co_return;
        audit_record rec;
        rec.method = std::string(hp.get().method_string());
        rec.url = audit_log::redact_query(hp.get().target(), true);

        if (auto r = identify(fc, evidence, hp.get())) {
            co_await refuse_head(client, fc, *r, rec);
            co_return;
        }
        if (hp.get().method() == http::verb::connect) {
            co_await handle_connect(client, cbuf, hp, fc);
            co_return;
        }
        destination d;
        exchange_target tgt;
        if (!parse_absolute_target(hp.get().target(), d, tgt)) {
            co_await deny(client, fc, 400, "bad_request", rec, {}, false);
            co_return;
        }
        rec.url = audit_log::redact_query("http://" + tgt.host_header + tgt.origin_form, true);
        if (auto a = co_await admit_absolute(client, cbuf, hp, d, tgt, fc, rec);
            a != admitted::go) {
            if (a == admitted::close)
                co_return;
            continue;
        }
        if (fc.handle)
            fc.state->ctl->set_destination(*fc.handle, flow_kind::http, host_port(d, 0));
        if (!co_await switch_destination(client, fc, d, plain_dest, plain_up, rec))
            co_return;
        tgt.dest = &plain_dest;
        auto end = co_await run_exchange(client, cbuf, hp, tgt, plain_up, fc);
        if (fc.unread_body != 0) { // refused with its body still coming
            co_await linger(client, cbuf, fc);
            break;
        }
        if (end != exchange_end::keep_going)
            break;
    }
}

// A verified client certificate's URI SANs and subject CN (RFC 5280 4.2.1.6, 4.1.2.6).
std::optional<dlp::client_certificate> peer_certificate(SSL* ssl) {
    X509* cert = SSL_get0_peer_certificate(ssl);
    if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK)
        return std::nullopt;
    dlp::client_certificate out;
    auto* names =
        static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
    if (names != nullptr) {
        for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
            const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names, i);
            if (gn->type == GEN_URI) {
                const ASN1_STRING* uri = gn->d.uniformResourceIdentifier;
                out.uri_sans.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                                          static_cast<std::size_t>(ASN1_STRING_length(uri)));
            }
        }
        GENERAL_NAMES_free(names);
    }
    X509_NAME* subject = X509_get_subject_name(cert);
    int idx = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (idx >= 0) {
        const ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, idx));
        out.subject_cn.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(cn)),
                              static_cast<std::size_t>(ASN1_STRING_length(cn)));
    }
    return out;
}

} // namespace

net::awaitable<void> serve_client(tcp::socket socket, std::shared_ptr<shared_state> state,
                                  listener_context listener) {
    struct active_guard {
        std::atomic<std::int64_t>& n;
        explicit active_guard(std::atomic<std::int64_t>& c)
            : n(c) {
            ++n;
        }
        ~active_guard() { --n; }
    } guard(state->active);

    flow_context fc;
    fc.state = state;
    fc.gen = state->current.load();
    fc.flow = make_flow_id(*state);
    boost::system::error_code ec;
    auto remote = socket.remote_endpoint(ec);
    if (ec)
        co_return;
    fc.source = remote.address().is_v6()
                    ? "[" + remote.address().to_string() + "]:" + std::to_string(remote.port())
                    : remote.address().to_string() + ":" + std::to_string(remote.port());

    // In the flow registry until this coroutine ends (GET /v1/flows, the kill switch).
    if (state->ctl)
        fc.handle = state->ctl->register_flow(fc.flow, fc.source, socket.get_executor());
    struct registration {
        flow_context& fc;
        ~registration() {
            if (fc.handle)
                fc.state->ctl->deregister(*fc.handle);
        }
    } registered{fc};

    plain_stream client(std::move(socket));
    auto client_hook = close_on_kill(fc, client);
    // Bounded: unparsed input (a request head, a chunk header) never grows past this.
    beast::flat_buffer cbuf(256 * 1024);

    try {
        dlp::caller_evidence evidence;
        evidence.listener_identity = listener.identity;
        evidence.source = dlp::ip_address::parse(remote.address().to_string());
        if (!listener.tls) {
            co_await serve_requests(client, cbuf, fc, evidence);
            boost::system::error_code ignored;
            client.socket().shutdown(tcp::socket::shutdown_send, ignored);
            co_return;
        }
        // HTTPS proxy listener: TLS to sluice itself, optionally with a client
        // certificate (mTLS) that names the identity.
        listener_tls_stream tls(std::move(client), *listener.tls);
        auto tls_hook = close_on_kill(fc, tls);
        tls.next_layer().expires_after(tls_handshake_timeout);
        auto [hec] = co_await tls.async_handshake(ssl::stream_base::server, as_tuple);
        if (hec) {
            co_await record_client_tls(fc, hec, nullptr);
            co_return;
        }
        evidence.certificate = peer_certificate(tls.native_handle());
        co_await serve_requests(tls, cbuf, fc, evidence);
        tls.next_layer().expires_after(2s);
        co_await tls.async_shutdown(as_tuple);
    } catch (const std::exception& e) {
        spdlog::error("flow {}: internal error (source internal): {}", fc.flow, e.what());
    }
}

} // namespace sluice::proxy
