// Content-Encoding decoders over zlib, libbrotli and libzstd (libbz2 and liblzma, in
// lzma.cpp, for streams recognised by their magic). Every decoder writes through
// a fixed-size chunk and checks the limit before appending, so a decompression bomb costs
// at most `limit` bytes of memory and the time to produce them.
#include "magic.hpp"

#include "sluice/detectors/text.hpp"

#include <brotli/decode.h>
#include <bzlib.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <iterator>
#include <memory>

namespace sluice::dlp::decode {

namespace {

constexpr std::size_t chunk = 64 * 1024;

using text::iequals;
using text::trim;

bool append(std::string& out, const unsigned char* p, std::size_t n, std::size_t limit) {
    if (n > limit - std::min(limit, out.size()) || out.size() > limit)
        return false;
    out.append(reinterpret_cast<const char*>(p), n);
    return true;
}

constexpr std::size_t leftover_cap = 1u << 20;
constexpr std::size_t gzip_field_cap = 64 * 1024; // FEXTRA is at most 65535 bytes

// True while `b` (n bytes) can still be the start of "BZh1".."BZh9".
bool bzip2_prefix(const unsigned char* b, std::size_t n) noexcept {
    static constexpr unsigned char bzh[] = {'B', 'Z', 'h'};
    const std::size_t k = std::min<std::size_t>(n, 3);
    return std::memcmp(b, bzh, k) == 0 && (n < 4 || (b[3] >= '1' && b[3] <= '9'));
}

} // namespace

enum class coding_kind { none, gzip, zlib, raw, auto_deflate, br, zstd, bzip2, xz, lzma };

struct stream_decoder::impl {
    coding_kind kind = coding_kind::none;
    bool init = false;
    bool ended = false;
    bool between = false; // gzip, bzip2: a stream ended where the input seen so far ends
    bool keep = false;
    bool harvested = false;
    std::size_t consumed = 0;
    std::size_t last = 1; // zstd: 0 once a frame is complete and flushed
    std::string first;    // "deflate": a first byte, until the second says which form
    z_stream zs{};
    gz_header gh{};
    std::string extra, name, comment;
    BrotliDecoderState* br = nullptr;
    ZSTD_DCtx* zd = nullptr;
    bz_stream bz{};
    bool bz_open = false;           // bz holds a libbz2 state (BZ2_bzDecompressEnd owed)
    std::string next;               // bzip2: bytes after a stream that may start "BZh" of another
    std::unique_ptr<lzma_coder> lz; // xz, lzma (lzma.cpp)
    leftovers left;

    ~impl() {
        if (init &&
            (kind == coding_kind::gzip || kind == coding_kind::zlib || kind == coding_kind::raw))
            inflateEnd(&zs);
        if (br)
            BrotliDecoderDestroyInstance(br);
        if (zd)
            ZSTD_freeDCtx(zd);
        if (bz_open)
            BZ2_bzDecompressEnd(&bz);
    }

    void add_left(const unsigned char* p, std::size_t n, bool trailing) {
        if (!keep || n == 0)
            return;
        if (!trailing || left.empty() || !trailing_open)
            left.emplace_back();
        trailing_open = trailing;
        auto& s = left.back();
        s.append(reinterpret_cast<const char*>(p), std::min(n, leftover_cap - s.size()));
    }
    bool trailing_open = false;

    // The gzip header of the current member, once zlib has read all of it.
    void harvest() {
        if (kind != coding_kind::gzip || harvested || gh.done != 1)
            return;
        harvested = true;
        if (gh.extra && gh.extra_len > 0)
            add_left(gh.extra, std::min<std::size_t>(gh.extra_len, gh.extra_max), false);
        for (const Bytef* f : {gh.name, gh.comment})
            if (f) {
                const auto* c = reinterpret_cast<const char*>(f);
                add_left(f, strnlen(c, gzip_field_cap), false);
            }
    }

