// The liblzma formats (magic.hpp): .xz stream headers, .lzma (LZMA_Alone) headers and
// their probe, and the decoder behind stream_decoder's "xz" and "lzma" codings. liblzma
// does all the decoding; the output goes through a fixed-size chunk checked against the
// limit before it is appended, as in content.cpp.
#include "magic.hpp"

#include <lzma.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace sluice::dlp::decode {

namespace {

constexpr std::size_t chunk = 64 * 1024;
constexpr std::uint64_t xz_memlimit = 80u << 20;    // liblzma's accounting: xz -9 is ~65 MiB
constexpr std::uint32_t alone_dict_cap = 64u << 20; // the dictionary of xz -9 / lzma -9
constexpr std::uint32_t probe_dict = 64 * 1024;     // >= the probe's output
constexpr std::size_t alone_header = 13;            // props, dictionary size, size

std::uint32_t le32(const unsigned char* b) noexcept {
    return std::uint32_t{b[0]} | std::uint32_t{b[1]} << 8 | std::uint32_t{b[2]} << 16 |
           std::uint32_t{b[3]} << 24;
}

std::uint64_t le64(const unsigned char* b) noexcept {
    return std::uint64_t{le32(b)} | std::uint64_t{le32(b + 4)} << 32;
}

void put_le32(unsigned char* b, std::uint32_t v) noexcept {
    for (int k = 0; k < 4; ++k)
        b[k] = static_cast<unsigned char>(v >> (8 * k));
}

bool plausible_dict(std::uint32_t d) noexcept {
    if (d == UINT32_MAX)
        return true;
    if (d < 4096)
        return false;
    if ((d & (d - 1)) == 0)
        return true; // 2^n
    const std::uint32_t high = std::uint32_t{1} << (31 - __builtin_clz(d));
    if (d == high + high / 2)
        return true; // 2^n + 2^(n-1)
    return d >= (4u << 20) && d % (1u << 20) == 0;
}

// The 13-byte header with the dictionary size taken as at most `cap` (the rest as sent).
std::array<unsigned char, alone_header> capped_header(const unsigned char* b, std::uint32_t cap) {
    std::array<unsigned char, alone_header> h{};
    std::copy(b, b + alone_header, h.begin());
    put_le32(h.data() + 1, std::min(le32(b + 1), cap));
    return h;
}

struct stream_free {
    lzma_stream s = LZMA_STREAM_INIT;
    stream_free() = default;
    stream_free(const stream_free&) = delete;
    stream_free& operator=(const stream_free&) = delete;
    ~stream_free() { lzma_end(&s); }
};

} // namespace

bool xz_header(const unsigned char* b, std::size_t n) noexcept {
    static constexpr unsigned char magic[] = {0xfd, '7', 'z', 'X', 'Z', 0x00};
    return n >= 12 && std::memcmp(b, magic, sizeof magic) == 0 && b[6] == 0 && (b[7] & 0xf0) == 0 &&
           lzma_crc32(b + 6, 2, 0) == le32(b + 8);
}

bool lzma_alone_prefix(const unsigned char* b, std::size_t n) noexcept {
    return n >= 5 && b[0] <= 224 && plausible_dict(le32(b + 1));
}

