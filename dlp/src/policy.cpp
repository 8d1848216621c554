// Identities, policies and the address checks the data path consults. Address text is
// parsed with the C library (inet_pton/inet_aton/inet_ntop) rather than by hand: those
// parsers are the ones the resolver and the kernel agree with, so what we check is what
// a connect() would reach.
#include "sluice/dlp/policy.hpp"

#include "sluice/detectors/text.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <charconv>
#include <cstring>
#include <memory>
#include <netinet/in.h>
#include <unicode/uidna.h>

namespace sluice::dlp {

namespace {

using text::ascii_lower;
using text::iequals;

ip_address from_v4(const std::uint8_t* v4) noexcept {
    ip_address a;
    a.bytes[10] = 0xff;
    a.bytes[11] = 0xff;
    std::memcpy(a.bytes.data() + 12, v4, 4);
    return a;
}

// IANA IPv4 Special-Purpose Address Registry (RFC 6890), every block whose "Globally
// Reachable" is False, plus multicast 224/4 (RFC 5771), which no unicast client reaches.
// 192.0.0.0/24 is denied whole: its two anycast exceptions (192.0.0.9 PCP, 192.0.0.10
// TURN) are not destinations an agent needs, and one rule is easier to audit.
bool v4_private(const std::uint8_t* b) noexcept {
    const std::uint8_t o0 = b[0];
    const std::uint8_t o1 = b[1];
    const std::uint8_t o2 = b[2];
    if (o0 == 0 || o0 == 10 || o0 == 127) { // "this network", RFC 1918, loopback
        return true;
    }
    if (o0 == 172 && (o1 & 0xf0) == 16) { // 172.16.0.0/12
        return true;
    }
    if (o0 == 192 && o1 == 168) {
        return true;
    }
    if (o0 == 169 && o1 == 254) { // link-local, cloud metadata 169.254.169.254
        return true;
    }
    if (o0 == 100 && (o1 & 0xc0) == 64) { // carrier-grade NAT 100.64.0.0/10
        return true;
    }
    // IETF protocol assignments 192.0.0.0/24 (RFC 6890: DS-Lite B4 192.0.0.0/29, dummy
    // 192.0.0.8, NAT64 discovery 192.0.0.170/171) and TEST-NET-1 192.0.2.0/24 (RFC 5737).
    if (o0 == 192 && o1 == 0 && (o2 == 0 || o2 == 2)) {
        return true;
    }
    if (o0 == 198 && (o1 & 0xfe) == 18) { // benchmarking 198.18.0.0/15 (RFC 2544)
        return true;
    }
    if ((o0 == 198 && o1 == 51 && o2 == 100) || (o0 == 203 && o1 == 0 && o2 == 113)) {
        return true; // TEST-NET-2 and TEST-NET-3 (RFC 5737)
    }
    if (o0 >= 224) { // multicast 224/4, reserved 240/4, broadcast 255.255.255.255
        return true;
    }
    return false;
}

// 2001::/23, IETF protocol assignments (RFC 2928), is not globally reachable except for
// the blocks the IPv6 Special-Purpose Address Registry lists as reachable: PCP, TURN and
// DNS-SD SRP anycast 2001:1::1..3, AMT 2001:3::/32, AS112-v6 2001:4:112::/48, ORCHIDv2
// 2001:20::/28 and DRIP 2001:30::/28. Teredo 2001::/32 is judged by its client address.
bool v6_ietf_private(const std::uint8_t* b) noexcept {
    const unsigned w1 = (unsigned{b[2]} << 8) | b[3]; // second 16-bit group
    if (w1 == 1) {
        const bool anycast = std::all_of(b + 4, b + 15, [](std::uint8_t x) { return x == 0; }) &&
                             b[15] >= 1 && b[15] <= 3;
        return !anycast;
    }
    if (w1 == 3) {
        return false;
    }
    if (w1 == 4 && b[4] == 0x01 && b[5] == 0x12) {
        return false;
    }
    if ((w1 & 0xfff0) == 0x20 || (w1 & 0xfff0) == 0x30) {
        return false;
    }
    return true;
}

bool all_zero(const std::uint8_t* b, std::size_t n) noexcept {
    return std::all_of(b, b + n, [](std::uint8_t x) { return x == 0; });
}

// One UTS #46 processor for the process: ICU documents UIDNA objects as immutable and
// safe to share between threads once opened. Non-transitional processing maps "ß" and
// ZWJ/ZWNJ to themselves, as IDNA2008 and every current browser do, so the A-label we
// match is the one a client's resolver will look up. STD3 rules reject '_', ':', '[' and
// the like inside an IDN (an ASCII host never takes this path); bidi and CONTEXTJ checks
// reject the spoofing shapes UTS #46 section 4 lists.
const UIDNA* uts46() noexcept {
    struct closer {
        void operator()(UIDNA* p) const noexcept { uidna_close(p); }
    };
    static const std::unique_ptr<UIDNA, closer> idna = [] {
        UErrorCode status = U_ZERO_ERROR;
        UIDNA* p = uidna_openUTS46(UIDNA_NONTRANSITIONAL_TO_ASCII | UIDNA_USE_STD3_RULES |
                                       UIDNA_CHECK_BIDI | UIDNA_CHECK_CONTEXTJ,
                                   &status);
        if (U_FAILURE(status)) {
            uidna_close(p);
            p = nullptr;
        }
        return std::unique_ptr<UIDNA, closer>(p);
    }();
    return idna.get();
}

// UTF-8 host name to its ASCII (punycode A-label) form; empty when ICU reports any error
// for the name (disallowed or unassigned code points, ill-formed UTF-8, bidi or hyphen
// violations, empty or over-long labels) or ICU itself is unavailable: callers treat an
// empty host as invalid, so a name we cannot map is denied rather than matched raw.
std::string idna_to_ascii(std::string_view host) {
    const UIDNA* idna = uts46();
    if (idna == nullptr || host.size() > 1024) {
        return {};
    }
    // Mapping can grow the text (one code point may expand to several letters, each label
    // gains "xn--"); 4x plus slack covers any name that can still be a valid DNS name, and
    // ICU reports U_BUFFER_OVERFLOW_ERROR rather than truncating if it is not.
    std::string out(host.size() * 4 + 64, '\0');
    UIDNAInfo info = UIDNA_INFO_INITIALIZER;
    UErrorCode status = U_ZERO_ERROR;
    const int32_t n =
        uidna_nameToASCII_UTF8(idna, host.data(), static_cast<int32_t>(host.size()), out.data(),
                               static_cast<int32_t>(out.size()), &info, &status);
    if (U_FAILURE(status) || info.errors != 0 || n <= 0 ||
        static_cast<std::size_t>(n) > out.size()) {
        return {};
    }
    out.resize(static_cast<std::size_t>(n));
    return out;
}

} // namespace

std::optional<ip_address> ip_address::parse(std::string_view text) {
    // inet_pton needs a NUL-terminated string; the longest valid IPv6 text is 45 bytes.
    char buf[INET6_ADDRSTRLEN + 1];
    if (text.empty() || text.size() >= sizeof buf || text.find('\0') != std::string_view::npos) {
        return std::nullopt;
    }
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    std::uint8_t raw[16];
    if (::inet_pton(AF_INET, buf, raw) == 1) {
        return from_v4(raw);
    }
    if (::inet_pton(AF_INET6, buf, raw) == 1) {
        ip_address a;
        std::memcpy(a.bytes.data(), raw, 16);
        return a;
    }
    return std::nullopt;
}

bool ip_address::is_v4() const noexcept {
    return all_zero(bytes.data(), 10) && bytes[10] == 0xff && bytes[11] == 0xff;
}

std::string ip_address::to_string() const {
    char buf[INET6_ADDRSTRLEN];
    const char* r = is_v4() ? ::inet_ntop(AF_INET, bytes.data() + 12, buf, sizeof buf)
                            : ::inet_ntop(AF_INET6, bytes.data(), buf, sizeof buf);
    return r ? std::string(r) : std::string();
}

std::optional<cidr> cidr::parse(std::string_view text) {
    const auto slash = text.find('/');
    const auto addr = ip_address::parse(text.substr(0, slash));
    if (!addr) {
        return std::nullopt;
    }
    const unsigned max_len = addr->is_v4() ? 32 : 128;
    unsigned len = max_len;
    if (slash != std::string_view::npos) {
        const auto digits = text.substr(slash + 1);
        if (digits.empty() || digits.size() > 3 ||
            !std::all_of(digits.begin(), digits.end(),
                         [](char c) { return c >= '0' && c <= '9'; })) {
            return std::nullopt;
        }
        std::from_chars(digits.data(), digits.data() + digits.size(), len);
        if (len > max_len) {
            return std::nullopt;
        }
    }
    cidr c;
    c.prefix_len = addr->is_v4() ? len + 96 : len;
    // Host bits are cleared rather than rejected: "10.1.2.3/8" means 10.0.0.0/8, as in
    // iptables and most firewall configs.
    c.network = *addr;
    for (unsigned bit = c.prefix_len; bit < 128; ++bit) {
        c.network.bytes[bit / 8] &= static_cast<std::uint8_t>(~(0x80u >> (bit % 8)));
    }
    return c;
}

bool cidr::contains(const ip_address& a) const noexcept {
    const unsigned full = prefix_len / 8;
    if (std::memcmp(network.bytes.data(), a.bytes.data(), full) != 0) {
        return false;
    }
    const unsigned rest = prefix_len % 8;
    if (rest == 0) {
        return true;
    }
    const auto mask = static_cast<std::uint8_t>(0xff00u >> rest);
    return (network.bytes[full] & mask) == (a.bytes[full] & mask);
}

bool is_private_destination(const ip_address& a) noexcept {
    const std::uint8_t* b = a.bytes.data();
    if (a.is_v4()) {
        return v4_private(b + 12);
    }
    if (all_zero(b, 12)) {
        // ::, ::1 and the deprecated IPv4-compatible ::a.b.c.d: the last 4 bytes are an IPv4
        // address to any stack that still honours them, so judge them as one.
        return true;
    }
    if ((b[0] & 0xfe) == 0xfc) { // unique local fc00::/7 (incl. AWS fd00:ec2::254)
        return true;
    }
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) { // link-local fe80::/10
        return true;
    }
    if (b[0] == 0xff) { // multicast ff00::/8
        return true;
    }
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) { // deprecated site-local fec0::/10
        return true;
    }
    // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052) carries the IPv4 in the last 4 bytes.
    static constexpr std::uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (std::memcmp(b, nat64, 12) == 0) {
        return v4_private(b + 12);
    }
    // NAT64 local-use 64:ff9b:1::/48 (RFC 8215) is for private translators: never public.
    if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0x00 &&
        b[5] == 0x01) {
        return true;
    }
    // SIIT IPv4-translated addresses ::ffff:0:a.b.c.d, ::ffff:0:0:0/96 (RFC 2765 section
    // 2.1, RFC 6145): a stateless translator turns them into the IPv4 address (the
    // loopback ::ffff:0:7f00:1 included); they never name a public IPv6 host.
    if (all_zero(b, 8) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0) {
        return true;
    }
    // Discard-only 100::/64 (RFC 6666) and the dummy prefix 100:0:0:1::/64 (RFC 9780).
    if (b[0] == 0x01 && b[1] == 0x00 && all_zero(b + 2, 4) && b[6] == 0 && b[7] <= 1) {
        return true;
    }
    // Documentation 2001:db8::/32 (RFC 3849) and 3fff::/20 (RFC 9637), segment routing
    // SIDs 5f00::/16 (RFC 9602).
    if ((b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) ||
        (b[0] == 0x3f && b[1] == 0xff && (b[2] & 0xf0) == 0) || (b[0] == 0x5f && b[1] == 0x00)) {
        return true;
    }
    // 6to4 2002:V4ADDR::/48 (RFC 3056).
    if (b[0] == 0x20 && b[1] == 0x02) {
        return v4_private(b + 2);
    }
    // Teredo 2001:0000::/32 (RFC 4380): the client IPv4 is the last 4 bytes, inverted.
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00) {
        const std::uint8_t client[4] = {
            static_cast<std::uint8_t>(~b[12]), static_cast<std::uint8_t>(~b[13]),
            static_cast<std::uint8_t>(~b[14]), static_cast<std::uint8_t>(~b[15])};
        return v4_private(client);
    }
    if (b[0] == 0x20 && b[1] == 0x01 && (b[2] & 0xfe) == 0x00) { // 2001::/23
        return v6_ietf_private(b);
    }
    return false;
}

