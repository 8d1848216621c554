// The proxy server: listeners for CONNECT and absolute-form HTTP, one io_context per
// core, TLS interception, inspection, relay. Owns no configuration logic: it runs a
// published `generation` (settings + derived TLS contexts) and can be handed a new one.
// Thread safety: publish() and stop() may be called from any thread.
#pragma once

#include "sluice/config/settings.hpp"
#include "sluice/proxy/audit_log.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/rate_limits.hpp"

#include <cstdint>
#include <expected>
#include <memory>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace sluice::proxy {

struct shared_state;
class metrics;
class control;

class server {
public:
    /// Binds every configured listener (fails with a message naming the address), loads
    /// the upstream trust store, and prepares `threads` io_contexts (0 = one per core).
    /// The listeners are bound but not listening: a client connecting now is refused
    /// (ECONNREFUSED) until listen(), so an open proxy port means sluice is ready.
    static std::expected<std::unique_ptr<server>, std::string>
    create(std::shared_ptr<const config::settings> settings,
           std::shared_ptr<certificate_authority> ca, std::unique_ptr<audit_log> audit,
           unsigned threads = 0);

    ~server();

    /// Starts listening on every bound listener. Call once, after the admin API and
    /// everything the proxy port depends on are up, and before run(). Fails with a message
    /// naming the address (listen(2) errors, e.g. EADDRINUSE when another socket took the
    /// port with SO_REUSEPORT between bind and listen).
    std::expected<void, std::string> listen();
    /// Serves until stop(); returns after live flows drained (bounded by a deadline).
    void run();
    /// Stops accepting and drains live flows (at most `drain_ms` milliseconds).
    void stop(unsigned drain_ms = 5000);
    /// Publishes a new configuration generation: new flows use it, live flows keep theirs.
    /// Listener addresses are not rebound. Returns an error if the trust store fails.
    std::expected<void, std::string> publish(std::shared_ptr<const config::settings> settings);

    /// Counts the data path's decisions, findings, scans and upstream errors into `m` and
    /// exposes the live-connection and audit-error counts to it. Call before run().
    void attach_metrics(std::shared_ptr<metrics> m);
    /// Registers every flow with `c` (flow registry, kill switch, approvals: control.hpp).
    /// Call before run().
    void attach_control(std::shared_ptr<control> c);
    /// Per-identity limits of every flow (fleet mode feeds them: fleet_store.hpp).
    rate_limits& limits();
    /// The io_context that also serves the admin API (the first of the server's).
    boost::asio::io_context& admin_context();
    /// True while accepting and the audit log is writable (GET /readyz).
    bool ready() const;

    /// The bound "address:port" of every listener (after port 0 was resolved).
    std::vector<std::string> listening_addresses() const;

    /// The proxy URL of every listener, in configuration order: "https://address:port"
    /// for a listener with `listeners[].tls` (the client speaks TLS to sluice itself),
    /// else "http://address:port". What clients put in HTTPS_PROXY/HTTP_PROXY.
    std::vector<std::string> listening_urls() const;

    struct impl; ///< opaque; public only so server.cpp's free functions can name it

private:
    server() = default;
    std::unique_ptr<impl> impl_;
};

} // namespace sluice::proxy
