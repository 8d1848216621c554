// Per-thread scanner over a shared ruleset. It scans with its thread's one Hyperscan
// scratch (shared with every literal_set the thread scans), and keeps reusable hit
// buffers. Not thread safe: one scanner per thread; a scan is one synchronous call and
// must not be held across a co_await.
#pragma once

#include "sluice/detectors/finding.hpp"
#include "sluice/detectors/ruleset.hpp"

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace sluice::detectors {

namespace detail {
struct scanner_impl;
}

class scanner {
public:
    explicit scanner(std::shared_ptr<const ruleset> rules);
    ~scanner();
    scanner(scanner&&) noexcept;
    scanner& operator=(scanner&&) noexcept;

    /// Scans one block; appends confirmed, validated findings to `out` in offset order.
    /// Offsets are relative to `data`. Never throws; returns false only if Hyperscan
    /// reported an internal error (callers fail closed on false).
    bool scan(std::string_view data, std::vector<finding>& out);

    /// Same, but only for matches whose end offset e satisfies report_from < e <= report_to;
    /// the other bytes are context only (used by stream_scanner for its carried tail).
    bool scan(std::string_view data, std::size_t report_from, std::size_t report_to,
              std::vector<finding>& out);

    const ruleset& rules() const noexcept;

private:
    std::unique_ptr<detail::scanner_impl> impl_;
};

} // namespace sluice::detectors
