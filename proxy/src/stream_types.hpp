// The byte streams a flow runs over, named once. A client connection is plain TCP or an
// HTTPS proxy listener's TLS (Beast's ssl_stream); a CONNECT that is intercepted adds
// sluice's own TLS server leg on top of either (tls_stream.hpp; TLS inside TLS through
// ref_layer.hpp). The upstream leg is plain TCP for http:// and tls_stream for https://.
//
// The exchange steps that do I/O are templates over a (client, upstream) pair and are
// instantiated once, for exactly these four pairs, in the file that defines them
// (SLUICE_FOR_EACH_STREAM_PAIR): every other file sees only their declarations.
#pragma once

#include "ref_layer.hpp"
#include "tls_stream.hpp"

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

namespace sluice::proxy {

using plain_stream = boost::beast::tcp_stream;
/// An HTTPS proxy listener's connection (TLS to sluice itself, optionally mTLS).
using listener_tls_stream = boost::beast::ssl_stream<plain_stream>;
/// An intercepted CONNECT on a plain listener; also every TLS leg to an origin.
using intercepted_stream = tls_stream<plain_stream>;
/// An intercepted CONNECT inside an HTTPS proxy listener's TLS.
using intercepted_in_tls_stream = tls_stream<ref_layer<listener_tls_stream>>;
/// The TLS leg to an origin (tls_stream.hpp: no fixed 68 KiB of buffers, pooled cheaply).
using upstream_tls = tls_stream<plain_stream>;

/// X(client stream, upstream stream) for every pair an exchange runs over: absolute-form
/// http:// on a plain or a TLS listener, and intercepted https:// on either.
#define SLUICE_FOR_EACH_STREAM_PAIR(X)                                                             \
    X(::sluice::proxy::plain_stream, ::sluice::proxy::plain_stream)                                \
    X(::sluice::proxy::listener_tls_stream, ::sluice::proxy::plain_stream)                         \
    X(::sluice::proxy::intercepted_stream, ::sluice::proxy::upstream_tls)                          \
    X(::sluice::proxy::intercepted_in_tls_stream, ::sluice::proxy::upstream_tls)

} // namespace sluice::proxy
