#include "sluice/proxy/metrics.hpp"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <mutex>

namespace sluice::proxy {

namespace {

// Gauges and counters whose value lives elsewhere (the server's live-connection count,
// the audit log's error count) are produced at scrape time instead of being mirrored on
// every change.
class live_values : public prometheus::Collectable {
public:
    std::vector<prometheus::MetricFamily> Collect() const override {
        std::lock_guard lock(mutex);
        std::vector<prometheus::MetricFamily> out;
        auto one = [&](const char* name, const char* help, prometheus::MetricType type,
                       double value) {
            prometheus::MetricFamily f;
            f.name = name;
            f.help = help;
            f.type = type;
            prometheus::ClientMetric m;
            if (type == prometheus::MetricType::Counter)
                m.counter.value = value;
            else
                m.gauge.value = value;
            f.metric.push_back(std::move(m));
            out.push_back(std::move(f));
        };
        one("sluice_connections_active", "Client connections currently open.",
            prometheus::MetricType::Gauge, connections ? static_cast<double>(connections()) : 0.0);
        one("sluice_approvals_pending", "Requests held for a supervisor's decision.",
            prometheus::MetricType::Gauge, static_cast<double>(approvals->load()));
        one("sluice_audit_errors_total",
            "Audit writes that failed (each denied its flow with 503) or found the file removed.",
            prometheus::MetricType::Counter,
            audit_errors ? static_cast<double>(audit_errors()) : 0.0);
        if (store) { // only with a control_store configured
            auto [up, errors, replicas] = store();
            one("sluice_control_store_up",
                "1 while the fleet's control store (Redis) is connected and read, else 0.",
                prometheus::MetricType::Gauge, up ? 1.0 : 0.0);
            one("sluice_control_store_errors_total",
                "Control store connections lost or refused, and reads or writes that failed.",
                prometheus::MetricType::Counter, static_cast<double>(errors));
            one("sluice_control_store_replicas",
                "Live replicas sharing the control store, as last read (limits are split "
                "over them).",
                prometheus::MetricType::Gauge, static_cast<double>(replicas));
        }
        return out;
    }

    mutable std::mutex mutex;
    std::function<std::int64_t()> connections;
    std::function<std::uint64_t()> audit_errors;
    std::function<metrics::store_status()> store;
    const std::atomic<std::int64_t>* approvals = nullptr;
};

} // namespace

struct metrics::impl {
    std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
    std::shared_ptr<live_values> live = std::make_shared<live_values>();
    prometheus::Family<prometheus::Counter>* requests = nullptr;
    prometheus::Family<prometheus::Counter>* findings = nullptr;
    prometheus::Counter* scanned_bytes = nullptr;
    prometheus::Histogram* scan_seconds = nullptr;
    prometheus::Family<prometheus::Counter>* upstream_errors = nullptr;
    prometheus::Family<prometheus::Counter>* reloads = nullptr;
    prometheus::Family<prometheus::Counter>* ws_messages = nullptr;
    prometheus::Family<prometheus::Histogram>* request_duration = nullptr;
    prometheus::Histogram::BucketBoundaries request_buckets;
    prometheus::Counter* bytes_up = nullptr;
    prometheus::Counter* bytes_down = nullptr;
    prometheus::Histogram* upstream_connect = nullptr;
    prometheus::Histogram* upstream_tls = nullptr;
    prometheus::Family<prometheus::Counter>* client_tls_errors = nullptr;
};

metrics::metrics()
    : impl_(std::make_unique<impl>()) {
    auto& r = *impl_->registry;
    impl_->requests = &prometheus::BuildCounter()
                           .Name("sluice_requests_total")
                           .Help("Audited decisions by identity and decision.")
                           .Register(r);
    impl_->findings = &prometheus::BuildCounter()
                           .Name("sluice_findings_total")
                           .Help("DLP findings by rule id and decode variant.")
                           .Register(r);
    impl_->scanned_bytes = &prometheus::BuildCounter()
                                .Name("sluice_scanned_bytes_total")
                                .Help("Request bytes inspected by the scanner.")
                                .Register(r)
                                .Add({});
    // 10 us .. ~5 s, doubling: a request inspection is usually well under a millisecond.
    prometheus::Histogram::BucketBoundaries b;
    for (double v = 1e-5; v < 6; v *= 2)
        b.push_back(v);
    impl_->scan_seconds = &prometheus::BuildHistogram()
                               .Name("sluice_scan_seconds")
                               .Help("Time to inspect one request (head and body).")
                               .Register(r)
                               .Add({}, b);
    impl_->upstream_errors = &prometheus::BuildCounter()
                                  .Name("sluice_upstream_errors_total")
                                  .Help("Upstream failures by reason code.")
                                  .Register(r);
    impl_->reloads = &prometheus::BuildCounter()
                          .Name("sluice_config_reloads_total")
                          .Help("Configuration reloads by result (ok, error).")
                          .Register(r);
    impl_->ws_messages = &prometheus::BuildCounter()
                              .Name("sluice_ws_messages_total")
                              .Help("WebSocket messages by direction and decision.")
                              .Register(r);
    // An exchange: 1 ms (the record's resolution) .. 2 min (a long download or a held
    // approval); the common Grafana latency buckets.
    impl_->request_buckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                              0.5,   1,      2.5,   5,    10,    30,   60,  120};
    impl_->request_duration = &prometheus::BuildHistogram()
                                   .Name("sluice_request_duration_seconds")
                                   .Help("Duration of audited exchanges by identity and decision.")
                                   .Register(r);
    auto& bytes = prometheus::BuildCounter()
                      .Name("sluice_bytes_total")
                      .Help("Body bytes of audited exchanges: up = sent upstream, down = relayed "
                            "to the client.")
                      .Register(r);
    impl_->bytes_up = &bytes.Add({{"direction", "up"}});
    impl_->bytes_down = &bytes.Add({{"direction", "down"}});
    // Connects and handshakes: 100 us .. ~6.5 s, doubling.
    prometheus::Histogram::BucketBoundaries cb;
    for (double v = 1e-4; v < 7; v *= 2)
        cb.push_back(v);
    impl_->upstream_connect = &prometheus::BuildHistogram()
                                   .Name("sluice_upstream_connect_seconds")
                                   .Help("TCP connect time of new upstream connections.")
                                   .Register(r)
                                   .Add({}, cb);
    impl_->upstream_tls = &prometheus::BuildHistogram()
                               .Name("sluice_upstream_tls_seconds")
                               .Help("TLS handshake time of new upstream connections.")
                               .Register(r)
                               .Add({}, cb);
    impl_->client_tls_errors = &prometheus::BuildCounter()
                                    .Name("sluice_client_tls_errors_total")
                                    .Help("Failed client TLS handshakes with sluice by reason.")
                                    .Register(r);
    // Both results exist from the start so a dashboard sees 0 rather than no series.
    impl_->reloads->Add({{"result", "ok"}});
    impl_->reloads->Add({{"result", "error"}});
    impl_->live->approvals = &approvals_pending_;
}

