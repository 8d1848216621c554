// Internal to proxy/: everything the fleet reads from outside the process, as plain
// functions with no I/O (fleet_store.hpp, issue 22), so that each is fuzzed on its own
// (fuzz/fleet_wire_fuzz.cpp):
// - the control store's URL (redis://, rediss://: the shape of redis-cli -u; RFC 3986
//   parsed by Boost.URL);
// - the kill switch state, as the script replies and as published on <p>kill: an array
//   of strings [epoch, version, "1"|"0" (all), identity...] (JSON, RFC 8259, parsed by
//   Boost.JSON);
// - a decision published on <p>decide: {"id", "approve", "by", "reason"};
// - a published approval entry as kept in <p>approval:<id>: "<published ms>\n<entry JSON
//   object>".
// Anything else is nullopt (or an error that never quotes the URL: it may hold the
// password). Never throws except std::bad_alloc. Thread safety: pure functions.
#pragma once

#include "sluice/proxy/control.hpp"

#include <boost/json/object.hpp>

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::proxy {

/// What a redis:// or rediss:// URL names (config/sections/control_store.cpp checks the
/// shape at load time; parse() repeats the checks for callers that did not).
struct redis_endpoint {
    std::string host;
    std::string port = "6379";
    bool tls = false;
    std::string user;     ///< "" = the default user
    std::string password; ///< "" = no AUTH
    unsigned db = 0;
    /// The error names what is wrong, never the URL (it may hold the password).
    static std::expected<redis_endpoint, std::string> parse(std::string_view url);
    /// "host:port" (for logs: no user, no password).
    std::string where() const { return host + ":" + port; }
};

namespace fleet_detail {

/// A decimal count as the store writes it (the scripts' tostring); 0 when it is not one.
std::uint64_t to_u64(std::string_view s);

/// The kill switch state in the store.
struct shared_state {
    std::string epoch; ///< "" = the store holds no state
    std::uint64_t version = 0;
    killed_state killed;
};

/// [epoch, version, "1"|"0", identity...]; nullopt when the shape is not that.
std::optional<shared_state> from_strings(const std::vector<std::string>& v);
/// The same array as published on <p>kill (a JSON array of strings).
std::optional<shared_state> from_message(std::string_view json);

/// A decision published on <p>decide.
struct decision_message {
    std::string id;
    bool approve = false;
    std::string by;
    std::string reason;
};
std::optional<decision_message> parse_decision_message(std::string_view json);

/// A published approval entry: when it was published (the store's clock, ms) and the
/// listed JSON object (with "replica").
struct stored_approval {
    std::uint64_t published_ms = 0;
    boost::json::object entry;
};
std::optional<stored_approval> parse_stored_approval(std::string_view value);

} // namespace fleet_detail

} // namespace sluice::proxy
