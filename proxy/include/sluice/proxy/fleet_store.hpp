// The kill switch a fleet of replicas shares through Redis (issue 22, CONTRACT.md "Admin
// API"; configuration `control_store`).
//
// State in Redis (every name starts with `key_prefix`, default "sluice:"):
//   <p>kill:ids      set of killed identities
//   <p>kill:all      "1" while everything is killed (absent otherwise)
//   <p>kill:version  integer, +1 per change
//   <p>kill:epoch    random id written with the first change: a new one means the
//                    store lost its data (flushed, replaced) since
//   <p>kill          pub/sub channel; each change publishes the new state
// Changes and reads are one Lua script (EVAL), so a change, its version and its publish
// are atomic. The published message (JSON) and the script's reply (RESP) are the same
// array of strings: [epoch, version, "1"|"0" (all), identity...]; a replica applies a
// state whose epoch differs from the last one it applied, or whose version is not older.
//
// Replicas:
// - start() reads the state before the proxy port opens (bounded by connect_timeout); a
//   replica that starts after a kill refuses the identity from its first request. One
//   that cannot read it and has no killed.json refuses every flow until it can.
// - Each replica subscribes to the channel: a kill made on any replica closes the
//   identity's live flows on every replica when the message arrives (one round trip).
// - Every second the state is read again (the heartbeat): a lost message, a lost
//   connection or a store that lost its data is noticed within about a second.
// - Limits: with each heartbeat a replica registers itself in <p>replicas (a sorted set
//   of expiry times; 3 missed heartbeats drop it) and its connection counts per identity
//   in <p>conns:<replica> (expiring with it), and reads the others': rates are split over
//   the live replicas and connections count fleet-wide (rate_limits.hpp says the error).
//   While the store is down the last figures stay.
// - A store with no state (never written, flushed, or replaced) while this replica holds
//   kills gets them written back: a kill is never lifted by the store losing data.
//   Revives need the store. A new replica that finds no state and no settled replica
//   waits for them (settling(), max backoff + connect_timeout + 1 s) before it serves,
//   then writes a first state ("init"): a new fleet pays that wait once.
// - Store unreachable: reconnect with backoff (100 ms doubling to 5 s). The last state
//   read stays in force (and in killed.json, the last-known copy). kill() still applies
//   locally at once and is written to the store on reconnect; revive() is refused
//   (`unavailable`). With on_unavailable: fail_closed, new flows are refused with 503
//   `control_store_unavailable` until the store is read again.
//
// Threads: the store has its own thread and io_context; kill()/revive() may be awaited
// from any executor (they run on the store's and resume on the caller's). up(),
// errors() any thread.
#pragma once

#include "sluice/config/settings.hpp"
#include "sluice/proxy/control.hpp"
#include "sluice/proxy/rate_limits.hpp"

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::proxy {

class fleet_store {
public:
    /// A name for this process in the store: the host name (a pod's name) and 8 random
    /// hex digits, so that two processes on one host never share one. Also written in
    /// every audit record as "replica" (audit_options::replica). Throws std::runtime_error
    /// when the system has no randomness.
    static std::string new_replica_name();
    /// Checks the URL and builds the TLS context (rediss://). Errors never quote the URL.
    /// `limits` (may be null) are split over the live replicas from now on. `replica`
    /// names this process in the store (new_replica_name()).
    static std::expected<std::shared_ptr<fleet_store>, std::string>
    create(const config::control_store_settings& s, std::shared_ptr<control> ctl,
           rate_limits* limits, std::string replica);
    ~fleet_store(); ///< stop()

    /// Starts the store's thread and waits, at most connect_timeout, for the first read of
    /// the shared state (applied to `ctl` before this returns). False when the store
    /// could not be read in time: the replica serves with killed.json (last_known,
    /// `have_last_known`: the file existed at start) or refuses every new flow with 503
    /// `control_store_unavailable` until the store is read (fail_closed, or no killed.json:
    /// a replica that never read the fleet's state has nothing to enforce); the thread
    /// keeps trying.
    bool start(bool have_last_known);
    /// Stops the thread (idempotent).
    void stop();

    bool up() const;
    bool fail_closed() const;
    /// True while this replica, new, found no kill switch state and no other replica in
    /// the store: it refuses new flows (503 control_store_unavailable) until the state
    /// appears, another replica settles, or about 8 s have passed (then it writes a first
    /// state, nothing killed). A store that lost its data is thus never read as "nothing
    /// killed" by a replica that starts before the others have written their kills back.
    bool settling() const;
    std::uint64_t errors() const;
    /// Live replicas as last read (0 before the first read).
    std::uint64_t replicas() const;
    /// This replica's name in the store: host name and a random suffix.
    const std::string& replica() const;

    struct change {
        enum class outcome {
            shared,     ///< written to the store; every replica applies it
            pending,    ///< kill applied here only; written when the store is back
            unavailable ///< revive refused: the store cannot be written
        };
        outcome result = outcome::shared;
        control::kill_result local; ///< flows closed here, killed.json written
    };
    /// Kills `identity` (nullopt = all) across the fleet.
    boost::asio::awaitable<change> kill(std::optional<std::string> identity);
    /// Lifts a kill across the fleet; `unavailable` while the store cannot be written.
    boost::asio::awaitable<change> revive(std::optional<std::string> identity);

    // --- approvals across replicas ---------------------------------------------------
    // A held request stays in the replica that holds its connection; its entry (as
    // GET /v1/approvals lists it: redacted URL, fingerprints, never a secret) is published
    // in <p>approval:<id> (expiring with the hold) and <p>approvals (ids by expiry), so
    // any replica lists it; a decision made on another replica is published on <p>decide
    // and applied by the holder. While the store is down, entries are listed and decided
    // on their holder only.

    /// Publishes a new pending entry (approval_json). Returns at once; any thread.
    void publish_approval(std::string json);
    /// Withdraws a published entry (decided, timed out, withdrawn, killed). Any thread.
    void approval_ended(std::string id);
    /// The entries other replicas hold, each the listed JSON object plus "replica", with
    /// age_ms and expires_in_ms as of now (the store's clock). Empty while it is down.
    boost::asio::awaitable<std::vector<std::string>> remote_approvals();
    /// Decides an entry another replica holds. True when it was pending in the store
    /// (then claimed: a second decision finds nothing); the holder resumes the request
    /// when the message reaches it.
    boost::asio::awaitable<bool> decide_remote(std::string id, bool approve, std::string by,
                                               std::string reason);
    /// Claims an entry this replica holds before it is decided here. One decision wins
    /// across the fleet: decide_remote() claims the same key, so of two decisions made at
    /// once on the holder and on another replica exactly one is applied and answered 200.
    /// False when another replica's decision came first (it reaches the holder through
    /// the store); true when this replica claimed it, and while the store is down (then
    /// entries are decided on their holder only).
    boost::asio::awaitable<bool> claim_local(std::string id);

    struct impl;

private:
    explicit fleet_store(std::unique_ptr<impl> i);
    std::unique_ptr<impl> impl_;
};

} // namespace sluice::proxy
