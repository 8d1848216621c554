// Base64 of binary bytes, and the depth of decoder chains, over the real built-in rules
// (variant_scanner, whole bodies; the streamed cases are in body_stream_test.cpp).
// - A token or a compressed stream inside base64 of binary is found whatever is glued in
//   front of the base64 and whatever padding follows it: binary has no text to tell the
//   alignment by, so a binary run is decoded at all four (variant_runs.cpp binary_run).
// - Garbage that decodes to a near copy of itself does not reach max_depth on a clean body,
//   and a long one is refused by the byte budget in bounded work.
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

class binary_runs_test : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_NE(dlp::test::builtin(), nullptr);
        scanner_.emplace(dlp::test::builtin());
        tok_ = dlp::test::rule_example("github-pat-classic");
        ASSERT_FALSE(tok_.empty());
    }
    variant_status scan(std::string_view body, std::vector<variant_finding>& out) {
        variant_scanner vs(*scanner_);
        out.clear();
        return vs.scan_body(body, body.starts_with('{') ? "application/json" : "", "", out);
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
    static std::string unpadded(std::string b64) {
        while (!b64.empty() && b64.back() == '=')
            b64.pop_back();
        return b64;
    }
    std::optional<detectors::scanner> scanner_;
    std::string tok_;
};

} // namespace

// "x" + base64(random bytes + token), unpadded, in a JSON value went through: the run was
// decoded from its start, and the glued letter turned every byte after it into noise.
// Forged padding ("=" after unpadded base64) misled the padding count the same way.
TEST_F(binary_runs_test, a_token_in_base64_of_binary_is_found_at_any_alignment) {
    for (unsigned seed = 1; seed <= 8; ++seed) {
        const std::string blob = random_bytes(300 + seed, seed) + tok_ + random_bytes(31, seed);
        const std::string b64 = unpadded(tc::base64(blob));
        for (const std::string glue : {"", "x", "xy", "xyz", "data"}) {
            for (const std::string pad : {"", "=", "=="}) {
                const std::string value = glue + b64 + pad;
                EXPECT_TRUE(found("{\"file\": \"" + value + "\"}"))
                    << "seed " << seed << " glue '" << glue << "' pad '" << pad << "'";
                EXPECT_TRUE(found("upload " + glue + tc::spaced(b64, 76, "\r\n") + pad + "\r\n"))
                    << "seed " << seed << " glue '" << glue << "' pad '" << pad << "' lines";
            }
        }
    }
}

TEST_F(binary_runs_test, a_stream_in_base64_of_binary_is_found_at_any_alignment) {
    const std::string z = tc::zlib("the deploy key is " + tok_ + " and some words after it");
    for (unsigned seed = 1; seed <= 6; ++seed) {
        const std::string b64 = unpadded(tc::base64(random_bytes(2000 + seed, seed) + z));
        for (const std::string glue : {"", "q", "qr", "qrs"})
            EXPECT_TRUE(found("{\"png\": \"" + glue + b64 + "\"}"))
                << "seed " << seed << " glue '" << glue << "'";
    }
}

// Clean binary stays clean, and costs four decodes, not a refusal: 3 MiB of random bytes,
// unpadded, as a JSON value.
TEST_F(binary_runs_test, clean_base64_of_binary_passes_at_any_alignment) {
    for (const std::string glue : {"", "x"}) {
        const std::string body =
            "{\"image\": \"" + glue + unpadded(tc::base64(random_bytes((3 << 20) + 2, 9))) + "\"}";
        std::vector<variant_finding> out;
        EXPECT_EQ(scan(body, out), variant_status::ok) << "glue '" << glue << "'";
        EXPECT_TRUE(out.empty()) << out.front().f.rule_id;
    }
}

