// One private key keeps one fingerprint whether it is sent as written, with CRLF line
// ends, flattened onto one line, or inside a JSON string with literal \n or \r\n escapes.
// Keys are generated fresh with OpenSSL and scanned with the built-in rule pack.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/finding.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"

#include <openssl/bio.h>
#include <openssl/encoder.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using namespace sluice;

std::shared_ptr<const detectors::ruleset> builtin() {
    return config::builtin_ruleset().value_or(nullptr);
}

// "type-specific" PEM: "-----BEGIN RSA PRIVATE KEY-----" / "-----BEGIN EC PRIVATE KEY-----",
// 64-column lines, LF line ends.
std::string traditional_pem(EVP_PKEY* key) {
    std::unique_ptr<OSSL_ENCODER_CTX, decltype(&OSSL_ENCODER_CTX_free)> ctx(
        OSSL_ENCODER_CTX_new_for_pkey(key, EVP_PKEY_KEYPAIR, "PEM", "type-specific", nullptr),
        &OSSL_ENCODER_CTX_free);
    unsigned char* data = nullptr;
    std::size_t len = 0;
    if (!ctx || OSSL_ENCODER_to_data(ctx.get(), &data, &len) != 1)
        return {};
    std::string pem(reinterpret_cast<const char*>(data), len);
    OPENSSL_free(data);
    return pem;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (std::size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size()))
        s.replace(i, from.size(), to);
    return s;
}

struct result {
    std::string rule;
    std::string fingerprint;
    std::string raw_fingerprint;
};

// The single private-key finding in `text`.
result scan_key(const std::string& text) {
    detectors::scanner s(builtin());
    std::vector<detectors::finding> out;
    EXPECT_TRUE(s.scan(text, out));
    result r;
    int keys = 0;
    for (const auto& f : out) {
        if (f.category != "private-key")
            continue;
        ++keys;
        r.rule = f.rule_id;
        r.fingerprint = f.fingerprint;
        r.raw_fingerprint =
            detectors::fingerprint(std::string_view(text).substr(f.begin, f.end - f.begin));
        EXPECT_EQ(f.fingerprint, detectors::key_material_fingerprint(
                                     std::string_view(text).substr(f.begin, f.end - f.begin)));
    }
    EXPECT_EQ(keys, 1) << "private-key findings";
    return r;
}

void expect_one_fingerprint_across_forms(const std::string& pem, const std::string& rule) {
    ASSERT_FALSE(pem.empty());
    const std::vector<std::pair<std::string, std::string>> forms = {
        {"as written", pem},
        {"CRLF", replace_all(pem, "\n", "\r\n")},
        {"flattened", replace_all(pem, "\n", " ")},
        {"JSON \\n", "{\"private_key\": \"" + replace_all(pem, "\n", "\\n") + "\"}"},
        {"JSON \\r\\n", "{\"private_key\": \"" + replace_all(pem, "\n", "\\r\\n") + "\"}"},
    };
    const result first = scan_key(forms[0].second);
    EXPECT_EQ(first.rule, rule);
    ASSERT_FALSE(first.fingerprint.empty());
    // The secret range spans line breaks, so the raw bytes differ between forms and only
    // the canonical fingerprint can agree.
    EXPECT_NE(first.fingerprint, first.raw_fingerprint);
    for (const auto& [name, text] : forms) {
        const result r = scan_key(text);
        EXPECT_EQ(r.rule, rule) << name;
        EXPECT_EQ(r.fingerprint, first.fingerprint) << name;
    }
}

TEST(key_fingerprint, rsa_key_has_one_fingerprint_in_every_form) {
    ASSERT_TRUE(builtin());
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_RSA_gen(2048), &EVP_PKEY_free);
    ASSERT_TRUE(key);
    expect_one_fingerprint_across_forms(traditional_pem(key.get()), "private-key-rsa");
}

TEST(key_fingerprint, ec_key_has_one_fingerprint_in_every_form) {
    ASSERT_TRUE(builtin());
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
        EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"), &EVP_PKEY_free);
    ASSERT_TRUE(key);
    expect_one_fingerprint_across_forms(traditional_pem(key.get()), "private-key-ec");
}

TEST(key_fingerprint, different_keys_differ) {
    ASSERT_TRUE(builtin());
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> a(EVP_RSA_gen(2048), &EVP_PKEY_free);
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> b(EVP_RSA_gen(2048), &EVP_PKEY_free);
    ASSERT_TRUE(a && b);
    EXPECT_NE(scan_key(traditional_pem(a.get())).fingerprint,
              scan_key(traditional_pem(b.get())).fingerprint);
}

TEST(key_fingerprint, canonical_form_drops_only_separators) {
    using detectors::fingerprint;
    using detectors::key_material_fingerprint;
    EXPECT_EQ(key_material_fingerprint("MIIE ogIB\r\nAAKC\\nAQEA\\r\\nlIjm\tB8B5"),
              fingerprint("MIIEogIBAAKCAQEAlIjmB8B5"));
    // A backslash not starting \n or \r is content, as is every base64 character.
    EXPECT_EQ(key_material_fingerprint("ab\\tcd"), fingerprint("ab\\tcd"));
    EXPECT_EQ(key_material_fingerprint("ab\\"), fingerprint("ab\\"));
    EXPECT_NE(key_material_fingerprint("MIIEogIB"), key_material_fingerprint("MIIEogIC"));
}

} // namespace
