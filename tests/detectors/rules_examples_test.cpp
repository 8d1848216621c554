// Every built-in rule proves itself through the whole engine (Hyperscan, RE2, validator):
// each example is found by its rule, each negative example is not, and each example split
// at every byte offset across two stream feeds is still found exactly once.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/detectors/stream_scanner.hpp"
#include "sluice/detectors/validators.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace {

using namespace sluice;

// The process-wide built-in ruleset, as the product uses it (normally its Hyperscan
// database comes from the build-time snapshot; ruleset_snapshot_test.cpp proves that finds
// the same as a fresh compile).
std::shared_ptr<const detectors::ruleset> builtin() {
    auto rs = config::builtin_ruleset();
    if (!rs) {
        for (const auto& d : rs.error())
            ADD_FAILURE() << d.file << ':' << d.line << ": " << d.message;
        return nullptr;
    }
    return *rs;
}

std::size_t count_rule(const std::vector<detectors::finding>& fs, const std::string& id) {
    return static_cast<std::size_t>(
        std::count_if(fs.begin(), fs.end(), [&](const auto& f) { return f.rule_id == id; }));
}

// The ordinary path, without the snapshot: the built-in rules compile from scratch.
TEST(builtin_rules, load_and_compile) {
    auto rules = config::builtin_rules();
    ASSERT_TRUE(rules.has_value());
    auto compiled = detectors::ruleset::compile(std::move(*rules));
    ASSERT_TRUE(compiled.has_value()) << compiled.error().front();
    const auto& rs = *compiled;
    EXPECT_FALSE(rs->database_from_snapshot());
    EXPECT_GE(rs->rules().size(), 20u);
    EXPECT_GT(rs->max_width(), 0u);
    std::set<std::string> categories;
    for (const auto& r : rs->rules()) {
        EXPECT_FALSE(r.examples.empty()) << r.id << " has no examples";
        EXPECT_FALSE(r.references.empty()) << r.id << " has no references";
        categories.insert(r.category);
    }
    EXPECT_TRUE(categories.count("vcs"));
    EXPECT_TRUE(categories.count("private-key"));
}

TEST(builtin_rules, examples_match_and_negatives_do_not) {
    auto rs = builtin();
    ASSERT_TRUE(rs);
    detectors::scanner s(rs);
    std::vector<detectors::finding> out;
    for (const auto& r : rs->rules()) {
        for (const auto& ex : r.examples) {
            out.clear();
            ASSERT_TRUE(s.scan(ex, out));
            EXPECT_EQ(count_rule(out, r.id), 1u) << r.id << " example: " << ex;
            for (const auto& f : out) {
                EXPECT_LE(f.end, ex.size());
                EXPECT_LT(f.begin, f.end);
                const auto secret = std::string_view(ex).substr(f.begin, f.end - f.begin);
                EXPECT_EQ(f.fingerprint, f.category == "private-key"
                                             ? detectors::key_material_fingerprint(secret)
                                             : detectors::fingerprint(secret));
                if (f.rule_id == r.id) {
                    EXPECT_EQ(f.category, r.category);
                    EXPECT_DOUBLE_EQ(f.confidence, r.confidence);
                }
            }
        }
        for (const auto& neg : r.negative_examples) {
            out.clear();
            ASSERT_TRUE(s.scan(neg, out));
            EXPECT_EQ(count_rule(out, r.id), 0u) << r.id << " negative: " << neg;
        }
    }
}

TEST(builtin_rules, examples_found_in_surrounding_text) {
    auto rs = builtin();
    ASSERT_TRUE(rs);
    detectors::scanner s(rs);
    std::vector<detectors::finding> out;
    for (const auto& r : rs->rules()) {
        for (const auto& ex : r.examples) {
            const std::string text = "{\"payload\": 1}\n" + ex + "\n<!-- end -->";
            out.clear();
            ASSERT_TRUE(s.scan(text, out));
            EXPECT_EQ(count_rule(out, r.id), 1u) << r.id << " example in context: " << ex;
        }
    }
}

TEST(builtin_rules, every_example_split_at_every_offset_across_two_feeds) {
    auto rs = builtin();
    ASSERT_TRUE(rs);
    detectors::scanner s(rs);
    std::vector<detectors::finding> whole, streamed;
    for (const auto& r : rs->rules()) {
        for (const auto& ex : r.examples) {
            whole.clear();
            ASSERT_TRUE(s.scan(ex, whole));
            ASSERT_EQ(count_rule(whole, r.id), 1u) << r.id;
            const auto expected = *std::find_if(whole.begin(), whole.end(),
                                                [&](const auto& f) { return f.rule_id == r.id; });
            for (std::size_t cut = 0; cut <= ex.size(); ++cut) {
                detectors::stream_scanner stream(s);
                streamed.clear();
                ASSERT_TRUE(stream.feed(std::string_view(ex).substr(0, cut), streamed));
                ASSERT_TRUE(stream.feed(std::string_view(ex).substr(cut), streamed));
                ASSERT_TRUE(stream.finish(streamed));
                ASSERT_EQ(count_rule(streamed, r.id), 1u)
                    << r.id << " split at " << cut << ": " << ex;
                const auto got = *std::find_if(streamed.begin(), streamed.end(),
                                               [&](const auto& f) { return f.rule_id == r.id; });
                EXPECT_EQ(got.begin, expected.begin) << r.id << " split at " << cut;
                // A rule without a closing delimiter may be reported before it stops
                // growing; then the stream's range is a prefix of the block scan's.
                EXPECT_LE(got.end, expected.end) << r.id << " split at " << cut;
                EXPECT_GT(got.end, got.begin) << r.id << " split at " << cut;
            }
        }
    }
}

} // namespace

