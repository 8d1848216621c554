// sluice_loadgen: an HTTP/1.1-over-TLS load generator for the proxy harness (issue 10).
//
// C connections, each either direct to the origin or through an HTTP CONNECT proxy,
// complete TLS (trusting the CA file given) and send POST requests with a body of the
// given size. Modes:
//   keepalive       every connection sends requests back to back until the count or the
//                   duration runs out (latency = request written .. response read);
//                   with --rate R the connections together send R requests/s on a fixed
//                   schedule instead, and latency counts from each request's scheduled
//                   time, so time spent waiting behind a slow answer is not hidden
//                   (no coordinated omission): the latency a proxy adds below saturation;
//   new-connection  every request opens a fresh TCP connection, CONNECT and TLS
//                   handshake (latency = connect .. response read);
//   idle            every connection does one exchange and then stays open, idle, for
//                   --hold seconds (prints "idle-ready N" when all are open), for RSS
//                   per connection measurements;
//   upload          one request whose body of --body-size bytes is streamed in 64 KiB
//                   pieces (never held in memory), e.g. a 1 GiB upload;
//   download        like keepalive, but every request is GET /bytes/<--response-size>
//                   (sluice_bench_origin answers that many bytes) and the body is read
//                   into one reusable 64 KiB buffer, never held whole; a body of any
//                   other length is an error (latency = request written .. last byte
//                   read). Its worker is in loadgen_download.cpp.
// It stops by itself: after --requests in total or --duration seconds, whichever comes
// first. It prints a human summary and one JSON line (prefix "loadgen-json ").
#include "loadgen.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace sluice::loadgen {

bool take_ticket(results& r, const options& o) {
    if (clock_type::now() >= r.deadline)
        return false;
    return r.issued.fetch_add(1, std::memory_order_relaxed) < o.requests;
}

// TCP connect (to the proxy or the origin), CONNECT if proxied, TLS handshake.
net::awaitable<std::optional<tls_stream>> open_tls(const options& o, ssl::context& ctx,
                                                   const tcp::resolver::results_type& eps,
                                                   worker_stats& ws, SSL_SESSION* session) {
    beast::tcp_stream s(co_await net::this_coro::executor);
    s.expires_after(std::chrono::seconds(10));
    auto [ec, ep] = co_await s.async_connect(eps, as_tuple);
    if (ec) {
        ws.fail("connect: " + ec.message());
        co_return std::nullopt;
    }
    s.socket().set_option(tcp::no_delay(true));
    if (!o.proxy_host.empty()) {
        http::request<http::empty_body> req{http::verb::connect, o.sni + ":" + o.target_port, 11};
        req.set(http::field::host, o.sni + ":" + o.target_port);
        auto [wec, wn] = co_await http::async_write(s, req, as_tuple);
        beast::flat_buffer b;
        http::response_parser<http::empty_body> p;
        p.skip(true); // a 2xx answer to CONNECT has no body (RFC 9110 section 9.3.6)
        auto [rec, rn] = co_await http::async_read_header(s, b, p, as_tuple);
        if (wec || rec || p.get().result() != http::status::ok) {
            ws.fail("CONNECT: " + (wec   ? wec.message()
                                   : rec ? rec.message()
                                         : std::to_string(p.get().result_int())));
            co_return std::nullopt;
        }
    }
    tls_stream t(std::move(s), ctx);
    SSL_set_tlsext_host_name(t.native_handle(), o.sni.c_str());
    if (session != nullptr)
        SSL_set_session(t.native_handle(), session);
    auto [hec] = co_await t.async_handshake(ssl::stream_base::client, as_tuple);
    if (hec) {
        ws.fail("TLS handshake: " + hec.message());
        co_return std::nullopt;
    }
    ++ws.handshakes;
    if (SSL_session_reused(t.native_handle()))
        ++ws.resumed;
    co_return std::optional<tls_stream>(std::move(t));
}

net::awaitable<bool> ensure_open(std::optional<tls_stream>& t, beast::flat_buffer& buf,
                                 const options& o, ssl::context& ctx,
                                 const tcp::resolver::results_type& eps, worker_stats& ws) {
    if (!t) {
        t = co_await open_tls(o, ctx, eps, ws, nullptr);
        buf.clear();
    }
    co_return t.has_value();
}

net::awaitable<void> finish_worker(std::optional<tls_stream>& t, worker_stats& ws, results& r) {
    if (t) {
        beast::get_lowest_layer(*t).expires_after(std::chrono::seconds(2));
        co_await t->async_shutdown(as_tuple);
    }
    ws.merge_into(r);
}

