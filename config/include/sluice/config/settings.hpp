// The typed, validated runtime configuration (CONTRACT.md "Configuration (YAML)").
// The only module that knows YAML. Loading returns every problem at once, each with
// FILE:LINE:COL. Thread safety: a built `settings` is immutable; share as
// shared_ptr<const settings>.
#pragma once

#include "sluice/detectors/rule.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/dlp/policy.hpp"

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

/// One problem, printed as "FILE:LINE:COL: message" (line and column 1-based).
struct diagnostic {
    std::string file;
    int line = 0;
    int column = 0;
    std::string message;
    std::string str() const;
};
using diagnostics = std::vector<diagnostic>;

struct listener_settings {
    std::string host = "127.0.0.1"; ///< IP literal or "localhost"
    std::uint16_t port = 3128;      ///< 0 = ephemeral (tests)
    std::optional<std::string> identity;
};

struct settings {
    std::filesystem::path data_dir;
    std::vector<listener_settings> listeners;
    std::filesystem::path ca_cert; ///< absolute; relative config paths resolve under data_dir
    std::filesystem::path ca_key;
    std::optional<std::filesystem::path> upstream_ca_file; ///< nullopt: system trust store
    std::chrono::milliseconds connect_timeout{10'000};
    std::vector<dlp::identity> identities;
    std::vector<dlp::policy> policies;
    std::filesystem::path audit_path;
    bool audit_fsync_always = true;
    std::string admin_address = "127.0.0.1:9901";
    std::string metrics_address = "127.0.0.1:9902";
    std::string log_level = "info";
    std::string log_format = "text";
    std::shared_ptr<const detectors::ruleset> rules; ///< compiled built-in rules
};

struct load_options {
    std::optional<std::filesystem::path> data_dir_override; ///< `--data-dir`
};

/// Parses, validates and builds (compiles the rules). Every problem is returned.
std::expected<settings, diagnostics> load_file(const std::filesystem::path& file,
                                               const load_options& opts = {});
/// Same, from text; `name` is used as FILE in diagnostics.
std::expected<settings, diagnostics> load_string(std::string_view yaml, std::string_view name,
                                                 const load_options& opts = {});

/// The embedded default configuration (CONTRACT.md "Embedded default") as YAML text.
std::string_view embedded_default_yaml();
/// $XDG_DATA_HOME/sluice, or ~/.local/share/sluice.
std::filesystem::path default_data_dir();

/// Parses a size such as "64KiB", "16MiB", "1GiB", "512" (bytes). nullopt if invalid.
std::optional<std::size_t> parse_size(std::string_view text);
/// Parses a duration such as "500ms", "30s", "5m", "1h". nullopt if invalid.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

} // namespace sluice::config
