#include "destination.hpp"

#include "sluice/dlp/hostname.hpp"
#include "sluice/dlp/policy.hpp"
#include "sluice/proxy/metrics.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <iterator>

namespace sluice::proxy {

net::awaitable<resolve_result> resolve_destination(destination& d, const dlp::policy& policy) {
    std::vector<tcp::endpoint> found;
    boost::system::error_code aec;
    std::string_view literal = d.host;
    if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']')
        literal = literal.substr(1, literal.size() - 2);
    if (auto addr = net::ip::make_address(literal, aec); !aec) {
        found.emplace_back(addr, d.port);
    } else {
        tcp::resolver resolver(co_await net::this_coro::executor);
        auto [ec, results] =
            co_await resolver.async_resolve(d.host, std::to_string(d.port), as_tuple);
        if (ec || results.empty())
            co_return resolve_result::failed;
        for (const auto& r : results)
            found.push_back(r.endpoint());
    }
    d.endpoints.clear();
    for (const auto& ep : found) {
        auto ip = dlp::ip_address::parse(ep.address().to_string());
        if (!ip)
            co_return resolve_result::failed;
        if (dlp::is_private_destination(*ip)) {
            bool excepted =
                std::any_of(policy.private_destinations.begin(), policy.private_destinations.end(),
                            [&](const dlp::cidr& c) { return c.contains(*ip); });
            if (!excepted)
                co_return resolve_result::private_address;
        }
        d.endpoints.push_back(ep);
    }
    co_return resolve_result::ok;
}

net::awaitable<bool> reaches_same_server(destination& d, std::vector<std::string> names) {
    const auto plain = [](const net::ip::address& a) -> net::ip::address {
        if (a.is_v6() && a.to_v6().is_v4_mapped())
            return net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6());
        return a;
    };
    const auto ours = [&](const net::ip::address& a) {
        return std::any_of(d.endpoints.begin(), d.endpoints.end(), [&](const tcp::endpoint& ep) {
            return plain(ep.address()) == plain(a);
        });
    };
    std::size_t looked_up = 0;
    for (std::size_t i = 0; i < names.size(); ++i) {
        const std::string& name = names[i];
        if (name == "*")
            co_return true;
        if (name.starts_with("*."))
            continue;
        std::string_view literal = name;
        if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']')
            literal = literal.substr(1, literal.size() - 2);
        boost::system::error_code aec;
        bool hit = false;
        if (auto addr = net::ip::make_address(literal, aec); !aec) {
            hit = ours(addr);
        } else if (++looked_up > max_same_server_names) {
            std::copy_if(names.begin() + static_cast<std::ptrdiff_t>(i), names.end(),
                         std::back_inserter(d.same_server),
                         [](const std::string& n) { return !n.starts_with("*."); });
            co_return true;
        } else {
            tcp::resolver resolver(co_await net::this_coro::executor);
            auto [ec, results] = co_await resolver.async_resolve(name, "", as_tuple);
            // A name that does not resolve names no server to compare.
            for (const auto& r : ec ? decltype(results){} : results)
                hit = hit || ours(r.endpoint().address());
        }
        if (hit)
            d.same_server.push_back(name);
    }
    co_return !d.same_server.empty();
}

namespace {

// deny (or no rule) 3, supervise 2, an inspecting allow 1, an opaque allow 0.
int strictness(const dlp::policy_rule* r) noexcept {
    if (r == nullptr || r->act == dlp::action::deny)
        return 3;
    if (r->act == dlp::action::supervise)
        return 2;
    return r->inspect ? 1 : 0;
}

} // namespace

const dlp::policy_rule* rule_for(const dlp::policy& p, const destination& d,
                                 std::string_view method, std::string_view path) {
    const dlp::policy_rule* rule = dlp::match_rule(p, d.host, d.port, method, path, false);
    for (const auto& name : d.same_server) {
        const dlp::policy_rule* other = dlp::match_rule(p, name, d.port, method, path, false);
        if (other != nullptr && strictness(other) > strictness(rule))
            rule = other;
    }
    return rule;
}

dlp::verdict inspect_destination(flow_context& fc, std::string_view host, std::uint16_t port,
                                 const http::request_header<>* connect_head) {
    auto scan_started = std::chrono::steady_clock::now();
    dlp::variant_options vo;
    vo.protect = fc.gen->protect;
    dlp::inspector ins(*fc.policy, thread_scanner(fc.gen->settings->rules), std::move(vo));
    dlp::verdict v = ins.on_destination(host);
    std::size_t scanned = host.size();
    if (v.kind == dlp::verdict_kind::forward && connect_head != nullptr) {
        std::vector<dlp::header_view> headers;
        for (const auto& f : *connect_head) {
            headers.push_back({f.name_string(), f.value()});
            scanned += f.name_string().size() + f.value().size();
        }
        auto found = std::move(v.findings);
        v = ins.on_head(dlp::request_view{"CONNECT", "", host, port, headers});
        v.findings.insert(v.findings.begin(), found.begin(), found.end());
    }
    if (fc.state->stats)
        count_scan(*fc.state->stats, scan_started, scanned);
    return v;
}

bool parse_absolute_target(std::string_view target, destination& d, exchange_target& t) {
    auto u = boost::urls::parse_absolute_uri(target);
    if (!u || u->scheme_id() != boost::urls::scheme::http || !u->has_authority() ||
        u->has_userinfo())
        return false;
    d.host = dlp::normalize_host(u->encoded_host_address());
    if (d.host.empty())
        return false;
    d.port = u->has_port() ? u->port_number() : 80;
    if (d.port == 0)
        return false;
    t.scheme = "http";
    t.origin_form = std::string(u->encoded_path());
    if (t.origin_form.empty())
        t.origin_form = "/";
    if (u->has_query())
        t.origin_form += "?" + std::string(u->encoded_query());
    t.host_header = std::string(u->encoded_host_and_port());
    return true;
}

bool host_field_matches(const http::request_header<>& h, const destination& d,
                        std::uint16_t default_port) {
    auto range = h.equal_range(http::field::host);
    if (std::distance(range.first, range.second) != 1)
        return h.version() == 10 && range.first == range.second;
    auto auth = boost::urls::parse_authority(range.first->value());
    if (!auth || auth->has_userinfo())
        return false;
    std::uint16_t port = auth->has_port() ? auth->port_number() : default_port;
    return port == d.port && dlp::normalize_host(auth->encoded_host_address()) == d.host;
}

bool tunnel_origin_form(std::string_view target, const destination& d, exchange_target& t) {
    if (!target.empty() && target.front() == '/') {
        t.origin_form = std::string(target);
        return true;
    }
    auto u = boost::urls::parse_absolute_uri(target);
    if (!u || u->scheme_id() != boost::urls::scheme::https ||
        dlp::normalize_host(u->encoded_host_address()) != d.host)
        return false;
    t.origin_form = std::string(u->encoded_path());
    if (t.origin_form.empty())
        t.origin_form = "/";
    if (u->has_query())
        t.origin_form += "?" + std::string(u->encoded_query());
    return true;
}

std::string host_port(const destination& d, std::uint16_t default_port) {
    bool v6 = d.host.find(':') != std::string::npos;
    std::string h = v6 ? "[" + d.host + "]" : d.host;
    return d.port == default_port ? h : h + ":" + std::to_string(d.port);
}

} // namespace sluice::proxy
