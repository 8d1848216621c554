// Identities and policies: the typed, immutable product of config that the data path
// consults. No Asio/Beast types here: addresses are raw 16-byte IPv6 (IPv4 mapped as
// ::ffff:a.b.c.d). Thread safety: immutable after construction; share freely.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dlp {

/// An IP address as 16 bytes; IPv4 is stored IPv4-mapped (RFC 4291 section 2.5.5.2).
struct ip_address {
    std::array<std::uint8_t, 16> bytes{};
    /// Parses dotted-quad IPv4 or RFC 4291 text IPv6 (no brackets, no zone). nullopt if invalid.
    static std::optional<ip_address> parse(std::string_view text);
    bool is_v4() const noexcept;
    std::string to_string() const;
    friend bool operator==(const ip_address&, const ip_address&) = default;
};

/// A CIDR block such as 10.0.0.0/8 or fd00::/8 (RFC 4632 / RFC 4291 prefix notation).
struct cidr {
    ip_address network;
    unsigned prefix_len = 0; ///< in bits over the 128-bit form (IPv4 /8 is stored as /104)
    /// Parses "a.b.c.d/n", "v6/n" or a bare address (full-length prefix). nullopt if invalid.
    static std::optional<cidr> parse(std::string_view text);
    bool contains(const ip_address& a) const noexcept;
};

/// Loopback, RFC 1918, link-local (incl. 169.254.169.254 metadata), CGNAT 100.64/10,
/// unspecified, multicast, IPv6 ULA fc00::/7, fe80::/10, ::1, and IPv4-mapped forms of these.
bool is_private_destination(const ip_address& a) noexcept;

enum class action { allow, deny, supervise };
enum class finding_action { deny, supervise, log };

/// One first-match policy rule. Empty lists match everything.
struct policy_rule {
    std::vector<std::string> hosts; ///< exact ("api.openai.com"), "*.example.com" or "*"
    std::vector<std::uint16_t> ports;
    std::vector<std::string> methods; ///< upper-case; empty = any
    std::string path_prefix;          ///< empty = any
    action act = action::allow;
    bool inspect = true; ///< false: opaque tunnel, audited as uninspected
};

/// Value the operator declared harmless for a rule (exact value or "sha256:..." fingerprint).
struct ignore_entry {
    std::string rule;
    std::string value;       ///< exact value, or empty
    std::string fingerprint; ///< or a fingerprint, or empty
};

struct dlp_settings {
    std::vector<std::string> detectors{"all"}; ///< rule ids or categories; "all"
    finding_action on_finding = finding_action::deny;
    std::size_t max_body = 16u << 20; ///< bytes
    std::vector<ignore_entry> ignore;
};

struct policy {
    std::string identity; ///< identity name or "*"
    std::vector<policy_rule> rules;
    dlp_settings dlp;
    std::vector<cidr> private_destinations; ///< SSRF exceptions
};

struct identity {
    std::string name;
    std::vector<cidr> source_cidrs;
};

/// Normalises a host for matching: lower case, trailing dot removed, IPv6 brackets removed.
std::string normalize_host(std::string_view host);

/// True if `pattern` ("*", "*.example.com", exact) matches the normalised `host`.
/// "*.example.com" matches sub.example.com and a.b.example.com, not example.com.
bool host_matches(std::string_view pattern, std::string_view host) noexcept;

/// First rule of `p` matching host/port/method/path, or nullptr (= deny). `method`
/// empty means "any method" (used for the CONNECT decision before the inner request
/// is known): only rules without a method/path constraint, or any rule when
/// `connect_phase` is true, are considered — see policy.cpp.
const policy_rule* match_rule(const policy& p, std::string_view host, std::uint16_t port,
                              std::string_view method, std::string_view path,
                              bool connect_phase = false) noexcept;

/// The identity for a flow: the listener's fixed identity if set, else the one identity
/// whose source_cidrs contain `source`. nullopt when none or more than one match.
std::optional<std::string> resolve_identity(const std::vector<identity>& identities,
                                            const std::optional<std::string>& listener_identity,
                                            const ip_address& source);

/// The policy for an identity: exact name first, then "*". nullptr if none.
const policy* policy_for(const std::vector<policy>& policies, std::string_view identity) noexcept;

} // namespace sluice::dlp