namespace {

// A JSON-like body of words: what agents send, and nothing a detector should flag.
std::string make_body(std::size_t n) {
    static constexpr std::string_view words[] = {"the ",   "quick ", "brown ",  "fox ",
                                                 "jumps ", "over ",  "a ",      "lazy ",
                                                 "dog ",   "while ", "agents ", "write "};
    std::string s = R"({"model":"bench","messages":[{"role":"user","content":")";
    std::size_t i = 0;
    while (s.size() + 4 < n)
        s += words[i++ % std::size(words)];
    s += "\"}]}";
    s.resize(n, ' ');
    return s;
}

// One POST; false on any error (counted).
net::awaitable<bool> exchange(tls_stream& t, beast::flat_buffer& buf,
                              http::request<http::string_body>& req, worker_stats& ws) {
    beast::get_lowest_layer(t).expires_after(std::chrono::seconds(30));
    auto [wec, wn] = co_await http::async_write(t, req, as_tuple);
    if (wec) {
        ws.fail("write: " + wec.message());
        co_return false;
    }
    http::response_parser<http::string_body> p;
    p.body_limit(64 * 1024 * 1024);
    auto [rec, rn] = co_await http::async_read(t, buf, p, as_tuple);
    if (rec) {
        ws.fail("read: " + rec.message());
        co_return false;
    }
    if (p.get().result() != http::status::ok) {
        ws.fail("status " + std::to_string(p.get().result_int()) + ": " +
                p.get().body().substr(0, 200));
        co_return false;
    }
    ws.bytes_up += req.body().size();
    ws.bytes_down += p.get().body().size();
    ++ws.ok;
    co_return p.get().keep_alive();
}

http::request<http::string_body> make_request(const options& o, const std::string& body) {
    http::request<http::string_body> req{http::verb::post, o.path, 11};
    req.set(http::field::host, o.sni + ":" + o.target_port);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::user_agent, "sluice_loadgen");
    req.body() = body;
    req.prepare_payload();
    return req;
}

