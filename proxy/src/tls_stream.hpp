// Both TLS legs of an intercepted CONNECT (client side and origin side): TLS (OpenSSL)
// over any Asio stream, with buffers that exist only while bytes are in flight.
//
// Why not asio::ssl::stream: each one keeps two 17 KiB vectors (zero-filled, so
// resident) and a 2 x 17 KiB OpenSSL BIO pair for its whole life, about 68 KiB per
// connection before any data. An idle intercepted keep-alive connection should cost
// little more than its SSL object (issue 10: 10,000 idle connections under 48 KiB each).
//
// Here OpenSSL talks to a BIO of our own (tls_core, tls_stream.cpp): reads take bytes
// from a small input buffer that the next layer filled, writes append ciphertext to an
// output buffer that the operation then writes to the next layer. The input buffer is
// 4 KiB while records are small and grows to one full record (16 KiB + overhead, RFC
// 8446 section 5.2) when reads fill it; output buffers over 4 KiB are given back after
// each flush. SSL_MODE_RELEASE_BUFFERS lets OpenSSL free its own record buffers between
// records.
//
// The operations model Asio's AsyncReadStream and AsyncWriteStream (so Beast's HTTP and
// WebSocket operations run over it), plus async_handshake (server or client, optionally
// with bytes already read) and async_shutdown (sends close_notify, does not wait for the
// peer's). Errors: net::error::eof after the peer's close_notify,
// net::ssl::error::stream_truncated when the next layer ends without one, OpenSSL errors
// in asio's ssl category, and the next layer's own errors as they come (timeouts of a
// beast::tcp_stream next layer apply to every read and write made here).
//
// One read and one write may be outstanding at a time (full duplex, as for WebSocket
// relays); handshake and shutdown run alone. Whichever operation finds ciphertext
// waiting writes it; the other waits for that write to finish, so the output buffer is
// bounded by one operation's data. Not thread-safe: use it from one thread (strand).
#pragma once

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/role.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::proxy {

// The non-template part: the SSL object, its BIO and the two buffers.
class tls_core {
public:
    // Throws boost::system::system_error when OpenSSL cannot make the SSL object.
    explicit tls_core(SSL_CTX* ctx);
    ~tls_core();
    tls_core(const tls_core&) = delete;
    tls_core& operator=(const tls_core&) = delete;

    SSL* ssl() const noexcept { return ssl_; }

    // What one SSL call asks for next.
    enum class step { done, read, flush, failed };
    // Runs after an SSL call that returned `ret`; sets ec when failed.
    step classify(int ret, boost::system::error_code& ec) const;

    // Input: bytes from the next layer that OpenSSL has not taken yet.
    boost::asio::mutable_buffer prepare_input();
    void commit_input(std::size_t n);
    void add_input(const void* data, std::size_t n);

    // Output: ciphertext OpenSSL wrote, waiting for the next layer.
    bool output_waiting() const noexcept { return !out_.empty(); }
    void reserve_output(std::size_t plaintext);
    boost::asio::const_buffer begin_flush(); // moves waiting output to the flush buffer
    void end_flush();

    // Bytes of buffer storage held now (input plus both output buffers).
    std::size_t buffer_capacity() const noexcept {
        return in_cap_ + out_.capacity() + flushing_buf_.capacity();
    }

    bool flushing = false; // one operation writes to the next layer at a time
    bool reading = false;  // and one reads from it

    // True when bytes are held that the peer sent and nobody has read yet (ciphertext in
    // the input buffer or plaintext inside OpenSSL): such a connection is not idle.
    bool input_pending() const noexcept {
        return in_end_ != in_begin_ || SSL_has_pending(ssl_) != 0;
    }
    // True when the input buffer starts with a whole TLS record (read_some takes it in
    // the same call rather than returning after the first record).
    bool record_buffered() const noexcept;

    // Copies up to `cap` bytes of a buffer sequence into a per-thread scratch buffer (for
    // one SSL_write of several buffers: one record instead of one per buffer).
    static unsigned char* scratch(std::size_t cap);

    static int bio_write(BIO* b, const char* data, std::size_t len, std::size_t* written);
    static int bio_read(BIO* b, char* data, std::size_t len, std::size_t* got);

private:
    SSL* ssl_ = nullptr;
    std::unique_ptr<unsigned char[]> in_;
    std::size_t in_cap_ = 0, in_begin_ = 0, in_end_ = 0, in_want_ = 0;
    std::vector<unsigned char> out_, flushing_buf_;
};

template <class NextLayer>
class tls_stream {
public:
    using next_layer_type = NextLayer;
    using executor_type = typename NextLayer::executor_type;
    using native_handle_type = SSL*;

    // Most one write_some turns into records at a time (bounds the output buffer).
    static constexpr std::size_t max_write = 64 * 1024;

    tls_stream(NextLayer&& next, boost::asio::ssl::context& ctx)
        : next_(std::move(next))
        , core_(std::make_unique<tls_core>(ctx.native_handle()))
        , io_done_(next_.get_executor()) {
        io_done_.expires_at(boost::asio::steady_timer::time_point::max());
    }
    // Movable while no operation is outstanding (a pooled upstream connection moves).
    tls_stream(tls_stream&&) = default;
    tls_stream& operator=(tls_stream&&) = default;

    executor_type get_executor() noexcept { return next_.get_executor(); }
    NextLayer& next_layer() noexcept { return next_; }
    const NextLayer& next_layer() const noexcept { return next_; }
    SSL* native_handle() noexcept { return core_->ssl(); }
    // See tls_core::input_pending (a pooled upstream must hold none).
    bool input_pending() const noexcept { return core_->input_pending(); }
    // Bytes of buffer storage this stream holds now; small while idle.
    std::size_t buffer_capacity() const noexcept { return core_->buffer_capacity(); }

    // Completion: void(error_code, std::size_t bytes_used); every byte of `initial` is
    // taken (it is the start of the peer's first flight).
    template <class ConstBuffers, class Token>
    auto async_handshake(boost::asio::ssl::stream_base::handshake_type type,
                         const ConstBuffers& initial, Token&& token) {
        std::size_t used = 0;
        for (auto it = boost::asio::buffer_sequence_begin(initial);
             it != boost::asio::buffer_sequence_end(initial); ++it) {
            boost::asio::const_buffer b(*it);
            core_->add_input(b.data(), b.size());
            used += b.size();
        }
        set_role(type);
        return run<void(boost::system::error_code, std::size_t)>(
            [used](SSL* s, std::size_t& n) {
                n = used;
                return SSL_do_handshake(s);
            },
            std::forward<Token>(token));
    }

    // Completion: void(error_code).
    template <class Token>
    auto async_handshake(boost::asio::ssl::stream_base::handshake_type type, Token&& token) {
        set_role(type);
        return run<void(boost::system::error_code)>(
            [](SSL* s, std::size_t&) { return SSL_do_handshake(s); }, std::forward<Token>(token));
    }

    // Completion: void(error_code). Sends close_notify; does not wait for the peer's.
    template <class Token>
    auto async_shutdown(Token&& token) {
        return run<void(boost::system::error_code)>(
            [](SSL* s, std::size_t&) {
                if (SSL_get_shutdown(s) & SSL_SENT_SHUTDOWN)
                    return 1; // sent already (a WebSocket teardown): nothing more to do
                int r = SSL_shutdown(s);
                return r >= 0 ? 1 : r;
            },
            std::forward<Token>(token));
    }

    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        boost::asio::mutable_buffer first;
        for (auto it = boost::asio::buffer_sequence_begin(buffers);
             it != boost::asio::buffer_sequence_end(buffers); ++it)
            if (boost::asio::mutable_buffer b(*it); b.size() != 0) {
                first = b;
                break;
            }
        return run<void(boost::system::error_code, std::size_t)>(
            [first, core = core_.get()](SSL* s, std::size_t& n) {
                if (first.size() == 0)
                    return 1;
                const int r = SSL_read_ex(s, first.data(), first.size(), &n);
                // Whole records already read from the next layer are decrypted in the
                // same call, up to the caller's buffer: one 64 KiB bulk read becomes one
                // read_some, not four. Only whole records, so nothing here waits for
                // input; a call that fails leaves its error for the next read_some (the
                // SSL object stays failed or shut down) and returns what it has.
                while (r == 1 && n < first.size() && core->record_buffered()) {
                    std::size_t more = 0;
                    if (SSL_read_ex(s, static_cast<char*>(first.data()) + n, first.size() - n,
                                    &more) != 1) {
                        ERR_clear_error();
                        break;
                    }
                    n += more;
                }
                return r;
            },
            std::forward<Token>(token));
    }

    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        std::size_t total = 0, count = 0;
        boost::asio::const_buffer first;
        for (auto it = boost::asio::buffer_sequence_begin(buffers);
             it != boost::asio::buffer_sequence_end(buffers); ++it) {
            boost::asio::const_buffer b(*it);
            if (b.size() == 0)
                continue;
            if (count++ == 0)
                first = b;
            total += b.size();
        }
        total = std::min(total, max_write);
        core_->reserve_output(total);
        // The buffers stay valid until completion; a retried SSL_write copies them again
        // (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), so the scratch buffer is only borrowed
        // for the length of one call.
        return run<void(boost::system::error_code, std::size_t)>(
            [buffers, first, total, count](SSL* s, std::size_t& n) {
                if (total == 0)
                    return 1;
                if (count == 1 || first.size() >= total)
                    return SSL_write_ex(s, first.data(), std::min(first.size(), total), &n);
                unsigned char* p = tls_core::scratch(total);
                boost::asio::buffer_copy(boost::asio::buffer(p, total), buffers);
                return SSL_write_ex(s, p, total, &n);
            },
            std::forward<Token>(token));
    }

