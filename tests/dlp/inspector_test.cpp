// The inspector over the real compiled built-in rules and a real scanner. Tokens are
// generated per run with a valid GitHub checksum, so nothing here depends on a fixed
// string the rules happen to list.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/finding.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/inspector.hpp"

#include <gtest/gtest.h>

#include <random>

using namespace sluice;
using namespace sluice::dlp;

namespace {

std::shared_ptr<const detectors::ruleset> builtin() {
    auto rules = config::builtin_ruleset();
    EXPECT_TRUE(rules.has_value());
    return rules.value_or(nullptr);
}

// "ghp_" + 30 random base62 + base62 CRC32 of those 30 (github.blog 2021-04-05).
std::string github_token(std::uint32_t seed) {
    static constexpr char alphabet[] =
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> pick(0, 61);
    std::string random;
    for (int i = 0; i < 30; ++i) {
        random += alphabet[pick(rng)];
    }
    char check[6];
    detectors::base62_6(detectors::crc32(random), check);
    std::string token = "ghp_" + random + std::string(check, 6);
    EXPECT_TRUE(detectors::github_checksum_ok(token)) << "test token generator is wrong";
    return token;
}

class inspector_test : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_NE(builtin(), nullptr);
        scanner_.emplace(builtin());
        token_ = github_token(20261130);
    }

    // No field of a finding record may carry the secret.
    void expect_no_secret(const verdict& v) const {
        for (const auto& f : v.findings) {
            for (const std::string* s : {&f.rule, &f.location, &f.variant, &f.fingerprint}) {
                EXPECT_EQ(s->find(token_.substr(4)), std::string::npos);
            }
        }
        EXPECT_EQ(v.reason.find(token_.substr(4)), std::string::npos);
    }

    policy pol_;
    std::optional<detectors::scanner> scanner_;
    std::string token_;
};

} // namespace

TEST_F(inspector_test, clean_request_forwards) {
    inspector ins(pol_, *scanner_);
    const header_view headers[] = {{"Content-Type", "application/json"},
                                   {"User-Agent", "curl/7.88"}};
    request_view req{"POST", "/v1/chat?model=x", "api.example.com", 443, headers};
    auto h = ins.on_head(req);
    EXPECT_EQ(h.kind, verdict_kind::forward);
    EXPECT_TRUE(h.findings.empty());
    auto b = ins.on_body(R"({"messages":[{"role":"user","content":"hello, world"}]})");
    EXPECT_EQ(b.kind, verdict_kind::forward);
    EXPECT_EQ(b.status, 200);
    EXPECT_TRUE(b.findings.empty());
}

TEST_F(inspector_test, token_in_body_denies_with_rule_offset_and_fingerprint) {
    inspector ins(pol_, *scanner_);
    const std::string prefix = R"({"note":"deploy with )";
    const std::string body = prefix + token_ + R"( please"})";
    auto v = ins.on_body(body);
    EXPECT_EQ(v.kind, verdict_kind::deny);
    EXPECT_EQ(v.status, 403);
    EXPECT_EQ(v.reason, "dlp_finding");
    ASSERT_EQ(v.findings.size(), 1u);
    const auto& f = v.findings[0];
    EXPECT_EQ(f.rule, "github-pat-classic");
    EXPECT_EQ(f.location, "body");
    EXPECT_EQ(f.variant, "raw");
    EXPECT_EQ(f.offset, prefix.size());
    EXPECT_EQ(f.length, token_.size());
    EXPECT_EQ(f.fingerprint, detectors::fingerprint(token_));
    ASSERT_EQ(f.fingerprint.size(), 7u + 16u);
    EXPECT_TRUE(f.fingerprint.starts_with("sha256:"));
    expect_no_secret(v);
}

TEST_F(inspector_test, two_tokens_in_body_are_both_reported_in_order) {
    inspector ins(pol_, *scanner_);
    const std::string second = github_token(7);
    const std::string body = "a=" + token_ + "&b=" + second;
    auto v = ins.on_body(body);
    ASSERT_EQ(v.findings.size(), 2u);
    EXPECT_EQ(v.findings[0].offset, 2u);
    EXPECT_EQ(v.findings[1].offset, 2u + token_.size() + 3u);
    EXPECT_NE(v.findings[0].fingerprint, v.findings[1].fingerprint);
}

