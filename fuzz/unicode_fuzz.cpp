// Unicode folding on arbitrary bytes: ASCII input is unchanged and the output stays
// within a generous bound (U+FDFA, 3 bytes, decomposes to 18 code points: 12x; 32x
// leaves room for skeletons) and folding never fails.
#include "sluice/dlp/decode.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::string out;
    const bool changed = decode::fold_unicode(in, out);
    bool ascii = true;
    for (const char c : in)
        ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii && (changed || out != in))
        std::abort();
    if (out.size() > in.size() * 32 + 16)
        std::abort();
    return 0;
}
