// The approvals console (issue 7): one static page (HTML, CSS, JavaScript from
// proxy/src/console/, embedded at build time) served by the admin listener. The page
// itself carries no data and needs no token; it asks the operator for the admin token
// once (kept in the tab's sessionStorage) and calls the admin API with it from the same
// origin: GET /v1/approvals and /v1/flows every second, POST approve/deny/kill/revive.
//
// Every answer carries a Content-Security-Policy that allows only this origin's script,
// style and fetches (no inline script, no external load, no framing), plus nosniff and
// no-referrer.
#pragma once

#include <string_view>

namespace sluice::proxy {

class admin_api;

/// Registers GET "/", "/console", "/console/app.js", "/console/app.css" (no token) on
/// `api`. Call before api.start().
void register_console_routes(admin_api& api);

/// The Content-Security-Policy value sent with the console's files.
std::string_view console_content_security_policy();

} // namespace sluice::proxy
