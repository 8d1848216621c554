// The archive walker (dlp/archive.hpp) on arbitrary bytes: zip, tar, 7z, RAR, cpio, ar,
// ISO 9660, xar, cabinet, xz/lz4/compress layers, and zips after other bytes. Nothing
// crashes or leaks; the members handed out never exceed the budget; a name list comes
// last for each archive, and a walk that found members never says not_archive.
#include "sluice/dlp/archive.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    constexpr std::size_t budget = 4u << 20;
    std::size_t handed = 0;
    bool any = false;
    const auto each = [&](std::string_view format, std::string_view, std::string_view bytes) {
        if (format.empty())
            std::abort();
        handed += bytes.size();
        any = true;
        return true;
    };
    const auto st = archive::read_archives(in, budget, 4, each);
    if (handed > budget || (any && st == archive::read_status::not_archive))
        std::abort();
    if (st != archive::read_status::not_archive && !archive::may_hold_archive(in))
        std::abort();
    return 0;
}
