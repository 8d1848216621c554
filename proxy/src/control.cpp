#include "sluice/proxy/control.hpp"

#include "sluice/proxy/admin_api.hpp"
#include "sluice/proxy/fleet_store.hpp"
#include "sluice/proxy/metrics.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::proxy {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

std::string_view to_string(flow_kind k) {
    switch (k) {
    case flow_kind::http:
        return "http";
    case flow_kind::tunnel:
        return "tunnel";
    case flow_kind::websocket:
        return "websocket";
    }
    return "http";
}

std::string rfc3339_ms(std::chrono::system_clock::time_point t) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
    std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[96];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(ms % 1000));
    return buf;
}

namespace {

std::uint64_t ms_between(std::chrono::steady_clock::time_point from,
                         std::chrono::steady_clock::time_point to) {
    if (to <= from)
        return 0;
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count());
}

// --- killed.json ------------------------------------------------------------------------
std::optional<killed_state> parse_killed(std::string_view text) {
    boost::system::error_code ec;
    auto v = boost::json::parse(text, ec);
    if (ec || !v.is_object())
        return std::nullopt;
    const auto& o = v.as_object();
    killed_state k;
    if (auto* all = o.if_contains("all")) {
        if (!all->is_bool())
            return std::nullopt;
        k.all = all->as_bool();
    }
    if (auto* ids = o.if_contains("identities")) {
        if (!ids->is_array())
            return std::nullopt;
        for (const auto& i : ids->as_array()) {
            if (!i.is_string() || i.as_string().empty())
                return std::nullopt;
            k.identities.emplace_back(i.as_string());
        }
    }
    std::sort(k.identities.begin(), k.identities.end());
    k.identities.erase(std::unique(k.identities.begin(), k.identities.end()), k.identities.end());
    return k;
}

std::string killed_json(const killed_state& k) {
    boost::json::object o;
    o["all"] = k.all;
    boost::json::array ids;
    for (const auto& i : k.identities)
        ids.emplace_back(i);
    o["identities"] = std::move(ids);
    return boost::json::serialize(o) + "\n";
}

// Replaces `file` atomically: a reader (or a restart after a crash) sees the old state or
// the new one, never a torn file.
bool write_atomically(const std::filesystem::path& file, const std::string& text) {
    std::filesystem::path tmp = file;
    tmp += ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    const char* p = text.data();
    std::size_t left = text.size();
    bool ok = true;
    while (left > 0) {
        ssize_t n = ::write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ok = false;
            break;
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0;
    ok = ::close(fd) == 0 && ok;
    if (!ok || ::rename(tmp.c_str(), file.c_str()) != 0) {
        ::unlink(tmp.c_str());
        return false;
    }
    // The rename itself must survive a power loss.
    int dfd = ::open(file.parent_path().empty() ? "." : file.parent_path().c_str(),
                     O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
    return true;
}

} // namespace

// --- flow_handle ------------------------------------------------------------------------
flow_handle::flow_handle(std::string flow, std::string source, net::any_io_executor executor)
    : flow_(std::move(flow))
    , source_(std::move(source))
    , executor_(std::move(executor))
    , started_wall_(std::chrono::system_clock::now())
    , started_(std::chrono::steady_clock::now()) {}

std::uint64_t flow_handle::add_hook(std::function<void()> close) {
    auto key = ++next_hook_;
    hooks_.emplace_back(key, std::move(close));
    if (killed_) // a socket opened after the kill reached us: close it at once
        hooks_.back().second();
    return key;
}

void flow_handle::remove_hook(std::uint64_t key) {
    std::erase_if(hooks_, [key](const auto& h) { return h.first == key; });
}

void flow_handle::close_now(std::string reason) {
    if (!alive_)
        return;
    if (!killed_)
        cut_reason_ = std::move(reason);
    killed_ = true;
    // A hook may not add or remove hooks, but copy anyway: closing is what matters here.
    auto hooks = hooks_;
    for (auto& [key, fn] : hooks)
        fn();
}

close_hook::close_hook(flow_handle* h, std::function<void()> close)
    : h_(h) {
    if (h_ != nullptr)
        key_ = h_->add_hook(std::move(close));
}

close_hook::close_hook(close_hook&& o) noexcept
    : h_(std::exchange(o.h_, nullptr))
    , key_(o.key_) {}

close_hook& close_hook::operator=(close_hook&& o) noexcept {
    if (this != &o) {
        if (h_ != nullptr)
            h_->remove_hook(key_);
        h_ = std::exchange(o.h_, nullptr);
        key_ = o.key_;
    }
    return *this;
}

close_hook::~close_hook() {
    if (h_ != nullptr)
        h_->remove_hook(key_);
}

// --- control ----------------------------------------------------------------------------
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

std::shared_ptr<control> control::open(std::filesystem::path state_file, std::string* warning) {
    std::shared_ptr<control> c(new control());
    c->state_file_ = std::move(state_file);
    RAND_bytes(reinterpret_cast<unsigned char*>(&c->approval_salt_), sizeof c->approval_salt_);
    std::error_code ec;
    if (std::filesystem::exists(c->state_file_, ec)) {
        std::optional<killed_state> k;
        if (std::FILE* f = std::fopen(c->state_file_.c_str(), "rb")) {
            std::string text;
            char buf[4096];
            std::size_t n;
            while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1u << 20))
                text.append(buf, n);
            bool read_ok = !std::ferror(f);
            std::fclose(f);
            if (read_ok)
                k = parse_killed(text);
        }
        if (k) {
            c->killed_ = std::move(*k);
        } else {
            // Fail closed: a kill the operator made must not be lifted by a damaged file.
            c->killed_.all = true;
            if (warning != nullptr)
                *warning = "kill switch state " + c->state_file_.string() +
                           " cannot be read or parsed: every identity is treated as killed "
                           "until `sluice revive --all` (POST /v1/revive {\"all\":true}) "
                           "rewrites it";
        }
    } else if (ec && warning != nullptr) {
        c->killed_.all = true;
        *warning = "kill switch state " + c->state_file_.string() + ": " + ec.message() +
                   "; every identity is treated as killed";
    }
    c->publish_killed_locked();
    return c;
}

