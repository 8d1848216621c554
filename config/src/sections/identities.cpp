// The `identities` section: who is calling (source CIDRs, proxy_auth, client_cert).
#include "loader.hpp"

#include "sluice/detectors/text.hpp"

#include <utility>

namespace sluice::config {

void loader::identities(const YAML::Node& n) {
    w_.seq(n, "identities", [&](const YAML::Node& item) {
        auto m = w_.map(item, "an identity", {"name", "source_cidrs", "proxy_auth", "client_cert"});
        if (!m) {
            return;
        }
        dlp::identity id;
        if (auto* nm = m->get("name")) {
            if (auto s = w_.str(*nm, "identity name")) {
                id.name = *s;
                if (*s == "*") {
                    w_.error(*nm, "'*' is reserved for policies and cannot name an identity");
                } else if (!identity_names_.emplace(*s, nm->Mark()).second) {
                    w_.error(*nm, "duplicate identity name '" + *s + "'");
                }
            }
        } else {
            w_.error(m->mark, "identity needs a 'name'");
        }
        if (auto* c = m->get("source_cidrs")) {
            w_.seq(*c, "source_cidrs", [&](const YAML::Node& e) {
                if (auto x = cidr(e, "source_cidrs")) {
                    id.source_cidrs.push_back(*x);
                }
            });
        }
        if (auto* pa = m->get("proxy_auth")) {
            id.proxy_auth = proxy_auth(*pa);
        }
        if (auto* cc = m->get("client_cert")) {
            id.client_cert = client_cert(*cc);
        }
        s_.identities.push_back(std::move(id));
    });
}

std::optional<dlp::proxy_auth_match> loader::proxy_auth(const YAML::Node& n) {
    auto pm = w_.map(n, "proxy_auth", {"username", "token_sha256"});
    if (!pm) {
        return std::nullopt;
    }
    dlp::proxy_auth_match auth;
    if (auto* u = pm->get("username")) {
        if (auto s = w_.str(*u, "proxy_auth.username")) {
            auth.username = *s;
        }
    }
    if (auto* t = pm->get("token_sha256")) {
        // Never echo this value: a user may paste the token itself here.
        if (auto s = w_.str(*t, "proxy_auth.token_sha256")) {
            std::string h = text::lower(*s);
            if (h.size() != 64 || !is_hex(h)) {
                w_.error(*t, "proxy_auth.token_sha256 must be 64 hex digits (the SHA-256 of "
                             "the token, not the token)");
            } else {
                auth.token_sha256 = h;
            }
        }
    } else {
        w_.error(pm->mark, "proxy_auth needs 'token_sha256'");
    }
    return auth;
}

std::optional<dlp::client_cert_match> loader::client_cert(const YAML::Node& n) {
    auto cm = w_.map(n, "client_cert", {"uri_san", "subject_cn"});
    if (!cm) {
        return std::nullopt;
    }
    dlp::client_cert_match match;
    if (auto* u = cm->get("uri_san")) {
        if (auto s = w_.str(*u, "client_cert.uri_san")) {
            match.uri_san = *s;
        }
    }
    if (auto* c = cm->get("subject_cn")) {
        if (auto s = w_.str(*c, "client_cert.subject_cn")) {
            match.subject_cn = *s;
        }
    }
    if (!cm->get("uri_san") && !cm->get("subject_cn")) {
        w_.error(cm->mark, "client_cert needs 'uri_san' or 'subject_cn'");
    }
    return match;
}

} // namespace sluice::config
