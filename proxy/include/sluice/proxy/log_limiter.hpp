// Logging that a hostile client cannot flood: a spdlog sink that passes at most `rate`
// lines per second (token bucket, burst `burst`) to an inner sink and reports what it
// dropped as one line "N log messages suppressed" once lines flow again: at most one such
// line per `summary_window` (1 s), however the flood goes on, so a sustained flood gives
// `rate` lines a second plus one summary. Plus the line
// formats of `logging.format`: text, or JSON with the message properly escaped.
// Thread safety: the sink is a spdlog base_sink<std::mutex> (safe from any thread).
#pragma once

#include <spdlog/formatter.h>
#include <spdlog/sinks/base_sink.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

namespace sluice::proxy {

class rate_limited_sink : public spdlog::sinks::base_sink<std::mutex> {
public:
    static constexpr std::chrono::seconds summary_window{1};
    rate_limited_sink(spdlog::sink_ptr inner, double rate, double burst);
    /// Lines dropped since start.
    std::uint64_t suppressed_total() const;

protected:
    void sink_it_(const spdlog::details::log_msg& msg) override;
    void flush_() override;
    void set_pattern_(const std::string& pattern) override;
    void set_formatter_(std::unique_ptr<spdlog::formatter> f) override;

private:
    spdlog::sink_ptr inner_;
    double rate_;
    double burst_;
    double tokens_;
    std::chrono::steady_clock::time_point last_;
    std::chrono::steady_clock::time_point last_summary_; ///< when the last summary went out
    std::uint64_t suppressed_ = 0;                       ///< since the last report
    std::uint64_t suppressed_total_ = 0;
};

/// The formatter for `logging.format`: "json" gives one object per line
/// {"ts","level","msg"} (msg JSON-escaped); anything else "TS LEVEL message". UTC.
std::unique_ptr<spdlog::formatter> make_log_formatter(bool json);

} // namespace sluice::proxy
