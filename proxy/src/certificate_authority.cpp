#include "sluice/proxy/certificate_authority.hpp"

#include "tls_names.hpp"

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/system/system_error.hpp>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace sluice::proxy {

namespace ssl = boost::asio::ssl;
namespace fs = std::filesystem;

namespace {

template <typename T, void (*Free)(T*)>
struct openssl_deleter {
    void operator()(T* p) const noexcept { Free(p); }
};
template <typename T, void (*Free)(T*)>
using openssl_ptr = std::unique_ptr<T, openssl_deleter<T, Free>>;

using x509_ptr = openssl_ptr<X509, X509_free>;
using pkey_ptr = openssl_ptr<EVP_PKEY, EVP_PKEY_free>;
using bio_ptr = openssl_ptr<BIO, BIO_free_all>;
using bn_ptr = openssl_ptr<BIGNUM, BN_free>;
using name_ptr = openssl_ptr<X509_NAME, X509_NAME_free>;
using ext_ptr = openssl_ptr<X509_EXTENSION, X509_EXTENSION_free>;
using gens_ptr = openssl_ptr<GENERAL_NAMES, GENERAL_NAMES_free>;
using octet_ptr = openssl_ptr<ASN1_OCTET_STRING, ASN1_OCTET_STRING_free>;

constexpr long one_hour_s = 3600;
constexpr int ca_validity_days = 3650;
constexpr int leaf_validity_days = 30;
constexpr std::size_t max_common_name = 64; // ub-common-name, RFC 5280 appendix A.1

// Drains OpenSSL's per-thread error queue so a failure's text describes this failure and
// not a stale one left by an earlier call on the same thread.
std::string openssl_errors() {
    std::string out;
    while (unsigned long e = ERR_get_error()) {
        char buf[256];
        ERR_error_string_n(e, buf, sizeof buf);
        if (!out.empty())
            out += "; ";
        out += buf;
    }
    return out.empty() ? std::string("unknown OpenSSL error") : out;
}

std::string errno_text(int err) {
    return std::generic_category().message(err);
}

pkey_ptr generate_p256_key() {
    return pkey_ptr(EVP_EC_gen("P-256"));
}

// 128 random bits with the top bit clear: RFC 5280 4.1.2.2 wants a positive integer of
// at most 20 octets, and unpredictable serials are what the CA/B forum asks of public CAs.
bool set_random_serial(X509* x) {
    unsigned char raw[16];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return false;
    raw[0] &= 0x7f;
    bn_ptr bn(BN_bin2bn(raw, sizeof raw, nullptr));
    return bn && BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(x)) != nullptr;
}

bool add_ext(X509* x, X509V3_CTX* ctx, int nid, const char* value) {
    ext_ptr ext(X509V3_EXT_nconf_nid(nullptr, ctx, nid, value));
    return ext && X509_add_ext(x, ext.get(), -1) == 1;
}

const EVP_MD* signing_digest(EVP_PKEY* key) {
    // EdDSA signs the message itself and takes no separate digest.
    int id = EVP_PKEY_get_id(key);
    if (id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448)
        return nullptr;
    return EVP_sha256();
}

std::expected<std::string, std::string> pem_of(X509* cert, EVP_PKEY* key) {
    bio_ptr bio(BIO_new(BIO_s_mem()));
    if (!bio)
        return std::unexpected(openssl_errors());
    if (cert && PEM_write_bio_X509(bio.get(), cert) != 1)
        return std::unexpected(openssl_errors());
    if (key && PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
        return std::unexpected(openssl_errors());
    char* data = nullptr;
    long len = BIO_get_mem_data(bio.get(), &data);
    return std::string(data, static_cast<std::size_t>(len));
}

bool path_exists(const fs::path& p) {
    std::error_code ec;
    // symlink_status: a dangling symlink also counts as "exists" so we never write through it.
    return fs::symlink_status(p, ec).type() != fs::file_type::not_found;
}

// Creates missing parent directories one component at a time with mode 0700, so the
// directory holding the CA key is never briefly readable by others.
std::expected<void, std::string> make_private_dirs(const fs::path& dir) {
    if (dir.empty() || path_exists(dir))
        return {};
    if (auto parent = dir.parent_path(); parent != dir) {
        if (auto r = make_private_dirs(parent); !r)
            return r;
    }
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
        return std::unexpected(
            fmt::format("cannot create directory {}: {}", dir.string(), errno_text(errno)));
    ::chmod(dir.c_str(), 0700); // umask may have removed bits we want; never adds any
    return {};
}

// O_EXCL makes "refuse to overwrite" race-free and O_NOFOLLOW refuses a planted symlink;
// the mode is set at creation so the file never exists with wider permissions.
std::expected<void, std::string> write_new_file(const fs::path& p, const std::string& data,
                                                mode_t mode) {
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return std::unexpected(fmt::format("cannot create {}: {}", p.string(), errno_text(errno)));
    ::fchmod(fd, mode); // exact mode regardless of umask
    std::size_t done = 0;
    int err = 0;
    while (done < data.size()) {
        ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    if (err == 0 && ::fsync(fd) != 0)
        err = errno;
    if (::close(fd) != 0 && err == 0)
        err = errno;
    if (err != 0) {
        ::unlink(p.c_str());
        return std::unexpected(fmt::format("cannot write {}: {}", p.string(), errno_text(err)));
    }
    return {};
}

std::string ca_common_name() {
    char host[256] = {};
    std::string name;
    if (::gethostname(host, sizeof host - 1) == 0)
        name = host;
    // Hostnames are usually printable ASCII; anything else would make a confusing CN.
    if (name.empty() || !std::ranges::all_of(name, [](char c) { return c > 0x20 && c < 0x7f; })) {
        unsigned char raw[4];
        RAND_bytes(raw, sizeof raw);
        name = fmt::format("{:02x}{:02x}{:02x}{:02x}", raw[0], raw[1], raw[2], raw[3]);
    }
    std::string cn = "sluice local CA " + name;
    if (cn.size() > max_common_name)
        cn.resize(max_common_name);
    return cn;
}

int select_http11(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                  unsigned int inlen, void*) {
    // Only HTTP/1.1 is relayed. Answering NOACK (instead of a fatal alert) lets a client
    // that offers h2 first carry on without ALPN and fall back to HTTP/1.1 (RFC 7301 3.2).
    static constexpr unsigned char h11[] = {'h', 't', 't', 'p', '/', '1', '.', '1'};
    unsigned int i = 0;
    while (i < inlen) {
        unsigned int len = in[i];
        if (i + 1 + len > inlen)
            break;
        if (len == sizeof h11 && std::memcmp(in + i + 1, h11, sizeof h11) == 0) {
            *out = in + i + 1;
            *outlen = static_cast<unsigned char>(len);
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + len;
    }
    return SSL_TLSEXT_ERR_NOACK;
}

int no_password(char*, int, int, void*) {
    return -1;
}

std::expected<x509_ptr, std::string> build_ca_cert(EVP_PKEY* key) {
    x509_ptr x(X509_new());
    if (!x || X509_set_version(x.get(), X509_VERSION_3) != 1 || !set_random_serial(x.get()))
        return std::unexpected(openssl_errors());
    // Backdated an hour like the leaves, to tolerate small clock differences between hosts.
    if (!X509_gmtime_adj(X509_getm_notBefore(x.get()), -one_hour_s) ||
        !X509_time_adj_ex(X509_getm_notAfter(x.get()), ca_validity_days, 0, nullptr))
        return std::unexpected(openssl_errors());
    name_ptr name(X509_NAME_new());
    std::string cn = ca_common_name();
    if (!name ||
        X509_NAME_add_entry_by_NID(name.get(), NID_organizationName, MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>("sluice"), -1, -1,
                                   0) != 1 ||
        X509_NAME_add_entry_by_NID(name.get(), NID_commonName, MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                   0) != 1 ||
        X509_set_subject_name(x.get(), name.get()) != 1 ||
        X509_set_issuer_name(x.get(), name.get()) != 1 || X509_set_pubkey(x.get(), key) != 1)
        return std::unexpected(openssl_errors());
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, x.get(), x.get(), nullptr, nullptr, 0);
    if (!add_ext(x.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
        !add_ext(x.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign") ||
        !add_ext(x.get(), &ctx, NID_subject_key_identifier, "hash") ||
        !add_ext(x.get(), &ctx, NID_authority_key_identifier, "keyid:always"))
        return std::unexpected(openssl_errors());
    if (X509_sign(x.get(), key, signing_digest(key)) <= 0)
        return std::unexpected(openssl_errors());
    return x;
}

} // namespace

std::expected<void, std::string> create_ca(const fs::path& cert, const fs::path& key) {
    ERR_clear_error();
    if (path_exists(cert))
        return std::unexpected(
            fmt::format("{} already exists; refusing to overwrite", cert.string()));
    if (path_exists(key))
        return std::unexpected(
            fmt::format("{} already exists; refusing to overwrite", key.string()));
    if (auto r = make_private_dirs(key.parent_path()); !r)
        return r;
    if (auto r = make_private_dirs(cert.parent_path()); !r)
        return r;

    pkey_ptr pkey = generate_p256_key();
    if (!pkey)
        return std::unexpected("cannot generate CA key: " + openssl_errors());
    auto x = build_ca_cert(pkey.get());
    if (!x)
        return std::unexpected("cannot build CA certificate: " + x.error());
    auto key_pem = pem_of(nullptr, pkey.get());
    auto cert_pem = pem_of(x->get(), nullptr);
    if (!key_pem || !cert_pem)
        return std::unexpected("cannot encode CA: " +
                               (key_pem ? cert_pem.error() : key_pem.error()));

    // Key first: a certificate without its key is useless, but a key written and then
    // abandoned (cert write failed) is removed below so no half CA is left behind.
    if (auto r = write_new_file(key, *key_pem, 0600); !r)
        return r;
    if (auto r = write_new_file(cert, *cert_pem, 0644); !r) {
        ::unlink(key.c_str());
        return r;
    }
    return {};
}

std::expected<fs::path, std::string> ensure_ca(const fs::path& cert, const fs::path& key) {
    bool have_cert = path_exists(cert);
    bool have_key = path_exists(key);
    if (have_cert && have_key)
        return cert;
    if (have_cert != have_key) {
        const fs::path& present = have_cert ? cert : key;
        const fs::path& missing = have_cert ? key : cert;
        return std::unexpected(fmt::format(
            "{} exists but {} does not; restore the missing file or remove both to create a "
            "new CA",
            present.string(), missing.string()));
    }
    if (auto r = create_ca(cert, key); !r)
        return std::unexpected(r.error());
    return cert;
}

struct certificate_authority::impl {
    x509_ptr ca_cert;
    pkey_ptr ca_key;
    pkey_ptr leaf_key; // one per CA instance: every leaf shares it (see header)
    std::size_t capacity = 1;

    std::mutex mu;
    using entry = std::pair<std::string, std::shared_ptr<ssl::context>>;
    std::list<entry> lru; // front = most recently used
    std::unordered_map<std::string, std::list<entry>::iterator> index;
    std::atomic<std::size_t> minted{0};

    std::expected<x509_ptr, std::string> mint(const normalized_host& host) const;
    std::shared_ptr<ssl::context> make_context(const normalized_host& host) const;
};

std::expected<x509_ptr, std::string>
certificate_authority::impl::mint(const normalized_host& host) const {
    ERR_clear_error();
    x509_ptr x(X509_new());
    if (!x || X509_set_version(x.get(), X509_VERSION_3) != 1 || !set_random_serial(x.get()))
        return std::unexpected(openssl_errors());

    // notBefore an hour back for client clock skew; both ends clamped into the CA's own
    // validity so the chain never has a leaf outliving its issuer.
    ASN1_TIME* not_before = X509_getm_notBefore(x.get());
    ASN1_TIME* not_after = X509_getm_notAfter(x.get());
    if (!X509_gmtime_adj(not_before, -one_hour_s) ||
        !X509_time_adj_ex(not_after, leaf_validity_days, 0, nullptr))
        return std::unexpected(openssl_errors());
    const ASN1_TIME* ca_not_before = X509_get0_notBefore(ca_cert.get());
    const ASN1_TIME* ca_not_after = X509_get0_notAfter(ca_cert.get());
    if (ASN1_TIME_compare(not_before, ca_not_before) < 0 &&
        X509_set1_notBefore(x.get(), ca_not_before) != 1)
        return std::unexpected(openssl_errors());
    if (ASN1_TIME_compare(not_after, ca_not_after) > 0 &&
        X509_set1_notAfter(x.get(), ca_not_after) != 1)
        return std::unexpected(openssl_errors());

    std::string cn = host.text.substr(0, max_common_name);
    name_ptr subject(X509_NAME_new());
    if (!subject ||
        X509_NAME_add_entry_by_NID(subject.get(), NID_commonName, MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>(cn.data()),
                                   static_cast<int>(cn.size()), -1, 0) != 1 ||
        X509_set_subject_name(x.get(), subject.get()) != 1 ||
        X509_set_issuer_name(x.get(), X509_get_subject_name(ca_cert.get())) != 1 ||
        X509_set_pubkey(x.get(), leaf_key.get()) != 1)
        return std::unexpected(openssl_errors());

    // The SAN is built as a structure, not via a "DNS:..." config string, so a host
    // containing ',' or ':' can never smuggle in extra names.
    gens_ptr gens(sk_GENERAL_NAME_new_null());
    GENERAL_NAME* gn = GENERAL_NAME_new();
    if (!gens || !gn) {
        GENERAL_NAME_free(gn);
        return std::unexpected(openssl_errors());
    }
    if (host.is_ip) {
        ASN1_OCTET_STRING* ip = a2i_IPADDRESS(host.text.c_str());
        if (!ip) {
            GENERAL_NAME_free(gn);
            return std::unexpected("cannot encode IP address " + host.text);
        }
        GENERAL_NAME_set0_value(gn, GEN_IPADD, ip);
    } else {
        ASN1_IA5STRING* dns = ASN1_IA5STRING_new();
        if (!dns ||
            ASN1_STRING_set(dns, host.text.data(), static_cast<int>(host.text.size())) != 1) {
            ASN1_IA5STRING_free(dns);
            GENERAL_NAME_free(gn);
            return std::unexpected(openssl_errors());
        }
        GENERAL_NAME_set0_value(gn, GEN_DNS, dns);
    }
    if (sk_GENERAL_NAME_push(gens.get(), gn) <= 0) {
        GENERAL_NAME_free(gn);
        return std::unexpected(openssl_errors());
    }
    if (X509_add1_ext_i2d(x.get(), NID_subject_alt_name, gens.get(), 0, X509V3_ADD_DEFAULT) != 1)
        return std::unexpected(openssl_errors());

    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, ca_cert.get(), x.get(), nullptr, nullptr, 0);
    if (!add_ext(x.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE") ||
        !add_ext(x.get(), &ctx, NID_key_usage, "critical,digitalSignature") ||
        !add_ext(x.get(), &ctx, NID_ext_key_usage, "serverAuth") ||
        !add_ext(x.get(), &ctx, NID_subject_key_identifier, "hash") ||
        !add_ext(x.get(), &ctx, NID_authority_key_identifier, "keyid:always"))
        return std::unexpected(openssl_errors());

    if (X509_sign(x.get(), ca_key.get(), signing_digest(ca_key.get())) <= 0)
        return std::unexpected(openssl_errors());
    return x;
}

std::shared_ptr<ssl::context>
certificate_authority::impl::make_context(const normalized_host& host) const {
    auto leaf = mint(host);
    if (!leaf) {
        spdlog::warn("cannot mint leaf certificate for {}: {}", host.text, leaf.error());
        return nullptr;
    }
    try {
        auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
        SSL_CTX* c = ctx->native_handle();
        SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                   SSL_OP_CIPHER_SERVER_PREFERENCE);
        // Idle intercepted connections give their read/write buffers back. Clients resume
        // through the context's server session cache and tickets (OpenSSL defaults; the
        // context lives as long as the leaf stays cached).
        SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS);
        if (SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1 ||
            SSL_CTX_use_certificate(c, leaf->get()) != 1 ||
            SSL_CTX_use_PrivateKey(c, leaf_key.get()) != 1 ||
            SSL_CTX_add1_chain_cert(c, ca_cert.get()) != 1 || SSL_CTX_check_private_key(c) != 1) {
            spdlog::warn("cannot build TLS context for {}: {}", host.text, openssl_errors());
            return nullptr;
        }
        SSL_CTX_set_alpn_select_cb(c, &select_http11, nullptr);
        return ctx;
    } catch (const std::exception& e) {
        spdlog::warn("cannot build TLS context for {}: {}", host.text, e.what());
        return nullptr;
    }
}

certificate_authority::~certificate_authority() = default;

std::expected<std::shared_ptr<certificate_authority>, std::string>
certificate_authority::load(const fs::path& cert, const fs::path& key, std::size_t cache_capacity) {
    ERR_clear_error();
    struct stat st {};
    if (::stat(key.c_str(), &st) != 0)
        return std::unexpected(
            fmt::format("cannot read CA key {}: {}", key.string(), errno_text(errno)));
    if (!S_ISREG(st.st_mode))
        return std::unexpected(fmt::format("CA key {} is not a regular file", key.string()));
    if ((st.st_mode & 077) != 0)
        return std::unexpected(
            fmt::format("CA key {} has mode {:04o}, readable or writable by group or others; "
                        "run `chmod 600 {}`",
                        key.string(), st.st_mode & 07777, key.string()));

    bio_ptr cert_bio(BIO_new_file(cert.c_str(), "r"));
    if (!cert_bio)
        return std::unexpected(
            fmt::format("cannot open CA certificate {}: {}", cert.string(), errno_text(errno)));
    x509_ptr x(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
    if (!x)
        return std::unexpected(
            fmt::format("{}: not a PEM certificate: {}", cert.string(), openssl_errors()));

    bio_ptr key_bio(BIO_new_file(key.c_str(), "r"));
    if (!key_bio)
        return std::unexpected(
            fmt::format("cannot open CA key {}: {}", key.string(), errno_text(errno)));
    // no_password: an encrypted key must fail here rather than prompt on a terminal.
    pkey_ptr pkey(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, &no_password, nullptr));
    if (!pkey) {
        ERR_clear_error(); // the text may describe the key's structure; say only what failed
        return std::unexpected(
            fmt::format("{}: not an unencrypted PEM private key (encrypted keys are not supported)",
                        key.string()));
    }
    if (X509_check_private_key(x.get(), pkey.get()) != 1) {
        ERR_clear_error();
        return std::unexpected(
            fmt::format("CA key {} does not match certificate {}", key.string(), cert.string()));
    }
    if (X509_check_ca(x.get()) == 0)
        return std::unexpected(fmt::format(
            "{} is not a CA certificate (needs basicConstraints CA:TRUE)", cert.string()));
    if (X509_cmp_current_time(X509_get0_notAfter(x.get())) <= 0)
        return std::unexpected(fmt::format("CA certificate {} has expired", cert.string()));

    pkey_ptr leaf_key = generate_p256_key();
    if (!leaf_key)
        return std::unexpected("cannot generate leaf key: " + openssl_errors());

    std::shared_ptr<certificate_authority> ca(new certificate_authority());
    ca->impl_ = std::make_unique<impl>();
    ca->impl_->ca_cert = std::move(x);
    ca->impl_->ca_key = std::move(pkey);
    ca->impl_->leaf_key = std::move(leaf_key);
    ca->impl_->capacity = std::max<std::size_t>(cache_capacity, 1);
    ca->cert_path_ = cert;
    return ca;
}

std::shared_ptr<ssl::context> certificate_authority::server_context(std::string_view host) {
    auto h = normalize_tls_host(host);
    if (!h)
        return nullptr;
    impl& m = *impl_;
    {
        std::lock_guard lock(m.mu);
        if (auto it = m.index.find(h->text); it != m.index.end()) {
            m.lru.splice(m.lru.begin(), m.lru, it->second);
            return it->second->second;
        }
    }
    // Minted outside the lock so one slow signature never stalls other threads' cache
    // hits; two threads racing on the same new host both mint and the first insert wins.
    auto ctx = m.make_context(*h);
    if (!ctx)
        return nullptr;
    m.minted.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(m.mu);
    if (auto it = m.index.find(h->text); it != m.index.end()) {
        m.lru.splice(m.lru.begin(), m.lru, it->second);
        return it->second->second;
    }
    m.lru.emplace_front(h->text, ctx);
    m.index.emplace(h->text, m.lru.begin());
    while (m.lru.size() > m.capacity) {
        m.index.erase(m.lru.back().first);
        m.lru.pop_back();
    }
    return ctx;
}

std::expected<std::string, std::string>
certificate_authority::mint_leaf_pem(std::string_view host) {
    auto h = normalize_tls_host(host);
    if (!h)
        return std::unexpected("not a valid host name or IP address");
    auto leaf = impl_->mint(*h);
    if (!leaf)
        return std::unexpected(leaf.error());
    return pem_of(leaf->get(), impl_->leaf_key.get());
}

std::size_t certificate_authority::minted() const {
    return impl_->minted.load(std::memory_order_relaxed);
}

} // namespace sluice::proxy
