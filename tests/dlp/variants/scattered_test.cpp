// Base64 and hex cut into groups by any bytes outside the alphabet, over the real built-in
// rules (variant_scanner, whole bodies): the receiver strips what is not base64 and decodes
// the rest (dlp/src/variant_scattered.cpp). A second red-team pass got a token through with
// groups split by punctuation, a carriage return alone, groups of 1 to 3 characters, a JSON
// "\t", "\f" or "\n" and indentation between groups, and a word glued to the first group.
#include "coders.hpp"

#include "../test_support.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/variants.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::dlp;
namespace tc = sluice::test_coders;

namespace {

class scattered_test : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_NE(dlp::test::builtin(), nullptr);
        scanner_.emplace(dlp::test::builtin());
        tok_ = dlp::test::rule_example("github-pat-classic");
        ASSERT_FALSE(tok_.empty());
    }
    variant_status scan(std::string_view body, std::vector<variant_finding>& out,
                        variant_scanner::stats* work = nullptr, unsigned enabled = dec_all) {
        variant_options o;
        o.enabled = enabled;
        variant_scanner vs(*scanner_, o);
        out.clear();
        const auto st =
            vs.scan_body(body, body.starts_with('{') ? "application/json" : "", "", out);
        if (work != nullptr)
            *work = vs.counters();
        return st;
    }
    bool found(std::string_view body) {
        std::vector<variant_finding> out;
        EXPECT_EQ(scan(body, out), variant_status::ok);
        for (const auto& f : out)
            if (f.f.rule_id == "github-pat-classic")
                return true;
        return false;
    }
    static std::string random_bytes(std::size_t n, unsigned seed) {
        std::mt19937 rng(seed);
        std::string r(n, '\0');
        for (auto& ch : r)
            ch = static_cast<char>(rng());
        return r;
    }
    // The groups of `s`, `sep` between them, in a line of text, a JSON value (JSON escapes
    // written as they are sent) and a JSON value with a word glued to the first group.
    std::vector<std::string> bodies(const std::string& s, std::size_t w, const std::string& sep) {
        const std::string g = tc::spaced(s, w, sep);
        return {"data " + g + "\n", "{\"data\": \"" + g + "\", \"note\": \"hello\"}",
                "{\"data\": \"Zq" + g + "\"}"};
    }
    std::optional<detectors::scanner> scanner_;
    std::string tok_;
};

} // namespace

TEST_F(scattered_test, a_token_in_grouped_base64_is_found_whatever_is_between_the_groups) {
    const std::string text = tc::base64("my token is " + tok_ + " ok");
    const std::string binary = tc::base64(random_bytes(200, 3) + tok_ + random_bytes(50, 4));
    for (const auto& s : {text, binary})
        for (const std::size_t w : {1, 2, 3, 5, 7, 12, 33, 100})
            for (const std::string sep : {".", ",", ":", ";", "|", "*", "=", "\r", "-", ". ",
                                          "\\n    ", "\\t", "\\f", "\\r\\n", "\\u0020"})
                for (const auto& body : bodies(s, w, sep))
                    EXPECT_TRUE(found(body)) << (s == text ? "text" : "binary") << " w " << w
                                             << " sep '" << sep << "': " << body.substr(0, 80);
}

// A decoy at one alignment (groups whose join reads as text from its first character)
// does not hide the token at another (a glued letter the receiver strips).
TEST_F(scattered_test, a_text_decoy_at_one_alignment_does_not_hide_another) {
    const std::string decoy = tc::base64(std::string(60, 'a'));
    const std::string hidden = tc::base64(random_bytes(100, 9) + tok_ + random_bytes(30, 10));
    for (const std::string glue : {"x", "xy", "xyz"})
        for (const std::string sep : {" ", ".", "\r"})
            EXPECT_TRUE(found("data " + tc::spaced(decoy + glue + hidden, 8, sep) + "\n"))
                << "glue '" << glue << "' sep '" << sep << "'";
}

TEST_F(scattered_test, hex_in_groups_split_by_punctuation_is_decoded) {
    std::string hex;
    for (const unsigned char ch : "token " + tok_)
        hex += "0123456789abcdef"[ch >> 4], hex += "0123456789abcdef"[ch & 15];
    for (const std::string sep : {".", "|", "\\n  "})
        EXPECT_TRUE(found("{\"h\": \"" + tc::spaced(hex, 6, sep) + "\"}")) << sep;
}

// Text with capitals, digits and punctuation is not read as base64 to a finding, and a long
// labelled base64 value (one piece, which the event loop decodes whole) is not decoded a
// second time: the pass adds a few kilobytes, not the value's size.
TEST_F(scattered_test, clean_text_finds_nothing_and_a_long_value_is_not_decoded_twice) {
    std::vector<variant_finding> out;
    std::string clean;
    std::mt19937 rng(5);
    for (int i = 0; i < 400; ++i)
        clean += "ID-" + std::to_string(rng()) + ", Status: OK; Region US-EAST-" +
                 std::to_string(i % 7) + " | Build 2026.12." + std::to_string(i) + "\n";
    EXPECT_EQ(scan(clean, out), variant_status::ok);
    EXPECT_TRUE(out.empty()) << out.size() << " findings, first " << out[0].f.rule_id;

    const std::string value = tc::base64(random_bytes(600 * 1024, 11));
    const std::string one = "{\"image\": \"" + value + "\", \"name\": \"photo.png\"}";
    variant_scanner::stats with{}, without{};
    ASSERT_EQ(scan(one, out, &with), variant_status::ok);
    EXPECT_TRUE(out.empty());
    ASSERT_EQ(scan(one, out, &without, dec_all & ~dec_scattered), variant_status::ok);
    EXPECT_GT(with.decoded_bytes, without.decoded_bytes); // the labels and the value's ends
    EXPECT_LT(with.decoded_bytes, without.decoded_bytes + 16 * 1024)
        << with.decoded_bytes << " vs " << without.decoded_bytes;
}

// A backslash in base64 outside a string is no escape: "\b" and "\0" were read as one, the
// letter after the backslash left out and the token lost (a third red-team find).
TEST_F(scattered_test, a_stray_backslash_does_not_eat_the_next_letter) {
    const std::string b64 = tc::base64(tok_);
    for (std::size_t at = 1; at + 1 < b64.size(); ++at) {
        if (b64[at] != 'b' && b64[at] != '0' && b64[at] != 'n' && b64[at] != 't')
            continue;
        EXPECT_TRUE(found("d: " + b64.substr(0, at) + "\\" + b64.substr(at) + "\n"))
            << "backslash before " << at << " ('" << b64[at] << "')";
    }
}
