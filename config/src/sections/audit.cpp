// The `audit` section: where the hash-chained audit log goes, how often it is synced and
// when it rotates.
#include "loader.hpp"

#include <utility>

namespace sluice::config {

void loader::audit(const YAML::Node& n) {
    auto m = w_.map(n, "audit", {"path", "fsync", "max_size"}, true);
    if (!m) {
        return;
    }
    if (auto* p = m->get("path")) {
        if (auto v = path(*p, "audit.path")) {
            s_.audit_path = *v;
        }
    }
    if (auto* f = m->get("fsync")) {
        if (auto s = w_.str(*f, "audit.fsync")) {
            if (*s == "always") {
                s_.audit_fsync_always = true;
            } else if (auto d = parse_duration(*s); d && d->count() > 0) {
                s_.audit_fsync_always = false;
                s_.audit_fsync_interval = *d;
            } else {
                w_.error(*f, "invalid audit.fsync " + walker::shown(*f) +
                                 " (expected 'always' or an interval such as 1s)");
            }
        }
    }
    if (auto* ms = m->get("max_size")) {
        if (auto v = w_.size(*ms, "audit.max_size")) {
            s_.audit_max_size = *v;
        }
    }
}

} // namespace sluice::config
