// git pushes and archives through the variant pipeline (issue 21), single thread.
//
// Input: the clean corpus's bodies directory (SLUICE_BENCH_BODIES, else
// /tmp/corpus64/bodies, else /tmp/corpus16/bodies), made with
//     /work/shared/tools/make-corpus --out /tmp/corpus64 --size-mb 64 --seed 1
// The bodies are committed to a throwaway repository by the real `git` and packed with
// `git pack-objects` (what `git push` sends), and archived by the real `tar` (tar.gz).
// Without git, tar or a corpus the benchmarks skip with a message.
//
//   containers_git_push   scan_body of a receive-pack request (commands + the pack)
//   containers_tar_gz     scan_body of the tar.gz, no Content-Type
//
// bytes_per_second is over the request body as sent (compressed); the counter
// "inflated_MB" gives the bytes of the files inside, "findings" the false positives.
#include "bench_support.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/variants.hpp"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace {

namespace fs = std::filesystem;

std::string sh(const std::string& cmd) {
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr)
        return out;
    char buf[65536];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
        out.append(buf, n);
    return ::pclose(p) == 0 ? out : std::string();
}

std::string bodies_dir() {
    if (const char* env = std::getenv("SLUICE_BENCH_BODIES"))
        return env;
    for (const char* d : {"/tmp/corpus64/bodies", "/tmp/corpus16/bodies"})
        if (fs::is_directory(d))
            return d;
    return {};
}

struct inputs {
    std::string push;   // a receive-pack request body
    std::string tar_gz; // the bodies as a tar.gz
    std::size_t files = 0;
};

const inputs& made() {
    static const inputs in = [] {
        inputs r;
        const std::string dir = bodies_dir();
        if (dir.empty())
            return r;
        for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir))
            r.files += fs::file_size(e.path());
        const fs::path repo = fs::temp_directory_path() / "sluice-containers-bench";
        fs::remove_all(repo);
        const std::string q = "'" + repo.string() + "'";
        const std::string git = "git -C " + q + " -c user.name=b -c user.email=b@example.com ";
        if (sh("git init -q -b main " + q + " && cp -r '" + dir + "' " + q + "/bodies && " + git +
               "add -A && " + git + "commit -q -m corpus && echo ok") != "ok\n")
            return r;
        const std::string pack = sh("echo HEAD | git -C " + q + " pack-objects -q --stdout --revs");
        const std::string head = sh("git -C " + q + " rev-parse HEAD");
        if (pack.empty() || head.size() < 40)
            return r;
        std::string cmd = std::string(40, '0') + " " + head.substr(0, 40) + " refs/heads/main" +
                          std::string(1, '\0') + "report-status\n";
        char len[5];
        std::snprintf(len, sizeof len, "%04zx", cmd.size() + 4);
        r.push = std::string(len, 4) + cmd + "0000" + pack;
        r.tar_gz = sh("tar -C " + q + " -czf - bodies");
        fs::remove_all(repo);
        return r;
    }();
    return in;
}

using sluice::bench::builtin;

void run(benchmark::State& state, const std::string& body, std::string_view type) {
    if (body.empty() || !builtin()) {
        state.SkipWithError("no input: make the corpus (see the header) and install git, tar");
        return;
    }
    sluice::detectors::scanner s(builtin());
    sluice::dlp::variant_options o;
    o.budget.max_decoded_bytes = std::size_t(-1); // as `sluice scan` on files
    o.budget.max_candidates = std::size_t(-1);
    sluice::dlp::variant_scanner vs(s, o);
    std::vector<sluice::dlp::variant_finding> out;
    for (auto _ : state) {
        out.clear();
        vs.reset();
        if (vs.scan_body(body, type, "", out) != sluice::dlp::variant_status::ok)
            state.SkipWithError("scan did not complete");
        benchmark::DoNotOptimize(out.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
    state.counters["inflated_MB"] = static_cast<double>(made().files) / 1e6;
    state.counters["findings"] = static_cast<double>(out.size());
}

void containers_git_push(benchmark::State& state) {
    run(state, made().push, "application/x-git-receive-pack-request");
}
BENCHMARK(containers_git_push)->Unit(benchmark::kMillisecond)->MinTime(1.0);

void containers_tar_gz(benchmark::State& state) {
    run(state, made().tar_gz, "");
}
BENCHMARK(containers_tar_gz)->Unit(benchmark::kMillisecond)->MinTime(1.0);

} // namespace

BENCHMARK_MAIN();
