// The local CA and leaf minting, checked with OpenSSL's own verifier and a real TLS
// handshake on loopback.
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/upstream_tls.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include <gtest/gtest.h>

#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using sluice::proxy::certificate_authority;

struct temp_dir {
    fs::path path;
    temp_dir() {
        std::string tmpl = (fs::temp_directory_path() / "sluice-ca-test-XXXXXX").string();
        if (!::mkdtemp(tmpl.data()))
            throw std::runtime_error("mkdtemp failed");
        path = tmpl;
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

mode_t mode_of(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
}

struct x509_deleter {
    void operator()(X509* x) const { X509_free(x); }
};
using x509_ptr = std::unique_ptr<X509, x509_deleter>;

x509_ptr load_cert(const fs::path& p) {
    std::FILE* f = std::fopen(p.c_str(), "r");
    if (!f)
        return nullptr;
    x509_ptr x(PEM_read_X509(f, nullptr, nullptr, nullptr));
    std::fclose(f);
    return x;
}

x509_ptr cert_from_pem(const std::string& pem) {
    BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    x509_ptr x(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
    BIO_free(bio);
    return x;
}

std::time_t to_time_t(const ASN1_TIME* t) {
    std::tm tm{};
    EXPECT_EQ(ASN1_TIME_to_tm(t, &tm), 1);
    return ::timegm(&tm);
}

bool extension_critical(X509* x, int nid) {
    int pos = X509_get_ext_by_NID(x, nid, -1);
    return pos >= 0 && X509_EXTENSION_get_critical(X509_get_ext(x, pos)) == 1;
}

std::string common_name(X509* x) {
    char buf[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf, sizeof buf);
    return buf;
}

struct san_entry {
    int type;
    std::string value; // dNSName text, or raw iPAddress octets
};

std::vector<san_entry> subject_alt_names(X509* x) {
    std::vector<san_entry> out;
    auto* gens =
        static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
    if (!gens)
        return out;
    for (int i = 0; i < sk_GENERAL_NAME_num(gens); ++i) {
        const GENERAL_NAME* gn = sk_GENERAL_NAME_value(gens, i);
        int type = 0;
        auto* v = static_cast<ASN1_STRING*>(GENERAL_NAME_get0_value(gn, &type));
        out.push_back({type, std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(v)),
                                         static_cast<std::size_t>(ASN1_STRING_length(v)))});
    }
    GENERAL_NAMES_free(gens);
    return out;
}

// Verifies `leaf` against `ca` alone (no system store) as a TLS server certificate for
// `host` (name or IP literal). Returns the X509_V_* result.
int verify_leaf(X509* leaf, X509* ca, const std::string& host, bool is_ip) {
    X509_STORE* store = X509_STORE_new();
    X509_STORE_add_cert(store, ca);
    X509_STORE_CTX* ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, store, leaf, nullptr);
    X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
    X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
    if (is_ip)
        X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    else
        X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    int ok = X509_verify_cert(ctx);
    int err = X509_STORE_CTX_get_error(ctx);
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    return ok == 1 ? X509_V_OK : (err == X509_V_OK ? -1 : err);
}

X509* leaf_of(const std::shared_ptr<ssl::context>& ctx) {
    return SSL_CTX_get0_certificate(ctx->native_handle());
}

