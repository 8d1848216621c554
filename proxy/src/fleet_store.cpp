// The fleet's shared kill switch in Redis (fleet_store.hpp, issue 22).
#include "sluice/proxy/fleet_store.hpp"

#include "redis_link.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::proxy {

namespace net = boost::asio;
using namespace std::chrono_literals;

namespace {

// KEYS: ids, all, version, epoch, channel. ARGV: op ("read" | "kill" | "revive"), identity
// ("" = all), a new epoch id (used only by the first change a store sees).
constexpr std::string_view kill_script = R"lua(
local ids, all, version, epoch, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, who = ARGV[1], ARGV[2]
if op ~= 'read' then
  if redis.call('EXISTS', version) == 0 then redis.call('SET', epoch, ARGV[3]) end
  if op == 'kill' then
    if who == '' then redis.call('SET', all, '1') else redis.call('SADD', ids, who) end
  elseif op == 'revive' then
    if who == '' then redis.call('DEL', ids, all) else redis.call('SREM', ids, who) end
  end
  redis.call('INCR', version)
end
local out = {redis.call('GET', epoch) or '', redis.call('GET', version) or '0',
             redis.call('EXISTS', all) == 1 and '1' or '0'}
local members = redis.call('SMEMBERS', ids)
table.sort(members)
for _, m in ipairs(members) do out[#out + 1] = m end
if op ~= 'read' then redis.call('PUBLISH', channel, cjson.encode(out)) end
return out
)lua";

struct shared_state {
    std::string epoch; ///< "" = the store holds no state
    std::uint64_t version = 0;
    killed_state killed;
};

std::optional<shared_state> from_strings(const std::vector<std::string>& v) {
    if (v.size() < 3)
        return std::nullopt;
    shared_state s;
    s.epoch = v[0];
    auto [end, ec] = std::from_chars(v[1].data(), v[1].data() + v[1].size(), s.version);
    if (ec != std::errc{} || end != v[1].data() + v[1].size() || (v[2] != "0" && v[2] != "1"))
        return std::nullopt;
    s.killed.all = v[2] == "1";
    s.killed.identities.assign(v.begin() + 3, v.end());
    return s;
}

std::optional<shared_state> from_reply(const redis_reply& r) {
    if (r.type != redis_reply::kind::array)
        return std::nullopt;
    std::vector<std::string> v;
    for (const auto& e : r.elements) {
        if (e.type != redis_reply::kind::string)
            return std::nullopt;
        v.push_back(e.str);
    }
    return from_strings(v);
}

std::optional<shared_state> from_message(std::string_view json) {
    boost::system::error_code ec;
    auto doc = boost::json::parse(json, ec);
    if (ec || !doc.is_array())
        return std::nullopt;
    std::vector<std::string> v;
    for (const auto& e : doc.as_array()) {
        if (!e.is_string())
            return std::nullopt;
        v.emplace_back(e.as_string());
    }
    return from_strings(v);
}

std::string new_epoch() {
    unsigned char b[8];
    if (RAND_bytes(b, sizeof b) != 1)
        throw redis_error("no randomness for the control store epoch");
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : b) {
        out += hex[c >> 4];
        out += hex[c & 15];
    }
    return out;
}

} // namespace

struct fleet_store::impl {
    std::shared_ptr<control> ctl;
    redis_endpoint ep;
    std::string prefix;
    bool fail_closed = false;
    std::chrono::milliseconds timeout{2000};
    std::unique_ptr<net::ssl::context> tls;
    std::atomic<bool> up{false};
    std::atomic<std::uint64_t> errors{0};

    // --- store thread only -------------------------------------------------------------
    std::string applied_epoch;
    std::uint64_t applied_version = 0;
    bool applied_any = false;
    std::vector<std::optional<std::string>> pending; // kills made while the store was down
    std::shared_ptr<redis_link> cmd, sub;
    std::uint64_t generation = 0;
    bool sub_lost = false;
    bool stopping = false;
    bool said_down = false;
    std::optional<net::steady_timer> beat;

    std::mutex first_mutex;
    std::condition_variable first_cv;
    bool first_done = false;
    std::thread thread;
    // Last: destroyed first, with the coroutine frames it still holds, while the members
    // above are alive.
    net::io_context ctx{1};

