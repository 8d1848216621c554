// The secret masker on a download (issue 23): every response byte of a flow with brokered
// credentials goes through secret_masker::feed, so its bytes/s bound the download rate.
// Bodies are fed in the relay's 16 KiB reads (proxy/src/flow_context.hpp relay_chunk).
//
// The bytes: $SLUICE_BENCH_CORPUS when set (a corpus.bin of
// ../shared/tools/make-corpus, agent-like text), else 64 MiB of pseudo-random bytes (a
// package tarball's entropy). The secrets: 1, 4 or 16 brokered secrets, each with every
// reflection_forms() echo (about ten forms each), as credential_broker gives the proxy.
// One secret is planted every MiB, so the masking path is taken too; the counter
// `masked` must be the planted bytes. masker_compile: the cost of building the set.
//
//   SLUICE_BENCH_CORPUS=/tmp/corpus64/corpus.bin build/bench/masker_bench
#include "bench_support.hpp"

#include "sluice/dlp/credential_broker.hpp"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

const std::string& body() {
    static const std::string b = [] {
        std::string out;
        if (const char* p = std::getenv("SLUICE_BENCH_CORPUS"))
            out = sluice::bench::read_whole(p);
        if (out.empty()) {
            std::mt19937_64 rng(1);
            out.resize(64u << 20);
            for (std::size_t i = 0; i + 8 <= out.size(); i += 8) {
                const auto v = rng();
                for (int k = 0; k < 8; ++k)
                    out[i + k] = static_cast<char>(v >> (8 * k));
            }
        }
        return out;
    }();
    return b;
}

std::string secret(int i) {
    return "sk-proj-brokered" + std::to_string(1000 + i) + "Zq7Xw2Lm9Pv4Rt8Ys3Kd6Hf1Jb5";
}

void masker_download(benchmark::State& state) {
    const int n = static_cast<int>(state.range(0));
    std::vector<sluice::dlp::brokered_credential> creds;
    for (int i = 0; i < n; ++i) {
        sluice::dlp::brokered_credential c;
        c.name = "c" + std::to_string(i);
        c.placeholder = "sluice:c" + std::to_string(i);
        c.secret = secret(i);
        creds.push_back(std::move(c));
    }
    const sluice::dlp::credential_broker broker(std::move(creds));
    std::string data = body();
    std::size_t planted = 0;
    for (std::size_t at = 4096; at + 64 < data.size(); at += 1u << 20) {
        const std::string s = secret(static_cast<int>(at >> 20) % n);
        data.replace(at, s.size(), s);
        planted += s.size();
    }
    constexpr std::size_t chunk = 16 * 1024;
    std::size_t masked = 0;
    for (auto _ : state) {
        sluice::dlp::secret_masker m(broker.reflection_index());
        std::size_t out = 0;
        for (std::size_t at = 0; at < data.size(); at += chunk) {
            const auto piece = std::string_view(data).substr(at, chunk);
            out += m.feed(piece, at + chunk >= data.size()).size();
        }
        benchmark::DoNotOptimize(out);
        masked = m.masked();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * data.size()));
    state.counters["reflections"] = static_cast<double>(broker.reflections().size());
    state.counters["masked"] = static_cast<double>(masked);
    state.counters["planted"] = static_cast<double>(planted);
}
BENCHMARK(masker_download)->Arg(1)->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond);

// What a configuration load or reload pays per credential set: the reflection forms and
// the Hyperscan compile of their windows (credential_broker's constructor).
void masker_compile(benchmark::State& state) {
    const int n = static_cast<int>(state.range(0));
    for (auto _ : state) {
        std::vector<sluice::dlp::brokered_credential> creds;
        for (int i = 0; i < n; ++i) {
            sluice::dlp::brokered_credential c;
            c.name = "c" + std::to_string(i);
            c.secret = secret(i);
            creds.push_back(std::move(c));
        }
        const sluice::dlp::credential_broker broker(std::move(creds));
        benchmark::DoNotOptimize(broker.reflection_index().get());
    }
}
BENCHMARK(masker_compile)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