net::awaitable<void> keepalive_worker(const options& o, ssl::context& ctx,
                                      tcp::resolver::results_type eps, results& r, unsigned index) {
    worker_stats ws;
    const std::string body = make_body(o.body_size);
    auto req = make_request(o, body);
    std::optional<tls_stream> t;
    beast::flat_buffer buf;
    // --rate: this connection's requests are due every `interval`, the connections'
    // schedules staggered evenly; the schedule starts once the connection is open.
    const auto interval = o.rate > 0 ? std::chrono::duration_cast<clock_type::duration>(
                                           std::chrono::duration<double>(o.connections / o.rate))
                                     : clock_type::duration::zero();
    std::optional<clock_type::time_point> due;
    net::steady_timer pace(co_await net::this_coro::executor);
    while (take_ticket(r, o)) {
        if (!co_await ensure_open(t, buf, o, ctx, eps, ws))
            continue;
        auto start = clock_type::now();
        if (o.rate > 0) {
            due = due ? *due + interval : start + interval * index / o.connections;
            if (*due > start) {
                pace.expires_at(*due);
                co_await pace.async_wait(as_tuple);
            }
            start = *due;
        }
        bool keep = co_await exchange(*t, buf, req, ws);
        ws.latencies_us.push_back(
            std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
        if (!keep)
            t.reset();
    }
    co_await finish_worker(t, ws, r);
}

net::awaitable<void> new_connection_worker(const options& o, ssl::context& ctx,
                                           tcp::resolver::results_type eps, results& r) {
    worker_stats ws;
    const std::string body = make_body(o.body_size);
    auto req = make_request(o, body);
    req.keep_alive(false);
    SSL_SESSION* session = nullptr;
    while (take_ticket(r, o)) {
        auto start = clock_type::now();
        auto t = co_await open_tls(o, ctx, eps, ws, session);
        if (!t)
            continue;
        beast::flat_buffer buf;
        co_await exchange(*t, buf, req, ws);
        ws.latencies_us.push_back(
            std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
        if (o.resume) {
            // TLS 1.3 tickets arrive after the handshake; by now the response was read.
            if (SSL_SESSION* s = SSL_get1_session(t->native_handle())) {
                if (session)
                    SSL_SESSION_free(session);
                session = s;
            }
            // Freeing an SSL that was not shut down marks its session not resumable
            // (OpenSSL ssl_clear_bad_session), and `session` is that same object: mark the
            // connection as shut down so the kept session stays usable.
            SSL_set_shutdown(t->native_handle(), SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
        }
        beast::get_lowest_layer(*t).socket().close();
    }
    if (session)
        SSL_SESSION_free(session);
    ws.merge_into(r);
}

net::awaitable<void> idle_worker(const options& o, ssl::context& ctx,
                                 tcp::resolver::results_type eps, results& r) {
    worker_stats ws;
    const std::string body = make_body(o.body_size);
    auto req = make_request(o, body);
    auto t = co_await open_tls(o, ctx, eps, ws, nullptr);
    if (t) {
        beast::flat_buffer buf;
        // Only a connection whose exchange succeeded counts as an idle intercepted flow
        // (a 502 upstream_connect at the fd limit used to count too).
        if (!co_await exchange(*t, buf, req, ws)) {
            ws.merge_into(r);
            co_return;
        }
        buf = beast::flat_buffer();
        unsigned open = ++r.idle_open;
        if (open == o.connections) {
            std::printf("idle-ready %u\n", open);
            std::fflush(stdout);
        }
        net::steady_timer timer(co_await net::this_coro::executor);
        timer.expires_after(std::chrono::duration_cast<clock_type::duration>(
            std::chrono::duration<double>(o.hold_s)));
        co_await timer.async_wait(as_tuple);
        beast::get_lowest_layer(*t).socket().close();
    }
    ws.merge_into(r);
}

// One POST whose body is written in pieces from one 64 KiB buffer.
net::awaitable<void> upload_worker(const options& o, ssl::context& ctx,
                                   tcp::resolver::results_type eps, results& r) {
    worker_stats ws;
    auto t = co_await open_tls(o, ctx, eps, ws, nullptr);
    if (t) {
        auto start = clock_type::now();
        http::request<http::empty_body> req{http::verb::post, o.path, 11};
        req.set(http::field::host, o.sni + ":" + o.target_port);
        req.set(http::field::content_type, "application/octet-stream");
        req.content_length(o.body_size);
        http::request_serializer<http::empty_body> sr{req};
        beast::get_lowest_layer(*t).expires_after(std::chrono::seconds(30));
        auto [hec, hn] = co_await http::async_write_header(*t, sr, as_tuple);
        std::string piece = make_body(64 * 1024);
        std::uint64_t sent = 0;
        boost::system::error_code ec = hec;
        // An early answer (413) ends the upload: the response is read after the writes
        // fail or finish.
        while (!ec && sent < o.body_size) {
            std::size_t n =
                static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), o.body_size - sent));
            beast::get_lowest_layer(*t).expires_after(std::chrono::seconds(30));
            auto [wec, wn] = co_await net::async_write(*t, net::buffer(piece.data(), n), as_tuple);
            ec = wec;
            sent += wn;
        }
        ws.bytes_up += sent;
        beast::flat_buffer buf;
        http::response_parser<http::string_body> p;
        beast::get_lowest_layer(*t).expires_after(std::chrono::seconds(60));
        auto [rec, rn] = co_await http::async_read(*t, buf, p, as_tuple);
        ws.latencies_us.push_back(
            std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
        if (rec)
            ws.fail("upload response: " + rec.message() + " after " + std::to_string(sent) +
                    " bytes" + (ec ? " (write: " + ec.message() + ")" : ""));
        else if (p.get().result() != http::status::ok)
            ws.fail("upload status " + std::to_string(p.get().result_int()) + " after " +
                    std::to_string(sent) + " bytes: " + p.get().body().substr(0, 200));
        else if (ec)
            ws.fail("upload write: " + ec.message());
        else
            ++ws.ok;
    }
    ws.merge_into(r);
}

double percentile(const std::vector<double>& sorted, double q) {
    if (sorted.empty())
        return 0;
    auto i = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
    return sorted[std::min(i, sorted.size() - 1)];
}

bool split_host_port(const std::string& s, std::string& host, std::string& port) {
    auto c = s.rfind(':');
    if (c == std::string::npos || c == 0 || c + 1 == s.size())
        return false;
    host = s.substr(0, c);
    port = s.substr(c + 1);
    return true;
}

constexpr std::string_view usage =
    "usage: sluice_loadgen --target HOST:PORT --ca FILE [--proxy HOST:PORT] [--sni NAME]\n"
    "         [--mode keepalive|new-connection|idle|upload] [--connections C] [--threads T]\n"
    "         [--requests N] [--duration SECONDS] [--body-size BYTES] [--hold SECONDS]\n"
    "         [--resume] [--rate REQUESTS_PER_S] [--path PATH] [--response-size BYTES]\n";

// A whole number in [lo, hi]; anything else ends the program with a usage error.
std::uint64_t parse_count(std::string_view opt, const std::string& v, std::uint64_t lo,
                          std::uint64_t hi) {
    std::uint64_t n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc{} || end != v.data() + v.size() || n < lo || n > hi) {
        std::cerr << "bad value for " << opt << ": \"" << v << "\" (a whole number from " << lo
                  << " to " << hi << ")\n"
                  << usage;
        std::exit(2);
    }
    return n;
}

