// The admin API listener (CONTRACT.md "Admin API"): a small HTTP/1.1 router on Beast,
// running on one of the server's io_contexts. Routes are registered by whoever owns the
// feature (this issue: healthz, readyz, reload; issue 7: approvals, flows, kill, revive).
//
// Requests: `Authorization: Bearer <token>` on every route registered with needs_token,
// compared in constant time; a missing or wrong token is 401 {"error":"unauthorized",
// "reason":"unauthorized"} and the handler is not called. Unknown path 404, known path
// with another method 405, body over 1 MiB 413, all as JSON with a `reason`.
//
// Thread safety: route() before start(); start()/stop() from any thread. Handlers run on
// the listener's io_context and must not block it (hand long work to another thread and
// co_await its completion).
#pragma once

#include <boost/asio/awaitable.hpp>

#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace sluice::proxy {

struct admin_request {
    std::string method; ///< "GET", "POST", ...
    std::string path;   ///< without the query
    std::string query;  ///< after '?', "" if none
    std::string body;
    std::vector<std::string> params; ///< values of the pattern's "{}" segments, in order
};

struct admin_response {
    unsigned status = 200;
    std::string body = "{}"; ///< JSON unless content_type says otherwise
    std::string content_type = "application/json";
    /// Extra response fields (e.g. Content-Security-Policy on the console's files).
    std::vector<std::pair<std::string, std::string>> headers = {};
};

/// {"error": <kind>, "reason": <reason>, "message": <message>} with `status`.
admin_response admin_error(unsigned status, std::string_view reason, std::string_view message = {});

using admin_handler = std::function<boost::asio::awaitable<admin_response>(admin_request)>;

class admin_api {
public:
    /// Binds "host:port" (IPv6 as "[::1]:port"; port 0 = ephemeral). Error names the address.
    static std::expected<std::unique_ptr<admin_api>, std::string>
    create(boost::asio::io_context& ctx, const std::string& address, std::string token);
    ~admin_api();

    /// `pattern` is a path whose segments "{}" match any one segment, e.g.
    /// "/v1/approvals/{}/approve".
    void route(std::string method, std::string pattern, bool needs_token, admin_handler handler);

    void start();
    void stop();
    /// The bound "host:port".
    std::string address() const;

    struct impl;

private:
    admin_api() = default;
    std::shared_ptr<impl> impl_;
};

/// Reads the bearer token from `file`, or creates it (32 random bytes as 64 hex, mode 0600,
/// parent directories 0700) when it does not exist. Refuses a file readable or writable by
/// group or others, and an empty one. The error names the file, never the token.
std::expected<std::string, std::string>
load_or_create_admin_token(const std::filesystem::path& file);

} // namespace sluice::proxy