// A CA built here (not by create_ca) so tests can choose its validity.
void write_short_lived_ca(const fs::path& cert_path, const fs::path& key_path, long days) {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    ASSERT_NE(key, nullptr);
    X509* x = X509_new();
    X509_set_version(x, X509_VERSION_3);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 42);
    X509_gmtime_adj(X509_getm_notBefore(x), -7200);
    X509_time_adj_ex(X509_getm_notAfter(x), static_cast<int>(days), 0, nullptr);
    X509_NAME* name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_NID(name, NID_commonName, MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("short lived test CA"), -1,
                               -1, 0);
    X509_set_issuer_name(x, name);
    X509_set_pubkey(x, key);
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, x, x, nullptr, nullptr, 0);
    for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                              std::pair{NID_key_usage, "critical,keyCertSign"},
                              std::pair{NID_subject_key_identifier, "hash"}}) {
        X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &v3, nid, value);
        ASSERT_NE(ext, nullptr);
        X509_add_ext(x, ext, -1);
        X509_EXTENSION_free(ext);
    }
    ASSERT_GT(X509_sign(x, key, EVP_sha256()), 0);
    std::FILE* f = std::fopen(cert_path.c_str(), "w");
    PEM_write_X509(f, x);
    std::fclose(f);
    f = std::fopen(key_path.c_str(), "w");
    PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
    std::fclose(f);
    ::chmod(key_path.c_str(), 0600);
    X509_free(x);
    EVP_PKEY_free(key);
}

class ca_test : public ::testing::Test {
protected:
    temp_dir dir;
    fs::path cert = dir.path / "data" / "ca.pem";
    fs::path key = dir.path / "data" / "ca.key";

    std::shared_ptr<certificate_authority> make_loaded(std::size_t capacity = 4096) {
        auto created = sluice::proxy::create_ca(cert, key);
        EXPECT_TRUE(created) << created.error();
        auto ca = certificate_authority::load(cert, key, capacity);
        EXPECT_TRUE(ca) << ca.error();
        return ca ? *ca : nullptr;
    }
};

TEST_F(ca_test, create_ca_writes_private_key_and_ca_certificate) {
    fs::path nested_cert = dir.path / "a" / "b" / "ca.pem";
    fs::path nested_key = dir.path / "a" / "b" / "ca.key";
    auto r = sluice::proxy::create_ca(nested_cert, nested_key);
    ASSERT_TRUE(r) << r.error();

    EXPECT_EQ(mode_of(nested_key), 0600u);
    EXPECT_EQ(mode_of(dir.path / "a"), 0700u);
    EXPECT_EQ(mode_of(dir.path / "a" / "b"), 0700u);

    x509_ptr x = load_cert(nested_cert);
    ASSERT_TRUE(x);
    EXPECT_EQ(X509_check_ca(x.get()), 1);
    EXPECT_TRUE(X509_get_extension_flags(x.get()) & EXFLAG_CA);
    EXPECT_EQ(X509_get_pathlen(x.get()), 0);
    EXPECT_TRUE(extension_critical(x.get(), NID_basic_constraints));
    EXPECT_TRUE(extension_critical(x.get(), NID_key_usage));
    EXPECT_EQ(X509_get_key_usage(x.get()), static_cast<uint32_t>(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
    EXPECT_NE(X509_get0_subject_key_id(x.get()), nullptr);
    EXPECT_TRUE(common_name(x.get()).starts_with("sluice local CA ")) << common_name(x.get());

    EVP_PKEY* pub = X509_get0_pubkey(x.get());
    ASSERT_NE(pub, nullptr);
    EXPECT_EQ(EVP_PKEY_get_id(pub), EVP_PKEY_EC);
    char group[64] = {};
    size_t group_len = 0;
    ASSERT_EQ(EVP_PKEY_get_group_name(pub, group, sizeof group, &group_len), 1);
    EXPECT_STREQ(group, "prime256v1");
    EXPECT_EQ(X509_verify(x.get(), pub), 1) << "self-signed signature must verify";

    std::time_t nb = to_time_t(X509_get0_notBefore(x.get()));
    std::time_t na = to_time_t(X509_get0_notAfter(x.get()));
    std::time_t now = std::time(nullptr);
    EXPECT_LE(nb, now);
    EXPECT_GE((na - now) / 86400, 3649) << "about ten years";
    EXPECT_LE((na - now) / 86400, 3651);

    BIGNUM* serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x.get()), nullptr);
    EXPECT_GT(BN_num_bits(serial), 64) << "random 128-bit serial (fails with p=2^-63)";
    EXPECT_FALSE(BN_is_negative(serial));
    BN_free(serial);
}