bool lzma_alone_start(const unsigned char* b, std::size_t n) noexcept {
    if (n < alone_header + 5 || b[0] > 224 || b[alone_header] != 0 || !plausible_dict(le32(b + 1)))
        return false;
    const std::uint64_t size = le64(b + 5);
    if (size == 0 || (size != UINT64_MAX && size >> 56 != 0))
        return false;
    // The coded bytes after the range coder's first: a range coder's output is close to
    // uniform, so a real stream has a zero byte about once in 256 and no run of them
    // (liblzma's and the SDK's output for text, zeros, random and binary inputs: at most 4
    // zeros in the first 242 coded bytes, runs of at most 3, the longest in the 5 bytes
    // that flush the coder at the end). Binary structures (an ELF file's tables) look like
    // .lzma headers often and, their zeros decoding as literals, would pass the probe: the
    // fifth zero in a row or the ninth in all is where a stream would have to have ended.
    const std::size_t end = std::min(n, embedded_probe);
    std::size_t stop = end;
    for (std::size_t i = alone_header + 1, zeros = 0, run = 0; i < end; ++i) {
        run = b[i] == 0 ? run + 1 : 0;
        zeros += b[i] == 0 ? 1 : 0;
        if (run >= 5 || zeros > 8) {
            stop = i + 1;
            break;
        }
    }
    // One ending before min_coded bytes is too short to carry a secret (fewer than 20
    // bytes of range-coded payload between the coder's start and its flush). With fewer
    // bytes than that to probe (the end of the data), a stream must end within them too:
    // a few bytes of anything decode without an error.
    constexpr std::size_t min_coded = 24;
    if (stop < end && stop - (alone_header + 1) < min_coded)
        return false;
    const bool must_end = stop < end || end - (alone_header + 1) < min_coded;
    // One decoder per thread, initialised again per probe (liblzma keeps its allocations
    // when the dictionary size is the same). The dictionary is taken as probe_dict at
    // most, which the output cannot outgrow: the same bytes as with the declared one.
    thread_local stream_free probe;
    // On the heap: a 64 KiB thread_local array would sit in every thread's static TLS,
    // which glibc carves out of the thread's stack (the metrics server's small-stack
    // threads overflowed under ASan).
    thread_local const std::unique_ptr<unsigned char[]> sink(new unsigned char[probe_dict]);
    lzma_stream& s = probe.s;
    if (lzma_alone_decoder(&s, UINT64_MAX) != LZMA_OK)
        return false;
    const auto head = capped_header(b, probe_dict);
    s.next_in = head.data();
    s.avail_in = head.size();
    s.next_out = sink.get();
    s.avail_out = probe_dict;
    lzma_ret rc = lzma_code(&s, LZMA_RUN);
    if (rc != LZMA_OK || s.avail_in != 0)
        return false;
    s.next_in = b + alone_header;
    s.avail_in = stop - alone_header;
    while (rc == LZMA_OK && s.avail_in > 0 && s.avail_out > 0)
        rc = lzma_code(&s, LZMA_RUN);
    const bool some = s.avail_out < probe_dict;
    if (must_end)
        return rc == LZMA_STREAM_END && some;
    return (rc == LZMA_OK || rc == LZMA_STREAM_END) && some;
}

struct lzma_coder::state {
    stream_free z;
    bool open = false;
    std::string head;                   // .lzma: the header, until all 13 bytes are there
    std::uint64_t produced = 0;         // .lzma: output so far
    std::uint64_t max_out = UINT64_MAX; // .lzma whose dictionary was capped: alone_dict_cap
};

lzma_coder::lzma_coder(bool alone)
    : s_(std::make_unique<state>())
    , alone_(alone) {}

lzma_coder::~lzma_coder() = default;

inflate_status lzma_coder::feed(const unsigned char*& p, std::size_t& n, std::size_t limit,
                                std::string& out) {
    auto& st = *s_;
    if (ended_)
        return inflate_status::ok;
    lzma_stream& s = st.z.s;
    if (!st.open) {
        if (!alone_) {
            if (lzma_stream_decoder(&s, xz_memlimit, 0) != LZMA_OK)
                return inflate_status::error;
        } else {
            const std::size_t take = std::min(n, alone_header - st.head.size());
            st.head.append(reinterpret_cast<const char*>(p), take);
            p += take;
            n -= take;
            if (st.head.size() < alone_header)
                return inflate_status::ok;
            const auto* h = reinterpret_cast<const unsigned char*>(st.head.data());
            if (le32(h + 1) > alone_dict_cap)
                st.max_out = alone_dict_cap;
            const auto head = capped_header(h, alone_dict_cap);
            if (lzma_alone_decoder(&s, UINT64_MAX) != LZMA_OK)
                return inflate_status::error;
            s.next_in = head.data();
            s.avail_in = head.size();
            unsigned char none[1]; // liblzma reads nothing without room for output
            s.next_out = none;
            s.avail_out = sizeof none;
            const lzma_ret rc = lzma_code(&s, LZMA_RUN);
            if (rc != LZMA_OK || s.avail_in != 0 || s.avail_out != sizeof none)
                return inflate_status::error; // a header alone decodes to nothing
        }
        st.open = true;
    }
    std::array<unsigned char, chunk> buf;
    for (;;) {
        s.next_in = p;
        s.avail_in = n;
        s.next_out = buf.data();
        s.avail_out = buf.size();
        const lzma_ret rc = lzma_code(&s, LZMA_RUN);
        const std::size_t used = n - s.avail_in;
        const std::size_t made = buf.size() - s.avail_out;
        p += used;
        n -= used;
        st.produced += made;
        if (made > limit - std::min(limit, out.size()) || st.produced > st.max_out)
            return inflate_status::over_limit;
        out.append(reinterpret_cast<const char*>(buf.data()), made);
        if (rc == LZMA_STREAM_END) {
            ended_ = true;
            return inflate_status::ok;
        }
        if (rc == LZMA_MEMLIMIT_ERROR)
            return inflate_status::over_limit;
        if (rc != LZMA_OK && rc != LZMA_BUF_ERROR)
            return inflate_status::error;
        if (made < buf.size() && n == 0)
            return inflate_status::ok; // all consumed, nothing more to flush
        if (used == 0 && made == 0)
            return inflate_status::error;
    }
}

} // namespace sluice::dlp::decode
