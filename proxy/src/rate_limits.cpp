#include "sluice/proxy/rate_limits.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::proxy {

// `limit` is the configured per-minute figure; this replica's bucket holds limit/share.
std::uint32_t rate_limits::take(bucket& b, double limit, double share, double amount,
                                clock::time_point now) {
    const double capacity = limit / share;
    if (!b.primed) { // a new identity starts with a full minute's allowance
        b.tokens = capacity;
        b.at = now;
        b.primed = true;
    }
    const double per_second = capacity / 60.0;
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    if (elapsed > 0) {
        b.tokens = std::min(capacity, b.tokens + elapsed * per_second);
        b.at = now;
    }
    b.tokens = std::min(b.tokens, capacity); // a reload (or a new replica) lowered it
    if (amount > limit)
        return 60;
    // More than this replica's share but within the limit: admitted from a full bucket,
    // which goes into debt (fleet mode only; with share 1, capacity == limit).
    if (b.tokens >= amount || (amount > capacity && b.tokens >= capacity)) {
        b.tokens -= amount;
        return 0;
    }
    const double wait = (std::min(amount, capacity) - b.tokens) / per_second;
    return static_cast<std::uint32_t>(std::max(1.0, std::ceil(wait)));
}

std::uint32_t rate_limits::admit_request(std::string_view identity,
                                         const dlp::policy_limits& limits, clock::time_point now) {
    if (limits.requests_per_minute == 0)
        return 0;
    std::lock_guard lock(mu_);
    auto& st = state_[std::string(identity)];
    return take(st.requests, static_cast<double>(limits.requests_per_minute), share_, 1.0, now);
}

std::uint32_t rate_limits::admit_upload(std::string_view identity, const dlp::policy_limits& limits,
                                        std::uint64_t bytes, clock::time_point now) {
    if (limits.upload_per_minute == 0 || bytes == 0)
        return 0;
    std::lock_guard lock(mu_);
    auto& st = state_[std::string(identity)];
    return take(st.upload, static_cast<double>(limits.upload_per_minute), share_,
                static_cast<double>(bytes), now);
}

bool rate_limits::acquire_connection(std::string_view identity, const dlp::policy_limits& limits,
                                     connection_slot& slot) {
    if (slot.held() && slot.identity() == identity)
        return true;
    slot.release();
    std::lock_guard lock(mu_);
    auto& st = state_[std::string(identity)];
    if (limits.max_connections != 0) {
        auto r = remote_conns_.find(std::string(identity));
        const std::uint64_t elsewhere = r == remote_conns_.end() ? 0 : r->second;
        if (st.connections + elsewhere >= limits.max_connections)
            return false;
    }
    ++st.connections;
    slot.owner_ = this;
    slot.identity_ = std::string(identity);
    return true;
}

std::uint64_t rate_limits::connections(std::string_view identity) const {
    std::lock_guard lock(mu_);
    auto it = state_.find(std::string(identity));
    return it == state_.end() ? 0 : it->second.connections;
}

void rate_limits::set_fleet(unsigned replicas,
                            std::unordered_map<std::string, std::uint64_t> remote) {
    std::lock_guard lock(mu_);
    share_ = static_cast<double>(std::max(1u, replicas));
    remote_conns_ = std::move(remote);
}

std::vector<std::pair<std::string, std::uint64_t>> rate_limits::held_connections() const {
    std::vector<std::pair<std::string, std::uint64_t>> out;
    std::lock_guard lock(mu_);
    for (const auto& [identity, st] : state_)
        if (st.connections > 0)
            out.emplace_back(identity, st.connections);
    return out;
}

void rate_limits::release_connection(const std::string& identity) noexcept {
    std::lock_guard lock(mu_);
    auto it = state_.find(identity);
    if (it != state_.end() && it->second.connections > 0)
        --it->second.connections;
}

rate_limits::connection_slot::connection_slot(connection_slot&& o) noexcept
    : owner_(o.owner_)
    , identity_(std::move(o.identity_)) {
    o.owner_ = nullptr;
}

rate_limits::connection_slot&
rate_limits::connection_slot::operator=(connection_slot&& o) noexcept {
    if (this != &o) {
        release();
        owner_ = o.owner_;
        identity_ = std::move(o.identity_);
        o.owner_ = nullptr;
    }
    return *this;
}

rate_limits::connection_slot::~connection_slot() {
    release();
}

void rate_limits::connection_slot::release() noexcept {
    if (owner_ != nullptr)
        owner_->release_connection(identity_);
    owner_ = nullptr;
    identity_.clear();
}

} // namespace sluice::proxy
