// Host names before resolution (issue 25): the views the inspector scans, the
// hostname-exfiltration detector's false positives on real-world names
// (tests/dlp/data/hostnames.txt) and its recall on encoded random secrets, and the
// redaction of the labels that carried a finding. Through the real built-in rules, a real
// scanner and libpsl's built-in Public Suffix List.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/hostname.hpp"
#include "sluice/dlp/inspector.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

using namespace sluice;
using namespace sluice::dlp;

using namespace sluice::dlp::test;

namespace {
// Cuts `s` into labels of at most `n` bytes joined by dots.
std::string dotted(std::string_view s, std::size_t n) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); i += n) {
        if (!out.empty()) {
            out += '.';
        }
        out.append(s.substr(i, n));
    }
    return out;
}

std::vector<std::string> real_world_hosts() {
    std::ifstream in(SLUICE_HOSTNAMES_FILE);
    EXPECT_TRUE(in) << SLUICE_HOSTNAMES_FILE;
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
        if (!line.empty() && line[0] != '#') {
            out.push_back(line);
        }
    }
    return out;
}

class hostname_test : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_NE(builtin(), nullptr);
        scanner_.emplace(builtin());
        token_ = github_token(25);
    }

    verdict destination(std::string_view host) {
        inspector ins(pol_, *scanner_);
        return ins.on_destination(host);
    }

    bool has_rule(const verdict& v, std::string_view rule) const {
        return std::any_of(v.findings.begin(), v.findings.end(),
                           [&](const finding_record& f) { return f.rule == rule; });
    }

    static std::string describe(const verdict& v) {
        std::string out;
        for (const auto& f : v.findings) {
            out += " " + f.rule + "@" + std::to_string(f.offset) + "+" + std::to_string(f.length) +
                   "/" + f.variant;
        }
        return out;
    }

    // The audit form of `host` keeps no byte of the secret and keeps the registrable domain.
    void expect_redacted(std::string_view host, const verdict& v) const {
        const std::string shown = redact_host(host, v.findings);
        EXPECT_NE(shown.find("[redacted]"), std::string::npos) << shown;
        EXPECT_TRUE(shown.ends_with(".attacker.example")) << shown << describe(v);
        EXPECT_EQ(shown.find(token_.substr(4, 12)), std::string::npos) << shown;
        for (const auto& f : v.findings) {
            EXPECT_EQ(f.location, "host");
            EXPECT_LE(f.offset + f.length, host.size());
            EXPECT_EQ(f.fingerprint.find(token_.substr(4)), std::string::npos);
        }
    }

    policy pol_;
    std::optional<detectors::scanner> scanner_;
    std::string token_;
};

} // namespace

TEST(host_labels, ranges_and_empty_labels) {
    const auto l = host_labels("a.bc..d");
    ASSERT_EQ(l.size(), 4u);
    EXPECT_EQ(l[0].begin, 0u);
    EXPECT_EQ(l[0].end, 1u);
    EXPECT_EQ(l[1].begin, 2u);
    EXPECT_EQ(l[1].end, 4u);
    EXPECT_EQ(l[2].begin, l[2].end);
    EXPECT_EQ(l[3].begin, 6u);
}

TEST(host_views, every_run_with_and_without_dots_and_base32) {
    std::vector<std::string> seen;
    for_each_host_view("ab.cd.ef", [&](const host_view& v) {
        seen.push_back(v.variant + ":" + v.bytes);
        if (!v.origin.empty()) {
            // Every byte maps back to the same byte of the host.
            for (std::size_t i = 0; i < v.bytes.size(); ++i) {
                EXPECT_EQ(std::string_view("ab.cd.ef")[v.origin[i]], v.bytes[i]);
            }
        }
        return true;
    });
    for (const char* want : {"raw:ab.cd.ef", "raw:ab.cd", "labels:abcd", "raw:cd.ef", "labels:cdef",
                             "labels:abcdef"}) {
        EXPECT_NE(std::find(seen.begin(), seen.end(), want), seen.end()) << want;
    }
    // base32 of "hello world" (RFC 4648 section 6), lower case, cut into labels.
    bool decoded = false;
    for_each_host_view("nbswy3dp.eb3w64tmmq.x.example", [&](const host_view& v) {
        // The run of the first two labels ([0, 19)) decodes to exactly the text.
        decoded = decoded || (v.variant == "labels>base32" && v.bytes == "hello world" &&
                              v.run_begin == 0 && v.run_end == 19);
        return true;
    });
    EXPECT_TRUE(decoded);
}

