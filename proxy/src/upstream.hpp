// The upstream leg of a flow: one connection to the origin, owned by the client flow and
// reused across its keep-alive exchanges (or parked in upstream_pool.hpp between them).
// Internal to proxy/. Not thread safe: one flow's coroutine uses it.
#pragma once

#include "destination.hpp"
#include "flow_context.hpp"
#include "stream_types.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <optional>
#include <string>

namespace sluice::proxy {

template <class Stream>
struct upstream {
    std::optional<Stream> stream;
    boost::beast::flat_buffer buffer;
    std::string key; // host:port the stream is connected to
};

/// A kill closes whichever upstream connection the flow holds at that moment, abortively
/// (a slow origin, a long download or an upload still in the send buffer is cut as well
/// as the client side).
template <class Stream>
close_hook close_on_kill(flow_context& fc, upstream<Stream>& up) {
    return close_hook(fc.handle.get(), [&up] {
        if (up.stream)
            abort_socket(beast::get_lowest_layer(*up.stream).socket());
    });
}

enum class connect_result { ok, connect_failed, tls_failed };

/// Connects `up` to one of `d`'s checked endpoints within the configured connect timeout
/// (and, for TLS, verifies the origin's certificate for `d.host` within the handshake
/// timeout). Replaces whatever `up` held. Times are counted in the metrics.
net::awaitable<connect_result> connect_upstream(upstream<plain_stream>& up, const destination& d,
                                                flow_context& fc);
net::awaitable<connect_result> connect_upstream(upstream<upstream_tls>& up, const destination& d,
                                                flow_context& fc);

/// Bytes below HTTP that nobody has read: TLS records the origin sent after its response
/// (a close_notify, say). A connection holding any is not idle and is not pooled (the
/// pool's liveness peek sees only the socket).
inline bool holds_unread(const plain_stream&) {
    return false;
}
inline bool holds_unread(const upstream_tls& s) {
    return s.input_pending();
}

} // namespace sluice::proxy