TEST_F(ca_test, create_ca_refuses_to_overwrite) {
    ASSERT_TRUE(sluice::proxy::create_ca(cert, key));
    std::string cert_before = read_file(cert);
    std::string key_before = read_file(key);

    auto again = sluice::proxy::create_ca(cert, key);
    ASSERT_FALSE(again);
    EXPECT_NE(again.error().find("refusing to overwrite"), std::string::npos) << again.error();
    EXPECT_EQ(read_file(cert), cert_before);
    EXPECT_EQ(read_file(key), key_before);

    fs::remove(cert); // only the key left: still refused
    EXPECT_FALSE(sluice::proxy::create_ca(cert, key));
    EXPECT_EQ(read_file(key), key_before);
}

TEST_F(ca_test, ensure_ca_creates_once_and_refuses_half_a_ca) {
    auto first = sluice::proxy::ensure_ca(cert, key);
    ASSERT_TRUE(first) << first.error();
    EXPECT_EQ(*first, cert);
    std::string pem = read_file(cert);

    auto second = sluice::proxy::ensure_ca(cert, key);
    ASSERT_TRUE(second) << second.error();
    EXPECT_EQ(read_file(cert), pem) << "an existing CA is kept";

    fs::remove(key);
    auto half = sluice::proxy::ensure_ca(cert, key);
    ASSERT_FALSE(half);
    EXPECT_NE(half.error().find(key.string()), std::string::npos) << half.error();
    EXPECT_EQ(read_file(cert), pem);
    EXPECT_FALSE(fs::exists(key));

    fs::path other_cert = dir.path / "other.pem";
    fs::path other_key = dir.path / "other.key";
    ASSERT_TRUE(sluice::proxy::create_ca(other_cert, other_key));
    fs::remove(other_cert);
    EXPECT_FALSE(sluice::proxy::ensure_ca(other_cert, other_key));
}

TEST_F(ca_test, load_refuses_key_readable_by_others) {
    ASSERT_TRUE(sluice::proxy::create_ca(cert, key));
    ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
    auto r = certificate_authority::load(cert, key);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find(key.string()), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("chmod 600"), std::string::npos) << r.error();

    ASSERT_EQ(::chmod(key.c_str(), 0640), 0);
    EXPECT_FALSE(certificate_authority::load(cert, key));

    ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
    auto ok = certificate_authority::load(cert, key);
    ASSERT_TRUE(ok) << ok.error();
    EXPECT_EQ((*ok)->cert_path(), cert);
}

TEST_F(ca_test, load_refuses_a_key_that_does_not_match) {
    fs::path cert2 = dir.path / "two" / "ca.pem";
    fs::path key2 = dir.path / "two" / "ca.key";
    ASSERT_TRUE(sluice::proxy::create_ca(cert, key));
    ASSERT_TRUE(sluice::proxy::create_ca(cert2, key2));
    auto r = certificate_authority::load(cert, key2);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("does not match"), std::string::npos) << r.error();
    EXPECT_FALSE(certificate_authority::load(dir.path / "missing.pem", key));
}

