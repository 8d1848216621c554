// The `credentials` and `protected_values` sections and the secret sources they read
// (environment variables or files), checked for what a header or query may carry.
#include "loader.hpp"

#include "sluice/detectors/text.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

namespace sluice::config {

namespace {

bool is_control(char ch) {
    auto u = static_cast<unsigned char>(ch);
    return u < 0x20 || u == 0x7f;
}

// token = 1*tchar (RFC 9110 section 5.6.2)
bool is_token(std::string_view t) {
    static constexpr std::string_view extra = "!#$%&'*+-.^_`|~";
    return !t.empty() && std::all_of(t.begin(), t.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) ||
               extra.find(ch) != std::string_view::npos;
    });
}

bool is_reserved_field(std::string_view name) {
    static constexpr std::string_view reserved[] = {"host",
                                                    "content-length",
                                                    "transfer-encoding",
                                                    "connection",
                                                    "keep-alive",
                                                    "proxy-connection",
                                                    "proxy-authorization",
                                                    "proxy-authenticate",
                                                    "te",
                                                    "trailer",
                                                    "upgrade",
                                                    "expect"};
    std::string l = text::lower(name);
    return std::find(std::begin(reserved), std::end(reserved), l) != std::end(reserved);
}

// The file's bytes without trailing CR/LF (secret files usually end in a newline).
std::expected<std::string, std::string> read_secret_file(const std::filesystem::path& p) {
    constexpr std::size_t max_secret = 64 * 1024;
    std::ifstream in(p, std::ios::binary);
    if (!in) {
        return std::unexpected(std::string("cannot be read: ") + std::strerror(errno));
    }
    std::string v(max_secret + 1, '\0');
    in.read(v.data(), static_cast<std::streamsize>(v.size()));
    if (in.bad()) {
        return std::unexpected("cannot be read");
    }
    v.resize(static_cast<std::size_t>(in.gcount()));
    if (v.size() > max_secret) {
        return std::unexpected("is larger than 64 KiB");
    }
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) {
        v.pop_back();
    }
    if (v.empty()) {
        return std::unexpected("is empty");
    }
    return v;
}

} // namespace

std::optional<secret_source> loader::source(const YAML::Node& n, std::string_view what) {
    auto m = w_.map(n, what, {"env", "file"});
    if (!m) {
        return std::nullopt;
    }
    auto* e = m->get("env");
    auto* f = m->get("file");
    if ((e != nullptr) == (f != nullptr)) {
        w_.error(m->mark, std::string(what) + " needs exactly one of 'env' or 'file'");
        return std::nullopt;
    }
    secret_source src;
    if (e) {
        auto s = w_.str(*e, "env");
        if (!s) {
            return std::nullopt;
        }
        src.from = secret_source::kind::env;
        src.ref = *s;
        const char* v = std::getenv(s->c_str());
        if (v == nullptr || *v == '\0') {
            w_.error(*e,
                     std::string(what) + ": environment variable '" + *s + "' is not set or empty");
            return std::nullopt;
        }
        src.value = v;
    } else {
        auto p = path(*f, "file");
        if (!p) {
            return std::nullopt;
        }
        src.from = secret_source::kind::file;
        src.ref = p->string();
        auto v = read_secret_file(*p);
        if (!v) {
            w_.error(*f, std::string(what) + ": secret file '" + src.ref + "' " + v.error());
            return std::nullopt;
        }
        src.value = std::move(*v);
    }
    if (src.value.size() < 4) {
        w_.error(e ? *e : *f, std::string(what) + " ('" + src.ref + "') is shorter than 4 bytes");
        return std::nullopt;
    }
    return src;
}

void loader::protected_values(const YAML::Node& n) {
    w_.seq(n, "protected_values", [&](const YAML::Node& e) {
        if (auto s = source(e, "a protected value")) {
            s_.protected_values.push_back(std::move(*s));
        }
    });
}

void loader::credentials(const YAML::Node& n) {
    std::set<std::string> names;
    std::set<std::string> placeholders;
    w_.seq(n, "credentials", [&](const YAML::Node& e) { credential(e, names, placeholders); });
    // One placeholder inside another would make the longer one ambiguous.
    for (const auto& a : s_.credentials) {
        for (const auto& b : s_.credentials) {
            if (&a != &b && !a.placeholder.empty() && a.placeholder != b.placeholder &&
                b.placeholder.find(a.placeholder) != std::string::npos) {
                w_.error(n, "placeholder '" + a.placeholder + "' (credential '" + a.name +
                                "') is part of placeholder '" + b.placeholder + "' (credential '" +
                                b.name + "')");
            }
        }
    }
}

