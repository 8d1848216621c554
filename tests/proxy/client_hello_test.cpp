// client_hello_probe (proxy/src/client_hello.hpp): the server name of the first flight of
// an opaque tunnel. The ClientHellos are written by a real OpenSSL client (TLS 1.3 and
// TLS 1.2, with and without a server name) over memory BIOs; nothing is hand-built but
// the broken inputs.
#include "client_hello.hpp"

#include <openssl/ssl.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace {

using sluice::proxy::client_hello_probe;
using st = client_hello_probe::state;

// The first flight of an OpenSSL client that asks for `name` (none when empty).
std::string client_hello(const std::string& name, int max_version = 0) {
    std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                          SSL_CTX_free);
    if (max_version != 0)
        SSL_CTX_set_max_proto_version(ctx.get(), max_version);
    std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl.get(), in, out);
    if (!name.empty())
        SSL_set_tlsext_host_name(ssl.get(), name.c_str());
    SSL_set_connect_state(ssl.get());
    EXPECT_EQ(SSL_do_handshake(ssl.get()), -1); // waits for the server's answer
    std::string hello;
    char buf[512];
    for (int n; (n = BIO_read(out, buf, sizeof buf)) > 0;)
        hello.append(buf, static_cast<std::size_t>(n));
    return hello;
}

TEST(client_hello_probe, reads_the_server_name_a_real_client_sends) {
    for (int version : {0, TLS1_2_VERSION}) {
        client_hello_probe p;
        EXPECT_EQ(p.feed(client_hello("api.example.com", version)), st::named);
        EXPECT_EQ(p.name(), "api.example.com");
        // A fatal alert record (type 21) for the client: unrecognized_name (112).
        ASSERT_EQ(p.alert().size(), 7u);
        EXPECT_EQ(static_cast<unsigned char>(p.alert()[0]), 21);
        EXPECT_EQ(static_cast<unsigned char>(p.alert()[5]), 2);
        EXPECT_EQ(static_cast<unsigned char>(p.alert()[6]), 112);
    }
}

TEST(client_hello_probe, a_client_hello_without_a_server_name_is_unnamed) {
    client_hello_probe p;
    EXPECT_EQ(p.feed(client_hello("")), st::unnamed);
    EXPECT_TRUE(p.name().empty());
}

TEST(client_hello_probe, a_hello_fed_byte_by_byte_is_named_at_its_last_byte_and_not_before) {
    const std::string hello = client_hello("other.example");
    client_hello_probe p;
    for (std::size_t i = 0; i + 1 < hello.size(); ++i)
        ASSERT_EQ(p.feed(hello.substr(i, 1)), st::need_more) << "at byte " << i;
    EXPECT_EQ(p.feed(hello.substr(hello.size() - 1)), st::named);
    EXPECT_EQ(p.name(), "other.example");
    EXPECT_EQ(p.feed("more bytes"), st::named) << "the state no longer changes";
}

TEST(client_hello_probe, bytes_that_do_not_open_with_a_handshake_record_are_not_tls) {
    for (const char* first : {"GET / HTTP/1.1\r\n", "SSH-2.0-OpenSSH_9.2\r\n", "\x80\x2e\x01"}) {
        client_hello_probe p;
        EXPECT_EQ(p.feed(first), st::not_tls) << first;
    }
}

TEST(client_hello_probe, another_tls_record_before_the_hello_is_malformed_not_passed) {
    const std::string hello = client_hello("localhost");
    for (const std::string& first :
         {std::string("\x15\x03\x01\x00\x02\x01\x5a", 7),
          std::string("\x14\x03\x03\x00\x01\x01", 6), std::string("\x17\x03\x03\x00\x00", 5),
          std::string("\x18\x03\x03\x00\x00", 5)}) {
        client_hello_probe p;
        EXPECT_EQ(p.feed(first + hello), st::malformed)
            << static_cast<int>(static_cast<unsigned char>(first[0]));
    }
}

TEST(client_hello_probe, a_broken_or_endless_handshake_is_malformed) {
    {
        client_hello_probe p; // a handshake record whose message is not a ClientHello
        EXPECT_EQ(p.feed(std::string("\x16\x03\x01\x00\x06\x02\x00\x00\x02\xff\xff", 11)),
                  st::malformed);
    }
    {
        client_hello_probe p; // a ClientHello cut into garbage
        std::string hello = client_hello("api.example.com");
        for (std::size_t i = 60; i < hello.size(); ++i)
            hello[i] = 'A';
        EXPECT_EQ(p.feed(hello), st::malformed);
    }
    {
        // A ClientHello that declares 64 KiB and never ends, in full-size records: it
        // stops at max_hello at the latest, never waits for ever.
        client_hello_probe p;
        std::string record("\x16\x03\x01\x40\x00", 5);
        std::string body(16384, 'A');
        body.replace(0, 4, std::string("\x01\x00\xff\xff", 4));
        st s = p.feed(record + body);
        body.assign(16384, 'A');
        for (int i = 0; i < 8 && s == st::need_more; ++i)
            s = p.feed(record + body);
        EXPECT_EQ(s, st::malformed);
    }
}

} // namespace
