// Coverage glue between GCC's -fsanitize-coverage=trace-pc,trace-cmp and libFuzzer 14.
// Only linked in SLUICE_FUZZ builds, and compiled without coverage instrumentation
// (fuzz/CMakeLists.txt), so nothing here calls back into itself.
//
// libFuzzer 14 no longer consumes trace-pc: its own __sanitizer_cov_trace_pc prints
// "-fsanitize-coverage=trace-pc is no longer supported by libFuzzer" and exits.
// fuzz/CMakeLists.txt links a copy of the libFuzzer archive in which that symbol is
// weak, so the strong definition below wins. It does what AFL does: every instrumented
// basic block calls it, the call's return address identifies the block, and the pair
// (previous block, this block) is hashed into a 64 KiB array of 8-bit edge counters.
// That array is registered with libFuzzer as one module of inline 8-bit counters, which
// is what libFuzzer's feature collection ("ft:") reads. A matching PC table whose
// "PCs" are simply the slot numbers is registered too, so "cov:" counts the edge slots
// seen so far; those are hashes, not addresses, so -print_pcs / -print_coverage /
// -print_funcs output is meaningless for these binaries.
//
// trace-cmp is handled by libFuzzer itself (__sanitizer_cov_trace_cmp*, switch) and
// feeds its compare tables and -use_value_profile.
#include <cstddef>
#include <cstdint>

namespace {

constexpr std::size_t kMapBits = 16;
constexpr std::size_t kMapSize = std::size_t{1} << kMapBits; // 64 KiB of counters

alignas(4096) std::uint8_t edge_counters[kMapSize];

// libFuzzer's PC table layout: {PC, flags} per counter; flag bit 0 marks a function
// entry, which none of these slots claims to be.
struct pc_table_entry {
    std::uintptr_t pc;
    std::uintptr_t flags;
};
pc_table_entry edge_pc_table[kMapSize];

thread_local std::uintptr_t previous_location = 0;

} // namespace

extern "C" {

void __sanitizer_cov_8bit_counters_init(std::uint8_t* begin, std::uint8_t* end);
void __sanitizer_cov_pcs_init(const std::uintptr_t* begin, const std::uintptr_t* end);

__attribute__((no_sanitize("address", "undefined"), no_sanitize_coverage, hot)) void
__sanitizer_cov_trace_pc() {
    const auto pc = reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
    // Fibonacci hashing spreads nearby call sites over the whole map.
    const std::uintptr_t location =
        (static_cast<std::uint64_t>(pc) * 0x9E3779B97F4A7C15ull) >> (64 - kMapBits);
    ++edge_counters[(location ^ previous_location) & (kMapSize - 1)];
    // Shifted so that A->B and B->A, and tight loops A->A, land in different slots.
    previous_location = location >> 1;
}

// GCC's -fsanitize-coverage=trace-cmp also instruments floating-point comparisons
// (__sanitizer_cov_trace_cmpf/cmpd), which libFuzzer 14 does not define; integer
// comparisons, which libFuzzer does use, are unaffected.
void __sanitizer_cov_trace_cmpf(float, float) {}
void __sanitizer_cov_trace_cmpd(double, double) {}

} // extern "C"

namespace {

// libFuzzer reads its modules in FuzzerDriver (from main), after every static
// constructor; the TracePC fields these calls fill are zero-initialised, not touched by
// libFuzzer's own constructor, so the order among constructors does not matter.
__attribute__((constructor, no_sanitize_coverage)) void register_edge_counters() {
    for (std::size_t i = 0; i < kMapSize; ++i)
        edge_pc_table[i] = {i + 1, 0};
    __sanitizer_cov_8bit_counters_init(edge_counters, edge_counters + kMapSize);
    __sanitizer_cov_pcs_init(reinterpret_cast<const std::uintptr_t*>(edge_pc_table),
                             reinterpret_cast<const std::uintptr_t*>(edge_pc_table + kMapSize));
}

} // namespace
