// One exchange (a request and its answer) as a value, and the protocol-neutral steps it
// walks. A protocol front end (exchange_http1.cpp today; HTTP/2 streams next) reads the
// request off the wire, runs these steps in order and carries out what they return: a
// step never reads or writes a socket except through what it is handed, and never
// answers the client itself.
//
//   admit    identity still valid under the live configuration, audit healthy, kill
//            switch, request and upload limits
//   route    the policy rule for method, host, port and path; size limit or streaming
//   (front end reads the body)          charge_upload for a body of unknown length
//   inspect_request   DLP on head and body: one merged verdict
//   hold_for_approval supervise: a person decides
//   prepare_forward   the request as it goes upstream: hop-by-hop fields removed,
//                     brokered credentials injected, the response masker armed
//   (record_start, then the front end forwards and relays the response)
//   record_exchange   the exchange's final record
//
// Every step returns std::nullopt to go on, or the refusal the front end answers with
// (and records: ex.rec and ex.findings are the record's content).
// Internal to proxy/. Not thread safe: one flow's coroutine runs an exchange.
#pragma once

#include "destination.hpp"
#include "flow_context.hpp"
#include "websocket_relay.hpp"

#include "sluice/dlp/credential_broker.hpp"
#include "sluice/dlp/inspector.hpp"
#include "sluice/proxy/audit_log.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::proxy {

enum class exchange_end { keep_going, close };

struct exchange {
    exchange_target* tgt = nullptr;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    std::string method;
    std::string url_prefix; // scheme://authority
    bool client_keep_alive = false;
    std::optional<std::uint64_t> declared_length; // the body's declared length, if any
    bool no_payload = false;                      // the head says there is no body
    audit_record rec;
    const dlp::policy_rule* rule = nullptr; // route's match in fc.policy
    bool inspect = false;
    bool streamed = false;        // the body is relayed window by window (large_bodies: stream)
    bool upload_charged = false;  // the upload budget was charged for the declared length
    std::string supervise_reason; // set: held for approval before it is forwarded
    std::vector<dlp::finding_record> findings;
    // GET .../info/refs?service=git-receive-pack of an inspected flow: its answer is relayed
    // with `no-thin` added (dlp/git.hpp), so the push that follows carries every delta base.
    bool git_advertisement = false;
};

/// How a step refuses: the answer's status and reason (answers.hpp), whether the
/// connection may serve another request after it, and for a limit its Retry-After
/// (RFC 9110 section 10.2.3, seconds; 429). `silent`: nobody is left to answer (the
/// record is written already).
struct refusal {
    unsigned status = 403;
    std::string reason;
    bool keep_alive = false;
    std::uint32_t retry_after = 0;
    bool silent = false;
};
using step_result = std::optional<refusal>;

/// What prepare_forward builds: the request as it goes upstream and the masker every
/// response of it is relayed through. `live` keeps the broker the masker refers to.
struct forward_plan {
    boost::beast::http::request<boost::beast::http::string_body> out;
    std::shared_ptr<const generation> live;
    std::optional<dlp::secret_masker> masker;
};

step_result admit(flow_context& fc, exchange& ex);
step_result route(flow_context& fc, exchange& ex, const boost::beast::http::fields& head);
/// The upload budget for a body whose length was not declared, once it has been read.
step_result charge_upload(flow_context& fc, exchange& ex, std::uint64_t body_bytes);
/// DLP on the request head and (unless streamed) body; a head that denies is not
/// followed by the body scan, a supervised head is (the approver sees every finding).
step_result
inspect_request(flow_context& fc, exchange& ex,
                const boost::beast::http::request<boost::beast::http::string_body>& req);
/// Holds the exchange until a person (or the supervise timeout) decides. `client` is the
/// client's socket: its close withdraws the request.
net::awaitable<step_result> hold_for_approval(flow_context& fc, exchange& ex, tcp::socket& client);
/// Takes the request's fields and body into `plan.out`.
step_result prepare_forward(flow_context& fc, exchange& ex,
                            boost::beast::http::request<boost::beast::http::string_body>& req,
                            forward_plan& plan);
/// The exchange's final record (joins the audit writer's next batch, audit_batched).
net::awaitable<void> record_exchange(flow_context& fc, exchange& ex, bool relay_ok,
                                     const dlp::secret_masker& masker);

/// The configuration a WebSocket session's next client message is decided under
/// (websocket_relay.hpp): the live generation, the identity still resolving to the same
/// one, and the upgrade's rule (GET on `path`) still allowing it. Supervise counts as
/// allowed only for a session whose upgrade a person approved.
std::optional<ws_live_config> ws_live(flow_context& fc, const exchange_target& tgt,
                                      std::string_view path, bool approved);

} // namespace sluice::proxy