TEST_F(ca_test, dns_leaf_has_dns_san_and_verifies_against_the_ca) {
    auto ca = make_loaded();
    ASSERT_TRUE(ca);
    x509_ptr ca_cert = load_cert(cert);

    auto ctx = ca->server_context("Api.Example.COM");
    ASSERT_TRUE(ctx);
    X509* leaf = leaf_of(ctx);
    ASSERT_NE(leaf, nullptr);

    auto sans = subject_alt_names(leaf);
    ASSERT_EQ(sans.size(), 1u);
    EXPECT_EQ(sans[0].type, GEN_DNS);
    EXPECT_EQ(sans[0].value, "api.example.com");
    EXPECT_EQ(common_name(leaf), "api.example.com");

    EXPECT_EQ(X509_check_ca(leaf), 0);
    EXPECT_TRUE(X509_get_extended_key_usage(leaf) & XKU_SSL_SERVER);
    EXPECT_EQ(X509_get_key_usage(leaf), static_cast<uint32_t>(KU_DIGITAL_SIGNATURE));
    const ASN1_OCTET_STRING* akid = X509_get0_authority_key_id(leaf);
    const ASN1_OCTET_STRING* skid = X509_get0_subject_key_id(ca_cert.get());
    ASSERT_NE(akid, nullptr);
    ASSERT_NE(skid, nullptr);
    EXPECT_EQ(ASN1_OCTET_STRING_cmp(akid, skid), 0);
    EXPECT_EQ(EVP_PKEY_get_id(X509_get0_pubkey(leaf)), EVP_PKEY_EC);

    EXPECT_EQ(verify_leaf(leaf, ca_cert.get(), "api.example.com", false), X509_V_OK);
    EXPECT_EQ(verify_leaf(leaf, ca_cert.get(), "other.example.com", false),
              X509_V_ERR_HOSTNAME_MISMATCH);

    // The server context sends the CA as the chain after the leaf.
    STACK_OF(X509)* chain = nullptr;
    ASSERT_EQ(SSL_CTX_get0_chain_certs(ctx->native_handle(), &chain), 1);
    ASSERT_NE(chain, nullptr);
    ASSERT_EQ(sk_X509_num(chain), 1);
    EXPECT_EQ(X509_cmp(sk_X509_value(chain, 0), ca_cert.get()), 0);
}

TEST_F(ca_test, ip_literal_leaves_have_ip_address_sans) {
    auto ca = make_loaded();
    ASSERT_TRUE(ca);
    x509_ptr ca_cert = load_cert(cert);

    auto v4 = ca->server_context("127.0.0.1");
    ASSERT_TRUE(v4);
    auto sans = subject_alt_names(leaf_of(v4));
    ASSERT_EQ(sans.size(), 1u);
    EXPECT_EQ(sans[0].type, GEN_IPADD);
    EXPECT_EQ(sans[0].value, std::string("\x7f\x00\x00\x01", 4));
    EXPECT_EQ(verify_leaf(leaf_of(v4), ca_cert.get(), "127.0.0.1", true), X509_V_OK);
    EXPECT_EQ(verify_leaf(leaf_of(v4), ca_cert.get(), "127.0.0.2", true),
              X509_V_ERR_IP_ADDRESS_MISMATCH);

    for (const char* host : {"::1", "[::1]"}) {
        auto v6 = ca->server_context(host);
        ASSERT_TRUE(v6) << host;
        auto v6_sans = subject_alt_names(leaf_of(v6));
        ASSERT_EQ(v6_sans.size(), 1u);
        EXPECT_EQ(v6_sans[0].type, GEN_IPADD);
        std::string loopback(16, '\0');
        loopback[15] = 1;
        EXPECT_EQ(v6_sans[0].value, loopback) << host;
        EXPECT_EQ(verify_leaf(leaf_of(v6), ca_cert.get(), "::1", true), X509_V_OK);
    }
    EXPECT_EQ(ca->minted(), 2u) << "[::1] and ::1 are one cache entry";
}

