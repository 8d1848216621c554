// BIP-39 and the CRC-32 token validators (Grafana, Cloudflare, Atlassian): published test
// vectors, tokens built by each issuer's documented construction, and single-character
// corruptions that the checksum must catch.
#include "sluice/detectors/validators.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace sluice::detectors;

std::string repeat_word(const std::string& w, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
        if (i > 0)
            s += ' ';
        s += w;
    }
    return s;
}

std::string hex8(std::uint32_t v, bool upper) {
    char buf[9];
    std::snprintf(buf, sizeof buf, upper ? "%08X" : "%08x", v);
    return buf;
}

// Trezor python-mnemonic vectors.json (entropy -> mnemonic), the BIP-39 reference vectors.
TEST(bip39, reference_vectors_pass) {
    const std::vector<std::string> valid = {
        repeat_word("abandon", 11) + " about",                                         // 00 x 16
        "legal winner thank year wave sausage worth useful legal winner thank yellow", // 7f x 16
        "letter advice cage absurd amount doctor acoustic avoid letter advice cage above",
        repeat_word("zoo", 11) + " wrong",     // ff x 16
        repeat_word("abandon", 17) + " agent", // 00 x 24
        repeat_word("abandon", 23) + " art",   // 00 x 32
        repeat_word("zoo", 23) + " vote",      // ff x 32
        "scheme spot photo card baby mountain device kick cradle pact join borrow",
        "jelly better achieve collect unaware mountain thought cargo oxygen act hood bridge",
        // Entropy 00 01 02 ... (20 and 28 bytes) through python-mnemonic 0.19 to_mnemonic().
        "abandon amount liar amount expire adjust cage candy arch gather drum bullet absurd math "
        "exhibit",
        "abandon amount liar amount expire adjust cage candy arch gather drum bullet absurd math "
        "era live bid rhythm alien crouch saddle",
    };
    for (const auto& p : valid) {
        EXPECT_TRUE(bip39_ok(p)) << p;
        EXPECT_TRUE(validate("bip39", p)) << p;
    }
}

TEST(bip39, case_and_spacing) {
    EXPECT_TRUE(
        bip39_ok("LEGAL Winner thank year wave sausage worth useful legal winner thank yellow"));
    EXPECT_TRUE(
        bip39_ok("legal winner thank year wave sausage worth useful legal winner thank  yellow"));
}

TEST(bip39, checksum_word_count_and_list_are_enforced) {
    // All list words, wrong checksum.
    EXPECT_FALSE(bip39_ok(repeat_word("abandon", 12)));
    EXPECT_FALSE(
        bip39_ok("legal winner thank year wave sausage worth useful legal winner thank year"));
    EXPECT_FALSE(bip39_ok(
        "letter advice cage absurd amount doctor acoustic avoid letter advice cage about"));
    EXPECT_FALSE(bip39_ok(repeat_word("zoo", 24)));
    // Word counts outside 12/15/18/21/24.
    EXPECT_FALSE(bip39_ok(repeat_word("abandon", 8) + " about"));
    EXPECT_FALSE(bip39_ok(repeat_word("abandon", 12) + " about"));
    EXPECT_FALSE(bip39_ok(repeat_word("abandon", 26) + " about"));
    EXPECT_FALSE(bip39_ok(""));
    // Words not in the list (or not words).
    EXPECT_FALSE(bip39_ok(repeat_word("abandon", 11) + " abouts"));
    EXPECT_FALSE(bip39_ok("the quick brown fox jumps over the lazy dog and then sleeps"));
    EXPECT_FALSE(bip39_ok(repeat_word("abandon", 11) + " ab0ut"));
}

// The last word of a 12-word phrase carries 7 entropy bits and 4 checksum bits, of a
// 24-word phrase 3 and 8: exactly 128 (resp. 8) of the 2048 candidates complete a given
// prefix. Counting them checks the bit layout without hard-coding any phrase.
TEST(bip39, exactly_one_checksum_per_entropy_value) {
    // The candidates are the committed word list (detectors/data/bip39-english.txt).
    std::vector<std::string> list;
    std::FILE* f = std::fopen(SLUICE_BIP39_WORDS_FILE, "r");
    ASSERT_NE(f, nullptr);
    char line[32];
    while (std::fgets(line, sizeof line, f) != nullptr) {
        std::string w(line);
        while (!w.empty() && (w.back() == '\n' || w.back() == '\r'))
            w.pop_back();
        list.push_back(w);
    }
    std::fclose(f);
    ASSERT_EQ(list.size(), 2048u);
    int ok12 = 0, ok24 = 0;
    const std::string p12 = repeat_word("legal", 11) + ' ';
    const std::string p24 = repeat_word("zoo", 23) + ' ';
    for (const auto& w : list) {
        ok12 += bip39_ok(p12 + w) ? 1 : 0;
        ok24 += bip39_ok(p24 + w) ? 1 : 0;
    }
    EXPECT_EQ(ok12, 128);
    EXPECT_EQ(ok24, 8);
}