    std::vector<std::string> eval_args(std::string_view op, std::string_view who) const {
        return {"EVAL",
                std::string(kill_script),
                "5",
                prefix + "kill:ids",
                prefix + "kill:all",
                prefix + "kill:version",
                prefix + "kill:epoch",
                prefix + "kill",
                std::string(op),
                std::string(who),
                new_epoch()};
    }

    net::awaitable<shared_state> eval(redis_link& link, std::string_view op, std::string_view who) {
        auto r = co_await link.call(eval_args(op, who));
        if (r.type == redis_reply::kind::error)
            throw redis_error("the control store refused the kill switch script: " + r.str);
        auto s = from_reply(r);
        if (!s)
            throw redis_error("the control store holds a kill switch state sluice cannot read");
        co_return *s;
    }

    // Applies `s` unless it is older than what is in force (same epoch, lower version).
    control::kill_result apply(const shared_state& s) {
        if (applied_any && s.epoch == applied_epoch && s.version < applied_version)
            return {};
        applied_any = true;
        applied_epoch = s.epoch;
        applied_version = s.version;
        return ctl->adopt(s.killed);
    }

    net::awaitable<std::shared_ptr<redis_link>> open_link() {
        co_return std::shared_ptr<redis_link>(
            co_await redis_link::open(ctx.get_executor(), ep, tls.get(), timeout));
    }

    // Reads the state; writes this replica's kills back first when the store holds none.
    net::awaitable<void> sync(redis_link& link) {
        auto s = co_await eval(link, "read", "");
        auto local = ctl->killed();
        if (s.epoch.empty() && (local.all || !local.identities.empty())) {
            spdlog::warn("control store: it holds no kill switch state (new or flushed); "
                         "writing back this replica's kills");
            if (local.all)
                s = co_await eval(link, "kill", "");
            for (const auto& id : local.identities)
                s = co_await eval(link, "kill", id);
        }
        apply(s);
    }

    void mark_up() {
        if (!up.exchange(true))
            spdlog::info("control store {} connected; kill switch shared", ep.where());
        said_down = false;
        ctl->set_store_refusing(false);
        std::lock_guard lock(first_mutex);
        first_done = true;
        first_cv.notify_all();
    }

    void mark_down(const std::string& why) {
        errors.fetch_add(1, std::memory_order_relaxed);
        up.store(false);
        if (!said_down) // once per outage, not once per reconnect attempt
            spdlog::error("control store {}: {}; {}", ep.where(), why,
                          fail_closed ? "new flows are refused until it is back"
                                      : "the last kill switch state read stays in force; "
                                        "revive is refused until it is back");
        said_down = true;
        if (fail_closed)
            ctl->set_store_refusing(true);
    }

    net::awaitable<void> listen(std::shared_ptr<redis_link> link, std::uint64_t gen) {
        try {
            for (;;) {
                auto m = co_await link->next();
                // ["message", channel, payload]; subscribe confirmations are arrays too.
                if (m.type != redis_reply::kind::array || m.elements.size() != 3 ||
                    m.elements[0].str != "message")
                    continue;
                if (auto s = from_message(m.elements[2].str))
                    apply(*s);
                else
                    spdlog::error("control store: a kill switch message sluice cannot read");
            }
        } catch (const std::exception&) {
        }
        if (gen == generation) {
            sub_lost = true;
            if (beat)
                beat->cancel();
        }
    }

    net::awaitable<void> connect() {
        ++generation;
        sub_lost = false;
        auto s = co_await open_link();
        std::vector<std::string> subscribe{"SUBSCRIBE", prefix + "kill"}; // not a braced
        auto conf = co_await s->call(std::move(subscribe)); // list across co_await (GCC 12)
        if (conf.type != redis_reply::kind::array)
            throw redis_error("the control store refused SUBSCRIBE");
        auto c = co_await open_link();
        sub = s;
        cmd = c;
        net::co_spawn(ctx, listen(s, generation), net::detached);
        for (const auto& who : pending) // kills made while it was down, before any read
            apply(co_await eval(*c, "kill", who.value_or("")));
        pending.clear();
        co_await sync(*c);
        mark_up();
    }

    // Returns only by throwing: the subscription ended or a read failed.
    net::awaitable<void> heartbeat() {
        for (;;) {
            beat->expires_after(1s);
            co_await beat->async_wait(net::as_tuple(net::use_awaitable));
            if (stopping)
                throw redis_error("stopping");
            if (sub_lost)
                throw redis_error("the subscription was lost");
            co_await sync(*cmd);
        }
    }

