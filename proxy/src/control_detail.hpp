// Internal to proxy/: what control.cpp (flows, kill switch) and approvals.cpp (held
// requests) share: a held request's entry (guarded by control's mutex, its timer on the
// flow's thread) and the millisecond arithmetic both report with.
#pragma once

#include "sluice/proxy/control.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::proxy {

namespace net = boost::asio;

/// Milliseconds from `from` to `to`, 0 when `to` is not later.
inline std::uint64_t ms_between(std::chrono::steady_clock::time_point from,
                                std::chrono::steady_clock::time_point to) {
    if (to <= from)
        return 0;
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count());
}

struct control::approval_entry {
    explicit approval_entry(net::any_io_executor ex)
        : executor(ex)
        , timer(ex) {}
    std::uint64_t seq = 0;
    std::string id;
    approval_request req;
    std::chrono::system_clock::time_point created_wall;
    std::chrono::steady_clock::time_point created;
    std::chrono::steady_clock::time_point expires;
    net::any_io_executor executor;
    net::steady_timer timer; // flow thread only
    // guarded by control::mutex_
    bool pending = true;
    approval_outcome outcome;
};

} // namespace sluice::proxy
