// The settings loader (internal to config/): one `loader` per load walks the file's
// sections in a fixed order and builds a `settings`. Its member functions live in one file
// per section: settings.cpp (the top level, admin, metrics, logging), sections/values.cpp
// (typed scalars shared by the sections), sections/listeners.cpp (listeners, ca,
// upstream), sections/identities.cpp, sections/policies.cpp, sections/dlp_section.cpp,
// sections/credentials.cpp (credentials, protected_values), sections/supervise.cpp,
// sections/audit.cpp, sections/control_store.cpp and sections/rule_files.cpp (user rules and the
// checks across sections). Not thread safe: one loader per load.
#pragma once

#include "sluice/config/settings.hpp"
#include "yaml_walker.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <expected>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

namespace fs = std::filesystem;

/// "127.0.0.1:3128", "[::1]:3128", "localhost:3128" split; port 0 means ephemeral.
struct host_port {
    std::string host;
    std::uint16_t port = 0;
};
std::optional<host_port> parse_listen_address(std::string_view text);

/// Lower-case hex digits only (what `lower()` of a hash leaves).
bool is_hex(std::string_view s);

// A reference to check once everything is read (names defined later in the file are fine).
struct name_ref {
    std::string name;
    YAML::Mark mark;
    std::string what;
};

class loader {
public:
    loader(std::string file, fs::path base_dir, const load_options& opts)
        : w_(std::move(file))
        , base_dir_(std::move(base_dir))
        , opts_(opts) {}

    /// Parses `text` and walks it; every problem, sorted by position, or the settings.
    std::expected<settings, diagnostics> run(std::string_view text);

private:
    // settings.cpp: the top level and the small service sections.
    void top(const YAML::Node& root);
    void version(const walker::map_view& m);
    void data_dir(const walker::map_view& m);
    void admin(const YAML::Node& n);
    void metrics(const YAML::Node& n);
    void logging(const YAML::Node& n);

    // sections/values.cpp
    fs::path under_data_dir(const std::string& p) const;
    std::optional<fs::path> path(const YAML::Node& n, std::string_view what);
    std::optional<std::string> address(const YAML::Node& n, std::string_view what);
    std::optional<dlp::cidr> cidr(const YAML::Node& n, std::string_view what);
    std::optional<std::string> host_pattern(const YAML::Node& n, std::string_view what);
    std::optional<std::uint16_t> port(const YAML::Node& n, std::string_view what);

    // sections/listeners.cpp
    void listeners(const YAML::Node& n);
    std::optional<listener_tls_settings> listener_tls(const YAML::Node& n);
    void ca(const YAML::Node& n);
    void upstream(const YAML::Node& n);

    // sections/identities.cpp
    void identities(const YAML::Node& n);
    std::optional<dlp::proxy_auth_match> proxy_auth(const YAML::Node& n);
    std::optional<dlp::client_cert_match> client_cert(const YAML::Node& n);

    // sections/policies.cpp
    void policies(const YAML::Node& n);
    void limits(const YAML::Node& n, dlp::policy& p);
    void warn(const YAML::Mark& m, std::string msg);
    void opaque_rule_warnings(const dlp::policy& p, const std::vector<YAML::Mark>& marks,
                              const std::optional<YAML::Mark>& dlp_mark);
    std::optional<dlp::policy_rule> policy_rule(const YAML::Node& n);
    bool methods(const YAML::Node& n, dlp::policy_rule& r);

    // sections/dlp_section.cpp
    void hostname_exfil_section(const YAML::Node& n, dlp::hostname_exfil_settings& h);
    void dlp_section(const YAML::Node& n, dlp::dlp_settings& d);
    void ignore_entry(const YAML::Node& n, dlp::dlp_settings& d);

    // sections/credentials.cpp
    std::optional<secret_source> source(const YAML::Node& n, std::string_view what);
    void protected_values(const YAML::Node& n);
    void credentials(const YAML::Node& n);
    void credential(const YAML::Node& n, std::set<std::string>& names,
                    std::set<std::string>& placeholders);
    void credential_secret(const walker::map_view& m, credential_settings& c);
    void credential_scope(const walker::map_view& m, credential_settings& c);
    void credential_header(const YAML::Node& n, credential_settings& c);
    void credential_query(const YAML::Node& n, credential_settings& c);

    // sections/supervise.cpp
    void supervise(const YAML::Node& n);
    void webhook(const YAML::Node& n);

    // sections/control_store.cpp
    void control_store(const YAML::Node& n);
    void redis_store(const YAML::Node& n, control_store_settings& cs);

    // sections/audit.cpp
    void audit(const YAML::Node& n);

    // sections/rule_files.cpp
    void rule_files(const YAML::Node& n);
    void cross_checks();
    bool user_rules();

    struct rule_file_ref {
        fs::path path;
        YAML::Mark mark;
    };
    std::vector<rule_file_ref> rule_files_;

    walker w_;
    fs::path base_dir_;
    const load_options& opts_;
    settings s_;
    std::map<std::string, YAML::Mark> identity_names_;
    std::set<std::string> policy_identities_;
    std::vector<name_ref> refs_;
    std::vector<name_ref> credential_refs_;
    std::set<std::string, std::less<>> credential_names_;
    std::vector<name_ref> detector_refs_;
    std::vector<name_ref> rule_refs_;
};

} // namespace sluice::config
