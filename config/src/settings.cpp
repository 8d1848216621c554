// Loads the YAML configuration into typed settings. The walk is schema-driven: each
// section lists its keys, so unknown keys are reported where they are, and the walk never
// recurses deeper than the schema (yaml-cpp's own parser caps nesting at 2000). Nothing
// stops at the first problem: every reader records a diagnostic and returns nullopt, and
// callers carry on with the next key, so one run shows the user all their mistakes.
#include "sluice/config/settings.hpp"

#include "sluice/config/rules_loader.hpp"

#include <boost/url/parse.hpp>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <pwd.h>
#include <set>
#include <sstream>
#include <tuple>
#include <unistd.h>

namespace sluice::config {

std::string diagnostic::str() const {
    if (line <= 0) {
        return file + ": " + message;
    }
    return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

namespace {

namespace fs = std::filesystem;

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

// --- small parsers ---------------------------------------------------------------------

bool is_digits(std::string_view s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
    if (!is_digits(s)) {
        return std::nullopt;
    }
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) {
        return std::nullopt;
    }
    return v;
}

bool is_hex(std::string_view s) {
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](char c) {
        return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    });
    return out;
}

/// A DNS name we are willing to match: letters, digits, '-', '_' labels of 1..63 bytes.
bool is_dns_name(std::string_view s) {
    if (s.empty() || s.size() > 253) {
        return false;
    }
    std::size_t label = 0;
    for (char c : s) {
        if (c == '.') {
            if (label == 0) {
                return false;
            }
            label = 0;
            continue;
        }
        const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
        if (!ok || ++label > 63) {
            return false;
        }
    }
    return label > 0;
}

struct host_port {
    std::string host;
    std::uint16_t port = 0;
};

/// "127.0.0.1:3128", "[::1]:3128", "localhost:3128". Port 0 means ephemeral.
std::optional<host_port> parse_listen_address(std::string_view text) {
    std::string_view host;
    std::string_view port;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
            return std::nullopt;
        }
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
        auto a = dlp::ip_address::parse(host);
        if (!a || a->is_v4()) {
            return std::nullopt;
        }
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos) {
            return std::nullopt;
        }
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
        if (host != "localhost") {
            auto a = dlp::ip_address::parse(host);
            if (!a || !a->is_v4()) { // a bare IPv6 needs brackets to be unambiguous
                return std::nullopt;
            }
        }
    }
    auto p = parse_u64(port);
    if (!p || *p > 65535 || port.size() > 5) {
        return std::nullopt;
    }
    return host_port{std::string(host), static_cast<std::uint16_t>(*p)};
}

// --- the walker ----------------------------------------------------------------------

class walker {
public:
    walker(std::string file)
        : file_(std::move(file)) {}

    diagnostics& diags() { return diags_; }
    const std::string& file() const { return file_; }

    void error(const YAML::Mark& m, std::string msg) {
        if (m.is_null() || m.line < 0) {
            diags_.push_back({file_, 0, 0, std::move(msg)});
        } else {
            diags_.push_back({file_, m.line + 1, m.column + 1, std::move(msg)});
        }
    }
    void error(const YAML::Node& n, std::string msg) { error(n.Mark(), std::move(msg)); }

    /// A mapping's entries by key, after checking the key set. Reports a non-mapping
    /// (unless null and `null_ok`), non-scalar keys, duplicate keys and unknown keys.
    struct map_view {
        YAML::Mark mark;
        std::map<std::string, std::pair<YAML::Node, YAML::Node>, std::less<>> entries;
        const YAML::Node* get(std::string_view k) const {
            auto it = entries.find(k);
            return it == entries.end() ? nullptr : &it->second.second;
        }
        YAML::Mark key_mark(std::string_view k) const {
            auto it = entries.find(k);
            return it == entries.end() ? mark : it->second.first.Mark();
        }
    };

