#include "sluice/proxy/server.hpp"

#include "flow.hpp"
#include "generation.hpp"

#include "sluice/dlp/policy.hpp"
#include "sluice/proxy/control.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/url/parse.hpp>
#include <spdlog/spdlog.h>

#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <thread>

namespace sluice::proxy {

namespace net = boost::asio;
using tcp = net::ip::tcp;

struct server::impl {
    std::vector<std::unique_ptr<net::io_context>> contexts;
    std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
    // The listeners' acceptors wait here, on a thread of their own (accept_loop says why);
    // it has no work guard, so its run() returns once every acceptor is closed.
    net::io_context accept_context{1};
    std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
    std::vector<listener_context> listener_contexts;
    std::shared_ptr<shared_state> state;
    std::atomic<std::size_t> next_context{0};
    std::atomic<bool> stopping{false};
    std::mutex stop_mutex;
    // The heap trimmer (heap_trimmer below) waits on this between rounds.
    std::mutex trim_mutex;
    std::condition_variable trim_wake;
    bool trim_done = false;
};

namespace {

// host and port of a registered destination: "host:port", "[v6]:port", or a URL
// ("https://host[:port]/path", a WebSocket's). Empty host when it cannot be read.
std::pair<std::string, std::uint16_t> split_destination(std::string_view dest) {
    std::uint16_t port = 0;
    if (auto s = dest.find("://"); s != std::string_view::npos) {
        port = dest.starts_with("https") ? 443 : 80;
        dest = dest.substr(s + 3);
        dest = dest.substr(0, dest.find('/'));
    }
    auto auth = boost::urls::parse_authority(dest);
    if (!auth)
        return {};
    if (auth->has_port())
        port = auth->port_number();
    if (port == 0)
        return {};
    return {dlp::normalize_host(auth->encoded_host_address()), port};
}

// A reload that removes an allow cuts the live flows it no longer allows (their records
// say policy_deny); the others go on, and each of their next requests is decided under
// the new configuration (flow.cpp).
void cut_disallowed(control& ctl, const config::settings& settings) {
    ctl.cut(
        [&settings](const std::string& identity, const std::string& dest, flow_kind) {
            const auto* p = dlp::policy_for(settings.policies, identity);
            if (p == nullptr)
                return true;
            auto [host, port] = split_destination(dest);
            if (host.empty())
                return false; // its next request is decided under the new configuration
            const auto* rule = dlp::match_rule(*p, host, port, "", "", true);
            return rule == nullptr || rule->act == dlp::action::deny;
        },
        "policy_deny");
}

// Starts serve_client for an accepted connection, on its io_context's thread, so that the
// coroutine frame and everything the flow allocates comes from that thread's arena.
void spawn_client(server::impl* self, std::size_t index, tcp::socket socket) {
    auto exec = socket.get_executor();
    net::co_spawn(exec,
                  serve_client(std::move(socket), self->state, self->listener_contexts[index]),
                  [](std::exception_ptr e) {
                      if (!e)
                          return;
                      try {
                          std::rethrow_exception(e);
                      } catch (const std::exception& ex) {
                          spdlog::error("connection ended by internal error: {}", ex.what());
                      }
                  });
}

// Accepts on one listener, on the accept thread, and hands each connection to the next
// io_context in turn (one io_context per core; a connection stays on its thread).
//
// Why a thread of its own: Asio registers an accepted socket with its io_context's reactor
// on the thread that completes the accept (reactive_socket_accept_op::do_assign), and the
// reactor keeps each registration's state (a 176-byte descriptor_state) in a pool that it
// never frees, only reuses (detail/object_pool.hpp). Accepted on an io thread, one such
// state sat between each connection's own allocations (TLS buffers, the flow), and after a
// burst each one kept a page of otherwise free memory: 10,000 idle connections closed left
// ~10,000 resident pages (39 MiB) in the main arena that malloc_trim cannot give back
// (found by walking the heap of a live sluice). Accepted here, the states are allocated
// from this thread's arena, side by side (~23 to a page), and the flow is created on its
// own thread (spawn_client, posted).
void accept_loop(server::impl* self, std::size_t index) {
    auto& acceptor = *self->acceptors[index];
    auto& target = *self->contexts[self->next_context++ % self->contexts.size()];
    acceptor.async_accept(target, [self, index](boost::system::error_code ec, tcp::socket socket) {
        if (self->stopping.load())
            return;
        if (!ec) {
            boost::system::error_code ignored;
            socket.set_option(tcp::no_delay(true), ignored);
            auto exec = socket.get_executor();
            net::post(exec, [self, index, s = std::move(socket)]() mutable {
                spawn_client(self, index, std::move(s));
            });
        } else if (ec != net::error::operation_aborted) {
            spdlog::warn("accept failed: {}", ec.message());
        }
        accept_loop(self, index);
    });
}

// The TLS context of an HTTPS proxy listener: its certificate chain and key, and with
// `client_ca` a required, verified client certificate (mTLS).
std::expected<std::shared_ptr<net::ssl::context>, std::string>
make_listener_tls(const config::listener_tls_settings& t) {
    auto ctx = std::make_shared<net::ssl::context>(net::ssl::context::tls_server);
    boost::system::error_code ec;
    ctx->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                         net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                         net::ssl::context::no_tlsv1_1 | net::ssl::context::no_compression,
                     ec);
    SSL_CTX_set_mode(ctx->native_handle(), SSL_MODE_RELEASE_BUFFERS);
    ctx->use_certificate_chain_file(t.cert.string(), ec);
    if (ec)
        return std::unexpected("tls.cert " + t.cert.string() + ": " + ec.message());
    ctx->use_private_key_file(t.key.string(), net::ssl::context::pem, ec);
    if (ec)
        return std::unexpected("tls.key " + t.key.string() + ": " + ec.message());
    if (t.client_ca) {
        ctx->load_verify_file(t.client_ca->string(), ec);
        if (ec)
            return std::unexpected("tls.client_ca " + t.client_ca->string() + ": " + ec.message());
        ctx->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
    }
    return ctx;
}

// Waits until no connection is live or the deadline passes, then stops every context.
net::awaitable<void> drain(server::impl* self, std::chrono::milliseconds deadline) {
    auto end = std::chrono::steady_clock::now() + deadline;
    net::steady_timer timer(co_await net::this_coro::executor);
    while (self->state->active.load() > 0 && std::chrono::steady_clock::now() < end) {
        timer.expires_after(std::chrono::milliseconds(20));
        co_await timer.async_wait(net::as_tuple(net::use_awaitable));
    }
    if (self->state->active.load() > 0)
        spdlog::info("drain deadline reached with {} live connections", self->state->active.load());
    for (auto& c : self->contexts)
        c->stop();
}

} // namespace

