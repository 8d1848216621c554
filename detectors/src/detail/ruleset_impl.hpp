// Internals of a compiled ruleset, shared by ruleset.cpp and scanner.cpp only.
#pragma once

#include "sluice/detectors/rule.hpp"

#include <hs/hs.h>
#include <re2/re2.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::detectors::detail {

struct hs_database_deleter {
    void operator()(hs_database_t* db) const noexcept { hs_free_database(db); }
};
struct hs_scratch_deleter {
    void operator()(hs_scratch_t* s) const noexcept { hs_free_scratch(s); }
};
using hs_database_ptr = std::unique_ptr<hs_database_t, hs_database_deleter>;
using hs_scratch_ptr = std::unique_ptr<hs_scratch_t, hs_scratch_deleter>;

/// Per-rule compiled state: the RE2 confirmation program is `(?:pattern)\z` so RE2 can
/// anchor it at the Hyperscan match end.
struct compiled_rule {
    std::unique_ptr<RE2> confirm;
    std::size_t width = 0; ///< bytes of context before the match end that RE2 sees
    int groups = 0;        ///< capture groups in the pattern (group 1 = secret)
    bool prefilter = false;
};

struct ruleset_impl {
    std::vector<rule> rules;
    std::vector<compiled_rule> compiled;
    hs_database_ptr db;
    std::uint64_t serial = 0; ///< detail::next_database_serial(), for thread_scratch
    std::size_t max_width = 0;
    double compile_ms = 0;
    bool from_snapshot = false; ///< db came from a database_snapshot, not hs_compile_multi
};

} // namespace sluice::detectors::detail
