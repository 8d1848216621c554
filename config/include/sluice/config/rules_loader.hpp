// Loads detector rules from YAML (detectors/rules/*.yml, embedded at build time, and
// user rule files). Every problem is reported with FILE:LINE:COL.
#pragma once

#include "sluice/config/settings.hpp"
#include "sluice/detectors/rule.hpp"

#include <expected>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

/// The built-in rules shipped in detectors/rules/ (embedded into the binary).
std::expected<std::vector<detectors::rule>, diagnostics> builtin_rules();
/// Where a loaded rule came from: its id and the FILE:LINE:COL of its `pattern` value.
struct rule_source {
    std::string id;
    diagnostic pattern_at; ///< message empty
};

/// Rules from one YAML rule file (same schema as detectors/rules/*.yml). With `sources`,
/// one entry per returned rule is appended to it.
std::expected<std::vector<detectors::rule>, diagnostics>
load_rules_file(const std::filesystem::path& file, std::vector<rule_source>* sources = nullptr);
/// Rules from YAML text; `name` is FILE in diagnostics.
std::expected<std::vector<detectors::rule>, diagnostics>
load_rules_string(std::string_view yaml, std::string_view name,
                  std::vector<rule_source>* sources = nullptr);

/// detectors::ruleset::compile errors ("rule ID: message") as diagnostics at the pattern
/// of rule ID when `sources` has it (a bad regex in a custom rule is reported as
/// FILE:LINE:COL: rule ID: message), else at `fallback`'s position.
diagnostics place_rule_errors(const std::vector<std::string>& errors,
                              const std::vector<rule_source>& sources, const diagnostic& fallback);

} // namespace sluice::config