std::expected<std::unique_ptr<server>, std::string>
server::create(std::shared_ptr<const config::settings> settings,
               std::shared_ptr<certificate_authority> ca, std::unique_ptr<audit_log> audit,
               unsigned threads) {
    auto s = std::unique_ptr<server>(new server());
    s->impl_ = std::make_unique<impl>();
    auto& m = *s->impl_;
    if (threads == 0)
        threads = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < threads; ++i) {
        m.contexts.push_back(std::make_unique<net::io_context>(1));
        m.guards.push_back(net::make_work_guard(*m.contexts.back()));
    }
    auto gen = make_generation(settings);
    if (!gen)
        return std::unexpected(gen.error());
    m.state = std::make_shared<shared_state>();
    m.state->current.store(*gen);
    m.state->ca = std::move(ca);
    m.state->audit = std::move(audit);
    RAND_bytes(reinterpret_cast<unsigned char*>(&m.state->flow_salt), sizeof m.state->flow_salt);

    for (const auto& l : settings->listeners) {
        boost::system::error_code ec;
        std::string host = l.host == "localhost" ? "127.0.0.1" : l.host;
        auto addr = net::ip::make_address(host, ec);
        if (ec)
            return std::unexpected("listener " + l.host + ":" + std::to_string(l.port) +
                                   ": not an IP address");
        tcp::endpoint ep(addr, l.port);
        auto acc = std::make_unique<tcp::acceptor>(m.accept_context);
        acc->open(ep.protocol(), ec);
        if (!ec)
            acc->set_option(tcp::acceptor::reuse_address(true), ec);
        if (!ec)
            acc->bind(ep, ec);
        if (ec)
            return std::unexpected("listener " + l.host + ":" + std::to_string(l.port) + ": " +
                                   ec.message());
        m.acceptors.push_back(std::move(acc));
        listener_context lc{l.identity, nullptr};
        if (l.tls) {
            auto tls = make_listener_tls(*l.tls);
            if (!tls)
                return std::unexpected("listener " + l.host + ":" + std::to_string(l.port) + ": " +
                                       tls.error());
            lc.tls = std::move(*tls);
        }
        m.listener_contexts.push_back(std::move(lc));
    }
    return s;
}

