// What the benchmarks in bench/ share: the built-in rules compiled once per process, and
// a whole file read into memory (a corpus made by /work/shared/tools/make-corpus).
// Header-only; depends on sluice_config and sluice_detectors, as every benchmark links them.
#pragma once

#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"

#include <fstream>
#include <iterator>
#include <memory>
#include <string>

namespace sluice::bench {

/// The embedded built-in rules (config/rules), compiled on first use; nullptr when they
/// do not load or compile (the benchmark then skips with a message). Thread-safe (a
/// function-local static).
inline std::shared_ptr<const detectors::ruleset> builtin() {
    static const auto rs = []() -> std::shared_ptr<const detectors::ruleset> {
        auto rules = config::builtin_rules();
        if (!rules)
            return nullptr;
        auto compiled = detectors::ruleset::compile(std::move(*rules));
        return compiled ? *compiled : nullptr;
    }();
    return rs;
}

/// The bytes of the file at `path`; empty when it cannot be opened.
inline std::string read_whole(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return in ? std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())
              : std::string();
}

} // namespace sluice::bench
