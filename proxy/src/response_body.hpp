// The body half of relaying a response (response_relay.hpp): the head as the parser has
// it, then the body as it arrives from the origin, through the exchange's secret masker,
// in writes as large as the origin's reads allow. A template over any client stream
// (Asio's AsyncWriteStream whose lowest layer is a beast::tcp_stream) and any upstream
// stream, so a unit test can count the writes through an instrumented stream.
//
// Write sizes (issue 23): reads from the origin go into the free space of a buffer of at
// least `relay_chunk` bytes (Beast's default would read 512 bytes at a time once the
// buffer left by the head is empty: one TLS record and one syscall per 512 bytes), and
// each read is handed on in one write, so a TLS origin's 16 KiB records leave as 16 KiB
// records, and a bulk transfer moves up to four of them per read and per write (the TLS
// leg takes every whole record it has buffered, tls_stream.hpp). What has arrived is always sent at
// once (server-sent events and streamed model output are not held back); only the masker may keep a
// secret's length of tail.
//
// Deadlines: `upstream_io_timeout` for every read and write, counted from the last
// progress; the timers are re-armed at most every `rearm_interval` (one timer syscall per
// interval, not two per read), so a wait may be cut up to that much sooner.
// Internal to proxy/. Not thread safe: one flow's coroutine uses it.
#pragma once

#include "exchange.hpp"
#include "flow_context.hpp"
#include "upstream.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <chrono>

namespace sluice::proxy {

using response_parser = http::response_parser<http::buffer_body>;

/// A stream's `upstream_io_timeout` deadline, moved on only when `rearm_interval` has
/// passed since it was last set.
class io_deadline {
public:
    static constexpr auto rearm_interval = std::chrono::seconds(1);

    template <class Stream>
    void refresh(Stream& s) {
        auto now = std::chrono::steady_clock::now();
        if (now - armed_ < rearm_interval)
            return;
        armed_ = now;
        beast::get_lowest_layer(s).expires_after(upstream_io_timeout);
    }

private:
    std::chrono::steady_clock::time_point armed_{};
};

/// One read of body bytes from the origin into `chunk`, put in the response's
/// buffer_body through the masker. False when the origin failed.
template <class UpstreamStream>
net::awaitable<bool> read_body_some(upstream<UpstreamStream>& up, response_parser& rp,
                                    std::array<char, relay_chunk>& chunk,
                                    dlp::secret_masker& masker, exchange& ex, io_deadline& dl) {
    auto& res = rp.get();
    res.body().data = chunk.data();
    res.body().size = chunk.size();
    dl.refresh(*up.stream);
    // read_some: relay what has arrived (server-sent events, streamed model output)
    // instead of waiting for a full buffer; into free space of at least a chunk, unless
    // the bytes buffered with the head end the body (a small answer reads nothing more).
    if (auto left = rp.content_length_remaining(); !left || *left > up.buffer.size())
        up.buffer.reserve(up.buffer.size() + relay_chunk);
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

/// The head as it is now (masked by the caller), then the body as it arrives. `bodiless`:
/// a HEAD answer, 204 or 304. False when either side failed.
template <class ClientStream, class UpstreamStream>
net::awaitable<bool> relay_head_and_body(ClientStream& client, upstream<UpstreamStream>& up,
                                         response_parser& rp, bool bodiless,
                                         dlp::secret_masker& masker, exchange& ex) {
    auto& res = rp.get();
    http::serializer<false, http::buffer_body> sr{res};
    // The head goes out first: the serializer keeps views into these fields, and trailer
    // fields the parser merges in later must never reach the client as head fields.
    io_deadline client_dl, up_dl;
    client_dl.refresh(client);
    auto [hec, hn] = co_await http::async_write_header(client, sr, as_tuple);
    if (hec)
        co_return false;
    if (bodiless)
        co_return true;
    std::array<char, relay_chunk> chunk;
    while (!sr.is_done()) {
        if (!rp.is_done()) {
            if (!co_await read_body_some(up, rp, chunk, masker, ex, up_dl))
                co_return false;
        } else {
            // Done after the head (Content-Length: 0): the serializer must be told there
            // is no more, or it waits for a buffer and writes nothing at all.
            res.body().data = nullptr;
            res.body().size = 0;
            res.body().more = false;
        }
        client_dl.refresh(client);
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

} // namespace sluice::proxy
