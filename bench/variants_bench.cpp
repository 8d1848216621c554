// The variant pipeline against the raw pass on the same corpus, single thread.
//
// Corpus: SLUICE_BENCH_CORPUS, else /tmp/corpus64/corpus.bin, else
// /tmp/sluice-corpus/corpus.bin, generated with
//     /work/shared/tools/make-corpus --out /tmp/corpus64 --size-mb 64 --seed 1
// Without a corpus the benchmarks skip with a message.
//
//   variants_raw          detectors::scanner::scan of the whole corpus (the raw pass)
//   variants_all          variant_scanner::scan with every decoder (what the proxy runs on
//                         a body without Content-Type extraction)
//   variants_only/family:N  the raw pass, the candidate pass and one decoder family (bit
//                         N of dlp::decoder_bits: 1 base64, 2 hex, 4 pct, 8 escape, 16
//                         html, 32 unicode; 0 = none, the candidate pass alone): a family's
//                         cost is the difference to family:0
//   variants_gzip_body    scan_body of the corpus gzip-compressed, Content-Encoding: gzip
//   variants_json_bodies  each corpus body through scan_body as application/json (the
//                         proxy's per-request path, JSON extraction included)
//
// Counters: bytes_per_second over the corpus size; candidates, decoded MB and scanned
// decoded buffers per pass; findings.
#include "bench_support.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/variants.hpp"

#include <benchmark/benchmark.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

const std::string& corpus() {
    static const std::string data = [] {
        std::vector<std::string> paths;
        if (const char* env = std::getenv("SLUICE_BENCH_CORPUS"))
            paths.emplace_back(env);
        paths.emplace_back("/tmp/corpus64/corpus.bin");
        paths.emplace_back("/tmp/sluice-corpus/corpus.bin");
        for (const auto& p : paths) {
            if (std::string bytes = sluice::bench::read_whole(p); !bytes.empty())
                return bytes;
        }
        return std::string();
    }();
    return data;
}

using sluice::bench::builtin;

bool ready(benchmark::State& state) {
    if (corpus().empty()) {
        state.SkipWithError("no corpus: set SLUICE_BENCH_CORPUS or run "
                            "/work/shared/tools/make-corpus --out /tmp/corpus64 --size-mb 64 "
                            "--seed 1");
        return false;
    }
    if (!builtin()) {
        state.SkipWithError("built-in rules failed to load or compile");
        return false;
    }
    return true;
}

// A budget that scales with the input, as `sluice scan` uses on files.
sluice::dlp::variant_options file_options(unsigned enabled) {
    sluice::dlp::variant_options o;
    o.enabled = enabled;
    o.budget.max_decoded_bytes = std::size_t(-1);
    o.budget.max_candidates = std::size_t(-1);
    return o;
}

void variants_raw(benchmark::State& state) {
    if (!ready(state))
        return;
    sluice::detectors::scanner s(builtin());
    std::vector<sluice::detectors::finding> out;
    for (auto _ : state) {
        out.clear();
        if (!s.scan(corpus(), out))
            state.SkipWithError("scan failed");
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * corpus().size()));
    state.counters["findings"] = static_cast<double>(out.size());
}
BENCHMARK(variants_raw)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void run_variants(benchmark::State& state, unsigned enabled) {
    if (!ready(state))
        return;
    sluice::detectors::scanner s(builtin());
    sluice::dlp::variant_scanner vs(s, file_options(enabled));
    std::vector<sluice::dlp::variant_finding> out;
    sluice::dlp::variant_scanner::stats st;
    for (auto _ : state) {
        out.clear();
        vs.reset();
        if (vs.scan(corpus(), "body", out) != sluice::dlp::variant_status::ok)
            state.SkipWithError("variant scan did not complete");
        st = vs.counters();
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * corpus().size()));
    state.counters["findings"] = static_cast<double>(out.size());
    state.counters["candidates"] = static_cast<double>(st.candidates);
    state.counters["decoded_MB"] = static_cast<double>(st.decoded_bytes) / 1e6;
    state.counters["scanned_variants"] = static_cast<double>(st.scanned_variants);
}

