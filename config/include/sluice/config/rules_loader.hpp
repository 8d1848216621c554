// Loads detector rules from YAML (detectors/rules/*.yml, embedded at build time, and
// user rule files). Every problem is reported with FILE:LINE:COL.
#pragma once

#include "sluice/config/settings.hpp"
#include "sluice/detectors/rule.hpp"

#include <expected>
#include <filesystem>
#include <string_view>
#include <vector>

namespace sluice::config {

/// The built-in rules shipped in detectors/rules/ (embedded into the binary).
std::expected<std::vector<detectors::rule>, diagnostics> builtin_rules();
/// Rules from one YAML rule file (same schema as detectors/rules/*.yml).
std::expected<std::vector<detectors::rule>, diagnostics>
load_rules_file(const std::filesystem::path& file);
/// Rules from YAML text; `name` is FILE in diagnostics.
std::expected<std::vector<detectors::rule>, diagnostics> load_rules_string(std::string_view yaml,
                                                                           std::string_view name);

} // namespace sluice::config
