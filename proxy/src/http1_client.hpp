// The client side of HTTP/1.1 (RFC 9112) for every step of a flow: reading a request
// head, answering a refusal (recorded first), and the lingering close after a refused
// body. Templates over the client stream (stream_types.hpp); what does not depend on the
// stream (the records, the answer) is in http1_client.cpp. Internal to proxy/.
// Not thread safe: one flow's coroutine.
#pragma once

#include "answers.hpp"
#include "destination.hpp"
#include "exchange.hpp"
#include "flow_audit.hpp"
#include "flow_context.hpp"
#include "request_head.hpp"

#include "sluice/dlp/hostname.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::proxy {

/// Writes the deny record (decision "deny" unless head_rec has one, `reason`, the
/// findings) after the connection's last record, and builds the answer (by method and
/// URL: git's smart-HTTP requests get a body git prints, answers.hpp). When no record can
/// be written the answer is 503 audit_unavailable and closes. Second: the record is durable.
net::awaitable<std::pair<answer, bool>>
record_denial(flow_context& fc, unsigned status, std::string_view reason,
              const audit_record& head_rec, const std::vector<dlp::finding_record>& findings,
              bool keep_alive);
/// As record_denial for a limit: 429 with Retry-After (seconds).
net::awaitable<std::pair<answer, bool>> record_limited(flow_context& fc, std::string_view reason,
                                                       std::uint32_t retry_after,
                                                       const audit_record& head_rec,
                                                       bool keep_alive);

enum class head_status { ok, closed, malformed };

template <class Stream>
net::awaitable<void> send_answer(Stream& stream, answer res) {
    beast::get_lowest_layer(stream).expires_after(client_idle_timeout);
    co_await http::async_write(stream, res, as_tuple);
}

/// Answers the client and writes the deny record. Returns false if the audit failed.
/// The record comes by reference: an argument object would live in every caller's
/// coroutine frame (one per co_await deny), also while an idle connection waits.
template <class Stream>
net::awaitable<bool> deny(Stream& stream, flow_context& fc, unsigned status,
                          std::string_view reason, const audit_record& head_rec,
                          const std::vector<dlp::finding_record>& findings, bool keep_alive) {
    auto [res, ok] = co_await record_denial(fc, status, reason, head_rec, findings, keep_alive);
    co_await send_answer(stream, std::move(res));
    co_return ok;
}

/// 400 bad_request for a request inside an intercepted tunnel (its method and URL
/// recorded). A coroutine of its own, for the same reason as deny's reference.
template <class Stream>
net::awaitable<void> deny_bad_request(Stream& stream, flow_context& fc, std::string_view method,
                                      std::string url) {
    audit_record bad;
    bad.method = std::string(method);
    bad.url = std::move(url);
    co_await deny(stream, fc, 400, "bad_request", bad, {}, false);
}

/// A limit reached (`policies[].limits`): 429 with Retry-After, audited like any denial.
/// Returns false if the audit failed.
template <class Stream>
net::awaitable<bool> deny_limited(Stream& stream, flow_context& fc, std::string_view reason,
                                  std::uint32_t retry_after, const audit_record& head_rec,
                                  bool keep_alive) {
    auto [res, ok] = co_await record_limited(fc, reason, retry_after, head_rec, keep_alive);
    co_await send_answer(stream, std::move(res));
    co_return ok;
}

/// Carries out a step's refusal (exchange.hpp) for exchange `ex`: answered and recorded,
/// or only recorded when nobody is left to answer.
template <class Stream>
net::awaitable<exchange_end> refuse(Stream& client, flow_context& fc, exchange& ex,
                                    const refusal& r) {
    if (r.silent)
        co_return exchange_end::close;
    const bool ok =
        r.retry_after != 0
            ? co_await deny_limited(client, fc, r.reason, r.retry_after, ex.rec, r.keep_alive)
            : co_await deny(client, fc, r.status, r.reason, ex.rec, ex.findings, r.keep_alive);
    co_return ok&& r.keep_alive ? exchange_end::keep_going : exchange_end::close;
}

/// Reads and drops up to `length` bytes of a refused request's body (what is in `buf`
/// first), at most `linger_limit` of them and only while they arrive within
/// `linger_timeout`; ends early when the client closes. Closing with a body unread resets
/// the connection, and the reset can destroy the answer before the client reads it.
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

/// After an exchange refused with its body still coming (fc.unread_body): that body is
/// read off before the caller closes the connection. Not for a killed flow.
template <class Stream>
net::awaitable<void> linger(Stream& client, beast::flat_buffer& buf, flow_context& fc) {
    const std::uint64_t unread = std::exchange(fc.unread_body, 0);
    if (!killed_now(fc))
        co_await discard_body(client, buf, unread);
}

/// Reads one request head from the client into `buf` and parses it with Beast. The whole
/// head must arrive within `client_header_timeout` (a slow-loris client is cut off) and
/// within `request_header_limit` bytes; the raw bytes pass head_is_strict first, and
/// framing fields are checked after parsing (request_head.hpp).
/// `heard`: the client has sent a request before; only then may it idle for
/// `client_idle_timeout` (a connection that has sent nothing gets the head timeout, so
/// silent connections are not held longer than slow ones).
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

/// Reads one request head; on a malformed head answers 400 bad_request with an audit
/// line. Returns false when the connection should end.
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

/// DLP on the destination name, after policy and before resolution. True when the name
/// may be resolved (log-only findings are kept in `rec`); otherwise the client has its
/// answer, and the record names the host only as "[redacted]".
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

} // namespace sluice::proxy
