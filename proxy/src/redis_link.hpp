// One connection to Redis, for the fleet's control store (fleet_store.hpp, issue 22).
//
// Wire format: RESP2 (https://redis.io/docs/reference/protocol-spec/). Commands are framed
// by hiredis's redisFormatCommandArgv and replies parsed by hiredis's redisReader; this
// file only moves bytes (Asio, optionally TLS through OpenSSL) and copies replies into
// `redis_reply`. No RESP is parsed here.
//
// URL: redis://[[user]:password@]host[:port][/db] and rediss:// for TLS (the same shape
// as redis-cli -u; port 6379 by default). The password is sent with AUTH (AUTH user
// password when a user is given, Redis 6+ ACLs) and never appears in an error message.
//
// Errors: open(), call() and next() throw `redis_error` (I/O, timeout, TLS, a protocol
// error from the reader, or an -ERR reply to AUTH/SELECT); an -ERR reply to call() is
// returned as kind::error, not thrown. After a throw the link is unusable: drop it.
//
// Threads: a link is used from one coroutine chain at a time (one executor, no strand).
#pragma once

#include "fleet_wire.hpp" // redis_endpoint

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <expected>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::proxy {

/// One RESP2 reply.
struct redis_reply {
    enum class kind { nil, string, status, error, integer, array };
    kind type = kind::nil;
    std::string str;                   ///< string, status or error text
    long long integer = 0;             ///< integer
    std::vector<redis_reply> elements; ///< array
};

class redis_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class redis_link {
public:
    /// Resolves, connects, does the TLS handshake (`tls` non-null for rediss://: SNI and
    /// host-name verification against ep.host), then AUTH and SELECT. Every step is bounded
    /// by `timeout`.
    static boost::asio::awaitable<std::unique_ptr<redis_link>>
    open(boost::asio::any_io_executor ex, const redis_endpoint& ep, boost::asio::ssl::context* tls,
         std::chrono::milliseconds timeout);
    ~redis_link();

    /// Sends one command and reads its reply, both within the open() timeout.
    boost::asio::awaitable<redis_reply> call(std::vector<std::string> args);
    /// Sends one command without reading (SUBSCRIBE: its confirmations come from next()).
    boost::asio::awaitable<void> send(std::vector<std::string> args);
    /// The next reply, however long it takes (pub/sub messages). close() ends the wait.
    boost::asio::awaitable<redis_reply> next();
    /// Closes the socket; a pending next() or call() throws. Call on the link's executor.
    void close();

    struct impl;

private:
    explicit redis_link(std::unique_ptr<impl> i);
    std::unique_ptr<impl> impl_;
};

} // namespace sluice::proxy