TEST(redact_host, replaces_each_label_a_finding_touches) {
    finding_record f;
    f.location = "host";
    f.offset = 3; // "cd.e" of "ab.cd.ef.attacker.example"
    f.length = 4;
    EXPECT_EQ(redact_host("ab.cd.ef.attacker.example", {f}),
              "ab.[redacted].[redacted].attacker.example");
    f.location = "url";
    EXPECT_EQ(redact_host("ab.cd.ef.attacker.example", {f}), "ab.cd.ef.attacker.example");
    EXPECT_EQ(redact_host("plain.example", {}), "plain.example");
}

TEST_F(hostname_test, token_in_labels_joined_encoded_or_whole_is_found_before_resolution) {
    const std::string hex = to_hex(token_);
    const std::string b32 = to_base32(token_, true);
    const std::string b64 = to_base64url(token_);
    const std::string cases[] = {
        token_ + ".attacker.example",
        dotted(token_, 7) + ".attacker.example",
        dotted(hex, 40) + ".attacker.example",
        dotted(hex, 63) + ".attacker.example",
        dotted(b32, 32) + ".attacker.example",
        dotted(to_base32(token_, false), 60) + ".attacker.example",
        dotted(b64, 30) + ".attacker.example",
        "x1." + dotted(hex, 16) + ".attacker.example",
        "ghp%5f" + token_.substr(4) + ".attacker.example",
    };
    for (const auto& host : cases) {
        const auto v = destination(host);
        EXPECT_EQ(v.kind, verdict_kind::deny) << host;
        EXPECT_EQ(v.reason, "dlp_finding") << host;
        EXPECT_TRUE(has_rule(v, "github-pat-classic")) << host;
        expect_redacted(host, v);
    }
}

TEST_F(hostname_test, unverified_token_shape_in_a_host_is_found) {
    const auto v = destination("ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef01.attacker.example");
    EXPECT_EQ(v.reason, "dlp_finding");
    EXPECT_TRUE(has_rule(v, "github-token-look-alike"));
    const auto w = destination("ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123.attacker.example");
    EXPECT_TRUE(has_rule(w, "github-pat-classic"));
}

TEST_F(hostname_test, ordinary_names_forward) {
    for (const char* host : {"api.github.com", "d1234abcd.cloudfront.net", "example.com",
                             "my-bucket.s3.us-east-1.amazonaws.com", "203.0.113.7", "::1"}) {
        const auto v = destination(host);
        EXPECT_EQ(v.kind, verdict_kind::forward) << host;
        EXPECT_TRUE(v.findings.empty()) << host << ": " << v.findings.front().rule;
    }
}

