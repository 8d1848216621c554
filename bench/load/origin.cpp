// sluice_bench_origin: a TLS HTTP/1.1 keep-alive origin for the load harness (issue 10).
//
// Listens on loopback, one io_context per thread, answers every request with 200 and a
// fixed small JSON body after reading (and discarding) the request body in 64 KiB
// pieces, so a 1 GiB upload costs no memory.
//
// Downloads (issue 23): a GET of `/bytes/N` (N decimal, at most 16 GiB) answers 200 with
// Content-Length N and N bytes of clean agent-like text, JSON lines of English words
// with no hex, base64 or key-shaped run a detector could flag. One precomputed 64 KiB
// block is written again and again (the last write cut short), so memory stays flat for
// any N. A `/bytes/` target whose N is malformed or too large answers 400.
//
// Its certificate is either given (--cert/--key) or minted at start from a CA
// (--ca-cert/--ca-key): ECDSA P-256, SAN DNS:localhost and IP:127.0.0.1. Prints
// "listening PORT" on stdout once accepting.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
constexpr auto as_tuple = net::as_tuple(net::use_awaitable);

namespace {

const std::string response_body = R"({"ok":true,"id":"bench"})";
constexpr std::uint64_t max_download = std::uint64_t{16} << 30;

// 64 KiB of JSON lines made of plain words: what a model's streamed answer or a fetched
// document looks like, and nothing a secret detector should match.
std::string make_download_block() {
    static constexpr std::string_view words[] = {
        "the",    "agent",  "reads", "a",     "file",   "and",   "writes", "short",
        "notes",  "about",  "each",  "step",  "while",  "tests", "run",    "quietly",
        "before", "review", "of",    "plans", "models", "help",  "people", "build"};
    constexpr std::size_t size = 64 * 1024;
    std::string s;
    s.reserve(size + 256);
    std::size_t w = 0;
    for (unsigned line = 0; s.size() < size; ++line) {
        s += R"({"index":)" + std::to_string(line) + R"(,"role":"assistant","content":")";
        for (int i = 0; i < 12; ++i) {
            if (i)
                s += ' ';
            s += words[w++ % std::size(words)];
        }
        s += "\"}\n";
    }
    s.resize(size - 1);
    s += '\n';
    return s;
}

const std::string download_block = make_download_block();

// N of a GET /bytes/N target, or nothing when the target is not of that shape.
std::optional<std::uint64_t> download_size(std::string_view target, bool& bad) {
    constexpr std::string_view prefix = "/bytes/";
    bad = false;
    if (!target.starts_with(prefix))
        return std::nullopt;
    target.remove_prefix(prefix.size());
    std::uint64_t n = 0;
    auto [end, ec] = std::from_chars(target.data(), target.data() + target.size(), n);
    if (ec != std::errc{} || end != target.data() + target.size() || n > max_download) {
        bad = true;
        return std::nullopt;
    }
    return n;
}

// 200 with n bytes of download_block text, written 64 KiB at a time.
net::awaitable<bool> send_download(beast::ssl_stream<beast::tcp_stream>& s, std::uint64_t n,
                                   bool keep) {
    http::response<http::buffer_body> res{http::status::ok, 11};
    res.set(http::field::server, "sluice_bench_origin");
    res.set(http::field::content_type, "application/x-ndjson");
    res.content_length(n);
    res.keep_alive(keep);
    res.body().data = nullptr;
    res.body().more = n > 0;
    http::response_serializer<http::buffer_body> sr{res};
    beast::get_lowest_layer(s).expires_after(std::chrono::seconds(60));
    auto [hec, hn] = co_await http::async_write_header(s, sr, as_tuple);
    if (hec)
        co_return false;
    std::uint64_t left = n;
    while (left > 0) {
        const auto piece =
            static_cast<std::size_t>(std::min<std::uint64_t>(left, download_block.size()));
        // The serializer only reads the buffer; buffer_body's pointer is not const.
        res.body().data = const_cast<char*>(download_block.data());
        res.body().size = piece;
        res.body().more = left > piece;
        beast::get_lowest_layer(s).expires_after(std::chrono::seconds(60));
        auto [ec, wn] = co_await http::async_write(s, sr, as_tuple);
        if (ec == http::error::need_buffer)
            ec = {};
        if (ec)
            co_return false;
        left -= piece;
    }
    co_return true;
}

