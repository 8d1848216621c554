#include "flow.hpp"

#include "answers.hpp"
#include "client_tls.hpp"
#include "ref_layer.hpp"
#include "request_head.hpp"
#include "tls_stream.hpp"
#include "upstream_pool.hpp"
#include "websocket_relay.hpp"

#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/body_stream.hpp"
#include "sluice/dlp/caller.hpp"
#include "sluice/dlp/hostname.hpp"
#include "sluice/dlp/inspector.hpp"
#include "sluice/dlp/policy.hpp"
#include "sluice/dlp/redact.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/url/parse.hpp>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace sluice::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;
constexpr auto as_tuple = net::as_tuple(net::use_awaitable);

namespace {

// Deadlines for every network wait (STYLE.md: every wait has a deadline).
constexpr auto client_idle_timeout = 60s;
constexpr auto client_header_timeout = 15s;
constexpr auto tls_handshake_timeout = 15s;
constexpr auto upstream_io_timeout = 120s;
constexpr std::uint32_t header_limit = 64 * 1024;
constexpr std::size_t relay_chunk = 16 * 1024;
// A refused body up to this size is read and dropped before the connection closes.
constexpr std::uint64_t linger_limit = 16 * 1024 * 1024;
constexpr auto linger_timeout = 5s;
// The first read of a keep-alive request, and the most buffer an idle flow keeps.
constexpr std::size_t idle_read_size = 4096;

using ssl_stream = beast::ssl_stream<beast::tcp_stream>; // an HTTPS proxy listener
// The TLS leg to an origin (tls_stream.hpp: no fixed 68 KiB of buffers, pooled cheaply).
using upstream_tls = tls_stream<beast::tcp_stream>;

// --- per-thread scanner --------------------------------------------------------------
// Scratch is per thread (Hyperscan "Scratch Space"); a reload publishes a new ruleset
// and the next flow on this thread rebuilds its scanner. A scan never spans a co_await.
detectors::scanner& thread_scanner(const std::shared_ptr<const detectors::ruleset>& rules) {
    thread_local std::shared_ptr<const detectors::ruleset> cached_rules;
    thread_local std::optional<detectors::scanner> cached;
    if (!cached || cached_rules != rules) {
        cached.reset();
        cached.emplace(rules);
        cached_rules = rules;
    }
    return *cached;
}

// --- flow bookkeeping ------------------------------------------------------------------
// An exchange's allow record on its way through the audit writer's group commit
// (audit_log::async_append): the writer thread sends the result (true = durable) and the
// flow receives it on its own executor. Capacity 1, so the send never waits.
using audit_result_channel =
    net::experimental::concurrent_channel<void(boost::system::error_code, bool)>;
// A start record's seq (0 = not written) on its way back from the writer thread.
using audit_seq_channel =
    net::experimental::concurrent_channel<void(boost::system::error_code, std::uint64_t)>;

struct flow_context {
    std::shared_ptr<shared_state> state;
    std::shared_ptr<const generation> gen;
    std::string flow;
    std::string source;
    std::string identity;                // "" = unresolved
    const dlp::policy* policy = nullptr; // in gen's settings
    // Who the client proved to be (source, listener, proxy credentials, certificate):
    // every request is decided again under the configuration in force when it arrives.
    const dlp::caller_evidence* evidence = nullptr;
    std::shared_ptr<flow_handle> handle; // in the flow registry (control.hpp); null in unit tests
    rate_limits::connection_slot connection; // `limits.max_connections`, held per identity
    // The last exchange's allow record until it is durable: the next exchange on this
    // connection reads and inspects its request meanwhile and settles it (settle_audit)
    // before anything goes upstream or another record is written, so the sync overlaps
    // with the client's next request and records keep the order of events.
    std::shared_ptr<audit_result_channel> pending_audit;
    // Body bytes of a refused request that the client may still be sending: run_exchange's
    // callers read them off (discard_body) before they close, a lingering close.
    std::uint64_t unread_body = 0;
    // A brokered secret went upstream on this flow: every later response is asked for,
    // and must come in, identity coding, so an echo of it can be masked.
    bool secret_sent = false;
    // False until the client has sent a whole request head: a connection that has sent
    // nothing gets the head timeout, not the keep-alive idle timeout (read_head).
    bool heard = false;
};

// Every request is decided under the configuration in force when it arrives, also on a
// kept-alive connection or inside a tunnel opened before a reload: the identity is
// resolved again from the same evidence and its policy looked up in the live
// generation. False when the identity no longer resolves to the one the flow has, or
// has no policy (the caller denies with policy_deny). Nothing of the old generation may
// be referenced across this call.
bool refresh_generation(flow_context& fc) {
    auto live = fc.state->current.load();
    if (live == fc.gen)
        return fc.policy != nullptr;
    fc.gen = std::move(live);
    fc.policy = nullptr;
    if (fc.evidence) {
        auto who = dlp::resolve_caller(fc.gen->settings->identities, *fc.evidence);
        if (!who.identity || *who.identity != fc.identity)
            return false;
    }
    fc.policy = dlp::policy_for(fc.gen->settings->policies, fc.identity);
    return fc.policy != nullptr;
}

std::string make_flow_id(shared_state& st) {
    std::uint64_t n = st.next_flow.fetch_add(1, std::memory_order_relaxed);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%08llx-%06llx",
                  static_cast<unsigned long long>(st.flow_salt & 0xffffffffu),
                  static_cast<unsigned long long>(n & 0xffffff));
    return buf;
}

std::uint64_t elapsed_ms(std::chrono::steady_clock::time_point since) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - since)
                                          .count());
}

// What the client chose goes through the detectors before it is recorded (the url and
// method of a request that failed before inspection, an approver's words): no record
// holds a secret, inspected or not (dlp/redact.hpp).
std::string scrubbed(const flow_context& fc, std::string_view text) {
    dlp::variant_options vo;
    vo.protect = fc.gen->protect;
    return dlp::redact_secrets(text, thread_scanner(fc.gen->settings->rules), vo);
}

