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
#include <unistd.h>
#include <unordered_map>
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

// KEYS: the live-replica set (sorted by expiry, ms). ARGV: this replica's id, the expiry
// (ms), the key prefix, then identity, count pairs: the connections held here. Registers
// this replica, drops the expired ones, stores its counts (expiring with it), and returns
// [live replicas, identity, count, ...] with the counts of every other live replica.
constexpr std::string_view beat_script = R"lua(
local me, ttl, prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + ttl, me)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local mine = prefix .. 'conns:' .. me
redis.call('DEL', mine)
for i = 4, #ARGV, 2 do redis.call('HSET', mine, ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', mine, ttl)
local live = redis.call('ZRANGE', KEYS[1], 0, -1)
local out = {tostring(#live)}
for _, r in ipairs(live) do
  if r ~= me then
    local h = redis.call('HGETALL', prefix .. 'conns:' .. r)
    for j = 1, #h, 2 do out[#out + 1] = h[j]; out[#out + 1] = h[j + 1] end
  end
end
return out
)lua";

// A replica that misses this many heartbeats (1 s apart) is no longer counted, and the
// connections it reported expire with it.
constexpr auto replica_ttl = 3s;

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

std::string random_hex() {
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
    std::atomic<std::uint64_t> replicas{0};
    rate_limits* limits = nullptr; // null: limits stay per replica (unit use)
    std::string replica_id;        // host name and a random suffix, per process

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
                random_hex()};
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

    // True when `s` comes from a store that lost what this replica last applied: it holds
    // no state, or a state begun since (another epoch). A first state after none is not.
    bool lost_data(const shared_state& s) const {
        return s.epoch.empty() || (!applied_epoch.empty() && s.epoch != applied_epoch);
    }

    // Applies `s` unless it is older than what is in force (same epoch, lower version). A
    // message from another epoch is left to settle(), which writes this replica's kills
    // back first (within one heartbeat).
    control::kill_result apply(const shared_state& s) {
        if (applied_any && s.epoch == applied_epoch && s.version < applied_version)
            return {};
        applied_any = true;
        applied_epoch = s.epoch;
        applied_version = s.version;
        return ctl->adopt(s.killed);
    }

    // Applies `s`, read or written through `link`. When the store lost its data, this
    // replica's kills are written back first: losing the store never lifts a kill, and the
    // replicas' kills end up united.
    net::awaitable<control::kill_result> settle(redis_link& link, shared_state s) {
        auto local = ctl->killed();
        if (lost_data(s) && (local.all || !local.identities.empty())) {
            spdlog::warn("control store: it lost the kill switch state (new, flushed or "
                         "replaced); writing back this replica's kills");
            if (local.all)
                s = co_await eval(link, "kill", "");
            for (const auto& id : local.identities)
                s = co_await eval(link, "kill", id);
        }
        co_return apply(s);
    }

    net::awaitable<std::shared_ptr<redis_link>> open_link() {
        co_return std::shared_ptr<redis_link>(
            co_await redis_link::open(ctx.get_executor(), ep, tls.get(), timeout));
    }

    net::awaitable<void> sync(redis_link& link) {
        co_await settle(link, co_await eval(link, "read", ""));
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
                if (auto s = from_message(m.elements[2].str)) {
                    if (!lost_data(*s))
                        apply(*s);
                } else
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
        // Kills made while it was down, before any read. One at a time from the front: a
        // kill() may append meanwhile, and one that fails stays for the next connection.
        while (!pending.empty()) {
            auto who = pending.front();
            co_await settle(*c, co_await eval(*c, "kill", who.value_or("")));
            pending.erase(pending.begin());
        }
        co_await sync(*c);
        co_await beat_once(*c);
        mark_up();
    }

    // Registers this replica, reports its connections and reads the fleet's: limits are
    // split over the live replicas (rate_limits.hpp).
    net::awaitable<void> beat_once(redis_link& link) {
        if (limits == nullptr)
            co_return;
        std::vector<std::string> args{
            "EVAL",     std::string(beat_script),
            "1",        prefix + "replicas",
            replica_id, std::to_string(std::chrono::milliseconds(replica_ttl).count()),
            prefix};
        for (auto& [identity, n] : limits->held_connections()) {
            args.push_back(std::move(identity));
            args.push_back(std::to_string(n));
        }
        auto r = co_await link.call(std::move(args));
        if (r.type != redis_reply::kind::array || r.elements.empty())
            throw redis_error("the control store refused the replica heartbeat" +
                              (r.type == redis_reply::kind::error ? ": " + r.str : ""));
        std::uint64_t live = 0;
        std::unordered_map<std::string, std::uint64_t> remote;
        std::from_chars(r.elements[0].str.data(),
                        r.elements[0].str.data() + r.elements[0].str.size(), live);
        for (std::size_t i = 1; i + 1 < r.elements.size(); i += 2) {
            std::uint64_t n = 0;
            const auto& v = r.elements[i + 1].str;
            std::from_chars(v.data(), v.data() + v.size(), n);
            remote[r.elements[i].str] += n;
        }
        replicas.store(live);
        limits->set_fleet(static_cast<unsigned>(std::max<std::uint64_t>(1, live)),
                          std::move(remote));
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
            co_await beat_once(*cmd);
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
                auto written = co_await eval(*link, kill ? "kill" : "revive", who.value_or(""));
                auto adopted = co_await settle(*link, std::move(written));
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
fleet_store::create(const config::control_store_settings& s, std::shared_ptr<control> ctl,
                    rate_limits* limits) {
    auto ep = redis_endpoint::parse(s.url);
    if (!ep)
        return std::unexpected(ep.error());
    auto i = std::make_unique<impl>();
    i->ctl = std::move(ctl);
    i->limits = limits;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0)
        host[0] = '\0';
    try {
        i->replica_id = std::string(host) + "-" + random_hex().substr(0, 8);
    } catch (const std::exception& e) {
        return std::unexpected(std::string(e.what()));
    }
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

std::uint64_t fleet_store::replicas() const {
    return impl_->replicas.load(std::memory_order_relaxed);
}

const std::string& fleet_store::replica() const {
    return impl_->replica_id;
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
