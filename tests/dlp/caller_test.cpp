#include "sluice/dlp/caller.hpp"

#include <gtest/gtest.h>

#include <openssl/evp.h>

#include <string>
#include <vector>

namespace {

using namespace sluice::dlp;

std::string b64(const std::string& s) {
    std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
    int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(s.data()),
                            static_cast<int>(s.size()));
    out.resize(static_cast<std::size_t>(n));
    return out;
}

identity with_cidr(std::string name, std::string cidr_text) {
    identity i;
    i.name = std::move(name);
    i.source_cidrs.push_back(*cidr::parse(cidr_text));
    return i;
}

identity with_token(std::string name, std::string user, const std::string& token) {
    identity i;
    i.name = std::move(name);
    i.proxy_auth = proxy_auth_match{std::move(user), sha256_hex(token)};
    return i;
}

identity with_cert(std::string name, std::string uri, std::string cn) {
    identity i;
    i.name = std::move(name);
    i.client_cert = client_cert_match{std::move(uri), std::move(cn)};
    return i;
}

caller_evidence from(const std::string& ip) {
    caller_evidence e;
    e.source = ip_address::parse(ip);
    return e;
}

TEST(caller_test, sha256_hex_matches_known_vector) {
    EXPECT_EQ(sha256_hex("abc"),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(caller_test, listener_binding_wins_over_everything) {
    std::vector<identity> ids{with_cidr("a", "127.0.0.0/8"), with_token("b", "", "t")};
    auto e = from("127.0.0.1");
    e.listener_identity = "sidecar";
    e.proxy_authorization = "Bearer t";
    auto r = resolve_caller(ids, e);
    ASSERT_TRUE(r.identity);
    EXPECT_EQ(*r.identity, "sidecar");
    EXPECT_EQ(r.via, "listener");
}

TEST(caller_test, source_cidr_resolves_and_ambiguity_is_unresolved) {
    std::vector<identity> ids{with_cidr("a", "10.0.0.0/8"), with_cidr("b", "10.1.0.0/16")};
    auto r = resolve_caller(ids, from("10.2.3.4"));
    ASSERT_TRUE(r.identity);
    EXPECT_EQ(*r.identity, "a");
    r = resolve_caller(ids, from("10.1.2.3"));
    EXPECT_FALSE(r.identity);
    EXPECT_EQ(r.reason, "ambiguous_identity");
    r = resolve_caller(ids, from("192.0.2.1"));
    EXPECT_FALSE(r.identity);
    EXPECT_EQ(r.reason, "no_identity");
    EXPECT_FALSE(r.challenge); // nobody can authenticate by token: 403, not 407
}

TEST(caller_test, bearer_and_basic_tokens_resolve) {
    std::vector<identity> ids{with_token("patcher", "patcher", "s3cret-token"),
                              with_token("fuzzer", "", "other-token")};
    auto e = from("192.0.2.1");
    e.proxy_authorization = "Bearer s3cret-token";
    auto r = resolve_caller(ids, e);
    ASSERT_TRUE(r.identity);
    EXPECT_EQ(*r.identity, "patcher");
    e.proxy_authorization = "Basic " + b64("patcher:s3cret-token");
    r = resolve_caller(ids, e);
    ASSERT_TRUE(r.identity);
    EXPECT_EQ(*r.identity, "patcher");
    e.proxy_authorization = "basic " + b64("anyone:other-token");
    r = resolve_caller(ids, e);
    ASSERT_TRUE(r.identity);
    EXPECT_EQ(*r.identity, "fuzzer");
}

TEST(caller_test, wrong_user_or_token_is_unresolved_and_not_rescued_by_source) {
    std::vector<identity> ids{with_token("patcher", "patcher", "s3cret-token"),
                              with_cidr("local", "127.0.0.0/8")};
    auto e = from("127.0.0.1");
    e.proxy_authorization = "Basic " + b64("mallory:s3cret-token");
    auto r = resolve_caller(ids, e);
    EXPECT_FALSE(r.identity);
    EXPECT_EQ(r.reason, "bad_credentials");
    EXPECT_TRUE(r.challenge);
    e.proxy_authorization = "Bearer wrong";
    r = resolve_caller(ids, e);
    EXPECT_FALSE(r.identity);
    EXPECT_EQ(r.reason, "bad_credentials");
    e.proxy_authorization = "Basic !!!notbase64";
    r = resolve_caller(ids, e);
    EXPECT_FALSE(r.identity);
    EXPECT_EQ(r.reason, "malformed_credentials");
    e.proxy_authorization = "Digest x";
    r = resolve_caller(ids, e);
    EXPECT_EQ(r.reason, "malformed_credentials");
    // Without credentials the source address decides.
    e.proxy_authorization.reset();
    r = resolve_caller(ids, e);
    ASSERT_TRUE(r.identity);
    EXPECT_EQ(*r.identity, "local");
}

TEST(caller_test, unknown_source_with_token_identities_asks_for_credentials) {
    std::vector<identity> ids{with_token("patcher", "", "t")};
    auto r = resolve_caller(ids, from("192.0.2.9"));
    EXPECT_FALSE(r.identity);
    EXPECT_TRUE(r.challenge);
}

TEST(caller_test, client_certificate_matches_uri_san_or_cn) {
    std::vector<identity> ids{with_cert("patcher", "spiffe://c/ns/crs/sa/patcher", ""),
                              with_cert("fuzzer", "", "fuzzer.crs"),
                              with_cidr("local", "127.0.0.0/8")};
    auto e = from("127.0.0.1");
    e.certificate = client_certificate{{"spiffe://c/ns/crs/sa/patcher"}, "whatever"};
    auto r = resolve_caller(ids, e);
    ASSERT_TRUE(r.identity);
    EXPECT_EQ(*r.identity, "patcher");
    EXPECT_EQ(r.via, "client_cert");
    e.certificate = client_certificate{{}, "fuzzer.crs"};
    r = resolve_caller(ids, e);
    ASSERT_TRUE(r.identity);
    EXPECT_EQ(*r.identity, "fuzzer");
    // A verified certificate that maps to nobody does not fall back to the source.
    e.certificate = client_certificate{{"spiffe://c/other"}, "other"};
    r = resolve_caller(ids, e);
    EXPECT_FALSE(r.identity);
    EXPECT_EQ(r.reason, "no_identity");
}

} // namespace