TEST_F(hostname_test, exfiltration_detector_finds_random_labels_and_obeys_settings) {
    std::mt19937 rng(7);
    std::string secret(40, '\0');
    for (auto& c : secret) {
        c = static_cast<char>(rng());
    }
    const std::string host = dotted(to_hex(secret), 40) + ".attacker.example";
    const auto v = destination(host);
    EXPECT_EQ(v.reason, "dlp_finding");
    ASSERT_TRUE(has_rule(v, hostname_exfil_rule));
    const auto& f = *std::find_if(v.findings.begin(), v.findings.end(),
                                  [](const auto& r) { return r.rule == hostname_exfil_rule; });
    EXPECT_EQ(f.offset, 0u);
    EXPECT_EQ(f.length, 80u + 1u); // both labels and the dot between them
    EXPECT_EQ(redact_host(host, v.findings), "[redacted].[redacted].attacker.example");

    pol_.dlp.hostname_exfil.allow = {"*.attacker.example"};
    EXPECT_FALSE(has_rule(destination(host), hostname_exfil_rule));
    pol_.dlp.hostname_exfil.allow.clear();
    pol_.dlp.hostname_exfil.min_score = 100;
    EXPECT_FALSE(has_rule(destination(host), hostname_exfil_rule));
    pol_.dlp.hostname_exfil.min_score = 20;
    pol_.dlp.hostname_exfil.enabled = false;
    EXPECT_FALSE(has_rule(destination(host), hostname_exfil_rule));
}

// The false-positive rate the README reports: real-world names with default settings.
TEST(hostname_exfil, no_false_positive_on_real_world_names) {
    const hostname_exfil_settings defaults;
    const auto hosts = real_world_hosts();
    ASSERT_GE(hosts.size(), 150u);
    std::size_t flagged = 0;
    for (const auto& h : hosts) {
        if (auto hit = hostname_exfiltration(h, defaults)) {
            ++flagged;
            ADD_FAILURE() << h << " scored " << hit->score;
        }
    }
    std::printf("hostname-exfiltration: %zu of %zu real-world names flagged\n", flagged,
                hosts.size());
    EXPECT_EQ(flagged, 0u);
}

// The recall the README reports: random secrets, hex or base32 (the encodings that
// survive a case-insensitive resolver), upper or lower case, in labels of 30, 40 or 63
// characters; 20 names per size, encoding and label length.
double recall(std::size_t bytes, std::mt19937& rng) {
    const hostname_exfil_settings defaults;
    std::size_t found = 0;
    std::size_t total = 0;
    for (const std::size_t label : {30u, 40u, 63u}) {
        for (int enc = 0; enc < 3; ++enc) {
            for (int round = 0; round < 20; ++round) {
                std::string secret(bytes, '\0');
                for (auto& c : secret) {
                    c = static_cast<char>(rng());
                }
                const std::string text = enc == 0   ? to_hex(secret)
                                         : enc == 1 ? to_base32(secret, true)
                                                    : to_base32(secret, false);
                ++total;
                if (hostname_exfiltration(dotted(text, label) + ".t.attacker.example", defaults)) {
                    ++found;
                }
            }
        }
    }
    std::printf("hostname-exfiltration: recall %zu of %zu for %zu-byte secrets\n", found, total,
                bytes);
    return static_cast<double>(found) / static_cast<double>(total);
}

TEST(hostname_exfil, recall_on_encoded_random_secrets) {
    std::mt19937 rng(25);
    EXPECT_GE(recall(16, rng), 0.0); // reported only: 32 hex characters are an ordinary id
    EXPECT_GE(recall(24, rng), 0.6);
    for (std::size_t bytes = 32; bytes <= 64; bytes += 8) {
        EXPECT_GE(recall(bytes, rng), 0.95) << bytes;
    }
}

TEST(hostname_exfil, random_looking_labels) {
    EXPECT_TRUE(random_looking_label("3f9a0c7e1b2d4f6a8c0e2b4d6f8a0c1e", 16));
    EXPECT_TRUE(random_looking_label("mzxw6ytboi2gk3tbn5zsa4dboj2g", 16));
    EXPECT_TRUE(random_looking_label("qzkxjvwplrmtnbhdgfcsxyzqwrtp", 16));
    EXPECT_FALSE(random_looking_label("3f9a0c7e1b2d", 16)); // too short
    EXPECT_FALSE(random_looking_label("this-is-a-very-long-but-normal-name", 16));
    EXPECT_FALSE(random_looking_label("my-load-balancer-1234567890", 16));
    EXPECT_FALSE(random_looking_label("kubernetes-dashboard", 16));
}
