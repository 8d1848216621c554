// Where an exchange goes: the destination named by a CONNECT or an absolute-form target,
// checked before anything resolves it (policy, then DLP on the name), resolved once, and
// checked again by address (the SSRF guard). Internal to proxy/.
#pragma once

#include "flow_context.hpp"

#include "sluice/dlp/inspector.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::proxy {

struct destination {
    std::string host; // normalised (dlp::normalize_host)
    std::uint16_t port = 0;
    std::vector<tcp::endpoint> endpoints; // resolved once and checked (no rebinding window)
    /// Hosts an earlier deny or supervise rule names whose addresses this destination
    /// reaches (reaches_same_server): each request to it is decided under their rules
    /// too (rule_for), since its Host field may not name them.
    std::vector<std::string> same_server;
};

/// One exchange's target as sent upstream.
struct exchange_target {
    std::string scheme; // http or https
    destination* dest = nullptr;
    std::string origin_form; // path?query as sent upstream
    std::string host_header; // authority for the Host field
};

enum class resolve_result { ok, failed, private_address };

/// Resolves the host once and checks every address against the SSRF guard
/// (dlp::is_private_destination, minus the policy's `private_destinations`); the flow
/// connects only to these checked endpoints. An IP literal needs no resolver.
net::awaitable<resolve_result> resolve_destination(destination& d, const dlp::policy& policy);

/// True when one of `names` is an address `d` was resolved to, or resolves to one: a
/// tunnel to `d` reaches that name's server too, since the Host field (RFC 9110 section
/// 7.2), not the CONNECT name, picks the virtual host. Those names go into
/// `d.same_server`. "*" (a rule for every host) is true; other wildcard patterns cannot
/// be resolved and are skipped (the ClientHello's server name is checked in an opaque
/// tunnel instead). Past `max_same_server_names` names to resolve it is true and every
/// exact name left goes into `d.same_server`: the answer is then "intercept and apply
/// them", never a pass on names not looked at.
inline constexpr std::size_t max_same_server_names = 16;
net::awaitable<bool> reaches_same_server(destination& d, std::vector<std::string> names);

/// The rule for a request to `d`: dlp::match_rule's for d.host, or, when stricter, the one
/// matched for a name in d.same_server (deny or no rule, then supervise, then an
/// inspecting allow, then an opaque one). nullptr: no rule, denied.
const dlp::policy_rule* rule_for(const dlp::policy& p, const destination& d,
                                 std::string_view method, std::string_view path);

/// The destination name, inspected before anything resolves it: a secret spelled into a
/// host name ("<hex of a token>.attacker.example") would leave in the DNS query even if
/// the request were refused later (dlp::inspector::on_destination). With `connect_head`,
/// the CONNECT's own head too: its fields go nowhere upstream, but whatever the agent
/// wrote is inspected.
dlp::verdict inspect_destination(flow_context& fc, std::string_view host, std::uint16_t port,
                                 const boost::beast::http::request_header<>* connect_head);

/// Splits an absolute-form http:// target (RFC 9112 section 3.2.2) into destination and
/// origin-form. False for anything else (another scheme, userinfo, no host, port 0).
bool parse_absolute_target(std::string_view target, destination& d, exchange_target& t);

/// The Host field must name the destination the flow was resolved for (RFC 9112 section
/// 3.2: exactly one Host; a different one inside a tunnel is domain fronting). HTTP/1.0
/// may omit it.
bool host_field_matches(const boost::beast::http::request_header<>& h, const destination& d,
                        std::uint16_t default_port);

/// Inside a tunnel the target is origin-form (or absolute-form naming the same host).
bool tunnel_origin_form(std::string_view target, const destination& d, exchange_target& t);

/// "host" or "host:port" ("[v6]:port"), the port left out when it is `default_port`.
std::string host_port(const destination& d, std::uint16_t default_port);

} // namespace sluice::proxy
