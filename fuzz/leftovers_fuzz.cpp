// Content-Encoding decoders and their leftovers (decode::leftovers) on arbitrary bytes:
// the first byte picks the coding, the output limit and where the input is split for the
// streaming decoder. Checks: the output never exceeds the limit; every leftover is a copy
// of input bytes (a decoder reports only what it was given, never invented or decoded
// bytes) and at most 1 MiB; decoding in two pieces gives the same status and bytes as in
// one; magic_offsets reports only real gzip/zstd magics, in order; embedded_offsets
// reports, in order, every gzip/zstd magic and only offsets whose stream sniffed() opens
// (SSE2 blocks and the scalar tail agree: the input is also checked one byte in), and
// first_embedded the first of them below a cut, naming the coding sniffed() opens there
// (gzip, zstd, bzip2, zlib, xz, lzma).
#include "sluice/dlp/decode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2)
        return 0;
    static constexpr std::string_view codings[] = {"gzip", "deflate", "br", "zstd"};
    const unsigned char sel = data[0];
    const std::string_view in(reinterpret_cast<const char*>(data) + 2, size - 2);
    const std::string_view coding = codings[sel & 3];
    const std::size_t limit = std::size_t(1) << (8 + (sel >> 2) % 12); // 256 B .. 512 KiB
    std::string out;
    decode::leftovers left;
    const auto rc = decode::content(coding, in, limit, out, &left);
    if (out.size() > limit)
        std::abort();
    for (const auto& part : left)
        if (part.size() > (1u << 20) || in.find(part) == std::string_view::npos)
            std::abort();

    // The streaming decoder, split at data[1] * size / 256, agrees with the one-shot one
    // (deflate's one-shot form retries raw DEFLATE after a zlib failure; skip that case).
    if (coding != "deflate" && rc != decode::inflate_status::over_limit) {
        const std::size_t cut = in.size() * data[1] / 256;
        decode::stream_decoder d(coding);
        std::string streamed;
        auto rs = d.feed(in.substr(0, cut), limit, streamed);
        if (rs == decode::inflate_status::ok)
            rs = d.feed(in.substr(cut), limit, streamed);
        if (rs == decode::inflate_status::ok)
            rs = d.finish();
        if (streamed.size() > limit)
            std::abort();
        if (rs == decode::inflate_status::ok && rc == decode::inflate_status::ok && streamed != out)
            std::abort();
        if ((rs == decode::inflate_status::ok) != (rc == decode::inflate_status::ok))
            std::abort();
    }

    std::size_t prev = 0;
    bool first = true;
    for (const std::size_t at : decode::magic_offsets(in, 64)) {
        if (!first && at <= prev)
            std::abort();
        const auto* b = reinterpret_cast<const unsigned char*>(in.data()) + at;
        const bool gz = at + 3 <= in.size() && b[0] == 0x1f && b[1] == 0x8b && b[2] == 8;
        const bool zs =
            at + 4 <= in.size() && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd;
        if (!gz && !zs)
            std::abort();
        prev = at;
        first = false;
    }
    for (const std::string_view text : {in, in.substr(std::min<std::size_t>(1, in.size()))}) {
        const auto all = decode::embedded_offsets(text);
        const auto gz = decode::magic_offsets(text, std::size_t(-1));
        std::size_t g = 0;
        for (std::size_t i = 0; i < all.size(); ++i) {
            if (i > 0 && all[i] <= all[i - 1])
                std::abort();
            std::string opened;
            std::string_view name;
            if (decode::sniffed(text.substr(all[i]), 1024, opened, name) ==
                decode::inflate_status::unknown)
                std::abort(); // a start that sniffed() does not recognise
            if (g < gz.size() && gz[g] == all[i])
                ++g;
        }
        if (g != gz.size())
            std::abort(); // a gzip/zstd magic embedded_offsets missed
        // first_embedded stops at the first of them below its end (a streamed body's search).
        const std::size_t end = text.size() * data[1] / 256;
        std::string_view coding;
        const std::size_t first = decode::first_embedded(text, end, &coding);
        const bool none = all.empty() || all.front() >= end;
        if (none ? first != std::string_view::npos : first != all.front())
            std::abort();
        // The coding it names is the stream sniffed() opens there ("zlib" is "deflate").
        if (!none) {
            std::string opened;
            std::string_view name;
            decode::sniffed(text.substr(first), 1024, opened, name);
            if (name != (coding == "zlib" ? std::string_view("deflate") : coding))
                std::abort();
        }
    }
    return 0;
}
