// The flow registry, kill switch and approval registry (control.hpp) on a real io_context
// with real loopback sockets: no mocks.
#include "sluice/proxy/control.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using sluice::proxy::approval_outcome;
using sluice::proxy::control;

struct temp_dir {
    std::filesystem::path path;
    temp_dir() {
        std::random_device rd;
        path = std::filesystem::temp_directory_path() /
               ("sluice-control-test-" + std::to_string(rd()) + std::to_string(rd()));
        std::filesystem::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

std::string read_file(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// A connected pair of loopback sockets on `ctx`.
std::pair<tcp::socket, tcp::socket> socket_pair(net::io_context& ctx) {
    tcp::acceptor acc(ctx, tcp::endpoint(net::ip::address_v4::loopback(), 0));
    tcp::socket a(ctx), b(ctx);
    a.connect(acc.local_endpoint());
    acc.accept(b);
    return {std::move(a), std::move(b)};
}

sluice::proxy::approval_request request_for(std::string identity) {
    sluice::proxy::approval_request r;
    r.flow = "f-1";
    r.identity = std::move(identity);
    r.source = "127.0.0.1:5000";
    r.method = "POST";
    r.url = "https://example.test/held";
    r.reason = "dlp_finding";
    r.findings.push_back({"github-pat", "body", "raw", 7, "sha256:0123456789abcdef"});
    return r;
}

TEST(control, kill_state_survives_reopen_and_revive_lifts_it) {
    temp_dir d;
    auto file = d.path / "killed.json";
    {
        auto c = control::open(file);
        EXPECT_FALSE(c->is_killed("patcher"));
        auto r = c->kill(std::string("patcher"));
        EXPECT_TRUE(r.persisted);
        EXPECT_EQ(r.closed, 0u);
        EXPECT_TRUE(c->is_killed("patcher"));
        EXPECT_FALSE(c->is_killed("other"));
        EXPECT_FALSE(c->is_killed(""));
    }
    {
        std::string warning;
        auto c = control::open(file, &warning);
        EXPECT_TRUE(warning.empty()) << warning;
        EXPECT_TRUE(c->is_killed("patcher"));
        EXPECT_FALSE(c->is_killed("other"));
        EXPECT_TRUE(c->revive(std::string("patcher")));
        EXPECT_FALSE(c->is_killed("patcher"));
        c->kill(std::nullopt);
        EXPECT_TRUE(c->is_killed("anyone"));
        EXPECT_TRUE(c->is_killed("")); // all = every flow, resolved or not
    }
    {
        auto c = control::open(file);
        EXPECT_TRUE(c->killed().all);
        EXPECT_TRUE(c->revive(std::nullopt));
        EXPECT_FALSE(c->is_killed("anyone"));
    }
    auto doc = boost::json::parse(read_file(file)).as_object();
    EXPECT_FALSE(doc.at("all").as_bool());
    EXPECT_TRUE(doc.at("identities").as_array().empty());
    EXPECT_FALSE(std::filesystem::exists(d.path / "killed.json.tmp"));
}

TEST(control, damaged_state_file_fails_closed) {
    temp_dir d;
    auto file = d.path / "killed.json";
    for (const char* text : {"{\"all\": fals", "[]", "{\"identities\": [1]}", ""}) {
        std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
        std::string warning;
        auto c = control::open(file, &warning);
        EXPECT_TRUE(c->is_killed("anyone")) << text;
        EXPECT_NE(warning.find(file.string()), std::string::npos) << warning;
        // The API's revive rewrites the file and lifts it.
        EXPECT_TRUE(c->revive(std::nullopt));
        EXPECT_FALSE(control::open(file)->is_killed("anyone"));
    }
}

TEST(control, kill_closes_only_that_identitys_flows_on_their_own_thread) {
    auto c = control::open({});
    net::io_context ctx;
    auto [a1, a2] = socket_pair(ctx);
    auto [b1, b2] = socket_pair(ctx);
    auto ha = c->register_flow("fa", "127.0.0.2:1", ctx.get_executor());
    auto hb = c->register_flow("fb", "127.0.0.3:1", ctx.get_executor());
    c->set_identity(*ha, "alpha");
    c->set_identity(*hb, "beta");
    c->set_destination(*ha, sluice::proxy::flow_kind::tunnel, "example.test:443");
    sluice::proxy::close_hook hook_a(ha.get(), [&] { a1.close(); });
    sluice::proxy::close_hook hook_b(hb.get(), [&] { b1.close(); });

    auto flows = c->flows();
    ASSERT_EQ(flows.size(), 2u);
    EXPECT_EQ(flows[0].flow, "fa");
    EXPECT_EQ(flows[0].kind, "tunnel");
    EXPECT_EQ(flows[0].destination, "example.test:443");
    EXPECT_EQ(flows[1].identity, "beta");

    // Called from another thread, as the admin API does.
    control::kill_result r;
    std::thread([&] { r = c->kill(std::string("alpha")); }).join();
    EXPECT_EQ(r.closed, 1u);
    EXPECT_TRUE(a1.is_open()); // nothing happens until the flow's own thread runs
    ctx.poll();
    EXPECT_FALSE(a1.is_open());
    EXPECT_TRUE(b1.is_open());
    EXPECT_TRUE(ha->killed());
    EXPECT_FALSE(hb->killed());

    c->deregister(*ha);
    EXPECT_EQ(c->live_flows(), 1u);
    // A kill posted to a flow that has already ended does nothing.
    r = c->kill(std::nullopt);
    EXPECT_EQ(r.closed, 1u);
    ctx.restart(); // the first poll ran out of work, which stops an io_context
    ctx.poll();
    EXPECT_FALSE(b1.is_open());
}

struct held {
    std::optional<approval_outcome> out;
};

net::awaitable<void> run_hold(std::shared_ptr<control> c, sluice::proxy::flow_handle* h,
                              tcp::socket& s, std::chrono::milliseconds timeout, held& result) {
    result.out = co_await c->hold(request_for("alpha"), h, s, timeout);
}

// Runs `ctx` on its own thread until `done` (bounded), as a flow's io_context would.
void run_until(net::io_context& ctx, const held& r) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!r.out && std::chrono::steady_clock::now() < deadline) {
        ctx.run_for(std::chrono::milliseconds(20));
        if (ctx.stopped())
            ctx.restart();
    }
}

TEST(control, approve_from_another_thread_wakes_the_held_flow) {
    auto c = control::open({});
    net::io_context ctx;
    auto [s1, s2] = socket_pair(ctx);
    held r;
    net::co_spawn(ctx, run_hold(c, nullptr, s1, std::chrono::seconds(60), r), net::detached);
    ctx.poll();
    auto list = c->approvals();
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0].request.reason, "dlp_finding");
    EXPECT_GT(list[0].expires_in_ms, 50'000u);
    auto json = sluice::proxy::approval_json(list[0]);
    auto doc = boost::json::parse(json).as_object();
    EXPECT_EQ(doc.at("findings").as_array()[0].as_object().at("fingerprint").as_string(),
              "sha256:0123456789abcdef");
    EXPECT_EQ(doc.at("identity").as_string(), "alpha");

    std::optional<approval_outcome> decided;
    std::thread([&] { decided = c->decide(list[0].id, true, "alice", "looks fine"); }).join();
    ASSERT_TRUE(decided);
    EXPECT_FALSE(c->decide(list[0].id, false, "bob", "")); // already decided: 404 upstream
    run_until(ctx, r);
    ASSERT_TRUE(r.out);
    EXPECT_EQ(r.out->result, approval_outcome::kind::approved);
    EXPECT_EQ(r.out->by, "alice");
    EXPECT_EQ(r.out->id, list[0].id);
    EXPECT_EQ(c->pending_approvals(), 0u);
}

