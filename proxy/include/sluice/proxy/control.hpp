// The operator's hand on live traffic (CONTRACT.md "Admin API", issue 7): the flow
// registry (every live client connection, and a way to cut it from another thread), the
// kill switch (per identity or all, persisted in the data dir) and the approval registry
// (requests held by `supervise` until a person approves or denies them).
//
// Threads: flows run on the server's io_contexts (one per core), the admin API on one
// of them. Everything in `control` may be called from any thread (one internal mutex; the
// kill check on the data path is a lock-free atomic load). A `flow_handle` is shared by
// the registry and its flow; the fields marked "flow thread only" are touched only on
// the flow's executor: a kill posts there, so closing sockets never races the flow.
//
// Persistence: `killed.json` in the data dir, {"all": bool, "identities": [string...]},
// replaced atomically (write a temporary file, fsync, rename, fsync the directory). At
// start a missing file means nothing is killed; a file that cannot be read or parsed
// fails closed: everything is killed (all = true) and an error is logged, until
// `POST /v1/revive {"all": true}` rewrites the file.
#pragma once

#include "sluice/proxy/audit_log.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::proxy {

class metrics;
class admin_api;
class fleet_store;

/// What a live client connection carries: "http" (absolute-form requests), "tunnel"
/// (CONNECT, opaque or intercepted), "websocket" (an upgraded exchange).
enum class flow_kind { http, tunnel, websocket };
std::string_view to_string(flow_kind k);

/// One live client connection. Created by control::register_flow on the flow's thread.
class flow_handle {
public:
    flow_handle(std::string flow, std::string source, boost::asio::any_io_executor executor);

    const std::string& flow() const { return flow_; }

    /// Bytes of request bodies sent upstream / response bodies relayed (any thread; the
    /// flow adds each exchange's counts when it is audited).
    std::atomic<std::uint64_t> bytes_up{0};
    std::atomic<std::uint64_t> bytes_down{0};

    // --- flow thread only ------------------------------------------------------------
    /// Registers `close` to run when the flow is killed (close a socket, cancel a timer).
    /// Returns a key for remove_hook. Hooks must not throw and must be idempotent.
    std::uint64_t add_hook(std::function<void()> close);
    void remove_hook(std::uint64_t key);
    /// True once a kill reached this flow: it must not start anything new.
    bool killed() const { return killed_; }
    /// Why the flow was closed from outside: "" for the kill switch, or a reason code
    /// such as "policy_deny" (a reload removed the allow it ran under; control::cut).
    const std::string& cut_reason() const { return cut_reason_; }
    /// Runs every hook once (the kill, posted to this flow's executor).
    void close_now(std::string reason = {});

private:
    friend class control;
    std::string flow_;
    std::string source_;
    boost::asio::any_io_executor executor_;
    std::chrono::system_clock::time_point started_wall_;
    std::chrono::steady_clock::time_point started_;
    // guarded by control::mutex_
    std::string identity_;
    std::string destination_;
    flow_kind kind_ = flow_kind::http;
    std::uint64_t serial_ = 0;
    // flow thread only
    bool alive_ = true;
    bool killed_ = false;
    std::string cut_reason_;
    std::uint64_t next_hook_ = 0;
    std::vector<std::pair<std::uint64_t, std::function<void()>>> hooks_;
};

/// RAII registration of a kill hook; a null handle makes it a no-op. Flow thread only.
class close_hook {
public:
    close_hook() = default;
    close_hook(flow_handle* h, std::function<void()> close);
    close_hook(close_hook&& o) noexcept;
    close_hook& operator=(close_hook&& o) noexcept;
    close_hook(const close_hook&) = delete;
    close_hook& operator=(const close_hook&) = delete;
    ~close_hook();

private:
    flow_handle* h_ = nullptr;
    std::uint64_t key_ = 0;
};

/// A flow as GET /v1/flows lists it.
struct flow_info {
    std::string flow;
    std::string identity; ///< "" while unresolved (listed as null)
    std::string source;
    std::string kind;
    std::string destination; ///< host:port, "" before the first request
    std::string started;     ///< RFC 3339 (UTC, ms)
    std::uint64_t age_ms = 0;
    std::uint64_t bytes_up = 0;
    std::uint64_t bytes_down = 0;
};

