// The `listeners`, `ca` and `upstream` sections: where sluice listens and what it trusts
// (CONTRACT.md "Configuration (YAML)").
#include "loader.hpp"

#include <utility>

namespace sluice::config {

void loader::listeners(const YAML::Node& n) {
    w_.seq(n, "listeners", [&](const YAML::Node& item) {
        auto m = w_.map(item, "a listener", {"address", "identity", "tls"});
        if (!m) {
            return;
        }
        listener_settings l;
        bool ok = true;
        if (auto* a = m->get("address")) {
            if (auto s = address(*a, "listener address")) {
                auto hp = parse_listen_address(*s);
                l.host = hp->host;
                l.port = hp->port;
            } else {
                ok = false;
            }
        } else {
            w_.error(m->mark, "listener needs an 'address' (host:port)");
            ok = false;
        }
        if (auto* i = m->get("identity")) {
            if (auto s = w_.str(*i, "listener identity")) {
                l.identity = *s;
                refs_.push_back({*s, i->Mark(), "listener identity"});
            }
        }
        if (auto* t = m->get("tls")) {
            l.tls = listener_tls(*t);
        }
        if (ok) {
            s_.listeners.push_back(std::move(l));
        }
    });
}

std::optional<listener_tls_settings> loader::listener_tls(const YAML::Node& n) {
    auto tm = w_.map(n, "listener tls", {"cert", "key", "client_ca"});
    if (!tm) {
        return std::nullopt;
    }
    listener_tls_settings tls;
    auto* c = tm->get("cert");
    auto* k = tm->get("key");
    if (!c || !k) {
        w_.error(tm->mark, "listener tls needs both 'cert' and 'key'");
    }
    if (c) {
        if (auto p = path(*c, "tls.cert")) {
            tls.cert = *p;
        }
    }
    if (k) {
        if (auto p = path(*k, "tls.key")) {
            tls.key = *p;
        }
    }
    if (auto* ca = tm->get("client_ca")) {
        tls.client_ca = path(*ca, "tls.client_ca");
    }
    return tls;
}

void loader::ca(const YAML::Node& n) {
    auto m = w_.map(n, "ca", {"cert", "key"}, true);
    if (!m) {
        return;
    }
    if (auto* c = m->get("cert")) {
        if (auto p = path(*c, "ca.cert")) {
            s_.ca_cert = *p;
        }
    }
    if (auto* k = m->get("key")) {
        if (auto p = path(*k, "ca.key")) {
            s_.ca_key = *p;
        }
    }
}

void loader::upstream(const YAML::Node& n) {
    auto m = w_.map(n, "upstream", {"ca_file", "connect_timeout"}, true);
    if (!m) {
        return;
    }
    if (auto* c = m->get("ca_file")) {
        s_.upstream_ca_file = path(*c, "upstream.ca_file");
    }
    if (auto* t = m->get("connect_timeout")) {
        if (auto d = w_.duration(*t, "upstream.connect_timeout")) {
            if (d->count() == 0) {
                w_.error(*t, "upstream.connect_timeout must be greater than 0");
            } else {
                s_.connect_timeout = *d;
            }
        }
    }
}

} // namespace sluice::config