server::~server() = default;

void server::attach_metrics(std::shared_ptr<metrics> m) {
    // Weak: the state holds the metrics, so a strong capture would be a cycle.
    std::weak_ptr<shared_state> w = impl_->state;
    m->set_connections_source([w]() -> std::int64_t {
        auto st = w.lock();
        return st ? st->active.load(std::memory_order_relaxed) : 0;
    });
    m->set_audit_errors_source([w]() -> std::uint64_t {
        auto st = w.lock();
        return st ? st->audit->errors() : 0;
    });
    impl_->state->stats = std::move(m);
}

void server::attach_control(std::shared_ptr<control> c) {
    impl_->state->ctl = std::move(c);
}

rate_limits& server::limits() {
    return impl_->state->limits;
}

net::io_context& server::admin_context() {
    return *impl_->contexts.front();
}

bool server::ready() const {
    return !impl_->stopping.load() && impl_->state->audit->healthy();
}

namespace {

// "address:port" of a bound acceptor, IPv6 in brackets; empty if it is not bound.
std::string bound_address(const tcp::acceptor& a) {
    boost::system::error_code ec;
    auto ep = a.local_endpoint(ec);
    if (ec)
        return {};
    return ep.address().is_v6() ? "[" + ep.address().to_string() + "]:" + std::to_string(ep.port())
                                : ep.address().to_string() + ":" + std::to_string(ep.port());
}

} // namespace

std::vector<std::string> server::listening_addresses() const {
    std::vector<std::string> out;
    for (const auto& a : impl_->acceptors)
        if (auto addr = bound_address(*a); !addr.empty())
            out.push_back(std::move(addr));
    return out;
}

std::vector<std::string> server::listening_urls() const {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < impl_->acceptors.size(); ++i) {
        auto addr = bound_address(*impl_->acceptors[i]);
        if (addr.empty())
            continue;
        bool tls = i < impl_->listener_contexts.size() && impl_->listener_contexts[i].tls;
        out.push_back((tls ? "https://" : "http://") + addr);
    }
    return out;
}

