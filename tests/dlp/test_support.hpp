// Helpers shared by the dlp tests: the compiled built-in rules (shared per process), a
// checksum-valid GitHub token generator and test-side RFC 4648 encoders (independent of the code
// under test, so a decoder bug cannot cancel out).
#pragma once

#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/validators.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dlp::test {

inline std::shared_ptr<const detectors::ruleset> builtin() {
    auto rules = config::builtin_ruleset();
    EXPECT_TRUE(rules.has_value());
    return rules.value_or(nullptr);
}

// The first example of built-in rule `id` (detectors/rules/*.yml), e.g. a real-shaped
// token; empty when there is none.
inline std::string rule_example(std::string_view id) {
    auto loaded = config::builtin_rules();
    for (const auto& r : loaded.value_or(std::vector<detectors::rule>{}))
        if (r.id == id && !r.examples.empty())
            return r.examples.front();
    return {};
}

// "ghp_" + 30 random base62 + base62 CRC32 of those 30 (github.blog 2021-04-05).
inline std::string github_token(std::uint32_t seed) {
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
    return "ghp_" + random + std::string(check, 6);
}

inline std::string to_hex(std::string_view in) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : in) {
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

inline std::string to_base32(std::string_view in, bool lower) {
    static constexpr char upper_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    std::string out;
    std::uint32_t acc = 0;
    int bits = 0;
    for (unsigned char c : in) {
        acc = (acc << 8) | c;
        bits += 8;
        while (bits >= 5) {
            bits -= 5;
            out += upper_alphabet[(acc >> bits) & 31];
        }
    }
    if (bits > 0) {
        out += upper_alphabet[(acc << (5 - bits)) & 31];
    }
    if (lower) {
        for (auto& ch : out) {
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
    }
    return out;
}

inline std::string to_base64url(std::string_view in) {
    static constexpr char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    std::uint32_t acc = 0;
    int bits = 0;
    for (unsigned char c : in) {
        acc = (acc << 8) | c;
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out += alphabet[(acc >> bits) & 63];
        }
    }
    if (bits > 0) {
        out += alphabet[(acc << (6 - bits)) & 63];
    }
    return out;
}

/// base64 (RFC 4648 section 4, padded) or base64url (section 5, unpadded) of `in`.
inline std::string to_base64(std::string_view in, bool url) {
    std::string out = to_base64url(in);
    if (!url) {
        for (auto& c : out) {
            c = c == '-' ? '+' : c == '_' ? '/' : c;
        }
        while (out.size() % 4 != 0) {
            out += '=';
        }
    }
    return out;
}

} // namespace sluice::dlp::test