double seconds_since(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Fills in who and where, and counts the record's bytes and decision.
void stamp(flow_context& fc, audit_record& r) {
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

// Writes one audit record; false means the record could not be written and the caller
// must not let the exchange proceed (fail closed).
bool audit(flow_context& fc, audit_record r) {
    stamp(fc, r);
    if (!fc.state->audit->append(r)) {
        spdlog::error("flow {}: audit write failed; denying", fc.flow);
        return false;
    }
    return true;
}

// audit() without holding this flow's thread while the record is written and synced: it
// joins the audit writer's next batch (group commit, audit_log.hpp) and is left pending
// in fc.pending_audit; settle_audit gives the result.
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

// Waits until the last exchange's record is durable; false when it could not be written
// (the caller must not forward or record anything more: fail closed). True when nothing
// is pending.
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

// Decide, record, then forward (audit_log.hpp): writes the exchange's decision as a start
// record (`decision`, reason `reason`, `rec`'s fields, `findings`) through the writer's
// group commit, this flow waiting on its own executor without holding the thread. The
// last exchange's completion, queued before it, is settled too. On success `rec` becomes
// the template of the completion (event "end", completes = the start's seq): every later
// record of the exchange, the final one or a denial, completes it. False when the start
// (or the last record) could not be written: nothing may be forwarded, and the caller
// denies (503 audit_unavailable).
net::awaitable<bool> record_start(flow_context& fc, audit_record& rec, std::string decision,
                                  std::string reason) {
    audit_record start = rec;
    start.event = "start";
    start.decision = std::move(decision);
    start.reason = std::move(reason);
    start.flow = fc.flow; // not stamp(): the exchange is counted once, by its completion
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

// The URL as written to the audit: every secret range found in the target is replaced
// by "[redacted]", and when the URL had a finding every query value is redacted too.
std::string audit_url(std::string_view prefix, std::string_view target,
                      const std::vector<dlp::finding_record>& fs) {
    std::string t(target);
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    bool url_finding = false;
    for (const auto& f : fs) {
        if (f.location != "url")
            continue;
        url_finding = true;
        if (f.length > 0 && f.offset < t.size())
            ranges.emplace_back(f.offset, std::min(f.length, t.size() - f.offset));
    }
    std::sort(ranges.begin(), ranges.end(), std::greater<>());
    std::size_t floor = t.size();
    for (auto [off, len] : ranges) {
        if (off + len > floor)
            len = floor > off ? floor - off : 0;
        t.replace(off, len, "[redacted]");
        floor = off;
    }
    return audit_log::redact_query(std::string(prefix) + t, url_finding);
}

// Hop-by-hop fields (RFC 9110 section 7.6.1) plus sluice's own and proxy credentials:
// none of them reaches an upstream.
bool is_hop_by_hop(std::string_view name) {
    static constexpr std::array<std::string_view, 10> names{
        "connection", "proxy-connection",  "keep-alive", "proxy-authorization", "te", "trailer",
        "upgrade",    "transfer-encoding", "expect",     "proxy-authenticate"};
    for (auto n : names)
        if (beast::iequals(n, name))
            return true;
    return beast::iequals(name.substr(0, std::min<std::size_t>(name.size(), 9)), "x-sluice-");
}

// The field names a Connection header lists are hop-by-hop too (RFC 9110 section 7.6.1:
// a proxy removes them before forwarding), e.g. "Connection: close, X-Internal-Token".
std::vector<std::string> connection_tokens(const http::request<http::string_body>& req) {
    std::vector<std::string> out;
    auto range = req.equal_range(http::field::connection);
    for (auto it = range.first; it != range.second; ++it) {
        for (auto token : http::token_list{it->value()})
            out.emplace_back(token);
    }
    return out;
}

bool names_connection_option(const std::vector<std::string>& tokens, std::string_view name) {
    return std::any_of(tokens.begin(), tokens.end(),
                       [&](const std::string& t) { return beast::iequals(t, name); });
}

// Masks brokered secrets in a response head: every field value and the reason phrase.
// Returns the bytes masked.
template <class Fields>
std::size_t mask_head(http::response_header<Fields>& head, const dlp::secret_masker& masker) {
    if (!masker.active())
        return 0;
    std::size_t masked = 0;
    std::vector<std::pair<std::string, std::string>> fields;
    for (const auto& f : head) {
        std::string v(f.value());
        masked += masker.mask(v);
        fields.emplace_back(std::string(f.name_string()), std::move(v));
    }
    if (masked > 0) {
        for (const auto& [name, value] : fields)
            head.erase(name);
        for (const auto& [name, value] : fields)
            head.insert(name, value);
    }
    std::string reason(head.reason());
    if (std::size_t n = masker.mask(reason); n > 0) {
        head.reason(reason);
        masked += n;
    }
    return masked;
}

// True when every Content-Encoding token is "identity" and every Transfer-Encoding token
// is "chunked" (over all fields of each name).
template <class Fields>
bool only_identity_coded(const http::response_header<Fields>& head) {
    auto all = [&](http::field name, std::string_view allowed) {
        auto range = head.equal_range(name);
        for (auto it = range.first; it != range.second; ++it)
            for (auto token : http::token_list{it->value()})
                if (!beast::iequals(token, allowed))
                    return false;
        return true;
    };
    return all(http::field::content_encoding, "identity") &&
           all(http::field::transfer_encoding, "chunked");
}

template <class Stream>
net::awaitable<void> send_answer(Stream& stream, answer res) {
    beast::get_lowest_layer(stream).expires_after(client_idle_timeout);
    co_await http::async_write(stream, res, as_tuple);
}

// A 403 dlp_finding of a rule that is often the agent's own credential (an opaque bearer
// token, answers.hpp): the exact dlp.ignore entries that would allow it, logged and put in
// the answer, by fingerprint only.
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

// Answers the client and writes the deny record. Returns false if the audit failed.
// The record comes by reference: an argument object would live in every caller's
// coroutine frame (one per co_await deny), also while an idle connection waits.
template <class Stream>
net::awaitable<bool> deny(Stream& stream, flow_context& fc, unsigned status,
                          std::string_view reason, const audit_record& head_rec,
                          const std::vector<dlp::finding_record>& findings, bool keep_alive) {
    audit_record rec = head_rec;
    if (rec.decision.empty()) // "supervise_denied" when a person or the timeout said no
        rec.decision = "deny";
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
    // By method and URL: git's smart-HTTP requests get a body git prints (answers.hpp).
    co_await send_answer(stream, make_answer_for(head_rec.method, head_rec.url, status, reason,
                                                 fc.flow, rule_ids(findings), keep_alive,
                                                 ignore_hints(fc, status, findings)));
    co_return ok;
}

// 400 bad_request for a request inside an intercepted tunnel (its method and URL
// recorded). A coroutine of its own, for the same reason as deny's reference.
template <class Stream>
net::awaitable<void> deny_bad_request(Stream& stream, flow_context& fc, std::string_view method,
                                      std::string url) {
    audit_record bad;
    bad.method = std::string(method);
    bad.url = std::move(url);
    co_await deny(stream, fc, 400, "bad_request", bad, {}, false);
}

// The kill switch (control.hpp): a killed identity, or a flow a kill has reached, gets
// nothing more. Checked when the identity is resolved and before every request.
bool killed_now(const flow_context& fc) {
    const auto& ctl = fc.state->ctl;
    return ctl && ((fc.handle && fc.handle->killed()) || ctl->is_killed(fc.identity));
}

// Why a killed flow ends: "killed" (503) for the kill switch, or the reason it was cut
// with (control::cut: "policy_deny", 403, when a reload removed its allow).
std::string_view kill_reason(const flow_context& fc) {
    if (fc.handle && fc.handle->killed() && !fc.handle->cut_reason().empty() &&
        !fc.state->ctl->is_killed(fc.identity))
        return fc.handle->cut_reason();
    return "killed";
}
unsigned kill_status(const flow_context& fc) {
    return kill_reason(fc) == "killed" ? 503 : 403;
}

// A kill closes `s`'s socket (on this flow's thread): every pending read or write on it,
// and on any TLS or WebSocket layer above it, ends at once.
template <class Stream>
close_hook close_on_kill(flow_context& fc, Stream& s) {
    return close_hook(fc.handle.get(), [&s] {
        boost::system::error_code ignored;
        beast::get_lowest_layer(s).socket().close(ignored);
    });
}

// A WebSocket session's record as written (websocket_relay.hpp calls back with copies of
// the upgrade's record): the session's final record completes the upgrade's start, with
// reason `killed` when a kill cut it; a record of one message inside the session (a
// denial, an approval, written with bytes and message counts 0) stands alone. Only the
// final record is a plain allow, counts traffic, or says the session was cut.
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

// A limit reached (`policies[].limits`): 429 with Retry-After (RFC 9110 section 10.2.3),
// audited like any denial. Returns false if the audit failed.
template <class Stream>
net::awaitable<bool> deny_limited(Stream& stream, flow_context& fc, std::string_view reason,
                                  std::uint32_t retry_after, const audit_record& head_rec,
                                  bool keep_alive) {
    audit_record rec = head_rec; // by reference, as for deny
    rec.decision = "deny";
    rec.reason = std::string(reason);
    bool ok = co_await settle_audit(fc); // in order, as in deny
    ok = ok && audit(fc, std::move(rec));
    auto res = make_answer(ok ? 429 : 503, ok ? reason : "audit_unavailable", fc.flow, {},
                           ok && keep_alive);
    if (ok)
        res.set(http::field::retry_after, std::to_string(retry_after));
    co_await send_answer(stream, std::move(res));
    co_return ok;
}

// --- destinations --------------------------------------------------------------------
struct destination {
    std::string host; // normalised
    std::uint16_t port = 0;
    std::vector<tcp::endpoint> endpoints; // resolved once and checked (no rebinding window)
};

enum class resolve_result { ok, failed, private_address };

// Resolves the host once and checks every address against the SSRF guard; the flow
// connects only to these checked endpoints.
// An IP literal needs no resolver (whose getaddrinfo runs on a helper thread).
net::awaitable<resolve_result> resolve_destination(destination& d, const dlp::policy& policy) {
    std::vector<tcp::endpoint> found;
    boost::system::error_code aec;
    std::string_view literal = d.host;
    if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']')
        literal = literal.substr(1, literal.size() - 2);
    if (auto addr = net::ip::make_address(literal, aec); !aec) {
        found.emplace_back(addr, d.port);
    } else {
        tcp::resolver resolver(co_await net::this_coro::executor);
        auto [ec, results] =
            co_await resolver.async_resolve(d.host, std::to_string(d.port), as_tuple);
        if (ec || results.empty())
            co_return resolve_result::failed;
        for (const auto& r : results)
            found.push_back(r.endpoint());
    }
    d.endpoints.clear();
    for (const auto& ep : found) {
        auto ip = dlp::ip_address::parse(ep.address().to_string());
        if (!ip)
            co_return resolve_result::failed;
        if (dlp::is_private_destination(*ip)) {
            bool excepted =
                std::any_of(policy.private_destinations.begin(), policy.private_destinations.end(),
                            [&](const dlp::cidr& c) { return c.contains(*ip); });
            if (!excepted)
                co_return resolve_result::private_address;
        }
        d.endpoints.push_back(ep);
    }
    co_return resolve_result::ok;
}

// The destination name, inspected before anything resolves it: a secret spelled into a
// host name ("<hex of a token>.attacker.example") would leave in the DNS query even if
// the request were refused later (dlp::inspector::on_destination). With `connect_head`,
// the CONNECT's own head too: its fields go nowhere upstream, but whatever the agent
// wrote is inspected.
dlp::verdict inspect_destination(flow_context& fc, std::string_view host, std::uint16_t port,
                                 const http::request_header<>* connect_head) {
    auto scan_started = std::chrono::steady_clock::now();
    dlp::variant_options vo;
    vo.protect = fc.gen->protect;
    dlp::inspector ins(*fc.policy, thread_scanner(fc.gen->settings->rules), std::move(vo));
    dlp::verdict v = ins.on_destination(host);
    std::size_t scanned = host.size();
    if (v.kind == dlp::verdict_kind::forward && connect_head != nullptr) {
        std::vector<dlp::header_view> headers;
        for (const auto& f : *connect_head) {
            headers.push_back({f.name_string(), f.value()});
            scanned += f.name_string().size() + f.value().size();
        }
        auto found = std::move(v.findings);
        v = ins.on_head(dlp::request_view{"CONNECT", "", host, port, headers});
        v.findings.insert(v.findings.begin(), found.begin(), found.end());
    }
    if (fc.state->stats)
        count_scan(*fc.state->stats, scan_started, scanned);
    return v;
}

// DLP on the destination name, after policy and before resolution. True when the name
// may be resolved (log-only findings are kept in `rec`); otherwise the client has its
// answer, and the record names the host only as "[redacted]".
template <class Stream>
net::awaitable<bool> admit_destination(Stream& client, flow_context& fc, const destination& d,
                                       std::string_view scheme, audit_record& rec,
                                       const http::request_header<>* connect_head = nullptr) {
    dlp::verdict v = inspect_destination(fc, d.host, d.port, connect_head);
    if (v.kind == dlp::verdict_kind::forward) {
        rec.findings = to_audit(v.findings);
        co_return true;
    }
    rec.url =
        std::string(scheme) + dlp::redact_host(d.host, v.findings) + ":" + std::to_string(d.port);
    const auto status =
        v.kind == dlp::verdict_kind::supervise ? 403u : static_cast<unsigned>(v.status);
    co_await deny(client, fc, status, v.reason, rec, v.findings, false);
    co_return false;
}

// An upstream connection owned by one client flow, reused across keep-alive exchanges.
template <class Stream>
struct upstream {
    std::optional<Stream> stream;
    beast::flat_buffer buffer;
    std::string key; // host:port the stream is connected to
};

// A kill closes whichever upstream connection the flow holds at that moment (a slow
// origin or a long download is cut as well as the client side).
template <class Stream>
close_hook close_on_kill(flow_context& fc, upstream<Stream>& up) {
    return close_hook(fc.handle.get(), [&up] {
        boost::system::error_code ignored;
        if (up.stream)
            beast::get_lowest_layer(*up.stream).socket().close(ignored);
    });
}

enum class connect_result { ok, connect_failed, tls_failed };

net::awaitable<connect_result> connect_upstream(upstream<beast::tcp_stream>& up,
                                                const destination& d, flow_context& fc) {
    up.stream.reset();
    up.buffer.clear();
    beast::tcp_stream s(co_await net::this_coro::executor);
    s.expires_after(fc.gen->settings->connect_timeout);
    const auto started = std::chrono::steady_clock::now();
    auto [ec, ep] = co_await s.async_connect(d.endpoints, as_tuple);
    if (ec)
        co_return connect_result::connect_failed;
    if (fc.state->stats)
        fc.state->stats->on_upstream_connect(seconds_since(started), -1);
    boost::system::error_code ignored;
    s.socket().set_option(tcp::no_delay(true), ignored);
    up.stream.emplace(std::move(s));
    up.key = d.host + ":" + std::to_string(d.port);
    co_return connect_result::ok;
}

net::awaitable<connect_result> connect_upstream(upstream<upstream_tls>& up, const destination& d,
                                                flow_context& fc) {
    up.stream.reset();
    up.buffer.clear();
    beast::tcp_stream s(co_await net::this_coro::executor);
    s.expires_after(fc.gen->settings->connect_timeout);
    const auto started = std::chrono::steady_clock::now();
    auto [ec, ep] = co_await s.async_connect(d.endpoints, as_tuple);
    if (ec)
        co_return connect_result::connect_failed;
    const double connect_s = seconds_since(started);
    const auto tls_started = std::chrono::steady_clock::now();
    boost::system::error_code ignored;
    s.socket().set_option(tcp::no_delay(true), ignored);
    upstream_tls tls(std::move(s), *fc.gen->upstream_tls);
    if (!prepare_upstream_ssl(tls.native_handle(), d.host, d.port))
        co_return connect_result::tls_failed;
    beast::get_lowest_layer(tls).expires_after(tls_handshake_timeout);
    auto [hec] = co_await tls.async_handshake(ssl::stream_base::client, as_tuple);
    if (hec) {
        spdlog::info("flow {}: upstream TLS to {}:{} failed: {}", fc.flow, d.host, d.port,
                     hec.message());
        co_return connect_result::tls_failed;
    }
    if (fc.state->stats)
        fc.state->stats->on_upstream_connect(connect_s, seconds_since(tls_started));
    up.stream.emplace(std::move(tls));
    up.key = d.host + ":" + std::to_string(d.port);
    co_return connect_result::ok;
}

// Reads and drops up to `length` bytes of a refused request's body (what is in `buf`
// first), at most `linger_limit` of them and only while they arrive within
// `linger_timeout`; ends early when the client closes. Closing with a body unread resets
// the connection, and the reset can destroy the answer before the client reads it.
template <class Stream>
net::awaitable<void> discard_body(Stream& client, beast::flat_buffer& buf, std::uint64_t length) {
    length = std::min(length, linger_limit);
    std::uint64_t left = length - std::min<std::uint64_t>(length, buf.size());
    buf.clear();
    std::array<char, 16 * 1024> sink;
    beast::get_lowest_layer(client).expires_after(linger_timeout);
    while (left > 0) {
        auto [ec, n] = co_await client.async_read_some(
            net::buffer(sink.data(), std::min<std::uint64_t>(left, sink.size())), as_tuple);
        if (ec)
            co_return;
        left -= n;
    }
}

// After an exchange refused with its body still coming (fc.unread_body): that body is
// read off before the caller closes the connection. Not for a killed flow.
template <class Stream>
net::awaitable<void> linger(Stream& client, beast::flat_buffer& buf, flow_context& fc) {
    const std::uint64_t unread = std::exchange(fc.unread_body, 0);
    if (!killed_now(fc))
        co_await discard_body(client, buf, unread);
}

// Bytes below HTTP that nobody has read: TLS records the origin sent after its response
// (a close_notify, say). A connection holding any is not idle and is not pooled (the
// pool's liveness peek sees only the socket).
bool holds_unread(const beast::tcp_stream&) {
    return false;
}
template <class Next>
bool holds_unread(const tls_stream<Next>& s) {
    return s.input_pending();
}

// --- one HTTP exchange ---------------------------------------------------------------
enum class exchange_end { keep_going, close };

// A request body with no Content-Encoding, or only `identity` (RFC 9110 section 8.4).
bool identity_coded_request(const http::request_header<>& head) {
    for (auto it = head.find(http::field::content_encoding);
         it != head.end() && it->name() == http::field::content_encoding; ++it)
        if (!beast::iequals(it->value(), "identity"))
            return false;
    return true;
}

enum class stream_end { done, denied, client_failed, upstream_failed };
struct stream_outcome {
    stream_end end = stream_end::done;
    dlp::verdict verdict;        // when denied
    std::uint64_t unread = 0;    // body bytes the client has yet to send (denied, upstream)
    std::uint64_t forwarded = 0; // body bytes written upstream
};

// Relays a Content-Length body larger than `dlp.max_body` (`large_bodies: stream`): each
// window read from the client goes to a dlp::body_stream, which scans it (with the tail
// of the previous window in front, and decoded when it is or holds a compressed stream)
// and says how much of the body may leave; only that is written upstream. Memory is one
// window per flow whatever the body's size. A window that cannot be released at all
// (a compressed block larger than the window) is refused, 413 `decode_budget`. A finding
// that denies stops the relay: the origin is left with a truncated request and the
// connection is dropped by the caller. Findings with action log are added to `findings`.
template <class ClientStream, class UpstreamStream>
net::awaitable<stream_outcome>
stream_request_body(ClientStream& client, beast::flat_buffer& cbuf, UpstreamStream& upstream,
                    std::uint64_t length, flow_context& fc, const dlp::policy& policy, bool inspect,
                    std::vector<dlp::finding_record>& findings) {
    const std::size_t limit = std::max<std::size_t>(policy.dlp.max_body, 2);
    const std::size_t overlap = std::min<std::size_t>(8 * 1024, limit / 4);
    const std::size_t window = std::min<std::size_t>(256 * 1024, limit);
    dlp::variant_options vo;
    vo.protect = fc.gen->protect;
    // Identity-coded only (run_exchange refuses other codings before streaming).
    dlp::body_stream bs(policy, thread_scanner(fc.gen->settings->rules), std::move(vo), {}, window,
                        overlap);
    std::vector<char> buf(window);
    std::size_t held = 0;   // buf[0..held): fed to the inspection, not yet released
    std::uint64_t base = 0; // body offset of buf[0]
    std::uint64_t remaining = length;
    for (;;) {
        std::size_t fill = held;
        while (fill < buf.size() && remaining > 0) {
            auto want =
                static_cast<std::size_t>(std::min<std::uint64_t>(buf.size() - fill, remaining));
            std::size_t n = 0;
            if (cbuf.size() > 0) { // body bytes that arrived with the head
                n = net::buffer_copy(net::buffer(buf.data() + fill, want), cbuf.data());
                cbuf.consume(n);
            } else {
                beast::get_lowest_layer(client).expires_after(client_idle_timeout);
                auto [ec, got] =
                    co_await client.async_read_some(net::buffer(buf.data() + fill, want), as_tuple);
                if (ec)
                    co_return stream_outcome{stream_end::client_failed, {}, 0, base};
                n = got;
            }
            fill += n;
            remaining -= n;
        }
        std::size_t send = remaining == 0 ? fill : fill - std::min(overlap, fill);
        if (inspect) {
            auto scan_started = std::chrono::steady_clock::now();
            auto r = bs.feed(std::string_view(buf.data() + held, fill - held), remaining == 0);
            if (fc.state->stats)
                count_scan(*fc.state->stats, scan_started, fill - held);
            findings.insert(findings.end(), r.v.findings.begin(), r.v.findings.end());
            if (r.v.kind != dlp::verdict_kind::forward)
                co_return stream_outcome{stream_end::denied, std::move(r.v), remaining, base};
            send = static_cast<std::size_t>(std::min<std::uint64_t>(r.releasable - base, fill));
            if (send == 0 && fill == buf.size() && remaining > 0) {
                dlp::verdict v;
                v.kind = dlp::verdict_kind::deny;
                v.status = 413;
                v.reason = "decode_budget";
                co_return stream_outcome{stream_end::denied, std::move(v), remaining, base};
            }
        }
        if (send > 0) {
            beast::get_lowest_layer(upstream).expires_after(upstream_io_timeout);
            auto [ec, n] =
                co_await net::async_write(upstream, net::buffer(buf.data(), send), as_tuple);
            if (ec)
                co_return stream_outcome{stream_end::upstream_failed, {}, remaining, base};
        }
        std::memmove(buf.data(), buf.data() + send, fill - send);
        held = fill - send;
        base += send;
        if (remaining == 0 && held == 0)
            co_return stream_outcome{stream_end::done, {}, 0, base};
    }
}

struct exchange_target {
    std::string scheme; // http or https
    destination* dest = nullptr;
    std::string origin_form; // path?query as sent upstream
    std::string host_header; // authority for the Host field
};

// The configuration a WebSocket session's next client message is decided under
// (websocket_relay.hpp): the live generation, the identity still resolving to the same
// one, and the upgrade's rule (GET on its path) still allowing it. Supervise counts as
// allowed only for a session whose upgrade a person approved.
std::optional<ws_live_config> ws_live(flow_context& fc, const exchange_target& tgt,
                                      std::string_view path, bool approved) {
    if (!refresh_generation(fc))
        return std::nullopt;
    const dlp::policy_rule* rule =
        dlp::match_rule(*fc.policy, tgt.dest->host, tgt.dest->port, "GET", path, false);
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

// Reads the body (answering Expect: 100-continue), inspects, forwards, relays the
// response, audits. `hp` holds the already-read request head.
template <class ClientStream, class UpstreamStream>
net::awaitable<exchange_end> run_exchange(ClientStream& client, beast::flat_buffer& cbuf,
                                          http::request_parser<http::empty_body>& hp,
                                          exchange_target& tgt, upstream<UpstreamStream>& up,
                                          flow_context& fc) {
    auto started = std::chrono::steady_clock::now();
    auto& head = hp.get();
    if (!refresh_generation(fc)) {
        audit_record gone;
        gone.method = std::string(head.method_string());
        gone.url =
            audit_log::redact_query(tgt.scheme + "://" + tgt.host_header + tgt.origin_form, true);
        co_await deny(client, fc, 403, "policy_deny", gone, {}, false);
        co_return exchange_end::close;
    }
    const auto& policy = *fc.policy;
    const bool client_keep_alive = head.keep_alive();
    const std::string method(head.method_string());
    std::string url_prefix = tgt.scheme + "://" + tgt.host_header;

    audit_record rec;
    rec.method = method;
    rec.url = audit_log::redact_query(url_prefix + tgt.origin_form, false);
    // A declared body is on its way until it is read (a client that asked for 100 Continue
    // waits for it): an exchange refused before then ends the connection with a lingering
    // close, and never reads the body as the next request.
    const bool expects_continue = beast::iequals(head[http::field::expect], "100-continue");
    fc.unread_body = expects_continue ? 0 : hp.content_length().value_or(0);

    if (!fc.state->audit->healthy()) {
        co_await deny(client, fc, 503, "audit_unavailable", rec, {}, false);
        co_return exchange_end::close;
    }
    if (killed_now(fc)) { // before every request on a kept-alive connection or tunnel
        co_await deny(client, fc, kill_status(fc), kill_reason(fc), rec, {}, false);
        co_return exchange_end::close;
    }

    // Limits: one request token per exchange, and the upload budget for a declared body
    // before a byte of it is read (a chunked body is charged once it has been read).
    if (auto wait = fc.state->limits.admit_request(fc.identity, policy.limits); wait != 0) {
        bool ok = co_await deny_limited(client, fc, "rate_limit", wait, rec,
                                        client_keep_alive && head.payload_size().value_or(1) == 0);
        co_return ok&& client_keep_alive&& head.payload_size().value_or(1) == 0
            ? exchange_end::keep_going
            : exchange_end::close;
    }
    const bool upload_charged = hp.content_length().has_value();
    if (upload_charged) {
        if (auto wait =
                fc.state->limits.admit_upload(fc.identity, policy.limits, *hp.content_length());
            wait != 0) {
            bool ok = co_await deny_limited(client, fc, "upload_budget", wait, rec,
                                            client_keep_alive && *hp.content_length() == 0);
            (void)ok;
            co_return exchange_end::close;
        }
    }

    // Policy per request: method and path rules apply inside the tunnel too.
    std::string_view path = tgt.origin_form;
    path = path.substr(0, path.find('?'));
    const dlp::policy_rule* rule =
        dlp::match_rule(policy, tgt.dest->host, tgt.dest->port, method, path, false);
    if (rule == nullptr || rule->act == dlp::action::deny) {
        bool ok = co_await deny(client, fc, 403, "policy_deny", rec, {}, client_keep_alive);
        co_return ok&& client_keep_alive&& head.payload_size().value_or(1) == 0
            ? exchange_end::keep_going
            : exchange_end::close;
    }
    // There is no TLS to keep opaque on plain http: `inspect: false` applies to tunnels.
    const bool inspect = rule->inspect || tgt.scheme == "http";
    // supervise: the request is read and inspected like any other, then held (below).
    std::string supervise_reason;
    if (rule->act == dlp::action::supervise)
        supervise_reason = "policy_supervise";

    // Body: whole body up to the policy's limit, before anything is sent upstream. A
    // declared length over the limit is refused before a byte of it is read, unless the
    // policy streams large bodies (`dlp.large_bodies: stream`): then the body is scanned
    // in windows as it is relayed (stream_request_body). Only an identity-coded body of an
    // allowed (not supervised) request streams (a compressed stream inside it is decoded
    // across windows by dlp::body_stream), and a held request cannot hold a stream.
    const std::uint64_t declared_length = hp.content_length().value_or(0);
    bool streamed = false;
    if (hp.content_length() && declared_length > policy.dlp.max_body) {
        streamed = policy.dlp.stream_large_bodies && rule->act == dlp::action::allow &&
                   identity_coded_request(head) && head.find(http::field::upgrade) == head.end();
        if (!streamed) { // the body, if it is being sent, is read off by the caller
            co_await deny(client, fc, 413, "body_too_large", rec, {}, false);
            co_return exchange_end::close;
        }
    }
    if (expects_continue) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        auto [ec, n] = co_await http::async_write(client, cont, as_tuple);
        if (ec)
            co_return exchange_end::close;
        fc.unread_body = declared_length;
    }
    http::request_parser<http::string_body> bp{std::move(hp)};
    bp.body_limit(policy.dlp.max_body);
    // Chunk extensions carry nothing sluice forwards (the body is re-framed); a long one
    // is an attack on parsers downstream, so it is refused (RFC 9112 section 7.1.1).
    auto on_chunk_header = [](std::uint64_t, beast::string_view extensions, beast::error_code& ec) {
        if (extensions.size() > 256)
            ec = http::error::bad_chunk_extension;
    };
    bp.on_chunk_header(on_chunk_header);
    beast::get_lowest_layer(client).expires_after(client_idle_timeout);
    if (!streamed) {
        auto [ec, n] = co_await http::async_read(client, cbuf, bp, as_tuple);
        fc.unread_body = 0; // read, or the connection is done
        if (ec == http::error::body_limit) {
            co_await deny(client, fc, 413, "body_too_large", rec, {}, false);
            co_return exchange_end::close;
        }
        if (ec) {
            if (ec != http::error::end_of_stream && ec != net::error::eof) {
                co_await deny(client, fc, 400, "bad_request", rec, {}, false);
            }
            co_return exchange_end::close;
        }
    }
    auto& req = bp.get();
    if (!upload_charged) {
        if (auto wait =
                fc.state->limits.admit_upload(fc.identity, policy.limits, req.body().size());
            wait != 0) {
            co_await deny_limited(client, fc, "upload_budget", wait, rec, false);
            co_return exchange_end::close;
        }
    }

    // Inspection.
    std::vector<dlp::finding_record> findings;
    if (inspect) {
        std::vector<dlp::header_view> headers;
        for (const auto& f : req) {
            if (f.name() == http::field::proxy_authorization)
                continue; // proxy credentials are sluice's, stripped before upstream
            headers.push_back({f.name_string(), f.value()});
        }
        dlp::request_view view{method, tgt.origin_form, tgt.dest->host, tgt.dest->port, headers};
        auto scan_started = std::chrono::steady_clock::now();
        dlp::variant_options vo;
        vo.protect = fc.gen->protect;
        dlp::inspector ins(policy, thread_scanner(fc.gen->settings->rules), std::move(vo));
        dlp::verdict v = ins.on_head(view);
        // The body is scanned unless the head alone denies: a held request must show the
        // approver (and the audit) every finding it carries, not just the head's.
        if (v.kind != dlp::verdict_kind::deny && !streamed) {
            dlp::verdict head_v = std::move(v);
            v = ins.on_body(req.body());
            v.findings.insert(v.findings.begin(), head_v.findings.begin(), head_v.findings.end());
            if (head_v.kind == dlp::verdict_kind::supervise &&
                v.kind == dlp::verdict_kind::forward) {
                v.kind = head_v.kind;
                v.status = head_v.status;
                v.reason = std::move(head_v.reason);
            }
        }
        findings = v.findings;
        if (fc.state->stats)
            count_scan(*fc.state->stats, scan_started, tgt.origin_form.size() + req.body().size());
        rec.url = audit_url(url_prefix, tgt.origin_form, findings);
        if (v.kind == dlp::verdict_kind::supervise) {
            supervise_reason = "dlp_finding";
        } else if (v.kind != dlp::verdict_kind::forward) {
            std::string reason = v.reason;
            unsigned status = static_cast<unsigned>(v.status);
            const bool keep = client_keep_alive && status == 403 && fc.unread_body == 0;
            bool ok = co_await deny(client, fc, status, reason, rec, findings, keep);
            co_return ok&& keep ? exchange_end::keep_going : exchange_end::close;
        }
    }
    rec.inspected = inspect;
    if (streamed && !supervise_reason.empty()) { // on_finding: supervise in the head
        bool ok = co_await deny(client, fc, 403, "dlp_finding", rec, findings, false);
        (void)ok;
        co_return exchange_end::close;
    }

    // Held until a person decides (control.hpp): approve continues below unchanged.
    if (!supervise_reason.empty()) {
        if (!fc.state->ctl) {
            co_await deny(client, fc, 403, "approval_unavailable", rec, findings, false);
            co_return exchange_end::close;
        }
        // Nobody is asked to approve a request that would be refused anyway: the last
        // exchange's record must be durable first.
        if (!co_await settle_audit(fc)) {
            co_await deny(client, fc, 503, "audit_unavailable", rec, findings, false);
            co_return exchange_end::close;
        }
        // What the approver sees holds no secret either (as the record).
        approval_request held{fc.flow,
                              fc.identity,
                              fc.source,
                              scrubbed(fc, method),
                              scrubbed(fc, rec.url),
                              supervise_reason,
                              to_audit(findings)};
        auto out = co_await fc.state->ctl->hold(std::move(held), fc.handle.get(),
                                                beast::get_lowest_layer(client).socket(),
                                                fc.gen->settings->supervise_timeout);
        rec.approval = audit_approval{out.id, out.by, out.at, out.reason};
        switch (out.result) {
        case approval_outcome::kind::approved:
            break;
        case approval_outcome::kind::denied:
        case approval_outcome::kind::timed_out: {
            rec.decision = "supervise_denied";
            rec.duration_ms = elapsed_ms(started);
            bool ok =
                co_await deny(client, fc, 403,
                              out.result == approval_outcome::kind::denied ? "approval_denied"
                                                                           : "approval_timeout",
                              rec, findings, client_keep_alive);
            co_return ok&& client_keep_alive ? exchange_end::keep_going : exchange_end::close;
        }
        case approval_outcome::kind::withdrawn: // the client went away: nobody to answer
            rec.decision = "supervise_denied";
            rec.reason = "approval_withdrawn";
            rec.findings = to_audit(findings);
            rec.duration_ms = elapsed_ms(started);
            if (co_await settle_audit(fc)) // in order, as in deny
                audit(fc, std::move(rec));
            co_return exchange_end::close;
        case approval_outcome::kind::killed: // the socket is closed: the 503 rarely gets out
            rec.decision = "supervise_denied";
            rec.duration_ms = elapsed_ms(started);
            co_await deny(client, fc, 503, "killed", rec, findings, false);
            co_return exchange_end::close;
        }
    }

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
    const auto live = fc.state->current.load();
    const auto& broker = *live->broker;
    dlp::broker_result brokered;
    if (!broker.empty()) {
        brokered =
            broker.apply(fc.identity, policy, tgt.dest->host, tgt.dest->port, tgt.origin_form, fwd);
        rec.credentials = brokered.credentials;
        // A secret is only ever sent encrypted: a placeholder in a plain http:// request
        // is out of scope whatever the credential's hosts and ports say.
        if (brokered.outcome == dlp::broker_result::kind::out_of_scope ||
            (brokered.outcome == dlp::broker_result::kind::inject && tgt.scheme != "https")) {
            const bool keep = client_keep_alive && fc.unread_body == 0;
            bool ok = co_await deny(client, fc, 403, "credential_scope", rec, findings, keep);
            co_return ok&& keep ? exchange_end::keep_going : exchange_end::close;
        }
    }
    const bool injected = brokered.outcome == dlp::broker_result::kind::inject;
    fc.secret_sent = fc.secret_sent || injected;
    // Every response is masked for every brokered secret, injected here or not: an API
    // may store what it was sent and return it later, or on another exchange.
    dlp::secret_masker masker(
        std::vector<std::string_view>(broker.reflections().begin(), broker.reflections().end()));

    http::request<http::string_body> out{req.method(), brokered.target.value_or(tgt.origin_form),
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
    // Reflections are masked in the raw bytes: once a brokered secret has gone upstream on
    // this flow, every response is asked for unencoded (an API may echo it later).
    if (fc.secret_sent)
        out.set(http::field::accept_encoding, "identity");
    out.set(http::field::host, tgt.host_header);
    out.body() = std::move(req.body());
    out.keep_alive(true);
    out.prepare_payload();
    if (streamed)
        out.content_length(declared_length);

    // The previous exchange's record, and this one's decision, must be durable before
    // this one sends anything upstream (decide, record, then forward).
    rec.findings = to_audit(findings);
    if (!co_await record_start(fc, rec, rec.approval ? "supervise_approved" : "allow", "")) {
        co_await deny(client, fc, 503, "audit_unavailable", rec, findings, false);
        co_return exchange_end::close;
    }

    // Upstream: reuse the connection when it goes to the same place.
    std::string key = tgt.dest->host + ":" + std::to_string(tgt.dest->port);
    // A WebSocket upgrade becomes sluice's own pair of sessions (websocket_relay.hpp) on a
    // fresh connection: every message is inspected, the raw head is never forwarded.
    if (is_websocket_upgrade(req) && out.body().empty()) {
        if (cbuf.size() != 0) { // frames before the 101 (RFC 6455 section 4.1 forbids it)
            co_await deny(client, fc, 400, "bad_request", rec, findings, false);
            co_return exchange_end::close;
        }
        if (auto cr = co_await connect_upstream(up, *tgt.dest, fc); cr != connect_result::ok) {
            co_await deny(client, fc, 502,
                          cr == connect_result::tls_failed ? "upstream_tls" : "upstream_connect",
                          rec, findings, false);
            co_return exchange_end::close;
        }
        ws_session_context ws;
        ws.policy = &policy;
        ws.rules = fc.gen->settings->rules;
        ws.variants.protect = fc.gen->protect;
        ws.inspect = inspect;
        ws.flow = fc.flow;
        ws.stats = fc.state->stats.get();
        ws.audit = [&fc](audit_record r) { return audit(fc, ws_record(fc, std::move(r))); };
        ws.audit_healthy = [&fc] { return fc.state->audit->healthy(); };
        ws.generation = fc.gen.get();
        ws.refresh = [&fc, &tgt, path, approved = rec.approval.has_value()] {
            return ws_live(fc, tgt, path, approved);
        };
        ws.masker = &masker;
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
        rec.findings = to_audit(findings);
        const auto pinned = fc.gen; // `policy` outlives a reload during the session
        if (co_await relay_websocket(client, req, out, *up.stream, ws, rec) ==
            ws_outcome::upstream_failed)
            co_await deny(client, fc, 502, "upstream_connect", rec, findings, false);
        up.stream.reset();
        co_return exchange_end::close;
    }
    // Otherwise an idle connection of this identity to the same place, if one is pooled
    // on this io_context (upstream_pool.hpp).
    auto& pool = net::use_service<upstream_pool<UpstreamStream, generation>>(
        net::query(co_await net::this_coro::executor, net::execution::context));
    const std::string pool_key = fc.identity + '\n' + key;
    if (!up.stream || up.key != key) {
        if (auto pooled = pool.take(pool_key, fc.gen)) {
            up.stream.emplace(std::move(*pooled));
            up.buffer.clear();
            up.key = key;
        }
    }
    bool reused = up.stream && up.key == key;
    for (int attempt = 0; attempt < 2; ++attempt) {
        if (!up.stream || up.key != key) {
            auto cr = co_await connect_upstream(up, *tgt.dest, fc);
            if (cr != connect_result::ok) {
                std::string_view reason =
                    cr == connect_result::tls_failed ? "upstream_tls" : "upstream_connect";
                rec.duration_ms = elapsed_ms(started);
                const bool keep = client_keep_alive && fc.unread_body == 0;
                bool ok = co_await deny(client, fc, 502, reason, rec, findings, keep);
                co_return ok&& keep ? exchange_end::keep_going : exchange_end::close;
            }
            reused = false;
        }
        beast::get_lowest_layer(*up.stream).expires_after(upstream_io_timeout);
        beast::error_code wec;
        if (streamed) { // the head only: the body follows window by window
            http::request_serializer<http::string_body> head_sr{out};
            std::tie(wec, std::ignore) =
                co_await http::async_write_header(*up.stream, head_sr, as_tuple);
        } else {
            std::tie(wec, std::ignore) = co_await http::async_write(*up.stream, out, as_tuple);
        }
        if (!wec)
            break;
        up.stream.reset();
        if (!reused || attempt == 1) {
            co_await deny(client, fc, 502, "upstream_connect", rec, findings, false);
            co_return exchange_end::close;
        }
        // A reused keep-alive connection the origin had closed: one fresh attempt.
    }
    rec.bytes_up = out.body().size(); // body bytes sent (a streamed body: counted below)
    if (streamed) {
        fc.unread_body = 0; // stream_request_body reads it, and says what is left if it stops
        auto sres = co_await stream_request_body(client, cbuf, *up.stream, declared_length, fc,
                                                 policy, inspect, findings);
        rec.bytes_up = sres.forwarded;
        if (sres.end != stream_end::done) {
            fc.unread_body = sres.unread;
            // The origin has a truncated request it cannot complete: the connection goes.
            up.stream.reset();
            rec.findings = to_audit(findings);
            rec.url = audit_url(url_prefix, tgt.origin_form, findings);
            rec.duration_ms = elapsed_ms(started);
            unsigned status = sres.end == stream_end::upstream_failed ? 502 : 400;
            std::string reason =
                sres.end == stream_end::upstream_failed ? "upstream_connect" : "bad_request";
            if (sres.end == stream_end::denied) {
                status = sres.verdict.kind == dlp::verdict_kind::supervise
                             ? 403
                             : static_cast<unsigned>(sres.verdict.status);
                reason = sres.verdict.reason;
            }
            co_await deny(client, fc, status, reason, rec, findings, false);
            co_return exchange_end::close;
        }
    }

    // Response: relay head and body as they arrive (1xx interim answers pass through).
    std::optional<http::response_parser<http::buffer_body>> parser;
    for (;;) {
        auto& p = parser.emplace();
        p.header_limit(header_limit);
        p.body_limit(boost::none);
        if (req.method() == http::verb::head)
            p.skip(true);
        beast::get_lowest_layer(*up.stream).expires_after(upstream_io_timeout);
        auto [ec, n] = co_await http::async_read_header(*up.stream, up.buffer, p, as_tuple);
        if (ec) {
            up.stream.reset();
            co_await deny(client, fc, 502, "upstream_connect", rec, findings, false);
            co_return exchange_end::close;
        }
        auto status = p.get().result_int();
        if (status >= 100 && status < 200 && status != 101) {
            http::response<http::empty_body> interim;
            interim.version(11);
            interim.result(status); // by number: 103 and other codes Beast has no name for
            interim.reason(p.get().reason());
            for (const auto& f : p.get())
                interim.insert(f.name_string(), f.value());
            rec.masked_bytes += mask_head(interim, masker);
            co_await http::async_write(client, interim, as_tuple);
            continue;
        }
        break;
    }

    auto& rp = *parser;
    auto& res = rp.get();
    // An injected secret echoed back (some APIs repeat headers in errors) never reaches
    // the agent. Only unencoded bodies can be checked, so after an injection any content
    // or transfer coding other than identity/chunked is refused.
    if (fc.secret_sent && !only_identity_coded(res)) {
        up.stream.reset();
        co_await deny(client, fc, 502, "upstream_encoding", rec, findings, false);
        co_return exchange_end::close;
    }
    rec.masked_bytes += mask_head(res, masker);
    const bool upstream_keep_alive = res.keep_alive() && !res.need_eof();
    bool client_close = !client_keep_alive || res.need_eof();
    res.keep_alive(!client_close);
    http::serializer<false, http::buffer_body> sr{res};
    std::array<char, relay_chunk> chunk;
    bool relay_ok = true;
    if (rp.is_done() &&
        (req.method() == http::verb::head || res.result_int() == 204 || res.result_int() == 304)) {
        beast::get_lowest_layer(client).expires_after(upstream_io_timeout);
        auto [ec, n] = co_await http::async_write_header(client, sr, as_tuple);
        relay_ok = !ec;
    } else {
        // The head goes out first, as it is now (masked): the serializer keeps views into
        // these fields, and trailer fields the parser merges in later must never reach the
        // client as head fields.
        beast::get_lowest_layer(client).expires_after(upstream_io_timeout);
        auto [hec, hn] = co_await http::async_write_header(client, sr, as_tuple);
        relay_ok = !hec;
        while (relay_ok && !sr.is_done()) {
            if (!rp.is_done()) {
                res.body().data = chunk.data();
                res.body().size = chunk.size();
                beast::get_lowest_layer(*up.stream).expires_after(upstream_io_timeout);
                // read_some: relay what has arrived (server-sent events, streamed model
                // output) instead of waiting for a full buffer.
                auto [ec, n] = co_await http::async_read_some(*up.stream, up.buffer, rp, as_tuple);
                if (ec == http::error::need_buffer)
                    ec = {};
                // A body that ends with the connection (no length, no chunking): many
                // origins close without TLS close_notify, which is its end, as for curl
                // and browsers (RFC 9112 section 6.3 item 8).
                if (ec == net::ssl::error::stream_truncated && res.need_eof()) {
                    beast::error_code eof_ec;
                    rp.put_eof(eof_ec);
                    if (!eof_ec)
                        ec = {};
                }
                if (ec) {
                    relay_ok = false;
                    break;
                }
                res.body().size = chunk.size() - res.body().size;
                res.body().data = chunk.data();
                res.body().more = !rp.is_done();
                if (masker.active()) {
                    auto emit =
                        masker.feed(std::string_view(chunk.data(), res.body().size), rp.is_done());
                    res.body().data = const_cast<char*>(emit.data());
                    res.body().size = emit.size();
                }
                // Nothing to send yet (a read that ended in a chunk header, or bytes the
                // masker holds back): no buffer at all, since an empty buffer would be
                // written as the last chunk.
                if (res.body().size == 0 && res.body().more)
                    res.body().data = nullptr;
                rec.bytes_down += res.body().size;
            } else {
                // Done after the head (Content-Length: 0): the serializer must be told
                // there is no more, or it waits for a buffer and writes nothing at all.
                res.body().data = nullptr;
                res.body().size = 0;
                res.body().more = false;
            }
            beast::get_lowest_layer(client).expires_after(upstream_io_timeout);
            auto [wec, wn] = co_await http::async_write(client, sr, as_tuple);
            if (wec == http::error::need_buffer)
                wec = {};
            if (wec) {
                relay_ok = false;
                break;
            }
            if (rp.is_done() && !res.body().more)
                break;
        }
    }
    if (!relay_ok || !upstream_keep_alive || up.buffer.size() != 0 ||
        (up.stream && holds_unread(*up.stream))) {
        up.stream.reset();
        up.buffer.clear();
    } else if (up.stream) {
        // Between messages: back to the pool, so an idle client holds no upstream.
        pool.put(pool_key, fc.gen, std::move(*up.stream));
        up.stream.reset();
    }
    if (up.buffer.capacity() > idle_read_size)
        up.buffer.shrink_to_fit();

    rec.decision = rec.approval ? "supervise_approved" : "allow";
    rec.reason = relay_ok ? "" : killed_now(fc) ? kill_reason(fc) : "relay_interrupted";
    rec.findings = to_audit(findings);
    rec.masked_bytes += masker.masked();
    rec.duration_ms = elapsed_ms(started);
    auto ex = co_await net::this_coro::executor;
    audit_batched(fc, std::move(rec), ex);
    co_return relay_ok && !client_close ? exchange_end::keep_going : exchange_end::close;
}

enum class head_status { ok, closed, malformed };

// Reads one request head from the client into `buf` and parses it with Beast. The whole
// head must arrive within `client_header_timeout` (a slow-loris client is cut off) and
// within `header_limit` bytes; the raw bytes pass head_is_strict first, and framing
// fields are checked after parsing (one Content-Length, Transfer-Encoding only as a
// single final "chunked").
// `heard`: the client has sent a request before; only then may it idle for
// `client_idle_timeout` (a connection that has sent nothing gets the head timeout, so
// silent connections are not held longer than slow ones).
template <class Stream>
net::awaitable<head_status> read_head_raw(Stream& client, beast::flat_buffer& buf,
                                          http::request_parser<http::empty_body>& hp, bool heard) {
    std::size_t searched = 0;
    bool idle = buf.size() == 0;
    beast::get_lowest_layer(client).expires_after(idle && heard ? client_idle_timeout
                                                                : client_header_timeout);
    // An idle keep-alive connection waits with a small buffer: a large capacity left
    // by the last exchange is given back, and the buffer grows again once bytes arrive.
    if (idle && buf.capacity() > idle_read_size)
        buf.shrink_to_fit();
    std::size_t head_size = 0;
    for (;;) {
        std::string_view data(static_cast<const char*>(buf.data().data()), buf.size());
        auto end = data.find("\r\n\r\n", searched > 3 ? searched - 3 : 0);
        if (end != std::string_view::npos) {
            head_size = end + 4;
            break;
        }
        for (std::size_t i = searched; i < data.size(); ++i)
            if (data[i] == '\n' && (i == 0 || data[i - 1] != '\r'))
                co_return head_status::malformed; // bare LF line ending
        searched = data.size();
        if (data.size() >= request_header_limit)
            co_return head_status::malformed;
        auto [ec, n] = co_await client.async_read_some(
            buf.prepare(std::min<std::size_t>(request_header_limit - data.size(),
                                              idle ? idle_read_size : 16 * 1024)),
            as_tuple);
        if (ec)
            co_return head_status::closed; // EOF, reset, idle or header timeout
        buf.commit(n);
        if (idle) {
            idle = false; // the first byte starts the header deadline
            beast::get_lowest_layer(client).expires_after(client_header_timeout);
        }
    }
    std::string_view head(static_cast<const char*>(buf.data().data()), head_size);
    if (!parse_request_head(head, hp))
        co_return head_status::malformed;
    buf.consume(head_size);
    co_return head_status::ok;
}

// Reads one request head; on a malformed head answers 400 bad_request with an audit
// line. Returns false when the connection should end.
template <class Stream>
net::awaitable<bool> read_head(Stream& client, beast::flat_buffer& buf,
                               http::request_parser<http::empty_body>& hp, flow_context& fc) {
    auto st = co_await read_head_raw(client, buf, hp, fc.heard);
    if (st == head_status::ok) {
        fc.heard = true;
        co_return true;
    }
    if (st == head_status::malformed)
        co_await deny_bad_request(client, fc, {}, {});
    co_return false;
}

// Splits an absolute-form http:// target into destination and origin-form.
bool parse_absolute_target(std::string_view target, destination& d, exchange_target& t) {
    auto u = boost::urls::parse_absolute_uri(target);
    if (!u || u->scheme_id() != boost::urls::scheme::http || !u->has_authority() ||
        u->has_userinfo())
        return false;
    d.host = dlp::normalize_host(u->encoded_host_address());
    if (d.host.empty())
        return false;
    d.port = u->has_port() ? u->port_number() : 80;
    if (d.port == 0)
        return false;
    t.scheme = "http";
    t.origin_form = std::string(u->encoded_path());
    if (t.origin_form.empty())
        t.origin_form = "/";
    if (u->has_query())
        t.origin_form += "?" + std::string(u->encoded_query());
    t.host_header = std::string(u->encoded_host_and_port());
    return true;
}

// The Host field must name the destination the flow was resolved for (RFC 9112 section
// 3.2: exactly one Host; a different one inside a tunnel is domain fronting).
bool host_field_matches(const http::request_header<>& h, const destination& d,
                        std::uint16_t default_port) {
    auto range = h.equal_range(http::field::host);
    if (std::distance(range.first, range.second) != 1)
        return h.version() == 10 && range.first == range.second;
    auto auth = boost::urls::parse_authority(range.first->value());
    if (!auth || auth->has_userinfo())
        return false;
    std::uint16_t port = auth->has_port() ? auth->port_number() : default_port;
    return port == d.port && dlp::normalize_host(auth->encoded_host_address()) == d.host;
}

// Inside the tunnel the target is origin-form (or absolute-form naming the same host).
bool tunnel_origin_form(std::string_view target, const destination& d, exchange_target& t) {
    if (!target.empty() && target.front() == '/') {
        t.origin_form = std::string(target);
        return true;
    }
    auto u = boost::urls::parse_absolute_uri(target);
    if (!u || u->scheme_id() != boost::urls::scheme::https ||
        dlp::normalize_host(u->encoded_host_address()) != d.host)
        return false;
    t.origin_form = std::string(u->encoded_path());
    if (t.origin_form.empty())
        t.origin_form = "/";
    if (u->has_query())
        t.origin_form += "?" + std::string(u->encoded_query());
    return true;
}

std::string host_port(const destination& d, std::uint16_t default_port) {
    bool v6 = d.host.find(':') != std::string::npos;
    std::string h = v6 ? "[" + d.host + "]" : d.host;
    return d.port == default_port ? h : h + ":" + std::to_string(d.port);
}

// An opaque tunnel (policy `inspect: false`): bytes both ways, audited as uninspected.
// A tunnel follows the audit: while nothing can be recorded (audit_log::healthy), no
// byte more is relayed and the tunnel closes (its record then fails, and is counted).
template <class From, class To>
net::awaitable<void> pump(From& from, To& to, std::uint64_t& counted, const audit_log& log) {
    std::array<char, relay_chunk> buf;
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
    if (answered && cbuf.size() > 0) {
        rec.bytes_up += cbuf.size();
        co_await net::async_write(*up.stream, cbuf.data(), as_tuple);
        cbuf.consume(cbuf.size());
    }
    const audit_log& log = *fc.state->audit;
    if (answered)
        co_await (pump(client, *up.stream, rec.bytes_up, log) &&
                  pump(*up.stream, client, rec.bytes_down, log));
    rec.decision = "allow";
    rec.reason = !answered ? "relay_interrupted" : killed_now(fc) ? kill_reason(fc) : "uninspected";
    rec.inspected = false;
    rec.duration_ms = elapsed_ms(started);
    audit(fc, std::move(rec));
}

// CONNECT host:port: policy on the destination, SSRF check, then 200 and TLS
// interception with a leaf minted for the CONNECT host; inner requests run through
// run_exchange one by one.
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
    switch (co_await resolve_destination(d, *fc.policy)) {
    case resolve_result::failed:
        co_await deny(client, fc, 502, "upstream_connect", rec, {}, false);
        co_return false;
    case resolve_result::private_address:
        co_await deny(client, fc, 403, "private_destination", rec, {}, false);
        co_return false;
    case resolve_result::ok:
        break;
    }
    // An opaque tunnel could carry a request that an earlier method- or path-constrained
    // deny or supervise rule must decide: then the tunnel is intercepted instead.
    if (!rule->inspect && !dlp::constrained_rule_precedes(*fc.policy, *rule, d.host, d.port)) {
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

// A client's TLS handshake with sluice failed: inside a CONNECT to `d` (sluice's leaf
// certificate, from its CA) or, with `d` null, on an HTTPS proxy listener. Logged, counted
// (sluice_client_tls_errors_total{reason}) and audited (decision deny, reason client_tls):
// an agent that does not trust the CA is visible to the operator, and a CONNECT whose
// client refused the leaf gets a hint naming the CA file, once per source address.
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

// The requests on one client connection (plain TCP or an HTTPS proxy listener):
// absolute-form exchanges until a CONNECT takes the connection over.
template <class ClientStream>
net::awaitable<void> serve_requests(ClientStream& client, beast::flat_buffer& cbuf,
                                    flow_context& fc, dlp::caller_evidence& evidence) {
    fc.evidence = &evidence;
    upstream<beast::tcp_stream> plain_up;
    auto up_hook = close_on_kill(fc, plain_up);
    destination plain_dest; // resolved and checked once per upstream host:port
    for (;;) {
        http::request_parser<http::empty_body> hp;
        if (!co_await read_head(client, cbuf, hp, fc))
            co_return;
        audit_record rec;
        rec.method = std::string(hp.get().method_string());
        rec.url = audit_log::redact_query(hp.get().target(), true);

        // Who is calling, per request head: a Proxy-Authorization may come with any.
        auto pa = hp.get().find(http::field::proxy_authorization);
        evidence.proxy_authorization.reset();
        if (pa != hp.get().end())
            evidence.proxy_authorization = std::string(pa->value());
        fc.gen = fc.state->current.load(); // the configuration in force for this request
        fc.policy = nullptr;
        auto who = dlp::resolve_caller(fc.gen->settings->identities, evidence);
        fc.identity = who.identity.value_or("");
        fc.policy =
            who.identity ? dlp::policy_for(fc.gen->settings->policies, fc.identity) : nullptr;
        // Registered first, checked second: a kill that lists the flows after this
        // registration closes it, one before it is seen by the check (control::kill).
        if (fc.handle)
            fc.state->ctl->set_identity(*fc.handle, fc.identity);
        if (killed_now(fc)) {
            co_await deny(client, fc, 503, "killed", rec, {}, false);
            co_return;
        }
        if (!who.identity) {
            co_await deny(client, fc, who.challenge ? 407 : 403, who.reason, rec, {}, false);
            co_return;
        }
        if (fc.policy == nullptr) {
            co_await deny(client, fc, 403, "policy_deny", rec, {}, false);
            co_return;
        }
        if (!fc.state->limits.acquire_connection(fc.identity, fc.policy->limits, fc.connection)) {
            co_await deny_limited(client, fc, "connection_limit", 1, rec, false);
            co_return;
        }
        if (!fc.state->audit->healthy()) { // no tunnel either while nothing can be recorded
            co_await deny(client, fc, 503, "audit_unavailable", rec, {}, false);
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
        if (d.host != plain_dest.host || d.port != plain_dest.port) {
            plain_up.stream.reset();
            plain_dest = std::move(d);
            switch (co_await resolve_destination(plain_dest, *fc.policy)) {
            case resolve_result::failed:
                plain_dest = {};
                co_await deny(client, fc, 502, "upstream_connect", rec, {}, false);
                co_return;
            case resolve_result::private_address:
                plain_dest = {};
                co_await deny(client, fc, 403, "private_destination", rec, {}, false);
                co_return;
            case resolve_result::ok:
                break;
            }
        }
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

    beast::tcp_stream client(std::move(socket));
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
        ssl_stream tls(std::move(client), *listener.tls);
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
