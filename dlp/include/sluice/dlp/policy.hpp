// Identities and policies: the typed, immutable product of config that the data path
// consults. No Asio/Beast types here: addresses are raw 16-byte IPv6 (IPv4 mapped as
// ::ffff:a.b.c.d). Thread safety: immutable after construction; share freely.
#pragma once

#include "sluice/dlp/hostname.hpp"

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

/// True for every address that is not globally reachable: the blocks of the IANA IPv4 and
/// IPv6 Special-Purpose Address Registries (RFC 6890; iana.org/assignments/
/// iana-ipv4-special-registry and iana-ipv6-special-registry) whose "Globally Reachable"
/// is False, plus multicast. IPv4: 0/8, 10/8, 100.64/10 (CGNAT), 127/8, 169.254/16
/// (incl. 169.254.169.254 metadata), 172.16/12, 192.0.0/24 (IETF protocol assignments,
/// whole), 192.0.2/24, 192.168/16, 198.18/15 (benchmarking), 198.51.100/24, 203.0.113/24,
/// 224/4 multicast, 240/4 reserved and broadcast. IPv6: ::, ::1, ::/96 IPv4-compatible,
/// SIIT IPv4-translated ::ffff:0:0:0/96 (RFC 2765; e.g. ::ffff:0:7f00:1), 100::/64
/// discard, 100:0:0:1::/64 dummy, 2001::/23 IETF assignments (except the registry's
/// globally reachable 2001:1::1-3, 2001:3::/32, 2001:4:112::/48, 2001:20::/28,
/// 2001:30::/28), 2001:2::/48 benchmarking, 2001:db8::/32 and 3fff::/20 documentation,
/// 5f00::/16 SRv6 SIDs, fc00::/7 ULA (incl. fd00:ec2::254), fe80::/10, fec0::/10,
/// ff00::/8 multicast, NAT64 local-use 64:ff9b:1::/48; and IPv4 embedded in IPv6 whose
/// IPv4 is private: mapped ::ffff:0:0/96, NAT64 64:ff9b::/96 (RFC 6052), 6to4 2002::/16
/// (RFC 3056) and the Teredo 2001::/32 client (RFC 4380). Thread safe, never throws.
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
    /// `large_bodies: stream`: a request body declared larger than max_body is scanned in
    /// windows as it is relayed (identity-coded bodies only) instead of refused with 413.
    bool stream_large_bodies = false;
    std::vector<ignore_entry> ignore;
    /// `hostname_exfil`: the hostname-exfiltration detector (hostname.hpp).
    hostname_exfil_settings hostname_exfil;
};

/// Per-policy limits (CONTRACT.md `policies[].limits`); 0 = unlimited. Enforced by a later
/// issue; stored now so a contract-conformant file loads.
struct policy_limits {
    std::uint64_t requests_per_minute = 0;
    std::uint64_t upload_per_minute = 0; ///< bytes
    std::uint64_t max_connections = 0;
};

struct policy {
    std::string identity; ///< identity name or "*"
    std::vector<policy_rule> rules;
    dlp_settings dlp;
    policy_limits limits;
    std::vector<cidr> private_destinations; ///< SSRF exceptions
    /// `credentials`: names of brokered credentials this identity may use (issue 11);
    /// nullopt = every credential whose own `identities` admits it.
    std::optional<std::vector<std::string>> credentials;
};

/// `Proxy-Authorization` credentials of an identity (CONTRACT.md `identities[].proxy_auth`).
/// Enforcement (Basic/Bearer, constant-time compare) belongs to issue 5.
struct proxy_auth_match {
    std::string username;     ///< Basic user name; empty = Bearer only
    std::string token_sha256; ///< lower-case hex SHA-256 (64 digits) of the token/password
};

/// mTLS client certificate match (CONTRACT.md `identities[].client_cert`): at least one set.
struct client_cert_match {
    std::string uri_san;    ///< exact URI SAN, e.g. a SPIFFE id; empty = not used
    std::string subject_cn; ///< exact subject CN; empty = not used
};

