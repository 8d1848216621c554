#include "http_fields.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include <algorithm>
#include <array>
#include <utility>

namespace sluice::proxy {

namespace beast = boost::beast;
namespace http = beast::http;

bool is_hop_by_hop(std::string_view name) {
    static constexpr std::array<std::string_view, 10> names{
        "connection", "proxy-connection",  "keep-alive", "proxy-authorization", "te", "trailer",
        "upgrade",    "transfer-encoding", "expect",     "proxy-authenticate"};
    for (auto n : names)
        if (beast::iequals(n, name))
            return true;
    return beast::iequals(name.substr(0, std::min<std::size_t>(name.size(), 9)), "x-sluice-");
}

std::vector<std::string> connection_tokens(const http::fields& fields) {
    std::vector<std::string> out;
    auto range = fields.equal_range(http::field::connection);
    for (auto it = range.first; it != range.second; ++it) {
        for (auto token : http::token_list{it->value()})
            out.emplace_back(token);
    }
    return out;
}

bool names_connection_option(const std::vector<std::string>& tokens, std::string_view name) {
    return std::any_of(tokens.begin(), tokens.end(),
                       [&](const std::string& t) { return beast::iequals(t, name); });
}

std::size_t mask_head(http::response_header<>& head, const dlp::secret_masker& masker) {
    if (!masker.active())
        return 0;
    std::size_t masked = 0;
    std::vector<std::pair<std::string, std::string>> fields;
    for (const auto& f : head) {
        std::string v(f.value());
        masked += masker.mask(v);
        fields.emplace_back(std::string(f.name_string()), std::move(v));
    }
    if (masked > 0) {
        for (const auto& [name, value] : fields)
            head.erase(name);
        for (const auto& [name, value] : fields)
            head.insert(name, value);
    }
    std::string reason(head.reason());
    if (std::size_t n = masker.mask(reason); n > 0) {
        head.reason(reason);
        masked += n;
    }
    return masked;
}

bool only_identity_coded(const http::fields& fields) {
    auto all = [&](http::field name, std::string_view allowed) {
        auto range = fields.equal_range(name);
        for (auto it = range.first; it != range.second; ++it)
            for (auto token : http::token_list{it->value()})
                if (!beast::iequals(token, allowed))
                    return false;
        return true;
    };
    return all(http::field::content_encoding, "identity") &&
           all(http::field::transfer_encoding, "chunked");
}

bool identity_coded_request(const http::fields& fields) {
    for (auto it = fields.find(http::field::content_encoding);
         it != fields.end() && it->name() == http::field::content_encoding; ++it)
        if (!beast::iequals(it->value(), "identity"))
            return false;
    return true;
}

} // namespace sluice::proxy
