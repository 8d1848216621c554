// A kill stops work in flight (flow_context.hpp close_on_kill, upstream.hpp): the sockets
// of a killed flow are closed abortively, so bytes already handed to the kernel are not
// delivered after the kill. Real loopback sockets, a real control and flow registry.
#include "flow_context.hpp"
#include "upstream.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <vector>

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using namespace sluice::proxy;

// Writes to `s` without blocking until its send buffer is full (the peer does not read):
// what is written then sits in the peer's receive queue and in `s`'s send queue.
std::size_t fill(tcp::socket& s) {
    s.non_blocking(true);
    std::vector<char> chunk(64 * 1024, 'x');
    std::size_t written = 0;
    for (;;) {
        boost::system::error_code ec;
        auto n = s.write_some(net::buffer(chunk), ec);
        if (ec == net::error::would_block)
            return written;
        if (ec)
            ADD_FAILURE() << ec.message();
        if (ec)
            return written;
        written += n;
    }
}

// Reads `s` until the connection ends; the bytes read and how it ended.
std::pair<std::size_t, boost::system::error_code> drain(tcp::socket& s) {
    std::vector<char> buf(64 * 1024);
    std::size_t got = 0;
    for (;;) {
        boost::system::error_code ec;
        auto n = s.read_some(net::buffer(buf), ec);
        got += n;
        if (ec)
            return {got, ec};
    }
}

struct pair_of_sockets {
    tcp::socket near, far;
};

pair_of_sockets connected(net::io_context& ctx) {
    tcp::acceptor acc(ctx, tcp::endpoint(net::ip::address_v4::loopback(), 0));
    tcp::socket a(ctx), b(ctx);
    a.connect(acc.local_endpoint());
    acc.accept(b);
    return {std::move(a), std::move(b)};
}

TEST(kill_reset, a_kill_discards_what_the_kernel_still_holds_on_both_legs) {
    auto dir = std::filesystem::temp_directory_path() /
               ("sluice-kill-reset-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    net::io_context ctx;
    auto ctl = control::open(dir / "killed.json");
    flow_context fc;
    fc.handle = ctl->register_flow("f-1", "127.0.0.1:1", ctx.get_executor());
    ctl->set_identity(*fc.handle, "alpha");

    // The client leg (a download the agent reads slowly) and the upstream leg (an upload
    // the origin reads slowly), each with a full send buffer when the kill comes.
    auto client = connected(ctx);
    beast::tcp_stream client_stream(std::move(client.near));
    auto client_hook = close_on_kill(fc, client_stream);
    auto origin = connected(ctx);
    upstream<plain_stream> up;
    up.stream.emplace(std::move(origin.near));
    auto up_hook = close_on_kill(fc, up);

    const auto to_agent = fill(beast::get_lowest_layer(client_stream).socket());
    const auto to_origin = fill(beast::get_lowest_layer(*up.stream).socket());
    ASSERT_GT(to_agent, 0u);
    ASSERT_GT(to_origin, 0u);

    auto res = ctl->kill("alpha");
    EXPECT_EQ(res.closed, 1u);
    ctx.poll(); // the hooks run on the flow's executor

    // Each peer gets a reset, and never the bytes still in the sender's send queue (a
    // graceful close would deliver every byte written, then EOF).
    auto [agent_got, agent_end] = drain(client.far);
    auto [origin_got, origin_end] = drain(origin.far);
    EXPECT_EQ(agent_end, net::error::connection_reset) << agent_end.message();
    EXPECT_EQ(origin_end, net::error::connection_reset) << origin_end.message();
    EXPECT_LT(agent_got, to_agent);
    EXPECT_LT(origin_got, to_origin);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

} // namespace
