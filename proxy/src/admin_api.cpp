#include "sluice/proxy/admin_api.hpp"

#include "sluice/detectors/text.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr auto as_tuple = net::as_tuple(net::use_awaitable);
constexpr std::size_t max_body = 1 << 20;

struct route_entry {
    std::string method;
    std::vector<std::string> segments; // "{}" = any one segment
    bool needs_token = true;
    admin_handler handler;
};

std::vector<std::string> split_path(std::string_view path) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < path.size()) {
        if (path[i] == '/') {
            ++i;
            continue;
        }
        auto j = path.find('/', i);
        if (j == std::string_view::npos)
            j = path.size();
        out.emplace_back(path.substr(i, j - i));
        i = j;
    }
    return out;
}

bool match(const route_entry& r, const std::vector<std::string>& segs,
           std::vector<std::string>& params) {
    if (r.segments.size() != segs.size())
        return false;
    params.clear();
    for (std::size_t i = 0; i < segs.size(); ++i) {
        if (r.segments[i] == "{}")
            params.push_back(segs[i]);
        else if (r.segments[i] != segs[i])
            return false;
    }
    return true;
}

// Constant-time over the token's bytes; the length is not secret (always 64 hex when
// generated), but a length mismatch still runs a comparison so timing is uniform.
bool token_ok(std::string_view header, const std::string& token) {
    constexpr std::string_view scheme = "Bearer ";
    if (token.empty() || header.size() < scheme.size() ||
        !std::equal(scheme.begin(), scheme.end(), header.begin(),
                    [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
        return false;
    std::string_view given = header.substr(scheme.size());
    if (given.size() != token.size()) {
        (void)CRYPTO_memcmp(token.data(), token.data(), token.size());
        return false;
    }
    return CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
}

} // namespace

admin_response admin_error(unsigned status, std::string_view reason, std::string_view message) {
    const char* kind = status == 401   ? "unauthorized"
                       : status == 404 ? "not_found"
                       : status == 405 ? "method_not_allowed"
                       : status < 500  ? "bad_request"
                       : status == 503 ? "service_unavailable"
                                       : "internal";
    boost::json::object o{{"error", kind}, {"reason", reason}};
    if (!message.empty())
        o["message"] = message;
    return admin_response{status, boost::json::serialize(o), "application/json"};
}

struct admin_api::impl : std::enable_shared_from_this<admin_api::impl> {
    net::io_context* ctx = nullptr;
    std::unique_ptr<tcp::acceptor> acceptor;
    std::string token;
    std::vector<route_entry> routes;

    net::awaitable<admin_response> dispatch(http::request<http::string_body>& req) {
        std::string_view target = req.target();
        auto q = target.find('?');
        admin_request ar;
        ar.method = std::string(req.method_string());
        ar.path = std::string(target.substr(0, q));
        if (q != std::string_view::npos)
            ar.query = std::string(target.substr(q + 1));
        auto segs = split_path(ar.path);
        bool path_known = false;
        for (const auto& r : routes) {
            std::vector<std::string> params;
            if (!match(r, segs, params))
                continue;
            path_known = true;
            if (r.method != ar.method)
                continue;
            if (r.needs_token) {
                auto h = req.find(http::field::authorization);
                if (h == req.end() || !token_ok(h->value(), token))
                    co_return admin_error(401, "unauthorized",
                                          "missing or wrong bearer token (see admin.token_file)");
            }
            ar.params = std::move(params);
            ar.body = std::move(req.body());
            co_return co_await r.handler(std::move(ar));
        }
        co_return path_known ? admin_error(405, "method_not_allowed")
                             : admin_error(404, "not_found");
    }

    net::awaitable<void> session(tcp::socket socket) {
        auto self = shared_from_this();
        beast::tcp_stream stream(std::move(socket));
        beast::flat_buffer buf;
        for (;;) {
            http::request_parser<http::string_body> parser;
            parser.body_limit(max_body);
            stream.expires_after(std::chrono::seconds(30));
            auto [ec, n] = co_await http::async_read(stream, buf, parser, as_tuple);
            admin_response res;
            bool keep_alive = false;
            if (ec == http::error::body_limit) {
                res = admin_error(413, "body_too_large");
            } else if (ec) {
                break; // closed, timed out or malformed: nothing useful to answer
            } else {
                auto req = parser.release();
                keep_alive = req.keep_alive();
                try {
                    res = co_await dispatch(req);
                } catch (const std::exception& e) {
                    spdlog::error("admin API {} {}: internal error (source internal): {}",
                                  std::string(req.method_string()), std::string(req.target()),
                                  e.what());
                    res = admin_error(500, "internal");
                }
            }
            http::response<http::string_body> out{static_cast<http::status>(res.status), 11};
            out.set(http::field::content_type, res.content_type);
            out.set(http::field::cache_control, "no-store");
            for (const auto& [name, value] : res.headers)
                out.set(name, value);
            out.keep_alive(keep_alive);
            out.body() = std::move(res.body);
            out.prepare_payload();
            auto [wec, wn] = co_await http::async_write(stream, out, as_tuple);
            if (wec || !keep_alive)
                break;
        }
        boost::system::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    }

    void accept() {
        acceptor->async_accept(
            [self = shared_from_this()](boost::system::error_code ec, tcp::socket s) {
                if (ec == net::error::operation_aborted || !self->acceptor->is_open())
                    return;
                if (!ec)
                    net::co_spawn(*self->ctx, self->session(std::move(s)), net::detached);
                self->accept();
            });
    }
};

std::expected<std::unique_ptr<admin_api>, std::string>
admin_api::create(net::io_context& ctx, const std::string& address, std::string token) {
    auto colon = address.rfind(':');
    if (colon == std::string::npos)
        return std::unexpected("admin address " + address + ": expected host:port");
    std::string host = address.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    if (host == "localhost")
        host = "127.0.0.1";
    boost::system::error_code ec;
    auto addr = net::ip::make_address(host, ec);
    unsigned long port = 0;
    try {
        port = std::stoul(address.substr(colon + 1));
    } catch (const std::exception&) {
        port = 70000;
    }
    if (ec || port > 65535)
        return std::unexpected("admin address " + address + ": not an IP address and port");
    auto api = std::unique_ptr<admin_api>(new admin_api());
    api->impl_ = std::make_shared<impl>();
    api->impl_->ctx = &ctx;
    api->impl_->token = std::move(token);
    tcp::endpoint ep(addr, static_cast<std::uint16_t>(port));
    auto acc = std::make_unique<tcp::acceptor>(ctx);
    acc->open(ep.protocol(), ec);
    if (!ec)
        acc->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec)
        acc->bind(ep, ec);
    if (!ec)
        acc->listen(net::socket_base::max_listen_connections, ec);
    if (ec)
        return std::unexpected("admin address " + address + ": " + ec.message());
    api->impl_->acceptor = std::move(acc);
    return api;
}

admin_api::~admin_api() {
    stop();
}

void admin_api::route(std::string method, std::string pattern, bool needs_token,
                      admin_handler handler) {
    impl_->routes.push_back(
        route_entry{std::move(method), split_path(pattern), needs_token, std::move(handler)});
}

void admin_api::start() {
    net::post(*impl_->ctx, [i = impl_] { i->accept(); });
}

void admin_api::stop() {
    if (!impl_)
        return;
    net::post(*impl_->ctx, [i = impl_] {
        boost::system::error_code ignored;
        i->acceptor->close(ignored);
    });
}

std::string admin_api::address() const {
    boost::system::error_code ec;
    auto ep = impl_->acceptor->local_endpoint(ec);
    if (ec)
        return {};
    return ep.address().is_v6() ? "[" + ep.address().to_string() + "]:" + std::to_string(ep.port())
                                : ep.address().to_string() + ":" + std::to_string(ep.port());
}

std::expected<std::string, std::string>
load_or_create_admin_token(const std::filesystem::path& file) {
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0) {
        if ((st.st_mode & 077) != 0)
            return std::unexpected("admin token file " + file.string() +
                                   " is accessible by group or others; chmod 600 it");
        std::ifstream in(file, std::ios::binary);
        std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        while (!token.empty() && (token.back() == '\n' || token.back() == '\r' ||
                                  token.back() == ' ' || token.back() == '\t'))
            token.pop_back();
        if (!in.good() && !in.eof())
            return std::unexpected("admin token file " + file.string() + ": cannot read");
        if (token.empty())
            return std::unexpected("admin token file " + file.string() + " is empty");
        return token;
    }
    std::error_code ec;
    if (file.has_parent_path()) {
        std::filesystem::create_directories(file.parent_path(), ec);
        if (ec)
            return std::unexpected("admin token file " + file.string() + ": " + ec.message());
    }
    unsigned char raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return std::unexpected("admin token: no randomness available");
    std::string token =
        text::to_hex(std::string_view(reinterpret_cast<const char*>(raw), sizeof raw));
    OPENSSL_cleanse(raw, sizeof raw);
    // O_EXCL: two processes starting at once must not overwrite each other's token.
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return load_or_create_admin_token(file);
        return std::unexpected("admin token file " + file.string() + ": " + std::strerror(errno));
    }
    std::string line = token + "\n";
    bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ok = ::fsync(fd) == 0 && ok;
    ::close(fd);
    if (!ok)
        return std::unexpected("admin token file " + file.string() + ": write failed");
    return token;
}

} // namespace sluice::proxy
