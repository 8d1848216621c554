// What the fleet reads from outside the process (proxy/src/fleet_wire.hpp): the control
// store URL, the kill switch state message, decision messages and stored approval
// entries. Each input goes through all four readers; what they accept must hold together
// (a state or a decision written again reads back the same).
#include "fleet_wire.hpp"

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace sluice::proxy;

namespace {

void check_state(const fleet_detail::shared_state& s) {
    boost::json::array a{boost::json::string(s.epoch),
                         boost::json::string(std::to_string(s.version)),
                         boost::json::string(s.killed.all ? "1" : "0")};
    for (const auto& id : s.killed.identities)
        a.emplace_back(id);
    auto again = fleet_detail::from_message(boost::json::serialize(a));
    if (!again || again->epoch != s.epoch || again->version != s.version ||
        again->killed.all != s.killed.all || again->killed.identities != s.killed.identities)
        __builtin_trap();
}

void check_decision(const fleet_detail::decision_message& d) {
    boost::json::object o{{"id", d.id}, {"approve", d.approve}, {"by", d.by}, {"reason", d.reason}};
    auto again = fleet_detail::parse_decision_message(boost::json::serialize(o));
    if (!again || again->id != d.id || again->approve != d.approve || again->by != d.by ||
        again->reason != d.reason)
        __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    if (auto ep = redis_endpoint::parse(in)) {
        // A URL that passes names a host, and the log form is host:port alone.
        if (ep->host.empty() || ep->where() != ep->host + ":" + ep->port)
            __builtin_trap();
    }
    if (auto s = fleet_detail::from_message(in))
        check_state(*s);
    if (auto d = fleet_detail::parse_decision_message(in))
        check_decision(*d);
    if (auto a = fleet_detail::parse_stored_approval(in))
        if (in.find('\n') == std::string_view::npos)
            __builtin_trap();
    (void)fleet_detail::to_u64(in);
    return 0;
}
