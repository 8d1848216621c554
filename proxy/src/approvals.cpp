// Held requests (supervise): control::hold() parks a request until a decision, a
// timeout, the client leaving or a kill; decide() ends it (control.hpp).
#include "sluice/proxy/control.hpp"

#include "control_detail.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <poll.h>
#include <sys/socket.h>

namespace sluice::proxy {

using tcp = net::ip::tcp;
using namespace std::chrono_literals;

// --- approvals --------------------------------------------------------------------------
namespace {

// Ends when the client has gone (EOF, reset, or the socket was closed by a kill) or when
// cancelled. A readable socket is not enough to tell: a pipelined request or a TLS alert
// may be waiting, so EOF is told by a peek and, with data pending, by POLLRDHUP (the peer
// shut its side); while data sits unread the check repeats every 250 ms instead of
// spinning on a socket that stays readable.
net::awaitable<void> watch_client(tcp::socket& s) {
    constexpr auto as_tuple = net::as_tuple(net::use_awaitable);
    for (;;) {
        auto [ec] = co_await s.async_wait(tcp::socket::wait_read, as_tuple);
        if (ec || !s.is_open())
            co_return;
        char c;
        ssize_t n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            co_return;
        pollfd p{s.native_handle(), POLLRDHUP, 0};
        if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
            co_return;
        net::steady_timer t(s.get_executor(), 250ms);
        auto [tec] = co_await t.async_wait(as_tuple);
        if (tec)
            co_return;
    }
}

} // namespace

std::string approval_json(const approval_info& a) {
    boost::json::object o;
    o["id"] = a.id;
    o["flow"] = a.request.flow;
    if (a.request.identity.empty())
        o["identity"] = nullptr;
    else
        o["identity"] = a.request.identity;
    o["source"] = a.request.source;
    o["method"] = a.request.method;
    o["url"] = a.request.url;
    o["reason"] = a.request.reason;
    boost::json::array fs;
    for (const auto& f : a.request.findings) {
        boost::json::object fo;
        fo["rule"] = f.rule;
        fo["location"] = f.location;
        fo["variant"] = f.variant;
        fo["offset"] = f.offset;
        fo["fingerprint"] = f.fingerprint;
        fs.push_back(std::move(fo));
    }
    o["findings"] = std::move(fs);
    o["created"] = a.created;
    o["age_ms"] = a.age_ms;
    o["expires_in_ms"] = a.expires_in_ms;
    return boost::json::serialize(o);
}

namespace {
approval_info info_of(const control::approval_entry& e, std::chrono::steady_clock::time_point now);
}

boost::asio::awaitable<approval_outcome> control::hold(approval_request req, flow_handle* h,
                                                       tcp::socket& client,
                                                       std::chrono::milliseconds timeout) {
    using namespace net::experimental::awaitable_operators;
    constexpr auto as_tuple = net::as_tuple(net::use_awaitable);
    auto ex = co_await net::this_coro::executor;
    auto e = std::make_shared<approval_entry>(ex);
    e->req = std::move(req);
    e->created_wall = std::chrono::system_clock::now();
    e->created = std::chrono::steady_clock::now();
    e->expires = e->created + timeout;
    std::function<void(std::string)> notify;
    {
        std::lock_guard lock(mutex_);
        e->seq = ++next_approval_;
        char buf[48];
        std::snprintf(buf, sizeof buf, "ap-%08llx-%06llx",
                      static_cast<unsigned long long>(approval_salt_ & 0xffffffffu),
                      static_cast<unsigned long long>(e->seq & 0xffffff));
        e->id = buf;
        pending_.emplace(e->seq, e);
        pending_ids_.emplace(e->id, e->seq);
        update_pending_locked();
        notify = new_approval_;
    }
    // However the hold ends (a return below, or the flow's coroutine destroyed), the entry
    // stops pending: tell whoever published it.
    struct on_end {
        std::function<void(const std::string&)> f;
        std::string id;
        ~on_end() {
            if (f)
                f(id);
        }
    } ended{[this] {
                std::lock_guard lock(mutex_);
                return approval_ended_;
            }(),
            e->id};
    spdlog::info("flow {}: request held for approval {} ({})", e->req.flow, e->id, e->req.reason);
    if (notify)
        notify(approval_json(info_of(*e, e->created)));

    // Ends the hold with `k` unless a decision got there first; returns what stands.
    auto finish = [&](approval_outcome::kind k, std::string by) {
        std::lock_guard lock(mutex_);
        if (e->pending) {
            e->pending = false;
            e->outcome = {k, e->id, std::move(by), "",
                          rfc3339_ms(std::chrono::system_clock::now())};
            pending_.erase(e->seq);
            pending_ids_.erase(e->id);
            update_pending_locked();
        }
        return e->outcome;
    };

    // A kill wakes the hold (the flow's own hooks close the client socket too).
    close_hook on_kill(h, [e] { e->timer.cancel(); });
    for (;;) {
        if (h != nullptr && h->killed())
            co_return finish(approval_outcome::kind::killed, "kill");
        {
            std::lock_guard lock(mutex_);
            if (!e->pending)
                co_return e->outcome;
        }
        if (std::chrono::steady_clock::now() >= e->expires)
            co_return finish(approval_outcome::kind::timed_out, "timeout");
        e->timer.expires_at(e->expires);
        auto woke = co_await (e->timer.async_wait(as_tuple) || watch_client(client));
        if (h != nullptr && h->killed())
            co_return finish(approval_outcome::kind::killed, "kill");
        if (woke.index() == 1)
            co_return finish(approval_outcome::kind::withdrawn, "client");
    }
}

namespace {
approval_info info_of(const control::approval_entry& e, std::chrono::steady_clock::time_point now) {
    approval_info a;
    a.id = e.id;
    a.request = e.req;
    a.created = rfc3339_ms(e.created_wall);
    a.age_ms = ms_between(e.created, now);
    a.expires_in_ms = ms_between(now, e.expires);
    return a;
}
} // namespace

std::vector<approval_info> control::approvals() const {
    auto now = std::chrono::steady_clock::now();
    std::vector<approval_info> out;
    std::lock_guard lock(mutex_);
    out.reserve(pending_.size());
    for (const auto& [seq, e] : pending_)
        out.push_back(info_of(*e, now));
    return out;
}

std::size_t control::pending_approvals() const {
    std::lock_guard lock(mutex_);
    return pending_.size();
}

std::optional<approval_outcome> control::decide(std::string_view id, bool approve, std::string by,
                                                std::string reason) {
    std::shared_ptr<approval_entry> e;
    approval_outcome out;
    {
        std::lock_guard lock(mutex_);
        auto it = pending_ids_.find(std::string(id));
        if (it == pending_ids_.end())
            return std::nullopt;
        auto pit = pending_.find(it->second);
        if (pit == pending_.end() || !pit->second->pending)
            return std::nullopt;
        e = pit->second;
        e->pending = false;
        e->outcome = {approve ? approval_outcome::kind::approved : approval_outcome::kind::denied,
                      e->id, std::move(by), std::move(reason),
                      rfc3339_ms(std::chrono::system_clock::now())};
        out = e->outcome;
        pending_.erase(pit);
        pending_ids_.erase(it);
        update_pending_locked();
    }
    // The timer belongs to the flow's thread: wake it there.
    net::post(e->executor, [e] { e->timer.cancel(); });
    spdlog::info("approval {} {} by {}", out.id, approve ? "approved" : "denied", out.by);
    return out;
}

} // namespace sluice::proxy
