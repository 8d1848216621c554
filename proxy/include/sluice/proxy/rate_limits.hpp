// Per-identity limits (CONTRACT.md `policies[].limits`, issue 7): requests per minute,
// upload bytes per minute and concurrent client connections. Exceeding one is answered
// `429` with `Retry-After` (RFC 9110 section 10.2.3, delay-seconds) by the caller.
//
// Rates are token buckets (capacity = the per-minute figure, refilled continuously at
// capacity/60 per second), so a quiet identity may burst up to one minute's allowance
// and then runs at the configured rate. Connections are counted while a client
// connection is held by that identity.
//
// State is keyed by identity name and outlives configuration generations: a reload that
// changes a limit applies it to the existing bucket (clamped to the new capacity). A
// rate limit of 0 means unlimited and touches no state.
//
// Fleet mode (control_store, fleet_store.hpp, issue 22): the store tells each replica how
// many replicas are live (N) and how many connections the others hold per identity, once
// a second. Each replica then admits limit/N of every rate (bucket capacity and refill),
// so a fleet whose load is spread over its replicas admits the configured rate in all;
// an identity whose traffic all goes to one replica gets limit/N there (the error is on
// the side of refusing). One request whose amount exceeds the share but not the whole
// limit (a large upload) is admitted when the replica's bucket is full, leaving it in
// debt. Connections count the others' last reported figures: at most the connections
// opened elsewhere within the last second can go over `max_connections`.
//
// Thread safety: every member may be called from any thread (one mutex; the critical
// sections are a few arithmetic operations).
#pragma once

#include "sluice/dlp/policy.hpp"

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::proxy {

class rate_limits {
public:
    using clock = std::chrono::steady_clock;

    /// Takes one request token. Returns 0 when admitted, otherwise the whole seconds
    /// (>= 1) until a token is available; nothing is taken then.
    std::uint32_t admit_request(std::string_view identity, const dlp::policy_limits& limits,
                                clock::time_point now = clock::now());

    /// Takes `bytes` of upload budget. Returns 0 when admitted, otherwise the seconds
    /// until that many bytes are available (60 when `bytes` exceeds the whole
    /// per-minute budget, which can never be admitted: the caller still answers 429).
    std::uint32_t admit_upload(std::string_view identity, const dlp::policy_limits& limits,
                               std::uint64_t bytes, clock::time_point now = clock::now());

    /// Holds one connection slot of an identity until destroyed or released.
    class connection_slot {
    public:
        connection_slot() = default;
        connection_slot(connection_slot&& o) noexcept;
        connection_slot& operator=(connection_slot&& o) noexcept;
        connection_slot(const connection_slot&) = delete;
        connection_slot& operator=(const connection_slot&) = delete;
        ~connection_slot();
        void release() noexcept;
        const std::string& identity() const { return identity_; }
        bool held() const { return owner_ != nullptr; }

    private:
        friend class rate_limits;
        rate_limits* owner_ = nullptr;
        std::string identity_;
    };

    /// Fills `slot` when fewer than `limits.max_connections` are held by `identity` (or
    /// the limit is 0); false when full. Connections are counted whatever the limit, so
    /// a reload that sets one sees the connections already open.
    bool acquire_connection(std::string_view identity, const dlp::policy_limits& limits,
                            connection_slot& slot);

    /// Connections currently held by `identity` (for tests and the flow listing).
    std::uint64_t connections(std::string_view identity) const;

    /// Fleet mode: `replicas` live replicas share every rate (>= 1; 1 = the whole limit
    /// here), and `remote` holds the connections the other replicas hold per identity.
    void set_fleet(unsigned replicas, std::unordered_map<std::string, std::uint64_t> remote);
    /// The connections held here, per identity that holds at least one (what this replica
    /// reports to the fleet).
    std::vector<std::pair<std::string, std::uint64_t>> held_connections() const;

private:
    struct bucket {
        double tokens = 0;
        clock::time_point at{};
        bool primed = false;
    };
    struct identity_state {
        bucket requests;
        bucket upload;
        std::uint64_t connections = 0;
    };
    static std::uint32_t take(bucket& b, double limit, double share, double amount,
                              clock::time_point now);
    void release_connection(const std::string& identity) noexcept;

    mutable std::mutex mu_;
    std::unordered_map<std::string, identity_state> state_;
    double share_ = 1;                                            // live replicas (fleet mode)
    std::unordered_map<std::string, std::uint64_t> remote_conns_; // held by the others
};

} // namespace sluice::proxy
