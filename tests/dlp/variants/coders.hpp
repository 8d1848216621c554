// Test-side encoders for the decoder leftover tests (tests/dlp/variants, tests/dlp): real
// zlib, libzstd, libbrotlienc, libbz2 and liblzma, plus the byte layouts the specifications give
// for the parts a decoder skips (gzip header fields, RFC 1952 section 2.3.1; zstd skippable frames,
// RFC 8878 section 3.1.2), so each test can put a secret exactly there.
#pragma once

#include <brotli/encode.h>
#include <bzlib.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice::test_coders {

struct gzip_fields {
    std::string extra;   ///< FEXTRA (empty: none)
    std::string name;    ///< FNAME (empty: none; no NUL inside)
    std::string comment; ///< FCOMMENT (empty: none; no NUL inside)
};

/// One gzip member (zlib's deflateSetHeader writes the optional fields).
inline std::string gzip(std::string_view in, const gzip_fields& f = {}) {
    z_stream zs{};
    if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::runtime_error("deflateInit2");
    gz_header h{};
    std::string name = f.name, comment = f.comment, extra = f.extra;
    if (!extra.empty()) {
        h.extra = reinterpret_cast<Bytef*>(extra.data());
        h.extra_len = static_cast<uInt>(extra.size());
    }
    if (!name.empty())
        h.name = reinterpret_cast<Bytef*>(name.data()); // std::string keeps a NUL after
    if (!comment.empty())
        h.comment = reinterpret_cast<Bytef*>(comment.data());
    h.os = 3;
    deflateSetHeader(&zs, &h);
    std::string out(deflateBound(&zs, static_cast<uLong>(in.size())) + 64 + extra.size() +
                        name.size() + comment.size(),
                    '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
        throw std::runtime_error("deflate");
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
}

inline std::string zlib(std::string_view in) {
    uLongf len = compressBound(static_cast<uLong>(in.size()));
    std::string out(len, '\0');
    compress2(reinterpret_cast<Bytef*>(out.data()), &len, reinterpret_cast<const Bytef*>(in.data()),
              static_cast<uLong>(in.size()), 6);
    out.resize(len);
    return out;
}

/// A zlib stream (RFC 1950) with a `bits`-bit window (9..15): the header's CMF byte is
/// 0x78 for 15 and 0x18 for 9, which a decoder accepts whatever its own window. With
/// -15..-9, raw DEFLATE (RFC 1951, no header), as `deflate` bodies from some clients are.
inline std::string zlib_window(std::string_view in, int bits) {
    z_stream zs{};
    if (deflateInit2(&zs, 6, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::runtime_error("deflateInit2");
    std::string out(deflateBound(&zs, static_cast<uLong>(in.size())), '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    const int rc = deflate(&zs, Z_FINISH);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    if (rc != Z_STREAM_END)
        throw std::runtime_error("deflate");
    return out;
}

/// A bzip2 stream (libbz2, block size 9).
inline std::string bzip2(std::string_view in) {
    unsigned len = static_cast<unsigned>(in.size() + in.size() / 100 + 600);
    std::string out(len, '\0');
    if (BZ2_bzBuffToBuffCompress(out.data(), &len, const_cast<char*>(in.data()),
                                 static_cast<unsigned>(in.size()), 9, 0, 0) != BZ_OK)
        throw std::runtime_error("bzip2");
    out.resize(len);
    return out;
}

/// An .xz file (xz's -6 preset, CRC64 check), or with `alone` an .lzma file (the
/// LZMA_Alone format: unknown size, an end marker), by liblzma's encoders.
inline std::string xz(std::string_view in, bool alone = false) {
    lzma_stream zs = LZMA_STREAM_INIT;
    lzma_options_lzma opt;
    lzma_lzma_preset(&opt, 6);
    if ((alone ? lzma_alone_encoder(&zs, &opt) : lzma_easy_encoder(&zs, 6, LZMA_CHECK_CRC64)) !=
        LZMA_OK)
        throw std::runtime_error("lzma encoder");
    std::string out(in.size() + in.size() / 2 + 4096, '\0');
    zs.next_in = reinterpret_cast<const std::uint8_t*>(in.data());
    zs.avail_in = in.size();
    zs.next_out = reinterpret_cast<std::uint8_t*>(out.data());
    zs.avail_out = out.size();
    const lzma_ret rc = lzma_code(&zs, LZMA_FINISH);
    out.resize(zs.total_out);
    lzma_end(&zs);
    if (rc != LZMA_STREAM_END)
        throw std::runtime_error("lzma_code");
    return out;
}

/// An .lzma file.
inline std::string lzma(std::string_view in) {
    return xz(in, true);
}

inline std::string zstd(std::string_view in) {
    std::string out(ZSTD_compressBound(in.size()), '\0');
    const std::size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3);
    out.resize(ZSTD_isError(n) ? 0 : n);
    return out;
}

/// A zstd skippable frame: magic 0x184D2A50 and the payload size, both little-endian.
inline std::string zstd_skippable(std::string_view payload) {
    std::string out = "\x50\x2a\x4d\x18";
    const auto n = static_cast<std::uint32_t>(payload.size());
    for (int k = 0; k < 4; ++k)
        out += static_cast<char>((n >> (8 * k)) & 0xff);
    out += payload;
    return out;
}

inline std::string brotli(std::string_view in) {
    std::size_t len = BrotliEncoderMaxCompressedSize(in.size()) + 16;
    std::string out(len, '\0');
    if (!BrotliEncoderCompress(5, 22, BROTLI_MODE_GENERIC, in.size(),
                               reinterpret_cast<const std::uint8_t*>(in.data()), &len,
                               reinterpret_cast<std::uint8_t*>(out.data())))
        throw std::runtime_error("brotli");
    out.resize(len);
    return out;
}

/// Standard base64 with padding.
inline std::string base64(std::string_view in) {
    static constexpr char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::size_t i = 0;
    for (; i + 3 <= in.size(); i += 3) {
        const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                           (static_cast<unsigned char>(in[i + 1]) << 8) |
                           static_cast<unsigned char>(in[i + 2]);
        for (int s = 18; s >= 0; s -= 6)
            out += a[(v >> s) & 63];
    }
    const std::size_t rest = in.size() - i;
    if (rest > 0) {
        unsigned v = static_cast<unsigned char>(in[i]) << 16;
        if (rest == 2)
            v |= static_cast<unsigned char>(in[i + 1]) << 8;
        out += a[(v >> 18) & 63];
        out += a[(v >> 12) & 63];
        out += rest == 2 ? a[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

/// `s` with `sep` inserted after every `every` characters.
inline std::string spaced(std::string_view s, std::size_t every, std::string_view sep) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); i += every) {
        if (i > 0)
            out += sep;
        out += s.substr(i, every);
    }
    return out;
}

} // namespace sluice::test_coders
