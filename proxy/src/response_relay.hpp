// Relaying an exchange's response from the origin to the client over HTTP/1.1: interim
// 1xx answers, then the head (masked for brokered secrets) and the body as it arrives
// (server-sent events and streamed model output are not held back), through the
// exchange's secret masker. The upstream connection goes back to the pool when it can
// serve another request. Instantiated for the stream pairs of stream_types.hpp in
// response_relay.cpp. Internal to proxy/.
#pragma once

#include "exchange.hpp"
#include "flow_context.hpp"
#include "upstream.hpp"

#include <boost/asio/awaitable.hpp>

namespace sluice::proxy {

struct relay_end {
    step_result refused;       // nothing was relayed: the front end answers this
    bool relay_ok = false;     // the whole response reached the client
    bool client_close = false; // the client connection ends after this response
};

template <class ClientStream, class UpstreamStream>
net::awaitable<relay_end> relay_response(ClientStream& client, upstream<UpstreamStream>& up,
                                         forward_plan& plan, exchange& ex, flow_context& fc);

} // namespace sluice::proxy