TEST(control, hold_ends_on_timeout) {
    auto c = control::open({});
    net::io_context ctx;
    auto [s1, s2] = socket_pair(ctx);
    held r;
    net::co_spawn(ctx, run_hold(c, nullptr, s1, std::chrono::milliseconds(30), r), net::detached);
    run_until(ctx, r);
    ASSERT_TRUE(r.out);
    EXPECT_EQ(r.out->result, approval_outcome::kind::timed_out);
    EXPECT_EQ(r.out->by, "timeout");
    EXPECT_EQ(c->pending_approvals(), 0u);
    EXPECT_FALSE(c->decide(r.out->id, true, "late", ""));
}

TEST(control, client_eof_withdraws_but_pipelined_bytes_do_not) {
    auto c = control::open({});
    net::io_context ctx;
    auto [s1, s2] = socket_pair(ctx);
    held r;
    net::co_spawn(ctx, run_hold(c, nullptr, s1, std::chrono::seconds(60), r), net::detached);
    ctx.poll();
    // Bytes waiting (a pipelined request) are not a disconnect.
    net::write(s2, net::buffer("GET / HTTP/1.1\r\n", 16));
    ctx.run_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(r.out);
    EXPECT_EQ(c->pending_approvals(), 1u);
    // The peer shutting its side is, even with those bytes unread.
    s2.shutdown(tcp::socket::shutdown_send);
    run_until(ctx, r);
    ASSERT_TRUE(r.out);
    EXPECT_EQ(r.out->result, approval_outcome::kind::withdrawn);
    EXPECT_EQ(c->pending_approvals(), 0u);
}

TEST(control, kill_ends_a_held_approval) {
    auto c = control::open({});
    net::io_context ctx;
    auto [s1, s2] = socket_pair(ctx);
    auto h = c->register_flow("f", "127.0.0.2:1", ctx.get_executor());
    c->set_identity(*h, "alpha");
    held r;
    net::co_spawn(ctx, run_hold(c, h.get(), s1, std::chrono::seconds(60), r), net::detached);
    ctx.poll();
    ASSERT_EQ(c->pending_approvals(), 1u);
    EXPECT_EQ(c->kill(std::string("alpha")).closed, 1u);
    run_until(ctx, r);
    ASSERT_TRUE(r.out);
    EXPECT_EQ(r.out->result, approval_outcome::kind::killed);
    EXPECT_EQ(c->pending_approvals(), 0u);
    c->deregister(*h);
}

} // namespace
