// The WebSocket relay (issue 6): after the upgrade request passed identity, policy and DLP
// on its URL and headers (run_exchange), sluice runs two WebSocket sessions of its own,
// one with the origin (client role, over the flow's upstream stream) and one with the
// client (server role, over the flow's client stream), each negotiating permessage-deflate
// independently, so every client-to-server message is seen whole and decompressed.
//
// Client-to-server messages: reassembled by Beast (fragments, compression), limited to
// the policy's dlp.max_body bytes (over: close 1009 both ways), scanned with the body
// variant pipeline together with a carried tail of the previous message
// (ws_message_inspector). A deny verdict closes both sides with 1008 (1011 when the
// scanner failed); the origin never receives that message. Server-to-client messages are
// relayed with their type (text/binary), masked for brokered secrets (together with the
// last bytes of the earlier ones, so a secret split across messages is masked in the
// later part), not scanned. The origin's subprotocol choice reaches the client as the
// client offered it (by position in the offer: a brokered value chosen is answered as
// the placeholder), and a choice that was not offered fails the upgrade (502).
// Ping/pong is answered by each session; a close from either peer is relayed with its
// code (the client's close reason text is dropped: it would go upstream unscanned).
//
// A supervise verdict holds that message (ws_session_context::hold) without reading
// the client further: approved, it goes upstream and the session goes on (record
// "supervise_approved" with the message's findings and `approval`); denied or timed
// out, both sides are closed 1008 (record "supervise_denied", reason approval_denied /
// approval_timeout); a client that leaves withdraws it; a kill closes everything.
//
// Every client message is decided under the configuration in force when it arrives
// (ws_session_context::refresh): after a reload the session's policy, rules and the
// request rule's `inspect` are the live ones (the carried tail survives the switch), and
// a session the live configuration no longer allows is closed 1008 (record "deny",
// reason policy_deny) before that message goes anywhere. A session follows the audit: a
// message is relayed only while records can be written (ws_session_context::
// audit_healthy) and after its own record (an approval) was written; otherwise both
// sides are closed 1011 (record "deny", reason audit_unavailable, counted in
// sluice_ws_messages_total{decision="deny"}).
//
// Audit (CONTRACT.md): one "deny" record per denied message (findings located
// "ws:message:<n>", n counting client messages from 1), one "allow" record for the
// session at its end (bytes and message counts both ways). Metric:
// sluice_ws_messages_total{direction="up"|"down",decision="allow"|"deny"}.
//
// Thread safety: a session runs on its flow's io_context thread; nothing is shared.
#pragma once

#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/credential_broker.hpp"
#include "sluice/dlp/inspector.hpp"
#include "sluice/dlp/policy.hpp"
#include "sluice/dlp/variants.hpp"
#include "sluice/proxy/audit_log.hpp"
#include "sluice/proxy/control.hpp"
#include "sluice/proxy/metrics.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::proxy {

/// True for a WebSocket opening handshake that sluice relays as a WebSocket session
/// (RFC 6455 section 4.1): GET over HTTP/1.1, Connection listing "upgrade", Upgrade
/// listing "websocket", one Sec-WebSocket-Key, Sec-WebSocket-Version 13, no body.
bool is_websocket_upgrade(const boost::beast::http::request<boost::beast::http::string_body>& req);

/// Scans the client-to-server messages of one session, in order. Each message is scanned
/// as a request body without a content type (text and binary alike, all variants) after
/// the last `tail_bytes` of the previous message, so a secret split across two messages
/// is found; findings lying wholly in that tail were the previous message's and are not
/// reported again. Findings carry location "ws:message:<n>" (n from 1) and offsets within
/// the message (0 for a secret that starts in the previous one).
///
/// Verdicts as dlp::inspector::on_body (deny 403 dlp_finding, supervise, 413
/// decode_budget, 500 internal); the size limit is the caller's (Beast's
/// read_message_max), so no message is refused here for its size. Never throws.
/// Not thread safe: one per session; owns its scanner (and Hyperscan scratch).
class ws_message_inspector {
public:
    ws_message_inspector(const dlp::policy& p, std::shared_ptr<const detectors::ruleset> rules,
                         dlp::variant_options o, std::size_t tail_bytes);

    dlp::verdict on_message(std::string_view message);
    /// Continues `older`'s session under this inspector's policy and rules (after a
    /// reload): its message count and the tail it carries, so a secret split across the
    /// switch is still found.
    void continue_from(const ws_message_inspector& older);
    /// Messages inspected so far (the index of the last one).
    std::uint64_t count() const noexcept { return index_; }
    /// The tail a session carries for `rules`: twice the widest rule (a base64 wrapping
    /// is 4/3 as long), at least 256 and at most 16 KiB.
    static std::size_t tail_for(const detectors::ruleset& rules) noexcept;

private:
    dlp::verdict with_seam(dlp::verdict v, std::string_view message, const std::string& location);

