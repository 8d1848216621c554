// ascii85 decoder (decode.hpp) on arbitrary bytes: at most 4 bytes per character
// ('z'), and a success decodes something.
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
    const bool ok = decode::ascii85(in, out);
    if (out.size() > in.size() * 4 || (ok && out.empty()))
        std::abort();
    return 0;
}