    bool start_zlib(int window_bits) {
        if (inflateInit2(&zs, window_bits) != Z_OK)
            return false;
        init = true;
        if (kind == coding_kind::gzip && keep) {
            extra.assign(gzip_field_cap, '\0');
            name.assign(gzip_field_cap + 1, '\0');
            comment.assign(gzip_field_cap + 1, '\0');
            reset_header();
        }
        return true;
    }
    void reset_header() {
        harvested = false;
        if (kind != coding_kind::gzip || !keep)
            return;
        gh = gz_header{};
        gh.extra = reinterpret_cast<Bytef*>(extra.data());
        gh.extra_max = static_cast<uInt>(gzip_field_cap);
        gh.name = reinterpret_cast<Bytef*>(name.data());
        gh.name_max = static_cast<uInt>(gzip_field_cap);
        gh.comment = reinterpret_cast<Bytef*>(comment.data());
        gh.comm_max = static_cast<uInt>(gzip_field_cap);
        std::fill(name.begin(), name.end(), '\0');
        std::fill(comment.begin(), comment.end(), '\0');
        inflateGetHeader(&zs, &gh);
    }

    bool start(const unsigned char* p, std::size_t n) {
        if (kind == coding_kind::auto_deflate) {
            if (n < 2)
                return true; // decide when two bytes are there
            kind = zlib_header(p[0], p[1]) ? coding_kind::zlib : coding_kind::raw;
        }
        switch (kind) {
        case coding_kind::gzip:
            return start_zlib(15 + 32);
        case coding_kind::zlib:
            return start_zlib(15);
        case coding_kind::raw:
            return start_zlib(-15);
        case coding_kind::br:
            br = BrotliDecoderCreateInstance(nullptr, nullptr, nullptr);
            init = br != nullptr;
            return init;
        case coding_kind::zstd:
            zd = ZSTD_createDCtx();
            if (!zd)
                return false;
            // Bound the window (memory the decoder may allocate) to 8 MiB (RFC 8878
            // recommends that HTTP decoders support at least 8 MB windows).
            ZSTD_DCtx_setParameter(zd, ZSTD_d_windowLogMax, 23);
            init = true;
            return true;
        case coding_kind::bzip2:
            init = start_bz2();
            return init;
        case coding_kind::xz:
        case coding_kind::lzma:
            lz = std::make_unique<lzma_coder>(kind == coding_kind::lzma);
            init = true;
            return true;
        default:
            return false;
        }
    }

    inflate_status feed_zlib(const unsigned char* p, std::size_t n, std::size_t limit,
                             std::string& out) {
        std::array<unsigned char, chunk> buf;
        bool more_output = false;
        for (;;) {
            if (ended) {
                add_left(p, n, true);
                return inflate_status::ok;
            }
            if (n == 0 && !more_output)
                return inflate_status::ok;
            if (between) {
                if (n == 0)
                    return inflate_status::ok;
                // RFC 1952 section 2.2: members back to back. Anything else ends the body.
                if (p[0] != 0x1f) {
                    ended = true;
                    continue;
                }
                if (inflateReset(&zs) != Z_OK)
                    return inflate_status::error;
                reset_header();
                between = false;
            }
            zs.next_in = const_cast<Bytef*>(p);
            zs.avail_in = static_cast<uInt>(std::min<std::size_t>(n, UINT32_MAX));
            zs.next_out = buf.data();
            zs.avail_out = static_cast<uInt>(buf.size());
            const uInt before = zs.avail_in;
            const int rc = inflate(&zs, Z_NO_FLUSH);
            const std::size_t used = before - zs.avail_in;
            const std::size_t produced = buf.size() - zs.avail_out;
            p += used;
            n -= used;
            consumed += used;
            harvest();
            if (!append(out, buf.data(), produced, limit))
                return inflate_status::over_limit;
            more_output = zs.avail_out == 0;
            if (rc == Z_STREAM_END) {
                more_output = false;
                if (kind == coding_kind::gzip)
                    between = true;
                else
                    ended = true;
                continue;
            }
            if (rc == Z_BUF_ERROR && used == 0 && produced == 0) {
                if (n == 0)
                    return inflate_status::ok;
                return inflate_status::error;
            }
            if (rc != Z_OK && rc != Z_BUF_ERROR)
                return inflate_status::error;
        }
    }