control::~control() = default;

void control::attach_metrics(std::shared_ptr<metrics> m) {
    std::lock_guard lock(mutex_);
    metrics_ = std::move(m);
    update_pending_locked();
}

void control::on_new_approval(std::function<void(std::string)> f) {
    std::lock_guard lock(mutex_);
    new_approval_ = std::move(f);
}

void control::on_approval_ended(std::function<void(const std::string& id)> f) {
    std::lock_guard lock(mutex_);
    approval_ended_ = std::move(f);
}

void control::publish_killed_locked() {
    killed_snapshot_.store(std::make_shared<const killed_state>(killed_));
}

void control::update_pending_locked() {
    if (metrics_)
        metrics_->set_approvals_pending(static_cast<std::int64_t>(pending_.size()));
}

bool control::persist_locked() {
    if (state_file_.empty())
        return true;
    if (!write_atomically(state_file_, killed_json(killed_))) {
        spdlog::error("kill switch: cannot write {}: {} (the change is in force until restart)",
                      state_file_.string(), std::strerror(errno));
        return false;
    }
    return true;
}

std::shared_ptr<flow_handle> control::register_flow(std::string flow, std::string source,
                                                    net::any_io_executor executor) {
    auto h = std::make_shared<flow_handle>(std::move(flow), std::move(source), std::move(executor));
    std::lock_guard lock(mutex_);
    h->serial_ = ++next_flow_;
    flows_.emplace(h->serial_, h);
    return h;
}

void control::deregister(flow_handle& h) {
    h.alive_ = false;
    h.hooks_.clear();
    std::lock_guard lock(mutex_);
    flows_.erase(h.serial_);
}

void control::set_identity(flow_handle& h, std::string_view identity) {
    std::lock_guard lock(mutex_);
    if (h.identity_ != identity)
        h.identity_ = std::string(identity);
}

void control::set_destination(flow_handle& h, flow_kind kind, std::string destination) {
    std::lock_guard lock(mutex_);
    h.kind_ = kind;
    h.destination_ = std::move(destination);
}

std::vector<flow_info> control::flows() const {
    auto now = std::chrono::steady_clock::now();
    std::vector<flow_info> out;
    std::lock_guard lock(mutex_);
    out.reserve(flows_.size());
    for (const auto& [serial, h] : flows_) {
        flow_info f;
        f.flow = h->flow_;
        f.identity = h->identity_;
        f.source = h->source_;
        f.kind = std::string(to_string(h->kind_));
        f.destination = h->destination_;
        f.started = rfc3339_ms(h->started_wall_);
        f.age_ms = ms_between(h->started_, now);
        f.bytes_up = h->bytes_up.load(std::memory_order_relaxed);
        f.bytes_down = h->bytes_down.load(std::memory_order_relaxed);
        out.push_back(std::move(f));
    }
    return out;
}

std::size_t control::live_flows() const {
    std::lock_guard lock(mutex_);
    return flows_.size();
}

bool control::is_killed(std::string_view identity) const {
    auto k = killed_snapshot_.load();
    if (k->all)
        return true;
    if (identity.empty())
        return false;
    return std::binary_search(k->identities.begin(), k->identities.end(), identity);
}

killed_state control::killed() const {
    return *killed_snapshot_.load();
}

