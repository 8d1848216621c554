// Loads detector rules from YAML (detectors/rules/*.yml, embedded at build time, and
// user rule files). Every problem is reported with FILE:LINE:COL.
#pragma once

#include "sluice/config/settings.hpp"
#include "sluice/detectors/rule.hpp"
#include "sluice/detectors/ruleset.hpp"

#include <expected>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

/// The built-in rules shipped in detectors/rules/ (embedded into the binary), in a fixed
/// order. Parses the YAML on every call.
std::expected<std::vector<detectors::rule>, diagnostics> builtin_rules();

/// The built-in rules compiled once per process (the first call compiles; every later call
/// and every `settings.rules` without user rules shares the same object). Compiling
/// loads the Hyperscan database from `builtin_database_snapshot()` when it fits this
/// machine, and compiles it otherwise; the ruleset is the same either way. Errors are the
/// loading or compile problems, the same on every call. Thread safe; never throws except
/// `std::bad_alloc`.
std::expected<std::shared_ptr<const detectors::ruleset>, diagnostics> builtin_ruleset();

/// The Hyperscan database of `builtin_rules()` saved at build time by
/// `sluice_snapshot_builtin_rules` (config/CMakeLists.txt) for the build machine's CPU.
/// Its `database` is empty when the build made none (`SLUICE_RULES_SNAPSHOT=OFF`, a fuzz
/// or cross build, or built-in rules that did not compile). Static data; thread safe.
detectors::database_snapshot builtin_database_snapshot() noexcept;

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
