// git smart-HTTP bodies (dlp/git.hpp) on arbitrary bytes: the first byte picks the reader
// (a receive-pack request, a bare pack, an advertisement to add no-thin to). Nothing
// crashes or leaks; every object is visited once with a "git:" location; an advertisement
// that is rewritten grows by exactly " no-thin" and is not rewritten twice.
#include "sluice/dlp/git.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0)
        return 0;
    const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    const auto each = [](std::string_view where, std::string_view) {
        if (!where.starts_with("git:"))
            std::abort();
        return true;
    };
    switch (data[0] % 3) {
    case 0:
        (void)git::read_receive_pack(in, 1u << 20, each);
        break;
    case 1:
        (void)git::read_pack(in, 1u << 20, each);
        break;
    default:
        if (auto out = git::advertise_no_thin(in)) {
            if (out->size() != in.size() + 8 || git::advertise_no_thin(*out))
                std::abort();
        }
        break;
    }
    return 0;
}