// Mints a P-256 leaf for localhost/127.0.0.1 signed by the given CA and installs it.
bool use_minted_leaf(ssl::context& ctx, const std::string& ca_cert, const std::string& ca_key) {
    FILE* f = std::fopen(ca_cert.c_str(), "r");
    if (!f)
        return false;
    X509* ca = PEM_read_X509(f, nullptr, nullptr, nullptr);
    std::fclose(f);
    f = std::fopen(ca_key.c_str(), "r");
    if (!f || !ca)
        return false;
    EVP_PKEY* cakey = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
    std::fclose(f);
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* x = X509_new();
    if (!cakey || !key || !x)
        return false;
    X509_set_version(x, X509_VERSION_3);
    unsigned char serial[8];
    RAND_bytes(serial, sizeof serial);
    serial[0] &= 0x7f;
    BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
    BN_free(bn);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 2 * 86400);
    X509_NAME* name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(ca));
    X509_set_pubkey(x, key);
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, ca, x, nullptr, nullptr, 0);
    for (auto [nid, value] : {std::pair{NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1"},
                              std::pair{NID_basic_constraints, "CA:FALSE"},
                              std::pair{NID_ext_key_usage, "serverAuth"}}) {
        X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
        if (!ext)
            return false;
        X509_add_ext(x, ext, -1);
        X509_EXTENSION_free(ext);
    }
    bool ok = X509_sign(x, cakey, EVP_sha256()) > 0 &&
              SSL_CTX_use_certificate(ctx.native_handle(), x) == 1 &&
              SSL_CTX_use_PrivateKey(ctx.native_handle(), key) == 1;
    X509_free(x);
    X509_free(ca);
    EVP_PKEY_free(key);
    EVP_PKEY_free(cakey);
    return ok;
}

net::awaitable<void> serve(tcp::socket socket, ssl::context& ctx) {
    beast::ssl_stream<beast::tcp_stream> s(beast::tcp_stream(std::move(socket)), ctx);
    beast::get_lowest_layer(s).expires_after(std::chrono::seconds(15));
    auto [hec] = co_await s.async_handshake(ssl::stream_base::server, as_tuple);
    if (hec)
        co_return;
    beast::flat_buffer buf;
    std::array<char, 64 * 1024> sink;
    http::response<http::string_body> res{http::status::ok, 11};
    res.set(http::field::server, "sluice_bench_origin");
    res.set(http::field::content_type, "application/json");
    res.body() = response_body;
    res.prepare_payload();
    http::response<http::string_body> bad_size{http::status::bad_request, 11};
    bad_size.set(http::field::server, "sluice_bench_origin");
    bad_size.set(http::field::content_type, "application/json");
    bad_size.body() = R"({"error":"bad /bytes/N size"})";
    bad_size.prepare_payload();
    for (;;) {
        http::request_parser<http::buffer_body> p;
        p.body_limit(boost::none);
        // Idle keep-alive connections are held as long as the harness wants (idle mode).
        beast::get_lowest_layer(s).expires_after(std::chrono::seconds(300));
        auto [ec, n] = co_await http::async_read_header(s, buf, p, as_tuple);
        if (ec)
            break;
        while (!p.is_done()) {
            p.get().body().data = sink.data();
            p.get().body().size = sink.size();
            beast::get_lowest_layer(s).expires_after(std::chrono::seconds(60));
            auto [bec, bn] = co_await http::async_read(s, buf, p, as_tuple);
            if (bec == http::error::need_buffer)
                continue;
            if (bec)
                co_return;
        }
        const bool keep = p.get().keep_alive();
        bool bad = false;
        auto size = p.get().method() == http::verb::get
                        ? download_size(std::string_view(p.get().target()), bad)
                        : std::nullopt;
        if (size) {
            if (!co_await send_download(s, *size, keep) || !keep)
                break;
            continue;
        }
        auto& answer = bad ? bad_size : res;
        answer.keep_alive(keep);
        auto [wec, wn] = co_await http::async_write(s, answer, as_tuple);
        if (wec || !keep)
            break;
    }
    beast::get_lowest_layer(s).expires_after(std::chrono::seconds(2));
    co_await s.async_shutdown(as_tuple);
}

