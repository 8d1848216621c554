// The HTTP/1.1 front end of an exchange: one request read off a client connection (plain,
// an HTTPS proxy listener, or an intercepted tunnel) walks the exchange steps
// (exchange.hpp) and its answer goes back the same way. Instantiated for the stream pairs
// of stream_types.hpp in exchange_http1.cpp. Internal to proxy/.
#pragma once

#include "destination.hpp"
#include "exchange.hpp"
#include "flow_context.hpp"
#include "upstream.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

namespace sluice::proxy {

/// Runs one exchange whose head `hp` has been read from `client` (the rest of what the
/// client sent is in `cbuf`): reads the body (answering Expect: 100-continue), inspects,
/// holds, forwards on `up`, relays the response, records. keep_going when the connection
/// may carry the next request; after close, a refused body may still be coming
/// (fc.unread_body: the caller lingers).
template <class ClientStream, class UpstreamStream>
net::awaitable<exchange_end> run_exchange(ClientStream& client, beast::flat_buffer& cbuf,
                                          http::request_parser<http::empty_body>& hp,
                                          exchange_target& tgt, upstream<UpstreamStream>& up,
                                          flow_context& fc);

} // namespace sluice::proxy
