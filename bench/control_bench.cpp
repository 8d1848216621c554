// Kill switch latency and the memory of a held approval (control.hpp), on real loopback
// sockets and two io_context threads (as `sluice run` on two cores).
//
// BM_kill_latency/N: N live flows of one identity, each a connected socket pair whose
// sluice-side socket is registered with a kill hook and whose client side waits in a
// read. Time = from control::kill() on another thread until the last client read has
// ended (EOF or reset), i.e. the kill call to the last socket closed as a client sees it.
// It covers the registry walk, the posts to each flow's thread and the closes; not the
// HTTP/TLS layers above (a closed socket ends those in the same event-loop turn).
//
// BM_held_approval_memory/N: N approvals held at once (control::hold on N socket pairs);
// counter `bytes_per_hold` = resident-set growth / N: the approval entry, its timer, the
// hold coroutine frame and the client watch. The held request itself (head + body, at
// most dlp.max_body) and the flow's own frames come on top and exist for any live flow.
#include "sluice/proxy/control.hpp"

#include <benchmark/benchmark.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using sluice::proxy::control;

void raise_fd_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

long rss_bytes() {
    long pages = 0, resident = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        std::fclose(f);
    }
    return resident * sysconf(_SC_PAGESIZE);
}

struct pool {
    std::vector<std::unique_ptr<net::io_context>> ctx;
    std::vector<net::executor_work_guard<net::io_context::executor_type>> work;
    std::vector<std::thread> threads;
    explicit pool(int n) {
        for (int i = 0; i < n; ++i) {
            ctx.push_back(std::make_unique<net::io_context>(1));
            work.push_back(net::make_work_guard(*ctx.back()));
        }
        for (auto& c : ctx)
            threads.emplace_back([&c] { c->run(); });
    }
    ~pool() {
        work.clear();
        for (auto& c : ctx)
            c->stop();
        for (auto& t : threads)
            t.join();
    }
};

struct flow_pair {
    tcp::socket sluice_side;
    tcp::socket client_side;
    std::shared_ptr<sluice::proxy::flow_handle> handle;
    std::unique_ptr<sluice::proxy::close_hook> hook;
    std::array<char, 16> buf{};
};

void BM_kill_latency(benchmark::State& state) {
    raise_fd_limit();
    const auto n = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        state.PauseTiming();
        pool threads(2);
        auto ctl = control::open({});
        tcp::acceptor acc(*threads.ctx[0], tcp::endpoint(net::ip::address_v4::loopback(), 0));
        std::vector<std::unique_ptr<flow_pair>> flows;
        std::atomic<std::size_t> ended{0};
        for (std::size_t i = 0; i < n; ++i) {
            auto& ctx = *threads.ctx[i % 2];
            auto f = std::unique_ptr<flow_pair>(
                new flow_pair{tcp::socket(ctx), tcp::socket(ctx), nullptr, nullptr});
            f->client_side.connect(acc.local_endpoint());
            acc.accept(f->sluice_side);
            flows.push_back(std::move(f));
        }
        // Registration and hooks on each flow's own thread, as serve_client does.
        std::atomic<std::size_t> registered{0};
        for (std::size_t i = 0; i < n; ++i) {
            auto* f = flows[i].get();
            auto ex = threads.ctx[i % 2]->get_executor();
            net::post(ex, [&, f, ex] {
                f->handle = ctl->register_flow("f", "127.0.0.1:1", ex);
                ctl->set_identity(*f->handle, "alpha");
                f->hook = std::make_unique<sluice::proxy::close_hook>(f->handle.get(), [f] {
                    boost::system::error_code ec;
                    f->sluice_side.close(ec);
                });
                f->client_side.async_read_some(
                    net::buffer(f->buf), [&](boost::system::error_code, std::size_t) { ++ended; });
                ++registered;
            });
        }
        while (registered.load() < n)
            std::this_thread::yield();
        state.ResumeTiming();

        auto t0 = std::chrono::steady_clock::now();
        auto r = ctl->kill(std::string("alpha"));
        while (ended.load() < n)
            std::this_thread::yield();
        auto t1 = std::chrono::steady_clock::now();
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());

        state.PauseTiming();
        if (r.closed != n)
            state.SkipWithError("not every flow was closed");
        std::atomic<std::size_t> done{0};
        for (std::size_t i = 0; i < n; ++i) {
            auto* f = flows[i].get();
            net::post(*threads.ctx[i % 2], [&, f] {
                f->hook.reset();
                ctl->deregister(*f->handle);
                ++done;
            });
        }
        while (done.load() < n)
            std::this_thread::yield();
        state.ResumeTiming();
    }
    state.counters["flows"] = static_cast<double>(n);
}
BENCHMARK(BM_kill_latency)
    ->Arg(1000)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);

net::awaitable<void> hold_one(std::shared_ptr<control> ctl, tcp::socket& s) {
    sluice::proxy::approval_request r;
    r.flow = "f";
    r.identity = "alpha";
    r.source = "127.0.0.1:1";
    r.method = "POST";
    r.url = "https://api.example.test/v1/things";
    r.reason = "policy_supervise";
    co_await ctl->hold(std::move(r), nullptr, s, std::chrono::hours(1));
}

void BM_held_approval_memory(benchmark::State& state) {
    raise_fd_limit();
    const auto n = static_cast<std::size_t>(state.range(0));
    double per_hold = 0;
    for (auto _ : state) {
        net::io_context ctx(1);
        auto ctl = control::open({});
        tcp::acceptor acc(ctx, tcp::endpoint(net::ip::address_v4::loopback(), 0));
        std::vector<std::unique_ptr<flow_pair>> pairs;
        for (std::size_t i = 0; i < n; ++i) {
            auto f = std::unique_ptr<flow_pair>(
                new flow_pair{tcp::socket(ctx), tcp::socket(ctx), nullptr, nullptr});
            f->client_side.connect(acc.local_endpoint());
            acc.accept(f->sluice_side);
            pairs.push_back(std::move(f));
        }
        ctx.poll();
        // poll() with no outstanding work stops the io_context (asio scheduler::poll), and
        // a stopped context runs nothing until restart(): without this no hold ever starts.
        ctx.restart();
        long before = rss_bytes();
        for (auto& f : pairs)
            net::co_spawn(ctx, hold_one(ctl, f->sluice_side), net::detached);
        ctx.poll();
        long after = rss_bytes();
        if (ctl->pending_approvals() != n)
            state.SkipWithError("not every request is held");
        per_hold = static_cast<double>(after - before) / static_cast<double>(n);
        for (const auto& a : ctl->approvals())
            ctl->decide(a.id, false, "bench", "");
        ctx.poll();
    }
    state.counters["bytes_per_hold"] = per_hold;
}
BENCHMARK(BM_held_approval_memory)->Arg(5000)->Iterations(1)->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
