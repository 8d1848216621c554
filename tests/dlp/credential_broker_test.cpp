// Credential brokering: where a placeholder is injected, where it denies, and masking of
// reflected secrets across chunk boundaries.
#include "sluice/dlp/credential_broker.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

using namespace sluice::dlp;

namespace {

const std::string openai_secret = "sk-proj-REALvalue0123456789abcdefABCDEF";
const std::string maps_secret = "AIzaREAL/value+with=reserved&chars";

credential_broker make_broker() {
    std::vector<brokered_credential> cs(2);
    cs[0].name = "openai";
    cs[0].placeholder = "sluice:openai";
    cs[0].secret = openai_secret;
    cs[0].hosts = {"api.openai.com"};
    cs[0].ports = {443};
    cs[0].path_prefix = "/v1/";
    cs[0].header_name = "Authorization";
    cs[0].header_value_template = "Bearer {secret}";
    cs[0].identities = {"patcher"};
    cs[1].name = "maps";
    cs[1].placeholder = "sluice:maps";
    cs[1].secret = maps_secret;
    cs[1].hosts = {"*.googleapis.com"};
    cs[1].ports = {443};
    cs[1].query_name = "key";
    return credential_broker(std::move(cs));
}

policy any_policy() {
    policy p;
    p.identity = "*";
    return p;
}

} // namespace

TEST(credential_broker, injects_header_for_identity_host_and_port_in_scope) {
    auto b = make_broker();
    std::vector<broker_header> hs{{"Content-Type", "application/json"},
                                  {"authorization", "Bearer sluice:openai"}};
    auto r = b.apply("patcher", any_policy(), "api.openai.com", 443, "/v1/chat", hs);
    // Outside the path prefix: out of scope.
    EXPECT_EQ(b.apply("patcher", any_policy(), "api.openai.com", 443, "/v2/chat", hs).outcome,
              broker_result::kind::out_of_scope);
    ASSERT_EQ(r.outcome, broker_result::kind::inject);
    ASSERT_EQ(r.header_values.size(), 1u);
    EXPECT_EQ(r.header_values[0].first, 1u);
    EXPECT_EQ(r.header_values[0].second, "Bearer " + openai_secret);
    EXPECT_EQ(r.credentials, std::vector<std::string>{"openai"});
    EXPECT_FALSE(r.target.has_value());
}

TEST(credential_broker, out_of_scope_host_port_identity_policy_and_place) {
    auto b = make_broker();
    std::vector<broker_header> auth{{"Authorization", "Bearer sluice:openai"}};
    auto deny = broker_result::kind::out_of_scope;
    EXPECT_EQ(b.apply("patcher", any_policy(), "evil.example", 443, "/", auth).outcome, deny);
    EXPECT_EQ(b.apply("patcher", any_policy(), "api.openai.com", 8443, "/v1/x", auth).outcome,
              deny);
    EXPECT_EQ(b.apply("other", any_policy(), "api.openai.com", 443, "/v1/x", auth).outcome, deny);
    policy narrow = any_policy();
    narrow.credentials = std::vector<std::string>{"maps"};
    EXPECT_EQ(b.apply("patcher", narrow, "api.openai.com", 443, "/v1/x", auth).outcome, deny);
    std::vector<broker_header> other{{"X-Debug", "sluice:openai"}};
    auto r = b.apply("patcher", any_policy(), "api.openai.com", 443, "/v1/x", other);
    EXPECT_EQ(r.outcome, deny);
    EXPECT_EQ(r.credentials, std::vector<std::string>{"openai"});
    EXPECT_TRUE(r.header_values.empty());
    // In the path, also percent-encoded.
    EXPECT_EQ(
        b.apply("patcher", any_policy(), "api.openai.com", 443, "/x/sluice%3Aopenai", {}).outcome,
        deny);
    // One good and one bad placement: nothing is injected.
    std::vector<broker_header> mixed{{"Authorization", "Bearer sluice:openai"},
                                     {"Cookie", "k=sluice:openai"}};
    auto m = b.apply("patcher", any_policy(), "api.openai.com", 443, "/v1/x", mixed);
    EXPECT_EQ(m.outcome, deny);
    EXPECT_TRUE(m.header_values.empty());
}

