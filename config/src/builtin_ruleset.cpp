// The compiled built-in rules, once per process. Kept apart from rules_loader.cpp because
// it needs the build-time snapshot, which is made by a program that needs the loader.
#include "sluice/config/rules_loader.hpp"

#include <exception>
#include <string>
#include <utility>

namespace sluice::config {

std::expected<std::shared_ptr<const detectors::ruleset>, diagnostics> builtin_ruleset() {
    // The built-in rules are immutable data embedded in the binary: compiling them once
    // keeps reloads and tests from paying the Hyperscan compile each time.
    static const auto result =
        []() -> std::expected<std::shared_ptr<const detectors::ruleset>, diagnostics> {
        try {
            auto loaded = builtin_rules();
            if (!loaded)
                return std::unexpected(std::move(loaded.error()));
            const auto snapshot = builtin_database_snapshot();
            auto compiled = detectors::ruleset::compile(std::move(*loaded), &snapshot);
            if (!compiled) {
                diagnostics errors;
                for (auto& m : compiled.error())
                    errors.push_back({"builtin-rules", 0, 0, "rule compile error: " + m});
                return std::unexpected(std::move(errors));
            }
            return std::move(*compiled);
        } catch (const std::exception& e) {
            return std::unexpected(diagnostics{
                {"builtin-rules", 0, 0, std::string("cannot build rules: ") + e.what()}});
        }
    }();
    return result;
}

} // namespace sluice::config
