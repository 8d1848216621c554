// Internal to proxy/: the state and coroutines behind fleet_store (fleet_store.hpp, issue
// 22), shared by fleet_store.cpp (kill switch, limits, the connection loop) and
// fleet_approvals.cpp (approvals across replicas). Everything here runs on the store's
// own thread unless marked otherwise.
#pragma once

#include "sluice/proxy/fleet_store.hpp"

#include "fleet_wire.hpp"
#include "redis_link.hpp"

#include "sluice/detectors/text.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/json.hpp>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace sluice::proxy {

namespace net = boost::asio;
using namespace std::chrono_literals;

namespace fleet_detail {

// KEYS: the state (one hash: epoch, version, all, ids as a JSON array, so that it is lost
// or kept whole), the channel. ARGV: op ("read" | "kill" | "revive" | "init"), identity
// ("" = all), a new epoch id (used when a change finds no state, or a malformed one). A
// read of a malformed state is an error reply: replicas keep what they had; the next
// change replaces it (and replicas write their kills back, as after any loss). "init"
// writes a first state (nothing killed) only where there is none, and reads otherwise.
constexpr std::string_view kill_script = R"lua(
local key, channel = KEYS[1], KEYS[2]
local op, who = ARGV[1], ARGV[2]
local h = redis.call('HMGET', key, 'epoch', 'version', 'all', 'ids')
local exists = redis.call('EXISTS', key) == 1
local epoch, version, all, ids = '', 0, false, {}
local ok = true
if exists then
  ok = type(h[1]) == 'string' and h[1] ~= '' and type(h[2]) == 'string' and
       string.match(h[2], '^%d+$') ~= nil and (h[3] == '0' or h[3] == '1') and
       type(h[4]) == 'string'
  if ok then
    local good, d = pcall(cjson.decode, h[4])
    ok = good and type(d) == 'table'
    if ok then
      for _, v in ipairs(d) do if type(v) ~= 'string' then ok = false end end
      ids = d
    end
  end
  if ok then epoch, version, all = h[1], tonumber(h[2]), h[3] == '1' end
end
if op == 'init' and exists then op = 'read' end
if op == 'read' then
  if not ok then return redis.error_reply('sluice: malformed kill switch state') end
else
  if not ok then ids = {} end
  if epoch == '' then epoch, version = ARGV[3], 0 end
  local set = {}
  for _, v in ipairs(ids) do set[v] = true end
  if op == 'kill' then
    if who == '' then all = true else set[who] = true end
  elseif op == 'revive' then
    if who == '' then all = false; set = {} else set[who] = nil end
  end
  ids = {}
  for v in pairs(set) do ids[#ids + 1] = v end
  version = version + 1
end
table.sort(ids)
if op ~= 'read' then
  redis.call('HSET', key, 'epoch', epoch, 'version', tostring(version), 'all',
             all and '1' or '0', 'ids', #ids > 0 and cjson.encode(ids) or '[]')
end
local out = {epoch, tostring(version), all and '1' or '0'}
for _, v in ipairs(ids) do out[#out + 1] = v end
if op ~= 'read' then redis.call('PUBLISH', channel, cjson.encode(out)) end
return out
)lua";

// KEYS: the live-replica set (sorted by expiry, ms). ARGV: this replica's id, the expiry
// (ms), the key prefix, "1" to register ("0": a replica still settling reads only), then
// identity, count pairs: the connections held here. Registers this replica, drops the
// expired ones, stores its counts (expiring with it), and returns [live replicas,
// identity, count, ...] with the counts of every other live replica.
constexpr std::string_view beat_script = R"lua(
local me, ttl, prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[1], now + ttl, me)
  local mine = prefix .. 'conns:' .. me
  redis.call('DEL', mine)
  for i = 5, #ARGV, 2 do redis.call('HSET', mine, ARGV[i], ARGV[i + 1]) end
  redis.call('PEXPIRE', mine, ttl)
end
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

// The longest pause between two connection attempts of a replica that lost the store.
constexpr auto max_backoff = 5s;

inline std::optional<shared_state> from_reply(const redis_reply& r) {
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

// 16 random hex digits (an epoch id, a replica name's suffix).
inline std::string random_hex() {
    unsigned char b[8];
    if (RAND_bytes(b, sizeof b) != 1)
        throw redis_error("no randomness for the control store epoch");
    return text::to_hex({reinterpret_cast<const char*>(b), sizeof b});
}

// What went wrong, for a log line: the error's own message without Boost's source
// location (a system_error's what() carries one).
inline std::string describe(const std::exception& e) {
    if (const auto* se = dynamic_cast<const boost::system::system_error*>(&e)) {
        const auto& c = se->code();
        std::string out = c.message();
        if (c.category() == net::error::get_ssl_category() ||
            c == net::ssl::error::stream_truncated)
            out = "TLS: " + out + " (check the URL's scheme, host name and tls.ca_file)";
        else if (c == net::error::operation_aborted || c == boost::beast::error::timeout)
            out = "no answer within connect_timeout";
        return out;
    }
    return e.what();
}

} // namespace fleet_detail

struct fleet_store::impl {
    using shared_state = fleet_detail::shared_state;
    std::shared_ptr<control> ctl;
    redis_endpoint ep;
    std::string prefix;
    bool fail_closed = false;
    std::chrono::milliseconds timeout{2000};
    std::unique_ptr<net::ssl::context> tls;
    std::atomic<bool> up{false};
    std::atomic<std::uint64_t> errors{0};
    std::atomic<std::uint64_t> replicas{0};
    std::atomic<bool> settling_now{false}; // `settling`, for other threads
    rate_limits* limits = nullptr;         // null: limits stay per replica (unit use)
    std::string replica_id;                // host name and a random suffix, per process

    // --- store thread only -------------------------------------------------------------
    std::string applied_epoch;
    std::uint64_t applied_version = 0;
    bool applied_any = false;
    bool ever_real = false; // applied a state the store held (an epoch), ever
    // A new replica that finds no state and no other settled replica cannot tell a new
    // fleet from a store that lost its data while the replicas holding the kills are
    // still reconnecting: it refuses new flows (503 control_store_unavailable) until the
    // state appears, another replica settles, or `grace()` has passed (then it writes a
    // first state, nothing killed).
    bool settling = false;
    bool settled = false; // once: a replica that served never settles again
    std::chrono::steady_clock::time_point settling_since{};
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
        return {"EVAL", std::string(fleet_detail::kill_script), "2", prefix + "kill:state",
                prefix + "kill", std::string(op), std::string(who),
                // A new epoch is used only by a write that finds no state; a read (every
                // replica, every second) needs none.
                op == "read" ? std::string() : fleet_detail::random_hex()};
    }

    net::awaitable<shared_state> eval(redis_link& link, std::string_view op, std::string_view who) {
        auto r = co_await link.call(eval_args(op, who));
        if (r.type == redis_reply::kind::error)
            throw redis_error("the control store refused the kill switch script: " + r.str);
        auto s = fleet_detail::from_reply(r);
        if (!s)
            throw redis_error("the control store holds a kill switch state sluice cannot read");
        co_return *s;
    }

    // True when `s` comes from a store that lost what this replica last applied: it holds
    // no state, a state begun since (another epoch), or an older version of the same one
    // (restored from a backup, failed over to a lagging replica). A first state after
    // none is not.
    bool lost_data(const shared_state& s) const {
        return s.epoch.empty() || (!applied_epoch.empty() && s.epoch != applied_epoch) ||
               (applied_any && s.epoch == applied_epoch && s.version < applied_version);
    }

    // Applies `s` unless it is older than what is in force (same epoch, lower version) and
    // not `forced`. A message that looks like a loss is left to settle() (within one
    // heartbeat), which writes this replica's kills back first.
    control::kill_result apply(const shared_state& s, bool forced = false) {
        if (!forced && applied_any && s.epoch == applied_epoch && s.version < applied_version)
            return {};
        applied_any = true;
        ever_real = ever_real || !s.epoch.empty();
        applied_epoch = s.epoch;
        applied_version = s.version;
        auto result = ctl->adopt(s.killed);
        if (settling && ever_real) // the state came (written back, or a first change)
            end_settling();
        return result;
    }

    void end_settling() {
        settling = false;
        settled = true;
        settling_now.store(false, std::memory_order_release);
        if (up.load())
            ctl->set_store_refusing(false);
        spdlog::info("control store: kill switch state settled; serving");
    }

    // Applies `s`, read or written through `link`. When the store lost what this replica
    // applied, its kills are written back first and the result is applied whatever its
    // version: losing or rewinding the store never lifts a kill (only a revive does), and
    // the replicas' kills end up united.
    net::awaitable<control::kill_result> settle(redis_link& link, shared_state s) {
        const bool lost = lost_data(s);
        auto local = ctl->killed();
        if (lost && (local.all || !local.identities.empty())) {
            spdlog::warn("control store: it lost or rewound the kill switch state (new, "
                         "flushed, replaced or restored); writing back this replica's kills");
            if (local.all)
                s = co_await eval(link, "kill", "");
            for (const auto& id : local.identities)
                s = co_await eval(link, "kill", id);
        }
        co_return apply(s, lost);
    }

    net::awaitable<std::shared_ptr<redis_link>> open_link() {
        co_return std::shared_ptr<redis_link>(
            co_await redis_link::open(ctx.get_executor(), ep, tls.get(), timeout));
    }

    net::awaitable<void> sync(redis_link& link) {
        co_await settle(link, co_await eval(link, "read", ""));
    }

    // Before a change is written: a store that lost or rewound what this replica applied
    // gets this replica's kills back first. The script changes whatever state it finds,
    // so a kill or revive written straight onto a store failed over to a lagging replica
    // would give it a version no older than the replicas' and lift what the lag dropped.
    // A state that was not lost is not applied here (it would lift kills made while the
    // store was down, which are about to be written).
    net::awaitable<void> unless_rewound(redis_link& link) {
        auto s = co_await eval(link, "read", "");
        if (lost_data(s))
            co_await settle(link, std::move(s));
    }

    void mark_up() {
        if (!up.exchange(true))
            spdlog::info("control store {} connected; kill switch shared", ep.where());
        said_down = false;
        ctl->set_store_refusing(settling);
        settling_now.store(settling, std::memory_order_release);
        std::lock_guard lock(first_mutex);
        first_done = true;
        first_cv.notify_all();
    }

    void mark_down(const std::string& why) {
        errors.fetch_add(1, std::memory_order_relaxed);
        up.store(false);
        if (!said_down) // once per outage, not once per reconnect attempt
            spdlog::error("control store {}: {}; {}", ep.where(), why,
                          fail_closed || settling || (!applied_any && ctl->store_refusing())
                              ? "new flows are refused until it is read"
                          : applied_any ? "the last kill switch state read stays in force; "
                                          "revive is refused until it is back"
                                        : "serving with the last-known kill switch state "
                                          "(killed.json); revive is refused until it is back");
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
                if (m.elements[1].str == prefix + "decide") {
                    on_decide_message(m.elements[2].str); // fleet_approvals.cpp
                    continue;
                }
                if (auto s = fleet_detail::from_message(m.elements[2].str)) {
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
        // The kill switch and decisions on approvals; the second confirmation reaches
        // listen(), which skips it. (Not a braced list across co_await: GCC 12.)
        std::vector<std::string> subscribe{"SUBSCRIBE", prefix + "kill", prefix + "decide"};
        auto conf = co_await s->call(std::move(subscribe));
        if (conf.type != redis_reply::kind::array)
            throw redis_error(
                conf.str.starts_with("NOAUTH")
                    ? std::string("the control store requires a password (NOAUTH): give it in "
                                  "control_store.redis.url, redis://:PASSWORD@host:port/db")
                    : "the control store refused SUBSCRIBE: " + conf.str);
        auto c = co_await open_link();
        sub = s;
        cmd = c;
        net::co_spawn(ctx, listen(s, generation), net::detached);
        // Kills made while it was down, before any read is applied. One at a time from the front: a
        // kill() may append meanwhile, and one that fails stays for the next connection.
        if (!pending.empty())
            co_await unless_rewound(*c);
        while (!pending.empty()) {
            auto who = pending.front();
            co_await settle(*c, co_await eval(*c, "kill", who.value_or("")));
            pending.erase(pending.begin());
        }
        co_await sync(*c);
        co_await settle_in(*c);
        mark_up();
    }

    // How long a new replica waits for the replicas that hold kills to reconnect to a
    // store that lost them: their longest backoff, one connection attempt, a heartbeat.
    std::chrono::milliseconds grace() const {
        return std::chrono::duration_cast<std::chrono::milliseconds>(fleet_detail::max_backoff +
                                                                     timeout + 1s);
    }

    // After a read: a replica that never saw a state, reading none, settles first (see
    // `settling`); then the heartbeat. Ends settling when a state or another settled
    // replica shows up, or the grace has passed (a first state is written: a new fleet).
    net::awaitable<void> settle_in(redis_link& link) {
        if (!settled && ever_real)
            settled = true;
        if (!settled && !settling) {
            settling = true;
            settling_since = std::chrono::steady_clock::now();
            spdlog::warn("control store: it holds no kill switch state; unless another "
                         "replica is live, new flows are refused for up to {} ms while "
                         "replicas that may hold kills reconnect (a store that lost its "
                         "data), then a first state is written",
                         grace().count());
        }
        const auto others = co_await beat_once(link);
        if (!settling)
            co_return;
        if (ever_real || others > 0)
            end_settling();
        else if (std::chrono::steady_clock::now() - settling_since >= grace())
            co_await settle(link, co_await eval(link, "init", "")); // apply() ends it
    }

    // Registers this replica (unless settling), reports its connections and reads the
    // fleet's: limits are split over the live replicas (rate_limits.hpp). Returns the
    // live replicas other than this one.
    net::awaitable<std::uint64_t> beat_once(redis_link& link) {
        std::vector<std::string> args{
            "EVAL",
            std::string(fleet_detail::beat_script),
            "1",
            prefix + "replicas",
            replica_id,
            std::to_string(std::chrono::milliseconds(fleet_detail::replica_ttl).count()),
            prefix,
            settling ? "0" : "1"};
        if (limits != nullptr)
            for (auto& [identity, n] : limits->held_connections()) {
                args.push_back(std::move(identity));
                args.push_back(std::to_string(n));
            }
        auto r = co_await link.call(std::move(args));
        if (r.type != redis_reply::kind::array || r.elements.empty())
            throw redis_error("the control store refused the replica heartbeat" +
                              (r.type == redis_reply::kind::error ? ": " + r.str : ""));
        const std::uint64_t live = fleet_detail::to_u64(r.elements[0].str);
        std::unordered_map<std::string, std::uint64_t> remote;
        for (std::size_t i = 1; i + 1 < r.elements.size(); i += 2)
            remote[r.elements[i].str] += fleet_detail::to_u64(r.elements[i + 1].str);
        const std::uint64_t others = settling ? live : (live > 0 ? live - 1 : 0);
        replicas.store(settling ? live + 1 : live);
        if (limits != nullptr)
            limits->set_fleet(static_cast<unsigned>(std::max<std::uint64_t>(1, others + 1)),
                              std::move(remote));
        co_await adopt_decisions(link); // fleet_approvals.cpp
        co_return others;
    }

    // Approvals across replicas (fleet_approvals.cpp).
    void on_decide_message(std::string_view json);
    // Applies the decisions other replicas stored for the requests held here (one a
    // message did not bring: this replica was cut off from the store when it was made).
    net::awaitable<void> adopt_decisions(redis_link& link);
    // Runs `cmds` in order on a link of its own, when the store is up, and returns the
    // last reply; nil when the store is down or a command failed (counted and logged).
    net::awaitable<redis_reply> call_once(std::vector<std::vector<std::string>> cmds);

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
            co_await settle_in(*cmd);
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
                failure = fleet_detail::describe(e);
            }
            if (stopping)
                co_return;
            for (auto* l : {&cmd, &sub})
                if (*l) {
                    (*l)->close();
                    l->reset();
                }
            mark_down(failure);
            // Its own timer: a subscription that ends now must not cut the pause short.
            net::steady_timer pause(ctx, backoff);
            co_await pause.async_wait(net::as_tuple(net::use_awaitable));
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
                co_await unless_rewound(*link);
                auto written = co_await eval(*link, kill ? "kill" : "revive", who.value_or(""));
                auto adopted = co_await settle(*link, std::move(written));
                c.result = change::outcome::shared;
                c.local.closed += adopted.closed;
                c.local.persisted = c.local.persisted && adopted.persisted;
                co_return c;
            } catch (const std::exception& e) {
                errors.fetch_add(1, std::memory_order_relaxed);
                spdlog::error("control store {}: {}", ep.where(), fleet_detail::describe(e));
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

} // namespace sluice::proxy
