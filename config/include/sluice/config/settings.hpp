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

/// One problem, printed as "FILE:LINE:COL: message" (line and column 1-based). A problem
/// that has no position (unreadable file, rule compile error) has line 0 and prints as
/// "FILE: message". Messages never contain secret values (ignore values, tokens).
struct diagnostic {
    std::string file;
    int line = 0;
    int column = 0;
    std::string message;
    std::string str() const;
};
using diagnostics = std::vector<diagnostic>;

/// `listeners[].tls`: serve the proxy itself over TLS, optionally requiring client
/// certificates signed by `client_ca` (mTLS identities, issue 5). Paths are absolute.
struct listener_tls_settings {
    std::filesystem::path cert;
    std::filesystem::path key;
    std::optional<std::filesystem::path> client_ca;
};

struct listener_settings {
    std::string host = "127.0.0.1"; ///< IP literal (IPv6 without brackets) or "localhost"
    std::uint16_t port = 3128;      ///< 0 = ephemeral (tests)
    std::optional<std::string> identity;
    std::optional<listener_tls_settings> tls;
};

/// Where a secret comes from (`protected_values[]`, `credentials[].source`). The value is
/// read when the configuration loads (so a reload re-reads it): an environment variable
/// of sluice's own process, or a file's contents with trailing CR/LF removed. A variable
/// that is unset or empty, or a file that is missing, unreadable, empty or over 64 KiB,
/// is a configuration error (the diagnostic names the variable or file, never a value).
struct secret_source {
    enum class kind { env, file };
    kind from = kind::env;
    std::string ref;   ///< environment variable name, or absolute file path
    std::string value; ///< the secret itself: never log, print or audit it
};

/// `credentials[]`: a brokered secret the proxy injects in place of a placeholder
/// (issue 11; dlp/credential_broker.hpp has the rules).
struct credential_settings {
    std::string name;
    std::string placeholder; ///< what the agent sends instead of the secret
    secret_source source;
    std::vector<std::string> hosts;      ///< normalised host patterns, as policy rules
    std::vector<std::uint16_t> ports;    ///< empty in the file = [443]
    std::string path_prefix;             ///< `path_prefix`: "" = any path
    std::string header_name;             ///< set when injected into a header
    std::string header_value_template;   ///< contains "{secret}"
    std::string query_name;              ///< set when injected into a query parameter
    std::vector<std::string> identities; ///< empty = every identity
};

/// `control_store.redis`: where replicas keep the shared kill switch (issue 22). The URL
/// may hold a password (`redis://[user]:password@host:port/db`, `rediss://` for TLS): it
/// is never logged or quoted in an error.
struct control_store_settings {
    std::string url;                              ///< redis:// or rediss://, host required
    std::string key_prefix = "sluice:";           ///< every key and channel starts with it
    std::optional<std::filesystem::path> ca_file; ///< rediss:// trust; nullopt: system store
    /// `on_unavailable`: false = `last_known` (keep enforcing the last state read, refuse to
    /// revive), true = `fail_closed` (also refuse every new flow with 503).
    bool fail_closed = false;
    std::chrono::milliseconds connect_timeout{2'000}; ///< per connection attempt and command
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
    std::chrono::milliseconds audit_fsync_interval{0}; ///< when not always (`fsync: 1s`)
    std::uint64_t audit_max_size = 64ull << 20;        ///< `audit.max_size`: rotate at this size
    std::string admin_address = "127.0.0.1:9901";      ///< "host:port" as written
    std::filesystem::path admin_token_file;            ///< absolute; default data_dir/admin.token
    std::string metrics_address = "127.0.0.1:9902";
    std::chrono::milliseconds supervise_timeout{120'000};
    /// supervise.webhook: new approval entries are posted here as JSON ("" = none). May
    /// hold a secret: never logged.
    std::string supervise_webhook;
    /// `control_store`: the store a fleet of replicas shares (issue 22). Absent = one
    /// process, kill switch in data_dir/killed.json only.
    std::optional<control_store_settings> control_store;
    std::vector<secret_source> protected_values;
    std::vector<credential_settings> credentials;
    std::string log_level = "info";
    std::string log_format = "text";
    std::shared_ptr<const detectors::ruleset> rules; ///< built-in rules plus `rule_files`
    /// Things that load but probably do not do what the operator means (printed by
    /// check-config, logged at start and on reload), e.g. an `inspect: false` rule in a
    /// policy with a `dlp` section, or an opaque rule after a method-constrained deny
    /// for the same hosts (such CONNECTs are intercepted so that the deny can apply).
    diagnostics warnings;
};

struct load_options {
    std::optional<std::filesystem::path> data_dir_override; ///< `--data-dir`
};

/// Parses, validates and builds (compiles the rules). Every problem is returned, sorted by
/// position. Relative paths in the file resolve under data_dir; a relative `data_dir`
/// resolves against the config file's directory (load_file) or the current directory
/// (load_string). `${VAR}` in any scalar value expands from the environment (`$${` is a
/// literal `${`). The compiled built-in ruleset is built once per process and shared.
/// Never throws (except std::bad_alloc).
std::expected<settings, diagnostics> load_file(const std::filesystem::path& file,
                                               const load_options& opts = {});
/// Same, from text; `name` is used as FILE in diagnostics.
std::expected<settings, diagnostics> load_string(std::string_view yaml, std::string_view name,
                                                 const load_options& opts = {});

/// The embedded default configuration (CONTRACT.md "Embedded default") as YAML text.
std::string_view embedded_default_yaml();
/// $XDG_DATA_HOME/sluice (if set and absolute), or ~/.local/share/sluice.
std::filesystem::path default_data_dir();

/// Parses a size such as "64KiB", "16MiB", "1GiB", "512" (bytes); units B, KiB, MiB, GiB,
/// TiB (powers of 1024) and KB, MB, GB (powers of 1000). nullopt if invalid or overflowing.
std::optional<std::size_t> parse_size(std::string_view text);
/// Parses a duration such as "500ms", "30s", "5m", "1h" (a non-negative integer and a unit;
/// "0" alone is accepted). nullopt if invalid or overflowing.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

} // namespace sluice::config
