// The `control_store` section (issue 22): the Redis a fleet of replicas shares for the
// kill switch. Errors never quote the URL: it usually carries the store's password.
#include "loader.hpp"

#include <boost/url/parse.hpp>

#include <string>
#include <system_error>
#include <utility>

namespace sluice::config {

void loader::control_store(const YAML::Node& n) {
    auto m = w_.map(n, "control_store", {"redis", "on_unavailable", "connect_timeout"});
    if (!m)
        return;
    control_store_settings cs;
    if (auto* r = m->get("redis")) {
        redis_store(*r, cs);
    } else {
        w_.error(m->mark, "control_store needs a redis: {url: ...} entry");
    }
    if (auto* u = m->get("on_unavailable")) {
        if (auto v = w_.one_of(*u, "control_store.on_unavailable", {"last_known", "fail_closed"}))
            cs.fail_closed = *v == "fail_closed";
    }
    if (auto* t = m->get("connect_timeout")) {
        if (auto d = w_.duration(*t, "control_store.connect_timeout")) {
            if (d->count() == 0)
                w_.error(*t, "control_store.connect_timeout must be more than 0");
            else
                cs.connect_timeout = *d;
        }
    }
    s_.control_store = std::move(cs);
}

// redis: {url, key_prefix, tls: {ca_file}}. The URL's scheme, host, port and database
// number are checked here, so that a typo fails check-config rather than the first kill.
void loader::redis_store(const YAML::Node& n, control_store_settings& cs) {
    auto m = w_.map(n, "control_store.redis", {"url", "key_prefix", "tls"});
    if (!m)
        return;
    if (auto* u = m->get("url")) {
        if (auto v = w_.str(*u, "control_store.redis.url")) {
            // A raw '#', '?', '/' or '@' in the password moves the URL's parts around (the
            // host or port then looks wrong): say how to write them, never the URL.
            const std::string hint =
                v->find_first_of("#?@") != std::string::npos
                    ? " (if the password holds '#', '?', '/' or '@', write them %23, %3F, %2F, %40)"
                    : "";
            auto url = boost::urls::parse_uri(*v);
            if (!url) {
                w_.error(*u, "control_store.redis.url is not an absolute URL" + hint);
            } else if (url->scheme() != "redis" && url->scheme() != "rediss") {
                w_.error(*u, "control_store.redis.url must be a redis:// or rediss:// URL");
            } else if (url->host().empty()) {
                w_.error(*u, "control_store.redis.url has no host" + hint);
            } else if (url->has_port() && (url->port().empty() || url->port().size() > 5 ||
                                           std::stoul(std::string(url->port())) == 0 ||
                                           std::stoul(std::string(url->port())) > 65535)) {
                w_.error(*u, "control_store.redis.url has an invalid port (1-65535)" + hint);
            } else if (url->has_userinfo() && !url->has_password()) {
                w_.error(*u, "control_store.redis.url has a user but no password (a password "
                             "alone is written redis://:PASSWORD@host)");
            } else if (auto p = url->path();
                       !p.empty() && p != "/" && p.find_first_not_of("/0123456789") != p.npos) {
                w_.error(*u,
                         "control_store.redis.url's path must be a database number (/0)" + hint);
            } else if (url->has_query() || url->has_fragment()) {
                w_.error(*u, "control_store.redis.url must not have a ?query or #fragment" + hint);
            } else {
                cs.url = std::move(*v);
            }
        }
    } else {
        w_.error(m->mark, "control_store.redis needs a url");
    }
    if (auto* k = m->get("key_prefix")) {
        if (auto v = w_.str(*k, "control_store.redis.key_prefix"))
            cs.key_prefix = std::move(*v);
    }
    if (auto* t = m->get("tls")) {
        auto tm = w_.map(*t, "control_store.redis.tls", {"ca_file"}, true);
        if (tm) {
            if (auto* c = tm->get("ca_file")) {
                cs.ca_file = path(*c, "control_store.redis.tls.ca_file");
                std::error_code ec;
                if (cs.ca_file && !fs::exists(*cs.ca_file, ec))
                    w_.error(*c, "control_store.redis.tls.ca_file " + cs.ca_file->string() +
                                     " does not exist");
            }
        }
    }
}

} // namespace sluice::config
