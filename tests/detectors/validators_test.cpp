#include "sluice/detectors/finding.hpp"
#include "sluice/detectors/validators.hpp"

#include <gtest/gtest.h>

namespace {

using namespace sluice::detectors;

TEST(fingerprint, is_sha256_prefix) {
    // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
    EXPECT_EQ(fingerprint("abc"), "sha256:ba7816bf8f01cfea");
    EXPECT_EQ(fingerprint(""), "sha256:e3b0c44298fc1c14");
}

TEST(validators, crc32_and_base62) {
    EXPECT_EQ(crc32("123456789"), 0xcbf43926u); // the CRC-32 check value
    char out[6];
    base62_6(0, out);
    EXPECT_EQ(std::string_view(out, 6), "000000");
    base62_6(61, out);
    EXPECT_EQ(std::string_view(out, 6), "00000z");
    base62_6(62, out);
    EXPECT_EQ(std::string_view(out, 6), "000010");
}

TEST(validators, github_checksum) {
    // Built from the documented construction: 30 random base62 + base62(crc32(random)).
    const std::string random = "u8jzPde0IgxLd6GncfBAepfJBd0Kh8";
    char sum[6];
    base62_6(crc32(random), sum);
    const std::string token = "ghp_" + random + std::string(sum, 6);
    EXPECT_TRUE(github_checksum_ok(token));
    EXPECT_TRUE(validate("github", token));
    EXPECT_TRUE(validate("npm", "npm_" + random + std::string(sum, 6)));
    std::string broken = token;
    broken[10] = broken[10] == 'a' ? 'b' : 'a';
    EXPECT_FALSE(github_checksum_ok(broken));
    EXPECT_FALSE(github_checksum_ok("ghp_short"));
    EXPECT_FALSE(github_checksum_ok("no-underscore"));
}

TEST(validators, luhn) {
    EXPECT_TRUE(luhn_ok("4111111111111111"));
    EXPECT_TRUE(luhn_ok("4111 1111 1111 1111"));
    EXPECT_TRUE(luhn_ok("5500-0000-0000-0004"));
    EXPECT_FALSE(luhn_ok("4111111111111112"));
    EXPECT_FALSE(luhn_ok("0000"));
    EXPECT_FALSE(luhn_ok("4111a11111111111"));
}

TEST(validators, iban) {
    EXPECT_TRUE(iban_ok("GB82WEST12345698765432"));
    EXPECT_TRUE(iban_ok("DE89 3704 0044 0532 0130 00"));
    EXPECT_FALSE(iban_ok("GB82WEST12345698765433"));
    EXPECT_FALSE(iban_ok("GB82"));
}

TEST(validators, jwt_header) {
    // {"alg":"HS256","typ":"JWT"}
    EXPECT_TRUE(jwt_header_ok("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxIn0.sig"));
    // {"typ":"JWT"} has no alg
    EXPECT_FALSE(jwt_header_ok("eyJ0eXAiOiJKV1QifQ.eyJzdWIiOiIxIn0.sig"));
    EXPECT_FALSE(jwt_header_ok("notbase64!!.x.y"));
}

TEST(validators, pem_body) {
    // PKCS#8 header bytes 30 82 04 bd ... base64 "MIIEvQ"
    EXPECT_TRUE(pem_body_ok(
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"));
    EXPECT_TRUE(pem_body_ok(
        "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"));
    EXPECT_TRUE(
        pem_body_ok("-----BEGIN OPENSSH PRIVATE "
                    "KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtz"));
    EXPECT_TRUE(pem_body_ok("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: "
                            "AES-128-CBC,0123\n\nabcd"));
    EXPECT_FALSE(
        pem_body_ok("-----BEGIN PRIVATE "
                    "KEY-----\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
    EXPECT_FALSE(pem_body_ok("-----BEGIN PRIVATE KEY-----\n...your key here..."));
}

TEST(validators, entropy_and_placeholders) {
    EXPECT_DOUBLE_EQ(shannon_entropy("aaaa"), 0.0);
    EXPECT_DOUBLE_EQ(shannon_entropy("abcd"), 2.0);
    EXPECT_TRUE(looks_like_placeholder("${API_KEY}"));
    EXPECT_TRUE(looks_like_placeholder("<your-api-key>"));
    EXPECT_TRUE(looks_like_placeholder("xxxxxxxxxxxx"));
    EXPECT_TRUE(looks_like_placeholder("changeme"));
    EXPECT_TRUE(looks_like_placeholder("aaaaaaaaaaaaaaa"));
    EXPECT_TRUE(looks_like_placeholder("{{ secrets.token }}"));
    EXPECT_FALSE(looks_like_placeholder("Zq8vN2kLp4Rt7wXy"));
    EXPECT_TRUE(validate("entropy", "Zq8vN2kLp4Rt7wXy"));
    EXPECT_FALSE(validate("entropy", "aaaabbbb"));
    EXPECT_FALSE(validate("entropy", "short"));
    EXPECT_TRUE(is_known_validator(""));
    EXPECT_TRUE(is_known_validator("github"));
    EXPECT_FALSE(is_known_validator("bogus"));
    EXPECT_FALSE(validate("bogus", "anything"));
}

} // namespace
