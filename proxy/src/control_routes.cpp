// The admin API's control routes: approvals, flows, kill and revive (control.hpp
// register_control_routes; CONTRACT.md "Admin API"), across the fleet when a control
// store is configured (fleet_store.hpp).
#include "sluice/proxy/control.hpp"

#include "sluice/proxy/admin_api.hpp"
#include "sluice/proxy/fleet_store.hpp"

#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

namespace sluice::proxy {

namespace net = boost::asio;

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

std::string comma_joined(std::string head, const std::vector<std::string>& items,
                         std::string_view tail) {
    for (std::size_t k = 0; k < items.size(); ++k) {
        if (k > 0)
            head += ',';
        head += items[k];
    }
    head += tail;
    return head;
}

// This replica's held requests, then the other replicas' (each with "replica").
net::awaitable<admin_response> list_approvals(std::shared_ptr<control> ctl,
                                              std::shared_ptr<fleet_store> store) {
    std::vector<std::string> all;
    for (const auto& a : ctl->approvals())
        all.push_back(approval_json(a));
    std::vector<std::string> remote;
    if (store)
        remote = co_await store->remote_approvals();
    all.insert(all.end(), std::make_move_iterator(remote.begin()),
               std::make_move_iterator(remote.end()));
    co_return admin_response{200, comma_joined("{\"approvals\":[", all, "]}")};
}

bool held_here(const control& ctl, std::string_view id) {
    auto held = ctl.approvals();
    return std::any_of(held.begin(), held.end(), [&](const auto& a) { return a.id == id; });
}

// One decision wins across the fleet: the holder claims the entry in the store before it
// decides (fleet_store::claim_local), another replica claims it as it forwards the
// decision (decide_remote). The loser answers 404.
net::awaitable<admin_response> decide_approval(std::shared_ptr<control> ctl,
                                               std::shared_ptr<fleet_store> store, bool approve,
                                               admin_request r) {
    auto d = parse_decision(r.body);
    if (!d)
        co_return admin_error(400, "bad_request",
                              "body must be {\"by\": string, \"reason\": string}, both optional");
    const std::string id = r.params.at(0);
    // (No co_await inside a condition: GCC 12 miscompiles it.)
    bool mine = true;
    if (store && held_here(*ctl, id))
        mine = co_await store->claim_local(id);
    if (!mine)
        co_return admin_error(404, "unknown_approval",
                              "no pending approval with this id (decided on another replica)");
    auto out = ctl->decide(id, approve, d->by, d->reason);
    bool forwarded = false; // not held here: another replica may hold it
    if (!out && store)
        forwarded = co_await store->decide_remote(id, approve, d->by, d->reason);
    if (!out && !forwarded)
        co_return admin_error(404, "unknown_approval", "no pending approval with this id");
    boost::json::object o;
    o["id"] = id;
    o["decision"] = approve ? "approved" : "denied";
    o["by"] = out ? out->by : d->by;
    if (!out)
        o["forwarded"] = true; // held by another replica, which applies it
    co_return json_response(200, o);
}

admin_response list_flows(const control& ctl) {
    boost::json::array fs;
    for (const auto& f : ctl.flows()) {
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
    auto k = ctl.killed();
    boost::json::array ids;
    for (const auto& i : k.identities)
        ids.emplace_back(i);
    boost::json::object ko;
    ko["all"] = k.all;
    ko["identities"] = std::move(ids);
    boost::json::object o;
    o["flows"] = std::move(fs);
    o["killed"] = std::move(ko);
    return json_response(200, o);
}

constexpr std::string_view target_shape =
    "body must be {\"identity\": \"name\"} or {\"all\": true}";

net::awaitable<admin_response> kill(std::shared_ptr<control> ctl,
                                    std::shared_ptr<fleet_store> store, admin_request r) {
    auto target = parse_target(r.body);
    if (!target)
        co_return admin_error(400, "bad_request", target_shape);
    boost::json::object o;
    o["killed"] = target->value_or("all");
    control::kill_result res;
    if (store) {
        auto c = co_await store->kill(*target);
        res = c.local;
        o["store"] = c.result == fleet_store::change::outcome::shared ? "shared" : "pending";
    } else {
        res = ctl->kill(*target);
    }
    o["closed"] = res.closed;
    o["persisted"] = res.persisted;
    co_return json_response(200, o);
}

net::awaitable<admin_response> revive(std::shared_ptr<control> ctl,
                                      std::shared_ptr<fleet_store> store, admin_request r) {
    auto target = parse_target(r.body);
    if (!target)
        co_return admin_error(400, "bad_request", target_shape);
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
    if (store)
        o["store"] = "shared"; // written to the store: every replica applies it
    o["persisted"] = persisted;
    co_return json_response(200, o);
}

} // namespace

void register_control_routes(admin_api& api, std::shared_ptr<control> ctl,
                             std::shared_ptr<fleet_store> store) {
    api.route("GET", "/v1/approvals", true,
              [ctl, store](admin_request) { return list_approvals(ctl, store); });
    for (bool approve : {true, false})
        api.route("POST", approve ? "/v1/approvals/{}/approve" : "/v1/approvals/{}/deny", true,
                  [ctl, store, approve](admin_request r) {
                      return decide_approval(ctl, store, approve, std::move(r));
                  });
    api.route("GET", "/v1/flows", true, [ctl](admin_request) -> net::awaitable<admin_response> {
        co_return list_flows(*ctl);
    });
    api.route("POST", "/v1/kill", true,
              [ctl, store](admin_request r) { return kill(ctl, store, std::move(r)); });
    api.route("POST", "/v1/revive", true,
              [ctl, store](admin_request r) { return revive(ctl, store, std::move(r)); });
}

} // namespace sluice::proxy