control::kill_result control::kill(std::optional<std::string> identity) {
    kill_result r;
    std::vector<std::shared_ptr<flow_handle>> targets;
    {
        std::lock_guard lock(mutex_);
        if (!identity) {
            killed_.all = true;
        } else {
            auto it =
                std::lower_bound(killed_.identities.begin(), killed_.identities.end(), *identity);
            if (it == killed_.identities.end() || *it != *identity)
                killed_.identities.insert(it, *identity);
        }
        // Published before the flows are listed: a flow that sets its identity after this
        // list was taken sees the kill in its own check (both under this mutex).
        publish_killed_locked();
        for (const auto& [serial, h] : flows_)
            if (!identity || h->identity_ == *identity)
                targets.push_back(h);
        // Small file, written under the lock so concurrent kills and revives reach the
        // disk in the order they took effect.
        r.persisted = persist_locked();
    }
    for (auto& h : targets)
        net::post(h->executor_, [h] { h->close_now(); });
    r.closed = targets.size();
    spdlog::warn("kill switch: {} killed, {} live flow(s) closed", identity ? *identity : "all",
                 r.closed);
    return r;
}

std::size_t control::cut(
    const std::function<bool(const std::string&, const std::string&, flow_kind)>& no_longer_allowed,
    std::string reason) {
    std::vector<std::shared_ptr<flow_handle>> targets;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [serial, h] : flows_)
            if (!h->identity_.empty() && !h->destination_.empty() &&
                no_longer_allowed(h->identity_, h->destination_, h->kind_))
                targets.push_back(h);
    }
    for (auto& h : targets)
        net::post(h->executor_, [h, reason] { h->close_now(reason); });
    if (!targets.empty())
        spdlog::warn("{} live flow(s) closed: {}", targets.size(), reason);
    return targets.size();
}

control::kill_result control::adopt(killed_state s) {
    std::sort(s.identities.begin(), s.identities.end());
    s.identities.erase(std::unique(s.identities.begin(), s.identities.end()), s.identities.end());
    kill_result r;
    std::vector<std::shared_ptr<flow_handle>> targets;
    {
        std::lock_guard lock(mutex_);
        if (s.all == killed_.all && s.identities == killed_.identities)
            return r;
        killed_ = std::move(s);
        publish_killed_locked(); // before listing, as in kill()
        for (const auto& [serial, h] : flows_)
            if (killed_.all || std::binary_search(killed_.identities.begin(),
                                                  killed_.identities.end(), h->identity_))
                targets.push_back(h);
        r.persisted = persist_locked();
    }
    for (auto& h : targets)
        net::post(h->executor_, [h] { h->close_now(); });
    r.closed = targets.size();
    auto k = killed();
    spdlog::warn("kill switch: state from the control store in force (all: {}, {} identit{} "
                 "killed), {} live flow(s) closed",
                 k.all, k.identities.size(), k.identities.size() == 1 ? "y" : "ies", r.closed);
    return r;
}

bool control::revive(std::optional<std::string> identity) {
    std::lock_guard lock(mutex_);
    if (!identity) {
        killed_.all = false;
        killed_.identities.clear();
    } else {
        std::erase(killed_.identities, *identity);
    }
    publish_killed_locked();
    spdlog::warn("kill switch: {} revived", identity ? *identity : "all");
    return persist_locked();
}

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

// --- admin routes -----------------------------------------------------------------------
namespace {

admin_response json_response(unsigned status, const boost::json::object& o) {
    return admin_response{status, boost::json::serialize(o)};
}

// {"identity": "x"} or {"all": true}, nothing else. nullopt in the outer optional = bad body.
std::optional<std::optional<std::string>> parse_target(const std::string& body) {
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    if (ec || !v.is_object())
        return std::nullopt;
    const auto& o = v.as_object();
    if (o.size() != 1)
        return std::nullopt;
    if (auto* all = o.if_contains("all")) {
        if (all->is_bool() && all->as_bool())
            return std::optional<std::string>{};
        return std::nullopt;
    }
    if (auto* id = o.if_contains("identity")) {
        if (!id->is_string() || id->as_string().empty() || id->as_string().size() > 256)
            return std::nullopt;
        return std::optional<std::string>{std::string(id->as_string())};
    }
    return std::nullopt;
}

struct decision_body {
    std::string by = "admin";
    std::string reason;
};

std::optional<decision_body> parse_decision(const std::string& body) {
    decision_body d;
    if (body.find_first_not_of(" \t\r\n") == std::string::npos)
        return d;
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    if (ec || !v.is_object())
        return std::nullopt;
    for (const auto& [k, val] : v.as_object()) {
        if (!val.is_string() || val.as_string().size() > 256)
            return std::nullopt;
        if (k == "by") {
            if (!val.as_string().empty())
                d.by = std::string(val.as_string());
        } else if (k == "reason") {
            d.reason = std::string(val.as_string());
        } else {
            return std::nullopt;
        }
    }
    return d;
}

} // namespace

