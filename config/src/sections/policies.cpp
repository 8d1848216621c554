// The `policies` section: per identity, the ordered host/port/method/path rules and the
// warnings for rule combinations that load but probably do not do what is meant.
#include "loader.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace sluice::config {

namespace {

std::string at(const YAML::Mark& m) {
    return std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

// Two rules' host lists can name the same host (a sufficient test: "*", equal
// patterns, or one pattern matching the other's name or wildcard base).
bool hosts_overlap(const dlp::policy_rule& a, const dlp::policy_rule& b) {
    if (a.hosts.empty() || b.hosts.empty()) {
        return true;
    }
    auto base = [](const std::string& h) {
        return h.starts_with("*.") ? h.substr(2) : h == "*" ? std::string("x") : h;
    };
    for (const auto& x : a.hosts) {
        for (const auto& y : b.hosts) {
            if (x == "*" || y == "*" || x == y || dlp::host_matches(x, base(y)) ||
                dlp::host_matches(y, base(x))) {
                return true;
            }
        }
    }
    return false;
}

bool ports_overlap(const dlp::policy_rule& a, const dlp::policy_rule& b) {
    return a.ports.empty() || b.ports.empty() ||
           std::any_of(a.ports.begin(), a.ports.end(), [&](std::uint16_t p) {
               return std::find(b.ports.begin(), b.ports.end(), p) != b.ports.end();
           });
}

} // namespace

void loader::policies(const YAML::Node& n) {
    w_.seq(n, "policies", [&](const YAML::Node& item) {
        auto m =
            w_.map(item, "a policy",
                   {"identity", "rules", "dlp", "limits", "private_destinations", "credentials"});
        if (!m) {
            return;
        }
        dlp::policy p;
        if (auto* i = m->get("identity")) {
            if (auto s = w_.str(*i, "policy identity")) {
                p.identity = *s;
                if (!policy_identities_.insert(*s).second) {
                    w_.error(*i, "a policy for identity '" + *s + "' is already defined");
                }
                if (*s != "*") {
                    refs_.push_back({*s, i->Mark(), "policy identity"});
                }
            }
        } else {
            w_.error(m->mark, "policy needs an 'identity' (an identity name or \"*\")");
        }
        std::vector<YAML::Mark> rule_marks;
        if (auto* r = m->get("rules")) {
            w_.seq(*r, "rules", [&](const YAML::Node& e) {
                if (auto rule = policy_rule(e)) {
                    p.rules.push_back(std::move(*rule));
                    rule_marks.push_back(e.Mark());
                }
            });
        }
        if (auto* d = m->get("dlp")) {
            dlp_section(*d, p.dlp);
            opaque_rule_warnings(p, rule_marks, d->Mark());
        } else {
            opaque_rule_warnings(p, rule_marks, std::nullopt);
        }
        if (auto* l = m->get("limits")) {
            limits(*l, p);
        }
        if (auto* pd = m->get("private_destinations")) {
            w_.seq(*pd, "private_destinations", [&](const YAML::Node& e) {
                if (auto c = cidr(e, "private_destinations")) {
                    p.private_destinations.push_back(*c);
                }
            });
        }
        if (auto* cr = m->get("credentials")) {
            p.credentials.emplace();
            w_.seq(*cr, "credentials", [&](const YAML::Node& e) {
                if (auto s = w_.str(e, "policy credential")) {
                    p.credentials->push_back(*s);
                    credential_refs_.push_back({*s, e.Mark(), "policy credential"});
                }
            });
        }
        s_.policies.push_back(std::move(p));
    });
}

void loader::limits(const YAML::Node& n, dlp::policy& p) {
    auto lm =
        w_.map(n, "limits", {"requests_per_minute", "upload_per_minute", "max_connections"}, true);
    if (!lm) {
        return;
    }
    if (auto* x = lm->get("requests_per_minute")) {
        if (auto v = w_.u64(*x, "requests_per_minute", std::numeric_limits<std::uint32_t>::max())) {
            p.limits.requests_per_minute = *v;
        }
    }
    if (auto* x = lm->get("upload_per_minute")) {
        if (auto v = w_.size(*x, "upload_per_minute")) {
            p.limits.upload_per_minute = *v;
        }
    }
    if (auto* x = lm->get("max_connections")) {
        if (auto v = w_.u64(*x, "max_connections", std::numeric_limits<std::uint32_t>::max())) {
            p.limits.max_connections = *v;
        }
    }
}

void loader::warn(const YAML::Mark& m, std::string msg) {
    s_.warnings.push_back({w_.file(), m.line + 1, m.column + 1, std::move(msg)});
}

// An opaque (`inspect: false`) rule: its tunnels carry bytes no detector sees, and a
// method- or path-constrained deny or supervise rule before it for the same hosts
// could not apply to them (the proxy intercepts such CONNECTs instead).
void loader::opaque_rule_warnings(const dlp::policy& p, const std::vector<YAML::Mark>& marks,
                                  const std::optional<YAML::Mark>& dlp_mark) {
    for (std::size_t k = 0; k < p.rules.size() && k < marks.size(); ++k) {
        const auto& r = p.rules[k];
        if (r.inspect) {
            continue;
        }
        if (dlp_mark) {
            warn(marks[k], "rule is 'inspect: false': its tunnels are not scanned, so the "
                           "policy's dlp section (" +
                               at(*dlp_mark) +
                               ") covers only its other rules and plain http requests");
        }
        for (std::size_t j = 0; j < k; ++j) {
            const auto& c = p.rules[j];
            const bool constrained = !c.methods.empty() || !c.path_prefix.empty();
            if (constrained && c.act != dlp::action::allow && hosts_overlap(c, r) &&
                ports_overlap(c, r)) {
                warn(marks[k], "rule is 'inspect: false', but the rule at " + at(marks[j]) +
                                   " denies or supervises by method or path for the same "
                                   "hosts: CONNECTs it covers are intercepted so that rule "
                                   "can apply");
            }
        }
    }
}

std::optional<dlp::policy_rule> loader::policy_rule(const YAML::Node& n) {
    auto m = w_.map(n, "a policy rule",
                    {"hosts", "ports", "methods", "path_prefix", "action", "inspect"});
    if (!m) {
        return std::nullopt;
    }
    dlp::policy_rule r;
    bool ok = true;
    if (auto* h = m->get("hosts")) {
        w_.seq(*h, "hosts", [&](const YAML::Node& e) {
            if (auto s = host_pattern(e, "hosts")) {
                r.hosts.push_back(*s);
            } else {
                ok = false;
            }
        });
    }
    if (auto* p = m->get("ports")) {
        w_.seq(*p, "ports", [&](const YAML::Node& e) {
            if (auto v = port(e, "ports")) {
                r.ports.push_back(*v);
            } else {
                ok = false;
            }
        });
    }
    if (auto* ms = m->get("methods")) {
        ok = methods(*ms, r) && ok;
    }
    if (auto* pp = m->get("path_prefix")) {
        if (auto s = w_.str(*pp, "path_prefix")) {
            if (s->front() != '/') {
                w_.error(*pp, "path_prefix must start with '/'");
                ok = false;
            } else {
                r.path_prefix = *s;
            }
        }
    }
    if (auto* a = m->get("action")) {
        if (auto s = w_.one_of(*a, "action", {"allow", "deny", "supervise"})) {
            r.act = *s == "allow"  ? dlp::action::allow
                    : *s == "deny" ? dlp::action::deny
                                   : dlp::action::supervise;
        } else {
            ok = false;
        }
    } else {
        w_.error(m->mark, "policy rule needs an 'action' (allow | deny | supervise)");
        ok = false;
    }
    if (auto* i = m->get("inspect")) {
        if (auto b = w_.boolean(*i, "inspect")) {
            r.inspect = *b;
            if (!*b && (!r.methods.empty() || !r.path_prefix.empty())) {
                w_.error(*i,
                         "inspect: false cannot be combined with methods or path_prefix (an opaque "
                         "tunnel cannot enforce them)");
                ok = false;
            }
        }
    }
    if (!ok) {
        return std::nullopt;
    }
    return r;
}

// `methods`: upper-cased tokens of letters and '-'; false if any entry was wrong.
bool loader::methods(const YAML::Node& n, dlp::policy_rule& r) {
    bool ok = true;
    w_.seq(n, "methods", [&](const YAML::Node& e) {
        auto s = w_.str(e, "method");
        if (!s) {
            ok = false;
            return;
        }
        std::string up = *s;
        std::transform(up.begin(), up.end(), up.begin(), [](char c) {
            return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
        });
        if (!std::all_of(up.begin(), up.end(),
                         [](char c) { return (c >= 'A' && c <= 'Z') || c == '-'; })) {
            w_.error(e, "invalid method " + walker::shown(e) + " (expected e.g. GET, POST)");
            ok = false;
            return;
        }
        r.methods.push_back(up);
    });
    return ok;
}

} // namespace sluice::config
