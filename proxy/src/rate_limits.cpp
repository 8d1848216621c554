#include "sluice/proxy/rate_limits.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::proxy {

std::uint32_t rate_limits::take(bucket& b, double capacity, double amount, clock::time_point now) {
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
    b.tokens = std::min(b.tokens, capacity); // a reload may have lowered the limit
    if (amount > capacity)
        return 60;
    if (b.tokens >= amount) {
        b.tokens -= amount;
        return 0;
    }
    const double wait = (amount - b.tokens) / per_second;
    return static_cast<std::uint32_t>(std::max(1.0, std::ceil(wait)));
}

std::uint32_t rate_limits::admit_request(std::string_view identity,
                                         const dlp::policy_limits& limits, clock::time_point now) {
    if (limits.requests_per_minute == 0)
        return 0;
    std::lock_guard lock(mu_);
    auto& st = state_[std::string(identity)];
    return take(st.requests, static_cast<double>(limits.requests_per_minute), 1.0, now);
}

std::uint32_t rate_limits::admit_upload(std::string_view identity, const dlp::policy_limits& limits,
                                        std::uint64_t bytes, clock::time_point now) {
    if (limits.upload_per_minute == 0 || bytes == 0)
        return 0;
    std::lock_guard lock(mu_);
    auto& st = state_[std::string(identity)];
    return take(st.upload, static_cast<double>(limits.upload_per_minute),
                static_cast<double>(bytes), now);
}

bool rate_limits::acquire_connection(std::string_view identity, const dlp::policy_limits& limits,
                                     connection_slot& slot) {
    if (slot.held() && slot.identity() == identity)
        return true;
    slot.release();
    std::lock_guard lock(mu_);
    auto& st = state_[std::string(identity)];
    if (limits.max_connections != 0 && st.connections >= limits.max_connections)
        return false;
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