TEST_F(ca_test, leaf_validity_window_is_an_hour_back_to_thirty_days) {
    auto ca = make_loaded();
    ASSERT_TRUE(ca);
    std::time_t before = std::time(nullptr);
    auto pem = ca->mint_leaf_pem("validity.test");
    std::time_t after = std::time(nullptr);
    ASSERT_TRUE(pem) << pem.error();
    EXPECT_NE(pem->find("-----BEGIN CERTIFICATE-----"), std::string::npos);
    EXPECT_NE(pem->find("-----BEGIN PRIVATE KEY-----"), std::string::npos);
    x509_ptr leaf = cert_from_pem(*pem);
    ASSERT_TRUE(leaf);
    std::time_t nb = to_time_t(X509_get0_notBefore(leaf.get()));
    std::time_t na = to_time_t(X509_get0_notAfter(leaf.get()));
    EXPECT_GE(nb, before - 3600 - 1);
    EXPECT_LE(nb, after - 3600 + 1);
    EXPECT_GE(na, before + 30 * 86400 - 1);
    EXPECT_LE(na, after + 30 * 86400 + 1);
    EXPECT_EQ(ca->minted(), 0u) << "mint_leaf_pem does not touch the cache";

    // Two leaves for one host still get different serials.
    x509_ptr again = cert_from_pem(*ca->mint_leaf_pem("validity.test"));
    ASSERT_TRUE(again);
    EXPECT_NE(
        ASN1_INTEGER_cmp(X509_get0_serialNumber(leaf.get()), X509_get0_serialNumber(again.get())),
        0);
}

TEST_F(ca_test, leaf_never_outlives_its_ca) {
    fs::path short_cert = dir.path / "short.pem";
    fs::path short_key = dir.path / "short.key";
    write_short_lived_ca(short_cert, short_key, 5);
    auto ca = certificate_authority::load(short_cert, short_key);
    ASSERT_TRUE(ca) << ca.error();
    x509_ptr ca_cert = load_cert(short_cert);
    auto ctx = (*ca)->server_context("short.test");
    ASSERT_TRUE(ctx);
    EXPECT_EQ(
        ASN1_TIME_compare(X509_get0_notAfter(leaf_of(ctx)), X509_get0_notAfter(ca_cert.get())), 0);
    EXPECT_EQ(verify_leaf(leaf_of(ctx), ca_cert.get(), "short.test", false), X509_V_OK);
}

TEST_F(ca_test, cache_reuses_contexts_per_host_and_evicts_least_recently_used) {
    auto ca = make_loaded(2);
    ASSERT_TRUE(ca);
    auto a = ca->server_context("a.test");
    ASSERT_TRUE(a);
    EXPECT_EQ(ca->minted(), 1u);
    EXPECT_EQ(ca->server_context("a.test"), a);
    EXPECT_EQ(ca->server_context("A.TEST."), a) << "normalised host shares the entry";
    EXPECT_EQ(ca->minted(), 1u);

    auto b = ca->server_context("b.test");
    ASSERT_TRUE(b);
    EXPECT_NE(b, a);
    EXPECT_EQ(ca->minted(), 2u);

    EXPECT_EQ(ca->server_context("a.test"), a); // a is now most recent
    auto c = ca->server_context("c.test");      // evicts b
    EXPECT_EQ(ca->minted(), 3u);
    EXPECT_EQ(ca->server_context("a.test"), a);
    EXPECT_EQ(ca->minted(), 3u);
    auto b2 = ca->server_context("b.test");
    EXPECT_EQ(ca->minted(), 4u);
    EXPECT_NE(b2, b);
}

TEST_F(ca_test, cache_is_safe_across_threads) {
    auto ca = make_loaded(8);
    ASSERT_TRUE(ca);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 50; ++i)
                if (!ca->server_context("h" + std::to_string((i + t) % 12) + ".test"))
                    ++failures;
        });
    for (auto& th : threads)
        th.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_GE(ca->minted(), 12u);
}

TEST_F(ca_test, refuses_hosts_that_cannot_be_names) {
    auto ca = make_loaded();
    ASSERT_TRUE(ca);
    for (std::string host :
         {std::string(), std::string("bad host"), std::string("a\nb"), std::string("[not-an-ip]"),
          std::string(300, 'a'), std::string("caf\xc3\xa9.test")}) {
        EXPECT_FALSE(ca->server_context(host)) << host;
        EXPECT_FALSE(ca->mint_leaf_pem(host)) << host;
    }
    EXPECT_EQ(ca->minted(), 0u);

    // A 64+ byte label still works: the CN is truncated, the SAN keeps the full name.
    std::string long_host = std::string(60, 'x') + ".example.com";
    auto ctx = ca->server_context(long_host);
    ASSERT_TRUE(ctx);
    EXPECT_EQ(common_name(leaf_of(ctx)).size(), 64u);
    EXPECT_EQ(subject_alt_names(leaf_of(ctx)).at(0).value, long_host);
}

