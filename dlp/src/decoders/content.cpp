// Content-Encoding decoders over zlib, libbrotli and libzstd. Every decoder writes through
// a fixed-size chunk and checks the limit before appending, so a decompression bomb costs
// at most `limit` bytes of memory and the time to produce them.
#include "sluice/dlp/decode.hpp"

#include <brotli/decode.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <memory>

namespace sluice::dlp::decode {

namespace {

constexpr std::size_t chunk = 64 * 1024;

bool iequals(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    return s;
}

bool append(std::string& out, const unsigned char* p, std::size_t n, std::size_t limit) {
    if (n > limit - std::min(limit, out.size()) || out.size() > limit)
        return false;
    out.append(reinterpret_cast<const char*>(p), n);
    return true;
}

// windowBits: 15+32 = zlib or gzip (auto), -15 = raw DEFLATE. gzip may have several
// members back to back (RFC 1952 2.2); they are decoded in turn.
inflate_status zlib_inflate(std::string_view in, int window_bits, std::size_t limit,
                            std::string& out) {
    z_stream zs{};
    if (inflateInit2(&zs, window_bits) != Z_OK)
        return inflate_status::error;
    std::unique_ptr<z_stream, decltype(&inflateEnd)> guard(&zs, inflateEnd);
    std::array<unsigned char, chunk> buf;
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(std::min<std::size_t>(in.size(), UINT32_MAX));
    for (;;) {
        zs.next_out = buf.data();
        zs.avail_out = static_cast<uInt>(buf.size());
        const int rc = inflate(&zs, Z_NO_FLUSH);
        if (!append(out, buf.data(), buf.size() - zs.avail_out, limit))
            return inflate_status::over_limit;
        if (rc == Z_STREAM_END) {
            if (zs.avail_in == 0)
                return inflate_status::ok;
            if (window_bits < 0 || static_cast<unsigned char>(*zs.next_in) != 0x1f)
                return inflate_status::ok; // trailing garbage after the stream: ignore
            if (inflateReset(&zs) != Z_OK)
                return inflate_status::error;
            continue;
        }
        if (rc == Z_BUF_ERROR && zs.avail_in == 0)
            return inflate_status::error; // truncated
        if (rc != Z_OK && rc != Z_BUF_ERROR)
            return inflate_status::error;
    }
}

inflate_status brotli(std::string_view in, std::size_t limit, std::string& out) {
    std::unique_ptr<BrotliDecoderState, decltype(&BrotliDecoderDestroyInstance)> st(
        BrotliDecoderCreateInstance(nullptr, nullptr, nullptr), BrotliDecoderDestroyInstance);
    if (!st)
        return inflate_status::error;
    std::array<unsigned char, chunk> buf;
    std::size_t avail_in = in.size();
    const auto* next_in = reinterpret_cast<const std::uint8_t*>(in.data());
    for (;;) {
        std::size_t avail_out = buf.size();
        std::uint8_t* next_out = buf.data();
        const auto rc = BrotliDecoderDecompressStream(st.get(), &avail_in, &next_in, &avail_out,
                                                      &next_out, nullptr);
        if (!append(out, buf.data(), buf.size() - avail_out, limit))
            return inflate_status::over_limit;
        if (rc == BROTLI_DECODER_RESULT_SUCCESS)
            return inflate_status::ok;
        if (rc == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT)
            continue;
        return inflate_status::error; // error or truncated (needs more input)
    }
}

inflate_status zstd(std::string_view in, std::size_t limit, std::string& out) {
    std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
    if (!ctx)
        return inflate_status::error;
    // Bound the window (memory the decoder may allocate) to 8 MiB (RFC 8878 recommends
    // that HTTP decoders support at least 8 MB windows).
    ZSTD_DCtx_setParameter(ctx.get(), ZSTD_d_windowLogMax, 23);
    std::array<unsigned char, chunk> buf;
    ZSTD_inBuffer ib{in.data(), in.size(), 0};
    std::size_t last = 1;
    while (ib.pos < ib.size) {
        ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
        last = ZSTD_decompressStream(ctx.get(), &ob, &ib);
        if (ZSTD_isError(last))
            return inflate_status::error;
        if (!append(out, buf.data(), ob.pos, limit))
            return inflate_status::over_limit;
        if (last == 0 && ib.pos == ib.size)
            return inflate_status::ok;
        if (ob.pos == 0 && ib.pos == ib.size)
            break;
    }
    // Input consumed: flush what the decoder still holds.
    for (;;) {
        ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
        last = ZSTD_decompressStream(ctx.get(), &ob, &ib);
        if (ZSTD_isError(last))
            return inflate_status::error;
        if (!append(out, buf.data(), ob.pos, limit))
            return inflate_status::over_limit;
        if (last == 0)
            return inflate_status::ok;
        if (ob.pos == 0)
            return inflate_status::error; // truncated frame
    }
}

} // namespace

bool looks_compressed(std::string_view d) noexcept {
    if (d.size() < 3)
        return false;
    const auto b0 = static_cast<unsigned char>(d[0]);
    const auto b1 = static_cast<unsigned char>(d[1]);
    if (b0 == 0x1f && b1 == 0x8b && static_cast<unsigned char>(d[2]) == 8)
        return true;
    // zstd frame magic 0xFD2FB528, little-endian (RFC 8878 section 3.1.1).
    if (d.size() >= 4 && b0 == 0x28 && b1 == 0xb5 && static_cast<unsigned char>(d[2]) == 0x2f &&
        static_cast<unsigned char>(d[3]) == 0xfd)
        return true;
    // zlib: CM=8, CINFO<=7, (CMF*256+FLG) % 31 == 0, no preset dictionary.
    return (b0 & 0x0f) == 8 && (b0 >> 4) <= 7 && ((b0 << 8) | b1) % 31 == 0 && !(b1 & 0x20);
}

inflate_status sniffed(std::string_view in, std::size_t limit, std::string& out,
                       std::string_view& name) {
    out.clear();
    const auto* b = reinterpret_cast<const unsigned char*>(in.data());
    if (in.size() >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) {
        name = "zstd";
        return zstd(in, limit, out);
    }
    if (in.size() >= 3 && b[0] == 0x1f && b[1] == 0x8b && b[2] == 8) {
        name = "gzip";
        return zlib_inflate(in, 15 + 32, limit, out);
    }
    if (looks_compressed(in)) {
        // zlib only: raw DEFLATE has no magic, and text can start like a zlib header.
        name = "deflate";
        return zlib_inflate(in, 15, limit, out);
    }
    return inflate_status::unknown;
}

inflate_status content(std::string_view coding, std::string_view in, std::size_t limit,
                       std::string& out) {
    out.clear();
    coding = trim(coding);
    if (iequals(coding, "gzip") || iequals(coding, "x-gzip"))
        return zlib_inflate(in, 15 + 32, limit, out);
    if (iequals(coding, "deflate")) {
        // RFC 9110 says zlib wrapper; some servers and clients send raw DEFLATE.
        if (looks_compressed(in)) {
            const auto rc = zlib_inflate(in, 15, limit, out);
            if (rc != inflate_status::error)
                return rc;
            out.clear();
        }
        return zlib_inflate(in, -15, limit, out);
    }
    if (iequals(coding, "br"))
        return brotli(in, limit, out);
    if (iequals(coding, "zstd"))
        return zstd(in, limit, out);
    if (iequals(coding, "identity")) {
        if (in.size() > limit)
            return inflate_status::over_limit;
        out.assign(in);
        return inflate_status::ok;
    }
    return inflate_status::unknown;
}

} // namespace sluice::dlp::decode