std::string normalize_host(std::string_view host) {
    std::string out(host);
    // A name with any non-ASCII byte is an IDN: map it to its A-label form first, so
    // that what follows (case, trailing dot, IP literals) sees what a resolver would see.
    // Full-width digits and dots map to ASCII here, which is why a spelling such as
    // U+FF11 U+FF12 U+FF17 U+3002 ... still reaches the IPv4 checks below.
    if (std::any_of(out.begin(), out.end(), [](char c) { return (c & 0x80) != 0; })) {
        out = idna_to_ascii(out);
        if (out.empty()) {
            return out;
        }
    }
    std::transform(out.begin(), out.end(), out.begin(), ascii_lower);
    // One trailing dot is the absolute form of the same name. "a.." is not a name at all;
    // leaving it alone keeps normalisation idempotent (and it will match no pattern).
    if (!out.empty() && out.back() == '.' && (out.size() == 1 || out[out.size() - 2] != '.')) {
        out.pop_back();
    }
    if (out.empty() || out.size() > 253) {
        return out;
    }
    if (out.front() == '[' && out.back() == ']') {
        // Brackets belong to IPv6 literals only (RFC 3986 section 3.2.2); anything else in
        // brackets is not a host and is left as is, to match nothing.
        const auto inner = std::string_view(out).substr(1, out.size() - 2);
        if (inner.find(':') != std::string_view::npos) {
            if (auto a = ip_address::parse(inner)) {
                return a->to_string();
            }
        }
        return out;
    }
    if (out.find(':') != std::string::npos) {
        if (auto a = ip_address::parse(out)) {
            return a->to_string();
        }
        return out;
    }
    // Every inet_aton spelling of an IPv4 literal (hex, octal, decimal, 1-4 parts) is what
    // curl and getaddrinfo accept too, so they must match the same rules as the dotted
    // quad. inet_aton stops at whitespace and accepts what follows, so restrict the
    // alphabet first: digits, dots and the hex letters/x only, starting with a digit.
    const bool numeric_alphabet =
        out.front() >= '0' && out.front() <= '9' && std::all_of(out.begin(), out.end(), [](char c) {
            return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == 'x' || c == '.';
        });
    if (numeric_alphabet) {
        in_addr v4{};
        if (::inet_aton(out.c_str(), &v4) != 0) {
            char buf[INET_ADDRSTRLEN];
            if (::inet_ntop(AF_INET, &v4, buf, sizeof buf) != nullptr) {
                return buf;
            }
        }
    }
    return out;
}

