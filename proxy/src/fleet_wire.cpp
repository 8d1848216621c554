// The fleet's readers of outside bytes (fleet_wire.hpp).
#include "fleet_wire.hpp"

#include <boost/json/parse.hpp>
#include <boost/url/parse.hpp>

#include <charconv>

namespace sluice::proxy {

std::expected<redis_endpoint, std::string> redis_endpoint::parse(std::string_view url) {
    auto u = boost::urls::parse_uri(url);
    if (!u)
        return std::unexpected("the control store URL is not an absolute URL");
    redis_endpoint ep;
    if (u->scheme() == "rediss")
        ep.tls = true;
    else if (u->scheme() != "redis")
        return std::unexpected("the control store URL must be redis:// or rediss://");
    ep.host = u->host_address();
    if (ep.host.empty())
        return std::unexpected("the control store URL has no host");
    if (u->has_port())
        ep.port = u->port();
    if (u->has_userinfo()) {
        ep.user = u->user();
        ep.password = u->password();
    }
    std::string_view path = u->encoded_path();
    while (!path.empty() && path.front() == '/')
        path.remove_prefix(1);
    if (!path.empty()) {
        auto [end, ec] = std::from_chars(path.data(), path.data() + path.size(), ep.db);
        if (ec != std::errc{} || end != path.data() + path.size())
            return std::unexpected("the control store URL's path must be a database number");
    }
    return ep;
}

namespace fleet_detail {

std::uint64_t to_u64(std::string_view s) {
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc{} && end == s.data() + s.size() ? v : 0;
}

std::optional<shared_state> from_strings(const std::vector<std::string>& v) {
    if (v.size() < 3)
        return std::nullopt;
    shared_state s;
    s.epoch = v[0];
    auto [end, ec] = std::from_chars(v[1].data(), v[1].data() + v[1].size(), s.version);
    if (ec != std::errc{} || end != v[1].data() + v[1].size() || (v[2] != "0" && v[2] != "1"))
        return std::nullopt;
    s.killed.all = v[2] == "1";
    s.killed.identities.assign(v.begin() + 3, v.end());
    return s;
}

std::optional<shared_state> from_message(std::string_view json) {
    boost::system::error_code ec;
    auto doc = boost::json::parse(json, ec);
    if (ec || !doc.is_array())
        return std::nullopt;
    std::vector<std::string> v;
    for (const auto& e : doc.as_array()) {
        if (!e.is_string())
            return std::nullopt;
        v.emplace_back(e.as_string());
    }
    return from_strings(v);
}

std::optional<decision_message> parse_decision_message(std::string_view json) {
    boost::system::error_code ec;
    auto v = boost::json::parse(json, ec);
    const auto* o = ec ? nullptr : v.if_object();
    const auto* id = o ? o->if_contains("id") : nullptr;
    const auto* approve = o ? o->if_contains("approve") : nullptr;
    const auto* by = o ? o->if_contains("by") : nullptr;
    const auto* reason = o ? o->if_contains("reason") : nullptr;
    if (!id || !id->is_string() || !approve || !approve->is_bool() || !by || !by->is_string() ||
        !reason || !reason->is_string())
        return std::nullopt;
    return decision_message{std::string(id->as_string()), approve->as_bool(),
                            std::string(by->as_string()), std::string(reason->as_string())};
}

std::optional<stored_approval> parse_stored_approval(std::string_view value) {
    auto nl = value.find('\n');
    if (nl == value.npos)
        return std::nullopt;
    boost::system::error_code ec;
    auto v = boost::json::parse(value.substr(nl + 1), ec);
    if (ec || !v.is_object())
        return std::nullopt;
    return stored_approval{to_u64(value.substr(0, nl)), std::move(v.as_object())};
}

} // namespace fleet_detail

} // namespace sluice::proxy
