// The first-flight check of an opaque tunnel (issue 25): every `inspect: false` tunnel
// reads its client's ClientHello through client_hello_probe (proxy/src/client_hello.hpp,
// OpenSSL in a throwaway server SSL) before a byte goes upstream. What one check costs
// is what an opaque CONNECT pays once. The hellos are a real OpenSSL client's (TLS 1.3
// with its default key shares, and TLS 1.2), fed whole or in 64-byte pieces.
//
//   build/bench/client_hello_bench
#include "client_hello.hpp"

#include <benchmark/benchmark.h>
#include <openssl/ssl.h>

#include <memory>
#include <string>

namespace {

std::string client_hello(int max_version) {
    std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                          SSL_CTX_free);
    if (max_version != 0)
        SSL_CTX_set_max_proto_version(ctx.get(), max_version);
    std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl.get(), in, out);
    SSL_set_tlsext_host_name(ssl.get(), "api.example.com");
    SSL_set_connect_state(ssl.get());
    SSL_do_handshake(ssl.get());
    std::string hello;
    char buf[512];
    for (int n; (n = BIO_read(out, buf, sizeof buf)) > 0;)
        hello.append(buf, static_cast<std::size_t>(n));
    return hello;
}

void probe(benchmark::State& state) {
    const std::string hello = client_hello(state.range(0) == 13 ? 0 : TLS1_2_VERSION);
    const auto piece = static_cast<std::size_t>(state.range(1));
    for (auto _ : state) {
        sluice::proxy::client_hello_probe p;
        for (std::size_t at = 0; at < hello.size(); at += piece)
            p.feed(std::string_view(hello).substr(at, piece));
        if (p.current() != sluice::proxy::client_hello_probe::state::named)
            state.SkipWithError("the hello was not read");
        benchmark::DoNotOptimize(p.name().data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * hello.size()));
    state.counters["hello_bytes"] = static_cast<double>(hello.size());
}

} // namespace

// {TLS version, bytes per feed}
BENCHMARK(probe)->Args({13, 1 << 20})->Args({12, 1 << 20})->Args({13, 64});

BENCHMARK_MAIN();
