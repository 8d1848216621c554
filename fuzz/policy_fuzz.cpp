// Address and host handling on arbitrary input: ip/cidr parsing, host normalisation and
// pattern matching must never crash, and must agree with themselves.
#include "sluice/dlp/policy.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    using namespace sluice::dlp;

    if (auto a = ip_address::parse(text)) {
        // Printing and parsing again gives the same address; a host is never private and
        // public at once, and a full-length CIDR of it contains exactly it.
        auto again = ip_address::parse(a->to_string());
        if (!again || !(*again == *a)) {
            __builtin_trap();
        }
        (void)is_private_destination(*a);
        auto c = cidr::parse(a->to_string());
        if (!c || !c->contains(*a)) {
            __builtin_trap();
        }
    }
    if (auto c = cidr::parse(text)) {
        if (c->prefix_len > 128 || !c->contains(c->network)) {
            __builtin_trap();
        }
    }

    // Normalisation is idempotent.
    const std::string n = normalize_host(text);
    if (normalize_host(n) != n) {
        __builtin_trap();
    }

    // Split the input into pattern and host at the first newline.
    const auto nl = text.find('\n');
    if (nl != std::string_view::npos) {
        const auto pattern = text.substr(0, nl);
        const auto host = text.substr(nl + 1);
        const bool m = host_matches(pattern, host);
        if (pattern == "*" && !host.empty() && !m) {
            __builtin_trap();
        }
        (void)host_matches(pattern, normalize_host(host));
    }
    return 0;
}
