#include "response_relay.hpp"

#include "forward.hpp"
#include "http_fields.hpp"
#include "response_body.hpp"
#include "stream_types.hpp"
#include "upstream_pool.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <optional>

namespace sluice::proxy {

namespace {

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
    // A brokered secret echoed back (some APIs repeat headers in errors, or store what
    // they were sent) never reaches the agent. Only unencoded bodies can be checked, so
    // while any secret is brokered, any content or transfer coding other than
    // identity/chunked is refused, whether or not this flow injected one.
    if (masker.active() && !only_identity_coded(res)) {
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
