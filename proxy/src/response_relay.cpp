#include "response_relay.hpp"

#include "forward.hpp"
#include "http_fields.hpp"
#include "response_body.hpp"
#include "stream_types.hpp"
#include "upstream_pool.hpp"

#include "sluice/dlp/git.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
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

// The most of a receive-pack advertisement held to add `no-thin` (one line per ref: a
// repository with a hundred thousand refs is about 8 MiB).
constexpr std::size_t max_advertisement = 32u << 20;

enum class advert_end { relayed, failed, too_large };

// A push's advertisement (exchange::git_advertisement): read whole through the masker,
// `no-thin` added to its capabilities (dlp/git.hpp), sent with its new length. One that is
// not an advertisement after all goes out as it came.
template <class ClientStream, class UpstreamStream>
net::awaitable<advert_end> relay_advertisement(ClientStream& client, upstream<UpstreamStream>& up,
                                               response_parser& rp, dlp::secret_masker& masker,
                                               exchange& ex) {
    auto& res = rp.get();
    std::string body;
    std::array<char, relay_chunk> chunk;
    io_deadline dl;
    while (!rp.is_done()) {
        if (!co_await read_body_some(up, rp, chunk, masker, ex, dl))
            co_return advert_end::failed;
        if (res.body().data != nullptr)
            body.append(static_cast<const char*>(res.body().data), res.body().size);
        if (body.size() > max_advertisement)
            co_return advert_end::too_large;
    }
    http::response<http::string_body> out{res.result(), 11};
    out.reason(res.reason());
    for (const auto& f : res)
        if (f.name() != http::field::content_length && f.name() != http::field::transfer_encoding)
            out.insert(f.name_string(), f.value());
    auto rewritten = dlp::git::advertise_no_thin(body);
    ex.rec.bytes_down += rewritten ? rewritten->size() - body.size() : 0;
    out.body() = rewritten ? std::move(*rewritten) : std::move(body);
    out.keep_alive(res.keep_alive());
    out.prepare_payload();
    beast::get_lowest_layer(client).expires_after(upstream_io_timeout);
    auto [ec, n] = co_await http::async_write(client, out, as_tuple);
    co_return ec ? advert_end::failed : advert_end::relayed;
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
    if (ex.git_advertisement && res.result_int() == 200 && !bodiless && only_identity_coded(res)) {
        const advert_end a = co_await relay_advertisement(client, up, rp, masker, ex);
        if (a == advert_end::too_large) {
            up.stream.reset();
            co_return relay_end{refusal{502, "upstream_encoding"}};
        }
        end.relay_ok = a == advert_end::relayed;
    } else {
        end.relay_ok = co_await relay_head_and_body(client, up, rp, bodiless, masker, ex);
    }
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
