// The approvals webhook poster (webhook.hpp).
#include "sluice/proxy/webhook.hpp"

#include "sluice/proxy/upstream_tls.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/url/parse.hpp>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <chrono>

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0"
#endif

namespace sluice::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

std::expected<webhook_target, std::string> parse_webhook_url(std::string_view url) {
    auto u = boost::urls::parse_uri(url);
    if (!u)
        return std::unexpected("supervise.webhook is not an absolute URL");
    webhook_target t;
    if (u->scheme() == "https")
        t.tls = true;
    else if (u->scheme() != "http")
        return std::unexpected("supervise.webhook must be an http:// or https:// URL");
    if (u->has_userinfo())
        return std::unexpected(
            "supervise.webhook must not carry user:password (put a token in the path)");
    if (u->host().empty())
        return std::unexpected("supervise.webhook has no host");
    if (u->has_fragment())
        return std::unexpected("supervise.webhook must not have a #fragment");
    t.host = u->host_type() == boost::urls::host_type::ipv6 ? std::string(u->host_address())
                                                            : std::string(u->encoded_host());
    t.port = u->has_port() ? std::string(u->port()) : (t.tls ? "443" : "80");
    t.target = std::string(u->encoded_path());
    if (t.target.empty())
        t.target = "/";
    if (u->has_query())
        t.target += "?" + std::string(u->encoded_query());
    return t;
}

struct webhook::impl {
    net::io_context& ctx;
    std::shared_ptr<net::ssl::context> tls;
};

std::expected<std::shared_ptr<webhook>, std::string>
webhook::create(net::io_context& ctx, std::string_view url,
                const std::optional<std::filesystem::path>& ca_file) {
    auto t = parse_webhook_url(url);
    if (!t)
        return std::unexpected(t.error());
    std::shared_ptr<net::ssl::context> tls;
    try {
        tls = std::make_shared<net::ssl::context>(
            make_upstream_context(ca_file.value_or(std::filesystem::path{})));
    } catch (const std::exception& e) {
        return std::unexpected(std::string("supervise.webhook trust store: ") + e.what());
    }
    auto w = std::shared_ptr<webhook>(new webhook());
    w->impl_ = std::make_shared<impl>(impl{ctx, std::move(tls)});
    w->target_ = std::move(*t);
    return w;
}

std::expected<void, std::string> webhook::set_url(std::string_view url) {
    auto t = parse_webhook_url(url);
    if (!t)
        return std::unexpected(t.error());
    std::lock_guard lock(mutex_);
    target_ = std::move(*t);
    return {};
}

void webhook::post(std::string json) {
    {
        std::lock_guard lock(mutex_);
        if (waiting_.size() >= max_waiting) {
            waiting_.pop_front();
            failed_.fetch_add(1, std::memory_order_relaxed);
            spdlog::warn("approvals webhook: {} entries waiting; the oldest was dropped",
                         max_waiting);
        }
        waiting_.push_back(std::move(json));
        if (running_)
            return;
        running_ = true;
    }
    // Posted, never run inline: the caller may be on the delivery io_context's own thread,
    // and the delivery loop takes mutex_.
    net::post(impl_->ctx, [self = shared_from_this()] { self->run_deliveries(); });
}

namespace {

constexpr auto as_tuple = net::as_tuple(net::use_awaitable);
constexpr auto attempt_deadline = std::chrono::seconds(5);

// One POST; the answer's status, or 0 with `why` set when there was none.
template <class Stream>
net::awaitable<unsigned> exchange(Stream& s, const webhook_target& t, const std::string& body,
                                  std::string& why) {
    http::request<http::string_body> req{http::verb::post, t.target, 11};
    req.set(http::field::host, (t.port == "443" && t.tls) || (t.port == "80" && !t.tls)
                                   ? t.host
                                   : t.host + ":" + t.port);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::user_agent, "sluice/" SLUICE_VERSION);
    req.set("X-Sluice-Event", "approval.pending");
    req.keep_alive(false);
    req.body() = body;
    req.prepare_payload();
    auto [wec, wn] = co_await http::async_write(s, req, as_tuple);
    if (wec) {
        why = "write: " + wec.message();
        co_return 0;
    }
    beast::flat_buffer buf;
    http::response_parser<http::string_body> p;
    p.body_limit(64 * 1024);
    auto [rec, rn] = co_await http::async_read(s, buf, p, as_tuple);
    if (rec && rec != http::error::end_of_stream && !p.is_header_done()) {
        why = "read: " + rec.message();
        co_return 0;
    }
    co_return p.get().result_int();
}

net::awaitable<unsigned> deliver(net::io_context& ctx, net::ssl::context& tls,
                                 const webhook_target& t, const std::string& body,
                                 std::string& why) {
    tcp::resolver resolver(ctx);
    auto [rec, results] = co_await resolver.async_resolve(t.host, t.port, as_tuple);
    if (rec) {
        why = "resolve: " + rec.message();
        co_return 0;
    }
    beast::tcp_stream tcp_s(ctx);
    tcp_s.expires_after(attempt_deadline);
    auto [cec, ep] = co_await tcp_s.async_connect(results, as_tuple);
    if (cec) {
        why = "connect: " + cec.message();
        co_return 0;
    }
    if (!t.tls)
        co_return co_await exchange(tcp_s, t, body, why);
    beast::ssl_stream<beast::tcp_stream> s(std::move(tcp_s), tls);
    boost::system::error_code ip_ec;
    net::ip::make_address(t.host, ip_ec);
    if (ip_ec && !SSL_set_tlsext_host_name(s.native_handle(), t.host.c_str())) {
        why = "SNI";
        co_return 0;
    }
    s.set_verify_mode(net::ssl::verify_peer);
    s.set_verify_callback(net::ssl::host_name_verification(t.host));
    auto [hec] = co_await s.async_handshake(net::ssl::stream_base::client, as_tuple);
    if (hec) {
        why = "TLS: " + hec.message();
        co_return 0;
    }
    unsigned status = co_await exchange(s, t, body, why);
    beast::get_lowest_layer(s).expires_after(std::chrono::seconds(1));
    co_await s.async_shutdown(as_tuple);
    co_return status;
}

} // namespace

void webhook::run_deliveries() {
    auto self = shared_from_this();
    net::co_spawn(
        impl_->ctx,
        [self]() -> net::awaitable<void> {
            for (;;) {
                std::string body;
                webhook_target t;
                {
                    std::lock_guard lock(self->mutex_);
                    if (self->waiting_.empty()) {
                        self->running_ = false;
                        co_return;
                    }
                    body = std::move(self->waiting_.front());
                    self->waiting_.pop_front();
                    t = self->target_;
                }
                std::string why;
                unsigned status = 0;
                for (int attempt = 0; attempt < 3; ++attempt) {
                    if (attempt > 0) {
                        net::steady_timer pause(self->impl_->ctx, std::chrono::seconds(attempt));
                        co_await pause.async_wait(as_tuple);
                    }
                    why.clear();
                    status = co_await deliver(self->impl_->ctx, *self->impl_->tls, t, body, why);
                    if (status >= 200 && status < 300)
                        break;
                }
                if (status >= 200 && status < 300) {
                    self->delivered_.fetch_add(1, std::memory_order_relaxed);
                } else {
                    self->failed_.fetch_add(1, std::memory_order_relaxed);
                    spdlog::warn("approvals webhook to {}: {} after 3 attempts; the entry is "
                                 "still listed by the admin API",
                                 t.host, status != 0 ? "answered " + std::to_string(status) : why);
                }
            }
        },
        net::detached);
}

} // namespace sluice::proxy
