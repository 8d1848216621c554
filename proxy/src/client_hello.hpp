// Internal to proxy/: the server name a TLS client asks for, read from the first bytes it
// sends in an opaque tunnel. sluice parses no TLS itself: OpenSSL reads the ClientHello
// (RFC 8446 section 4.1.2, RFC 5246 section 7.4.1.2) in a server-side SSL object over
// memory BIOs, and its servername callback (RFC 6066 section 3, called whether or not
// the extension is present) takes the name and stops the handshake there.
//
// Thread safety: one probe per tunnel, used by one coroutine. The shared SSL_CTX behind
// it is built once (thread-safe static) and only read afterwards.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace sluice::proxy {

class client_hello_probe {
public:
    enum class state {
        need_more, ///< a TLS handshake record has begun; feed the bytes that follow
        named,     ///< a ClientHello with a host_name: name()
        unnamed,   ///< a ClientHello without a server_name extension
        not_tls,   ///< the first byte is no TLS record type (RFC 8446 section 5.1)
        malformed, ///< TLS, but OpenSSL could not read a ClientHello from it, or the
                   ///< first record is not a handshake record
    };

    /// Bytes fed before a ClientHello must end in at most this many (a real one is a
    /// few KiB, post-quantum key shares included); past it the state is malformed.
    static constexpr std::size_t max_hello = 64 * 1024;

    client_hello_probe();
    ~client_hello_probe();
    client_hello_probe(const client_hello_probe&) = delete;
    client_hello_probe& operator=(const client_hello_probe&) = delete;

    /// Feeds the bytes that follow those fed before. Once the state is other than
    /// need_more it no longer changes and further bytes are ignored.
    state feed(std::string_view bytes);
    state current() const noexcept { return state_; }

    /// The host_name as sent (not normalised); empty unless named.
    const std::string& name() const noexcept { return name_; }

    /// The fatal alert record OpenSSL wrote when it stopped (RFC 8446 section 6.2):
    /// unrecognized_name (RFC 6066 section 3) after a ClientHello, or the error it met
    /// in a malformed one; empty if none was written. For the client of a refused tunnel.
    const std::string& alert() const noexcept { return alert_; }

private:
    struct impl;
    std::unique_ptr<impl> impl_;
    std::size_t fed_ = 0;
    state state_ = state::need_more;
    std::string name_;
    std::string alert_;
};

} // namespace sluice::proxy
