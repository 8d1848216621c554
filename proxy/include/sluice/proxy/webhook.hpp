// The approvals webhook (issue 7, config `supervise.webhook`): every new approval entry
// is posted, as the JSON object GET /v1/approvals lists for it (control.hpp
// approval_json), to the operator's URL, so a person hears of a held request without
// watching the console.
//
// Request: `POST <path?query> HTTP/1.1` (RFC 9110 section 9.3.3), `Content-Type:
// application/json`, `User-Agent: sluice/<version>`, `X-Sluice-Event: approval.pending`,
// body = the entry. An `https` URL gets TLS with the peer verified against
// `upstream.ca_file` when configured, else the system store, with SNI and host-name
// verification (RFC 6125); `http` is plain (meant for a local relay).
//
// Delivery: in order, one connection per entry, each attempt bounded by a 5 s deadline;
// a 2xx answer is success, anything else is retried twice (1 s, then 2 s later) and then
// given up (logged; the entry itself stays in the API and the console: the webhook is a
// notification, not the approval path). At most 1,000 entries wait; past that the oldest
// waiting one is dropped (logged). Log lines name the host only: a hook URL's path and
// query usually carry its secret (Slack, Teams), so they never reach a log.
//
// Thread safety: post() and set_url() from any thread; deliveries run on the io_context
// given to create() and never block it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <expected>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace boost::asio {
class io_context;
}

namespace sluice::proxy {

/// A webhook target parsed from `supervise.webhook`: scheme "http" or "https", a host,
/// no userinfo. Error text names the problem, never the URL (it may hold a secret).
struct webhook_target {
    bool tls = false;
    std::string host;
    std::string port;   ///< explicit or the scheme's default ("80" / "443")
    std::string target; ///< path and query, "/" when empty
};
std::expected<webhook_target, std::string> parse_webhook_url(std::string_view url);

class webhook : public std::enable_shared_from_this<webhook> {
public:
    /// `url` as parse_webhook_url accepts; `ca_file` verifies https peers (empty: the
    /// system store). Errors: a bad URL, an unreadable CA file.
    static std::expected<std::shared_ptr<webhook>, std::string>
    create(boost::asio::io_context& ctx, std::string_view url,
           const std::optional<std::filesystem::path>& ca_file);

    /// Queues one entry (JSON text) for delivery.
    void post(std::string json);
    /// Points later deliveries at another URL (a reload); a bad URL keeps the old one and
    /// returns the error.
    std::expected<void, std::string> set_url(std::string_view url);

    std::uint64_t delivered() const { return delivered_.load(std::memory_order_relaxed); }
    std::uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }

    static constexpr std::size_t max_waiting = 1000;

    struct impl;

private:
    webhook() = default;
    void run_deliveries(); ///< on the io_context: delivers until nothing waits

    std::shared_ptr<impl> impl_;
    mutable std::mutex mutex_;
    webhook_target target_;
    std::deque<std::string> waiting_;
    bool running_ = false;
    std::atomic<std::uint64_t> delivered_{0};
    std::atomic<std::uint64_t> failed_{0};
};

} // namespace sluice::proxy