// ---- real handshakes on loopback ----

struct handshake_result {
    bool client_ok = false;
    std::string client_error;
    std::string alpn;       // as selected, seen by the client
    std::string server_sni; // as received by the server; empty when none was sent
    std::string echoed;
};

// Runs a TLS server with `server_ctx` on 127.0.0.1:0 in a thread and connects a client
// using `client_ctx`, after `prepare` configures the client SSL*. The client sends one
// line that the server echoes back.
handshake_result run_handshake(ssl::context& server_ctx, ssl::context& client_ctx,
                               const std::function<bool(SSL*)>& prepare) {
    net::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    auto port = acceptor.local_endpoint().port();
    std::promise<std::string> sni_promise;
    auto sni_future = sni_promise.get_future();

    std::thread server([&] {
        boost::system::error_code ec;
        ssl::stream<tcp::socket> s(io, server_ctx);
        acceptor.accept(s.next_layer(), ec);
        if (ec) {
            sni_promise.set_value("");
            return;
        }
        s.handshake(ssl::stream_base::server, ec);
        const char* sni = SSL_get_servername(s.native_handle(), TLSEXT_NAMETYPE_host_name);
        sni_promise.set_value(sni ? sni : "");
        if (ec)
            return;
        net::streambuf buf;
        std::size_t n = net::read_until(s, buf, '\n', ec);
        if (!ec)
            net::write(s, net::buffer(buf.data(), n), ec);
        s.shutdown(ec);
    });

    handshake_result r;
    {
        boost::system::error_code ec;
        ssl::stream<tcp::socket> c(io, client_ctx);
        c.next_layer().connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
        if (!ec && !prepare(c.native_handle()))
            r.client_error = "prepare failed";
        if (!ec && r.client_error.empty())
            c.handshake(ssl::stream_base::client, ec);
        if (ec)
            r.client_error = ec.message();
        if (!ec && r.client_error.empty()) {
            r.client_ok = true;
            const unsigned char* alpn = nullptr;
            unsigned int alpn_len = 0;
            SSL_get0_alpn_selected(c.native_handle(), &alpn, &alpn_len);
            r.alpn.assign(reinterpret_cast<const char*>(alpn), alpn_len);
            net::write(c, net::buffer(std::string("ping\n")), ec);
            net::streambuf buf;
            std::size_t n = net::read_until(c, buf, '\n', ec);
            if (!ec)
                r.echoed.assign(static_cast<const char*>(buf.data().data()), n);
        }
        c.next_layer().close(ec);
    }
    server.join();
    r.server_sni = sni_future.get();
    return r;
}

TEST_F(ca_test, tls_handshake_with_a_client_that_trusts_the_ca) {
    auto ca = make_loaded();
    ASSERT_TRUE(ca);
    auto server_ctx = ca->server_context("localhost");
    ASSERT_TRUE(server_ctx);
    ssl::context client_ctx = sluice::proxy::make_upstream_context(cert);

    auto r = run_handshake(*server_ctx, client_ctx, [](SSL* s) {
        return sluice::proxy::prepare_upstream_ssl(s, "localhost");
    });
    EXPECT_TRUE(r.client_ok) << r.client_error;
    EXPECT_EQ(r.alpn, "http/1.1");
    EXPECT_EQ(r.server_sni, "localhost");
    EXPECT_EQ(r.echoed, "ping\n");
}