private:
    template <class Signature, class Call>
    struct op {
        op(tls_stream* s, Call c)
            : self_stream(s)
            , call(std::move(c)) {}

        tls_stream* self_stream;
        Call call;
        enum class state { start, after_flush, after_read, after_wait, posted } at = state::start;
        boost::system::error_code ec;
        std::size_t n = 0;
        bool finished = false; // the SSL call succeeded or failed for good
        bool want_read = false;

        template <class Self>
        void operator()(Self& self, boost::system::error_code io_ec = {}, std::size_t io_n = 0) {
            auto& s = *self_stream;
            auto& core = *s.core_;
            const bool first_call = at == state::start;
            switch (at) {
            case state::start:
                break;
            case state::posted:
                return finish(self);
            case state::after_flush:
                core.end_flush();
                s.io_done_.cancel();
                if (io_ec) {
                    ec = io_ec;
                    finished = true;
                    return finish(self);
                }
                break;
            case state::after_read:
                core.reading = false;
                s.io_done_.cancel(); // an operation waiting for input may go on
                if (io_ec) {
                    ec = io_ec == boost::asio::error::eof
                             ? boost::system::error_code(boost::asio::ssl::error::stream_truncated)
                             : io_ec;
                    finished = true;
                    return finish(self);
                }
                core.commit_input(io_n);
                want_read = false;
                break;
            case state::after_wait:
                // Cancelled while waiting: an SSL call that already succeeded stands (its
                // bytes go out with the other operation's flush).
                if (!finished && self.cancelled() != boost::asio::cancellation_type::none) {
                    ec = boost::asio::error::operation_aborted;
                    finished = true;
                    return finish(self);
                }
                want_read = false; // the other operation may have read what we wanted
                break;
            }
            for (;;) {
                if (!finished && !want_read) {
                    ERR_clear_error();
                    std::size_t got = 0;
                    int r = call(core.ssl(), got);
                    switch (core.classify(r, ec)) {
                    case tls_core::step::done:
                        n = got;
                        finished = true;
                        break;
                    case tls_core::step::failed:
                        finished = true;
                        break;
                    case tls_core::step::read:
                        want_read = true;
                        break;
                    case tls_core::step::flush:
                        if (!core.output_waiting()) { // nothing to write: no progress
                            ec = boost::asio::error::no_buffer_space;
                            finished = true;
                        }
                        break;
                    }
                }
                if (core.output_waiting()) {
                    if (core.flushing) // another operation is writing; it writes ours too
                        return wait_for_other(self);
                    core.flushing = true;
                    at = state::after_flush;
                    // Not cancellable: a flush cut short would drop ciphertext that other
                    // operations' results depend on, leaving a broken record.
                    boost::asio::async_write(
                        s.next_, core.begin_flush(),
                        boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(),
                                                            std::move(self)));
                    return;
                }
                if (finished) {
                    if (first_call) {
                        at = state::posted;
                        boost::asio::post(std::move(self));
                        return;
                    }
                    return finish(self);
                }
                if (want_read) {
                    // The other operation is reading (a write that must read first, which
                    // renegotiation would need; off, but never two reads at once).
                    if (core.reading)
                        return wait_for_other(self);
                    core.reading = true;
                    at = state::after_read;
                    s.next_.async_read_some(core.prepare_input(), std::move(self));
                    return;
                }
                // step::flush, written: call again.
            }
        }

        // Until the other operation's write or read ends (io_done_ is cancelled then).
        template <class Self>
        void wait_for_other(Self& self) {
            at = state::after_wait;
            self_stream->io_done_.async_wait(std::move(self));
        }

        template <class Self>
        void finish(Self& self) {
            if constexpr (std::is_same_v<Signature, void(boost::system::error_code)>)
                self.complete(ec);
            else
                self.complete(ec, ec ? std::size_t{0} : n);
        }
    };

    template <class Signature, class Call, class Token>
    auto run(Call call, Token&& token) {
        return boost::asio::async_compose<Token, Signature>(
            op<Signature, Call>(this, std::move(call)), token, next_);
    }

    void set_role(boost::asio::ssl::stream_base::handshake_type type) {
        if (type == boost::asio::ssl::stream_base::server)
            SSL_set_accept_state(core_->ssl());
        else
            SSL_set_connect_state(core_->ssl());
    }

    NextLayer next_;
    std::unique_ptr<tls_core> core_; // on the heap: its BIO points at it
    // Cancelled whenever a flush or a read ends: an operation waiting for the other one
    // (wait_for_other) waits on it.
    boost::asio::steady_timer io_done_;
};

// Beast's WebSocket close handshake ends with a teardown of the stream: here the TLS
// close_notify only. (Beast's own ssl_stream teardown then shuts down and closes the TCP
// connection too; here the flow does that when it ends, and its own async_shutdown
// afterwards finds close_notify sent and completes at once.)
template <class NextLayer, class Handler>
void async_teardown(boost::beast::role_type, tls_stream<NextLayer>& stream, Handler&& handler) {
    stream.async_shutdown(std::forward<Handler>(handler));
}

} // namespace sluice::proxy