    net::awaitable<void> run() {
        beat.emplace(ctx);
        auto backoff = 100ms;
        for (;;) {
            std::string failure;
            try {
                co_await connect();
                backoff = 100ms;
                co_await heartbeat();
            } catch (const std::exception& e) {
                failure = e.what();
            }
            if (stopping)
                co_return;
            for (auto* l : {&cmd, &sub})
                if (*l) {
                    (*l)->close();
                    l->reset();
                }
            mark_down(failure);
            beat->expires_after(backoff);
            co_await beat->async_wait(net::as_tuple(net::use_awaitable));
            backoff = std::min<std::chrono::milliseconds>(backoff * 2, 5s);
        }
    }

    net::awaitable<change> change_on_store(bool kill, std::optional<std::string> who) {
        change c;
        if (kill)
            c.local = ctl->kill(who); // in force here at once, whatever the store does
        if (up.load()) {
            try {
                auto link = co_await open_link();
                auto adopted =
                    apply(co_await eval(*link, kill ? "kill" : "revive", who.value_or("")));
                c.result = change::outcome::shared;
                c.local.closed += adopted.closed;
                c.local.persisted = c.local.persisted && adopted.persisted;
                co_return c;
            } catch (const std::exception& e) {
                errors.fetch_add(1, std::memory_order_relaxed);
                spdlog::error("control store {}: {}", ep.where(), e.what());
            }
        }
        if (kill) {
            pending.push_back(std::move(who));
            c.result = change::outcome::pending;
        } else {
            c.result = change::outcome::unavailable;
        }
        co_return c;
    }
};

fleet_store::fleet_store(std::unique_ptr<impl> i)
    : impl_(std::move(i)) {}

fleet_store::~fleet_store() {
    stop();
}

std::expected<std::shared_ptr<fleet_store>, std::string>
fleet_store::create(const config::control_store_settings& s, std::shared_ptr<control> ctl) {
    auto ep = redis_endpoint::parse(s.url);
    if (!ep)
        return std::unexpected(ep.error());
    auto i = std::make_unique<impl>();
    i->ctl = std::move(ctl);
    i->ep = std::move(*ep);
    i->prefix = s.key_prefix;
    i->fail_closed = s.fail_closed;
    i->timeout = s.connect_timeout;
    if (i->ep.tls) {
        try {
            i->tls = std::make_unique<net::ssl::context>(net::ssl::context::tls_client);
            i->tls->set_options(net::ssl::context::no_compression);
            SSL_CTX_set_min_proto_version(i->tls->native_handle(), TLS1_2_VERSION);
            if (s.ca_file)
                i->tls->load_verify_file(s.ca_file->string());
            else
                i->tls->set_default_verify_paths();
        } catch (const std::exception& e) {
            return std::unexpected("control_store.redis.tls: " + std::string(e.what()));
        }
    }
    return std::shared_ptr<fleet_store>(new fleet_store(std::move(i)));
}

bool fleet_store::start() {
    auto* i = impl_.get();
    if (i->fail_closed)
        i->ctl->set_store_refusing(true);
    net::co_spawn(i->ctx, i->run(), net::detached);
    i->thread = std::thread([i] {
        auto work = net::make_work_guard(i->ctx);
        i->ctx.run();
    });
    std::unique_lock lock(i->first_mutex);
    return i->first_cv.wait_for(lock, i->timeout + 500ms, [i] { return i->first_done; });
}

void fleet_store::stop() {
    auto* i = impl_.get();
    if (!i->thread.joinable())
        return;
    net::post(i->ctx, [i] {
        i->stopping = true;
        i->ctx.stop();
    });
    i->thread.join();
}

bool fleet_store::up() const {
    return impl_->up.load(std::memory_order_acquire);
}

bool fleet_store::fail_closed() const {
    return impl_->fail_closed;
}

std::uint64_t fleet_store::errors() const {
    return impl_->errors.load(std::memory_order_relaxed);
}

net::awaitable<fleet_store::change> fleet_store::kill(std::optional<std::string> identity) {
    co_return co_await net::co_spawn(impl_->ctx, impl_->change_on_store(true, std::move(identity)),
                                     net::use_awaitable);
}

net::awaitable<fleet_store::change> fleet_store::revive(std::optional<std::string> identity) {
    co_return co_await net::co_spawn(impl_->ctx, impl_->change_on_store(false, std::move(identity)),
                                     net::use_awaitable);
}

} // namespace sluice::proxy