// Near copies: percent-encoding of '%' nested 40 deep, and raw DEFLATE of "\x12" bytes (the
// same bytes less one, each layer), are decoded and scanned to the end instead of being
// refused at max_depth; the token under them is found. A long run of "\x12" (k levels of k
// bytes) is refused by the byte budget, after bounded work (it took 53 s for 200 KB when
// each copy was opened in place).
TEST_F(binary_runs_test, near_copies_do_not_count_against_max_depth) {
    std::vector<variant_finding> out;
    std::string nested = "%";
    for (int k = 0; k < 40; ++k)
        nested += "25";
    nested += "41";
    EXPECT_EQ(scan("{\"q\": \"" + nested + "\"}", out), variant_status::ok);
    EXPECT_TRUE(found("{\"q\": \"" + nested + "\", \"k\": \"" + tok_ + "\"}"));
    const std::string fixed(600, '\x12');
    EXPECT_EQ(scan(fixed, out), variant_status::ok);
    EXPECT_TRUE(found(fixed + " key=" + tok_));
    EXPECT_EQ(scan(std::string(200000, '\x12'), out), variant_status::over_budget);
    // A chain that does not shrink still counts: gzip of gzip 20 deep is over budget.
    std::string gz = "key=" + tok_;
    for (int k = 0; k < 20; ++k)
        gz = tc::gzip(gz);
    EXPECT_EQ(scan(gz, out), variant_status::over_budget);
}

namespace {

// `carrier` with the bits of `payload` written from bit `at` on (most significant first):
// base64 of the result decoded from character `shift` on holds the payload when `at` is
// 6 * shift plus a multiple of 8.
std::string overwrite_bits(std::string carrier, std::string_view payload, std::size_t at) {
    for (std::size_t k = 0; k < payload.size() * 8; ++k) {
        const std::size_t bit = at + k;
        const bool on = (static_cast<unsigned char>(payload[k / 8]) >> (7 - k % 8)) & 1;
        auto& byte = reinterpret_cast<unsigned char&>(carrier[bit / 8]);
        const unsigned mask = 1u << (7 - bit % 8);
        byte = static_cast<unsigned char>(on ? byte | mask : byte & ~mask);
    }
    return carrier;
}

std::string grouped(std::string_view s, std::size_t width, std::string_view sep) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); i += width)
        out += (i ? std::string(sep) : std::string()) + std::string(s.substr(i, width));
    return out;
}

} // namespace

// Red-team finds against the first version, which decoded the other alignments only when
// none was useful: a run whose first alignment decodes to prose, or starts with a short
// zlib stream, hid the token's bits at a shifted alignment (the receiver strips the first
// characters). And base64 of binary in groups (spaces, tabs, or lines under 16
// characters) was decoded at one alignment and dropped as noise.
TEST_F(binary_runs_test, a_decoy_at_one_alignment_does_not_hide_another) {
    std::string prose;
    while (prose.size() < 1200)
        prose += "the quick brown fox jumps over a lazy dog and then some more prose ";
    prose.resize(1200);
    const std::string z =
        tc::zlib("hello world, nothing to see") + random_bytes(600, 5) + std::string(2, '\0');
    const std::string zc = z.substr(0, z.size() / 3 * 3);
    for (std::size_t shift = 1; shift <= 3; ++shift) {
        const std::string text = tc::base64(overwrite_bits(prose, tok_, 6 * shift + 8 * 400));
        EXPECT_TRUE(found("{\"f\": \"" + text + "\"}")) << "prose, shift " << shift;
        std::string s = unpadded(tc::base64(overwrite_bits(zc, tok_, 6 * shift + 8 * 300)));
        s += std::string((4 - (s.size() - shift) % 4) % 4, 'A');
        EXPECT_TRUE(found("{\"f\": \"" + s + "\"}")) << "zlib, shift " << shift;
    }
    const std::string b64 = tc::base64(random_bytes(300, 6) + tok_ + random_bytes(50, 7));
    for (const auto& [width, sep] : std::vector<std::pair<std::size_t, std::string>>{
             {60, " "}, {64, " "}, {60, "\t"}, {8, "\n"}, {12, "\r\n"}, {76, "  "}})
        EXPECT_TRUE(found("upload\n" + grouped(b64, width, sep) + "\n"))
            << "width " << width << " sep " << static_cast<int>(sep[0]);
}