struct identity {
    std::string name;
    std::vector<cidr> source_cidrs;
    std::optional<proxy_auth_match> proxy_auth;
    std::optional<client_cert_match> client_cert;
};

/// Normalises a host for matching: ASCII lower case, one trailing dot removed, IPv6
/// brackets removed and the address printed canonically (RFC 5952, "0:0::1" -> "::1"),
/// IPv4 literals in every inet_aton(3) spelling ("0x7f000001", "2130706433",
/// "0177.0.0.1", "127.1") printed as dotted quad. A host with any non-ASCII byte is first
/// converted to ASCII by UTS #46 (Unicode IDNA Compatibility Processing) ToASCII,
/// non-transitional, with STD3 rules, CheckBidi and CheckJoiners, via ICU: "bücher.example"
/// -> "xn--bcher-kva.example", full-width letters, digits and dots (U+FF0E, U+3002) mapped
/// to ASCII, so a full-width IPv4 literal is still normalised as an address. An invalid IDN
/// (ill-formed UTF-8, disallowed code points, bidi/joiner/hyphen violations, empty or
/// over-long labels) yields the empty string, which callers must deny. ASCII-only hosts
/// are not passed through IDNA. Idempotent. Thread-safe. Never throws except
/// std::bad_alloc.
std::string normalize_host(std::string_view host);

/// True if `pattern` ("*", "*.example.com", exact) matches the normalised `host`.
/// "*.example.com" matches sub.example.com and a.b.example.com, not example.com.
bool host_matches(std::string_view pattern, std::string_view host) noexcept;

/// First rule of `p` matching, or nullptr (no match = deny).
///
/// Request phase (`connect_phase` false; an absolute-form request or one request inside a
/// TLS-intercepted tunnel): host, port, method and path must all satisfy the rule. A rule
/// with a `methods` list never matches an empty `method`; `path` is the origin-form target
/// and is compared byte for byte against `path_prefix` (no percent-decoding).
///
/// CONNECT phase (`connect_phase` true; deciding a CONNECT before any inner request is
/// known): only host and port are compared and `method`/`path` are ignored. Method and
/// path constraints are enforced later, per inner request, with `connect_phase` false. So
/// that a narrow deny (say, `deny DELETE`) does not refuse the whole tunnel, a rule that
/// has method or path constraints and action deny is skipped in this phase; the first
/// other rule whose host and port match is returned. config rejects `inspect: false` on a
/// rule with method or path constraints (an opaque tunnel cannot enforce them).
const policy_rule* match_rule(const policy& p, std::string_view host, std::uint16_t port,
                              std::string_view method, std::string_view path,
                              bool connect_phase = false) noexcept;

/// True when a rule before `chosen` (which must be one of `p.rules`) has method or path
/// constraints, denies or supervises, and covers `host`:`port`. A CONNECT decided by an
/// opaque (`inspect: false`) `chosen` would then carry requests that rule must decide,
/// so the proxy intercepts such a tunnel instead and decides its requests one by one.
bool constrained_rule_precedes(const policy& p, const policy_rule& chosen, std::string_view host,
                               std::uint16_t port) noexcept;

/// The host patterns of every rule before `chosen` that denies or supervises on `port`,
/// constrained or not ("*" for a rule without hosts). An opaque tunnel to another name
/// of the same server reaches their requests too (the Host field, not the CONNECT name,
/// picks the virtual host: RFC 9110 section 7.2, and an opaque tunnel cannot check it),
/// so the proxy compares addresses and intercepts such a tunnel.
std::vector<std::string> refusing_hosts_before(const policy& p, const policy_rule& chosen,
                                               std::uint16_t port);

/// The identity for a flow: the listener's fixed identity if set, else the one identity
/// whose source_cidrs contain `source`. nullopt when none or more than one match.
std::optional<std::string> resolve_identity(const std::vector<identity>& identities,
                                            const std::optional<std::string>& listener_identity,
                                            const ip_address& source);

/// The policy for an identity: exact name first, then "*". nullptr if none.
const policy* policy_for(const std::vector<policy>& policies, std::string_view identity) noexcept;

} // namespace sluice::dlp
