// Idle upstream connections kept for reuse (issue 10: "upstream connection reuse per
// identity and destination"). After an exchange whose response ended cleanly on a
// keep-alive connection (RFC 9112 section 9.3), the flow returns its upstream stream
// here instead of keeping it to itself; the next exchange of any flow on the same
// io_context, for the same identity, configuration generation and host:port, takes it
// back instead of opening TCP and TLS again. An idle client connection therefore holds
// no upstream connection at all, and a new CONNECT to a busy destination skips the
// upstream handshake.
//
// Shape: one pool per io_context and stream type (an Asio service, so the pooled
// streams are destroyed with their io_context, before it is gone). A stream is only
// ever taken on the io_context that created it. Entries are keyed by a string the
// caller builds (identity, host:port); the configuration generation is held as a
// weak_ptr and compared, so a reload (new trust store, new policy) never reuses a
// connection verified under the old one. Bounds: `per_key` entries per key and `total`
// per io_context, each idle at most `max_idle`; beyond them the oldest is closed.
//
// Liveness: an origin may close an idle keep-alive connection at any time. take()
// peeks the socket without blocking and drops a stream that has reached EOF, has an
// error or has unsolicited bytes waiting (a close_notify, a stray response). A close
// that races the next request is still possible; the caller retries a failed write
// once on a fresh connection (flow.cpp), as for its own keep-alive connection.
//
// Thread safety: every member function may be called from any thread (a mutex guards
// the entries), though in sluice each io_context is run by one thread.
#pragma once

#include <boost/asio/execution_context.hpp>
#include <boost/beast/core/stream_traits.hpp>

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace sluice::proxy {

template <class Stream, class Generation>
class upstream_pool : public boost::asio::execution_context::service {
public:
    using key_type = boost::asio::execution_context::id;
    static inline key_type id;

    static constexpr std::size_t per_key = 32;
    static constexpr std::size_t total = 256;
    static constexpr std::chrono::seconds max_idle{30};

    explicit upstream_pool(boost::asio::execution_context& ctx)
        : boost::asio::execution_context::service(ctx) {}

    /// The newest idle stream for `key` under `gen` that still looks alive, or nothing.
    std::optional<Stream> take(const std::string& key,
                               const std::shared_ptr<const Generation>& gen) {
        std::lock_guard lock(mu_);
        expire(std::chrono::steady_clock::now());
        for (auto it = idle_.end(); it != idle_.begin();) {
            --it;
            if (it->key != key || it->gen.lock() != gen)
                continue;
            std::optional<Stream> s(std::move(it->stream));
            idle_.erase(it);
            if (!alive(*s))
                return std::nullopt; // the origin closed it: the caller connects afresh
            return s;
        }
        return std::nullopt;
    }

    /// Keeps `s` for reuse. The stream must be between messages: nothing unread, no
    /// operation pending.
    void put(std::string key, const std::shared_ptr<const Generation>& gen, Stream&& s) {
        std::lock_guard lock(mu_);
        auto now = std::chrono::steady_clock::now();
        expire(now);
        std::size_t same = 0;
        auto oldest_same = idle_.end();
        for (auto it = idle_.begin(); it != idle_.end(); ++it)
            if (it->key == key) {
                if (same++ == 0)
                    oldest_same = it;
            }
        if (same >= per_key)
            idle_.erase(oldest_same);
        if (idle_.size() >= total)
            idle_.pop_front();
        idle_.push_back(entry{std::move(key), gen, std::move(s), now});
    }

    std::size_t size() const {
        std::lock_guard lock(mu_);
        return idle_.size();
    }

private:
    struct entry {
        std::string key;
        std::weak_ptr<const Generation> gen;
        Stream stream;
        std::chrono::steady_clock::time_point since;
    };

    void shutdown() override {
        std::lock_guard lock(mu_);
        idle_.clear();
    }

    void expire(std::chrono::steady_clock::time_point now) {
        while (!idle_.empty() && now - idle_.front().since > max_idle)
            idle_.pop_front();
    }

    // Alive = the peek would block: no EOF, no error, nothing unsolicited to read.
    static bool alive(Stream& s) {
        auto& socket = boost::beast::get_lowest_layer(s).socket();
        if (!socket.is_open())
            return false;
        char byte = 0;
        auto n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }

    mutable std::mutex mu_;
    std::list<entry> idle_; // oldest first (a list: streams are not move-assignable)
};

} // namespace sluice::proxy
