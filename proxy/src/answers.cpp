#include "answers.hpp"

#include <boost/beast/http/field.hpp>
#include <boost/json.hpp>

namespace sluice::proxy {

namespace http = boost::beast::http;

std::string_view error_kind(unsigned status) noexcept {
    switch (status) {
    case 400:
        return "bad_request";
    case 403:
        return "forbidden";
    case 407:
        return "proxy_authentication_required";
    case 413:
        return "payload_too_large";
    case 429:
        return "too_many_requests";
    case 500:
        return "internal_error";
    case 502:
        return "bad_gateway";
    case 503:
        return "service_unavailable";
    case 504:
        return "gateway_timeout";
    default:
        return "error";
    }
}

answer make_answer(unsigned status, std::string_view reason, std::string_view flow,
                   const std::vector<std::string>& rules, bool keep_alive, unsigned http_version) {
    answer res{static_cast<http::status>(status), http_version};
    res.set(http::field::server, "sluice");
    res.set("X-Sluice-Flow", flow);
    res.set(http::field::content_type, "application/json");
    res.set(http::field::cache_control, "no-store");
    if (status == 407)
        res.set(http::field::proxy_authenticate, "Basic realm=\"sluice\"");
    boost::json::array rule_ids;
    for (const auto& r : rules)
        rule_ids.emplace_back(r);
    boost::json::object body{{"error", error_kind(status)},
                             {"reason", reason},
                             {"flow", flow},
                             {"rules", std::move(rule_ids)}};
    res.body() = boost::json::serialize(body) + "\n";
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
}

} // namespace sluice::proxy
