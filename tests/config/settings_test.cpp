// Loads real YAML through sluice_config (yaml-cpp, the compiled built-in rules) and checks
// the typed product and the FILE:LINE:COL diagnostics.
#include "sluice/config/settings.hpp"

#include "sluice/config/rules_loader.hpp"

#include <algorithm>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <openssl/sha.h>
#include <string>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace sluice;
using namespace sluice::config;

namespace {

// CONTRACT.md "Configuration (YAML)" verbatim, except the token_sha256 placeholder, which
// the contract spells "<hex sha256 of the token>" and which is (rightly) not valid hex.
std::string contract_example(const std::string& token_sha256) {
    return R"(version: 1
data_dir: /var/lib/sluice
listeners:
  - address: 127.0.0.1:3128
    identity: patcher            # optional: every flow on this listener is this identity
    tls: {cert: proxy.pem, key: proxy.key, client_ca: clients-ca.pem}   # optional HTTPS proxy + mTLS
ca: {cert: ca.pem, key: ca.key}  # relative paths are under data_dir
upstream:
  ca_file: /etc/ssl/certs/ca-certificates.crt   # trust anchors for upstream TLS (default: system store)
  connect_timeout: 10s
identities:
  - name: patcher
    proxy_auth: {username: patcher, token_sha256: ")" +
           token_sha256 + R"("}
    source_cidrs: [10.1.0.0/16]
    client_cert: {uri_san: "spiffe://cluster.local/ns/crs/sa/patcher"}
policies:
  - identity: patcher            # or "*" for every resolved identity
    rules:                       # first match wins; no match = deny
      - hosts: ["api.openai.com", "*.anthropic.com"]
        ports: [443]
        methods: [POST]
        path_prefix: /v1/
        action: allow            # allow | deny | supervise
        inspect: true            # TLS interception + DLP (default); false = opaque tunnel, audited as uninspected
    dlp:
      detectors: [all]           # rule ids or categories
      on_finding: deny           # deny | supervise | log
      max_body: 16MiB            # larger bodies: deny (413) unless streamed scanning covers them
      ignore:                    # known-harmless values, by rule and exact value or fingerprint
        - {rule: aws-access-key-id, value: AKIAIOSFODNN7EXAMPLE}
    limits: {requests_per_minute: 600, upload_per_minute: 64MiB, max_connections: 256}
    private_destinations: [127.0.0.1/32]   # SSRF exceptions; everything private is denied otherwise
protected_values:                # exact values caught in any encoding (e.g. the agent's own keys)
  - env: OPENAI_API_KEY
credentials:                     # brokered secrets: the agent sends a placeholder, sluice injects the value
  - name: openai
    placeholder: "sluice:openai"
    source: {env: OPENAI_API_KEY}          # or {file: /run/secrets/openai}
    hosts: ["api.openai.com"]
    ports: [443]
    header: {name: Authorization, value: "Bearer {secret}"}   # or query: {name: key}
    identities: [patcher]
supervise: {timeout: 120s}
admin: {address: 127.0.0.1:9901, token_file: admin.token}
metrics: {address: 127.0.0.1:9902}
audit: {path: audit.jsonl, fsync: always}
logging: {level: info, format: json}
)";
}

std::string sha256_hex(std::string_view s) {
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), md);
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : md) {
        out += hex[c >> 4];
        out += hex[c & 15];
    }
    return out;
}

// A minimal valid head that tests append to.
constexpr std::string_view minimal = "version: 1\n"
                                     "data_dir: /srv/sluice\n"
                                     "listeners:\n"
                                     "  - address: 127.0.0.1:0\n";

diagnostics errors_of(std::string_view yaml) {
    auto r = load_string(yaml, "t.yaml");
    EXPECT_FALSE(r.has_value()) << "expected errors for:\n" << yaml;
    return r ? diagnostics{} : r.error();
}

std::string dump(const diagnostics& d) {
    std::string s;
    for (const auto& x : d) {
        s += x.str() + "\n";
    }
    return s;
}

// The one diagnostic whose message contains `needle`, at the expected position.
void expect_error(const diagnostics& d, std::string_view needle, int line, int col) {
    int hits = 0;
    for (const auto& x : d) {
        if (x.message.find(needle) != std::string::npos) {
            ++hits;
            EXPECT_EQ(x.file, "t.yaml");
            EXPECT_EQ(x.line, line) << x.str();
            EXPECT_EQ(x.column, col) << x.str();
        }
    }
    EXPECT_EQ(hits, 1) << "looking for '" << needle << "' in:\n" << dump(d);
}

} // namespace

