// How the compressed streams decode.hpp opens begin, shared by the decoders
// (content.cpp), the search for streams after other bytes (embedded.cpp) and the liblzma
// formats (lzma.cpp). Internal to dlp/src/decoders/. Every test reads only the `n` bytes
// it is given and is thread safe (the probes keep one decoder state per thread).
#pragma once

#include "sluice/dlp/decode.hpp"

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

namespace sluice::dlp::decode {

inline bool zstd_magic(const unsigned char* b, std::size_t n) noexcept {
    return n >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd;
}

inline bool gzip_magic(const unsigned char* b, std::size_t n) noexcept {
    return n >= 3 && b[0] == 0x1f && b[1] == 0x8b && b[2] == 8;
}

// RFC 1950 section 2.2: CM=8, CINFO<=7, (CMF*256+FLG) % 31 == 0, no preset dictionary.
inline bool zlib_header(unsigned char b0, unsigned char b1) noexcept {
    return (b0 & 0x0f) == 8 && (b0 >> 4) <= 7 && ((b0 << 8) | b1) % 31 == 0 && !(b1 & 0x20);
}

// bzip2 (the format of bzip2 1.0.8 / libbz2, which has no RFC): "BZh", a block size digit
// '1'-'9', then a block header (the BCD digits of pi, 31 41 59 26 53 59) or the end of
// stream (sqrt(pi), 17 72 45 38 50 90).
inline bool bzip2_magic(const unsigned char* b, std::size_t n) noexcept {
    static constexpr unsigned char block[] = {0x31, 0x41, 0x59, 0x26, 0x53, 0x59};
    static constexpr unsigned char end[] = {0x17, 0x72, 0x45, 0x38, 0x50, 0x90};
    return n >= 10 && b[0] == 'B' && b[1] == 'Z' && b[2] == 'h' && b[3] >= '1' && b[3] <= '9' &&
           (std::memcmp(b + 4, block, 6) == 0 || std::memcmp(b + 4, end, 6) == 0);
}

/// An .xz stream header (The .xz File Format 1.1.0, section 2.1.1): the magic FD 37 7A 58 5A
/// 00, the Stream Flags (a null byte, then a byte whose high four bits are reserved and
/// zero and whose low four are the check type, any of 0x0-0xF: a decoder that does not
/// know one still decodes) and their CRC32 (little-endian) as section 2.1.1.3 gives it.
/// Needs the 12 bytes of the header.
bool xz_header(const unsigned char* b, std::size_t n) noexcept;

/// A plausible .lzma (LZMA_Alone) header and the first bytes after it decode: the format
/// of the LZMA SDK's lzma-file-format.txt (and xz-utils' lzma_alone_decoder.c), which has
/// no magic, so each field is checked as liblzma and libarchive check it to recognise
/// one:
/// - byte 0, the properties (pb * 5 + lp) * 9 + lc: at most 224 (lc <= 8, lp <= 4, pb <= 4);
/// - bytes 1-4, the dictionary size (little-endian): 2^n or 2^n + 2^(n-1) of 4 KiB or more
///   (what xz, liblzma's own auto-detection and 7-Zip write), a multiple of 1 MiB (the
///   LZMA SDK rounds sizes of 4 MiB and up so), or 0xFFFFFFFF;
/// - bytes 5-12, the uncompressed size: 2^64 - 1 (unknown, ended by a marker) or from 1 to
///   2^56 - 1 (a stream of nothing holds nothing);
/// - byte 13, the first byte of the range coder, is zero (liblzma and the SDK refuse
///   anything else);
/// - and liblzma's lzma_alone_decoder decodes the first bytes (up to embedded_probe in
///   all, the header included) without an error and with some output.
/// A header made by hand outside these bounds (that xz, 7-Zip and the SDK do not write)
/// is not found.
bool lzma_alone_start(const unsigned char* b, std::size_t n) noexcept;

/// The checks of lzma_alone_start() on bytes 0-4 only (properties, dictionary size), for a
/// prefix too short to hold the rest.
bool lzma_alone_prefix(const unsigned char* b, std::size_t n) noexcept;

/// One .xz stream (`alone` false) or .lzma stream (true) decoded by liblzma, fed piece by
/// piece (stream_decoder's "xz" and "lzma" codings). An .xz stream may be any of the
/// stream's filters liblzma decodes (LZMA2, BCJ, delta); its check is verified. liblzma's
/// memory limit is 80 MiB (the 64 MiB dictionary of `xz -9` decodes; a larger one is
/// over_limit). An .lzma stream's dictionary is taken as at most 64 MiB: decoding is the
/// same while the output is within it, and one whose header declares more is over_limit
/// past 64 MiB of output. Bytes after the end of the stream are not consumed.
class lzma_coder {
public:
    explicit lzma_coder(bool alone);
    ~lzma_coder();
    lzma_coder(const lzma_coder&) = delete;
    lzma_coder& operator=(const lzma_coder&) = delete;

    /// Decodes from [p, p + n), advancing both past what it consumed, appending to `out`
    /// (out.size() bounded by `limit`). `ok`: every byte consumed, or the stream ended
    /// (the rest left in p, n). `error`: corrupt; `over_limit`: output or memory limit.
    inflate_status feed(const unsigned char*& p, std::size_t& n, std::size_t limit,
                        std::string& out);
    bool ended() const noexcept { return ended_; }

private:
    struct state;
    std::unique_ptr<state> s_;
    bool alone_;
    bool ended_ = false;
};

} // namespace sluice::dlp::decode