    std::optional<map_view> map(const YAML::Node& n, std::string_view what,
                                std::initializer_list<std::string_view> allowed,
                                bool null_ok = false) {
        map_view v;
        v.mark = n.Mark();
        if (n.IsNull() && null_ok) {
            return v;
        }
        if (!n.IsMap()) {
            error(n, "expected a mapping for " + std::string(what));
            return std::nullopt;
        }
        for (const auto& kv : n) {
            // Copies, not references: yaml-cpp's iterator hands out a temporary pair, and a
            // reference into it dangles once the statement ends.
            const YAML::Node key = kv.first;
            if (!key.IsScalar()) {
                error(key, "keys in " + std::string(what) + " must be plain strings");
                continue;
            }
            const std::string& k = key.Scalar();
            if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
                std::string msg =
                    "unknown key '" + k + "' in " + std::string(what) + " (expected one of:";
                for (auto a : allowed) {
                    msg += " ";
                    msg += a;
                }
                error(key, msg + ")");
                continue;
            }
            if (v.entries.contains(k)) {
                error(key, "duplicate key '" + k + "' in " + std::string(what));
                continue;
            }
            v.entries.emplace(k, std::make_pair(key, YAML::Node(kv.second)));
        }
        return v;
    }

    /// Expands ${VAR} from the environment. `$${` is a literal "${".
    std::optional<std::string> expand(const std::string& raw, const YAML::Mark& m) {
        if (raw.find('$') == std::string::npos) {
            return raw;
        }
        std::string out;
        out.reserve(raw.size());
        bool ok = true;
        for (std::size_t i = 0; i < raw.size();) {
            if (raw.compare(i, 3, "$${") == 0) {
                out += "${";
                i += 3;
                continue;
            }
            if (raw.compare(i, 2, "${") != 0) {
                out += raw[i++];
                continue;
            }
            const auto close = raw.find('}', i + 2);
            if (close == std::string::npos) {
                error(m, "unterminated '${' in value");
                return std::nullopt;
            }
            const std::string name = raw.substr(i + 2, close - i - 2);
            const bool valid_name = !name.empty() && !(name[0] >= '0' && name[0] <= '9') &&
                                    std::all_of(name.begin(), name.end(), [](char c) {
                                        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                                               (c >= '0' && c <= '9') || c == '_';
                                    });
            if (!valid_name) {
                error(m, "invalid environment variable name '${" + name + "}'");
                ok = false;
            } else if (const char* v = std::getenv(name.c_str()); v == nullptr) {
                error(m, "environment variable '" + name + "' is not set");
                ok = false;
            } else {
                out += v;
            }
            i = close + 1;
        }
        if (!ok) {
            return std::nullopt;
        }
        return out;
    }

    std::optional<std::string> str(const YAML::Node& n, std::string_view what,
                                   bool allow_empty = false) {
        if (!n.IsScalar()) {
            error(n, n.IsNull() ? std::string(what) + " needs a value"
                                : "expected a string for " + std::string(what));
            return std::nullopt;
        }
        auto v = expand(n.Scalar(), n.Mark());
        if (v && v->empty() && !allow_empty) {
            error(n, std::string(what) + " must not be empty");
            return std::nullopt;
        }
        return v;
    }

    /// Quoted form of the value as written in the file (never the expanded text, which may
    /// carry an environment secret), cut short.
    static std::string shown(const YAML::Node& n) {
        std::string s = n.IsScalar() ? n.Scalar() : std::string("<non-scalar>");
        if (s.size() > 48) {
            s = s.substr(0, 45) + "...";
        }
        return "'" + s + "'";
    }

    std::optional<std::uint64_t> u64(const YAML::Node& n, std::string_view what,
                                     std::uint64_t max) {
        auto s = str(n, what);
        if (!s) {
            return std::nullopt;
        }
        auto v = parse_u64(*s);
        if (!v || *v > max) {
            error(n, "invalid " + std::string(what) + " " + shown(n) + " (expected an integer 0.." +
                         std::to_string(max) + ")");
            return std::nullopt;
        }
        return v;
    }

    std::optional<bool> boolean(const YAML::Node& n, std::string_view what) {
        auto s = str(n, what);
        if (!s) {
            return std::nullopt;
        }
        if (*s == "true") {
            return true;
        }
        if (*s == "false") {
            return false;
        }
        error(n, "invalid " + std::string(what) + " " + shown(n) + " (expected true or false)");
        return std::nullopt;
    }

    std::optional<std::size_t> size(const YAML::Node& n, std::string_view what) {
        auto s = str(n, what);
        if (!s) {
            return std::nullopt;
        }
        auto v = parse_size(*s);
        if (!v) {
            error(n, "invalid size " + shown(n) + " for " + std::string(what) +
                         " (e.g. 512, 64KiB, 16MiB)");
        }
        return v;
    }

    std::optional<std::chrono::milliseconds> duration(const YAML::Node& n, std::string_view what) {
        auto s = str(n, what);
        if (!s) {
            return std::nullopt;
        }
        auto v = parse_duration(*s);
        if (!v) {
            error(n, "invalid duration " + shown(n) + " for " + std::string(what) +
                         " (e.g. 500ms, 30s, 5m)");
        }
        return v;
    }

    /// A sequence; a single scalar is NOT accepted as a one-element list, to keep the
    /// schema unambiguous. Calls `each` per element.
    template <class F>
    void seq(const YAML::Node& n, std::string_view what, F&& each) {
        if (n.IsNull()) {
            return;
        }
        if (!n.IsSequence()) {
            error(n, "expected a list for " + std::string(what));
            return;
        }
        for (const auto& item : n) {
            each(item);
        }
    }

    std::optional<std::string> one_of(const YAML::Node& n, std::string_view what,
                                      std::initializer_list<std::string_view> choices) {
        auto s = str(n, what);
        if (!s) {
            return std::nullopt;
        }
        if (std::find(choices.begin(), choices.end(), *s) != choices.end()) {
            return s;
        }
        std::string msg = "invalid " + std::string(what) + " " + shown(n) + " (expected";
        bool first = true;
        for (auto c : choices) {
            msg += first ? " " : " | ";
            msg += c;
            first = false;
        }
        error(n, msg + ")");
        return std::nullopt;
    }

private:
    std::string file_;
    diagnostics diags_;
};

// Counts documents with a bare event handler instead of YAML::LoadAll: on some malformed
// input yaml-cpp 0.7's parser reports empty documents forever, and LoadAll loops until
// memory runs out (found by fuzz/config_fuzz.cpp). Reading at most two documents here is
// bounded. Throws YAML::ParserException for a syntax error in any document read.
class document_counter final : public YAML::EventHandler {
public:
    int count = 0;
    YAML::Mark second;
    void OnDocumentStart(const YAML::Mark& m) override {
        if (++count == 2) {
            second = m;
        }
    }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

std::optional<YAML::Mark> find_second_document(std::string_view text) {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    document_counter counter;
    for (int i = 0; i < 2 && parser.HandleNextDocument(counter); ++i) {
    }
    if (counter.count >= 2) {
        return counter.second;
    }
    return std::nullopt;
}

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

    std::expected<settings, diagnostics> run(std::string_view text) {
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
                    {w_.file(), 1, 1,
                     "empty configuration (expected a mapping with 'version: 1')"});
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

private:
    fs::path under_data_dir(const std::string& p) const {
        fs::path path(p);
        return path.is_absolute() ? path.lexically_normal()
                                  : (s_.data_dir / path).lexically_normal();
    }

    std::optional<fs::path> path(const YAML::Node& n, std::string_view what) {
        auto v = w_.str(n, what);
        if (!v) {
            return std::nullopt;
        }
        if (v->find('\0') != std::string::npos) {
            w_.error(n, std::string(what) + " contains a NUL byte");
            return std::nullopt;
        }
        return under_data_dir(*v);
    }

    std::optional<std::string> address(const YAML::Node& n, std::string_view what) {
        auto v = w_.str(n, what);
        if (!v) {
            return std::nullopt;
        }
        if (!parse_listen_address(*v)) {
            w_.error(n, "invalid " + std::string(what) + " " + walker::shown(n) +
                            " (expected host:port with an IPv4 address, [IPv6] or localhost)");
            return std::nullopt;
        }
        return v;
    }

    std::optional<dlp::cidr> cidr(const YAML::Node& n, std::string_view what) {
        auto v = w_.str(n, what);
        if (!v) {
            return std::nullopt;
        }
        auto c = dlp::cidr::parse(*v);
        if (!c) {
            w_.error(n, "invalid CIDR " + walker::shown(n) + " in " + std::string(what) +
                            " (expected e.g. 10.0.0.0/8 or fd00::/8)");
        }
        return c;
    }

    std::optional<std::string> host_pattern(const YAML::Node& n, std::string_view what) {
        auto v = w_.str(n, what);
        if (!v) {
            return std::nullopt;
        }
        if (*v == "*") {
            return v;
        }
        const bool wildcard = v->starts_with("*.");
        std::string rest =
            dlp::normalize_host(wildcard ? std::string_view(*v).substr(2) : std::string_view(*v));
        const bool ok = dlp::ip_address::parse(rest).has_value() ? !wildcard : is_dns_name(rest);
        if (!ok) {
            w_.error(n, "invalid host pattern " + walker::shown(n) + " in " + std::string(what) +
                            " (expected \"*\", \"*.example.com\", a host name or an IP address)");
            return std::nullopt;
        }
        return wildcard ? "*." + rest : rest;
    }