TEST(settings, contract_example_loads) {
    const std::string token_hash = sha256_hex("s3cret-proxy-token");
    ::setenv("OPENAI_API_KEY", "sk-proj-contract-example-value", 1);
    auto r = load_string(contract_example(token_hash), "contract.yaml");
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    const settings& s = *r;
    EXPECT_EQ(s.data_dir, fs::path("/var/lib/sluice"));
    ASSERT_EQ(s.listeners.size(), 1u);
    EXPECT_EQ(s.listeners[0].host, "127.0.0.1");
    EXPECT_EQ(s.listeners[0].port, 3128);
    EXPECT_EQ(s.listeners[0].identity, "patcher");
    ASSERT_TRUE(s.listeners[0].tls.has_value());
    EXPECT_EQ(s.listeners[0].tls->cert, fs::path("/var/lib/sluice/proxy.pem"));
    EXPECT_EQ(s.listeners[0].tls->client_ca, fs::path("/var/lib/sluice/clients-ca.pem"));
    EXPECT_EQ(s.ca_cert, fs::path("/var/lib/sluice/ca.pem"));
    EXPECT_EQ(s.ca_key, fs::path("/var/lib/sluice/ca.key"));
    EXPECT_EQ(s.upstream_ca_file, fs::path("/etc/ssl/certs/ca-certificates.crt"));
    EXPECT_EQ(s.connect_timeout, std::chrono::seconds(10));

    ASSERT_EQ(s.identities.size(), 1u);
    const auto& id = s.identities[0];
    EXPECT_EQ(id.name, "patcher");
    ASSERT_EQ(id.source_cidrs.size(), 1u);
    EXPECT_TRUE(id.source_cidrs[0].contains(*dlp::ip_address::parse("10.1.200.3")));
    EXPECT_FALSE(id.source_cidrs[0].contains(*dlp::ip_address::parse("10.2.0.1")));
    ASSERT_TRUE(id.proxy_auth.has_value());
    EXPECT_EQ(id.proxy_auth->username, "patcher");
    EXPECT_EQ(id.proxy_auth->token_sha256, token_hash);
    ASSERT_TRUE(id.client_cert.has_value());
    EXPECT_EQ(id.client_cert->uri_san, "spiffe://cluster.local/ns/crs/sa/patcher");

    ASSERT_EQ(s.policies.size(), 1u);
    const auto& p = s.policies[0];
    EXPECT_EQ(p.identity, "patcher");
    ASSERT_EQ(p.rules.size(), 1u);
    EXPECT_EQ(p.rules[0].hosts, (std::vector<std::string>{"api.openai.com", "*.anthropic.com"}));
    EXPECT_EQ(p.rules[0].ports, (std::vector<std::uint16_t>{443}));
    EXPECT_EQ(p.rules[0].methods, (std::vector<std::string>{"POST"}));
    EXPECT_EQ(p.rules[0].path_prefix, "/v1/");
    EXPECT_EQ(p.rules[0].act, dlp::action::allow);
    EXPECT_TRUE(p.rules[0].inspect);
    EXPECT_EQ(p.dlp.detectors, (std::vector<std::string>{"all"}));
    EXPECT_EQ(p.dlp.on_finding, dlp::finding_action::deny);
    EXPECT_EQ(p.dlp.max_body, 16u << 20);
    ASSERT_EQ(p.dlp.ignore.size(), 1u);
    EXPECT_EQ(p.dlp.ignore[0].rule, "aws-access-key-id");
    EXPECT_EQ(p.dlp.ignore[0].value, "AKIAIOSFODNN7EXAMPLE");
    EXPECT_EQ(p.limits.requests_per_minute, 600u);
    EXPECT_EQ(p.limits.upload_per_minute, 64u << 20);
    EXPECT_EQ(p.limits.max_connections, 256u);
    ASSERT_EQ(p.private_destinations.size(), 1u);
    EXPECT_TRUE(p.private_destinations[0].contains(*dlp::ip_address::parse("127.0.0.1")));
    EXPECT_FALSE(p.private_destinations[0].contains(*dlp::ip_address::parse("127.0.0.2")));

    ASSERT_EQ(s.protected_values.size(), 1u);
    EXPECT_EQ(s.protected_values[0].from, secret_source::kind::env);
    EXPECT_EQ(s.protected_values[0].ref, "OPENAI_API_KEY");
    EXPECT_EQ(s.protected_values[0].value, "sk-proj-contract-example-value");
    EXPECT_EQ(s.credentials[0].ports, (std::vector<std::uint16_t>{443}));
    ASSERT_EQ(s.credentials.size(), 1u);
    EXPECT_EQ(s.credentials[0].placeholder, "sluice:openai");
    EXPECT_EQ(s.credentials[0].header_name, "Authorization");
    EXPECT_EQ(s.credentials[0].header_value_template, "Bearer {secret}");
    EXPECT_EQ(s.credentials[0].identities, (std::vector<std::string>{"patcher"}));
    EXPECT_EQ(s.supervise_timeout, std::chrono::seconds(120));
    EXPECT_EQ(s.admin_address, "127.0.0.1:9901");
    EXPECT_EQ(s.admin_token_file, fs::path("/var/lib/sluice/admin.token"));
    EXPECT_EQ(s.metrics_address, "127.0.0.1:9902");
    EXPECT_EQ(s.audit_path, fs::path("/var/lib/sluice/audit.jsonl"));
    EXPECT_TRUE(s.audit_fsync_always);
    EXPECT_EQ(s.log_level, "info");
    EXPECT_EQ(s.log_format, "json");
    ASSERT_NE(s.rules, nullptr);
    EXPECT_FALSE(s.rules->rules().empty());
}

TEST(settings, contract_placeholder_token_hash_is_rejected_without_echo) {
    auto d = errors_of(contract_example("<hex sha256 of the token>"));
    expect_error(d, "token_sha256 must be 64 hex digits", 13, 51);
    for (const auto& x : d) {
        EXPECT_EQ(x.message.find("<hex"), std::string::npos) << x.str();
    }
}

TEST(settings, embedded_default_loads) {
    load_options opts;
    opts.data_dir_override = "/tmp/sluice-test-data";
    auto r = load_string(embedded_default_yaml(), "<embedded>", opts);
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    const settings& s = *r;
    EXPECT_EQ(s.data_dir, fs::path("/tmp/sluice-test-data"));
    ASSERT_EQ(s.listeners.size(), 1u);
    EXPECT_EQ(s.listeners[0].host, "127.0.0.1");
    EXPECT_EQ(s.listeners[0].port, 3128);
    EXPECT_FALSE(s.listeners[0].identity.has_value());
    ASSERT_EQ(s.identities.size(), 1u);
    EXPECT_EQ(s.identities[0].name, "local");
    // Loopback sources of both families resolve to `local`; others do not.
    for (const char* src : {"127.0.0.1", "127.9.9.9", "::1"}) {
        EXPECT_EQ(dlp::resolve_identity(s.identities, std::nullopt, *dlp::ip_address::parse(src)),
                  "local")
            << src;
    }
    EXPECT_EQ(
        dlp::resolve_identity(s.identities, std::nullopt, *dlp::ip_address::parse("10.0.0.1")),
        std::nullopt);
    const dlp::policy* p = dlp::policy_for(s.policies, "local");
    ASSERT_NE(p, nullptr);
    const auto* rule = dlp::match_rule(*p, "example.com", 443, "POST", "/", false);
    ASSERT_NE(rule, nullptr);
    EXPECT_EQ(rule->act, dlp::action::allow);
    EXPECT_TRUE(rule->inspect);
    EXPECT_EQ(p->dlp.on_finding, dlp::finding_action::deny);
    EXPECT_EQ(p->dlp.detectors, (std::vector<std::string>{"all"}));
    EXPECT_TRUE(p->private_destinations.empty()); // private destinations stay denied
    EXPECT_EQ(s.admin_address, "127.0.0.1:9901");
    EXPECT_EQ(s.metrics_address, "127.0.0.1:9902");
    EXPECT_EQ(s.audit_path, fs::path("/tmp/sluice-test-data/audit.jsonl"));
    EXPECT_EQ(s.ca_cert, fs::path("/tmp/sluice-test-data/ca.pem"));
    EXPECT_EQ(s.ca_key, fs::path("/tmp/sluice-test-data/ca.key"));
    ASSERT_NE(s.rules, nullptr);
}