TEST(credential_broker, injects_query_value_percent_encoded_and_keeps_other_params) {
    auto b = make_broker();
    auto r = b.apply("anyone", any_policy(), "maps.googleapis.com", 443,
                     "/geo?a=1+2&key=sluice%3Amaps&b=%2F", {});
    ASSERT_EQ(r.outcome, broker_result::kind::inject);
    ASSERT_TRUE(r.target.has_value());
    EXPECT_EQ(*r.target, "/geo?a=1+2&key=AIzaREAL%2Fvalue%2Bwith%3Dreserved%26chars&b=%2F");
    // Both forms an origin could echo back are masked.
    EXPECT_EQ(r.reflections, (std::vector<std::string>{
                                 maps_secret, "AIzaREAL%2Fvalue%2Bwith%3Dreserved%26chars"}));
    // Under another parameter name, or as a name: out of scope.
    EXPECT_EQ(b.apply("anyone", any_policy(), "maps.googleapis.com", 443, "/geo?q=sluice:maps", {})
                  .outcome,
              broker_result::kind::out_of_scope);
    EXPECT_EQ(b.apply("anyone", any_policy(), "maps.googleapis.com", 443, "/geo?sluice:maps=1", {})
                  .outcome,
              broker_result::kind::out_of_scope);
    // The bare apex does not match "*.googleapis.com".
    EXPECT_EQ(
        b.apply("anyone", any_policy(), "googleapis.com", 443, "/geo?key=sluice:maps", {}).outcome,
        broker_result::kind::out_of_scope);
}

TEST(credential_broker, no_placeholder_is_none_and_empty_broker_is_inert) {
    auto b = make_broker();
    std::vector<broker_header> hs{{"Authorization", "Bearer something-else"}};
    EXPECT_EQ(b.apply("patcher", any_policy(), "api.openai.com", 443, "/v1?x=1", hs).outcome,
              broker_result::kind::none);
    credential_broker none({});
    EXPECT_TRUE(none.empty());
    EXPECT_EQ(none.apply("x", any_policy(), "h", 1, "/sluice:openai", hs).outcome,
              broker_result::kind::none);
}

TEST(secret_masker, masks_headers_and_bodies_across_every_split) {
    secret_masker m({openai_secret});
    std::string h = "echo: Bearer " + openai_secret;
    EXPECT_EQ(m.mask(h), openai_secret.size());
    EXPECT_EQ(h, "echo: Bearer " + std::string(openai_secret.size(), '*'));

    std::string body =
        "{\"auth\":\"Bearer " + openai_secret + "\",\"again\":\"" + openai_secret + "\"}";
    std::string expected = body;
    for (auto at = expected.find(openai_secret); at != std::string::npos;
         at = expected.find(openai_secret, at))
        expected.replace(at, openai_secret.size(), openai_secret.size(), '*');
    for (std::size_t step = 1; step <= body.size(); ++step) {
        secret_masker s({openai_secret});
        std::string out;
        for (std::size_t at = 0; at < body.size(); at += step) {
            auto piece = body.substr(at, step);
            out += s.feed(piece, at + step >= body.size());
        }
        ASSERT_EQ(out, expected) << "step " << step;
        EXPECT_EQ(s.masked(), 2 * openai_secret.size());
    }
}

