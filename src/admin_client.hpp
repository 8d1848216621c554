// The admin API client: one HTTP/1.1 request (Beast) to every replica at once, with
// `Authorization: Bearer <token>` and one deadline per replica for connect, write and
// read. Internal to the sluice executable; the token never appears in an error.
#pragma once

#include "admin_replicas.hpp"

#include <boost/beast/http/verb.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {

/// What one replica answered.
struct outcome {
    bool answered = false; ///< an HTTP answer arrived
    unsigned status = 0;
    boost::json::value body; ///< parsed JSON (null when not JSON)
    std::string error;       ///< transport or protocol failure, or the API's error summary
};

/// One request of the admin API (CONTRACT.md "Admin API").
struct call {
    boost::beast::http::verb verb = boost::beast::http::verb::get;
    std::string path; ///< "/v1/..."
    std::string body; ///< JSON for POST
};

/// Runs `c` against every replica at once; outcomes in replica order. Answers over 64 MiB
/// are errors.
std::vector<outcome> call_all(const std::vector<replica>& replicas, const call& c,
                              const std::string& token, std::chrono::milliseconds timeout);

/// A 2xx answer with a JSON object.
bool ok(const outcome& o);
/// The API's `reason` field of an answer, or "".
std::string api_reason(const outcome& o);
/// "sluice CMD: admin API LABEL: ERROR" on stderr.
void report_failure(std::string_view cmd, const replica& r, const outcome& o);
/// {"replica", "ok", "status", "error", "reason"} for --json output.
boost::json::object replica_status(const replica& r, const outcome& o);

} // namespace sluice::cli