TEST(settings, default_data_dir_follows_xdg) {
    const char* old = std::getenv("XDG_DATA_HOME");
    std::string saved = old ? old : "";
    const char* old_home = std::getenv("HOME");
    std::string saved_home = old_home ? old_home : "";
    ::setenv("XDG_DATA_HOME", "/xdg/data", 1);
    EXPECT_EQ(default_data_dir(), fs::path("/xdg/data/sluice"));
    auto r = load_string(embedded_default_yaml(), "<embedded>");
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    EXPECT_EQ(r->data_dir, fs::path("/xdg/data/sluice"));
    EXPECT_EQ(r->audit_path, fs::path("/xdg/data/sluice/audit.jsonl"));
    ::setenv("XDG_DATA_HOME", "relative/ignored", 1); // XDG spec: relative values are invalid
    ::setenv("HOME", "/home/tester", 1);
    EXPECT_EQ(default_data_dir(), fs::path("/home/tester/.local/share/sluice"));
    if (old) {
        ::setenv("XDG_DATA_HOME", saved.c_str(), 1);
    } else {
        ::unsetenv("XDG_DATA_HOME");
    }
    if (old_home) {
        ::setenv("HOME", saved_home.c_str(), 1);
    } else {
        ::unsetenv("HOME");
    }
}

TEST(settings, data_dir_override_beats_file_and_paths_resolve_under_it) {
    std::string y(minimal);
    y += "ca: {cert: certs/ca.pem, key: /abs/ca.key}\n"
         "audit: {path: logs/audit.jsonl, fsync: 1s}\n"
         "upstream: {ca_file: trust.pem, connect_timeout: 500ms}\n";
    auto r = load_string(y, "t.yaml");
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    EXPECT_EQ(r->data_dir, fs::path("/srv/sluice"));
    EXPECT_EQ(r->ca_cert, fs::path("/srv/sluice/certs/ca.pem"));
    EXPECT_EQ(r->ca_key, fs::path("/abs/ca.key"));
    EXPECT_EQ(r->audit_path, fs::path("/srv/sluice/logs/audit.jsonl"));
    EXPECT_FALSE(r->audit_fsync_always);
    EXPECT_EQ(r->audit_fsync_interval, std::chrono::seconds(1));
    EXPECT_EQ(r->upstream_ca_file, fs::path("/srv/sluice/trust.pem"));
    EXPECT_EQ(r->connect_timeout, std::chrono::milliseconds(500));

    load_options opts;
    opts.data_dir_override = "/override";
    auto o = load_string(y, "t.yaml", opts);
    ASSERT_TRUE(o.has_value()) << dump(o.error());
    EXPECT_EQ(o->data_dir, fs::path("/override"));
    EXPECT_EQ(o->ca_cert, fs::path("/override/certs/ca.pem"));
    EXPECT_EQ(o->audit_path, fs::path("/override/logs/audit.jsonl"));
}