namespace {

const sluice::detectors::rule* rule_by_id(const sluice::detectors::ruleset& rs,
                                          std::string_view id) {
    for (const auto& r : rs.rules()) {
        if (r.id == id) {
            return &r;
        }
    }
    return nullptr;
}

} // namespace

// Issue 25: a prefixed, fixed-shape token is a finding whatever its checksum; a checksum
// that does not verify halves the confidence instead of dropping the finding.
TEST(builtin_rules, token_look_alikes_are_findings_with_lower_confidence) {
    auto rs = builtin();
    ASSERT_TRUE(rs);
    detectors::scanner s(rs);
    struct row {
        const char* rule;
        const char* text;
        bool verified;
    };
    const row rows[] = {
        // The hand-typed string has 34 characters: the wrong-length look-alike rule.
        {"github-token-look-alike", "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef01", true},
        {"github-pat-classic", "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123", false},
        {"github-pat-classic", "my key is ghp_gyrDO1xkxwnQrS7RPeMOkIUpkDyr7O4ZFCxA ok", false},
        {"github-oauth-token", "gho_E8JkqH3MB9n7IWUSmTtzQPxC5HChpo3ydaLA", false},
        {"github-user-to-server-token", "ghu_R3pzh84KpLMcNfAQLKHu7qnQTupqzi3bQrkA", false},
        {"github-server-to-server-token", "ghs_7AZQ3VZprkYSgy3c2Eom06Dwt0Y3oo27rBsA", false},
        {"github-refresh-token", "ghr_DA4OKmTSyFzpjPSa5W3X4gXBolZ9SH0BZH3A", false},
        {"npm-access-token", "npm_4Qbvrizj7bbDSlbhmSNgMFdhNExXjFUR1PaY", false},
        {"cloudflare-scannable-token", "cfat_RVdD53X83RZJzzzzgEOzdmenCkhvMdgaKjIg8xNb833d1d01",
         false},
        {"grafana-service-account-token",
         "export GRAFANA_TOKEN=\"glsa_OL8dKLzdocJ2isAjIhKtJ0RlgLKOmxgJ_82817c47\"", false},
        {"atlassian-api-token",
         "JIRA_API_TOKEN=\"ATATT3xFfGF09eaIXB0N7RicHG5cyOCxiBHpKS9W9hTR7jOh0orOsH5lQHOJfHk4SpqwN_"
         "6Yq9jKSQueTFYJPIsQY4wj_jyMzWTKZ32XblkwotXidkyuI_R3-X3RA_cUj34ODKckPTCY4nLt-"
         "VRNbvzoAnVU8_Cbs_jpve7XfqK2vCEovOGrxvo=C8AEEE77\"",
         false},
        // No checksum in the format: found at the rule's confidence.
        {"aws-access-key-id", "AKIAIOSFODNN7EXAMPLE", true},
        {"stripe-secret-key-live", "sk_live_FAKE_TEST_KEY_0123456789abcdefXYZ", true},
        {"sendgrid-api-key", "SG.FAKE_SENDGRID_KEY_0123.abcdefghijklmnopqrstuvwxyz_0123456789",
         true},
    };
    std::vector<detectors::finding> out;
    for (const auto& r : rows) {
        const auto* rule = rule_by_id(*rs, r.rule);
        ASSERT_NE(rule, nullptr) << r.rule;
        out.clear();
        ASSERT_TRUE(s.scan(r.text, out));
        ASSERT_EQ(count_rule(out, r.rule), 1u) << r.rule << ": " << r.text;
        const auto& f = *std::find_if(out.begin(), out.end(),
                                      [&](const auto& x) { return x.rule_id == r.rule; });
        const double want =
            r.verified ? rule->confidence : detectors::unverified_confidence(rule->confidence);
        EXPECT_DOUBLE_EQ(f.confidence, want) << r.rule;
        EXPECT_LT(detectors::unverified_confidence(rule->confidence), rule->confidence);
        if (!r.verified) {
            // Unverified is always below what the same rule gives a verified token.
            EXPECT_LT(f.confidence, rule->confidence);
        }
    }
}

// The checksum stays a gate where the shape alone is not specific, and filler is not a token.
TEST(builtin_rules, gates_still_gate_and_filler_is_not_a_token) {
    auto rs = builtin();
    ASSERT_TRUE(rs);
    detectors::scanner s(rs);
    std::vector<detectors::finding> out;
    for (const char* text :
         {"ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "npm_000000000000000000000000000000000000",
          "card number: 4111 1111 1111 1112"}) {
        out.clear();
        ASSERT_TRUE(s.scan(text, out));
        EXPECT_TRUE(out.empty()) << text << ": " << out.front().rule_id;
    }
    EXPECT_TRUE(detectors::is_checksum_validator("github"));
    EXPECT_TRUE(detectors::is_checksum_validator("atlassian"));
    EXPECT_FALSE(detectors::is_checksum_validator("luhn"));
    EXPECT_FALSE(detectors::is_checksum_validator("entropy"));
    EXPECT_FALSE(detectors::is_checksum_validator(""));
}
