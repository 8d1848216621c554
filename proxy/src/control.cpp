#include "sluice/proxy/control.hpp"

#include "control_detail.hpp"

#include "sluice/proxy/metrics.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
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

} // namespace sluice::proxy
