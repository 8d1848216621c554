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
    static std::uint32_t take(bucket& b, double capacity, double amount, clock::time_point now);
    void release_connection(const std::string& identity) noexcept;

    mutable std::mutex mu_;
    std::unordered_map<std::string, identity_state> state_;
};

} // namespace sluice::proxy
