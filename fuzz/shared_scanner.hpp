// The built-in rules' scanner, compiled once per fuzz process (config::builtin_ruleset,
// from the build-time database snapshot when it fits). Aborts if the rules do not load:
// a fuzz target without its rules would pass everything. Not thread safe beyond the
// function-local static's initialisation; libFuzzer calls a target from one thread.
#pragma once

#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/scanner.hpp"

#include <cstdlib>

namespace sluice::fuzz {

inline detectors::scanner& shared_scanner() {
    static detectors::scanner s = [] {
        auto rs = config::builtin_ruleset();
        if (!rs)
            std::abort();
        return detectors::scanner(*rs);
    }();
    return s;
}

} // namespace sluice::fuzz