    bool start_bz2() {
        bz = bz_stream{};
        bz_open = BZ2_bzDecompressInit(&bz, 0, 0) == BZ_OK;
        return bz_open;
    }

    // bzip2 streams back to back (pbzip2, `cat a.bz2 b.bz2`), as bunzip2() reads them
    // whole: after a stream, bytes that start "BZh1".."BZh9" open the next one (held in
    // `next` while a piece boundary cuts those four bytes); anything else ends the body.
    inflate_status feed_bz2(const unsigned char* p, std::size_t n, std::size_t limit,
                            std::string& out) {
        std::array<char, chunk> buf;
        bool more_output = false;
        for (;;) {
            if (ended) {
                add_left(p, n, true);
                return inflate_status::ok;
            }
            if (between) {
                const std::size_t take = std::min(n, 4 - next.size());
                next.append(reinterpret_cast<const char*>(p), take);
                p += take;
                n -= take;
                const auto* q = reinterpret_cast<const unsigned char*>(next.data());
                if (!bzip2_prefix(q, next.size())) {
                    ended = true;
                    add_left(q, next.size(), true);
                    next.clear();
                    continue;
                }
                if (next.size() < 4)
                    return inflate_status::ok;
                between = false;
                BZ2_bzDecompressEnd(&bz);
                bz_open = false;
                if (!start_bz2())
                    return inflate_status::error;
                const std::string head = std::move(next);
                next.clear();
                const auto rc =
                    feed_bz2(reinterpret_cast<const unsigned char*>(head.data()), 4, limit, out);
                if (rc != inflate_status::ok)
                    return rc;
                continue;
            }
            if (n == 0 && !more_output)
                return inflate_status::ok;
            bz.next_in = const_cast<char*>(reinterpret_cast<const char*>(p));
            bz.avail_in = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 30));
            bz.next_out = buf.data();
            bz.avail_out = static_cast<unsigned>(buf.size());
            const unsigned before = bz.avail_in;
            const int rc = BZ2_bzDecompress(&bz);
            const std::size_t used = before - bz.avail_in;
            const std::size_t produced = buf.size() - bz.avail_out;
            p += used;
            n -= used;
            consumed += used;
            if (!append(out, reinterpret_cast<const unsigned char*>(buf.data()), produced, limit))
                return inflate_status::over_limit;
            more_output = bz.avail_out == 0;
            if (rc == BZ_STREAM_END) {
                between = true;
                more_output = false;
                continue;
            }
            if (rc != BZ_OK)
                return inflate_status::error;
            if (used == 0 && produced == 0)
                return n == 0 ? inflate_status::ok : inflate_status::error;
        }
    }

    // One .xz or .lzma stream; bytes after its end are leftovers (another stream after it
    // is found by the search for embedded streams, like any other).
    inflate_status feed_lzma(const unsigned char* p, std::size_t n, std::size_t limit,
                             std::string& out) {
        if (!ended) {
            const std::size_t before = n;
            const auto rc = lz->feed(p, n, limit, out);
            consumed += before - n;
            ended = lz->ended();
            if (rc != inflate_status::ok || !ended)
                return rc;
        }
        add_left(p, n, true);
        return inflate_status::ok;
    }

    inflate_status feed_br(const unsigned char* p, std::size_t n, std::size_t limit,
                           std::string& out) {
        std::array<unsigned char, chunk> buf;
        for (;;) {
            if (ended) {
                add_left(p, n, true);
                return inflate_status::ok;
            }
            std::size_t avail_in = n;
            const std::uint8_t* next_in = p;
            std::size_t avail_out = buf.size();
            std::uint8_t* next_out = buf.data();
            const auto rc = BrotliDecoderDecompressStream(br, &avail_in, &next_in, &avail_out,
                                                          &next_out, nullptr);
            const std::size_t used = n - avail_in;
            p += used;
            n -= used;
            consumed += used;
            if (!append(out, buf.data(), buf.size() - avail_out, limit))
                return inflate_status::over_limit;
            if (rc == BROTLI_DECODER_RESULT_SUCCESS) {
                ended = true;
                continue;
            }
            if (rc == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT)
                continue;
            if (rc == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT)
                return inflate_status::ok;
            return inflate_status::error;
        }
    }

    inflate_status feed_zstd(const unsigned char* p, std::size_t n, std::size_t limit,
                             std::string& out) {
        std::array<unsigned char, chunk> buf;
        ZSTD_inBuffer ib{p, n, 0};
        for (;;) {
            ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
            const std::size_t before = ib.pos;
            const std::size_t rc = ZSTD_decompressStream(zd, &ob, &ib);
            consumed += ib.pos - before;
            if (ZSTD_isError(rc))
                return inflate_status::error;
            last = rc;
            if (!append(out, buf.data(), ob.pos, limit))
                return inflate_status::over_limit;
            // Input consumed and the decoder had room to spare: nothing more to flush.
            if (ib.pos == ib.size && ob.pos < ob.size)
                return inflate_status::ok;
        }
    }
};