namespace {

// Gives freed heap memory back to the kernel. glibc keeps what flows freed (handshake
// buffers, exchanges, coroutine frames) as free chunks in its arenas, in holes between the
// allocations of connections that stay; it only returns the top of a heap by itself.
// After a burst of connections that can be more than the connections that stay hold
// (10,000 idle intercepted connections: about 52 KiB of RSS each before a trim, 31 after;
// bench/load/run.py --scenarios idle, whose rss_after_close_kib is what a burst leaves).
//
// The trigger is how much free memory appeared since the trimmer last saw it lowest:
// every `trim_interval` it reads the free bytes of all arenas (mallinfo2().fordblks), and
// when they have grown by `trim_min_freed` over their low point since the last trim,
// malloc_trim(0) releases the free pages (madvise) and the low point restarts from there.
// - mallinfo2() counts every arena, not only the main one: glibc sums them (the "main
//   arena only" note in man 3 mallinfo is out of date; checked on glibc 2.36 with 55 MiB
//   freed in a worker thread's arena), and malloc_trim(0) walks every arena too.
// - Free bytes alone are not a trigger: pages malloc_trim gives back stay free chunks, so
//   fordblks does not fall after a trim. A fixed "more than 16 MiB free" kept calling
//   malloc_trim every 2 s for good once start-up had freed 16 MiB (an madvise per free
//   chunk spanning a page: 657 calls per 6 s on a fresh idle sluice), and under load.
// - Under steady load the free bytes go up and down around a level and are reused, so
//   they do not climb 16 MiB over their low point and nothing is trimmed. Memory reused
//   and freed again between two samples is not seen; the next burst's is.
// Runs on a thread of its own: io threads only wait for an arena lock while it reads or
// trims (mallinfo2 walks each arena's free lists under its lock). The one trim after
// 10,000 idle connections closed took about 1 s (one madvise per free chunk, ~330 MiB);
// an io thread whose allocation misses its thread cache waits for that arena meanwhile.
void heap_trimmer(server::impl* self) {
    constexpr auto trim_interval = std::chrono::seconds(2);
    constexpr std::size_t trim_min_freed = 16u << 20;
    // From zero, so what start-up freed (compiling the ruleset: ~25 MiB of RSS) goes at
    // the first round.
    std::size_t low = 0;
    std::unique_lock lock(self->trim_mutex);
    while (!self->trim_wake.wait_for(lock, trim_interval, [self] { return self->trim_done; })) {
        std::size_t free_now = mallinfo2().fordblks;
        low = std::min(low, free_now);
        if (free_now - low < trim_min_freed)
            continue;
        auto t0 = std::chrono::steady_clock::now();
        ::malloc_trim(0);
        auto took = std::chrono::steady_clock::now() - t0;
        spdlog::debug("heap trimmed in {} us, {} MiB more free than at its low point",
                      std::chrono::duration_cast<std::chrono::microseconds>(took).count(),
                      (free_now - low) >> 20);
        // The main arena's top goes back with sbrk and leaves the free count; the rest
        // stays counted as free.
        low = mallinfo2().fordblks;
    }
}

} // namespace

std::expected<void, std::string> server::listen() {
    for (auto& acc : impl_->acceptors) {
        boost::system::error_code ec;
        acc->listen(net::socket_base::max_listen_connections, ec);
        if (ec)
            return std::unexpected("listener " + bound_address(*acc) + ": " + ec.message());
    }
    return {};
}

void server::run() {
    for (std::size_t i = 0; i < impl_->acceptors.size(); ++i)
        accept_loop(impl_.get(), i);
    std::vector<std::thread> threads;
    for (std::size_t i = 1; i < impl_->contexts.size(); ++i)
        threads.emplace_back([ctx = impl_->contexts[i].get()] { ctx->run(); });
    std::thread acceptor([ctx = &impl_->accept_context] { ctx->run(); });
    std::thread trimmer([self = impl_.get()] { heap_trimmer(self); });
    impl_->contexts.front()->run();
    for (auto& t : threads)
        t.join();
    acceptor.join();
    {
        std::lock_guard lock(impl_->trim_mutex);
        impl_->trim_done = true;
    }
    impl_->trim_wake.notify_all();
    trimmer.join();
    // Every record a flow handed to the audit writer is written, and its completion has
    // run, while the io_contexts it may post to still exist (they are destroyed with impl_).
    impl_->state->audit->close();
}

void server::stop(unsigned drain_ms) {
    std::lock_guard lock(impl_->stop_mutex);
    if (impl_->stopping.exchange(true))
        return;
    auto* self = impl_.get();
    // The acceptors are closed on the accept thread (an acceptor is not thread-safe); with
    // nothing left to wait for, that thread's run() returns.
    net::post(self->accept_context, [self] {
        for (auto& a : self->acceptors) {
            boost::system::error_code ignored;
            a->close(ignored);
        }
    });
    net::post(*self->contexts.front(), [self, drain_ms] {
        for (auto& g : self->guards)
            g.reset();
        // Live flows get `drain_ms` to finish; then every io_context stops.
        net::co_spawn(*self->contexts.front(), drain(self, std::chrono::milliseconds(drain_ms)),
                      net::detached);
    });
}

std::expected<void, std::string> server::publish(std::shared_ptr<const config::settings> settings) {
    auto gen = make_generation(std::move(settings));
    if (!gen)
        return std::unexpected(gen.error());
    impl_->state->current.store(*gen);
    if (impl_->state->ctl)
        cut_disallowed(*impl_->state->ctl, *(*gen)->settings);
    return {};
}

} // namespace sluice::proxy
