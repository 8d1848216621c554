// The built-in rules' snapshot when the build makes none (SLUICE_RULES_SNAPSHOT=OFF):
// builtin_ruleset() then compiles the Hyperscan database at run time.
#include "sluice/config/rules_loader.hpp"

namespace sluice::config {

detectors::database_snapshot builtin_database_snapshot() noexcept {
    return {};
}

} // namespace sluice::config
