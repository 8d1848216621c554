#include "sluice/proxy/admin_console.hpp"

#include "sluice/proxy/admin_api.hpp"

#include <string>
#include <string_view>

namespace sluice::proxy {

namespace {

#include "console_assets.inc"

// 'self' only: the page loads its script and style from this listener and fetches the
// admin API there; inline script is refused, so data that ever reached the DOM as markup
// still could not run.
constexpr std::string_view csp = "default-src 'none'; script-src 'self'; style-src 'self'; "
                                 "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                                 "form-action 'none'; frame-ancestors 'none'";

admin_handler serve(std::string_view body, std::string_view content_type) {
    return [body, content_type](admin_request) -> boost::asio::awaitable<admin_response> {
        admin_response r{200, std::string(body), std::string(content_type)};
        r.headers = {{"Content-Security-Policy", std::string(csp)},
                     {"X-Content-Type-Options", "nosniff"},
                     {"Referrer-Policy", "no-referrer"},
                     {"X-Frame-Options", "DENY"}};
        co_return r;
    };
}

} // namespace

std::string_view console_content_security_policy() {
    return csp;
}

void register_console_routes(admin_api& api) {
    api.route("GET", "/", false, serve(console_index_html, "text/html; charset=utf-8"));
    api.route("GET", "/console", false, serve(console_index_html, "text/html; charset=utf-8"));
    api.route("GET", "/console/app.js", false,
              serve(console_app_js, "text/javascript; charset=utf-8"));
    api.route("GET", "/console/app.css", false, serve(console_app_css, "text/css; charset=utf-8"));
}

} // namespace sluice::proxy
