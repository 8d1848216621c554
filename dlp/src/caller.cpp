#include "sluice/dlp/caller.hpp"

#include "sluice/detectors/text.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace sluice::dlp {

namespace {

using text::iequals;
using text::trim;

// RFC 4648 base64 through OpenSSL (EVP_DecodeBlock pads the output with zero bytes for
// '=' padding, which is removed here). nullopt if the text is not base64.
std::optional<std::string> base64_decode(std::string_view in) {
    if (in.empty() || in.size() % 4 != 0 || in.size() > 4096)
        return std::nullopt;
    std::string out(in.size() / 4 * 3, '\0');
    int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(in.data()),
                            static_cast<int>(in.size()));
    if (n < 0)
        return std::nullopt;
    std::size_t pad = 0;
    if (in.ends_with("=="))
        pad = 2;
    else if (in.ends_with("="))
        pad = 1;
    out.resize(static_cast<std::size_t>(n) - pad);
    return out;
}

// Constant-time comparison of two lower-case hex digests of equal length.
bool digest_equals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

struct presented {
    bool is_bearer = false;
    std::string username;
    std::string secret_sha256;
};

std::optional<presented> parse_proxy_authorization(std::string_view value) {
    value = trim(value);
    auto sp = value.find(' ');
    if (sp == std::string_view::npos)
        return std::nullopt;
    std::string_view scheme = value.substr(0, sp);
    std::string_view cred = trim(value.substr(sp + 1));
    if (cred.empty())
        return std::nullopt;
    if (iequals(scheme, "Basic")) {
        auto decoded = base64_decode(cred);
        if (!decoded)
            return std::nullopt;
        auto colon = decoded->find(':');
        if (colon == std::string::npos)
            return std::nullopt;
        return presented{false, decoded->substr(0, colon), sha256_hex(decoded->substr(colon + 1))};
    }
    if (iequals(scheme, "Bearer")) {
        // RFC 6750 section 2.1 b64token characters.
        for (unsigned char c : cred)
            if (!(std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' ||
                  c == '/' || c == '='))
                return std::nullopt;
        return presented{true, "", sha256_hex(cred)};
    }
    return std::nullopt;
}

caller_resolution pick(const std::vector<const identity*>& hits, std::string_view via,
                       std::string_view none_reason, bool challenge) {
    caller_resolution r;
    r.via = std::string(via);
    if (hits.size() == 1) {
        r.identity = hits.front()->name;
        return r;
    }
    r.reason = hits.empty() ? std::string(none_reason) : "ambiguous_identity";
    r.challenge = challenge;
    return r;
}

} // namespace

std::string sha256_hex(std::string_view data) {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int len = 0;
    EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr);
    return text::to_hex(std::string_view(reinterpret_cast<const char*>(md.data()), len));
}

caller_resolution resolve_caller(const std::vector<identity>& identities,
                                 const caller_evidence& ev) {
    const bool any_proxy_auth = std::any_of(identities.begin(), identities.end(),
                                            [](const identity& i) { return i.proxy_auth; });
    if (ev.listener_identity) {
        caller_resolution r;
        r.identity = ev.listener_identity;
        r.via = "listener";
        return r;
    }
    if (ev.certificate) {
        std::vector<const identity*> hits;
        for (const auto& id : identities) {
            if (!id.client_cert)
                continue;
            const auto& m = *id.client_cert;
            bool uri_ok =
                m.uri_san.empty() ||
                std::find(ev.certificate->uri_sans.begin(), ev.certificate->uri_sans.end(),
                          m.uri_san) != ev.certificate->uri_sans.end();
            bool cn_ok = m.subject_cn.empty() || m.subject_cn == ev.certificate->subject_cn;
            if (uri_ok && cn_ok && !(m.uri_san.empty() && m.subject_cn.empty()))
                hits.push_back(&id);
        }
        // A verified certificate that maps to no identity may still carry a token.
        if (!hits.empty() || !ev.proxy_authorization)
            return pick(hits, "client_cert", "no_identity", false);
    }
    if (ev.proxy_authorization) {
        auto p = parse_proxy_authorization(*ev.proxy_authorization);
        if (!p) {
            caller_resolution r;
            r.reason = "malformed_credentials";
            r.challenge = true;
            r.via = "proxy_auth";
            return r;
        }
        std::vector<const identity*> hits;
        for (const auto& id : identities) {
            if (!id.proxy_auth)
                continue;
            // Compare every candidate (no early exit) so timing does not tell which.
            // Bearer carries no user name; Basic's must equal the configured one if set.
            bool user_ok = p->is_bearer || id.proxy_auth->username.empty() ||
                           id.proxy_auth->username == p->username;
            bool secret_ok = digest_equals(id.proxy_auth->token_sha256, p->secret_sha256);
            if (user_ok && secret_ok)
                hits.push_back(&id);
        }
        return pick(hits, "proxy_auth", "bad_credentials", true);
    }
    if (ev.source) {
        std::vector<const identity*> hits;
        for (const auto& id : identities)
            if (std::any_of(id.source_cidrs.begin(), id.source_cidrs.end(),
                            [&](const cidr& c) { return c.contains(*ev.source); }))
                hits.push_back(&id);
        if (!hits.empty())
            return pick(hits, "source", "no_identity", false);
    }
    caller_resolution r;
    r.reason = "no_identity";
    r.challenge = any_proxy_auth;
    return r;
}

} // namespace sluice::dlp