void accept_loop(tcp::acceptor& acc, std::vector<std::unique_ptr<net::io_context>>& ctxs,
                 ssl::context& tls, std::atomic<std::size_t>& next) {
    auto& target = *ctxs[next++ % ctxs.size()];
    acc.async_accept(target, [&](boost::system::error_code ec, tcp::socket sock) {
        if (ec == net::error::operation_aborted)
            return;
        if (!ec) {
            sock.set_option(tcp::no_delay(true), ec);
            auto exec = sock.get_executor();
            net::co_spawn(exec, serve(std::move(sock), tls), net::detached);
        }
        accept_loop(acc, ctxs, tls, next);
    });
}

constexpr std::string_view usage =
    "usage: sluice_bench_origin [--listen 127.0.0.1:PORT] [--threads N]\n"
    "         (--cert FILE --key FILE | --ca-cert FILE --ca-key FILE)\n";

} // namespace

int main(int argc, char** argv) {
    std::string listen = "127.0.0.1:0", cert, key, ca_cert, ca_key;
    unsigned threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string_view a = argv[i];
        std::string v = argv[i + 1];
        if (a == "--listen")
            listen = v;
        else if (a == "--threads") {
            auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), threads);
            if (ec != std::errc{} || end != v.data() + v.size() || threads > 256)
                threads = 0; // a usage error below
        } else if (a == "--cert")
            cert = v;
        else if (a == "--key")
            key = v;
        else if (a == "--ca-cert")
            ca_cert = v;
        else if (a == "--ca-key")
            ca_key = v;
        else {
            std::cerr << usage;
            return 2;
        }
    }
    if (argc % 2 == 0 || threads == 0 || (cert.empty() && ca_cert.empty())) {
        std::cerr << usage;
        return 2;
    }
    ssl::context tls(ssl::context::tls_server);
    boost::system::error_code ec;
    if (!cert.empty()) {
        tls.use_certificate_chain_file(cert, ec);
        if (!ec)
            tls.use_private_key_file(key, ssl::context::pem, ec);
        if (ec) {
            std::cerr << "cannot load certificate: " << ec.message() << '\n';
            return 2;
        }
    } else if (!use_minted_leaf(tls, ca_cert, ca_key)) {
        std::cerr << "cannot mint a leaf from " << ca_cert << '\n';
        return 2;
    }

    auto colon = listen.rfind(':');
    if (colon == std::string::npos) {
        std::cerr << usage;
        return 2;
    }
    unsigned short port = 0;
    auto address = net::ip::make_address(listen.substr(0, colon), ec);
    auto [end, pec] =
        std::from_chars(listen.data() + colon + 1, listen.data() + listen.size(), port);
    if (ec || pec != std::errc{} || end != listen.data() + listen.size()) {
        std::cerr << "bad --listen " << listen << '\n' << usage;
        return 2;
    }
    tcp::endpoint ep(address, port);
    std::vector<std::unique_ptr<net::io_context>> ctxs;
    for (unsigned i = 0; i < threads; ++i)
        ctxs.push_back(std::make_unique<net::io_context>(1));
    tcp::acceptor acc(*ctxs[0], ep);
    acc.listen(4096);
    std::atomic<std::size_t> next{0};
    accept_loop(acc, ctxs, tls, next);
    // SIGTERM/SIGINT stop every context (the harness ends the origin that way).
    net::signal_set signals(*ctxs[0], SIGTERM, SIGINT);
    signals.async_wait([&](boost::system::error_code, int) {
        for (auto& c : ctxs)
            c->stop();
    });
    std::printf("listening %u\n", static_cast<unsigned>(acc.local_endpoint().port()));
    std::fflush(stdout);
    std::vector<std::thread> pool;
    std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
    for (auto& c : ctxs)
        guards.push_back(net::make_work_guard(*c));
    for (std::size_t i = 1; i < ctxs.size(); ++i)
        pool.emplace_back([&c = *ctxs[i]] { c.run(); });
    ctxs[0]->run();
    for (auto& t : pool)
        t.join();
    return 0;
}
