// Loads the YAML configuration into typed settings. The walk is schema-driven: each
// section lists its keys, so unknown keys are reported where they are, and the walk never
// recurses deeper than the schema (yaml-cpp's own parser caps nesting at 2000). Nothing
// stops at the first problem: every reader records a diagnostic and returns nullopt, and
// callers carry on with the next key, so one run shows the user all their mistakes.
// This file holds the entry points, the top level and the small service sections (admin,
// metrics, logging); loader.hpp lists where every other section is read.
#include "loader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <pwd.h>
#include <sstream>
#include <tuple>
#include <unistd.h>

namespace sluice::config {

namespace {

constexpr std::string_view embedded_default =
    R"(# sluice embedded default (CONTRACT.md "Embedded default")
version: 1
listeners:
  - address: 127.0.0.1:3128
identities:
  - name: local
    source_cidrs: [127.0.0.0/8, "::1/128"]
policies:
  - identity: local
    rules:
      - hosts: ["*"]
        action: allow
        inspect: true
    dlp:
      detectors: [all]
      on_finding: deny
ca: {cert: ca.pem, key: ca.key}
admin: {address: 127.0.0.1:9901, token_file: admin.token}
metrics: {address: 127.0.0.1:9902}
audit: {path: audit.jsonl, fsync: always}
logging: {level: info, format: text}
)";

fs::path current_dir() {
    std::error_code ec;
    auto p = fs::current_path(ec);
    return ec ? fs::path("/") : p;
}

} // namespace

std::expected<settings, diagnostics> loader::run(std::string_view text) {
    YAML::Node root;
    std::optional<YAML::Mark> second_document;
    try {
        root = YAML::Load(std::string(text));
        second_document = find_second_document(text);
    } catch (const YAML::Exception& e) {
        // A syntax error is one diagnostic: what follows it cannot be trusted.
        w_.error(e.mark, e.msg);
        return std::unexpected(std::move(w_.diags()));
    }
    try {
        if (second_document) {
            w_.error(*second_document, "only one YAML document is allowed");
        }
        if (!root || root.IsNull()) {
            w_.diags().push_back(
                {w_.file(), 1, 1, "empty configuration (expected a mapping with 'version: 1')"});
        } else {
            top(root);
        }
    } catch (const YAML::Exception& e) {
        w_.error(e.mark, e.msg);
    } catch (const std::bad_alloc&) {
        throw;
    } catch (const std::exception& e) {
        w_.diags().push_back({w_.file(), 0, 0, std::string("internal error: ") + e.what()});
    }
    auto& d = w_.diags();
    if (!d.empty()) {
        std::stable_sort(d.begin(), d.end(), [](const diagnostic& a, const diagnostic& b) {
            return std::tie(a.line, a.column) < std::tie(b.line, b.column);
        });
        return std::unexpected(std::move(d));
    }
    return std::move(s_);
}

void loader::top(const YAML::Node& root) {
    auto m = w_.map(root, "the configuration",
                    {"version", "data_dir", "listeners", "ca", "upstream", "identities", "policies",
                     "protected_values", "credentials", "supervise", "admin", "metrics", "audit",
                     "logging", "rule_files", "control_store"});
    if (!m) {
        return;
    }
    version(*m);
    data_dir(*m); // first: every relative path below resolves under it
    if (auto* v = m->get("listeners")) {
        listeners(*v);
    }
    if (s_.listeners.empty()) {
        w_.error(m->get("listeners") ? m->key_mark("listeners") : m->mark,
                 "at least one listener is required");
    }
    // The order below is the order problems are found in, not the order they are shown in
    // (run() sorts by position); references across sections are checked at the end.
    using section = void (loader::*)(const YAML::Node&);
    static constexpr std::pair<std::string_view, section> sections[] = {
        {"ca", &loader::ca},
        {"upstream", &loader::upstream},
        {"identities", &loader::identities},
        {"policies", &loader::policies},
        {"protected_values", &loader::protected_values},
        {"rule_files", &loader::rule_files},
        {"credentials", &loader::credentials},
        {"supervise", &loader::supervise},
        {"admin", &loader::admin},
        {"metrics", &loader::metrics},
        {"audit", &loader::audit},
        {"logging", &loader::logging},
        {"control_store", &loader::control_store},
    };
    for (const auto& [key, read] : sections) {
        if (auto* v = m->get(key)) {
            (this->*read)(*v);
        }
    }
    cross_checks();
}

