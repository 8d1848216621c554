// One client connection's walk: identity -> policy -> CONNECT / absolute-form ->
// TLS interception -> inspection -> decision -> relay -> audit.
#pragma once

#include "sluice/config/settings.hpp"
#include "sluice/dlp/credential_broker.hpp"
#include "sluice/dlp/seam.hpp"
#include "sluice/dlp/variants.hpp"
#include "sluice/proxy/audit_log.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/control.hpp"
#include "sluice/proxy/metrics.hpp"
#include "sluice/proxy/rate_limits.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

namespace sluice::proxy {

/// One configuration generation as the data path sees it: immutable once published.
struct generation {
    std::shared_ptr<const config::settings> settings;
    std::shared_ptr<boost::asio::ssl::context> upstream_tls;
    /// `credentials` with their secrets (issue 11); never null, may be empty.
    std::shared_ptr<const dlp::credential_broker> broker;
    /// `protected_values` plus every brokered secret; null when there are none.
    std::shared_ptr<const dlp::protected_values> protect;
};

/// State shared by every flow of a server. `current` is swapped on reload.
struct shared_state {
    std::atomic<std::shared_ptr<const generation>> current;
    std::shared_ptr<certificate_authority> ca;
    std::unique_ptr<audit_log> audit;
    std::shared_ptr<metrics> stats; ///< null when metrics are off (unit tests)
    /// Flow registry, kill switch, approvals (issue 7); null in unit tests.
    std::shared_ptr<control> ctl;
    std::atomic<std::uint64_t> next_flow{0};
    std::atomic<std::int64_t> active{0};
    std::uint64_t flow_salt = 0; ///< random per process, so flow ids differ across restarts
    rate_limits limits;          ///< per-identity `policies[].limits` state (issue 7)
    /// The ends of the last request body per identity and destination, joined with the
    /// next one (issue 21; dlp/seam.hpp bounds it).
    dlp::seam_store seams;
};

/// What a listener contributes to a flow.
struct listener_context {
    std::optional<std::string> identity;
    /// Set for an HTTPS proxy listener: sluice's own certificate, and the client CA when
    /// mTLS is required (verify_peer | fail_if_no_peer_cert).
    std::shared_ptr<boost::asio::ssl::context> tls;
};

/// Serves one accepted client connection to its end. Never throws: every error ends
/// this connection only (and is logged once with the flow id).
boost::asio::awaitable<void> serve_client(boost::asio::ip::tcp::socket socket,
                                          std::shared_ptr<shared_state> state,
                                          listener_context listener);

} // namespace sluice::proxy