stream_decoder::stream_decoder(std::string_view coding)
    : impl_(std::make_unique<impl>()) {
    coding = trim(coding);
    if (iequals(coding, "gzip") || iequals(coding, "x-gzip"))
        impl_->kind = coding_kind::gzip;
    else if (iequals(coding, "deflate"))
        impl_->kind = coding_kind::auto_deflate;
    else if (iequals(coding, "zlib")) // internal: zlib wrapper only
        impl_->kind = coding_kind::zlib;
    else if (iequals(coding, "raw-deflate")) // internal: raw DEFLATE only
        impl_->kind = coding_kind::raw;
    else if (iequals(coding, "br"))
        impl_->kind = coding_kind::br;
    else if (iequals(coding, "zstd"))
        impl_->kind = coding_kind::zstd;
    else if (iequals(coding, "bzip2")) // internal: no HTTP coding is bzip2
        impl_->kind = coding_kind::bzip2;
    else if (iequals(coding, "xz")) // internal: .xz and .lzma files, no HTTP codings
        impl_->kind = coding_kind::xz;
    else if (iequals(coding, "lzma"))
        impl_->kind = coding_kind::lzma;
}

stream_decoder::~stream_decoder() = default;
stream_decoder::stream_decoder(stream_decoder&&) noexcept = default;
stream_decoder& stream_decoder::operator=(stream_decoder&&) noexcept = default;

bool stream_decoder::valid() const noexcept {
    return impl_ && impl_->kind != coding_kind::none;
}

void stream_decoder::keep_leftovers(bool on) noexcept {
    impl_->keep = on;
}

leftovers& stream_decoder::left() noexcept {
    return impl_->left;
}

bool stream_decoder::ended() const noexcept {
    return impl_->ended;
}

std::size_t stream_decoder::consumed() const noexcept {
    return impl_->consumed;
}

inflate_status stream_decoder::feed(std::string_view in, std::size_t limit, std::string& out) {
    auto& s = *impl_;
    if (s.kind == coding_kind::none)
        return inflate_status::unknown;
    const auto* p = reinterpret_cast<const unsigned char*>(in.data());
    if (!s.init) {
        if (in.empty())
            return inflate_status::ok;
        if (s.kind == coding_kind::auto_deflate && s.first.size() + in.size() < 2) {
            s.first.append(in); // the form is decided on two bytes
            return inflate_status::ok;
        }
        if (!s.first.empty()) {
            std::string joined = s.first;
            joined.append(in);
            s.first.clear();
            return feed(joined, limit, out);
        }
        if (!s.start(p, in.size()))
            return inflate_status::error;
    }
    switch (s.kind) {
    case coding_kind::br:
        return s.feed_br(p, in.size(), limit, out);
    case coding_kind::zstd:
        return s.feed_zstd(p, in.size(), limit, out);
    case coding_kind::bzip2:
        return s.feed_bz2(p, in.size(), limit, out);
    case coding_kind::xz:
    case coding_kind::lzma:
        return s.feed_lzma(p, in.size(), limit, out);
    default:
        return s.feed_zlib(p, in.size(), limit, out);
    }
}

