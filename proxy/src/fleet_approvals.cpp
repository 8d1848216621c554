// Approvals across the replicas of a fleet (fleet_store.hpp, issue 22): entries are
// published where every replica can list them, and a decision made on any replica reaches
// the one that holds the request.
//
// Keys (prefix <p>): <p>approval:<id> holds "<published ms>\n<entry JSON>" and expires
// with the hold; <p>approvals is a sorted set of ids by expiry (ms, the store's clock).
// Decisions are published on <p>decide as {"id", "approve", "by", "reason"}. Whoever decides
// first takes <p>claim:<id> (SET NX): the holder deciding itself and another replica
// forwarding a decision contend for the same key. A forwarded decision is also the claim's
// value, kept as long as the entry would have lived (at least a minute), so a holder that
// was cut off from the store when it was published applies it at its next heartbeat.
#include "fleet_store_impl.hpp"

namespace sluice::proxy {

namespace {

// KEYS: approvals, approval:<id>. ARGV: id, entry JSON, time to live (ms).
constexpr std::string_view add_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[2], tostring(now) .. '\n' .. ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1
)lua";

// KEYS: approvals. ARGV: prefix. Returns [now, expiry, value, expiry, value, ...].
constexpr std::string_view list_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local ids = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local out = {tostring(now)}
for i = 1, #ids, 2 do
  local v = redis.call('GET', ARGV[1] .. 'approval:' .. ids[i])
  if v then out[#out + 1] = ids[i + 1]; out[#out + 1] = v end
end
return out
)lua";

// KEYS: approvals, approval:<id>, decide channel, claim:<id>. ARGV: id, decision JSON,
// the shortest claim time to live (ms). Claims the entry with the decision (one decision
// wins) and tells every replica; 0 when it is not pending or already claimed.
constexpr std::string_view decide_script = R"lua(
local ttl = redis.call('PTTL', KEYS[2])
if ttl == -2 then return 0 end
if ttl < tonumber(ARGV[3]) then ttl = tonumber(ARGV[3]) end
if not redis.call('SET', KEYS[4], ARGV[2], 'NX', 'PX', ttl) then return 0 end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('PUBLISH', KEYS[3], ARGV[2])
return 1
)lua";

// KEYS: claim:<id>. ARGV: this replica, time to live (ms). 1 when this replica claimed it.
constexpr std::string_view claim_script = R"lua(
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
)lua";

constexpr std::string_view claim_ttl_ms = "60000";

using fleet_detail::to_u64;

// A non-negative JSON number that fits (Boost.JSON's own conversion); 0 otherwise.
std::uint64_t json_u64(const boost::json::value* v) {
    if (v == nullptr)
        return 0;
    boost::system::error_code ec;
    auto n = v->to_number<std::uint64_t>(ec);
    return ec ? 0 : n;
}

// Approval ids are sluice's own ("ap-" and hex); anything else never names a key.
bool plausible_id(std::string_view id) {
    return !id.empty() && id.size() <= 64 &&
           id.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == id.npos;
}

} // namespace

net::awaitable<redis_reply>
fleet_store::impl::call_once(std::vector<std::vector<std::string>> cmds) {
    redis_reply last;
    if (!up.load())
        co_return last;
    std::string failure;
    try {
        auto link = co_await open_link();
        for (auto& c : cmds) {
            last = co_await link->call(std::move(c));
            if (last.type == redis_reply::kind::error)
                throw redis_error("the control store refused an approvals command: " + last.str);
        }
        co_return last;
    } catch (const std::exception& e) {
        failure = fleet_detail::describe(e);
    }
    errors.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("control store {}: {}", ep.where(), failure);
    co_return redis_reply{};
}

void fleet_store::impl::on_decide_message(std::string_view json) {
    auto d = fleet_detail::parse_decision_message(json);
    if (!d) {
        spdlog::error("control store: a decision message sluice cannot read");
        return;
    }
    // Every replica gets it; only the holder knows the id (the others find nothing).
    ctl->decide(d->id, d->approve, std::move(d->by), std::move(d->reason));
}

void fleet_store::publish_approval(std::string json) {
    boost::system::error_code ec;
    auto v = boost::json::parse(json, ec);
    auto* o = ec ? nullptr : v.if_object();
    const auto* id = o ? o->if_contains("id") : nullptr;
    const auto* ttl = o ? o->if_contains("expires_in_ms") : nullptr;
    const auto ttl_ms = json_u64(ttl);
    if (!id || !id->is_string() || !plausible_id(id->as_string()) || ttl_ms == 0)
        return;
    // Copied first: adding a member may move the object's values (`id` points into it).
    const std::string entry_id(id->as_string());
    (*o)["replica"] = impl_->replica_id;
    std::vector<std::string> args{"EVAL",
                                  std::string(add_script),
                                  "2",
                                  impl_->prefix + "approvals",
                                  impl_->prefix + "approval:" + entry_id,
                                  entry_id,
                                  boost::json::serialize(*o),
                                  std::to_string(ttl_ms)};
    std::vector<std::vector<std::string>> cmds;
    cmds.push_back(std::move(args));
    net::co_spawn(impl_->ctx, impl_->call_once(std::move(cmds)), net::detached);
}