void register_control_routes(admin_api& api, std::shared_ptr<control> ctl,
                             std::shared_ptr<fleet_store> store) {
    api.route("GET", "/v1/approvals", true,
              [ctl, store](admin_request) -> net::awaitable<admin_response> {
                  std::string body = "{\"approvals\":[";
                  bool first = true;
                  for (const auto& a : ctl->approvals()) {
                      if (!first)
                          body += ',';
                      first = false;
                      body += approval_json(a);
                  }
                  std::vector<std::string> remote; // the other replicas' (with "replica")
                  if (store)
                      remote = co_await store->remote_approvals();
                  for (const auto& a : remote) {
                      if (!first)
                          body += ',';
                      first = false;
                      body += a;
                  }
                  body += "]}";
                  co_return admin_response{200, std::move(body)};
              });
    for (bool approve : {true, false}) {
        api.route("POST", approve ? "/v1/approvals/{}/approve" : "/v1/approvals/{}/deny", true,
                  [ctl, store, approve](admin_request r) -> net::awaitable<admin_response> {
                      auto d = parse_decision(r.body);
                      if (!d)
                          co_return admin_error(400, "bad_request",
                                                "body must be {\"by\": string, \"reason\": "
                                                "string}, both optional");
                      auto out = ctl->decide(r.params.at(0), approve, d->by, d->reason);
                      boost::json::object o;
                      o["id"] = r.params.at(0);
                      o["decision"] = approve ? "approved" : "denied";
                      o["by"] = d->by;
                      // Not held here: another replica may hold it. (No co_await inside a
                      // condition: GCC 12 miscompiles it.)
                      bool forwarded = false;
                      if (!out && store)
                          forwarded = co_await store->decide_remote(r.params.at(0), approve, d->by,
                                                                    d->reason);
                      if (!out && !forwarded)
                          co_return admin_error(404, "unknown_approval",
                                                "no pending approval with this id");
                      if (out)
                          o["by"] = out->by;
                      else
                          o["forwarded"] = true; // held by another replica, which applies it
                      co_return json_response(200, o);
                  });
    }
    api.route("GET", "/v1/flows", true, [ctl](admin_request) -> net::awaitable<admin_response> {
        boost::json::array fs;
        for (const auto& f : ctl->flows()) {
            boost::json::object o;
            o["flow"] = f.flow;
            if (f.identity.empty())
                o["identity"] = nullptr;
            else
                o["identity"] = f.identity;
            o["source"] = f.source;
            o["kind"] = f.kind;
            o["destination"] = f.destination;
            o["started"] = f.started;
            o["age_ms"] = f.age_ms;
            o["bytes_up"] = f.bytes_up;
            o["bytes_down"] = f.bytes_down;
            fs.push_back(std::move(o));
        }
        auto k = ctl->killed();
        boost::json::object ko;
        ko["all"] = k.all;
        boost::json::array ids;
        for (const auto& i : k.identities)
            ids.emplace_back(i);
        ko["identities"] = std::move(ids);
        boost::json::object o;
        o["flows"] = std::move(fs);
        o["killed"] = std::move(ko);
        co_return json_response(200, o);
    });
    api.route(
        "POST", "/v1/kill", true, [ctl, store](admin_request r) -> net::awaitable<admin_response> {
            auto target = parse_target(r.body);
            if (!target)
                co_return admin_error(400, "bad_request",
                                      "body must be {\"identity\": \"name\"} or {\"all\": true}");
            boost::json::object o;
            o["killed"] = target->value_or("all");
            control::kill_result res;
            if (store) {
                auto c = co_await store->kill(*target);
                res = c.local;
                o["store"] =
                    c.result == fleet_store::change::outcome::shared ? "shared" : "pending";
            } else {
                res = ctl->kill(*target);
            }
            o["closed"] = res.closed;
            o["persisted"] = res.persisted;
            co_return json_response(200, o);
        });
    api.route(
        "POST", "/v1/revive", true,
        [ctl, store](admin_request r) -> net::awaitable<admin_response> {
            auto target = parse_target(r.body);
            if (!target)
                co_return admin_error(400, "bad_request",
                                      "body must be {\"identity\": \"name\"} or {\"all\": true}");
            bool persisted = true;
            if (store) {
                auto c = co_await store->revive(*target);
                if (c.result == fleet_store::change::outcome::unavailable)
                    co_return admin_error(503, "control_store_unavailable",
                                          "the control store cannot be written: nothing is revived "
                                          "until it is back (kills stay in force)");
                persisted = c.local.persisted;
            } else {
                persisted = ctl->revive(*target);
            }
            boost::json::object o;
            o["revived"] = target->value_or("all");
            o["persisted"] = persisted;
            co_return json_response(200, o);
        });
}

} // namespace sluice::proxy