TEST(grafana, service_account_token) {
    // grafana/grafana pkg/components/satokengen/tokengen_test.go.
    EXPECT_TRUE(grafana_checksum_ok("glsa_iNValIdinValiDinvalidinvalidinva_5b582697"));
    // Built as tokengen.go does: CRC-32 of "glsa_" + secret, bytes least significant first.
    const std::string key = "glsa_u8jzPde0IgxLd6GncfBAepfJBd0Kh8oO";
    const std::uint32_t c = crc32(key);
    const std::uint32_t le =
        ((c & 0xffU) << 24) | ((c & 0xff00U) << 8) | ((c >> 8) & 0xff00U) | (c >> 24);
    const std::string token = key + "_" + hex8(le, false);
    EXPECT_TRUE(grafana_checksum_ok(token));
    EXPECT_TRUE(validate("grafana", token));
    // Big-endian hex of the same CRC, upper case, a changed secret byte: all rejected.
    EXPECT_FALSE(grafana_checksum_ok(key + "_" + hex8(c, false)));
    EXPECT_FALSE(grafana_checksum_ok(key + "_" + hex8(le, true)));
    std::string broken = token;
    broken[7] = broken[7] == 'a' ? 'b' : 'a';
    EXPECT_FALSE(grafana_checksum_ok(broken));
    EXPECT_FALSE(grafana_checksum_ok("glsa_e3TpmxYo7wnP8Q6uqfoQhWI4p93ztbwy"));
    EXPECT_FALSE(grafana_checksum_ok("_5b582697"));
}

TEST(cloudflare, scannable_tokens) {
    const std::string body = "TeKdNnFRIBXuDL7DxtpYlSXpfKtHF4vUCsMehGAk";
    const std::string sum = hex8(crc32(body), false);
    EXPECT_EQ(sum, "9ccf025b"); // zlib.crc32 in Python, computed independently
    for (const char* prefix : {"cfk_", "cfut_", "cfat_"}) {
        const std::string token = prefix + body + sum;
        EXPECT_TRUE(cloudflare_checksum_ok(token)) << token;
        EXPECT_TRUE(validate("cloudflare", token)) << token;
    }
    // The prefix is not covered by the CRC; the random part and the case of the hex are.
    EXPECT_FALSE(cloudflare_checksum_ok("cfut_" + body + hex8(crc32("cfut_" + body), false)));
    EXPECT_FALSE(cloudflare_checksum_ok("cfut_" + body + hex8(crc32(body), true)));
    std::string broken = "cfat_" + body + sum;
    broken[9] = broken[9] == 'a' ? 'b' : 'a';
    EXPECT_FALSE(cloudflare_checksum_ok(broken));
    EXPECT_FALSE(cloudflare_checksum_ok("cfxt_" + body + sum));
    EXPECT_FALSE(cloudflare_checksum_ok("cfut_" + body));
    EXPECT_FALSE(cloudflare_checksum_ok("cfut_" + body + sum + "0"));
}

TEST(atlassian, api_tokens) {
    // ATATT3 (API token) and ATCTT3 (access token): CRC-32 of everything before the last 8
    // characters, '=' included, upper-case hex.
    const std::string atatt =
        "ATATT3xFfGF09eaIXB0N7RicHG5cyOCxiBHpKS9W9hTR7jOh0orOsH5lQHOJfHk4SpqwN_6Yq9jKSQueTFYJPI"
        "sQY4wj_jyMzWTKZ32XblkwotXidkyuI_R3-X3RA_cUj34ODKckPTCY4nLt-VRNbvzoAnVU8_Cbs_jpve7XfqK2v"
        "CEovOGrxvo=";
    EXPECT_EQ(hex8(crc32(atatt), true), "82E192F8"); // zlib.crc32 in Python
    EXPECT_TRUE(atlassian_checksum_ok(atatt + "82E192F8"));
    EXPECT_TRUE(atlassian_checksum_ok(atatt + "82e192f8"));
    EXPECT_TRUE(validate("atlassian", atatt + "82E192F8"));
    const std::string atctt = "ATCTT3xFfGN0" + std::string(171, 'k') + "=";
    EXPECT_TRUE(atlassian_checksum_ok(atctt + hex8(crc32(atctt), true)));
    // Checksum without the '=' (a plausible misreading of the format) must not pass.
    EXPECT_FALSE(
        atlassian_checksum_ok(atatt + hex8(crc32(atatt.substr(0, atatt.size() - 1)), true)));
    std::string broken = atatt + "82E192F8";
    broken[20] = broken[20] == 'a' ? 'b' : 'a';
    EXPECT_FALSE(atlassian_checksum_ok(broken));
    EXPECT_FALSE(atlassian_checksum_ok(atatt + "82E192FG"));
    EXPECT_FALSE(atlassian_checksum_ok(atatt.substr(0, 40) + "~" + atatt.substr(41) + "82E192F8"));
    EXPECT_FALSE(atlassian_checksum_ok("ATATT3"));
}

TEST(validators, new_names_are_known) {
    for (const char* n : {"bip39", "grafana", "cloudflare", "atlassian"})
        EXPECT_TRUE(is_known_validator(n)) << n;
}

} // namespace
