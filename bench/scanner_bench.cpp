// Detector throughput on a realistic corpus, single thread.
//
// Corpus: the file named by SLUICE_BENCH_CORPUS, or by default /tmp/sluice-corpus/corpus.bin,
// generated with
//     /work/shared/tools/make-corpus --out /tmp/sluice-corpus --size-mb 64 --seed 1
// (../shared/tools/make-corpus from the repository root). Without a corpus the benchmarks
// skip with a message.
//
//   scanner_full    the whole engine with the built-in rules: Hyperscan block scan, RE2
//                   confirmation of each hit, validators, fingerprints (what the proxy runs)
//   scanner_planted the same on a copy of the corpus with one rule example written over it
//                   every 64 KiB (about 1000 findings in 64 MiB): the cost of confirmation,
//                   validation and fingerprints when there is something to find
//   hs_scan_bare    hs_scan of the same Hyperscan database with a no-op callback: the
//                   ceiling the engine is measured against (issue 3 wants >= 90% of it)
//
// Counters: bytes_per_second (Google Benchmark), compile_ms of the ruleset, findings.
#include "../detectors/src/detail/ruleset_impl.hpp"
#include "bench_support.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

namespace {

const std::string& corpus() {
    static const std::string data = [] {
        const char* env = std::getenv("SLUICE_BENCH_CORPUS");
        const std::string path = env != nullptr ? env : "/tmp/sluice-corpus/corpus.bin";
        return sluice::bench::read_whole(path);
    }();
    return data;
}

using sluice::bench::builtin;

bool ready(benchmark::State& state) {
    if (corpus().empty()) {
        state.SkipWithError(
            "no corpus: set SLUICE_BENCH_CORPUS or run /work/shared/tools/make-corpus "
            "--out /tmp/sluice-corpus --size-mb 64 --seed 1");
        return false;
    }
    if (!builtin()) {
        state.SkipWithError("built-in rules failed to load or compile");
        return false;
    }
    return true;
}

void scanner_full(benchmark::State& state) {
    if (!ready(state))
        return;
    sluice::detectors::scanner s(builtin());
    std::vector<sluice::detectors::finding> out;
    const std::string& data = corpus();
    for (auto _ : state) {
        out.clear();
        if (!s.scan(data, out))
            state.SkipWithError("scan failed");
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                            static_cast<std::int64_t>(data.size()));
    state.counters["findings"] = static_cast<double>(out.size());
    state.counters["compile_ms"] = builtin()->compile_ms();
    state.counters["rules"] = static_cast<double>(builtin()->rules().size());
}

const std::string& planted() {
    static const std::string data = [] {
        std::string copy = corpus();
        std::vector<std::string> examples;
        for (const auto& r : builtin()->rules()) {
            for (const auto& ex : r.examples)
                examples.push_back(" " + ex + " ");
        }
        std::size_t k = 0;
        for (std::size_t at = 4096; !examples.empty() && at + 8192 < copy.size(); at += 65536) {
            const auto& ex = examples[k++ % examples.size()];
            copy.replace(at, ex.size(), ex);
        }
        return copy;
    }();
    return data;
}

void scanner_planted(benchmark::State& state) {
    if (!ready(state))
        return;
    sluice::detectors::scanner s(builtin());
    std::vector<sluice::detectors::finding> out;
    const std::string& data = planted();
    for (auto _ : state) {
        out.clear();
        if (!s.scan(data, out))
            state.SkipWithError("scan failed");
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                            static_cast<std::int64_t>(data.size()));
    state.counters["findings"] = static_cast<double>(out.size());
}

// Per-call cost on header-sized inputs (the proxy scans each header value on its own).
void scanner_small(benchmark::State& state) {
    if (!ready(state))
        return;
    sluice::detectors::scanner s(builtin());
    std::vector<sluice::detectors::finding> out;
    const std::size_t size = static_cast<std::size_t>(state.range(0));
    const std::string_view data = std::string_view(corpus()).substr(1 << 20, size);
    for (auto _ : state) {
        out.clear();
        s.scan(data, out);
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                            static_cast<std::int64_t>(size));
}

int count_match(unsigned, unsigned long long, unsigned long long, unsigned, void* ctx) {
    ++*static_cast<std::size_t*>(ctx);
    return 0;
}

void hs_scan_bare(benchmark::State& state) {
    if (!ready(state))
        return;
    const auto& impl = builtin()->impl();
    hs_scratch_t* scratch = nullptr;
    hs_alloc_scratch(impl.db.get(), &scratch);
    const std::string& data = corpus();
    std::size_t hits = 0;
    for (auto _ : state) {
        hits = 0;
        hs_scan(impl.db.get(), data.data(), static_cast<unsigned>(data.size()), 0, scratch,
                count_match, &hits);
        benchmark::DoNotOptimize(hits);
    }
    hs_free_scratch(scratch);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                            static_cast<std::int64_t>(data.size()));
    state.counters["raw_hits"] = static_cast<double>(hits);
}

BENCHMARK(scanner_full)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(scanner_planted)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(scanner_small)->Arg(64)->Arg(1024)->Arg(16384);
BENCHMARK(hs_scan_bare)->Unit(benchmark::kMillisecond)->MinTime(2.0);

} // namespace

BENCHMARK_MAIN();
