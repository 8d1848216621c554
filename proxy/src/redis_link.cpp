// RESP2 over Asio with hiredis's formatter and reader (redis_link.hpp).
#include "redis_link.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <hiredis/hiredis.h>
#include <openssl/ssl.h>

#include <array>
#include <charconv>
#include <optional>

namespace sluice::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

struct redis_link::impl {
    std::optional<beast::tcp_stream> plain;
    std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
    std::unique_ptr<redisReader, void (*)(redisReader*)> reader{redisReaderCreate(),
                                                                &redisReaderFree};
    std::chrono::milliseconds timeout{2000};
    std::array<char, 16 * 1024> buf{};

    beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }

    net::awaitable<void> write(const std::string& bytes) {
        if (tls)
            co_await net::async_write(*tls, net::buffer(bytes), net::use_awaitable);
        else
            co_await net::async_write(*plain, net::buffer(bytes), net::use_awaitable);
    }

    net::awaitable<std::size_t> read_some() {
        if (tls)
            co_return co_await tls->async_read_some(net::buffer(buf), net::use_awaitable);
        co_return co_await plain->async_read_some(net::buffer(buf), net::use_awaitable);
    }

    static redis_reply copy(const redisReply& r) {
        redis_reply out;
        switch (r.type) {
        case REDIS_REPLY_STRING:
            out.type = redis_reply::kind::string;
            break;
        case REDIS_REPLY_STATUS:
            out.type = redis_reply::kind::status;
            break;
        case REDIS_REPLY_ERROR:
            out.type = redis_reply::kind::error;
            break;
        case REDIS_REPLY_INTEGER:
            out.type = redis_reply::kind::integer;
            out.integer = r.integer;
            return out;
        case REDIS_REPLY_ARRAY:
            out.type = redis_reply::kind::array;
            out.elements.reserve(r.elements);
            for (std::size_t i = 0; i < r.elements; ++i)
                out.elements.push_back(copy(*r.element[i]));
            return out;
        default:
            return out; // nil
        }
        out.str.assign(r.str, r.len);
        return out;
    }

    net::awaitable<redis_reply> read_reply() {
        for (;;) {
            void* r = nullptr;
            if (redisReaderGetReply(reader.get(), &r) != REDIS_OK)
                throw redis_error("the control store sent a malformed reply");
            if (r != nullptr) {
                auto out = copy(*static_cast<redisReply*>(r));
                freeReplyObject(r);
                co_return out;
            }
            auto n = co_await read_some();
            if (redisReaderFeed(reader.get(), buf.data(), n) != REDIS_OK)
                throw redis_error("the control store sent a malformed reply");
        }
    }

    static std::string format(const std::vector<std::string>& args) {
        std::vector<const char*> argv;
        std::vector<std::size_t> lens;
        for (const auto& a : args) {
            argv.push_back(a.data());
            lens.push_back(a.size());
        }
        char* cmd = nullptr;
        int n =
            redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), argv.data(), lens.data());
        if (n < 0 || cmd == nullptr)
            throw redis_error("cannot format a control store command");
        std::string out(cmd, static_cast<std::size_t>(n));
        redisFreeCommand(cmd);
        return out;
    }
};

redis_link::redis_link(std::unique_ptr<impl> i)
    : impl_(std::move(i)) {}
redis_link::~redis_link() = default;

net::awaitable<std::unique_ptr<redis_link>> redis_link::open(net::any_io_executor ex,
                                                             const redis_endpoint& ep,
                                                             net::ssl::context* tls,
                                                             std::chrono::milliseconds timeout) {
    auto i = std::make_unique<impl>();
    i->timeout = timeout;
    if (!i->reader)
        throw redis_error("cannot create a reply reader");
    tcp::resolver resolver(ex);
    auto results = co_await resolver.async_resolve(ep.host, ep.port, net::use_awaitable);
    beast::tcp_stream s(ex);
    s.expires_after(timeout);
    co_await s.async_connect(results, net::use_awaitable);
    s.socket().set_option(tcp::no_delay(true));
    if (ep.tls) {
        if (tls == nullptr)
            throw redis_error("rediss:// needs a TLS context");
        i->tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(std::move(s), *tls);
        boost::system::error_code ip_ec;
        net::ip::make_address(ep.host, ip_ec);
        if (ip_ec && !SSL_set_tlsext_host_name(i->tls->native_handle(), ep.host.c_str()))
            throw redis_error("cannot set the TLS server name");
        i->tls->set_verify_mode(net::ssl::verify_peer);
        i->tls->set_verify_callback(net::ssl::host_name_verification(ep.host));
        co_await i->tls->async_handshake(net::ssl::stream_base::client, net::use_awaitable);
    } else {
        i->plain.emplace(std::move(s));
    }
    std::unique_ptr<redis_link> link(new redis_link(std::move(i)));
    if (!ep.password.empty()) {
        std::vector<std::string> auth{"AUTH"};
        if (!ep.user.empty())
            auth.push_back(ep.user);
        auth.push_back(ep.password);
        auto r = co_await link->call(std::move(auth));
        if (r.type == redis_reply::kind::error) // the reply never echoes the password
            throw redis_error("the control store refused AUTH: " + r.str +
                              " (check the user and password in control_store.redis.url)");
    }
    if (ep.db != 0) {
        // Built before the co_await: GCC 12 cannot keep a braced list alive across it.
        std::vector<std::string> select{"SELECT", std::to_string(ep.db)};
        auto r = co_await link->call(std::move(select));
        if (r.type == redis_reply::kind::error)
            throw redis_error("the control store refused SELECT: " + r.str);
    }
    co_return link;
}

net::awaitable<redis_reply> redis_link::call(std::vector<std::string> args) {
    impl_->lowest().expires_after(impl_->timeout);
    co_await impl_->write(impl::format(args));
    co_return co_await impl_->read_reply();
}

net::awaitable<void> redis_link::send(std::vector<std::string> args) {
    impl_->lowest().expires_after(impl_->timeout);
    co_await impl_->write(impl::format(args));
}

net::awaitable<redis_reply> redis_link::next() {
    impl_->lowest().expires_never();
    co_return co_await impl_->read_reply();
}

void redis_link::close() {
    boost::system::error_code ec;
    impl_->lowest().socket().close(ec);
}

} // namespace sluice::proxy
