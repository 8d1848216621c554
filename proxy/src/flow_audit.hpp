// A flow's audit records: decide, record, then forward (audit_log.hpp). Every record a
// flow writes goes through here, stamped with who and where and scrubbed of secrets.
// Internal to proxy/. Not thread safe: one flow's coroutine calls these, on its thread.
#pragma once

#include "answers.hpp"
#include "flow_context.hpp"

#include "sluice/dlp/inspector.hpp"
#include "sluice/proxy/audit_log.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace sluice::proxy {

/// Fills in who and where, scrubs what the client chose (url, an unknown method, an
/// approver's words), and counts the record's bytes and decision.
void stamp(flow_context& fc, audit_record& r);

/// Writes one audit record and waits for it; false means it could not be written and the
/// caller must not let the exchange proceed (fail closed).
bool audit(flow_context& fc, audit_record r);

/// audit() without holding this flow's thread while the record is written and synced: it
/// joins the audit writer's next batch (group commit) and is left pending in
/// fc.pending_audit; settle_audit gives the result.
void audit_batched(flow_context& fc, audit_record r, const net::any_io_executor& ex);

/// Waits until the last exchange's record is durable; false when it could not be written
/// (the caller must not forward or record anything more). True when nothing is pending.
net::awaitable<bool> settle_audit(flow_context& fc);

/// Writes the exchange's decision as a start record (`decision`, `reason`, `rec`'s
/// fields) and settles the last exchange's record. On success `rec` becomes the template
/// of the completion (event "end", completes = the start's seq): every later record of
/// the exchange completes it. False when either could not be written: nothing may be
/// forwarded, and the caller denies (503 audit_unavailable).
net::awaitable<bool> record_start(flow_context& fc, audit_record& rec, std::string decision,
                                  std::string reason);

std::vector<audit_finding> to_audit(const std::vector<dlp::finding_record>& fs);
/// The distinct rule ids of `fs`, in order of first appearance.
std::vector<std::string> rule_ids(const std::vector<dlp::finding_record>& fs);

/// The URL as written to the audit: every secret range found in the target (findings
/// with location "url") is replaced by "[redacted]", and when the URL had a finding every
/// query value is redacted too.
std::string audit_url(std::string_view prefix, std::string_view target,
                      const std::vector<dlp::finding_record>& fs);

/// A WebSocket session's record as written (websocket_relay.hpp calls back with copies of
/// the upgrade's record): the session's final record completes the upgrade's start, with
/// the kill reason when a kill cut it; a record of one message inside the session stands
/// alone.
audit_record ws_record(const flow_context& fc, audit_record r);

/// A 403 dlp_finding of a rule that is often the agent's own credential (answers.hpp):
/// the exact dlp.ignore entries that would allow it, logged, by fingerprint only.
std::vector<ignore_hint> ignore_hints(const flow_context& fc, unsigned status,
                                      const std::vector<dlp::finding_record>& findings);

} // namespace sluice::proxy
