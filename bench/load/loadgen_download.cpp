// sluice_loadgen's download mode (issue 23): keep-alive GETs of /bytes/N, whose bodies are
// counted as they stream through one reusable 64 KiB buffer, so a 100 MiB or 16 GiB
// answer costs the load generator no memory and the figure is the path's line rate.
#include "loadgen.hpp"

#include <boost/beast/http.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace sluice::loadgen {

namespace {

constexpr std::size_t sink_size = 64 * 1024;

// One GET; false on any error (counted) or when the connection cannot be reused.
net::awaitable<bool> download(tls_stream& t, beast::flat_buffer& buf,
                              const http::request<http::empty_body>& req, std::vector<char>& sink,
                              std::uint64_t want, worker_stats& ws) {
    auto& tcp_layer = beast::get_lowest_layer(t);
    tcp_layer.expires_after(std::chrono::seconds(30));
    auto [wec, wn] = co_await http::async_write(t, req, as_tuple);
    if (wec) {
        ws.fail("write: " + wec.message());
        co_return false;
    }
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    tcp_layer.expires_after(std::chrono::seconds(30));
    auto [hec, hn] = co_await http::async_read_header(t, buf, p, as_tuple);
    if (hec) {
        ws.fail("read head: " + hec.message());
        co_return false;
    }
    std::uint64_t got = 0;
    std::string start_of_body; // kept only for the error message of a refusal
    while (!p.is_done()) {
        p.get().body().data = sink.data();
        p.get().body().size = sink.size();
        // Each read must make progress within 30 s; the whole body has no deadline.
        tcp_layer.expires_after(std::chrono::seconds(30));
        auto [ec, n] = co_await http::async_read(t, buf, p, as_tuple);
        if (ec == http::error::need_buffer)
            ec = {};
        const std::size_t filled = sink.size() - p.get().body().size;
        got += filled;
        if (start_of_body.size() < 200)
            start_of_body.append(sink.data(), std::min(filled, 200 - start_of_body.size()));
        if (ec) {
            ws.fail("read body: " + ec.message() + " after " + std::to_string(got) + " bytes");
            ws.bytes_down += got;
            co_return false;
        }
    }
    ws.bytes_down += got;
    if (p.get().result() != http::status::ok) {
        ws.fail("status " + std::to_string(p.get().result_int()) + ": " + start_of_body);
        co_return false;
    }
    if (got != want) {
        ws.fail("body of " + std::to_string(got) + " bytes, asked for " + std::to_string(want));
        co_return false;
    }
    ++ws.ok;
    co_return p.get().keep_alive();
}

} // namespace

net::awaitable<void> download_worker(const options& o, ssl::context& ctx,
                                     tcp::resolver::results_type eps, results& r) {
    worker_stats ws;
    http::request<http::empty_body> req{http::verb::get,
                                        "/bytes/" + std::to_string(o.response_size), 11};
    req.set(http::field::host, o.sni + ":" + o.target_port);
    req.set(http::field::user_agent, "sluice_loadgen");
    req.set(http::field::accept, "*/*");
    std::optional<tls_stream> t;
    beast::flat_buffer buf;
    // Reused by every response of this connection (on the heap: GCC 12 warns falsely
    // about a large array in a coroutine frame).
    std::vector<char> sink(sink_size);
    while (take_ticket(r, o)) {
        if (!co_await ensure_open(t, buf, o, ctx, eps, ws))
            continue;
        const auto start = clock_type::now();
        const bool keep = co_await download(*t, buf, req, sink, o.response_size, ws);
        ws.latencies_us.push_back(
            std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
        if (!keep)
            t.reset();
    }
    co_await finish_worker(t, ws, r);
}

} // namespace sluice::loadgen
