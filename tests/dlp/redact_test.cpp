// Redaction of secrets from record fields (dlp/redact.hpp) over the real built-in rules.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/inspector.hpp"
#include "sluice/dlp/policy.hpp"
#include "sluice/dlp/redact.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <random>

using namespace sluice;
using namespace sluice::dlp;

namespace {

using test::builtin;
using test::to_hex;
std::string token(std::uint32_t seed) {
    return test::github_token(seed);
}
std::string hex(std::string_view s) {
    return to_hex(s);
}

class redact_test : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_NE(builtin(), nullptr);
        scanner_.emplace(builtin());
    }
    std::string redact(std::string_view s) { return redact_secrets(s, *scanner_, {}); }
    std::optional<detectors::scanner> scanner_;
};

} // namespace

TEST_F(redact_test, clean_text_is_unchanged) {
    EXPECT_EQ(redact("https://api.example.com:443/v1/chat?model=x"),
              "https://api.example.com:443/v1/chat?model=x");
    EXPECT_EQ(redact("GET"), "GET");
    EXPECT_EQ(redact(""), "");
}

TEST_F(redact_test, a_raw_secret_is_replaced_exactly) {
    const auto t = token(1);
    EXPECT_EQ(redact("https://h.example/p/" + t + "/x"), "https://h.example/p/[redacted]/x");
    EXPECT_EQ(redact(t), "[redacted]");
}

TEST_F(redact_test, an_encoded_secret_loses_its_whole_encoded_run) {
    const auto t = token(2);
    const auto out = redact("https://h.example/p/" + hex("key=" + t) + "/x");
    EXPECT_EQ(out.find(hex(t).substr(0, 20)), std::string::npos) << out;
    EXPECT_NE(out.find("[redacted]"), std::string::npos) << out;
    EXPECT_TRUE(out.starts_with("https://h.example/p/")) << out;
}

TEST_F(redact_test, a_secret_cut_by_dots_takes_the_whole_text) {
    const auto t = token(3);
    const auto host = t.substr(0, 20) + "." + t.substr(20) + ".attacker.example";
    EXPECT_EQ(redact("https://" + host + ":443"), "[redacted]");
}

TEST(constrained_rule_precedes, only_constrained_deny_or_supervise_before_the_chosen_rule) {
    policy p;
    policy_rule post_deny;
    post_deny.hosts = {"api.example.com"};
    post_deny.methods = {"POST"};
    post_deny.act = action::deny;
    policy_rule other_host = post_deny;
    other_host.hosts = {"other.example.com"};
    policy_rule opaque;
    opaque.hosts = {"*"};
    opaque.inspect = false;
    p.rules = {other_host, post_deny, opaque};
    EXPECT_TRUE(constrained_rule_precedes(p, p.rules[2], "api.example.com", 443));
    EXPECT_FALSE(constrained_rule_precedes(p, p.rules[2], "third.example.com", 443));
    // A constrained allow does not need the tunnel intercepted; a later rule is not before.
    p.rules[1].act = action::allow;
    EXPECT_FALSE(constrained_rule_precedes(p, p.rules[2], "api.example.com", 443));
    p.rules[1].act = action::supervise;
    p.rules[1].ports = {8443};
    EXPECT_FALSE(constrained_rule_precedes(p, p.rules[2], "api.example.com", 443));
    EXPECT_TRUE(constrained_rule_precedes(p, p.rules[2], "api.example.com", 8443));
    EXPECT_FALSE(constrained_rule_precedes(p, p.rules[1], "api.example.com", 8443));
}

TEST_F(redact_test, inspector_scans_the_method_and_field_names) {
    const auto t = token(4);
    policy pol;
    inspector ins(pol, *scanner_);
    const header_view clean[] = {{"X-Trace", "1"}};
    EXPECT_EQ(ins.on_head({"GET", "/", "api.example.com", 443, clean}).kind, verdict_kind::forward);
    auto as_method = ins.on_head({t, "/", "api.example.com", 443, clean});
    ASSERT_EQ(as_method.kind, verdict_kind::deny);
    EXPECT_EQ(as_method.findings.at(0).location, "head");
    const header_view named[] = {{t, "1"}};
    auto as_name = ins.on_head({"GET", "/", "api.example.com", 443, named});
    ASSERT_EQ(as_name.kind, verdict_kind::deny);
    EXPECT_EQ(as_name.findings.at(0).location, "head");
}