TEST(settings, load_file_resolves_relative_data_dir_against_the_file) {
    const fs::path dir =
        fs::temp_directory_path() / ("sluice-config-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path file = dir / "sluice.yaml";
    {
        std::ofstream out(file);
        out << "version: 1\ndata_dir: state\nlisteners: [{address: '[::1]:8080'}]\n";
    }
    auto r = load_file(file);
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    EXPECT_EQ(r->data_dir, dir / "state");
    EXPECT_EQ(r->ca_cert, dir / "state" / "ca.pem");
    ASSERT_EQ(r->listeners.size(), 1u);
    EXPECT_EQ(r->listeners[0].host, "::1");
    EXPECT_EQ(r->listeners[0].port, 8080);

    {
        std::ofstream out(file);
        out << "version: 1\nlisteners: []\nbogus: 1\n";
    }
    auto bad = load_file(file);
    ASSERT_FALSE(bad.has_value());
    ASSERT_EQ(bad.error().size(), 2u) << dump(bad.error());
    EXPECT_EQ(bad.error()[0].str(), file.string() + ":2:1: at least one listener is required");
    EXPECT_EQ(bad.error()[1].line, 3);
    EXPECT_EQ(bad.error()[1].file, file.string());

    auto missing = load_file(dir / "nope.yaml");
    ASSERT_FALSE(missing.has_value());
    ASSERT_EQ(missing.error().size(), 1u);
    EXPECT_NE(missing.error()[0].str().find("nope.yaml: cannot read configuration"),
              std::string::npos)
        << missing.error()[0].str();
    fs::remove_all(dir);
}

TEST(settings, listener_address_forms) {
    auto one = [](std::string_view addr) {
        std::string y = "version: 1\nlisteners:\n  - address: \"" + std::string(addr) + "\"\n";
        return load_string(y, "t.yaml");
    };
    auto v4 = one("10.0.0.1:3128");
    ASSERT_TRUE(v4.has_value());
    EXPECT_EQ(v4->listeners[0].host, "10.0.0.1");
    auto v6 = one("[2001:db8::1]:443");
    ASSERT_TRUE(v6.has_value());
    EXPECT_EQ(v6->listeners[0].host, "2001:db8::1");
    EXPECT_EQ(v6->listeners[0].port, 443);
    auto lh = one("localhost:0");
    ASSERT_TRUE(lh.has_value());
    EXPECT_EQ(lh->listeners[0].host, "localhost");
    EXPECT_EQ(lh->listeners[0].port, 0);
    for (const char* bad :
         {"127.0.0.1", "::1:80", "[::1]80", "example.com:80", "127.0.0.1:65536", "127.0.0.1:-1",
          "[127.0.0.1]:80", "127.0.0.1:", ":80", "[fe80::1%eth0]:80"}) {
        auto r = one(bad);
        ASSERT_FALSE(r.has_value()) << bad;
        // The address scalar is on line 3 at column 14 ("  - address: " is 13 bytes).
        expect_error(r.error(), "invalid listener address", 3, 14);
    }
}

TEST(settings, unknown_keys_are_errors_at_the_key) {
    std::string y(minimal);
    y += "policies:\n"
         "  - identity: \"*\"\n"
         "    rules:\n"
         "      - hosts: [\"*\"]\n"
         "        action: allow\n"
         "        inspekt: false\n"
         "listners: []\n";
    auto d = errors_of(y);
    ASSERT_EQ(d.size(), 2u) << dump(d);
    expect_error(d, "unknown key 'inspekt' in a policy rule", 10, 9);
    expect_error(d, "unknown key 'listners' in the configuration", 11, 1);
}

TEST(settings, every_kind_of_error_with_its_position) {
    // Line numbers are 1-based, columns 1-based at the offending scalar or key.
    const std::string y = "version: 2\n"                                   // 1
                          "listeners:\n"                                   // 2
                          "  - address: 127.0.0.1:3128\n"                  // 3
                          "    identity: ghost\n"                          // 4
                          "identities:\n"                                  // 5
                          "  - name: a\n"                                  // 6
                          "    source_cidrs: [10.0.0.0/33, 10.1.0.0/16]\n" // 7
                          "  - name: a\n"                                  // 8
                          "policies:\n"                                    // 9
                          "  - identity: nobody\n"                         // 10
                          "    rules:\n"                                   // 11
                          "      - hosts: [\"ex*ample.com\"]\n"            // 12
                          "        ports: [0, 443, 70000]\n"               // 13
                          "        action: permit\n"                       // 14
                          "    dlp:\n"                                     // 15
                          "      detectors: [vcs, no-such-rule]\n"         // 16
                          "      on_finding: shrug\n"                      // 17
                          "      max_body: 16 parsecs\n"                   // 18
                          "upstream: {connect_timeout: soon}\n"            // 19
                          "audit: {fsync: sometimes}\n"                    // 20
                          "logging: {level: loud}\n";                      // 21
    auto d = errors_of(y);
    expect_error(d, "unsupported version 2", 1, 10);
    expect_error(d, "listener identity 'ghost' is not a defined identity", 4, 15);
    expect_error(d, "invalid CIDR '10.0.0.0/33'", 7, 20);
    expect_error(d, "duplicate identity name 'a'", 8, 11);
    expect_error(d, "policy identity 'nobody' is not a defined identity", 10, 15);
    expect_error(d, "invalid host pattern 'ex*ample.com'", 12, 17);
    expect_error(d, "port '0'", 13, 17);
    expect_error(d, "port '70000'", 13, 25);
    expect_error(d, "invalid action 'permit'", 14, 17);
    expect_error(d, "unknown detector 'no-such-rule'", 16, 24);
    expect_error(d, "invalid on_finding 'shrug'", 17, 19);
    expect_error(d, "invalid size '16 parsecs'", 18, 17);
    expect_error(d, "invalid duration 'soon'", 19, 29);
    expect_error(d, "invalid audit.fsync 'sometimes'", 20, 16);
    expect_error(d, "invalid logging.level 'loud'", 21, 18);
    EXPECT_EQ(d.size(), 15u) << dump(d);
    // Sorted by position, and every line is FILE:LINE:COL: message.
    for (std::size_t i = 1; i < d.size(); ++i) {
        EXPECT_LE(std::tie(d[i - 1].line, d[i - 1].column), std::tie(d[i].line, d[i].column));
    }
    EXPECT_EQ(d.front().str(), "t.yaml:1:10: unsupported version 2 (this sluice reads version 1)");
}

TEST(settings, yaml_syntax_error_is_one_diagnostic_with_its_mark) {
    auto d = errors_of("version: 1\nlisteners:\n  - address: [127.0.0.1:3128\n");
    ASSERT_EQ(d.size(), 1u) << dump(d);
    EXPECT_EQ(d[0].file, "t.yaml");
    EXPECT_GE(d[0].line, 3);
    EXPECT_GT(d[0].column, 0);

    auto tabs = errors_of("version: 1\nlisteners:\n\t- address: 127.0.0.1:1\n");
    ASSERT_EQ(tabs.size(), 1u) << dump(tabs);
    EXPECT_EQ(tabs[0].line, 3);
}

TEST(settings, structural_errors) {
    auto empty = errors_of("");
    ASSERT_EQ(empty.size(), 1u);
    EXPECT_EQ(empty[0].str(),
              "t.yaml:1:1: empty configuration (expected a mapping with 'version: 1')");

    auto scalar = errors_of("just text\n");
    expect_error(scalar, "expected a mapping for the configuration", 1, 1);

    auto no_version = errors_of("listeners: [{address: 127.0.0.1:1}]\n");
    expect_error(no_version, "missing required key 'version'", 1, 1);

    auto dup = errors_of(std::string(minimal) + "version: 1\n");
    expect_error(dup, "duplicate key 'version'", 5, 1);

    auto two_docs = errors_of(std::string(minimal) + "---\nversion: 1\n");
    expect_error(two_docs, "only one YAML document", 5, 1); // at the "---"

    auto not_list = errors_of("version: 1\nlisteners: {address: 127.0.0.1:1}\n");
    expect_error(not_list, "expected a list for listeners", 2, 12);
    expect_error(not_list, "at least one listener is required", 2, 1);

    auto missing_action =
        errors_of(std::string(minimal) + "policies:\n  - identity: \"*\"\n    rules:\n"
                                         "      - hosts: [a.com]\n");
    expect_error(missing_action, "policy rule needs an 'action'", 8, 9);

    auto opaque =
        errors_of(std::string(minimal) +
                  "policies:\n  - identity: \"*\"\n    rules:\n"
                  "      - {hosts: [a.com], methods: [GET], action: allow, inspect: false}\n");
    expect_error(opaque, "inspect: false cannot be combined", 8, 66);

    auto dup_policy =
        errors_of(std::string(minimal) + "policies:\n  - identity: \"*\"\n  - identity: \"*\"\n");
    expect_error(dup_policy, "a policy for identity '*' is already defined", 7, 15);

    auto ignore_both = errors_of(std::string(minimal) +
                                 "policies:\n  - identity: \"*\"\n    dlp:\n      ignore:\n"
                                 "        - {rule: nope, value: x, fingerprint: 'sha256:zz'}\n");
    expect_error(ignore_both, "exactly one of 'value' or 'fingerprint'", 9, 11);
    expect_error(ignore_both, "ignore rule 'nope' is not a known rule id", 9, 18);
    expect_error(ignore_both, "ignore fingerprint must be", 9, 47);
}

TEST(settings, environment_expansion) {
    ::setenv("SLUICE_TEST_PORT", "4242", 1);
    ::setenv("SLUICE_TEST_DIR", "/from/env", 1);
    ::unsetenv("SLUICE_TEST_UNSET");
    auto r = load_string("version: 1\n"
                         "data_dir: ${SLUICE_TEST_DIR}\n"
                         "listeners: [{address: \"127.0.0.1:${SLUICE_TEST_PORT}\"}]\n"
                         "audit: {path: \"$${literal}/a.jsonl\"}\n",
                         "t.yaml");
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    EXPECT_EQ(r->data_dir, fs::path("/from/env"));
    EXPECT_EQ(r->listeners[0].port, 4242);
    EXPECT_EQ(r->audit_path, fs::path("/from/env/${literal}/a.jsonl"));

    auto d = errors_of("version: 1\n"
                       "listeners:\n"
                       "  - address: 127.0.0.1:${SLUICE_TEST_UNSET}\n"
                       "admin: {token_file: \"${SLUICE_TEST_UNSET\"}\n"
                       "metrics: {address: \"${9BAD}\"}\n");
    expect_error(d, "environment variable 'SLUICE_TEST_UNSET' is not set", 3, 14);
    expect_error(d, "unterminated '${'", 4, 21);
    expect_error(d, "invalid environment variable name", 5, 20);
}

TEST(settings, env_values_never_echoed_in_errors) {
    ::setenv("SLUICE_TEST_SECRETISH", "ghp_notreallyasecretbutdontprintme", 1);
    auto d = errors_of("version: 1\nlisteners: [{address: \"${SLUICE_TEST_SECRETISH}\"}]\n");
    ASSERT_EQ(d.size(), 2u) << dump(d);
    for (const auto& x : d) {
        EXPECT_EQ(x.message.find("notreally"), std::string::npos) << x.str();
    }
}

TEST(settings, multiple_errors_reported_at_once) {
    auto d = errors_of("version: 1\n"
                       "listeners:\n"
                       "  - address: nowhere\n"
                       "  - address: 127.0.0.1:1\n"
                       "    tls: {cert: a.pem}\n"
                       "identities:\n"
                       "  - name: x\n"
                       "    source_cidrs: [bogus]\n"
                       "    proxy_auth: {username: u}\n"
                       "    client_cert: {}\n");
    EXPECT_EQ(d.size(), 5u) << dump(d);
    expect_error(d, "invalid listener address 'nowhere'", 3, 14);
    expect_error(d, "listener tls needs both", 5, 10);
    expect_error(d, "invalid CIDR 'bogus'", 8, 20);
    expect_error(d, "proxy_auth needs 'token_sha256'", 9, 17);
    expect_error(d, "client_cert needs 'uri_san' or 'subject_cn'", 10, 18);
}

TEST(settings, host_patterns_and_methods_are_normalised) {
    auto r =
        load_string(std::string(minimal) + "policies:\n  - identity: \"*\"\n    rules:\n"
                                           "      - hosts: [API.Example.COM., \"*.Example.org\", "
                                           "\"[::FFFF:127.0.0.1]\", 0x7f000001]\n"
                                           "        methods: [post, Get]\n        action: deny\n",
                    "t.yaml");
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    const auto& rule = r->policies[0].rules[0];
    // An IPv4-mapped IPv6 literal is the same destination as the IPv4 address.
    EXPECT_EQ(rule.hosts, (std::vector<std::string>{"api.example.com", "*.example.org", "127.0.0.1",
                                                    "127.0.0.1"}));
    EXPECT_EQ(rule.methods, (std::vector<std::string>{"POST", "GET"}));
    EXPECT_EQ(rule.act, dlp::action::deny);
}

TEST(settings, detectors_accept_rule_ids_categories_and_all) {
    auto r =
        load_string(std::string(minimal) + "policies:\n  - identity: \"*\"\n    dlp:\n"
                                           "      detectors: [github-pat-classic, vcs, all]\n"
                                           "      on_finding: supervise\n      max_body: 64KiB\n",
                    "t.yaml");
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    EXPECT_EQ(r->policies[0].dlp.detectors.size(), 3u);
    EXPECT_EQ(r->policies[0].dlp.on_finding, dlp::finding_action::supervise);
    EXPECT_EQ(r->policies[0].dlp.max_body, 64u * 1024);
}

TEST(settings, parse_size_table) {
    struct row {
        const char* text;
        std::optional<std::size_t> want;
    };
    const row rows[] = {
        {"0", 0},
        {"512", 512},
        {"512B", 512},
        {"64KiB", 64 * 1024},
        {"16MiB", 16u << 20},
        {"1GiB", 1u << 30},
        {"2TiB", 2ull << 40},
        {"10KB", 10'000},
        {"3MB", 3'000'000},
        {"1GB", 1'000'000'000},
        {"", std::nullopt},
        {"KiB", std::nullopt},
        {"-1", std::nullopt},
        {"1.5MiB", std::nullopt},
        {"16 MiB", std::nullopt},
        {"16mib", std::nullopt},
        {"16XB", std::nullopt},
        {"99999999999999999999", std::nullopt},
        {"17179869184GiB", std::nullopt}, // 2^34 GiB = 2^64 bytes: overflow
    };
    for (const auto& r : rows) {
        EXPECT_EQ(parse_size(r.text), r.want) << r.text;
    }
}

TEST(settings, parse_duration_table) {
    using ms = std::chrono::milliseconds;
    struct row {
        const char* text;
        std::optional<ms> want;
    };
    const row rows[] = {
        {"500ms", ms(500)},
        {"30s", ms(30'000)},
        {"5m", ms(300'000)},
        {"1h", ms(3'600'000)},
        {"0", ms(0)},
        {"0s", ms(0)},
        {"", std::nullopt},
        {"30", std::nullopt},
        {"1.5s", std::nullopt},
        {"s", std::nullopt},
        {"-5s", std::nullopt},
        {"5 s", std::nullopt},
        {"5d", std::nullopt},
        {"5S", std::nullopt},
        {"99999999999999999999h", std::nullopt},
        {"9223372036854775807h", std::nullopt},
    };
    for (const auto& r : rows) {
        EXPECT_EQ(parse_duration(r.text), r.want) << r.text;
    }
}

TEST(settings, diagnostic_format) {
    EXPECT_EQ((diagnostic{"f.yaml", 3, 7, "boom"}).str(), "f.yaml:3:7: boom");
    EXPECT_EQ((diagnostic{"f.yaml", 0, 0, "unreadable"}).str(), "f.yaml: unreadable");
}

namespace {

// A user rule file next to the config: its rules join the built-in ones, can be named in
// dlp.detectors, and its problems come back with that file's line and column.
TEST(settings, rule_files_add_user_rules_and_report_their_errors) {
    const fs::path dir =
        fs::temp_directory_path() / ("sluice-rule-files-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    {
        std::ofstream out(dir / "internal.yml");
        out << "rules:\n"
               "  - id: acme-internal-token\n"
               "    name: ACME internal token\n"
               "    category: generic\n"
               "    pattern: 'acme_tok_[0-9a-f]{32}'\n"
               "    confidence: 0.9\n"
               "    references: [https://wiki.acme.example/tokens]\n"
               "    examples: [acme_tok_0123456789abcdef0123456789abcdef]\n"
               "    negative_examples: [acme_tok_short]\n";
    }
    const fs::path file = dir / "sluice.yaml";
    {
        std::ofstream out(file);
        out << "version: 1\ndata_dir: state\nlisteners: [{address: 127.0.0.1:0}]\n"
               "rule_files: [internal.yml]\n"
               "identities: [{name: a, source_cidrs: [127.0.0.0/8]}]\n"
               "policies:\n"
               "  - identity: a\n"
               "    rules: [{hosts: ['*'], action: allow}]\n"
               "    dlp: {detectors: [acme-internal-token, vcs]}\n";
    }
    auto r = load_file(file);
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    auto rules = r->rules->rules();
    EXPECT_TRUE(std::any_of(rules.begin(), rules.end(),
                            [](const auto& x) { return x.id == "acme-internal-token"; }));
    EXPECT_TRUE(std::any_of(rules.begin(), rules.end(),
                            [](const auto& x) { return x.id == "github-pat-classic"; }));

    {
        std::ofstream out(dir / "internal.yml");
        out << "rules:\n  - id: broken\n    colour: red\n";
    }
    auto bad = load_file(file);
    ASSERT_FALSE(bad.has_value());
    bool names_rule_file = false;
    for (const auto& d : bad.error())
        names_rule_file |= d.file.ends_with("internal.yml") && d.line >= 2;
    EXPECT_TRUE(names_rule_file) << dump(bad.error());

    // A rule file that adds no rules leaves the process-wide built-in ruleset in place
    // rather than compiling the same rules again.
    {
        std::ofstream(dir / "internal.yml") << "rules: []\n";
        std::ofstream(dir / "none.yaml")
            << "version: 1\ndata_dir: state\nlisteners: [{address: 127.0.0.1:0}]\n"
               "rule_files: [internal.yml]\n";
    }
    const auto builtin = builtin_ruleset();
    ASSERT_TRUE(builtin.has_value()) << dump(builtin.error());
    auto none = load_file(dir / "none.yaml");
    ASSERT_TRUE(none.has_value()) << dump(none.error());
    EXPECT_EQ(none->rules, *builtin);
    EXPECT_NE(r->rules, *builtin);
    fs::remove_all(dir);
}

} // namespace

TEST(settings, secret_sources_are_read_at_load_and_problems_name_the_source_only) {
    char dir_tmpl[] = "/tmp/sluice-secret-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_tmpl), nullptr);
    const fs::path dir(dir_tmpl);
    {
        std::ofstream(dir / "good") << "file-secret-value-123\r\n";
        std::ofstream(dir / "empty") << "\n";
    }
    ::setenv("SLUICE_TEST_SECRET", "env-secret-value-456", 1);
    ::unsetenv("SLUICE_TEST_UNSET");
    std::string ok = std::string(minimal) +
                     "protected_values:\n  - env: SLUICE_TEST_SECRET\n"
                     "  - file: " +
                     (dir / "good").string() +
                     "\n"
                     "identities:\n  - name: a\n    source_cidrs: [127.0.0.1/32]\n"
                     "policies:\n  - identity: a\n    credentials: [c1]\n"
                     "credentials:\n  - name: c1\n    placeholder: sluice:c1\n"
                     "    source: {file: " +
                     (dir / "good").string() +
                     "}\n"
                     "    hosts: [api.example.com]\n    query: {name: key}\n";
    auto r = load_string(ok, "t.yaml");
    ASSERT_TRUE(r.has_value()) << dump(r.error());
    ASSERT_EQ(r->protected_values.size(), 2u);
    EXPECT_EQ(r->protected_values[0].value, "env-secret-value-456");
    EXPECT_EQ(r->protected_values[1].value, "file-secret-value-123");
    ASSERT_EQ(r->credentials.size(), 1u);
    EXPECT_EQ(r->credentials[0].source.value, "file-secret-value-123");
    ASSERT_TRUE(r->policies[0].credentials.has_value());
    EXPECT_EQ(*r->policies[0].credentials, std::vector<std::string>{"c1"});

    auto d = errors_of(std::string(minimal) +
                       "protected_values:\n"
                       "  - env: SLUICE_TEST_UNSET\n"
                       "  - file: " +
                       (dir / "empty").string() + "\n  - file: " + (dir / "missing").string() +
                       "\npolicies:\n  - identity: \"*\"\n    credentials: [nope]\n"
                       "credentials:\n  - name: c2\n    placeholder: sl\n"
                       "    source: {env: SLUICE_TEST_SECRET}\n    hosts: [x.example]\n"
                       "    header: {name: x-api-key}\n");
    expect_error(d, "'SLUICE_TEST_UNSET' is not set or empty", 6, 10);
    expect_error(d, "is empty", 7, 11);
    expect_error(d, "cannot be read", 8, 11);
    expect_error(d, "policy credential 'nope' is not a defined credential", 11, 19);
    expect_error(d, "placeholder must be at least 4 characters", 14, 18);
    for (const auto& x : d) {
        EXPECT_EQ(x.message.find("env-secret-value"), std::string::npos) << x.str();
    }
    fs::remove_all(dir);
}

TEST(settings, large_bodies_deny_by_default_and_stream_on_request) {
    const std::string head = std::string(minimal) +
                             "policies:\n  - identity: \"*\"\n    rules:\n"
                             "      - hosts: [example.com]\n        action: allow\n";
    auto plain = load_string(head, "t.yaml");
    ASSERT_TRUE(plain.has_value()) << dump(plain.error());
    EXPECT_FALSE(plain->policies[0].dlp.stream_large_bodies);

    auto streaming = load_string(head + "    dlp: {large_bodies: stream}\n", "t.yaml");
    ASSERT_TRUE(streaming.has_value()) << dump(streaming.error());
    EXPECT_TRUE(streaming->policies[0].dlp.stream_large_bodies);

    auto d = errors_of(head + "    dlp: {large_bodies: chunk}\n");
    expect_error(d, "invalid large_bodies 'chunk'", 10, 25);
}

TEST(settings, supervise_webhook_is_an_http_url_and_never_quoted) {
    auto ok =
        load_string(std::string(minimal) +
                        "supervise: {timeout: 30s, webhook: \"https://hooks.example/T0/s3cret\"}\n",
                    "t.yaml");
    ASSERT_TRUE(ok.has_value()) << dump(ok.error());
    EXPECT_EQ(ok->supervise_webhook, "https://hooks.example/T0/s3cret");
    EXPECT_TRUE(load_string(std::string(minimal), "t.yaml")->supervise_webhook.empty());

    const std::pair<const char*, const char*> bad[] = {
        {"ftp://hooks.example/s3cret", "must be an http:// or https:// URL"},
        {"https://user:s3cret@hooks.example/", "must not carry user:password"},
        {"/relative/s3cret", "is not an absolute URL"},
        {"https://hooks.example/s3cret#frag", "must not have a #fragment"},
    };
    for (const auto& [url, message] : bad) {
        auto d = errors_of(std::string(minimal) + "supervise: {webhook: \"" + url + "\"}\n");
        expect_error(d, message, 5, 22);
        EXPECT_EQ(dump(d).find("s3cret"), std::string::npos) << dump(d);
        EXPECT_EQ(dump(d).find("cret@"), std::string::npos) << dump(d);
    }
}

// control_store (issue 22): the URL is checked at load time and never quoted (it holds the
// store's password); ${VAR} expands; absent = no store.
TEST(settings, control_store_is_a_redis_url_and_never_quoted) {
    EXPECT_FALSE(load_string(std::string(minimal), "t.yaml")->control_store.has_value());
    ::setenv("SLUICE_TEST_REDIS_URL", "rediss://:s3cret@redis.example:6380/2", 1);
    auto ok =
        load_string(std::string(minimal) + "control_store:\n"
                                           "  redis: {url: \"${SLUICE_TEST_REDIS_URL}\", "
                                           "key_prefix: \"fleet1:\", tls: {ca_file: /etc/passwd}}\n"
                                           "  on_unavailable: fail_closed\n"
                                           "  connect_timeout: 500ms\n",
                    "t.yaml");
    ASSERT_TRUE(ok.has_value()) << dump(ok.error());
    ASSERT_TRUE(ok->control_store.has_value());
    EXPECT_EQ(ok->control_store->url, "rediss://:s3cret@redis.example:6380/2");
    EXPECT_EQ(ok->control_store->key_prefix, "fleet1:");
    EXPECT_EQ(ok->control_store->ca_file, std::filesystem::path("/etc/passwd"));
    EXPECT_TRUE(ok->control_store->fail_closed);
    EXPECT_EQ(ok->control_store->connect_timeout, std::chrono::milliseconds(500));

    const std::pair<const char*, const char*> bad[] = {
        {"http://:s3cret@redis.example/", "must be a redis:// or rediss:// URL"},
        {"redis:///s3cret", "has no host"},
        {"redis://:s3cret@redis.example/zero", "must be a database number"},
        {"redis://:s3cret@redis.example/0?x=1", "must not have a ?query"},
        {"redis://:s3cret@redis.example:99999/", "has an invalid port"},
        {"redis://s3cret@redis.example/", "has a user but no password"},
        {"s3cret", "is not an absolute URL"},
        // A raw '#' in the password: the host or port looks wrong; the hint says how to
        // write it.
        {"redis://:s3#cret@redis.example:6379/0", "has no host (if the password holds '#'"},
        {"redis://u:s3#cret@redis.example:6379/0", "write them %23, %3F, %2F, %40"},
    };
    for (const auto& [url, message] : bad) {
        auto d =
            errors_of(std::string(minimal) + "control_store: {redis: {url: \"" + url + "\"}}\n");
        expect_error(d, message, 5, 30);
        EXPECT_EQ(dump(d).find("s3cret"), std::string::npos) << dump(d);
    }
    expect_error(errors_of(std::string(minimal) + "control_store: {redis: {url: \"rediss://h\", "
                                                  "tls: {ca_file: /nonexistent/ca.pem}}}\n"),
                 "ca_file /nonexistent/ca.pem does not exist", 5, 59);
    expect_error(errors_of(std::string(minimal) + "control_store: {on_unavailable: never}\n"),
                 "control_store needs a redis", 5, 16);
    expect_error(errors_of(std::string(minimal) +
                           "control_store: {redis: {url: \"redis://h\"}, on_unavailable: never}\n"),
                 "control_store.on_unavailable", 5, 60);
}

// An opaque rule after a method-constrained deny for the same hosts, and an opaque rule
// in a policy with a dlp section, load with a warning naming both places (FILE:LINE:COL).
TEST(settings, opaque_rules_that_cannot_do_what_they_say_are_warned_about) {
    const char* yaml = R"(version: 1
data_dir: /tmp/sluice-warn-test
listeners:
  - address: 127.0.0.1:3128
identities:
  - name: a
    source_cidrs: [127.0.0.0/8]
policies:
  - identity: a
    rules:
      - hosts: ["api.example.com"]
        methods: [POST]
        action: deny
      - hosts: ["*"]
        action: allow
        inspect: false
    dlp:
      detectors: [all]
)";
    auto r = load_string(yaml, "w.yaml");
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->warnings.size(), 2u);
    for (const auto& w : r->warnings)
        EXPECT_TRUE(w.str().starts_with("w.yaml:14:9: ")) << w.str();
    EXPECT_NE(r->warnings[0].str().find("dlp section (18:7)"), std::string::npos)
        << r->warnings[0].str();
    EXPECT_NE(r->warnings[1].str().find("rule at 11:9"), std::string::npos) << r->warnings[1].str();

    // Without the constrained deny and the dlp section: no warning.
    const char* clean = R"(version: 1
data_dir: /tmp/sluice-warn-test
listeners:
  - address: 127.0.0.1:3128
identities:
  - name: a
    source_cidrs: [127.0.0.0/8]
policies:
  - identity: a
    rules:
      - hosts: ["*"]
        action: allow
        inspect: false
)";
    auto c = load_string(clean, "c.yaml");
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE(c->warnings.empty());
}

TEST(settings, hostname_exfil_defaults_on_and_parses_every_key) {
    const std::string head = std::string(minimal) +
                             "policies:\n  - identity: \"*\"\n    rules:\n"
                             "      - hosts: [example.com]\n        action: allow\n";
    auto plain = load_string(head, "t.yaml");
    ASSERT_TRUE(plain.has_value()) << dump(plain.error());
    const auto& def = plain->policies[0].dlp.hostname_exfil;
    EXPECT_TRUE(def.enabled);
    EXPECT_DOUBLE_EQ(def.min_score, 20);
    EXPECT_EQ(def.min_label_length, 16u);
    EXPECT_TRUE(def.allow.empty());

    auto set = load_string(head + "    dlp:\n      hostname_exfil:\n        enabled: false\n"
                                  "        min_score: 40.5\n        min_label_length: 20\n"
                                  "        allow: [\"*.CloudFront.net\", api.example.com]\n",
                           "t.yaml");
    ASSERT_TRUE(set.has_value()) << dump(set.error());
    const auto& h = set->policies[0].dlp.hostname_exfil;
    EXPECT_FALSE(h.enabled);
    EXPECT_DOUBLE_EQ(h.min_score, 40.5);
    EXPECT_EQ(h.min_label_length, 20u);
    EXPECT_EQ(h.allow, (std::vector<std::string>{"*.cloudfront.net", "api.example.com"}));
}

TEST(settings, hostname_exfil_errors_name_their_position) {
    const std::string head = std::string(minimal) +
                             "policies:\n  - identity: \"*\"\n    rules:\n"
                             "      - hosts: [example.com]\n        action: allow\n"
                             "    dlp:\n      hostname_exfil:\n";
    expect_error(errors_of(head + "        min_score: -1\n"), "invalid min_score '-1'", 12, 20);
    expect_error(errors_of(head + "        min_score: lots\n"), "invalid min_score 'lots'", 12, 20);
    expect_error(errors_of(head + "        min_label_length: 4\n"), "invalid min_label_length '4'",
                 12, 27);
    expect_error(errors_of(head + "        allow: [\"*.\"]\n"), "invalid host pattern", 12, 17);
    expect_error(errors_of(head + "        enabled: maybe\n"), "invalid hostname_exfil enabled", 12,
                 18);
    expect_error(errors_of(head + "        threshold: 3\n"), "threshold", 12, 9);
}
