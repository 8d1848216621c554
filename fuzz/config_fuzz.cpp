// Feeds arbitrary bytes to config::load_string: it must return settings or diagnostics,
// never crash, hang or throw (yaml-cpp exceptions are caught inside the loader).
#include "sluice/config/settings.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    sluice::config::load_options opts;
    opts.data_dir_override = "/nonexistent/sluice-fuzz";
    auto r = sluice::config::load_string(text, "fuzz.yaml", opts);
    if (!r) {
        for (const auto& d : r.error()) {
            // Every diagnostic has a file and a 1-based position or none at all.
            if (d.file.empty() || d.line < 0 || d.column < 0 || (d.line > 0 && d.column == 0)) {
                __builtin_trap();
            }
        }
    } else if (r->listeners.empty() || r->rules == nullptr) {
        __builtin_trap(); // a successful load always has a listener and compiled rules
    }
    return 0;
}
