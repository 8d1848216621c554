// Rules as data: one detector definition, as loaded from detectors/rules/*.yml by
// sluice_config (this module never parses YAML). Thread safety: plain value type.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace sluice::detectors {

/// One detector. `pattern` uses the regex syntax common to Hyperscan and RE2 (no
/// back-references, no look-around). Hits are confirmed with RE2 on a window of
/// `max_width` bytes ending at the Hyperscan match end.
struct rule {
    std::string id;       ///< stable id, e.g. "github-pat-classic"; used in findings and metrics
    std::string name;     ///< human name
    std::string category; ///< llm-key, cloud, vcs, payment, private-key, pii, generic, ...
    std::string pattern;  ///< the regex; an optional capture group 1 marks the secret itself
    std::vector<std::string> keywords;          ///< optional: lower-case context words
    std::string validator;                      ///< "" or a validator name (see validators.hpp)
    double confidence = 0.9;                    ///< 0..1, reported with the finding
    std::vector<std::string> references;        ///< public format documentation URLs
    std::vector<std::string> examples;          ///< must match
    std::vector<std::string> negative_examples; ///< must not match
    std::size_t max_width = 0; ///< bytes; 0 = derive from the pattern at compile time
};

} // namespace sluice::detectors
