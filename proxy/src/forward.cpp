#include "forward.hpp"

#include "flow_audit.hpp"
#include "stream_types.hpp"
#include "upstream_pool.hpp"

#include "sluice/dlp/body_stream.hpp"
#include "sluice/proxy/metrics.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include <cstring>
#include <tuple>
#include <vector>

namespace sluice::proxy {

std::string upstream_pool_key(const flow_context& fc, const exchange& ex) {
    return fc.identity + '\n' + ex.tgt->dest->host + ":" + std::to_string(ex.tgt->dest->port);
}

namespace {

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
// and says how much of the body may leave; only that is written upstream. Memory is a few
// windows per flow whatever the body's size (this buffer; the inspection carries up to one
// window back for a stream a window cut, body_stream.hpp). A window that cannot be released at all
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

// The refusal for a streamed body that did not go up whole: the origin has a truncated
// request it cannot complete, so the caller drops that connection.
refusal streamed_refusal(const stream_outcome& sres, exchange& ex, flow_context& fc) {
    fc.unread_body = sres.unread;
    ex.rec.findings = to_audit(ex.findings);
    ex.rec.url = audit_url(ex.url_prefix, ex.tgt->origin_form, ex.findings);
    ex.rec.duration_ms = elapsed_ms(ex.started);
    if (sres.end == stream_end::denied)
        return refusal{sres.verdict.kind == dlp::verdict_kind::supervise
                           ? 403u
                           : static_cast<unsigned>(sres.verdict.status),
                       sres.verdict.reason};
    if (sres.end == stream_end::upstream_failed)
        return refusal{502, "upstream_connect"};
    return refusal{400, "bad_request"};
}

// Connects `up` unless it already goes to the exchange's destination: with `from_pool`,
// an idle pooled connection of this identity to the same place first (upstream_pool.hpp).
// `reused`: the connection was open before (and may have been closed by the origin).
template <class UpstreamStream>
net::awaitable<step_result> ensure_upstream(upstream<UpstreamStream>& up, exchange& ex,
                                            flow_context& fc, bool from_pool, bool& reused) {
    const std::string key = ex.tgt->dest->host + ":" + std::to_string(ex.tgt->dest->port);
    reused = up.stream && up.key == key;
    if (reused)
        co_return std::nullopt;
    if (from_pool) {
        auto& pool = net::use_service<upstream_pool<UpstreamStream, generation>>(
            net::query(co_await net::this_coro::executor, net::execution::context));
        if (auto pooled = pool.take(upstream_pool_key(fc, ex), fc.gen)) {
            up.stream.emplace(std::move(*pooled));
            up.buffer.clear();
            up.key = key;
            reused = true;
            co_return std::nullopt;
        }
    }
    auto cr = co_await connect_upstream(up, *ex.tgt->dest, fc);
    if (cr == connect_result::ok)
        co_return std::nullopt;
    ex.rec.duration_ms = elapsed_ms(ex.started);
    co_return refusal{502, cr == connect_result::tls_failed ? "upstream_tls" : "upstream_connect",
                      ex.client_keep_alive && fc.unread_body == 0};
}

} // namespace

template <class ClientStream, class UpstreamStream>
net::awaitable<step_result> forward_request(ClientStream& client, beast::flat_buffer& cbuf,
                                            upstream<UpstreamStream>& up, forward_plan& plan,
                                            exchange& ex, flow_context& fc) {
    auto& out = plan.out;
    for (int attempt = 0; attempt < 2; ++attempt) {
        bool reused = false;
        if (auto r = co_await ensure_upstream(up, ex, fc, attempt == 0, reused))
            co_return r;
        beast::get_lowest_layer(*up.stream).expires_after(upstream_io_timeout);
        beast::error_code wec;
        if (ex.streamed) { // the head only: the body follows window by window
            http::request_serializer<http::string_body> head_sr{out};
            std::tie(wec, std::ignore) =
                co_await http::async_write_header(*up.stream, head_sr, as_tuple);
        } else {
            std::tie(wec, std::ignore) = co_await http::async_write(*up.stream, out, as_tuple);
        }
        if (!wec)
            break;
        up.stream.reset();
        if (!reused || attempt == 1)
            co_return refusal{502, "upstream_connect"};
        // A reused keep-alive connection the origin had closed: one fresh attempt.
    }
    ex.rec.bytes_up = out.body().size(); // body bytes sent (a streamed body: counted below)
    if (!ex.streamed)
        co_return std::nullopt;
    fc.unread_body = 0; // stream_request_body reads it, and says what is left if it stops
    auto sres = co_await stream_request_body(client, cbuf, *up.stream, *ex.declared_length, fc,
                                             *fc.policy, ex.inspect, ex.findings);
    ex.rec.bytes_up = sres.forwarded;
    if (sres.end == stream_end::done)
        co_return std::nullopt;
    up.stream.reset();
    co_return streamed_refusal(sres, ex, fc);
}

#define SLUICE_INSTANTIATE(C, U)                                                                   \
    template net::awaitable<step_result> forward_request<C, U>(                                    \
        C&, beast::flat_buffer&, upstream<U>&, forward_plan&, exchange&, flow_context&);
SLUICE_FOR_EACH_STREAM_PAIR(SLUICE_INSTANTIATE)
#undef SLUICE_INSTANTIATE

} // namespace sluice::proxy