TEST(secret_masker, near_misses_and_occurrences_at_every_offset_of_a_large_body) {
    // Text full of near misses (one character differs in the middle, so no 12-byte
    // window of the secret matches), with the secret itself at many offsets, the very end
    // and the held-back tail among them, checked against a plain search, fed whole and in
    // uneven pieces.
    const std::string secret = "Qx-brokered-7f3a9c";
    std::string body;
    for (int i = 0; body.size() < 64 * 1024; ++i)
        body += (i % 3 == 0 ? "Qx-broke#ed-7f3a9c" : "Q..........- ") + std::to_string(i) + ' ';
    std::vector<std::size_t> at_offsets;
    for (std::size_t at = 0; at + secret.size() <= body.size(); at += 997 + at % 17)
        at_offsets.push_back(at);
    at_offsets.push_back(body.size() - secret.size()); // the very end
    for (auto at : at_offsets)
        body.replace(at, secret.size(), secret);
    std::string expected = body;
    std::size_t count = 0;
    for (auto at = expected.find(secret); at != std::string::npos; at = expected.find(secret, at)) {
        expected.replace(at, secret.size(), secret.size(), '*');
        ++count;
    }
    ASSERT_GT(count, 60u);
    for (std::size_t step :
         {body.size(), std::size_t{16 * 1024}, std::size_t{4093}, std::size_t{31}}) {
        secret_masker s({secret});
        std::string out;
        for (std::size_t at = 0; at < body.size(); at += step)
            out += s.feed(std::string_view(body).substr(at, step), at + step >= body.size());
        ASSERT_EQ(out, expected) << "step " << step;
        EXPECT_EQ(s.masked(), count * secret.size()) << "step " << step;
    }
}

TEST(secret_masker, inactive_without_secrets_passes_bytes_through) {
    secret_masker m(std::vector<std::string_view>{});
    EXPECT_FALSE(m.active());
    EXPECT_EQ(m.feed("abc", false), "abc");
}

TEST(secret_masker, overlapping_secrets_are_hidden_whole_at_every_split) {
    // One secret is a prefix of another: however the body is split, the union of both is
    // masked, never the short one alone with the rest of the long one left visible.
    const std::string longer = "SECRET-header-0123456789";
    const std::string shorter = "SECRET";
    const std::string body = "a SECRETSECRET-header-0123456789 b SECRET c";
    std::string expected = body;
    expected.replace(2, 6 + longer.size(), 6 + longer.size(), '*');
    expected.replace(35, 6, 6, '*');
    for (std::size_t step = 1; step <= body.size(); ++step) {
        secret_masker s({shorter, longer});
        std::string out;
        for (std::size_t at = 0; at < body.size(); at += step)
            out += s.feed(body.substr(at, step), at + step >= body.size());
        ASSERT_EQ(out, expected) << "step " << step;
        EXPECT_EQ(s.masked(), 6 + longer.size() + 6);
    }
    std::string h = body;
    secret_masker m({shorter, longer});
    EXPECT_EQ(m.mask(h), 6 + longer.size() + 6);
    EXPECT_EQ(h, expected);
}

namespace {

std::string b64(std::string_view in, bool url) {
    return sluice::dlp::test::to_base64(in, url);
}

std::string hex(std::string_view in, bool upper) {
    std::string out = sluice::dlp::test::to_hex(in);
    if (upper) {
        for (auto& c : out) {
            c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        }
    }
    return out;
}

// Feeds `body` to a masker over reflection_forms(secret) in pieces of `step` bytes.
std::string masked(const std::string& secret, const std::string& body, std::size_t step) {
    const auto forms = reflection_forms(secret);
    secret_masker m(std::vector<std::string_view>(forms.begin(), forms.end()));
    std::string out;
    for (std::size_t at = 0; at < body.size(); at += step) {
        out += m.feed(body.substr(at, step), at + step >= body.size());
    }
    return out;
}

} // namespace

TEST(secret_masker, encoded_echoes_are_masked_at_every_split) {
    // base64 and base64url at all three alignments inside a longer blob, hex in both cases.
    const std::string secret = "sk-proj-REAL/value+0123456789?abc";
    std::vector<std::string> echoes = {hex(secret, false), hex(secret, true)};
    for (const std::string lead : {"", "x", "xy"}) {
        echoes.push_back(b64(lead + secret + "tail", false));
        echoes.push_back(b64(lead + secret + "tail", true));
    }
    for (const auto& echo : echoes) {
        const std::string body = "{\"echo\":\"" + echo + "\"}";
        for (std::size_t step = 1; step <= body.size(); step += 7) {
            const std::string out = masked(secret, body, step);
            ASSERT_EQ(out.size(), body.size());
            // No run of 12 bytes of the echo survives.
            for (std::size_t i = 0; i + 12 <= echo.size(); ++i) {
                ASSERT_EQ(out.find(echo.substr(i, 12)), std::string::npos)
                    << echo << " step " << step;
            }
        }
    }
}