    dlp::policy policy_; ///< the session's policy, max_body lifted (the reader limits size)
    detectors::scanner scanner_;
    dlp::inspector inspector_;
    std::size_t tail_bytes_;
    std::string window_; ///< tail of the previous message, then the current one
    std::size_t tail_len_ = 0;
    std::uint64_t index_ = 0;
    /// The ends of the last message let through (dlp/seam.hpp): a secret cut over two
    /// messages with labels between (`part1: X`, `part2: Y`) meets at the seam.
    dlp::message_ends ends_;
};

/// The configuration a session's next client message is decided under.
struct ws_live_config {
    std::shared_ptr<const void> keep; ///< keeps the generation `policy` and `rules` live in
    const dlp::policy* policy = nullptr;
    std::shared_ptr<const detectors::ruleset> rules;
    dlp::variant_options variants;
    bool inspect = true;              ///< the request rule's `inspect` (always, for ws://)
    const void* generation = nullptr; ///< changes when a reload took effect
};

/// What the flow hands the relay.
struct ws_session_context {
    const dlp::policy* policy = nullptr;
    std::shared_ptr<const detectors::ruleset> rules;
    dlp::variant_options variants;
    bool inspect = true;              ///< the request rule's `inspect`
    const void* generation = nullptr; ///< where policy and rules came from (see refresh)
    std::string flow;                 ///< flow id, for X-Sluice-Flow on the 101
    metrics* stats = nullptr;         ///< may be null
    /// Writes one audit record (flow, identity and source filled in by the flow); false
    /// when it could not be written.
    std::function<bool(audit_record)> audit;
    /// The configuration in force now, asked before each client message; nullopt when the
    /// live configuration no longer allows this session (identity, policy or the upgrade's
    /// rule): the session is closed 1008, reason policy_deny. Null: `policy`, `rules`,
    /// `variants` and `inspect` hold for the whole session (unit tests).
    std::function<std::optional<ws_live_config>()> refresh;
    /// False while no audit record can be written (audit_log::healthy); asked before each
    /// client message is relayed. Null: always healthy.
    std::function<bool()> audit_healthy;
    /// Brokered secrets to mask in what goes to the client; may be null.
    const dlp::secret_masker* masker = nullptr;
    /// Bytes of the origin's earlier messages kept to mask a secret split across server
    /// messages (the longest reflection form less one); 0: each message on its own.
    std::size_t mask_tail = 0;
    /// Holds a client message whose verdict is supervise until a person decides
    /// (control::hold with the message's findings); the client is not read meanwhile
    /// (backpressure). Null: such a message is refused (1008, approval_unavailable).
    std::function<boost::asio::awaitable<approval_outcome>(std::vector<audit_finding>)> hold;
};

enum class ws_outcome {
    relayed,          ///< a session ran (and ended); its records are written
    answered,         ///< the origin refused the upgrade; its answer was relayed and audited
    upstream_failed,  ///< no usable answer from the origin: the caller answers 502
    upstream_encoded, ///< the upgrade was declined with a content-coded answer while a
                      ///< brokered secret could be in it: the caller answers 502
                      ///< upstream_encoding (the masker reads identity bodies only)
};

/// Runs one WebSocket session for an upgrade request the flow allowed. `req` is the
/// client's request as read (validated by is_websocket_upgrade); `out` the request as it
/// would go upstream (origin-form target, Host, brokered header values, no hop-by-hop).
/// `upstream` is connected; the client has sent nothing after its request head. Writes
/// the session's audit records itself; on upstream_failed the caller answers (502) with
/// `rec`. The streams may be unusable afterwards: the caller closes the connection.
/// Instantiated in websocket_session.cpp for the flow's stream pairs (plain and TLS
/// clients, TLS inside TLS, plain and TLS upstreams), so flow.cpp does not compile the
/// WebSocket machinery four times over.
template <class ClientStream, class UpstreamStream>
boost::asio::awaitable<ws_outcome>
relay_websocket(ClientStream& client,
                const boost::beast::http::request<boost::beast::http::string_body>& req,
                const boost::beast::http::request<boost::beast::http::string_body>& out,
                UpstreamStream& upstream, ws_session_context& ctx, audit_record& rec);

} // namespace sluice::proxy
