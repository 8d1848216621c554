// The built-in rule files of detectors/rules/*.yml, embedded at build time by
// detectors/embed_rules.cmake. This module never parses them (YAML belongs to
// sluice_config); it only carries the bytes. Thread safety: immutable static data.
#pragma once

#include <span>
#include <string_view>

namespace sluice::detectors {

struct embedded_rule_file {
    std::string_view name; ///< file stem, e.g. "github" for detectors/rules/github.yml
    std::string_view text; ///< the file's bytes, exactly
};

/// All embedded rule files, sorted by name.
std::span<const embedded_rule_file> embedded_rule_files() noexcept;

} // namespace sluice::detectors