TEST(secret_masker, prefixes_of_twelve_bytes_or_more_are_masked_shorter_ones_are_not) {
    const std::string secret = "sk-proj-REALvalue0123456789abcdefABCDEF";
    const std::string cut = secret.substr(0, 12);
    const std::string longer = secret.substr(0, 25);
    const std::string eleven = secret.substr(0, 11);
    const std::string body = "a " + cut + " b " + longer + "\" c " + eleven + " d " + longer;
    std::string expected = body;
    const std::size_t at_cut = 2;
    const std::size_t at_longer = at_cut + cut.size() + 3;
    expected.replace(at_cut, cut.size(), cut.size(), '*');
    expected.replace(at_longer, longer.size(), longer.size(), '*');
    // The last one ends the body: held back until `last`, then masked.
    expected.replace(body.size() - longer.size(), longer.size(), longer.size(), '*');
    for (std::size_t step = 1; step <= body.size(); ++step) {
        secret_masker m({secret});
        std::string out;
        for (std::size_t at = 0; at < body.size(); at += step) {
            out += m.feed(body.substr(at, step), at + step >= body.size());
        }
        ASSERT_EQ(out, expected) << "step " << step;
        EXPECT_EQ(m.masked(), cut.size() + 2 * longer.size());
    }
    std::string h = "x-echo: " + longer;
    secret_masker m({secret});
    EXPECT_EQ(m.mask(h), longer.size());
}

TEST(secret_masker, re_cased_reversed_escaped_and_split_echoes_are_masked_at_every_split) {
    // Issue 25 (red-team item 9): an origin that echoes the secret upper-cased, reversed,
    // as JSON \u00XX escapes (every byte, or only the HTML-unsafe ones), or split in two by
    // a space. No piece of 12 bytes of the secret, in any of those forms, survives.
    const std::string secret = "sk-proj-Brokered/Value+0123456789";
    std::string upper = secret, every, safe;
    for (auto& c : upper)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (char c : secret) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04X", static_cast<unsigned char>(c));
        every += esc;
        safe += (c == '/' || c == '+') ? std::string(esc) : std::string(1, c);
    }
    std::string pct;
    for (char c : secret) {
        char esc[4];
        std::snprintf(esc, sizeof esc, "%%%02X", static_cast<unsigned char>(c));
        pct += esc;
    }
    const std::string reversed(secret.rbegin(), secret.rend());
    const std::string split = secret.substr(0, 16) + " " + secret.substr(16);
    for (const auto& echo : {upper, every, safe, pct, reversed, split}) {
        const std::string body = "{\"echo\":\"" + echo + "\",\"n\":1}";
        for (std::size_t step = 1; step <= body.size(); step += 5) {
            const std::string out = masked(secret, body, step);
            ASSERT_EQ(out.size(), body.size());
            EXPECT_EQ(out.substr(0, 9), "{\"echo\":\"") << echo;
            EXPECT_EQ(out.substr(out.size() - 8), "\",\"n\":1}") << echo;
            // Every character of the echo is starred, the split's space aside.
            for (std::size_t i = 9; i < 9 + echo.size(); ++i) {
                if (echo[i - 9] != ' ') {
                    ASSERT_EQ(out[i], '*') << echo << " at " << i - 9 << " step " << step;
                }
            }
        }
    }
    // Pieces shorter than 12 bytes are left (as for prefixes): "sk-proj-Bro" alone.
    EXPECT_EQ(masked(secret, "a sk-proj-Bro b", 3), "a sk-proj-Bro b");
}

TEST(reflection_forms, include_hex_and_base64_forms) {
    const auto forms = reflection_forms("abcdef");
    for (const char* want : {"abcdef", "616263646566", "YWJjZGVm"}) {
        EXPECT_NE(std::find(forms.begin(), forms.end(), want), forms.end()) << want;
    }
}
