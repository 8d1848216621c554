// A type-erased byte stream for the WebSocket relay (websocket_session.cpp). Beast's
// websocket::stream, with its permessage-deflate machinery, is a large template: compiled
// once per stream type it was the biggest translation unit of the build (four stream
// pairs: plain TCP, a TLS proxy listener, an intercepted CONNECT, TLS inside TLS). Over
// any_stream it is compiled once; each concrete stream contributes only its read, write,
// teardown and close.
//
// Shape: refers to a stream owned elsewhere, which must outlive it and every operation
// started through it. async_read_some / async_write_some take at most `max_buffers`
// buffers of a sequence per call; the rest wait for the next call, as a partial transfer
// (Asio's AsyncReadStream / AsyncWriteStream requirements allow it). Handlers are erased
// with asio::any_completion_handler, which keeps their executor, allocator and
// cancellation slot. Errors are the wrapped stream's own.
//
// Customisation points, found by argument-dependent lookup as Beast requires:
// async_teardown (websocket close handshake; boost/beast/websocket/teardown.hpp) and
// beast_close_socket (websocket timeouts; boost/beast/core/stream_traits.hpp), both
// forwarded to the wrapped stream's own.
//
// Thread safety: as the wrapped stream (one strand; no operation of a kind concurrent
// with another of the same kind).
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/websocket/teardown.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <utility>

namespace sluice::proxy {

/// Up to `max_buffers` buffers of a sequence, by value (a buffer sequence itself).
template <class Buffer>
struct buffer_run {
    static constexpr std::size_t max_buffers = 8;
    std::array<Buffer, max_buffers> items{};
    std::size_t count = 0;

    const Buffer* begin() const noexcept { return items.data(); }
    const Buffer* end() const noexcept { return items.data() + count; }

    template <class Sequence>
    static buffer_run first_of(const Sequence& seq) {
        buffer_run run;
        auto it = boost::asio::buffer_sequence_begin(seq);
        const auto end = boost::asio::buffer_sequence_end(seq);
        for (; it != end && run.count < max_buffers; ++it) {
            Buffer b(*it);
            if (b.size() != 0)
                run.items[run.count++] = b;
        }
        return run;
    }
};

class any_stream {
public:
    using executor_type = boost::asio::any_io_executor;
    using io_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, std::size_t)>;
    using teardown_handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;

    /// Refers to `stream` (not owned).
    template <class Stream>
    explicit any_stream(Stream& stream)
        : impl_(std::make_unique<model<Stream>>(stream)) {}

    executor_type get_executor() noexcept { return impl_->executor(); }

    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto handler, buffer_run<boost::asio::mutable_buffer> run) {
                impl_->read_some(run, io_handler(std::move(handler)));
            },
            token, buffer_run<boost::asio::mutable_buffer>::first_of(buffers));
    }

    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto handler, buffer_run<boost::asio::const_buffer> run) {
                impl_->write_some(run, io_handler(std::move(handler)));
            },
            token, buffer_run<boost::asio::const_buffer>::first_of(buffers));
    }

    /// The wrapped stream's WebSocket teardown (see async_teardown below).
    void teardown(boost::beast::role_type role, teardown_handler handler) {
        impl_->teardown(role, std::move(handler));
    }
    /// Closes the wrapped stream's socket at once (Beast's close_socket).
    void close_socket() { impl_->close(); }

private:
    struct base {
        virtual ~base() = default;
        virtual executor_type executor() = 0;
        virtual void read_some(buffer_run<boost::asio::mutable_buffer> b, io_handler h) = 0;
        virtual void write_some(buffer_run<boost::asio::const_buffer> b, io_handler h) = 0;
        virtual void teardown(boost::beast::role_type role, teardown_handler h) = 0;
        virtual void close() = 0;
    };

    template <class Stream>
    struct model final : base {
        explicit model(Stream& s)
            : stream(s) {}
        executor_type executor() override { return stream.get_executor(); }
        // Each erased handler is bound to the stream's executor (the flow's, as the
        // caller's): the streams post completions with blocking.never, which Boost 1.81's
        // any_completion_executor (an erased handler's own) cannot require.
        template <class Handler>
        auto bound(Handler h) {
            return boost::asio::bind_executor(stream.get_executor(), std::move(h));
        }
        void read_some(buffer_run<boost::asio::mutable_buffer> b, io_handler h) override {
            stream.async_read_some(b, bound(std::move(h)));
        }
        void write_some(buffer_run<boost::asio::const_buffer> b, io_handler h) override {
            stream.async_write_some(b, bound(std::move(h)));
        }
        void teardown(boost::beast::role_type role, teardown_handler h) override {
            using boost::beast::websocket::async_teardown;
            async_teardown(role, stream, bound(std::move(h)));
        }
        void close() override {
            boost::beast::close_socket(boost::beast::get_lowest_layer(stream));
        }
        Stream& stream;
    };

    std::unique_ptr<base> impl_;
};

/// Beast's WebSocket close handshake ends with a teardown of the stream: the wrapped
/// stream's own (TLS close_notify, TCP shutdown).
template <class Handler>
void async_teardown(boost::beast::role_type role, any_stream& stream, Handler&& handler) {
    stream.teardown(role, any_stream::teardown_handler(std::forward<Handler>(handler)));
}

/// Beast's close_socket (a WebSocket timeout): closes the wrapped stream's socket.
inline void beast_close_socket(any_stream& stream) {
    stream.close_socket();
}

} // namespace sluice::proxy
