// Host names for certificates and handshakes (tls_names.hpp).
#include "tls_names.hpp"

#include <arpa/inet.h>

namespace sluice::proxy {

namespace {
constexpr std::size_t max_host_length = 253;
} // namespace

std::optional<normalized_host> normalize_tls_host(std::string_view host) {
    bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
    if (bracketed)
        host = host.substr(1, host.size() - 2);
    if (!bracketed && host.ends_with('.'))
        host.remove_suffix(1);
    if (host.empty() || host.size() > max_host_length)
        return std::nullopt;
    normalized_host out;
    out.text.reserve(host.size());
    for (char c : host) {
        auto u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u >= 0x7f)
            return std::nullopt;
        out.text.push_back(static_cast<char>(u >= 'A' && u <= 'Z' ? u + ('a' - 'A') : u));
    }
    unsigned char buf[16];
    if (::inet_pton(AF_INET6, out.text.c_str(), buf) == 1)
        out.is_ip = true;
    else if (bracketed)
        return std::nullopt;
    else if (::inet_pton(AF_INET, out.text.c_str(), buf) == 1)
        out.is_ip = true;
    return out;
}

} // namespace sluice::proxy