inflate_status stream_decoder::finish() const noexcept {
    const auto& s = *impl_;
    if (!s.init)
        return inflate_status::error; // an empty stream is not a stream
    if (s.kind == coding_kind::zstd)
        return s.last == 0 ? inflate_status::ok : inflate_status::error;
    return s.ended || s.between ? inflate_status::ok : inflate_status::error;
}

namespace {

inflate_status one_shot(std::string_view coding, std::string_view in, std::size_t limit,
                        std::string& out, leftovers* left, bool* cut = nullptr) {
    stream_decoder d(coding);
    d.keep_leftovers(left != nullptr);
    auto rc = d.feed(in, limit, out);
    if (rc == inflate_status::ok) {
        rc = d.finish();
        // Every byte decoded without an error and the stream goes on: cut short.
        if (cut && rc == inflate_status::error && !in.empty())
            *cut = true;
    }
    if (left)
        for (auto& part : d.left())
            left->push_back(std::move(part));
    return rc;
}

// Every bzip2 stream of `in` one after the other (pbzip2 and `cat a.bz2 b.bz2` write
// several), through libbz2 in `chunk`-sized output steps; bytes after the last stream
// that do not start another are a leftover, as for the other codings.
inflate_status bunzip2(std::string_view in, std::size_t limit, std::string& out, leftovers* left,
                       bool* cut) {
    std::size_t pos = 0;
    std::array<char, chunk> buf;
    while (pos < in.size()) {
        if (pos > 0 && !bzip2_magic(reinterpret_cast<const unsigned char*>(in.data() + pos),
                                    in.size() - pos)) {
            if (left)
                left->emplace_back(in.substr(pos, std::min(in.size() - pos, leftover_cap)));
            return inflate_status::ok;
        }
        bz_stream bz{};
        if (BZ2_bzDecompressInit(&bz, 0, 0) != BZ_OK)
            return inflate_status::error;
        bz.next_in = const_cast<char*>(in.data() + pos);
        bz.avail_in = static_cast<unsigned>(std::min<std::size_t>(in.size() - pos, 1u << 30));
        int rc = BZ_OK;
        while (rc == BZ_OK) {
            bz.next_out = buf.data();
            bz.avail_out = static_cast<unsigned>(buf.size());
            rc = BZ2_bzDecompress(&bz);
            const std::size_t n = buf.size() - bz.avail_out;
            if (out.size() + n > limit) {
                BZ2_bzDecompressEnd(&bz);
                return inflate_status::over_limit;
            }
            out.append(buf.data(), n);
            if (rc == BZ_OK && bz.avail_in == 0 && n == 0) {
                rc = BZ_UNEXPECTED_EOF; // truncated: no end-of-stream marker
                if (cut)
                    *cut = true;
            }
        }
        const std::size_t used = (in.size() - pos) - bz.avail_in;
        BZ2_bzDecompressEnd(&bz);
        if (rc != BZ_STREAM_END)
            return inflate_status::error;
        pos += used;
    }
    return inflate_status::ok;
}

// Bodies that may be raw DEFLATE (RFC 1951 has no magic): binary-looking ones, a quarter
// or more of their first 512 bytes outside printable ASCII and whitespace. Text is never
// tried; a binary upload that is not DEFLATE fails within a few bytes.
bool binary_looking(std::string_view in) noexcept {
    const std::size_t n = std::min<std::size_t>(in.size(), 512);
    std::size_t odd = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(in[i]);
        odd += (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c >= 0x7f ? 1 : 0;
    }
    return n >= 16 && 4 * odd >= n;
}

// The payloads of the zstd skippable frames in `in` (RFC 8878 section 3.1.2: magic
// 0x184D2A5?, a 4-byte little-endian size, then that many bytes); frame sizes come from
// libzstd, which knows both frame kinds.
void zstd_skippable(std::string_view in, leftovers& left) {
    std::size_t pos = 0;
    while (pos + 8 <= in.size()) {
        const std::size_t fs = ZSTD_findFrameCompressedSize(in.data() + pos, in.size() - pos);
        if (ZSTD_isError(fs) || fs == 0)
            return;
        const auto* b = reinterpret_cast<const unsigned char*>(in.data() + pos);
        if ((b[0] & 0xf0) == 0x50 && b[1] == 0x2a && b[2] == 0x4d && b[3] == 0x18 && fs > 8)
            left.emplace_back(in.substr(pos + 8, std::min(fs - 8, leftover_cap)));
        pos += fs;
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
    return zlib_header(b0, b1);
}

inflate_status sniffed(std::string_view in, std::size_t limit, std::string& out,
                       std::string_view& name, leftovers* left, bool* cut) {
    out.clear();
    bool mine_cut = false;
    if (cut)
        *cut = false;
    const auto* b = reinterpret_cast<const unsigned char*>(in.data());
    if (zstd_magic(b, in.size())) {
        name = "zstd";
        return content("zstd", in, limit, out, left, cut);
    }
    if (gzip_magic(b, in.size())) {
        name = "gzip";
        return one_shot("gzip", in, limit, out, left, cut);
    }
    if (looks_compressed(in)) {
        // zlib only: raw DEFLATE has no magic, and text can start like a zlib header.
        name = "deflate";
        return one_shot("zlib", in, limit, out, left, cut);
    }
    if (bzip2_magic(b, in.size())) {
        name = "bzip2";
        return bunzip2(in, limit, out, left, cut);
    }
    if (xz_header(b, in.size()) || lzma_alone_start(b, in.size())) {
        name = b[0] == 0xfd ? "xz" : "lzma"; // props 0xfd is over 224: no .lzma starts so
        return one_shot(name, in, limit, out, left, cut);
    }
    if (binary_looking(in)) {
        // The trial: a stream that ends (BFINAL) is raw DEFLATE; one that breaks off counts
        // only when it produced 64 bytes or more (random binary rarely gets that far before
        // an invalid code, and what it produces is scanned, not trusted).
        leftovers mine;
        const auto rc = one_shot("raw-deflate", in, limit, out, left ? &mine : nullptr, &mine_cut);
        if (rc == inflate_status::ok || rc == inflate_status::over_limit ||
            (rc == inflate_status::error && out.size() >= 64)) {
            name = "raw-deflate";
            if (cut)
                *cut = mine_cut;
            if (left)
                std::move(mine.begin(), mine.end(), std::back_inserter(*left));
            return rc;
        }
        out.clear();
    }
    return inflate_status::unknown;
}

inflate_status content(std::string_view coding, std::string_view in, std::size_t limit,
                       std::string& out, leftovers* left, bool* cut) {
    out.clear();
    if (cut)
        *cut = false;
    coding = trim(coding);
    if (iequals(coding, "gzip") || iequals(coding, "x-gzip") || iequals(coding, "br"))
        return one_shot(coding, in, limit, out, left, cut);
    if (iequals(coding, "deflate")) {
        // RFC 9110 says zlib wrapper; some servers and clients send raw DEFLATE.
        if (looks_compressed(in)) {
            leftovers mine;
            const auto rc = one_shot("zlib", in, limit, out, left ? &mine : nullptr, cut);
            if (rc != inflate_status::error || (cut && *cut)) {
                if (left)
                    std::move(mine.begin(), mine.end(), std::back_inserter(*left));
                return rc;
            }
            out.clear();
        }
        return one_shot("raw-deflate", in, limit, out, left, cut);
    }
    if (iequals(coding, "zstd")) {
        if (left)
            zstd_skippable(in, *left);
        return one_shot(coding, in, limit, out, nullptr, cut);
    }
    if (iequals(coding, "identity")) {
        if (in.size() > limit)
            return inflate_status::over_limit;
        out.assign(in);
        return inflate_status::ok;
    }
    return inflate_status::unknown;
}

} // namespace sluice::dlp::decode