    std::optional<std::uint16_t> port(const YAML::Node& n, std::string_view what) {
        auto v = w_.str(n, what);
        if (!v) {
            return std::nullopt;
        }
        auto p = parse_u64(*v);
        if (!p || *p == 0 || *p > 65535) {
            w_.error(n, "port " + walker::shown(n) + " in " + std::string(what) +
                            " is out of range (1-65535)");
            return std::nullopt;
        }
        return static_cast<std::uint16_t>(*p);
    }

    void top(const YAML::Node& root) {
        auto m = w_.map(root, "the configuration",
                        {"version", "data_dir", "listeners", "ca", "upstream", "identities",
                         "policies", "protected_values", "credentials", "supervise", "admin",
                         "metrics", "audit", "logging", "rule_files"});
        if (!m) {
            return;
        }
        if (auto* v = m->get("version")) {
            if (auto n = w_.u64(*v, "version", std::numeric_limits<std::uint32_t>::max());
                n && *n != 1) {
                w_.error(*v, "unsupported version " + std::to_string(*n) +
                                 " (this sluice reads version 1)");
            }
        } else {
            w_.error(m->mark, "missing required key 'version' (use 'version: 1')");
        }

        // data_dir first: every relative path below resolves under it.
        std::optional<fs::path> dd;
        if (auto* v = m->get("data_dir")) {
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

        if (auto* v = m->get("listeners")) {
            listeners(*v);
        }
        if (s_.listeners.empty()) {
            w_.error(m->get("listeners") ? m->key_mark("listeners") : m->mark,
                     "at least one listener is required");
        }
        if (auto* v = m->get("ca")) {
            ca(*v);
        }
        if (auto* v = m->get("upstream")) {
            upstream(*v);
        }
        if (auto* v = m->get("identities")) {
            identities(*v);
        }
        if (auto* v = m->get("policies")) {
            policies(*v);
        }
        if (auto* v = m->get("protected_values")) {
            protected_values(*v);
        }
        if (auto* v = m->get("rule_files")) {
            // User rule files (same schema as detectors/rules/*.yml), added to the built-in
            // rules; relative paths resolve against the configuration file's folder.
            w_.seq(*v, "rule_files", [&](const YAML::Node& e) {
                if (auto f = w_.str(e, "rule_files")) {
                    fs::path p(*f);
                    rule_files_.push_back({p.is_relative() ? base_dir_ / p : p, e.Mark()});
                }
            });
        }
        if (auto* v = m->get("credentials")) {
            credentials(*v);
        }
        if (auto* v = m->get("supervise")) {
            if (auto sm = w_.map(*v, "supervise", {"timeout", "webhook"}, true)) {
                if (auto* t = sm->get("timeout")) {
                    if (auto d = w_.duration(*t, "supervise.timeout")) {
                        s_.supervise_timeout = *d;
                    }
                }
                if (auto* h = sm->get("webhook")) {
                    webhook(*h);
                }
            }
        }
        if (auto* v = m->get("admin")) {
            if (auto am = w_.map(*v, "admin", {"address", "token_file"}, true)) {
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
        }
        if (auto* v = m->get("metrics")) {
            if (auto mm = w_.map(*v, "metrics", {"address"}, true)) {
                if (auto* a = mm->get("address")) {
                    if (auto s = address(*a, "metrics.address")) {
                        s_.metrics_address = *s;
                    }
                }
            }
        }
        if (auto* v = m->get("audit")) {
            audit(*v);
        }
        if (auto* v = m->get("logging")) {
            if (auto lm = w_.map(*v, "logging", {"level", "format"}, true)) {
                if (auto* l = lm->get("level")) {
                    if (auto s = w_.one_of(
                            *l, "logging.level",
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
        }
        cross_checks();
    }

    void listeners(const YAML::Node& n) {
        w_.seq(n, "listeners", [&](const YAML::Node& item) {
            auto m = w_.map(item, "a listener", {"address", "identity", "tls"});
            if (!m) {
                return;
            }
            listener_settings l;
            bool ok = true;
            if (auto* a = m->get("address")) {
                if (auto s = address(*a, "listener address")) {
                    auto hp = parse_listen_address(*s);
                    l.host = hp->host;
                    l.port = hp->port;
                } else {
                    ok = false;
                }
            } else {
                w_.error(m->mark, "listener needs an 'address' (host:port)");
                ok = false;
            }
            if (auto* i = m->get("identity")) {
                if (auto s = w_.str(*i, "listener identity")) {
                    l.identity = *s;
                    refs_.push_back({*s, i->Mark(), "listener identity"});
                }
            }
            if (auto* t = m->get("tls")) {
                if (auto tm = w_.map(*t, "listener tls", {"cert", "key", "client_ca"})) {
                    listener_tls_settings tls;
                    auto* c = tm->get("cert");
                    auto* k = tm->get("key");
                    if (!c || !k) {
                        w_.error(tm->mark, "listener tls needs both 'cert' and 'key'");
                    }
                    if (c) {
                        if (auto p = path(*c, "tls.cert")) {
                            tls.cert = *p;
                        }
                    }
                    if (k) {
                        if (auto p = path(*k, "tls.key")) {
                            tls.key = *p;
                        }
                    }
                    if (auto* ca = tm->get("client_ca")) {
                        tls.client_ca = path(*ca, "tls.client_ca");
                    }
                    l.tls = std::move(tls);
                }
            }
            if (ok) {
                s_.listeners.push_back(std::move(l));
            }
        });
    }

    void ca(const YAML::Node& n) {
        auto m = w_.map(n, "ca", {"cert", "key"}, true);
        if (!m) {
            return;
        }
        if (auto* c = m->get("cert")) {
            if (auto p = path(*c, "ca.cert")) {
                s_.ca_cert = *p;
            }
        }
        if (auto* k = m->get("key")) {
            if (auto p = path(*k, "ca.key")) {
                s_.ca_key = *p;
            }
        }
    }

    // supervise.webhook: an absolute http(s) URL without userinfo or fragment. Errors never
    // quote it: a hook URL's path or query usually is its secret (${VAR} expands).
    void webhook(const YAML::Node& n) {
        auto v = w_.str(n, "supervise.webhook");
        if (!v)
            return;
        auto u = boost::urls::parse_uri(*v);
        if (!u) {
            w_.error(n, "supervise.webhook is not an absolute URL");
        } else if (u->scheme() != "http" && u->scheme() != "https") {
            w_.error(n, "supervise.webhook must be an http:// or https:// URL");
        } else if (u->has_userinfo()) {
            w_.error(n, "supervise.webhook must not carry user:password");
        } else if (u->host().empty()) {
            w_.error(n, "supervise.webhook has no host");
        } else if (u->has_fragment()) {
            w_.error(n, "supervise.webhook must not have a #fragment");
        } else {
            s_.supervise_webhook = std::move(*v);
        }
    }

    void upstream(const YAML::Node& n) {
        auto m = w_.map(n, "upstream", {"ca_file", "connect_timeout"}, true);
        if (!m) {
            return;
        }
        if (auto* c = m->get("ca_file")) {
            s_.upstream_ca_file = path(*c, "upstream.ca_file");
        }
        if (auto* t = m->get("connect_timeout")) {
            if (auto d = w_.duration(*t, "upstream.connect_timeout")) {
                if (d->count() == 0) {
                    w_.error(*t, "upstream.connect_timeout must be greater than 0");
                } else {
                    s_.connect_timeout = *d;
                }
            }
        }
    }

    void identities(const YAML::Node& n) {
        w_.seq(n, "identities", [&](const YAML::Node& item) {
            auto m =
                w_.map(item, "an identity", {"name", "source_cidrs", "proxy_auth", "client_cert"});
            if (!m) {
                return;
            }
            dlp::identity id;
            if (auto* nm = m->get("name")) {
                if (auto s = w_.str(*nm, "identity name")) {
                    id.name = *s;
                    if (*s == "*") {
                        w_.error(*nm, "'*' is reserved for policies and cannot name an identity");
                    } else if (!identity_names_.emplace(*s, nm->Mark()).second) {
                        w_.error(*nm, "duplicate identity name '" + *s + "'");
                    }
                }
            } else {
                w_.error(m->mark, "identity needs a 'name'");
            }
            if (auto* c = m->get("source_cidrs")) {
                w_.seq(*c, "source_cidrs", [&](const YAML::Node& e) {
                    if (auto x = cidr(e, "source_cidrs")) {
                        id.source_cidrs.push_back(*x);
                    }
                });
            }
            if (auto* pa = m->get("proxy_auth")) {
                if (auto pm = w_.map(*pa, "proxy_auth", {"username", "token_sha256"})) {
                    dlp::proxy_auth_match auth;
                    if (auto* u = pm->get("username")) {
                        if (auto s = w_.str(*u, "proxy_auth.username")) {
                            auth.username = *s;
                        }
                    }
                    if (auto* t = pm->get("token_sha256")) {
                        // Never echo this value: a user may paste the token itself here.
                        if (auto s = w_.str(*t, "proxy_auth.token_sha256")) {
                            std::string h = lower(*s);
                            if (h.size() != 64 || !is_hex(h)) {
                                w_.error(
                                    *t,
                                    "proxy_auth.token_sha256 must be 64 hex digits (the SHA-256 of "
                                    "the token, not the token)");
                            } else {
                                auth.token_sha256 = h;
                            }
                        }
                    } else {
                        w_.error(pm->mark, "proxy_auth needs 'token_sha256'");
                    }
                    id.proxy_auth = std::move(auth);
                }
            }
            if (auto* cc = m->get("client_cert")) {
                if (auto cm = w_.map(*cc, "client_cert", {"uri_san", "subject_cn"})) {
                    dlp::client_cert_match match;
                    if (auto* u = cm->get("uri_san")) {
                        if (auto s = w_.str(*u, "client_cert.uri_san")) {
                            match.uri_san = *s;
                        }
                    }
                    if (auto* c = cm->get("subject_cn")) {
                        if (auto s = w_.str(*c, "client_cert.subject_cn")) {
                            match.subject_cn = *s;
                        }
                    }
                    if (!cm->get("uri_san") && !cm->get("subject_cn")) {
                        w_.error(cm->mark, "client_cert needs 'uri_san' or 'subject_cn'");
                    }
                    id.client_cert = std::move(match);
                }
            }
            s_.identities.push_back(std::move(id));
        });
    }

    void policies(const YAML::Node& n) {
        w_.seq(n, "policies", [&](const YAML::Node& item) {
            auto m = w_.map(
                item, "a policy",
                {"identity", "rules", "dlp", "limits", "private_destinations", "credentials"});
            if (!m) {
                return;
            }
            dlp::policy p;
            if (auto* i = m->get("identity")) {
                if (auto s = w_.str(*i, "policy identity")) {
                    p.identity = *s;
                    if (!policy_identities_.insert(*s).second) {
                        w_.error(*i, "a policy for identity '" + *s + "' is already defined");
                    }
                    if (*s != "*") {
                        refs_.push_back({*s, i->Mark(), "policy identity"});
                    }
                }
            } else {
                w_.error(m->mark, "policy needs an 'identity' (an identity name or \"*\")");
            }
            std::vector<YAML::Mark> rule_marks;
            if (auto* r = m->get("rules")) {
                w_.seq(*r, "rules", [&](const YAML::Node& e) {
                    if (auto rule = policy_rule(e)) {
                        p.rules.push_back(std::move(*rule));
                        rule_marks.push_back(e.Mark());
                    }
                });
            }
            if (auto* d = m->get("dlp")) {
                dlp_section(*d, p.dlp);
                opaque_rule_warnings(p, rule_marks, d->Mark());
            } else {
                opaque_rule_warnings(p, rule_marks, std::nullopt);
            }
            if (auto* l = m->get("limits")) {
                if (auto lm = w_.map(
                        *l, "limits",
                        {"requests_per_minute", "upload_per_minute", "max_connections"}, true)) {
                    if (auto* x = lm->get("requests_per_minute")) {
                        if (auto v = w_.u64(*x, "requests_per_minute",
                                            std::numeric_limits<std::uint32_t>::max())) {
                            p.limits.requests_per_minute = *v;
                        }
                    }
                    if (auto* x = lm->get("upload_per_minute")) {
                        if (auto v = w_.size(*x, "upload_per_minute")) {
                            p.limits.upload_per_minute = *v;
                        }
                    }
                    if (auto* x = lm->get("max_connections")) {
                        if (auto v = w_.u64(*x, "max_connections",
                                            std::numeric_limits<std::uint32_t>::max())) {
                            p.limits.max_connections = *v;
                        }
                    }
                }
            }
            if (auto* pd = m->get("private_destinations")) {
                w_.seq(*pd, "private_destinations", [&](const YAML::Node& e) {
                    if (auto c = cidr(e, "private_destinations")) {
                        p.private_destinations.push_back(*c);
                    }
                });
            }
            if (auto* cr = m->get("credentials")) {
                p.credentials.emplace();
                w_.seq(*cr, "credentials", [&](const YAML::Node& e) {
                    if (auto s = w_.str(e, "policy credential")) {
                        p.credentials->push_back(*s);
                        credential_refs_.push_back({*s, e.Mark(), "policy credential"});
                    }
                });
            }
            s_.policies.push_back(std::move(p));
        });
    }

    void warn(const YAML::Mark& m, std::string msg) {
        s_.warnings.push_back({w_.file(), m.line + 1, m.column + 1, std::move(msg)});
    }

    static std::string at(const YAML::Mark& m) {
        return std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    }

    // Two rules' host lists can name the same host (a sufficient test: "*", equal
    // patterns, or one pattern matching the other's name or wildcard base).
    static bool hosts_overlap(const dlp::policy_rule& a, const dlp::policy_rule& b) {
        if (a.hosts.empty() || b.hosts.empty()) {
            return true;
        }
        auto base = [](const std::string& h) {
            return h.starts_with("*.") ? h.substr(2) : h == "*" ? std::string("x") : h;
        };
        for (const auto& x : a.hosts) {
            for (const auto& y : b.hosts) {
                if (x == "*" || y == "*" || x == y || dlp::host_matches(x, base(y)) ||
                    dlp::host_matches(y, base(x))) {
                    return true;
                }
            }
        }
        return false;
    }

    static bool ports_overlap(const dlp::policy_rule& a, const dlp::policy_rule& b) {
        return a.ports.empty() || b.ports.empty() ||
               std::any_of(a.ports.begin(), a.ports.end(), [&](std::uint16_t p) {
                   return std::find(b.ports.begin(), b.ports.end(), p) != b.ports.end();
               });
    }

    // An opaque (`inspect: false`) rule: its tunnels carry bytes no detector sees, and a
    // method- or path-constrained deny or supervise rule before it for the same hosts
    // could not apply to them (the proxy intercepts such CONNECTs instead).
    void opaque_rule_warnings(const dlp::policy& p, const std::vector<YAML::Mark>& marks,
                              const std::optional<YAML::Mark>& dlp_mark) {
        for (std::size_t k = 0; k < p.rules.size() && k < marks.size(); ++k) {
            const auto& r = p.rules[k];
            if (r.inspect) {
                continue;
            }
            if (dlp_mark) {
                warn(marks[k], "rule is 'inspect: false': its tunnels are not scanned, so the "
                               "policy's dlp section (" +
                                   at(*dlp_mark) +
                                   ") covers only its other rules and plain http requests");
            }
            for (std::size_t j = 0; j < k; ++j) {
                const auto& c = p.rules[j];
                const bool constrained = !c.methods.empty() || !c.path_prefix.empty();
                if (constrained && c.act != dlp::action::allow && hosts_overlap(c, r) &&
                    ports_overlap(c, r)) {
                    warn(marks[k], "rule is 'inspect: false', but the rule at " + at(marks[j]) +
                                       " denies or supervises by method or path for the same "
                                       "hosts: CONNECTs it covers are intercepted so that rule "
                                       "can apply");
                }
            }
        }
    }

    std::optional<dlp::policy_rule> policy_rule(const YAML::Node& n) {
        auto m = w_.map(n, "a policy rule",
                        {"hosts", "ports", "methods", "path_prefix", "action", "inspect"});
        if (!m) {
            return std::nullopt;
        }
        dlp::policy_rule r;
        bool ok = true;
        if (auto* h = m->get("hosts")) {
            w_.seq(*h, "hosts", [&](const YAML::Node& e) {
                if (auto s = host_pattern(e, "hosts")) {
                    r.hosts.push_back(*s);
                } else {
                    ok = false;
                }
            });
        }
        if (auto* p = m->get("ports")) {
            w_.seq(*p, "ports", [&](const YAML::Node& e) {
                if (auto v = port(e, "ports")) {
                    r.ports.push_back(*v);
                } else {
                    ok = false;
                }
            });
        }
        if (auto* ms = m->get("methods")) {
            w_.seq(*ms, "methods", [&](const YAML::Node& e) {
                auto s = w_.str(e, "method");
                if (!s) {
                    ok = false;
                    return;
                }
                std::string up = *s;
                std::transform(up.begin(), up.end(), up.begin(), [](char c) {
                    return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
                });
                if (!std::all_of(up.begin(), up.end(),
                                 [](char c) { return (c >= 'A' && c <= 'Z') || c == '-'; })) {
                    w_.error(e,
                             "invalid method " + walker::shown(e) + " (expected e.g. GET, POST)");
                    ok = false;
                    return;
                }
                r.methods.push_back(up);
            });
        }
        if (auto* pp = m->get("path_prefix")) {
            if (auto s = w_.str(*pp, "path_prefix")) {
                if (s->front() != '/') {
                    w_.error(*pp, "path_prefix must start with '/'");
                    ok = false;
                } else {
                    r.path_prefix = *s;
                }
            }
        }
        if (auto* a = m->get("action")) {
            if (auto s = w_.one_of(*a, "action", {"allow", "deny", "supervise"})) {
                r.act = *s == "allow"  ? dlp::action::allow
                        : *s == "deny" ? dlp::action::deny
                                       : dlp::action::supervise;
            } else {
                ok = false;
            }
        } else {
            w_.error(m->mark, "policy rule needs an 'action' (allow | deny | supervise)");
            ok = false;
        }
        if (auto* i = m->get("inspect")) {
            if (auto b = w_.boolean(*i, "inspect")) {
                r.inspect = *b;
                if (!*b && (!r.methods.empty() || !r.path_prefix.empty())) {
                    w_.error(
                        *i,
                        "inspect: false cannot be combined with methods or path_prefix (an opaque "
                        "tunnel cannot enforce them)");
                    ok = false;
                }
            }
        }
        if (!ok) {
            return std::nullopt;
        }
        return r;
    }

    // `dlp.hostname_exfil: {enabled, min_score, min_label_length, allow}` (hostname.hpp).
    void hostname_exfil_section(const YAML::Node& n, dlp::hostname_exfil_settings& h) {
        auto m = w_.map(n, "hostname_exfil", {"enabled", "min_score", "min_label_length", "allow"},
                        true);
        if (!m) {
            return;
        }
        if (auto* e = m->get("enabled")) {
            if (auto b = w_.boolean(*e, "hostname_exfil enabled")) {
                h.enabled = *b;
            }
        }
        if (auto* ms = m->get("min_score")) {
            if (auto v = w_.str(*ms, "min_score")) {
                double score = 0;
                const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), score);
                if (ec != std::errc() || end != v->data() + v->size() || !(score > 0) ||
                    score > 1000) {
                    w_.error(*ms, "invalid min_score " + walker::shown(*ms) +
                                      " (expected a number of bytes above 0, at most 1000)");
                } else {
                    h.min_score = score;
                }
            }
        }
        if (auto* ml = m->get("min_label_length")) {
            if (auto v = w_.u64(*ml, "min_label_length", 63)) {
                if (*v < 8) {
                    w_.error(*ml, "invalid min_label_length " + walker::shown(*ml) +
                                      " (expected 8..63: a DNS label is at most 63 bytes)");
                } else {
                    h.min_label_length = static_cast<std::size_t>(*v);
                }
            }
        }
        if (auto* al = m->get("allow")) {
            w_.seq(*al, "hostname_exfil allow", [&](const YAML::Node& e) {
                if (auto p = host_pattern(e, "hostname_exfil allow")) {
                    h.allow.push_back(*p);
                }
            });
        }
    }

    void dlp_section(const YAML::Node& n, dlp::dlp_settings& d) {
        auto m = w_.map(
            n, "dlp",
            {"detectors", "on_finding", "max_body", "large_bodies", "ignore", "hostname_exfil"},
            true);
        if (!m) {
            return;
        }
        if (auto* det = m->get("detectors")) {
            d.detectors.clear();
            w_.seq(*det, "detectors", [&](const YAML::Node& e) {
                if (auto s = w_.str(e, "detector")) {
                    d.detectors.push_back(*s);
                    detector_refs_.push_back({*s, e.Mark(), "detector"});
                }
            });
            if (det->IsSequence() && det->size() == 0) {
                w_.error(*det, "detectors is empty: use [all] or list rule ids or categories");
            }
        }
        if (auto* of = m->get("on_finding")) {
            if (auto s = w_.one_of(*of, "on_finding", {"deny", "supervise", "log"})) {
                d.on_finding = *s == "deny"        ? dlp::finding_action::deny
                               : *s == "supervise" ? dlp::finding_action::supervise
                                                   : dlp::finding_action::log;
            }
        }
        if (auto* mb = m->get("max_body")) {
            if (auto v = w_.size(*mb, "max_body")) {
                d.max_body = *v;
            }
        }
        if (auto* lb = m->get("large_bodies")) {
            if (auto s = w_.one_of(*lb, "large_bodies", {"deny", "stream"})) {
                d.stream_large_bodies = *s == "stream";
            }
        }
        if (auto* hx = m->get("hostname_exfil")) {
            hostname_exfil_section(*hx, d.hostname_exfil);
        }
        if (auto* ig = m->get("ignore")) {
            w_.seq(*ig, "ignore", [&](const YAML::Node& e) {
                auto im = w_.map(e, "an ignore entry", {"rule", "value", "fingerprint"});
                if (!im) {
                    return;
                }
                dlp::ignore_entry entry;
                if (auto* r = im->get("rule")) {
                    if (auto s = w_.str(*r, "ignore rule")) {
                        entry.rule = *s;
                        rule_refs_.push_back({*s, r->Mark(), "ignore rule"});
                    }
                } else {
                    w_.error(im->mark, "ignore entry needs a 'rule'");
                }
                auto* v = im->get("value");
                auto* f = im->get("fingerprint");
                if ((v != nullptr) == (f != nullptr)) {
                    w_.error(im->mark,
                             "ignore entry needs exactly one of 'value' or 'fingerprint'");
                }
                if (v) {
                    if (auto s = w_.str(*v, "ignore value")) {
                        entry.value = *s;
                    }
                }
                if (f) {
                    if (auto s = w_.str(*f, "ignore fingerprint")) {
                        std::string fp = lower(*s);
                        if (!fp.starts_with("sha256:") || fp.size() != 7 + 16 ||
                            !is_hex(fp.substr(7))) {
                            w_.error(
                                *f,
                                "ignore fingerprint must be 'sha256:' followed by 16 hex digits");
                        } else {
                            entry.fingerprint = fp;
                        }
                    }
                }
                d.ignore.push_back(std::move(entry));
            });
        }
    }

    std::optional<secret_source> source(const YAML::Node& n, std::string_view what) {
        auto m = w_.map(n, what, {"env", "file"});
        if (!m) {
            return std::nullopt;
        }
        auto* e = m->get("env");
        auto* f = m->get("file");
        if ((e != nullptr) == (f != nullptr)) {
            w_.error(m->mark, std::string(what) + " needs exactly one of 'env' or 'file'");
            return std::nullopt;
        }
        secret_source src;
        if (e) {
            auto s = w_.str(*e, "env");
            if (!s) {
                return std::nullopt;
            }
            src.from = secret_source::kind::env;
            src.ref = *s;
            const char* v = std::getenv(s->c_str());
            if (v == nullptr || *v == '\0') {
                w_.error(*e, std::string(what) + ": environment variable '" + *s +
                                 "' is not set or empty");
                return std::nullopt;
            }
            src.value = v;
        } else {
            auto p = path(*f, "file");
            if (!p) {
                return std::nullopt;
            }
            src.from = secret_source::kind::file;
            src.ref = p->string();
            auto v = read_secret_file(*p);
            if (!v) {
                w_.error(*f, std::string(what) + ": secret file '" + src.ref + "' " + v.error());
                return std::nullopt;
            }
            src.value = std::move(*v);
        }
        if (src.value.size() < 4) {
            w_.error(e ? *e : *f,
                     std::string(what) + " ('" + src.ref + "') is shorter than 4 bytes");
            return std::nullopt;
        }
        return src;
    }

    // The file's bytes without trailing CR/LF (secret files usually end in a newline).
    static std::expected<std::string, std::string>
    read_secret_file(const std::filesystem::path& p) {
        constexpr std::size_t max_secret = 64 * 1024;
        std::ifstream in(p, std::ios::binary);
        if (!in) {
            return std::unexpected(std::string("cannot be read: ") + std::strerror(errno));
        }
        std::string v(max_secret + 1, '\0');
        in.read(v.data(), static_cast<std::streamsize>(v.size()));
        if (in.bad()) {
            return std::unexpected("cannot be read");
        }
        v.resize(static_cast<std::size_t>(in.gcount()));
        if (v.size() > max_secret) {
            return std::unexpected("is larger than 64 KiB");
        }
        while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) {
            v.pop_back();
        }
        if (v.empty()) {
            return std::unexpected("is empty");
        }
        return v;
    }

    void protected_values(const YAML::Node& n) {
        w_.seq(n, "protected_values", [&](const YAML::Node& e) {
            if (auto s = source(e, "a protected value")) {
                s_.protected_values.push_back(std::move(*s));
            }
        });
    }

    void credentials(const YAML::Node& n) {
        std::set<std::string> names;
        std::set<std::string> placeholders;
        w_.seq(n, "credentials", [&](const YAML::Node& e) {
            auto m = w_.map(e, "a credential",
                            {"name", "placeholder", "source", "hosts", "ports", "path_prefix",
                             "header", "query", "identities"});
            if (!m) {
                return;
            }
            credential_settings c;
            if (auto* nm = m->get("name")) {
                if (auto s = w_.str(*nm, "credential name")) {
                    c.name = *s;
                    if (!names.insert(*s).second) {
                        w_.error(*nm, "duplicate credential name '" + *s + "'");
                    }
                }
            } else {
                w_.error(m->mark, "credential needs a 'name'");
            }
            if (auto* p = m->get("placeholder")) {
                if (auto s = w_.str(*p, "placeholder")) {
                    c.placeholder = *s;
                    if (s->size() < 4) {
                        w_.error(*p, "placeholder must be at least 4 characters");
                    } else if (!placeholders.insert(*s).second) {
                        w_.error(*p, "placeholder '" + *s + "' is used by another credential");
                    }
                }
            } else {
                w_.error(m->mark, "credential needs a 'placeholder'");
            }
            if (auto* src = m->get("source")) {
                if (auto s = source(*src, "credential source")) {
                    // The secret goes into a header or query: CR, LF, NUL or any other
                    // control byte would split or smuggle (RFC 9110 section 5.5).
                    if (std::any_of(s->value.begin(), s->value.end(), is_control)) {
                        w_.error(*src, "credential source ('" + s->ref +
                                           "') contains control characters (CR, LF, NUL, ...)");
                    } else if (s->value == c.placeholder) {
                        w_.error(*src, "credential source ('" + s->ref +
                                           "') holds the placeholder itself, not a secret");
                    }
                    c.source = std::move(*s);
                }
            } else {
                w_.error(m->mark, "credential needs a 'source' ({env: NAME} or {file: PATH})");
            }
            if (auto* h = m->get("hosts")) {
                w_.seq(*h, "hosts", [&](const YAML::Node& x) {
                    if (auto s = host_pattern(x, "credential hosts")) {
                        c.hosts.push_back(*s);
                    }
                });
            }
            if (c.hosts.empty()) {
                w_.error(m->get("hosts") ? m->get("hosts")->Mark() : m->mark,
                         "credential needs 'hosts' (where the secret may be sent)");
            }
            if (std::find(c.hosts.begin(), c.hosts.end(), "*") != c.hosts.end()) {
                w_.error(*m->get("hosts"),
                         "credential hosts must name the service, not '*' (every host)");
            }
            if (auto* p = m->get("ports")) {
                w_.seq(*p, "ports", [&](const YAML::Node& x) {
                    if (auto v = port(x, "credential ports")) {
                        c.ports.push_back(*v);
                    }
                });
            }
            if (auto* pp = m->get("path_prefix")) {
                if (auto s = w_.str(*pp, "credential path_prefix")) {
                    if (!s->starts_with('/')) {
                        w_.error(*pp, "credential path_prefix must start with '/'");
                    }
                    c.path_prefix = *s;
                }
            }
            auto* hd = m->get("header");
            auto* q = m->get("query");
            if ((hd != nullptr) == (q != nullptr)) {
                w_.error(m->mark, "credential needs exactly one of 'header' or 'query'");
            }
            if (hd) {
                if (auto hm = w_.map(*hd, "credential header", {"name", "value"})) {
                    if (auto* x = hm->get("name")) {
                        if (auto s = w_.str(*x, "header name")) {
                            c.header_name = *s;
                            if (!is_token(*s)) {
                                w_.error(*x, "credential header name '" + *s +
                                                 "' is not a field name (RFC 9110 section 5.1)");
                            } else if (is_reserved_field(*s)) {
                                w_.error(*x, "credential header '" + *s +
                                                 "' is a framing or hop-by-hop field and cannot "
                                                 "carry a secret");
                            }
                        }
                    } else {
                        w_.error(hm->mark, "credential header needs a 'name'");
                    }
                    if (auto* x = hm->get("value")) {
                        if (auto s = w_.str(*x, "header value")) {
                            if (s->find("{secret}") == std::string::npos) {
                                w_.error(*x, "credential header value must contain '{secret}'");
                            }
                            if (std::any_of(s->begin(), s->end(), is_control)) {
                                w_.error(*x, "credential header value contains control characters");
                            }
                            c.header_value_template = *s;
                        }
                    } else {
                        c.header_value_template = "{secret}";
                    }
                }
            }
            if (q) {
                if (auto qm = w_.map(*q, "credential query", {"name"})) {
                    if (auto* x = qm->get("name")) {
                        if (auto s = w_.str(*x, "query name")) {
                            c.query_name = *s;
                        }
                    } else {
                        w_.error(qm->mark, "credential query needs a 'name'");
                    }
                }
            }
            if (auto* ids = m->get("identities")) {
                w_.seq(*ids, "identities", [&](const YAML::Node& x) {
                    if (auto s = w_.str(x, "credential identity")) {
                        c.identities.push_back(*s);
                        refs_.push_back({*s, x.Mark(), "credential identity"});
                    }
                });
            }
            if (c.ports.empty() && !m->get("ports")) {
                c.ports.push_back(443); // a secret goes over TLS unless a port says otherwise
            }
            credential_names_.insert(c.name);
            s_.credentials.push_back(std::move(c));
        });
        // One placeholder inside another would make the longer one ambiguous.
        for (const auto& a : s_.credentials) {
            for (const auto& b : s_.credentials) {
                if (&a != &b && !a.placeholder.empty() && a.placeholder != b.placeholder &&
                    b.placeholder.find(a.placeholder) != std::string::npos) {
                    w_.error(n, "placeholder '" + a.placeholder + "' (credential '" + a.name +
                                    "') is part of placeholder '" + b.placeholder +
                                    "' (credential '" + b.name + "')");
                }
            }
        }
    }

    static bool is_control(char ch) {
        auto u = static_cast<unsigned char>(ch);
        return u < 0x20 || u == 0x7f;
    }

    // token = 1*tchar (RFC 9110 section 5.6.2)
    static bool is_token(std::string_view t) {
        static constexpr std::string_view extra = "!#$%&'*+-.^_`|~";
        return !t.empty() && std::all_of(t.begin(), t.end(), [](char ch) {
            return std::isalnum(static_cast<unsigned char>(ch)) ||
                   extra.find(ch) != std::string_view::npos;
        });
    }

    static bool is_reserved_field(std::string_view name) {
        static constexpr std::string_view reserved[] = {"host",
                                                        "content-length",
                                                        "transfer-encoding",
                                                        "connection",
                                                        "keep-alive",
                                                        "proxy-connection",
                                                        "proxy-authorization",
                                                        "proxy-authenticate",
                                                        "te",
                                                        "trailer",
                                                        "upgrade",
                                                        "expect"};
        std::string l = lower(std::string(name));
        return std::find(std::begin(reserved), std::end(reserved), l) != std::end(reserved);
    }

    void audit(const YAML::Node& n) {
        auto m = w_.map(n, "audit", {"path", "fsync", "max_size"}, true);
        if (!m) {
            return;
        }
        if (auto* p = m->get("path")) {
            if (auto v = path(*p, "audit.path")) {
                s_.audit_path = *v;
            }
        }
        if (auto* f = m->get("fsync")) {
            if (auto s = w_.str(*f, "audit.fsync")) {
                if (*s == "always") {
                    s_.audit_fsync_always = true;
                } else if (auto d = parse_duration(*s); d && d->count() > 0) {
                    s_.audit_fsync_always = false;
                    s_.audit_fsync_interval = *d;
                } else {
                    w_.error(*f, "invalid audit.fsync " + walker::shown(*f) +
                                     " (expected 'always' or an interval such as 1s)");
                }
            }
        }
        if (auto* ms = m->get("max_size")) {
            if (auto v = w_.size(*ms, "audit.max_size")) {
                s_.audit_max_size = *v;
            }
        }
    }

    void cross_checks() {
        for (const auto& r : refs_) {
            if (!identity_names_.contains(r.name)) {
                w_.error(r.mark, r.what + " '" + r.name + "' is not a defined identity");
            }
        }
        for (const auto& r : credential_refs_) {
            if (!credential_names_.contains(r.name)) {
                w_.error(r.mark, r.what + " '" + r.name + "' is not a defined credential");
            }
        }
        const auto builtin = builtin_ruleset();
        if (!builtin) {
            for (const auto& d : builtin.error()) {
                w_.diags().push_back(d);
            }
            return; // rule references cannot be checked without rules; the errors above say why
        }
        s_.rules = *builtin;
        if (!rule_files_.empty() && !user_rules()) {
            return;
        }
        std::set<std::string, std::less<>> ids;
        std::set<std::string, std::less<>> categories;
        for (const auto& r : s_.rules->rules()) {
            ids.insert(r.id);
            categories.insert(r.category);
        }
        for (const auto& r : detector_refs_) {
            if (r.name != "all" && !ids.contains(r.name) && !categories.contains(r.name)) {
                w_.error(r.mark, "unknown detector '" + r.name +
                                     "' (expected 'all', a rule id or a category)");
            }
        }
        for (const auto& r : rule_refs_) {
            if (!ids.contains(r.name)) {
                w_.error(r.mark, r.what + " '" + r.name + "' is not a known rule id");
            }
        }
    }

    // Built-in rules plus every `rule_files` entry, compiled into one ruleset. Problems in
    // a rule file carry that file's line and column; compile problems point at the entry.
    // Rule files that add no rules leave the shared built-in ruleset in place.
    bool user_rules() {
        auto all = builtin_rules();
        if (!all) {
            return false; // already reported through builtin_ruleset()
        }
        const std::size_t builtin_count = all->size();
        bool ok = true;
        std::vector<rule_source> sources; // where each user rule's pattern is
        for (const auto& f : rule_files_) {
            auto loaded = load_rules_file(f.path, &sources);
            if (!loaded) {
                for (auto& d : loaded.error()) {
                    w_.diags().push_back(std::move(d));
                }
                ok = false;
                continue;
            }
            for (auto& r : *loaded) {
                all->push_back(std::move(r));
            }
        }
        if (!ok) {
            return false;
        }
        if (all->size() == builtin_count) {
            return true;
        }
        auto compiled = detectors::ruleset::compile(std::move(*all));
        if (!compiled) {
            // A bad pattern in a user rule is reported at its FILE:LINE:COL; anything else
            // at the rule_files entry.
            const YAML::Mark& m = rule_files_.front().mark;
            const diagnostic entry{w_.file(), m.line >= 0 ? m.line + 1 : 0,
                                   m.line >= 0 ? m.column + 1 : 0, "rule_files: "};
            for (auto& d : place_rule_errors(compiled.error(), sources, entry)) {
                w_.diags().push_back(std::move(d));
            }
            return false;
        }
        s_.rules = std::move(*compiled);
        return true;
    }

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

fs::path current_dir() {
    std::error_code ec;
    auto p = fs::current_path(ec);
    return ec ? fs::path("/") : p;
}

} // namespace

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

std::optional<std::size_t> parse_size(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
        ++i;
    }
    auto n = parse_u64(text.substr(0, i));
    if (!n) {
        return std::nullopt;
    }
    const auto unit = text.substr(i);
    std::uint64_t mult = 0;
    if (unit.empty() || unit == "B") {
        mult = 1;
    } else if (unit == "KiB") {
        mult = 1ull << 10;
    } else if (unit == "MiB") {
        mult = 1ull << 20;
    } else if (unit == "GiB") {
        mult = 1ull << 30;
    } else if (unit == "TiB") {
        mult = 1ull << 40;
    } else if (unit == "KB" || unit == "kB") {
        mult = 1000;
    } else if (unit == "MB") {
        mult = 1000ull * 1000;
    } else if (unit == "GB") {
        mult = 1000ull * 1000 * 1000;
    } else {
        return std::nullopt;
    }
    if (*n > std::numeric_limits<std::size_t>::max() / mult) {
        return std::nullopt;
    }
    return static_cast<std::size_t>(*n * mult);
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
        ++i;
    }
    auto n = parse_u64(text.substr(0, i));
    if (!n) {
        return std::nullopt;
    }
    const auto unit = text.substr(i);
    std::uint64_t mult = 0;
    if (unit == "ms") {
        mult = 1;
    } else if (unit == "s") {
        mult = 1000;
    } else if (unit == "m") {
        mult = 60'000;
    } else if (unit == "h") {
        mult = 3'600'000;
    } else if (unit.empty() && *n == 0) {
        return std::chrono::milliseconds{0};
    } else {
        return std::nullopt;
    }
    constexpr auto max =
        static_cast<std::uint64_t>(std::numeric_limits<std::chrono::milliseconds::rep>::max());
    if (*n > max / mult) {
        return std::nullopt;
    }
    return std::chrono::milliseconds{static_cast<std::chrono::milliseconds::rep>(*n * mult)};
}

} // namespace sluice::config