// Seconds (or a rate) in [lo, hi], decimals allowed; anything else is a usage error.
double parse_real(std::string_view opt, const std::string& v, double lo, double hi) {
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || x < lo || x > hi) {
        std::cerr << "bad value for " << opt << ": \"" << v << "\" (a number from " << lo << " to "
                  << hi << ")\n"
                  << usage;
        std::exit(2);
    }
    return x;
}

} // namespace
} // namespace sluice::loadgen

int main(int argc, char** argv) {
    using namespace sluice::loadgen;
    options o;
    std::string target, proxy;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::cerr << "missing value for " << a << '\n' << usage;
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--target")
            target = next();
        else if (a == "--proxy")
            proxy = next();
        else if (a == "--ca")
            o.ca_file = next();
        else if (a == "--sni")
            o.sni = next();
        else if (a == "--connections")
            o.connections = static_cast<unsigned>(parse_count(a, next(), 1, 100000));
        else if (a == "--threads")
            o.threads = static_cast<unsigned>(parse_count(a, next(), 1, 256));
        else if (a == "--requests")
            o.requests = parse_count(a, next(), 1, std::uint64_t{1} << 40);
        else if (a == "--duration")
            o.duration_s = parse_real(a, next(), 0.001, 86400);
        else if (a == "--body-size")
            o.body_size = parse_count(a, next(), 0, std::uint64_t{1} << 36);
        else if (a == "--response-size")
            o.response_size = parse_count(a, next(), 0, std::uint64_t{16} << 30);
        else if (a == "--hold")
            o.hold_s = parse_real(a, next(), 0, 86400);
        else if (a == "--path")
            o.path = next();
        else if (a == "--resume")
            o.resume = true;
        else if (a == "--rate")
            o.rate = parse_real(a, next(), 0, 1e7);
        else if (a == "--mode") {
            auto m = next();
            if (m == "keepalive")
                o.m = mode::keepalive;
            else if (m == "new-connection")
                o.m = mode::new_connection;
            else if (m == "idle")
                o.m = mode::idle;
            else if (m == "upload")
                o.m = mode::upload;
            else if (m == "download")
                o.m = mode::download;
            else {
                std::cerr << "unknown mode " << m << '\n' << usage;
                return 2;
            }
        } else if (a == "--help" || a == "-h") {
            std::cout << usage;
            return 0;
        } else {
            std::cerr << "unknown option " << a << '\n' << usage;
            return 2;
        }
    }
    if (!split_host_port(target, o.target_host, o.target_port) || o.ca_file.empty() ||
        (!proxy.empty() && !split_host_port(proxy, o.proxy_host, o.proxy_port)) ||
        o.connections == 0 || o.threads == 0 || !(o.rate >= 0)) {
        std::cerr << usage;
        return 2;
    }
    if (o.m == mode::upload)
        o.connections = 1;
    if (o.m == mode::idle || o.m == mode::upload)
        o.requests = o.connections;

    ssl::context ctx(ssl::context::tls_client);
    ctx.set_verify_mode(ssl::verify_peer);
    boost::system::error_code ec;
    ctx.load_verify_file(o.ca_file, ec);
    if (ec) {
        std::cerr << "cannot load CA file " << o.ca_file << ": " << ec.message() << '\n';
        return 2;
    }
    static constexpr unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(ctx.native_handle(), alpn, sizeof alpn);
    // Sessions are kept by the workers themselves (--resume), not by a context cache.
    SSL_CTX_set_session_cache_mode(ctx.native_handle(),
                                   SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);

    net::io_context resolve_ctx;
    tcp::resolver resolver(resolve_ctx);
    auto eps = o.proxy_host.empty() ? resolver.resolve(o.target_host, o.target_port, ec)
                                    : resolver.resolve(o.proxy_host, o.proxy_port, ec);
    if (ec) {
        std::cerr << "cannot resolve: " << ec.message() << '\n';
        return 2;
    }

    results r;
    r.deadline = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                         std::chrono::duration<double>(o.duration_s));
    if (o.m == mode::idle) // opening and holding must both fit
        r.deadline += std::chrono::duration_cast<clock_type::duration>(
            std::chrono::duration<double>(o.hold_s));
    std::vector<std::unique_ptr<net::io_context>> ctxs;
    for (unsigned i = 0; i < o.threads; ++i)
        ctxs.push_back(std::make_unique<net::io_context>(1));
    auto start = clock_type::now();
    for (unsigned c = 0; c < o.connections; ++c) {
        auto& io = *ctxs[c % ctxs.size()];
        switch (o.m) {
        case mode::keepalive:
            net::co_spawn(io, keepalive_worker(o, ctx, eps, r, c), net::detached);
            break;
        case mode::new_connection:
            net::co_spawn(io, new_connection_worker(o, ctx, eps, r), net::detached);
            break;
        case mode::idle:
            net::co_spawn(io, idle_worker(o, ctx, eps, r), net::detached);
            break;
        case mode::upload:
            net::co_spawn(io, upload_worker(o, ctx, eps, r), net::detached);
            break;
        case mode::download:
            net::co_spawn(io, download_worker(o, ctx, eps, r), net::detached);
            break;
        }
    }
    std::vector<std::thread> threads;
    for (std::size_t i = 1; i < ctxs.size(); ++i)
        threads.emplace_back([&io = *ctxs[i]] { io.run(); });
    ctxs.front()->run();
    for (auto& t : threads)
        t.join();
    const double secs = std::chrono::duration<double>(clock_type::now() - start).count();

    std::sort(r.latencies_us.begin(), r.latencies_us.end());
    const char* mode_name = o.m == mode::keepalive        ? "keepalive"
                            : o.m == mode::new_connection ? "new-connection"
                            : o.m == mode::idle           ? "idle"
                            : o.m == mode::upload         ? "upload"
                                                          : "download";
    const double rps = secs > 0 ? static_cast<double>(r.ok) / secs : 0;
    const double hps = secs > 0 ? static_cast<double>(r.handshakes) / secs : 0;
    const double mbps = secs > 0 ? static_cast<double>(r.bytes_up + r.bytes_down) / 1e6 / secs : 0;
    const double p50 = percentile(r.latencies_us, 0.50);
    const double p99 = percentile(r.latencies_us, 0.99);
    const double p999 = percentile(r.latencies_us, 0.999);
    std::printf("%s via %s: %llu ok, %llu errors in %.3f s\n"
                "  requests/s %.0f  handshakes/s %.0f (resumed %llu)  MB/s %.1f\n"
                "  latency us p50 %.0f  p99 %.0f  p99.9 %.0f\n",
                mode_name, o.proxy_host.empty() ? "direct" : "proxy",
                static_cast<unsigned long long>(r.ok), static_cast<unsigned long long>(r.errors),
                secs, rps, hps, static_cast<unsigned long long>(r.resumed), mbps, p50, p99, p999);
    if (!r.first_error.empty())
        std::printf("  first error: %s\n", r.first_error.c_str());
    // The error text comes from the peer's answer: printed JSON-escaped.
    std::string err;
    for (char ch : r.first_error) {
        if (ch == '"' || ch == '\\') {
            err += '\\';
            err += ch;
        } else if (static_cast<unsigned char>(ch) < 0x20) {
            err += ' ';
        } else {
            err += ch;
        }
    }
    std::printf("loadgen-json {\"mode\":\"%s\",\"proxied\":%s,\"connections\":%u,"
                "\"body_size\":%llu,\"ok\":%llu,\"errors\":%llu,\"seconds\":%.3f,"
                "\"requests_per_s\":%.1f,\"handshakes\":%llu,\"resumed\":%llu,"
                "\"handshakes_per_s\":%.1f,\"mb_per_s\":%.2f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
                "\"p999_us\":%.1f,\"bytes_up\":%llu,\"bytes_down\":%llu,\"response_size\":%llu,"
                "\"first_error\":\"%s\"}\n",
                mode_name, o.proxy_host.empty() ? "false" : "true", o.connections,
                static_cast<unsigned long long>(o.body_size), static_cast<unsigned long long>(r.ok),
                static_cast<unsigned long long>(r.errors), secs, rps,
                static_cast<unsigned long long>(r.handshakes),
                static_cast<unsigned long long>(r.resumed), hps, mbps, p50, p99, p999,
                static_cast<unsigned long long>(r.bytes_up),
                static_cast<unsigned long long>(r.bytes_down),
                static_cast<unsigned long long>(o.response_size), err.c_str());
    return r.errors == 0 && r.ok > 0 ? 0 : 1;
}