TEST_F(ca_test, tls_handshake_fails_on_host_name_mismatch) {
    auto ca = make_loaded();
    ASSERT_TRUE(ca);
    auto server_ctx = ca->server_context("localhost");
    ASSERT_TRUE(server_ctx);
    ssl::context client_ctx = sluice::proxy::make_upstream_context(cert);
    auto r = run_handshake(*server_ctx, client_ctx, [](SSL* s) {
        return sluice::proxy::prepare_upstream_ssl(s, "example.com");
    });
    EXPECT_FALSE(r.client_ok);
    EXPECT_FALSE(r.client_error.empty());
}

TEST_F(ca_test, tls_handshake_fails_without_the_ca_in_the_trust_store) {
    auto ca = make_loaded();
    ASSERT_TRUE(ca);
    fs::path other_cert = dir.path / "other" / "ca.pem";
    ASSERT_TRUE(sluice::proxy::create_ca(other_cert, dir.path / "other" / "ca.key"));
    auto server_ctx = ca->server_context("localhost");
    ASSERT_TRUE(server_ctx);
    ssl::context client_ctx = sluice::proxy::make_upstream_context(other_cert);
    auto r = run_handshake(*server_ctx, client_ctx, [](SSL* s) {
        return sluice::proxy::prepare_upstream_ssl(s, "localhost");
    });
    EXPECT_FALSE(r.client_ok);
}

TEST_F(ca_test, tls_handshake_to_an_ip_literal_sends_no_sni) {
    auto ca = make_loaded();
    ASSERT_TRUE(ca);
    auto server_ctx = ca->server_context("127.0.0.1");
    ASSERT_TRUE(server_ctx);
    ssl::context client_ctx = sluice::proxy::make_upstream_context(cert);
    auto r = run_handshake(*server_ctx, client_ctx, [](SSL* s) {
        return sluice::proxy::prepare_upstream_ssl(s, "127.0.0.1");
    });
    EXPECT_TRUE(r.client_ok) << r.client_error;
    EXPECT_EQ(r.server_sni, "");

    auto wrong = run_handshake(*server_ctx, client_ctx, [](SSL* s) {
        return sluice::proxy::prepare_upstream_ssl(s, "127.0.0.2");
    });
    EXPECT_FALSE(wrong.client_ok);
}

TEST_F(ca_test, server_alpn_selects_http11_or_nothing) {
    auto ca = make_loaded();
    ASSERT_TRUE(ca);
    auto server_ctx = ca->server_context("localhost");
    ASSERT_TRUE(server_ctx);

    ssl::context both = sluice::proxy::make_upstream_context(cert);
    static constexpr unsigned char h2_and_h11[] = {2,   'h', '2', 8,   'h', 't',
                                                   't', 'p', '/', '1', '.', '1'};
    ASSERT_EQ(SSL_CTX_set_alpn_protos(both.native_handle(), h2_and_h11, sizeof h2_and_h11), 0);
    auto r = run_handshake(*server_ctx, both, [](SSL* s) {
        return sluice::proxy::prepare_upstream_ssl(s, "localhost");
    });
    EXPECT_TRUE(r.client_ok) << r.client_error;
    EXPECT_EQ(r.alpn, "http/1.1");

    ssl::context h2_only = sluice::proxy::make_upstream_context(cert);
    static constexpr unsigned char h2[] = {2, 'h', '2'};
    ASSERT_EQ(SSL_CTX_set_alpn_protos(h2_only.native_handle(), h2, sizeof h2), 0);
    auto r2 = run_handshake(*server_ctx, h2_only, [](SSL* s) {
        return sluice::proxy::prepare_upstream_ssl(s, "localhost");
    });
    EXPECT_TRUE(r2.client_ok) << "no ALPN match is not fatal: " << r2.client_error;
    EXPECT_EQ(r2.alpn, "");
    EXPECT_EQ(r2.echoed, "ping\n");
}

TEST(upstream_context, missing_ca_file_throws_at_start_up) {
    EXPECT_THROW(sluice::proxy::make_upstream_context("/nonexistent/sluice/ca.pem"),
                 boost::system::system_error);
    EXPECT_NO_THROW(sluice::proxy::make_upstream_context({}));
}

} // namespace
