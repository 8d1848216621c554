// A compiled, immutable set of rules: one Hyperscan block database (no start-of-match)
// plus one RE2 program per rule for confirmation. Build once, share as
// shared_ptr<const ruleset> across threads; scanning needs a per-thread `scanner`.
#pragma once

#include "sluice/detectors/rule.hpp"

#include <expected>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sluice::detectors {

namespace detail {
struct ruleset_impl;
}

class ruleset {
public:
    /// Compiles `rules`. Errors (empty, duplicate id, pattern that neither Hyperscan nor
    /// RE2 accepts) come back as one message per problem, each naming the rule id.
    /// Never throws.
    static std::expected<std::shared_ptr<const ruleset>, std::vector<std::string>>
    compile(std::vector<rule> rules);

    ~ruleset();
    ruleset(const ruleset&) = delete;
    ruleset& operator=(const ruleset&) = delete;

    std::span<const rule> rules() const noexcept;
    /// Longest max_width over all rules, in bytes: the tail a stream must carry.
    std::size_t max_width() const noexcept;
    /// Wall time the compile took, in milliseconds.
    double compile_ms() const noexcept;

    const detail::ruleset_impl& impl() const noexcept { return *impl_; }

private:
    explicit ruleset(std::unique_ptr<detail::ruleset_impl> impl);
    std::unique_ptr<detail::ruleset_impl> impl_;
};

} // namespace sluice::detectors