TEST_F(redact_test, inspector_scans_the_destination_name) {
    const auto t = token(5);
    policy pol;
    inspector ins(pol, *scanner_);
    EXPECT_EQ(ins.on_destination("api.example.com").kind, verdict_kind::forward);
    auto split = ins.on_destination(t.substr(0, 20) + "." + t.substr(20) + ".attacker.example");
    ASSERT_EQ(split.kind, verdict_kind::deny);
    EXPECT_EQ(split.findings.at(0).location, "host");
    const auto h = hex(t);
    EXPECT_EQ(
        ins.on_destination(h.substr(0, 40) + "." + h.substr(40) + ".zz.attacker.example").kind,
        verdict_kind::deny);
}

// Red-team finding (issue 25): a CONNECT or absolute-form request refused by policy kept a
// base32-of-token host word for word in its audit url. The labels that carry a secret in
// any host view (base32 and base32hex over labels, hex, raw) are replaced.
TEST_F(redact_test, a_base32_secret_spelled_into_host_labels_is_redacted_label_by_label) {
    for (const bool lower : {false, true}) {
        const auto b = test::to_base32(token(6), lower);
        const auto host = b.substr(0, 40) + "." + b.substr(40) + ".attacker.example";
        for (const std::string& text : {"https://" + host + ":443/x?q=1", host + ":443",
                                        "http://" + host + "/p", "CONNECT " + host + ":443"}) {
            const auto out = redact(text);
            EXPECT_EQ(out.find(b.substr(0, 16)), std::string::npos) << out;
            EXPECT_EQ(out.find(b.substr(40, 16)), std::string::npos) << out;
            // The labels that carried it, or the whole text when the variant pipeline
            // finds the base32 in the labels joined (decode.hpp base32).
            EXPECT_TRUE(out.find("[redacted].[redacted].attacker.example") != std::string::npos ||
                        out == "[redacted]")
                << out;
        }
    }
}

TEST_F(redact_test, a_secret_in_the_labels_of_a_name_longer_than_dns_allows_is_redacted) {
    const auto b = test::to_base32(token(7), false);
    std::string pad;
    for (int i = 0; i < 40; ++i)
        pad += "w" + std::to_string(i) + ".";
    const auto out = redact("http://" + pad + b.substr(0, 30) + "." + b.substr(30) + "." + pad +
                            "attacker.example/");
    EXPECT_EQ(out.find(b.substr(0, 16)), std::string::npos) << out;
    EXPECT_EQ(out.find(b.substr(30, 16)), std::string::npos) << out;
    EXPECT_NE(out.find("w39.[redacted]"), std::string::npos) << out;
}

TEST_F(redact_test, clean_names_and_dotted_text_are_unchanged) {
    for (const std::string& text : std::vector<std::string>{
             "https://d1234abcd5678.cloudfront.net:443/a.b/c.d?v=1.2.3",
             "mybucket-2024.s3.eu-west-1.amazonaws.com:443", "registry.npmjs.org:443",
             "http://" + std::string(300, 'a') + ".example/"}) {
        EXPECT_EQ(redact(text), text);
    }
}

// Red-team finding (issue 25, item 10): the hex of a token spelled into host labels of any
// width, under a refused CONNECT or absolute-form request, leaves nothing of it in a record.
TEST_F(redact_test, a_hex_secret_spelled_into_host_labels_is_redacted) {
    const auto h = hex(token(8));
    for (const std::size_t width : {12u, 16u, 20u, 32u, 40u, 63u}) {
        std::string host;
        for (std::size_t p = 0; p < h.size(); p += width)
            host += h.substr(p, width) + ".";
        host += "x.attacker.example";
        for (const std::string& text :
             {"https://" + host + ":443/", host + ":443", "http://" + host + "/p?q=1"}) {
            const auto out = redact(text);
            for (std::size_t p = 0; p + 12 <= h.size(); p += width)
                EXPECT_EQ(out.find(h.substr(p, 12)), std::string::npos)
                    << "width " << width << ": " << out;
        }
    }
}
