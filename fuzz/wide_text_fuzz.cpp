// UTF-16/UTF-32 sniffing and conversion through ICU (decode.hpp) on arbitrary bytes:
// the output is bounded by the buffer wide_text sizes for it.
#include "sluice/dlp/decode.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::string out;
    const char* enc = decode::sniff_wide(in);
    for (const char* e : {enc, "UTF-16LE", "UTF-16BE", "UTF-32LE", "UTF-32BE"}) {
        if (!e)
            continue;
        const bool ok = decode::wide_text(in, e, out);
        if (out.size() > in.size() * 2 + 4 || ok != !out.empty())
            std::abort();
    }
    return 0;
}
