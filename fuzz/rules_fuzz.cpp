// Rules loader on arbitrary YAML: must return rules or diagnostics (never throw or crash),
// and diagnostics carry the file name and positive line/column. Small loaded rule sets
// are compiled and their own examples scanned, exercising ruleset::compile on odd input.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view yaml(reinterpret_cast<const char*>(data), size);
    auto rules = sluice::config::load_rules_string(yaml, "fuzz.yml");
    if (!rules) {
        if (rules.error().empty())
            std::abort();
        for (const auto& d : rules.error()) {
            if (d.file != "fuzz.yml" || d.line < 1 || d.column < 1)
                std::abort();
        }
        return 0;
    }
    // Keep compile time bounded: Hyperscan compile cost grows with pattern size.
    if (rules->empty() || rules->size() > 8)
        return 0;
    for (const auto& r : *rules) {
        if (r.pattern.size() > 256)
            return 0;
    }
    auto compiled = sluice::detectors::ruleset::compile(*rules);
    if (!compiled) {
        if (compiled.error().empty())
            std::abort();
        return 0;
    }
    sluice::detectors::scanner s(*compiled);
    std::vector<sluice::detectors::finding> out;
    for (const auto& r : *rules) {
        for (const auto& ex : r.examples) {
            out.clear();
            if (!s.scan(ex, out))
                std::abort();
        }
    }
    return 0;
}