/// The kill switch's state.
struct killed_state {
    bool all = false;
    std::vector<std::string> identities; ///< sorted, unique
};

/// What a held request shows the operator. `url` is redacted as in the audit record and
/// `findings` carry fingerprints only, never the secret.
struct approval_request {
    std::string flow;
    std::string identity;
    std::string source;
    std::string method;
    std::string url;
    std::string reason; ///< "policy_supervise" or "dlp_finding"
    std::vector<audit_finding> findings;
};

/// How a hold ended, as the flow sees it.
struct approval_outcome {
    enum class kind { approved, denied, timed_out, withdrawn, killed };
    kind result = kind::denied;
    std::string id;
    std::string by;     ///< who decided: the API's `by`, or "timeout", "client", "kill"
    std::string reason; ///< the API's `reason` ("" if none)
    std::string at;     ///< RFC 3339 (UTC, ms) of the decision
};

/// A pending approval as GET /v1/approvals lists it.
struct approval_info {
    std::string id;
    approval_request request;
    std::string created; ///< RFC 3339 (UTC, ms)
    std::uint64_t age_ms = 0;
    std::uint64_t expires_in_ms = 0;
};

class control {
public:
    /// Reads `state_file` (killed.json). A missing file = nothing killed; an unreadable or
    /// malformed one = all killed, with `*warning` set to a sentence naming the file.
    static std::shared_ptr<control> open(std::filesystem::path state_file,
                                         std::string* warning = nullptr);
    ~control();

    /// sluice_approvals_pending is kept current in `m` from now on (may be null).
    void attach_metrics(std::shared_ptr<metrics> m);
    /// `new_approval` is called (on the holding flow's thread, must not block) with each new
    /// entry as JSON, e.g. to post a webhook.
    void on_new_approval(std::function<void(std::string json)> f);
    /// `f` is called (on the holding flow's thread, must not block) with the id of each
    /// entry that stops pending, however it ended (fleet_store withdraws it from the store).
    void on_approval_ended(std::function<void(const std::string& id)> f);

    // --- flow registry -----------------------------------------------------------------
    /// Registers a live client connection running on `executor` (call on that executor).
    std::shared_ptr<flow_handle> register_flow(std::string flow, std::string source,
                                               boost::asio::any_io_executor executor);
    /// Flow thread: the flow is ending; no kill reaches it any more.
    void deregister(flow_handle& h);
    void set_identity(flow_handle& h, std::string_view identity);
    void set_destination(flow_handle& h, flow_kind kind, std::string destination);
    std::vector<flow_info> flows() const; ///< oldest first
    std::size_t live_flows() const;

    /// Closes every live flow for which `no_longer_allowed(identity, destination, kind)`
    /// is true, as a kill does, with `reason` as the flow's cut_reason() (e.g. after a
    /// reload removed the allow the flow runs under: "policy_deny"). The predicate runs
    /// under the registry lock: it must not block or call into control. Returns how many
    /// flows were told to close. Any thread.
    std::size_t cut(const std::function<bool(const std::string&, const std::string&, flow_kind)>&
                        no_longer_allowed,
                    std::string reason);

    // --- kill switch -------------------------------------------------------------------
    /// True when `identity` (or everything) is killed. Any thread, lock-free.
    bool is_killed(std::string_view identity) const;
    killed_state killed() const;
    struct kill_result {
        std::size_t closed = 0; ///< live flows told to close (each within one event-loop turn)
        bool persisted = true;  ///< false if killed.json could not be written (still in force)
    };
    /// Kills `identity` (nullopt = all): new flows and requests of it are refused and every
    /// live flow of it (every flow for all) is closed, including held approvals.
    kill_result kill(std::optional<std::string> identity);
    /// Lifts a kill (nullopt = everything, including the per-identity list). Returns
    /// false if the state file could not be written (the change is in force in memory).
    bool revive(std::optional<std::string> identity);
    /// Replaces the whole state with `s`, read from the fleet's control store
    /// (fleet_store.hpp): every live flow that `s` kills is closed (as kill() does) and
    /// killed.json is rewritten as the last-known copy. When `s` equals the state in force
    /// nothing is written or closed (closed = 0). `s.identities` need not be sorted.
    kill_result adopt(killed_state s);
    /// While true, new flows are refused with 503 `control_store_unavailable`
    /// (control_store.on_unavailable: fail_closed, store unreachable). Any thread.
    void set_store_refusing(bool v) { store_refusing_.store(v, std::memory_order_release); }
    bool store_refusing() const { return store_refusing_.load(std::memory_order_acquire); }

