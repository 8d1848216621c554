// The `supervise` section: how long a held request waits and the approval webhook.
#include "loader.hpp"

#include <boost/url/parse.hpp>

#include <utility>

namespace sluice::config {

void loader::supervise(const YAML::Node& n) {
    auto sm = w_.map(n, "supervise", {"timeout", "webhook"}, true);
    if (!sm) {
        return;
    }
    if (auto* t = sm->get("timeout")) {
        if (auto d = w_.duration(*t, "supervise.timeout")) {
            s_.supervise_timeout = *d;
        }
    }
    if (auto* h = sm->get("webhook")) {
        webhook(*h);
    }
}

// supervise.webhook: an absolute http(s) URL without userinfo or fragment. Errors never
// quote it: a hook URL's path or query usually is its secret (${VAR} expands).
void loader::webhook(const YAML::Node& n) {
    auto v = w_.str(n, "supervise.webhook");
    if (!v)
        return;
    auto u = boost::urls::parse_uri(*v);
    if (!u) {
        w_.error(n, "supervise.webhook is not an absolute URL");
    } else if (u->scheme() != "http" && u->scheme() != "https") {
        w_.error(n, "supervise.webhook must be an http:// or https:// URL");
    } else if (u->has_userinfo()) {
        w_.error(n, "supervise.webhook must not carry user:password");
    } else if (u->host().empty()) {
        w_.error(n, "supervise.webhook has no host");
    } else if (u->has_fragment()) {
        w_.error(n, "supervise.webhook must not have a #fragment");
    } else {
        s_.supervise_webhook = std::move(*v);
    }
}

} // namespace sluice::config
