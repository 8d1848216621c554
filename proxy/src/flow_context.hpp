// What one client connection carries from exchange to exchange (flow_context), and the
// small questions every step asks of it: the configuration in force, the kill switch,
// the per-thread scanner. Internal to proxy/: the steps of a flow include it, nothing
// outside proxy/src does.
//
// Thread safety: a flow_context belongs to one connection's coroutine and is touched on
// that connection's thread only; what it points to in shared_state is thread safe.
#pragma once

#include "flow.hpp"

#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/caller.hpp"
#include "sluice/dlp/policy.hpp"
#include "sluice/proxy/control.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/http/fields.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace sluice::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;
inline constexpr auto as_tuple = net::as_tuple(net::use_awaitable);

// Deadlines for every network wait (STYLE.md: every wait has a deadline); the README's
// table of timeouts lists them.
inline constexpr auto client_idle_timeout = 60s;
inline constexpr auto client_header_timeout = 15s;
inline constexpr auto tls_handshake_timeout = 15s;
inline constexpr auto upstream_io_timeout = 120s;
inline constexpr std::uint32_t header_limit = 64 * 1024; // a response head, bytes
// Bytes per read of a response relay: four TLS records, so a download takes one syscall
// and one write per 64 KiB (issue 23). Held only while a response is being relayed.
inline constexpr std::size_t relay_chunk = 64 * 1024;
// Bytes per read of an opaque tunnel, each way. Held for the tunnel's whole life, idle
// or not, so it stays one record's size.
inline constexpr std::size_t tunnel_chunk = 16 * 1024;
// A refused body up to this size is read and dropped before the connection closes.
inline constexpr std::uint64_t linger_limit = 16 * 1024 * 1024;
inline constexpr auto linger_timeout = 5s;
// The first read of a keep-alive request, and the most buffer an idle flow keeps.
inline constexpr std::size_t idle_read_size = 4096;

// An exchange's allow record on its way through the audit writer's group commit
// (audit_log::async_append): the writer thread sends the result (true = durable) and the
// flow receives it on its own executor. Capacity 1, so the send never waits.
using audit_result_channel =
    net::experimental::concurrent_channel<void(boost::system::error_code, bool)>;
// A start record's seq (0 = not written) on its way back from the writer thread.
using audit_seq_channel =
    net::experimental::concurrent_channel<void(boost::system::error_code, std::uint64_t)>;

struct flow_context {
    std::shared_ptr<shared_state> state;
    std::shared_ptr<const generation> gen;
    std::string flow;
    std::string source;
    std::string identity;                // "" = unresolved
    const dlp::policy* policy = nullptr; // in gen's settings
    // Who the client proved to be (source, listener, proxy credentials, certificate):
    // every request is decided again under the configuration in force when it arrives.
    const dlp::caller_evidence* evidence = nullptr;
    std::shared_ptr<flow_handle> handle; // in the flow registry (control.hpp); null in unit tests
    rate_limits::connection_slot connection; // `limits.max_connections`, held per identity
    // The last exchange's allow record until it is durable: the next exchange on this
    // connection reads and inspects its request meanwhile and settles it (settle_audit)
    // before anything goes upstream or another record is written, so the sync overlaps
    // with the client's next request and records keep the order of events.
    std::shared_ptr<audit_result_channel> pending_audit;
    // Body bytes of a refused request that the client may still be sending: run_exchange's
    // callers read them off (discard_body) before they close, a lingering close.
    std::uint64_t unread_body = 0;
    // False until the client has sent a whole request head: a connection that has sent
    // nothing gets the head timeout, not the keep-alive idle timeout (read_head).
    bool heard = false;
    // The last text scrubbed() read and what it made of it, under which generation: an
    // exchange's start record and its completion carry the same url, scanned once.
    struct scrub_memo {
        std::weak_ptr<const generation> gen;
        std::string in;
        std::string out;
    };
    mutable scrub_memo last_scrub;
};

/// This thread's scanner for `rules`. Scratch is per thread (Hyperscan "Scratch Space");
/// a reload publishes a new ruleset and the next use on this thread rebuilds the scanner.
/// A scan never spans a co_await.
detectors::scanner& thread_scanner(const std::shared_ptr<const detectors::ruleset>& rules);

/// Every request is decided under the configuration in force when it arrives, also on a
/// kept-alive connection or inside a tunnel opened before a reload: the identity is
/// resolved again from the same evidence and its policy looked up in the live
/// generation. False when the identity no longer resolves to the one the flow has, or
/// has no policy (the caller denies with policy_deny). Nothing of the old generation may
/// be referenced across this call.
bool refresh_generation(flow_context& fc);

/// "<salt>-<counter>": unique within the process, different across restarts.
std::string make_flow_id(shared_state& st);

std::uint64_t elapsed_ms(std::chrono::steady_clock::time_point since);
double seconds_since(std::chrono::steady_clock::time_point since);

/// What the client chose goes through the detectors before it is recorded or shown (the
/// url and method of a request that failed before inspection, an approver's words): no
/// record holds a secret, inspected or not (dlp/redact.hpp).
std::string scrubbed(const flow_context& fc, std::string_view text);

/// The kill switch (control.hpp): a killed identity, or a flow a kill has reached, gets
/// nothing more. Checked when the identity is resolved and before every request.
bool killed_now(const flow_context& fc);
/// Why a killed flow ends: "killed" (503) for the kill switch, or the reason it was cut
/// with (control::cut: "policy_deny", 403, when a reload removed its allow).
std::string_view kill_reason(const flow_context& fc);
unsigned kill_status(const flow_context& fc);

/// Closes `s` abortively (SO_LINGER 0, then close: the peer gets a TCP RST): whatever
/// is still in the kernel's send buffer is discarded, not delivered. A kill stops work in
/// flight: an upload already handed to the kernel does not reach the origin, a download
/// does not go on reaching the agent. Errors are ignored (the socket may be closed).
void abort_socket(tcp::socket& s);

/// A kill closes `s`'s socket abortively (on this flow's thread): every pending read or
/// write on it, and on any TLS or WebSocket layer above it, ends at once.
template <class Stream>
close_hook close_on_kill(flow_context& fc, Stream& s) {
    return close_hook(fc.handle.get(), [&s] { abort_socket(beast::get_lowest_layer(s).socket()); });
}

} // namespace sluice::proxy