metrics::~metrics() = default;

void metrics::on_decision(std::string_view identity, std::string_view decision) {
    impl_->requests
        ->Add({{"identity", identity.empty() ? std::string("unresolved") : std::string(identity)},
               {"decision", std::string(decision)}})
        .Increment();
}

void metrics::on_finding(std::string_view rule, std::string_view variant) {
    impl_->findings->Add({{"rule", std::string(rule)}, {"variant", std::string(variant)}})
        .Increment();
}

void metrics::on_scan(std::uint64_t bytes, double seconds) {
    impl_->scanned_bytes->Increment(static_cast<double>(bytes));
    impl_->scan_seconds->Observe(seconds);
}

void metrics::on_upstream_error(std::string_view reason) {
    impl_->upstream_errors->Add({{"reason", std::string(reason)}}).Increment();
}

void metrics::on_config_reload(bool ok) {
    impl_->reloads->Add({{"result", ok ? "ok" : "error"}}).Increment();
}

void metrics::on_ws_message(std::string_view direction, std::string_view decision) {
    impl_->ws_messages
        ->Add({{"direction", std::string(direction)}, {"decision", std::string(decision)}})
        .Increment();
}

void metrics::on_exchange(std::string_view identity, std::string_view decision, double seconds,
                          std::uint64_t bytes_up, std::uint64_t bytes_down) {
    impl_->request_duration
        ->Add({{"identity", identity.empty() ? std::string("unresolved") : std::string(identity)},
               {"decision", std::string(decision)}},
              impl_->request_buckets)
        .Observe(seconds);
    impl_->bytes_up->Increment(static_cast<double>(bytes_up));
    impl_->bytes_down->Increment(static_cast<double>(bytes_down));
}

void metrics::on_upstream_connect(double connect_seconds, double tls_seconds) {
    impl_->upstream_connect->Observe(connect_seconds);
    if (tls_seconds >= 0)
        impl_->upstream_tls->Observe(tls_seconds);
}

void metrics::on_client_tls_error(std::string_view reason) {
    impl_->client_tls_errors->Add({{"reason", std::string(reason)}}).Increment();
}

void metrics::set_connections_source(std::function<std::int64_t()> f) {
    std::lock_guard lock(impl_->live->mutex);
    impl_->live->connections = std::move(f);
}

void metrics::set_audit_errors_source(std::function<std::uint64_t()> f) {
    std::lock_guard lock(impl_->live->mutex);
    impl_->live->audit_errors = std::move(f);
}

void metrics::set_control_store_source(std::function<store_status()> f) {
    std::lock_guard lock(impl_->live->mutex);
    impl_->live->store = std::move(f);
}

std::string metrics::text() const {
    auto families = impl_->registry->Collect();
    auto live = impl_->live->Collect();
    families.insert(families.end(), live.begin(), live.end());
    return prometheus::TextSerializer().Serialize(families);
}

void count_decision(metrics& m, const audit_record& r) {
    m.on_decision(r.identity, r.decision);
    m.on_exchange(r.identity, r.decision, static_cast<double>(r.duration_ms) / 1000.0, r.bytes_up,
                  r.bytes_down);
    for (const auto& f : r.findings)
        m.on_finding(f.rule, f.variant);
}

void count_scan(metrics& m, std::chrono::steady_clock::time_point started, std::uint64_t bytes) {
    m.on_scan(bytes,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

std::expected<std::unique_ptr<metrics_exposer>, std::string>
metrics_exposer::start(std::shared_ptr<metrics> m, const std::string& address) {
    auto e = std::unique_ptr<metrics_exposer>(new metrics_exposer());
    try {
        // One worker thread is plenty for a scraper every few seconds.
        e->exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
    } catch (const std::exception& ex) {
        return std::unexpected("metrics address " + address + ": cannot listen: " + ex.what());
    }
    e->exposer_->RegisterCollectable(m->impl_->registry);
    e->exposer_->RegisterCollectable(m->impl_->live);
    e->metrics_ = std::move(m);
    return e;
}

metrics_exposer::~metrics_exposer() = default;

int metrics_exposer::port() const {
    auto ports = exposer_->GetListeningPorts();
    return ports.empty() ? 0 : ports.front();
}

} // namespace sluice::proxy
