#include "response_relay.hpp"

#include "forward.hpp"
#include "http_fields.hpp"
#include "stream_types.hpp"
#include "upstream_pool.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <optional>

namespace sluice::proxy {

namespace {

using response_parser = http::response_parser<http::buffer_body>;

// Reads the response head into `parser`, passing 1xx interim answers (except 101) on to
// the client (masked). False when the origin failed.
template <class ClientStream, class UpstreamStream>
net::awaitable<bool> read_response_head(ClientStream& client, upstream<UpstreamStream>& up,
                                        std::optional<response_parser>& parser, bool head_request,
                                        const dlp::secret_masker& masker, exchange& ex) {
    for (;;) {
        auto& p = parser.emplace();
        p.header_limit(header_limit);
        p.body_limit(boost::none);
        if (head_request)
            p.skip(true);
        beast::get_lowest_layer(*up.stream).expires_after(upstream_io_timeout);
        auto [ec, n] = co_await http::async_read_header(*up.stream, up.buffer, p, as_tuple);
        if (ec)
            co_return false;
        auto status = p.get().result_int();
        if (status < 100 || status >= 200 || status == 101)
            co_return true;
        http::response<http::empty_body> interim;
        interim.version(11);
        interim.result(status); // by number: 103 and other codes Beast has no name for
        interim.reason(p.get().reason());
        for (const auto& f : p.get())
            interim.insert(f.name_string(), f.value());
        ex.rec.masked_bytes += mask_head(interim, masker);
        co_await http::async_write(client, interim, as_tuple);
    }
}

// One read of body bytes from the origin into `chunk`, put in the response's buffer_body
// through the masker. False when the origin failed.
template <class UpstreamStream>
net::awaitable<bool> read_body_some(upstream<UpstreamStream>& up, response_parser& rp,
                                    std::array<char, relay_chunk>& chunk,
                                    dlp::secret_masker& masker, exchange& ex) {
    auto& res = rp.get();
    res.body().data = chunk.data();
    res.body().size = chunk.size();
    beast::get_lowest_layer(*up.stream).expires_after(upstream_io_timeout);
    // read_some: relay what has arrived (server-sent events, streamed model output)
    // instead of waiting for a full buffer.
    auto [ec, n] = co_await http::async_read_some(*up.stream, up.buffer, rp, as_tuple);
    if (ec == http::error::need_buffer)
        ec = {};
    // A body that ends with the connection (no length, no chunking): many origins close
    // without TLS close_notify, which is its end, as for curl and browsers (RFC 9112
    // section 6.3 item 8).
    if (ec == net::ssl::error::stream_truncated && res.need_eof()) {
        beast::error_code eof_ec;
        rp.put_eof(eof_ec);
        if (!eof_ec)
            ec = {};
    }
    if (ec)
        co_return false;
    res.body().size = chunk.size() - res.body().size;
    res.body().data = chunk.data();
    res.body().more = !rp.is_done();
    if (masker.active()) {
        auto emit = masker.feed(std::string_view(chunk.data(), res.body().size), rp.is_done());
        res.body().data = const_cast<char*>(emit.data());
        res.body().size = emit.size();
    }
    // Nothing to send yet (a read that ended in a chunk header, or bytes the masker holds
    // back): no buffer at all, since an empty buffer would be written as the last chunk.
    if (res.body().size == 0 && res.body().more)
        res.body().data = nullptr;
    ex.rec.bytes_down += res.body().size;
    co_return true;
}

// The head, then the body as it arrives. False when either side failed.
template <class ClientStream, class UpstreamStream>
net::awaitable<bool> relay_head_and_body(ClientStream& client, upstream<UpstreamStream>& up,
                                         response_parser& rp, bool bodiless,
                                         dlp::secret_masker& masker, exchange& ex) {
    auto& res = rp.get();
    http::serializer<false, http::buffer_body> sr{res};
    // The head goes out first, as it is now (masked): the serializer keeps views into
    // these fields, and trailer fields the parser merges in later must never reach the
    // client as head fields.
    beast::get_lowest_layer(client).expires_after(upstream_io_timeout);
    auto [hec, hn] = co_await http::async_write_header(client, sr, as_tuple);
    if (hec)
        co_return false;
    if (bodiless)
        co_return true;
    std::array<char, relay_chunk> chunk;
    while (!sr.is_done()) {
        if (!rp.is_done()) {
            if (!co_await read_body_some(up, rp, chunk, masker, ex))
                co_return false;
        } else {
            // Done after the head (Content-Length: 0): the serializer must be told there
            // is no more, or it waits for a buffer and writes nothing at all.
            res.body().data = nullptr;
            res.body().size = 0;
            res.body().more = false;
        }
        beast::get_lowest_layer(client).expires_after(upstream_io_timeout);
        auto [wec, wn] = co_await http::async_write(client, sr, as_tuple);
        if (wec == http::error::need_buffer)
            wec = {};
        if (wec)
            co_return false;
        if (rp.is_done() && !res.body().more)
            break;
    }
    co_return true;
}

} // namespace

template <class ClientStream, class UpstreamStream>
net::awaitable<relay_end> relay_response(ClientStream& client, upstream<UpstreamStream>& up,
                                         forward_plan& plan, exchange& ex, flow_context& fc) {
    auto& masker = *plan.masker;
    const bool head_request = plan.out.method() == http::verb::head;
    std::optional<response_parser> parser;
    if (!co_await read_response_head(client, up, parser, head_request, masker, ex)) {
        up.stream.reset();
        co_return relay_end{refusal{502, "upstream_connect"}};
    }
    auto& rp = *parser;
    auto& res = rp.get();
    // An injected secret echoed back (some APIs repeat headers in errors) never reaches
    // the agent. Only unencoded bodies can be checked, so after an injection any content
    // or transfer coding other than identity/chunked is refused.
    if (fc.secret_sent && !only_identity_coded(res)) {
        up.stream.reset();
        co_return relay_end{refusal{502, "upstream_encoding"}};
    }
    ex.rec.masked_bytes += mask_head(res, masker);
    const bool upstream_keep_alive = res.keep_alive() && !res.need_eof();
    relay_end end;
    end.client_close = !ex.client_keep_alive || res.need_eof();
    res.keep_alive(!end.client_close);
    const bool bodiless =
        rp.is_done() && (head_request || res.result_int() == 204 || res.result_int() == 304);
    end.relay_ok = co_await relay_head_and_body(client, up, rp, bodiless, masker, ex);
    if (!end.relay_ok || !upstream_keep_alive || up.buffer.size() != 0 ||
        (up.stream && holds_unread(*up.stream))) {
        up.stream.reset();
        up.buffer.clear();
    } else if (up.stream) {
        // Between messages: back to the pool, so an idle client holds no upstream.
        auto& pool = net::use_service<upstream_pool<UpstreamStream, generation>>(
            net::query(co_await net::this_coro::executor, net::execution::context));
        pool.put(upstream_pool_key(fc, ex), fc.gen, std::move(*up.stream));
        up.stream.reset();
    }
    if (up.buffer.capacity() > idle_read_size)
        up.buffer.shrink_to_fit();
    co_return end;
}

#define SLUICE_INSTANTIATE(C, U)                                                                   \
    template net::awaitable<relay_end> relay_response<C, U>(C&, upstream<U>&, forward_plan&,       \
                                                            exchange&, flow_context&);
SLUICE_FOR_EACH_STREAM_PAIR(SLUICE_INSTANTIATE)
#undef SLUICE_INSTANTIATE

} // namespace sluice::proxy
