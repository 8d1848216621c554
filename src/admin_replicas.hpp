// Which admin APIs an admin command talks to: `--admin` URLs (or $SLUICE_ADMIN_URL, else
// http://127.0.0.1:9901), each name resolved to every address it has (a Kubernetes
// headless Service has one per ready pod). Internal to the sluice executable.
#pragma once

#include "admin_options.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <expected>
#include <optional>
#include <string>
#include <vector>

namespace sluice::cli {

/// One admin API to talk to: a resolved address (or a name that failed to resolve).
struct replica {
    std::string label; ///< "127.0.0.1:9901", "[::1]:9901", or the URL when unresolved
    std::optional<boost::asio::ip::tcp::endpoint> endpoint;
    std::string host_header;
    std::string base_path;
    std::string resolve_error; ///< set when endpoint is empty
};

/// Every replica of `o.admin`, in order, each address once. An invalid URL (not http://,
/// userinfo, query or fragment, no host) is an error; a name that does not resolve is a
/// replica with `resolve_error`. Resolves synchronously.
std::expected<std::vector<replica>, std::string> find_replicas(const options& o);

} // namespace sluice::cli