void loader::version(const walker::map_view& m) {
    if (auto* v = m.get("version")) {
        if (auto n = w_.u64(*v, "version", std::numeric_limits<std::uint32_t>::max());
            n && *n != 1) {
            w_.error(*v, "unsupported version " + std::to_string(*n) +
                             " (this sluice reads version 1)");
        }
    } else {
        w_.error(m.mark, "missing required key 'version' (use 'version: 1')");
    }
}

// `--data-dir` beats the file, which beats default_data_dir(); a relative data_dir resolves
// against the configuration file's folder.
void loader::data_dir(const walker::map_view& m) {
    std::optional<fs::path> dd;
    if (auto* v = m.get("data_dir")) {
        if (auto s = w_.str(*v, "data_dir")) {
            dd = fs::path(*s);
        }
    }
    if (opts_.data_dir_override) {
        dd = *opts_.data_dir_override;
    }
    if (!dd) {
        dd = default_data_dir();
    }
    if (dd->is_relative()) {
        dd = base_dir_ / *dd;
    }
    std::error_code ec;
    auto abs = fs::absolute(*dd, ec);
    s_.data_dir = (ec ? *dd : abs).lexically_normal();

    s_.ca_cert = s_.data_dir / "ca.pem";
    s_.ca_key = s_.data_dir / "ca.key";
    s_.audit_path = s_.data_dir / "audit.jsonl";
    s_.admin_token_file = s_.data_dir / "admin.token";
}

void loader::admin(const YAML::Node& n) {
    auto am = w_.map(n, "admin", {"address", "token_file"}, true);
    if (!am) {
        return;
    }
    if (auto* a = am->get("address")) {
        if (auto s = address(*a, "admin.address")) {
            s_.admin_address = *s;
        }
    }
    if (auto* t = am->get("token_file")) {
        if (auto p = path(*t, "admin.token_file")) {
            s_.admin_token_file = *p;
        }
    }
}

void loader::metrics(const YAML::Node& n) {
    auto mm = w_.map(n, "metrics", {"address"}, true);
    if (!mm) {
        return;
    }
    if (auto* a = mm->get("address")) {
        if (auto s = address(*a, "metrics.address")) {
            s_.metrics_address = *s;
        }
    }
}

void loader::logging(const YAML::Node& n) {
    auto lm = w_.map(n, "logging", {"level", "format"}, true);
    if (!lm) {
        return;
    }
    if (auto* l = lm->get("level")) {
        if (auto s = w_.one_of(*l, "logging.level",
                               {"trace", "debug", "info", "warn", "error", "critical", "off"})) {
            s_.log_level = *s;
        }
    }
    if (auto* f = lm->get("format")) {
        if (auto s = w_.one_of(*f, "logging.format", {"text", "json"})) {
            s_.log_format = *s;
        }
    }
}

std::expected<settings, diagnostics> load_string(std::string_view yaml, std::string_view name,
                                                 const load_options& opts) {
    loader l(std::string(name), current_dir(), opts);
    return l.run(yaml);
}

std::expected<settings, diagnostics> load_file(const std::filesystem::path& file,
                                               const load_options& opts) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        const int err = errno;
        return std::unexpected(
            diagnostics{{file.string(), 0, 0,
                         std::string("cannot read configuration: ") + std::strerror(err)}});
    }
    std::ostringstream text;
    text << in.rdbuf();
    std::error_code ec;
    auto abs = fs::absolute(file, ec);
    loader l(file.string(), (ec ? file : abs).parent_path(), opts);
    return l.run(text.str());
}

std::string_view embedded_default_yaml() {
    return embedded_default;
}

std::filesystem::path default_data_dir() {
    if (const char* xdg = std::getenv("XDG_DATA_HOME");
        xdg && *xdg && fs::path(xdg).is_absolute()) {
        return fs::path(xdg) / "sluice";
    }
    if (const char* home = std::getenv("HOME"); home && *home) {
        return fs::path(home) / ".local" / "share" / "sluice";
    }
    // No HOME (some service managers): fall back to the password database.
    if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir && *pw->pw_dir) {
        return fs::path(pw->pw_dir) / ".local" / "share" / "sluice";
    }
    return fs::path("/var/lib/sluice");
}

} // namespace sluice::config
