// TLS inside TLS (CONNECT on an HTTPS proxy listener): asio::ssl::stream wants a next
// layer with `lowest_layer_type`, which beast::ssl_stream lacks. This layer refers to
// the listener's TLS stream (which outlives the tunnel, so serve_client can still shut
// it down) and forwards the stream operations. Used by flow.cpp and, for WebSocket
// sessions in such tunnels, websocket_session.cpp.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/role.hpp>

#include <utility>

namespace sluice::proxy {

template <class Inner>
class ref_layer {
public:
    using executor_type = typename Inner::executor_type;
    using next_layer_type = Inner;
    using lowest_layer_type = Inner;

    explicit ref_layer(Inner& inner)
        : inner_(&inner) {}

    executor_type get_executor() noexcept { return inner_->get_executor(); }
    Inner& next_layer() noexcept { return *inner_; }
    const Inner& next_layer() const noexcept { return *inner_; }
    Inner& lowest_layer() noexcept { return *inner_; }

    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& b, Token&& token) {
        return inner_->async_read_some(b, std::forward<Token>(token));
    }
    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& b, Token&& token) {
        return inner_->async_write_some(b, std::forward<Token>(token));
    }

private:
    Inner* inner_;
};

// A WebSocket session over the inner TLS tears down its next layer after the closing
// handshake; here that is the listener's TLS stream, which serve_client shuts down itself
// when the flow ends, so there is nothing to do.
template <class Inner, class Handler>
void async_teardown(boost::beast::role_type, ref_layer<Inner>& s, Handler&& handler) {
    boost::asio::post(s.get_executor(),
                      boost::beast::bind_front_handler(std::forward<Handler>(handler),
                                                       boost::beast::error_code{}));
}

} // namespace sluice::proxy