    // --- approvals ---------------------------------------------------------------------
    /// Holds the calling flow until a decision, `timeout`, the client closing `client`
    /// (EOF while waiting) or a kill of `h`. Never a busy loop: one steady_timer, woken by
    /// decide() through the flow's executor, and one wait on the client socket.
    boost::asio::awaitable<approval_outcome> hold(approval_request req, flow_handle* h,
                                                  boost::asio::ip::tcp::socket& client,
                                                  std::chrono::milliseconds timeout);
    std::vector<approval_info> approvals() const; ///< pending, oldest first
    std::size_t pending_approvals() const;
    /// Decides a pending entry; nullopt when `id` is unknown or already decided. The
    /// held flow resumes on its own thread.
    std::optional<approval_outcome> decide(std::string_view id, bool approve, std::string by,
                                           std::string reason);

    struct approval_entry; ///< opaque; public only so control.cpp's helpers can name it

private:
    control() = default;
    bool persist_locked(); // writes killed_ (call with mutex_ held)
    void publish_killed_locked();
    void update_pending_locked();

    std::filesystem::path state_file_;
    mutable std::mutex mutex_;
    killed_state killed_;
    std::atomic<std::shared_ptr<const killed_state>> killed_snapshot_;
    std::atomic<bool> store_refusing_{false};
    std::map<std::uint64_t, std::shared_ptr<flow_handle>> flows_; // by registration order
    std::uint64_t next_flow_ = 0;
    std::map<std::uint64_t, std::shared_ptr<approval_entry>> pending_; // oldest first
    std::unordered_map<std::string, std::uint64_t> pending_ids_;
    std::uint64_t next_approval_ = 0;
    std::uint64_t approval_salt_ = 0;
    std::shared_ptr<metrics> metrics_;
    std::function<void(std::string)> new_approval_;
    std::function<void(const std::string&)> approval_ended_;
};

/// Registers GET /v1/approvals, POST /v1/approvals/{}/approve|deny, GET /v1/flows,
/// POST /v1/kill and POST /v1/revive (all with the bearer token) on `api`.
///
/// Shapes: approvals → {"approvals": [{id, flow, identity, source, method, url, reason,
/// findings: [{rule, location, variant, offset, fingerprint}], created, age_ms,
/// expires_in_ms}]}; approve/deny body {"by"?, "reason"?} → {"id", "decision":
/// "approved"|"denied", "by"}, unknown id 404 `unknown_approval`; flows → {"flows":
/// [{flow, identity, source, kind, destination, started, age_ms, bytes_up, bytes_down}],
/// "killed": {"all", "identities"}}; kill {"identity": s} | {"all": true} → {"killed": s |
/// "all", "closed": n, "persisted": bool}; revive → {"revived": s | "all", "persisted":
/// bool}; a body that is not one of those shapes 400 `bad_request`.
///
/// With a fleet store (`store` non-null, fleet_store.hpp) kill and revive go through it:
/// kill adds "store": "shared" (every replica applies it) or "pending" (applied here, the
/// store is down: written when it is back), revive "store": "shared"; revive while the
/// store is down is 503 `control_store_unavailable` and lifts nothing (kills stay).
void register_control_routes(admin_api& api, std::shared_ptr<control> ctl,
                             std::shared_ptr<fleet_store> store = nullptr);

/// The approval's JSON as listed (also what a webhook receives).
std::string approval_json(const approval_info& a);

/// "2026-11-30T10:33:49.123Z" for `t` (UTC, milliseconds).
std::string rfc3339_ms(std::chrono::system_clock::time_point t);

} // namespace sluice::proxy
