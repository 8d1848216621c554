// CONNECT host:port (RFC 9110 section 9.3.6): policy on the destination, DLP on the name,
// resolution and the SSRF check, then either an opaque tunnel (policy `inspect: false`,
// bytes both ways, audited as uninspected) or a 200 and TLS interception with a leaf
// minted for the CONNECT host, whose requests run through run_exchange one by one.
// Instantiated for plain and TLS proxy listeners in connect_tunnel.cpp. Internal to proxy/.
#pragma once

#include "flow_context.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

namespace sluice::proxy {

struct destination;

/// Serves a CONNECT whose head is in `hp` to its end: the client has its answer and every
/// exchange inside the tunnel is recorded. The connection is done afterwards.
template <class ClientStream>
net::awaitable<void> handle_connect(ClientStream& client, beast::flat_buffer& cbuf,
                                    http::request_parser<http::empty_body>& hp, flow_context& fc);

/// A client's TLS handshake with sluice failed: inside a CONNECT to `d` (sluice's leaf
/// certificate, from its CA) or, with `d` null, on an HTTPS proxy listener. Logged, counted
/// (sluice_client_tls_errors_total{reason}) and audited (decision deny, reason
/// client_tls): an agent that does not trust the CA is visible to the operator, and a
/// CONNECT whose client refused the leaf gets a hint naming the CA file, once per source.
net::awaitable<void> record_client_tls(flow_context& fc, boost::system::error_code ec,
                                       const destination* d);

} // namespace sluice::proxy
