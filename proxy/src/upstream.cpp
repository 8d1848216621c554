#include "upstream.hpp"

#include "sluice/proxy/metrics.hpp"
#include "sluice/proxy/upstream_tls.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/this_coro.hpp>
#include <spdlog/spdlog.h>

namespace sluice::proxy {

namespace {

// TCP to the first of `d`'s endpoints that answers, within the connect timeout; no
// Nagle (requests and answers are written whole). Null when none answered.
net::awaitable<std::optional<plain_stream>> connect_tcp(const destination& d, flow_context& fc) {
    plain_stream s(co_await net::this_coro::executor);
    s.expires_after(fc.gen->settings->connect_timeout);
    auto [ec, ep] = co_await s.async_connect(d.endpoints, as_tuple);
    if (ec)
        co_return std::nullopt;
    boost::system::error_code ignored;
    s.socket().set_option(tcp::no_delay(true), ignored);
    co_return std::optional<plain_stream>(std::move(s));
}

// Drops `up`'s previous connection and opens TCP to `d` (connect_tcp).
template <class Stream>
net::awaitable<std::optional<plain_stream>> reconnect_tcp(upstream<Stream>& up,
                                                          const destination& d, flow_context& fc) {
    up.stream.reset();
    up.buffer.clear();
    co_return co_await connect_tcp(d, fc);
}

// `up` now holds `s`, pooled under "host:port".
template <class Stream>
void keep(upstream<Stream>& up, Stream&& s, const destination& d) {
    up.stream.emplace(std::move(s));
    up.key = d.host + ":" + std::to_string(d.port);
}

} // namespace

net::awaitable<connect_result> connect_upstream(upstream<plain_stream>& up, const destination& d,
                                                flow_context& fc) {
    const auto started = std::chrono::steady_clock::now();
    auto s = co_await reconnect_tcp(up, d, fc);
    if (!s)
        co_return connect_result::connect_failed;
    if (fc.state->stats)
        fc.state->stats->on_upstream_connect(seconds_since(started), -1);
    keep(up, std::move(*s), d);
    co_return connect_result::ok;
}

net::awaitable<connect_result> connect_upstream(upstream<upstream_tls>& up, const destination& d,
                                                flow_context& fc) {
    const auto started = std::chrono::steady_clock::now();
    auto s = co_await reconnect_tcp(up, d, fc);
    if (!s)
        co_return connect_result::connect_failed;
    const double connect_s = seconds_since(started);
    const auto tls_started = std::chrono::steady_clock::now();
    upstream_tls tls(std::move(*s), *fc.gen->upstream_tls);
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
    keep(up, std::move(tls), d);
    co_return connect_result::ok;
}

} // namespace sluice::proxy
