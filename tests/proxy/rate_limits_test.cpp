#include "sluice/proxy/rate_limits.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace {

using sluice::proxy::rate_limits;
using namespace std::chrono_literals;

sluice::dlp::policy_limits limits(std::uint64_t rpm, std::uint64_t upload, std::uint64_t conns) {
    sluice::dlp::policy_limits l;
    l.requests_per_minute = rpm;
    l.upload_per_minute = upload;
    l.max_connections = conns;
    return l;
}

TEST(RateLimits, RequestsBurstToTheMinuteThenRefillAtTheRate) {
    rate_limits rl;
    auto l = limits(6, 0, 0); // one token per 10 s
    auto t0 = rate_limits::clock::now();
    for (int i = 0; i < 6; ++i)
        EXPECT_EQ(rl.admit_request("a", l, t0), 0u) << i;
    EXPECT_EQ(rl.admit_request("a", l, t0), 10u); // the next token is 10 s away
    EXPECT_EQ(rl.admit_request("a", l, t0 + 4s), 6u);
    EXPECT_EQ(rl.admit_request("a", l, t0 + 10s), 0u);
    EXPECT_EQ(rl.admit_request("a", l, t0 + 10s), 10u);
    // Identities have their own buckets.
    EXPECT_EQ(rl.admit_request("b", l, t0 + 10s), 0u);
}

TEST(RateLimits, ZeroIsUnlimited) {
    rate_limits rl;
    auto l = limits(0, 0, 0);
    auto t0 = rate_limits::clock::now();
    for (int i = 0; i < 10000; ++i)
        ASSERT_EQ(rl.admit_request("a", l, t0), 0u);
    EXPECT_EQ(rl.admit_upload("a", l, 1ull << 40, t0), 0u);
}

TEST(RateLimits, UploadBudgetInBytes) {
    rate_limits rl;
    auto l = limits(0, 60 * 1024, 0); // 1 KiB per second
    auto t0 = rate_limits::clock::now();
    EXPECT_EQ(rl.admit_upload("a", l, 50 * 1024, t0), 0u);
    EXPECT_EQ(rl.admit_upload("a", l, 10 * 1024, t0), 0u);
    EXPECT_EQ(rl.admit_upload("a", l, 2048, t0), 2u); // refused: nothing taken
    EXPECT_EQ(rl.admit_upload("a", l, 1024, t0 + 1s), 0u);
    // More than a whole minute's budget can never pass.
    EXPECT_EQ(rl.admit_upload("a", l, 61 * 1024, t0 + 600s), 60u);
    EXPECT_EQ(rl.admit_upload("a", l, 60 * 1024, t0 + 600s), 0u);
}

TEST(RateLimits, LoweredLimitClampsTheBucket) {
    rate_limits rl;
    auto t0 = rate_limits::clock::now();
    EXPECT_EQ(rl.admit_request("a", limits(600, 0, 0), t0), 0u);
    auto low = limits(2, 0, 0);
    EXPECT_EQ(rl.admit_request("a", low, t0), 0u);
    EXPECT_EQ(rl.admit_request("a", low, t0), 0u);
    EXPECT_GT(rl.admit_request("a", low, t0), 0u);
}

TEST(RateLimits, ConnectionSlotsAreCountedAndReleased) {
    rate_limits rl;
    auto l = limits(0, 0, 2);
    rate_limits::connection_slot a, b, c;
    EXPECT_TRUE(rl.acquire_connection("x", l, a));
    EXPECT_TRUE(rl.acquire_connection("x", l, a)); // same identity again: same slot
    EXPECT_TRUE(rl.acquire_connection("x", l, b));
    EXPECT_FALSE(rl.acquire_connection("x", l, c));
    EXPECT_EQ(rl.connections("x"), 2u);
    EXPECT_TRUE(rl.acquire_connection("y", l, c)); // another identity
    b.release();
    EXPECT_EQ(rl.connections("x"), 1u);
    {
        rate_limits::connection_slot moved = std::move(a);
        EXPECT_EQ(rl.connections("x"), 1u);
    }
    EXPECT_EQ(rl.connections("x"), 0u);
    // A slot that changes identity gives the old one back.
    EXPECT_TRUE(rl.acquire_connection("x", l, c));
    EXPECT_EQ(rl.connections("y"), 0u);
    EXPECT_EQ(rl.connections("x"), 1u);
}

// Fleet mode (issue 22): three live replicas each admit a third of every rate; a body
// bigger than the share but within the limit goes from a full bucket into debt; the
// other replicas' connections count against max_connections.
TEST(RateLimits, FleetSharesSplitRatesAndCountOthersConnections) {
    rate_limits rl;
    rl.set_fleet(3, {});
    auto t0 = rate_limits::clock::now();
    auto l = limits(600, 3000, 0);
    for (int i = 0; i < 200; ++i)
        ASSERT_EQ(rl.admit_request("a", l, t0), 0u) << i;
    EXPECT_EQ(rl.admit_request("a", l, t0), 1u); // 200/min here: the next token in 0.3 s
    EXPECT_EQ(rl.admit_request("a", l, t0 + 400ms), 0u);

    EXPECT_EQ(rl.admit_upload("a", l, 1500, t0), 0u); // share 1000: full bucket, into debt
    EXPECT_EQ(rl.admit_upload("a", l, 1, t0), 31u);   // 500 in debt at 1000/min
    EXPECT_EQ(rl.admit_upload("a", l, 1, t0 + 30s), 1u);
    EXPECT_EQ(rl.admit_upload("a", l, 1, t0 + 31s), 0u);
    EXPECT_EQ(rl.admit_upload("a", l, 3001, t0 + 31s), 60u); // over the whole limit: never

    auto c = limits(0, 0, 3);
    rl.set_fleet(2, {{"a", 2}});
    rate_limits::connection_slot s1, s2;
    EXPECT_TRUE(rl.acquire_connection("a", c, s1));
    EXPECT_FALSE(rl.acquire_connection("a", c, s2)); // 1 here + 2 elsewhere = 3
    EXPECT_EQ(rl.held_connections(),
              (std::vector<std::pair<std::string, std::uint64_t>>{{"a", 1}}));
    rl.set_fleet(2, {});
    EXPECT_TRUE(rl.acquire_connection("a", c, s2));
    // One replica again: the whole limit, as without a store.
    rl.set_fleet(1, {});
    for (int i = 0; i < 600; ++i)
        ASSERT_EQ(rl.admit_request("b", l, t0), 0u) << i;
    EXPECT_NE(rl.admit_request("b", l, t0), 0u);
}

TEST(RateLimits, ConcurrentCallersNeverOvershoot) {
    rate_limits rl;
    auto l = limits(1000, 0, 0);
    auto t0 = rate_limits::clock::now();
    std::atomic<int> admitted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
            for (int i = 0; i < 500; ++i)
                if (rl.admit_request("a", l, t0) == 0)
                    ++admitted;
        });
    for (auto& t : threads)
        t.join();
    EXPECT_EQ(admitted.load(), 1000);
}

} // namespace
