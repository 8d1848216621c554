// single-separator remover (decode.hpp) on arbitrary bytes: the output is the bytes at
// even offsets, so never more than half the input rounded up.
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
    const bool ok = decode::unspace(in, out);
    if (out.size() > (in.size() + 1) / 2 || ok != !out.empty())
        std::abort();
    for (std::size_t i = 0; ok && i < out.size(); ++i)
        if (out[i] != in[2 * i])
            std::abort();
    return 0;
}