bool host_matches(std::string_view pattern, std::string_view host) noexcept {
    if (pattern == "*") {
        return !host.empty();
    }
    if (pattern.size() > 2 && pattern[0] == '*' && pattern[1] == '.') {
        const auto suffix = pattern.substr(1); // ".example.com"
        return host.size() > suffix.size() &&
               iequals(host.substr(host.size() - suffix.size()), suffix);
    }
    return iequals(pattern, host);
}

const policy_rule* match_rule(const policy& p, std::string_view host, std::uint16_t port,
                              std::string_view method, std::string_view path,
                              bool connect_phase) noexcept {
    for (const auto& r : p.rules) {
        if (!r.hosts.empty() &&
            std::none_of(r.hosts.begin(), r.hosts.end(),
                         [&](const std::string& h) { return host_matches(h, host); })) {
            continue;
        }
        if (!r.ports.empty() && std::find(r.ports.begin(), r.ports.end(), port) == r.ports.end()) {
            continue;
        }
        const bool constrained = !r.methods.empty() || !r.path_prefix.empty();
        if (connect_phase) {
            if (constrained && r.act == action::deny) {
                continue; // decided per inner request; must not refuse the whole tunnel
            }
            return &r;
        }
        if (!r.methods.empty() &&
            std::none_of(r.methods.begin(), r.methods.end(),
                         [&](const std::string& m) { return iequals(m, method); })) {
            continue;
        }
        if (!r.path_prefix.empty() && !path.starts_with(r.path_prefix)) {
            continue;
        }
        return &r;
    }
    return nullptr;
}