void variants_all(benchmark::State& state) {
    run_variants(state, sluice::dlp::dec_all);
}
BENCHMARK(variants_all)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void variants_only(benchmark::State& state) {
    run_variants(state, static_cast<unsigned>(state.range(0)));
}
BENCHMARK(variants_only)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->ArgName("family")
    ->Arg(0) // none: the candidate pass alone (classification, no decoder)
    ->Arg(sluice::dlp::dec_base64)
    ->Arg(sluice::dlp::dec_hex)
    ->Arg(sluice::dlp::dec_pct)
    ->Arg(sluice::dlp::dec_escape)
    ->Arg(sluice::dlp::dec_html)
    ->Arg(sluice::dlp::dec_unicode)
    ->Arg(sluice::dlp::dec_base64 | sluice::dlp::dec_scattered);

std::string gzip(std::string_view in) {
    z_stream zs{};
    deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    std::string out(deflateBound(&zs, static_cast<uLong>(in.size())) + 64, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    deflate(&zs, Z_FINISH);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
}

void variants_gzip_body(benchmark::State& state) {
    if (!ready(state))
        return;
    static const std::string gz = gzip(corpus());
    sluice::detectors::scanner s(builtin());
    sluice::dlp::variant_scanner vs(s, file_options(sluice::dlp::dec_all));
    std::vector<sluice::dlp::variant_finding> out;
    for (auto _ : state) {
        out.clear();
        vs.reset();
        if (vs.scan_body(gz, "text/plain", "gzip", out) != sluice::dlp::variant_status::ok)
            state.SkipWithError("variant scan did not complete");
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * corpus().size()));
    state.counters["compressed_MB"] = static_cast<double>(gz.size()) / 1e6;
}
BENCHMARK(variants_gzip_body)->Unit(benchmark::kMillisecond)->MinTime(1.0);

// The corpus' individual JSON bodies (make-corpus writes them to <out>/bodies/), each
// through scan_body as application/json: what the proxy does per request, including
// the JSON extraction of bodies with escapes.
const std::vector<std::string>& bodies() {
    static const std::vector<std::string> all = [] {
        std::vector<std::string> out;
        std::error_code ec;
        for (const char* dir : {"/tmp/corpus64/bodies", "/tmp/sluice-corpus/bodies"}) {
            if (!std::filesystem::is_directory(dir, ec))
                continue;
            std::vector<std::filesystem::path> files;
            for (const auto& e : std::filesystem::directory_iterator(dir, ec))
                files.push_back(e.path());
            std::sort(files.begin(), files.end());
            for (const auto& f : files)
                out.push_back(sluice::bench::read_whole(f.string()));
            break;
        }
        return out;
    }();
    return all;
}

void variants_json_bodies(benchmark::State& state) {
    if (!ready(state))
        return;
    if (bodies().empty()) {
        state.SkipWithError("no corpus bodies directory");
        return;
    }
    sluice::detectors::scanner s(builtin());
    std::size_t bytes = 0;
    for (const auto& b : bodies())
        bytes += b.size();
    std::vector<sluice::dlp::variant_finding> out;
    sluice::dlp::variant_options opts;
    opts.joined = state.range(0) != 0;
    std::size_t findings = 0;
    for (auto _ : state) {
        findings = 0;
        sluice::dlp::message_ends previous;
        for (const auto& b : bodies()) {
            sluice::dlp::variant_scanner vs(s, opts); // per request, default budget
            out.clear();
            if (vs.scan_body(b, "application/json", "", out) != sluice::dlp::variant_status::ok)
                state.SkipWithError("variant scan did not complete");
            // As the proxy does: each body's seam with the one before (dlp/seam.hpp).
            if (vs.scan_seam(previous, vs.ends(), "body", out) != sluice::dlp::variant_status::ok)
                state.SkipWithError("seam scan did not complete");
            previous = vs.ends();
            findings += out.size();
        }
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
    state.counters["bodies"] = static_cast<double>(bodies().size());
    // On the clean corpus every finding is a false positive.
    state.counters["findings"] = static_cast<double>(findings);
}
// /1: with the joined views and seams of issue 21 (the proxy's setting); /0: without, for
// their cost.
BENCHMARK(variants_json_bodies)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->MinTime(1.0);

} // namespace

BENCHMARK_MAIN();