TEST_F(inspector_test, token_in_header_and_url) {
    inspector ins(pol_, *scanner_);
    const std::string value = "token " + token_;
    const header_view headers[] = {{"Accept", "*/*"}, {"X-Deploy-Key", value}};
    request_view req{"GET", "/", "api.example.com", 443, headers};
    auto h = ins.on_head(req);
    EXPECT_EQ(h.kind, verdict_kind::deny);
    EXPECT_EQ(h.reason, "dlp_finding");
    ASSERT_EQ(h.findings.size(), 1u);
    EXPECT_EQ(h.findings[0].location, "header:x-deploy-key");
    EXPECT_EQ(h.findings[0].offset, 6u);
    expect_no_secret(h);

    const std::string target = "/search?q=" + token_ + "&page=2";
    request_view url_req{"GET", target, "api.example.com", 443, {}};
    auto u = ins.on_head(url_req);
    EXPECT_EQ(u.kind, verdict_kind::deny);
    ASSERT_EQ(u.findings.size(), 1u);
    EXPECT_EQ(u.findings[0].location, "url");
    EXPECT_EQ(u.findings[0].offset, 10u);
    EXPECT_EQ(u.findings[0].fingerprint, detectors::fingerprint(token_));
}

TEST_F(inspector_test, proxy_authorization_is_not_scanned) {
    inspector ins(pol_, *scanner_);
    const std::string value = "Bearer " + token_;
    const header_view headers[] = {{"Proxy-Authorization", value}};
    request_view req{"GET", "/", "api.example.com", 443, headers};
    EXPECT_EQ(ins.on_head(req).kind, verdict_kind::forward);
    const header_view other[] = {{"Authorization", value}};
    request_view req2{"GET", "/", "api.example.com", 443, other};
    EXPECT_EQ(ins.on_head(req2).kind, verdict_kind::deny);
}

TEST_F(inspector_test, ignore_by_value_and_by_fingerprint) {
    const std::string other = github_token(99);
    const std::string body = "x " + token_ + " y";
    {
        pol_.dlp.ignore = {{"github-pat-classic", token_, ""}};
        inspector ins(pol_, *scanner_);
        EXPECT_EQ(ins.on_body(body).kind, verdict_kind::forward);
        // Another token of the same rule is still denied.
        auto v = ins.on_body("x " + other + " y");
        EXPECT_EQ(v.kind, verdict_kind::deny);
        ASSERT_EQ(v.findings.size(), 1u);
        EXPECT_EQ(v.findings[0].fingerprint, detectors::fingerprint(other));
    }
    {
        pol_.dlp.ignore = {{"github-pat-classic", "", detectors::fingerprint(token_)}};
        inspector ins(pol_, *scanner_);
        EXPECT_EQ(ins.on_body(body).kind, verdict_kind::forward);
        EXPECT_EQ(ins.on_body(other).kind, verdict_kind::deny);
    }
    {
        // Same value, different rule: not ignored.
        pol_.dlp.ignore = {{"aws-access-key-id", token_, ""}};
        inspector ins(pol_, *scanner_);
        EXPECT_EQ(ins.on_body(body).kind, verdict_kind::deny);
    }
}

TEST_F(inspector_test, detectors_filter_by_rule_id_category_or_all) {
    const std::string body = "k=" + token_;
    auto run = [&](std::vector<std::string> dets) {
        pol_.dlp.detectors = std::move(dets);
        inspector ins(pol_, *scanner_);
        return ins.on_body(body).kind;
    };
    EXPECT_EQ(run({"all"}), verdict_kind::deny);
    EXPECT_EQ(run({"vcs"}), verdict_kind::deny);
    EXPECT_EQ(run({"github-pat-classic"}), verdict_kind::deny);
    EXPECT_EQ(run({"github-oauth-token"}), verdict_kind::forward);
    EXPECT_EQ(run({"llm-key"}), verdict_kind::forward);
    EXPECT_EQ(run({}), verdict_kind::forward);
}

TEST_F(inspector_test, on_finding_supervise_and_log) {
    const std::string body = "k=" + token_;
    pol_.dlp.on_finding = finding_action::supervise;
    {
        inspector ins(pol_, *scanner_);
        auto v = ins.on_body(body);
        EXPECT_EQ(v.kind, verdict_kind::supervise);
        EXPECT_EQ(v.status, 403);
        EXPECT_EQ(v.reason, "dlp_finding");
        EXPECT_EQ(v.findings.size(), 1u);
    }
    pol_.dlp.on_finding = finding_action::log;
    {
        inspector ins(pol_, *scanner_);
        auto v = ins.on_body(body);
        EXPECT_EQ(v.kind, verdict_kind::forward);
        ASSERT_EQ(v.findings.size(), 1u); // kept for audit and metrics
        EXPECT_EQ(v.findings[0].rule, "github-pat-classic");
    }
}

TEST_F(inspector_test, max_body) {
    pol_.dlp.max_body = 64;
    inspector ins(pol_, *scanner_);
    const std::string at_limit(64, 'a');
    EXPECT_EQ(ins.on_body(at_limit).kind, verdict_kind::forward);
    auto v = ins.on_body(std::string(65, 'a'));
    EXPECT_EQ(v.kind, verdict_kind::deny);
    EXPECT_EQ(v.status, 413);
    EXPECT_EQ(v.reason, "body_too_large");
    // A secret inside the limit is still found.
    std::string body = token_;
    body.resize(64, ' ');
    EXPECT_EQ(ins.on_body(body).reason, "dlp_finding");
}
