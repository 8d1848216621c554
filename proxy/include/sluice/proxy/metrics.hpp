// Prometheus metrics (CONTRACT.md "Metrics"): exactly these names, with bounded labels
// (identity, decision, rule id, decode variant, reason code, direction, result: all drawn
// from configuration or fixed code lists; never hosts, paths or addresses).
//
//   sluice_requests_total{identity,decision}      counter, one per audited decision
//   sluice_findings_total{rule,variant}           counter, one per finding
//   sluice_scanned_bytes_total                    counter, bytes handed to the scanner
//   sluice_scan_seconds                           histogram, time of one request's inspection
//   sluice_connections_active                     gauge, read from the server at scrape
//   sluice_approvals_pending                      gauge, read at scrape (issue 7 sets it)
//   sluice_upstream_errors_total{reason}          counter (upstream_connect, upstream_tls, ...)
//   sluice_config_reloads_total{result}           counter, result = ok | error
//   sluice_audit_errors_total                     counter, failed audit writes, read at scrape
//   sluice_control_store_up                       gauge, 1 while the fleet store is read (issue 22)
//   sluice_control_store_errors_total             counter, store connections lost, failed calls
//   sluice_control_store_replicas                 gauge, live replicas sharing the store
//   sluice_ws_messages_total{direction,decision}  counter, one per WebSocket message
//                                                 (direction up | down, decision allow | deny)
//   sluice_request_duration_seconds{identity,decision}
//                                                 histogram, an audited exchange's duration
//                                                 (the record's duration_ms), 1 ms .. 120 s
//   sluice_bytes_total{direction}                 counter, body bytes of audited exchanges:
//                                                 up = sent upstream, down = relayed back
//   sluice_upstream_connect_seconds               histogram, TCP connect to an upstream
//   sluice_upstream_tls_seconds                   histogram, TLS handshake with an upstream
//   sluice_client_tls_errors_total{reason}        counter, failed client TLS handshakes with
//                                                 sluice (client_tls.hpp lists the reasons)
//
// Thread safety: every member function may be called from any thread. Increments take the
// family's mutex for the label lookup (a few hundred ns); no allocation for known labels.
#pragma once

#include "sluice/proxy/audit_log.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace prometheus {
class Registry;
class Exposer;
class Collectable;
} // namespace prometheus

namespace sluice::proxy {

class metrics {
public:
    metrics();
    ~metrics();
    metrics(const metrics&) = delete;
    metrics& operator=(const metrics&) = delete;

    /// One audited decision; identity "" is labelled "unresolved".
    void on_decision(std::string_view identity, std::string_view decision);
    void on_finding(std::string_view rule, std::string_view variant);
    /// One request's inspection: bytes scanned and the time it took.
    void on_scan(std::uint64_t bytes, double seconds);
    void on_upstream_error(std::string_view reason);
    void on_config_reload(bool ok);
    void on_ws_message(std::string_view direction, std::string_view decision);
    /// One audited exchange: its duration (seconds) and body bytes each way.
    void on_exchange(std::string_view identity, std::string_view decision, double seconds,
                     std::uint64_t bytes_up, std::uint64_t bytes_down);
    /// One new upstream connection: TCP connect time, and TLS handshake time (seconds;
    /// negative = plain HTTP, no handshake).
    void on_upstream_connect(double connect_seconds, double tls_seconds);
    /// One failed client TLS handshake; `reason` is a client_tls_reason() code.
    void on_client_tls_error(std::string_view reason);

    /// Values read at scrape time (so the data path pays nothing for them). Set before
    /// exposing; unset sources read as 0.
    void set_connections_source(std::function<std::int64_t()> f);
    void set_audit_errors_source(std::function<std::uint64_t()> f);
    /// With a fleet control store (fleet_store.hpp): sluice_control_store_up,
    /// sluice_control_store_errors_total and sluice_control_store_replicas (absent without).
    struct store_status {
        bool up = false;
        std::uint64_t errors = 0;
        std::uint64_t replicas = 0; ///< live replicas the store last listed (this one too)
    };
    void set_control_store_source(std::function<store_status()> f);
    /// Pending approvals (issue 7 keeps it current).
    void set_approvals_pending(std::int64_t n) { approvals_pending_.store(n); }

    /// The whole exposition in Prometheus text format (what GET /metrics returns).
    std::string text() const;

    struct impl;

private:
    friend class metrics_exposer;
    std::unique_ptr<impl> impl_;
    std::atomic<std::int64_t> approvals_pending_{0};
};

/// Serves GET /metrics on "host:port" (prometheus-cpp's civetweb listener, its own thread).
class metrics_exposer {
public:
    /// Binds `address`; the error names the address.
    static std::expected<std::unique_ptr<metrics_exposer>, std::string>
    start(std::shared_ptr<metrics> m, const std::string& address);
    ~metrics_exposer();
    /// The bound port (resolves port 0).
    int port() const;

private:
    metrics_exposer() = default;
    std::shared_ptr<metrics> metrics_;
    std::unique_ptr<prometheus::Exposer> exposer_;
};

/// Data-path hooks (one call each in flow.cpp): a decision with its findings, and one
/// request's inspection that started at `started` and covered `bytes`.
void count_decision(metrics& m, const audit_record& r);
void count_scan(metrics& m, std::chrono::steady_clock::time_point started, std::uint64_t bytes);

} // namespace sluice::proxy
