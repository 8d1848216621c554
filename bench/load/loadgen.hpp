// What the load generator's translation units share (loadgen.cpp: options, the
// keepalive, new-connection, idle and upload workers, main; loadgen_download.cpp: the
// download worker). Internal to sluice_loadgen.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace sluice::loadgen {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using clock_type = std::chrono::steady_clock;
constexpr auto as_tuple = net::as_tuple(net::use_awaitable);

enum class mode { keepalive, new_connection, idle, upload, download };

struct options {
    std::string target_host = "127.0.0.1";
    std::string target_port;
    std::string sni = "localhost"; // host name for SNI, CONNECT and Host
    std::string proxy_host, proxy_port;
    std::string ca_file;
    unsigned connections = 16;
    unsigned threads = 1;
    std::uint64_t requests = 10000;
    double duration_s = 30;
    std::uint64_t body_size = 1024;
    std::uint64_t response_size = 1024 * 1024; // download: bytes asked for with GET /bytes/N
    double hold_s = 5;
    bool resume = false; // new-connection: resume the client TLS session
    double rate = 0;     // keepalive: requests/s for all connections together; 0 = unpaced
    std::string path = "/bench";
    mode m = mode::keepalive;
};

struct results {
    std::mutex mu;
    std::vector<double> latencies_us;
    std::uint64_t ok = 0, errors = 0, handshakes = 0, resumed = 0, bytes_up = 0, bytes_down = 0;
    std::string first_error;
    std::atomic<std::uint64_t> issued{0};
    std::atomic<unsigned> idle_open{0};
    clock_type::time_point deadline;
};

struct worker_stats {
    std::vector<double> latencies_us;
    std::uint64_t ok = 0, errors = 0, handshakes = 0, resumed = 0, bytes_up = 0, bytes_down = 0;
    std::string first_error;
    void fail(const std::string& what) {
        ++errors;
        if (first_error.empty())
            first_error = what;
    }
    void merge_into(results& r) {
        std::lock_guard lock(r.mu);
        r.latencies_us.insert(r.latencies_us.end(), latencies_us.begin(), latencies_us.end());
        r.ok += ok;
        r.errors += errors;
        r.handshakes += handshakes;
        r.resumed += resumed;
        r.bytes_up += bytes_up;
        r.bytes_down += bytes_down;
        if (r.first_error.empty())
            r.first_error = first_error;
    }
};

using tls_stream = beast::ssl_stream<beast::tcp_stream>;

/// Takes one request from the shared count; false once --requests or --duration is used up.
bool take_ticket(results& r, const options& o);

/// TCP connect (to the proxy or the origin), CONNECT if proxied, TLS handshake (SNI and
/// CONNECT authority o.sni, resuming `session` when given). Failures are counted in `ws`.
net::awaitable<std::optional<tls_stream>> open_tls(const options& o, ssl::context& ctx,
                                                   const tcp::resolver::results_type& eps,
                                                   worker_stats& ws, SSL_SESSION* session);

/// A keep-alive worker's connection, opened (and `buf` cleared) when it has none; false
/// when it could not be opened (counted in `ws`).
net::awaitable<bool> ensure_open(std::optional<tls_stream>& t, beast::flat_buffer& buf,
                                 const options& o, ssl::context& ctx,
                                 const tcp::resolver::results_type& eps, worker_stats& ws);

/// A keep-alive worker's end: closes its connection, if open, with close_notify (2 s at
/// most), then adds its figures to `r`.
net::awaitable<void> finish_worker(std::optional<tls_stream>& t, worker_stats& ws, results& r);

/// Download mode: keep-alive GETs of /bytes/<o.response_size>, each body read into one
/// reusable 64 KiB buffer (never held whole) and its length checked.
net::awaitable<void> download_worker(const options& o, ssl::context& ctx,
                                     tcp::resolver::results_type eps, results& r);

} // namespace sluice::loadgen
