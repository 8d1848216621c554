// any_stream (proxy/src/any_stream.hpp) over a real loopback TCP connection: bytes pass
// through in order, one write_some takes at most max_buffers buffers of a longer
// sequence (the rest is a partial transfer a composed write finishes), and Beast's
// close_socket reaches the wrapped socket. The WebSocket sessions that run over it are
// covered end to end by e2e_websocket.
#include "any_stream.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using sluice::proxy::any_stream;

struct loopback_pair {
    net::io_context io;
    boost::beast::tcp_stream a{io};
    boost::beast::tcp_stream b{io};

    loopback_pair() {
        tcp::acceptor acc(io, {net::ip::make_address("127.0.0.1"), 0});
        a.socket().connect(acc.local_endpoint());
        b.socket() = acc.accept();
    }
};

TEST(any_stream, passes_bytes_in_order_and_takes_at_most_max_buffers_per_write_some) {
    loopback_pair p;
    any_stream s(p.a);
    // Twelve 1,000-byte buffers, each filled with its own letter.
    std::vector<std::string> parts;
    std::vector<net::const_buffer> seq;
    for (char c = 'a'; c < 'a' + 12; ++c)
        parts.emplace_back(1000, c);
    for (const auto& part : parts)
        seq.emplace_back(net::buffer(part));

    std::size_t first = 0;
    s.async_write_some(seq, [&](boost::system::error_code ec, std::size_t n) {
        ASSERT_FALSE(ec) << ec.message();
        first = n;
    });
    p.io.run();
    p.io.restart();
    EXPECT_GT(first, 0u);
    EXPECT_LE(first, sluice::proxy::buffer_run<net::const_buffer>::max_buffers * 1000);

    // The rest through a composed write, then everything read back through any_stream.
    any_stream r(p.b);
    std::string got(12000, '\0');
    std::size_t written = first, read = 0;
    std::string rest;
    for (const auto& part : parts)
        rest += part;
    rest.erase(0, first);
    net::async_write(s, net::buffer(rest), [&](boost::system::error_code ec, std::size_t n) {
        ASSERT_FALSE(ec) << ec.message();
        written += n;
    });
    net::async_read(r, net::buffer(got), [&](boost::system::error_code ec, std::size_t n) {
        ASSERT_FALSE(ec) << ec.message();
        read = n;
    });
    p.io.run();
    EXPECT_EQ(written, 12000u);
    ASSERT_EQ(read, 12000u);
    for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], static_cast<char>('a' + i / 1000)) << "at " << i;
}

TEST(any_stream, close_socket_closes_the_wrapped_socket_and_the_peer_sees_eof) {
    loopback_pair p;
    any_stream s(p.a);
    boost::beast::close_socket(s);
    EXPECT_FALSE(p.a.socket().is_open());
    char byte = 0;
    boost::system::error_code ec;
    p.b.socket().read_some(net::buffer(&byte, 1), ec);
    EXPECT_EQ(ec, net::error::eof);
}

} // namespace