void fleet_store::approval_ended(std::string id) {
    if (!plausible_id(id))
        return;
    std::vector<std::vector<std::string>> cmds;
    cmds.push_back({"DEL", impl_->prefix + "approval:" + id});
    cmds.push_back({"ZREM", impl_->prefix + "approvals", id});
    net::co_spawn(impl_->ctx, impl_->call_once(std::move(cmds)), net::detached);
}

net::awaitable<std::vector<std::string>> fleet_store::remote_approvals() {
    std::vector<std::vector<std::string>> cmds;
    cmds.push_back(
        {"EVAL", std::string(list_script), "1", impl_->prefix + "approvals", impl_->prefix});
    auto r =
        co_await net::co_spawn(impl_->ctx, impl_->call_once(std::move(cmds)), net::use_awaitable);
    std::vector<std::string> out;
    if (r.type != redis_reply::kind::array || r.elements.empty())
        co_return out; // down, or refused (counted and logged)
    const auto now = to_u64(r.elements[0].str);
    for (std::size_t k = 1; k + 1 < r.elements.size(); k += 2) {
        const auto expires = to_u64(r.elements[k].str);
        auto stored = fleet_detail::parse_stored_approval(r.elements[k + 1].str);
        if (!stored)
            continue;
        const auto published = stored->published_ms;
        auto* o = &stored->entry;
        const auto* replica = o->if_contains("replica");
        if (!replica || !replica->is_string() || replica->as_string() == impl_->replica_id)
            continue; // ours are listed from the control itself
        const auto age_then = json_u64(o->if_contains("age_ms"));
        (*o)["age_ms"] = age_then + (now > published ? now - published : 0);
        (*o)["expires_in_ms"] = expires > now ? expires - now : 0;
        out.push_back(boost::json::serialize(*o));
    }
    co_return out;
}

net::awaitable<bool> fleet_store::decide_remote(std::string id, bool approve, std::string by,
                                                std::string reason) {
    auto* i = impl_.get();
    if (!plausible_id(id))
        co_return false;
    boost::json::object d;
    d["id"] = id;
    d["approve"] = approve;
    d["by"] = by;
    d["reason"] = reason;
    std::vector<std::string> args{"EVAL",
                                  std::string(decide_script),
                                  "4",
                                  i->prefix + "approvals",
                                  i->prefix + "approval:" + id,
                                  i->prefix + "decide",
                                  i->prefix + "claim:" + id,
                                  id,
                                  boost::json::serialize(d),
                                  std::string(claim_ttl_ms)};
    std::vector<std::vector<std::string>> cmds;
    cmds.push_back(std::move(args));
    auto r = co_await net::co_spawn(i->ctx, i->call_once(std::move(cmds)), net::use_awaitable);
    co_return r.type == redis_reply::kind::integer&& r.integer == 1;
}

net::awaitable<bool> fleet_store::claim_local(std::string id) {
    auto* i = impl_.get();
    if (!plausible_id(id))
        co_return true; // never published: decided here alone
    std::vector<std::vector<std::string>> cmds;
    // The holder's own claim carries no decision (adopt_decisions skips it).
    cmds.push_back({"EVAL", std::string(claim_script), "1", i->prefix + "claim:" + id,
                    boost::json::serialize(boost::json::object{{"holder", i->replica_id}}),
                    std::string(claim_ttl_ms)});
    auto r = co_await net::co_spawn(i->ctx, i->call_once(std::move(cmds)), net::use_awaitable);
    // Nil: the store is down (or failed, counted and logged): the holder decides alone.
    co_return r.type != redis_reply::kind::integer || r.integer == 1;
}

net::awaitable<void> fleet_store::impl::adopt_decisions(redis_link& link) {
    std::vector<std::string> ids;
    for (const auto& a : ctl->approvals())
        if (plausible_id(a.id))
            ids.push_back(a.id);
    if (ids.empty())
        co_return;
    std::vector<std::string> args{"MGET"};
    for (const auto& id : ids)
        args.push_back(prefix + "claim:" + id);
    auto r = co_await link.call(std::move(args));
    if (r.type != redis_reply::kind::array || r.elements.size() != ids.size())
        throw redis_error("the control store refused to list approval claims");
    for (std::size_t k = 0; k < ids.size(); ++k) {
        if (r.elements[k].type != redis_reply::kind::string)
            continue; // not decided anywhere
        auto d = fleet_detail::parse_decision_message(r.elements[k].str);
        if (d && d->id == ids[k]) // decided on another replica, its message missed
            ctl->decide(d->id, d->approve, std::move(d->by), std::move(d->reason));
    }
}

} // namespace sluice::proxy