void loader::credential(const YAML::Node& e, std::set<std::string>& names,
                        std::set<std::string>& placeholders) {
    auto m = w_.map(e, "a credential",
                    {"name", "placeholder", "source", "hosts", "ports", "path_prefix", "header",
                     "query", "identities"});
    if (!m) {
        return;
    }
    credential_settings c;
    if (auto* nm = m->get("name")) {
        if (auto s = w_.str(*nm, "credential name")) {
            c.name = *s;
            if (!names.insert(*s).second) {
                w_.error(*nm, "duplicate credential name '" + *s + "'");
            }
        }
    } else {
        w_.error(m->mark, "credential needs a 'name'");
    }
    if (auto* p = m->get("placeholder")) {
        if (auto s = w_.str(*p, "placeholder")) {
            c.placeholder = *s;
            if (s->size() < 4) {
                w_.error(*p, "placeholder must be at least 4 characters");
            } else if (!placeholders.insert(*s).second) {
                w_.error(*p, "placeholder '" + *s + "' is used by another credential");
            }
        }
    } else {
        w_.error(m->mark, "credential needs a 'placeholder'");
    }
    credential_secret(*m, c); // after the placeholder: the secret must differ from it
    credential_scope(*m, c);
    auto* hd = m->get("header");
    auto* q = m->get("query");
    if ((hd != nullptr) == (q != nullptr)) {
        w_.error(m->mark, "credential needs exactly one of 'header' or 'query'");
    }
    if (hd) {
        credential_header(*hd, c);
    }
    if (q) {
        credential_query(*q, c);
    }
    if (auto* ids = m->get("identities")) {
        w_.seq(*ids, "identities", [&](const YAML::Node& x) {
            if (auto s = w_.str(x, "credential identity")) {
                c.identities.push_back(*s);
                refs_.push_back({*s, x.Mark(), "credential identity"});
            }
        });
    }
    if (c.ports.empty() && !m->get("ports")) {
        c.ports.push_back(443); // a secret goes over TLS unless a port says otherwise
    }
    credential_names_.insert(c.name);
    s_.credentials.push_back(std::move(c));
}

void loader::credential_secret(const walker::map_view& m, credential_settings& c) {
    auto* src = m.get("source");
    if (!src) {
        w_.error(m.mark, "credential needs a 'source' ({env: NAME} or {file: PATH})");
        return;
    }
    if (auto s = source(*src, "credential source")) {
        // The secret goes into a header or query: CR, LF, NUL or any other
        // control byte would split or smuggle (RFC 9110 section 5.5).
        if (std::any_of(s->value.begin(), s->value.end(), is_control)) {
            w_.error(*src, "credential source ('" + s->ref +
                               "') contains control characters (CR, LF, NUL, ...)");
        } else if (s->value == c.placeholder) {
            w_.error(*src, "credential source ('" + s->ref +
                               "') holds the placeholder itself, not a secret");
        }
        c.source = std::move(*s);
    }
}

// Where the secret may go: `hosts` (required, not "*"), `ports`, `path_prefix`.
void loader::credential_scope(const walker::map_view& m, credential_settings& c) {
    if (auto* h = m.get("hosts")) {
        w_.seq(*h, "hosts", [&](const YAML::Node& x) {
            if (auto s = host_pattern(x, "credential hosts")) {
                c.hosts.push_back(*s);
            }
        });
    }
    if (c.hosts.empty()) {
        w_.error(m.get("hosts") ? m.get("hosts")->Mark() : m.mark,
                 "credential needs 'hosts' (where the secret may be sent)");
    }
    if (std::find(c.hosts.begin(), c.hosts.end(), "*") != c.hosts.end()) {
        w_.error(*m.get("hosts"), "credential hosts must name the service, not '*' (every host)");
    }
    if (auto* p = m.get("ports")) {
        w_.seq(*p, "ports", [&](const YAML::Node& x) {
            if (auto v = port(x, "credential ports")) {
                c.ports.push_back(*v);
            }
        });
    }
    if (auto* pp = m.get("path_prefix")) {
        if (auto s = w_.str(*pp, "credential path_prefix")) {
            if (!s->starts_with('/')) {
                w_.error(*pp, "credential path_prefix must start with '/'");
            }
            c.path_prefix = *s;
        }
    }
}

void loader::credential_header(const YAML::Node& n, credential_settings& c) {
    auto hm = w_.map(n, "credential header", {"name", "value"});
    if (!hm) {
        return;
    }
    if (auto* x = hm->get("name")) {
        if (auto s = w_.str(*x, "header name")) {
            c.header_name = *s;
            if (!is_token(*s)) {
                w_.error(*x, "credential header name '" + *s +
                                 "' is not a field name (RFC 9110 section 5.1)");
            } else if (is_reserved_field(*s)) {
                w_.error(*x, "credential header '" + *s +
                                 "' is a framing or hop-by-hop field and cannot carry a secret");
            }
        }
    } else {
        w_.error(hm->mark, "credential header needs a 'name'");
    }
    if (auto* x = hm->get("value")) {
        if (auto s = w_.str(*x, "header value")) {
            if (s->find("{secret}") == std::string::npos) {
                w_.error(*x, "credential header value must contain '{secret}'");
            }
            if (std::any_of(s->begin(), s->end(), is_control)) {
                w_.error(*x, "credential header value contains control characters");
            }
            c.header_value_template = *s;
        }
    } else {
        c.header_value_template = "{secret}";
    }
}

void loader::credential_query(const YAML::Node& n, credential_settings& c) {
    auto qm = w_.map(n, "credential query", {"name"});
    if (!qm) {
        return;
    }
    if (auto* x = qm->get("name")) {
        if (auto s = w_.str(*x, "query name")) {
            c.query_name = *s;
        }
    } else {
        w_.error(qm->mark, "credential query needs a 'name'");
    }
}

} // namespace sluice::config
