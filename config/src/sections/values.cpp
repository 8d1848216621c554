// The typed scalar readers the sections share: paths under data_dir, listen addresses,
// CIDRs, host patterns and ports. Each reports its own problem at the value.
#include "loader.hpp"

#include "units.hpp"

#include <utility>

namespace sluice::config {

namespace {

/// A DNS name we are willing to match: letters, digits, '-', '_' labels of 1..63 bytes.
bool is_dns_name(std::string_view s) {
    if (s.empty() || s.size() > 253) {
        return false;
    }
    std::size_t label = 0;
    for (char c : s) {
        if (c == '.') {
            if (label == 0) {
                return false;
            }
            label = 0;
            continue;
        }
        const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
        if (!ok || ++label > 63) {
            return false;
        }
    }
    return label > 0;
}

} // namespace

bool is_hex(std::string_view s) {
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

/// "127.0.0.1:3128", "[::1]:3128", "localhost:3128". Port 0 means ephemeral.
std::optional<host_port> parse_listen_address(std::string_view text) {
    std::string_view host;
    std::string_view port;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
            return std::nullopt;
        }
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
        auto a = dlp::ip_address::parse(host);
        if (!a || a->is_v4()) {
            return std::nullopt;
        }
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos) {
            return std::nullopt;
        }
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
        if (host != "localhost") {
            auto a = dlp::ip_address::parse(host);
            if (!a || !a->is_v4()) { // a bare IPv6 needs brackets to be unambiguous
                return std::nullopt;
            }
        }
    }
    auto p = parse_u64(port);
    if (!p || *p > 65535 || port.size() > 5) {
        return std::nullopt;
    }
    return host_port{std::string(host), static_cast<std::uint16_t>(*p)};
}

fs::path loader::under_data_dir(const std::string& p) const {
    fs::path path(p);
    return path.is_absolute() ? path.lexically_normal() : (s_.data_dir / path).lexically_normal();
}

std::optional<fs::path> loader::path(const YAML::Node& n, std::string_view what) {
    auto v = w_.str(n, what);
    if (!v) {
        return std::nullopt;
    }
    if (v->find('\0') != std::string::npos) {
        w_.error(n, std::string(what) + " contains a NUL byte");
        return std::nullopt;
    }
    return under_data_dir(*v);
}

std::optional<std::string> loader::address(const YAML::Node& n, std::string_view what) {
    auto v = w_.str(n, what);
    if (!v) {
        return std::nullopt;
    }
    if (!parse_listen_address(*v)) {
        w_.error(n, "invalid " + std::string(what) + " " + walker::shown(n) +
                        " (expected host:port with an IPv4 address, [IPv6] or localhost)");
        return std::nullopt;
    }
    return v;
}

std::optional<dlp::cidr> loader::cidr(const YAML::Node& n, std::string_view what) {
    auto v = w_.str(n, what);
    if (!v) {
        return std::nullopt;
    }
    auto c = dlp::cidr::parse(*v);
    if (!c) {
        w_.error(n, "invalid CIDR " + walker::shown(n) + " in " + std::string(what) +
                        " (expected e.g. 10.0.0.0/8 or fd00::/8)");
    }
    return c;
}

std::optional<std::string> loader::host_pattern(const YAML::Node& n, std::string_view what) {
    auto v = w_.str(n, what);
    if (!v) {
        return std::nullopt;
    }
    if (*v == "*") {
        return v;
    }
    const bool wildcard = v->starts_with("*.");
    std::string rest =
        dlp::normalize_host(wildcard ? std::string_view(*v).substr(2) : std::string_view(*v));
    const bool ok = dlp::ip_address::parse(rest).has_value() ? !wildcard : is_dns_name(rest);
    if (!ok) {
        w_.error(n, "invalid host pattern " + walker::shown(n) + " in " + std::string(what) +
                        " (expected \"*\", \"*.example.com\", a host name or an IP address)");
        return std::nullopt;
    }
    return wildcard ? "*." + rest : rest;
}

std::optional<std::uint16_t> loader::port(const YAML::Node& n, std::string_view what) {
    auto v = w_.str(n, what);
    if (!v) {
        return std::nullopt;
    }
    auto p = parse_u64(*v);
    if (!p || *p == 0 || *p > 65535) {
        w_.error(n, "port " + walker::shown(n) + " in " + std::string(what) +
                        " is out of range (1-65535)");
        return std::nullopt;
    }
    return static_cast<std::uint16_t>(*p);
}

} // namespace sluice::config
