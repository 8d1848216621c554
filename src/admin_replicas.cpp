#include "admin_replicas.hpp"

#include "sluice/detectors/text.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/url/parse.hpp>

#include <cstdlib>
#include <set>

namespace sluice::cli {

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr std::string_view default_admin = "http://127.0.0.1:9901";

struct admin_target {
    std::string url;  ///< as given (normalised with http://)
    std::string host; ///< name or IP address, no brackets
    bool host_is_ip = false;
    std::uint16_t port = 80;
    std::string base_path; ///< "" or "/prefix" without trailing '/'
};

std::expected<admin_target, std::string> parse_admin_url(std::string_view given) {
    std::string text(given);
    if (text.find("://") == std::string::npos)
        text = "http://" + text;
    auto parsed = boost::urls::parse_uri(text);
    if (!parsed)
        return std::unexpected("--admin '" + std::string(given) + "': not a URL");
    const auto& u = *parsed;
    const std::string scheme = text::lower(u.scheme());
    if (scheme != "http")
        return std::unexpected("--admin '" + std::string(given) +
                               "': the admin API speaks plain http:// (keep it on loopback or "
                               "a private network)");
    if (u.has_userinfo())
        return std::unexpected("--admin '" + std::string(given) +
                               "': no user info in the URL; the token comes from "
                               "--token-file or SLUICE_ADMIN_TOKEN");
    if (u.has_query() || u.has_fragment())
        return std::unexpected("--admin '" + std::string(given) + "': no query or fragment");
    admin_target t;
    t.url = text;
    switch (u.host_type()) {
    case boost::urls::host_type::ipv4:
        t.host = u.host_ipv4_address().to_string();
        t.host_is_ip = true;
        break;
    case boost::urls::host_type::ipv6:
        t.host = u.host_ipv6_address().to_string();
        t.host_is_ip = true;
        break;
    case boost::urls::host_type::name:
        t.host = u.host_name();
        break;
    default:
        return std::unexpected("--admin '" + std::string(given) + "': no usable host");
    }
    if (t.host.empty())
        return std::unexpected("--admin '" + std::string(given) + "': no host");
    if (u.has_port()) {
        auto p = u.port_number();
        if (p == 0)
            return std::unexpected("--admin '" + std::string(given) + "': bad port");
        t.port = p;
    }
    t.base_path = std::string(u.encoded_path());
    while (!t.base_path.empty() && t.base_path.back() == '/')
        t.base_path.pop_back();
    return t;
}

std::string endpoint_label(const tcp::endpoint& ep) {
    auto a = ep.address();
    return a.is_v6() ? "[" + a.to_string() + "]:" + std::to_string(ep.port())
                     : a.to_string() + ":" + std::to_string(ep.port());
}

} // namespace

std::expected<std::vector<replica>, std::string> find_replicas(const options& o) {
    std::vector<std::string> urls = o.admin;
    if (urls.empty()) {
        const char* env = std::getenv("SLUICE_ADMIN_URL");
        urls.emplace_back(env && *env ? env : default_admin);
    }
    std::vector<admin_target> targets;
    for (const auto& u : urls) {
        auto t = parse_admin_url(u);
        if (!t)
            return std::unexpected(t.error());
        targets.push_back(std::move(*t));
    }
    net::io_context ctx;
    tcp::resolver resolver(ctx);
    std::vector<replica> out;
    std::set<tcp::endpoint> seen;
    for (const auto& t : targets) {
        std::string host_header =
            t.host_is_ip && t.host.find(':') != std::string::npos ? "[" + t.host + "]" : t.host;
        if (t.port != 80)
            host_header += ":" + std::to_string(t.port);
        boost::system::error_code ec;
        // Every address of the name: each is one replica (a headless Service has one
        // A/AAAA record per ready pod).
        auto results =
            resolver.resolve(t.host, std::to_string(t.port), tcp::resolver::numeric_service, ec);
        if (ec || results.empty()) {
            out.push_back(replica{t.url, std::nullopt, host_header, t.base_path,
                                  "cannot resolve " + t.host + ": " +
                                      (ec ? ec.message() : std::string("no address"))});
            continue;
        }
        for (const auto& r : results) {
            tcp::endpoint ep = r.endpoint();
            if (!seen.insert(ep).second)
                continue;
            out.push_back(replica{endpoint_label(ep), ep, host_header, t.base_path, {}});
        }
    }
    return out;
}

} // namespace sluice::cli