namespace {

// A rule before an opaque one that its tunnels could bypass: method- or path-constrained,
// and denying or supervising, on `port`.
bool constrained_for(const policy_rule& r, std::uint16_t port) noexcept {
    const bool constrained = !r.methods.empty() || !r.path_prefix.empty();
    return constrained && r.act != action::allow &&
           (r.ports.empty() || std::find(r.ports.begin(), r.ports.end(), port) != r.ports.end());
}

} // namespace

std::vector<std::string> refusing_hosts_before(const policy& p, const policy_rule& chosen,
                                               std::uint16_t port) {
    std::vector<std::string> out;
    for (const auto& r : p.rules) {
        if (&r == &chosen) {
            break;
        }
        const bool port_hit =
            r.ports.empty() || std::find(r.ports.begin(), r.ports.end(), port) != r.ports.end();
        if (r.act == action::allow || !port_hit) {
            continue;
        }
        if (r.hosts.empty()) {
            out.emplace_back("*");
        }
        out.insert(out.end(), r.hosts.begin(), r.hosts.end());
    }
    return out;
}

bool constrained_rule_precedes(const policy& p, const policy_rule& chosen, std::string_view host,
                               std::uint16_t port) noexcept {
    for (const auto& r : p.rules) {
        if (&r == &chosen) {
            return false;
        }
        const bool host_hit = r.hosts.empty() || std::any_of(r.hosts.begin(), r.hosts.end(),
                                                             [&](const std::string& h) {
                                                                 return host_matches(h, host);
                                                             });
        if (constrained_for(r, port) && host_hit) {
            return true;
        }
    }
    return false;
}

std::optional<std::string> resolve_identity(const std::vector<identity>& identities,
                                            const std::optional<std::string>& listener_identity,
                                            const ip_address& source) {
    if (listener_identity) {
        return listener_identity;
    }
    const identity* found = nullptr;
    for (const auto& id : identities) {
        const bool hit = std::any_of(id.source_cidrs.begin(), id.source_cidrs.end(),
                                     [&](const cidr& c) { return c.contains(source); });
        if (!hit) {
            continue;
        }
        if (found != nullptr) {
            return std::nullopt; // ambiguous: two identities claim this source
        }
        found = &id;
    }
    if (found == nullptr) {
        return std::nullopt;
    }
    return found->name;
}

const policy* policy_for(const std::vector<policy>& policies, std::string_view identity) noexcept {
    const policy* wildcard = nullptr;
    for (const auto& p : policies) {
        if (p.identity == identity) {
            return &p;
        }
        if (p.identity == "*" && wildcard == nullptr) {
            wildcard = &p;
        }
    }
    return wildcard;
}

} // namespace sluice::dlp
