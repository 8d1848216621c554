#include "admin_client.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <iostream>

namespace sluice::cli {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;

// A flows listing of many thousand flows is a few MiB; anything larger is not an answer
// from sluice.
constexpr std::uint64_t max_answer_bytes = 64ull << 20;

// GCC 12 flags Asio's coroutine frame operator delete as mismatched with its operator new
// (a known false positive: both are awaitable_frame_base's own, sized pair).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
net::awaitable<void> exchange(const replica* r, call c, const std::string* token,
                              std::chrono::milliseconds timeout, outcome* out) {
    constexpr auto tuple = net::as_tuple(net::use_awaitable);
    beast::tcp_stream stream(co_await net::this_coro::executor);
    // One deadline for connect, write and read together.
    stream.expires_after(timeout);
    auto [cec] = co_await stream.async_connect(*r->endpoint, tuple);
    if (cec) {
        out->error = cec == beast::error::timeout ? "no answer within the timeout"
                                                  : "unreachable: " + cec.message();
        co_return;
    }
    http::request<http::string_body> req{c.verb, r->base_path + c.path, 11};
    req.set(http::field::host, r->host_header);
    req.set(http::field::user_agent, "sluice-cli/" SLUICE_VERSION);
    req.set(http::field::accept, "application/json");
    req.set(http::field::authorization, "Bearer " + *token);
    if (c.verb == http::verb::post) {
        req.set(http::field::content_type, "application/json");
        req.body() = c.body;
    }
    req.keep_alive(false);
    req.prepare_payload();
    auto [wec, wn] = co_await http::async_write(stream, req, tuple);
    if (wec) {
        out->error = wec == beast::error::timeout ? "no answer within the timeout"
                                                  : "sending the request: " + wec.message();
        co_return;
    }
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(max_answer_bytes);
    auto [rec, rn] = co_await http::async_read(stream, buf, parser, tuple);
    if (rec) {
        out->error = rec == beast::error::timeout ? "no answer within the timeout"
                                                  : "reading the answer: " + rec.message();
        co_return;
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    const auto& res = parser.get();
    out->answered = true;
    out->status = res.result_int();
    boost::system::error_code jec;
    out->body = json::parse(res.body(), jec);
    if (jec)
        out->body = nullptr;
    if (out->status == 401) {
        out->error = "the admin API refused the token (401 unauthorized); check --token-file "
                     "or SLUICE_ADMIN_TOKEN";
    } else if (out->status < 200 || out->status > 299) {
        std::string reason, message;
        if (const auto* o = out->body.if_object()) {
            if (const auto* v = o->if_contains("reason"); v && v->is_string())
                reason = v->as_string();
            if (const auto* v = o->if_contains("message"); v && v->is_string())
                message = v->as_string();
        }
        out->error = "HTTP " + std::to_string(out->status) + (reason.empty() ? "" : " " + reason) +
                     (message.empty() ? "" : ": " + message);
    } else if (!out->body.is_object()) {
        out->error = "HTTP " + std::to_string(out->status) +
                     " without a JSON object (is this "
                     "a sluice admin API?)";
    }
}

#pragma GCC diagnostic pop

} // namespace

/// Runs `c` against every replica at once; outcomes in replica order.
std::vector<outcome> call_all(const std::vector<replica>& replicas, const call& c,
                              const std::string& token, std::chrono::milliseconds timeout) {
    std::vector<outcome> outs(replicas.size());
    net::io_context ctx(1);
    for (std::size_t i = 0; i < replicas.size(); ++i) {
        if (!replicas[i].endpoint) {
            outs[i].error = replicas[i].resolve_error;
            continue;
        }
        net::co_spawn(ctx, exchange(&replicas[i], c, &token, timeout, &outs[i]),
                      [out = &outs[i]](std::exception_ptr e) {
                          if (!e)
                              return;
                          try {
                              std::rethrow_exception(e);
                          } catch (const std::exception& ex) {
                              out->answered = false;
                              out->error = std::string("client error: ") + ex.what();
                          }
                      });
    }
    ctx.run();
    return outs;
}

bool ok(const outcome& o) {
    return o.error.empty() && o.status >= 200 && o.status <= 299 && o.body.is_object();
}

std::string api_reason(const outcome& o) {
    if (const auto* obj = o.body.if_object())
        if (const auto* v = obj->if_contains("reason"); v && v->is_string())
            return std::string(v->as_string());
    return {};
}

void report_failure(std::string_view cmd, const replica& r, const outcome& o) {
    std::cerr << "sluice " << cmd << ": admin API " << r.label << ": " << o.error << "\n";
}

json::object replica_status(const replica& r, const outcome& o) {
    json::object e{{"replica", r.label}, {"ok", ok(o)}};
    if (o.answered)
        e["status"] = o.status;
    if (!ok(o)) {
        e["error"] = o.error;
        if (auto reason = api_reason(o); !reason.empty())
            e["reason"] = reason;
    }
    return e;
}

} // namespace sluice::cli
