// ws_message_inspector (proxy/src/websocket_relay.hpp) over the real built-in rules: the
// carried tail finds a token split across two messages, a finding is reported once, at
// the message it ends in, with its offset in that message; and is_websocket_upgrade.
#include "websocket_relay.hpp"

#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/validators.hpp"

#include <gtest/gtest.h>

#include <random>

using namespace sluice;

namespace {

std::shared_ptr<const detectors::ruleset> builtin() {
    auto rules = config::builtin_ruleset();
    EXPECT_TRUE(rules.has_value());
    return rules.value_or(nullptr);
}

std::string github_token(std::uint32_t seed) {
    static constexpr char alphabet[] =
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> pick(0, 61);
    std::string random;
    for (int i = 0; i < 30; ++i)
        random += alphabet[pick(rng)];
    char check[6];
    detectors::base62_6(detectors::crc32(random), check);
    return "ghp_" + random + std::string(check, 6);
}

proxy::ws_message_inspector make(dlp::finding_action act = dlp::finding_action::deny) {
    dlp::policy p;
    p.dlp.on_finding = act;
    p.dlp.max_body = 64; // the reader limits size; the inspector must not refuse on it
    return proxy::ws_message_inspector(p, builtin(), {},
                                       proxy::ws_message_inspector::tail_for(*builtin()));
}

bool has_rule(const dlp::verdict& v, std::string_view rule) {
    for (const auto& f : v.findings)
        if (f.rule == rule)
            return true;
    return false;
}

TEST(ws_message_inspector, benign_messages_pass) {
    auto ins = make();
    for (const std::string& m :
         std::vector<std::string>{"hello", "ghp_ is a prefix", std::string(100000, 'x')}) {
        auto v = ins.on_message(m);
        EXPECT_EQ(v.kind, dlp::verdict_kind::forward) << m.substr(0, 40);
        EXPECT_TRUE(v.findings.empty());
    }
    EXPECT_EQ(ins.count(), 3u);
}

// The decode budget is per message: a long session of messages that each decode a little
// (random base62 text: base64 candidates everywhere) is not cut with decode_budget once
// the session's sum passes it (the relay benchmark's 4,000 1 KiB messages were).
TEST(ws_message_inspector, the_decode_budget_is_per_message_not_per_session) {
    dlp::policy p;
    p.dlp.max_body = 64;
    dlp::variant_options o;
    // Small, so a few hundred messages sum past it: one message (1 KiB and the carried
    // tail, base64 of binary at four alignments) decodes up to ~70 KiB.
    o.budget.max_decoded_bytes = 256u << 10;
    o.budget.decoded_floor = 256u << 10;
    proxy::ws_message_inspector ins(p, builtin(), o,
                                    proxy::ws_message_inspector::tail_for(*builtin()));
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> pick(0, 61);
    static constexpr char alphabet[] =
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for (int i = 0; i < 400; ++i) {
        std::string m;
        for (int k = 0; k < 1024; ++k)
            m += alphabet[pick(rng)];
        auto v = ins.on_message(m);
        ASSERT_EQ(v.kind, dlp::verdict_kind::forward) << "message " << i << ": " << v.reason;
    }
}

TEST(ws_message_inspector, token_in_a_message_is_located_there) {
    auto ins = make();
    const auto t = github_token(1);
    EXPECT_EQ(ins.on_message("first").kind, dlp::verdict_kind::forward);
    auto v = ins.on_message("key=" + t + " end");
    ASSERT_EQ(v.kind, dlp::verdict_kind::deny);
    EXPECT_EQ(v.reason, "dlp_finding");
    ASSERT_TRUE(has_rule(v, "github-pat-classic"));
    for (const auto& f : v.findings) {
        EXPECT_EQ(f.location, "ws:message:2");
        if (f.variant == "raw") {
            EXPECT_EQ(f.offset, 4u);
        }
        EXPECT_EQ(f.fingerprint.find(t), std::string::npos);
    }
}

TEST(ws_message_inspector, token_split_across_two_messages_is_found) {
    const auto t = github_token(2);
    // A message holding "ghp_" and 30 or more characters of a token is itself a finding
    // (github-token-look-alike), so the cuts stop short of that.
    for (std::size_t cut : {1u, 4u, 20u, 33u}) {
        auto ins = make();
        auto first = ins.on_message("padding " + t.substr(0, cut));
        EXPECT_EQ(first.kind, dlp::verdict_kind::forward) << cut;
        auto v = ins.on_message(t.substr(cut) + " more");
        ASSERT_EQ(v.kind, dlp::verdict_kind::deny) << cut;
        ASSERT_TRUE(has_rule(v, "github-pat-classic")) << cut;
        EXPECT_EQ(v.findings.front().location, "ws:message:2");
        EXPECT_EQ(v.findings.front().offset, 0u); // it began in the previous message
    }
}

TEST(ws_message_inspector, a_reload_between_two_halves_keeps_the_tail_and_the_count) {
    // The session starts under a policy that only logs, a reload makes findings deny:
    // the new inspector continues the old one's tail and message count.
    const auto t = github_token(4);
    auto before = make(dlp::finding_action::log);
    EXPECT_EQ(before.on_message("hello").kind, dlp::verdict_kind::forward);
    EXPECT_EQ(before.on_message("padding " + t.substr(0, 20)).kind, dlp::verdict_kind::forward);
    auto after = make(dlp::finding_action::deny);
    after.continue_from(before);
    EXPECT_EQ(after.count(), 2u);
    auto v = after.on_message(t.substr(20) + " more");
    ASSERT_EQ(v.kind, dlp::verdict_kind::deny);
    ASSERT_TRUE(has_rule(v, "github-pat-classic"));
    EXPECT_EQ(v.findings.front().location, "ws:message:3");
    // Without the carried tail the second half alone is nothing.
    auto fresh = make(dlp::finding_action::deny);
    EXPECT_EQ(fresh.on_message(t.substr(20) + " more").kind, dlp::verdict_kind::forward);
    // The same secret again after the reload: the detectors report a repeated secret
    // once, at its first place (the tail, let through under the old policy), so the
    // message is looked at on its own too.
    auto logged = make(dlp::finding_action::log);
    EXPECT_EQ(logged.on_message("a " + t + " b").kind, dlp::verdict_kind::forward);
    auto denying = make(dlp::finding_action::deny);
    denying.continue_from(logged);
    auto again = denying.on_message("again " + t);
    ASSERT_EQ(again.kind, dlp::verdict_kind::deny);
    ASSERT_TRUE(has_rule(again, "github-pat-classic"));
    EXPECT_EQ(again.findings.front().location, "ws:message:2");
}

TEST(ws_message_inspector, logged_finding_is_not_reported_again_from_the_tail) {
    auto ins = make(dlp::finding_action::log);
    const auto t = github_token(3);
    auto v1 = ins.on_message("a " + t + " b");
    EXPECT_EQ(v1.kind, dlp::verdict_kind::forward);
    EXPECT_TRUE(has_rule(v1, "github-pat-classic"));
    auto v2 = ins.on_message("nothing here");
    EXPECT_EQ(v2.kind, dlp::verdict_kind::forward);
    EXPECT_TRUE(v2.findings.empty());
}

TEST(ws_message_inspector, tail_is_bounded) {
    auto t = proxy::ws_message_inspector::tail_for(*builtin());
    EXPECT_GE(t, 256u);
    EXPECT_LE(t, 16u * 1024);
}

TEST(is_websocket_upgrade, needs_every_part_of_the_handshake) {
    namespace http = boost::beast::http;
    auto good = [] {
        http::request<http::string_body> r{http::verb::get, "/chat", 11};
        r.set(http::field::host, "example.com");
        r.set(http::field::connection, "keep-alive, Upgrade");
        r.set(http::field::upgrade, "websocket");
        r.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
        r.set(http::field::sec_websocket_version, "13");
        return r;
    };
    EXPECT_TRUE(proxy::is_websocket_upgrade(good()));
    auto r = good();
    r.method(http::verb::post);
    EXPECT_FALSE(proxy::is_websocket_upgrade(r));
    r = good();
    r.set(http::field::sec_websocket_version, "8");
    EXPECT_FALSE(proxy::is_websocket_upgrade(r));
    r = good();
    r.erase(http::field::sec_websocket_key);
    EXPECT_FALSE(proxy::is_websocket_upgrade(r));
    r = good();
    r.set(http::field::upgrade, "h2c");
    EXPECT_FALSE(proxy::is_websocket_upgrade(r));
    r = good();
    r.set(http::field::connection, "close");
    EXPECT_FALSE(proxy::is_websocket_upgrade(r));
    r = good();
    r.version(10);
    EXPECT_FALSE(proxy::is_websocket_upgrade(r));
}

} // namespace
