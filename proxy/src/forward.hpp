// Forwarding an exchange's request upstream over HTTP/1.1: an idle pooled connection of
// this identity to the same place or a new one (one fresh retry when a reused one turns
// out closed), the head and body as prepare_forward built them, or for a streamed body
// the head and then window after window as dlp::body_stream releases them.
// Instantiated for the stream pairs of stream_types.hpp in forward.cpp. Internal to proxy/.
#pragma once

#include "exchange.hpp"
#include "flow_context.hpp"
#include "upstream.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <string>

namespace sluice::proxy {

/// The pool key of an exchange's upstream: identity and host:port (upstream_pool.hpp).
std::string upstream_pool_key(const flow_context& fc, const exchange& ex);

/// Sends `plan.out` upstream on `up`. Streamed bodies are read from `client` (what is in
/// `cbuf` first) as they are relayed, and inspected on the way. A refusal when the
/// origin could not be reached or written to (502), or a streamed window was refused
/// (the verdict's status); ex.rec then holds what went up (bytes_up, findings).
template <class ClientStream, class UpstreamStream>
net::awaitable<step_result> forward_request(ClientStream& client, beast::flat_buffer& cbuf,
                                            upstream<UpstreamStream>& up, forward_plan& plan,
                                            exchange& ex, flow_context& fc);

} // namespace sluice::proxy
