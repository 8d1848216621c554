// Archives in bodies (archive.hpp): listed and read by libarchive.
#include "sluice/dlp/archive.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <cstring>
#include <memory>

namespace sluice::dlp::archive {

namespace {

constexpr std::string_view zip_local = "PK\x03\x04"; // APPNOTE.TXT 4.3.7
constexpr std::string_view zip_end = "PK\x05\x06";   // APPNOTE.TXT 4.3.16

bool at(std::string_view d, std::size_t off, std::string_view sig) noexcept {
    return d.size() >= off + sig.size() && d.substr(off, sig.size()) == sig;
}

// Signatures whose bytes text does not hold: one of them at offset 0 that libarchive then
// cannot read is a broken archive (refused), not a text that happens to start that way.
bool binary_signature(std::string_view d) noexcept {
    using namespace std::string_view_literals;
    return at(d, 0, zip_local) || at(d, 0, "7z\xBC\xAF\x27\x1C"sv) || at(d, 0, "Rar!\x1A\x07"sv) ||
           at(d, 0, "\x04\x22\x4D\x18"sv) || at(d, 0, "MSCF\0\0\0\0"sv) || at(d, 0, "xar!"sv);
}

bool text_signature(std::string_view d) noexcept {
    using namespace std::string_view_literals;
    return at(d, 0, "\x1F\x9D"sv) || at(d, 0, "!<arch>\n"sv) || at(d, 0, "070701"sv) ||
           at(d, 0, "070702"sv) || at(d, 0, "070707"sv) || at(d, 257, "ustar"sv) ||
           at(d, 32769, "CD001"sv);
}

// A local file header after other bytes that looks like one (APPNOTE.TXT 4.3.7: version
// needed, a compression method of 4.4.5, a name of 1..4095 bytes): four bytes of binary
// noise are not taken for an archive that cannot be read.
bool plausible_zip(std::string_view d, std::size_t k) noexcept {
    if (d.size() < k + 30)
        return false;
    const auto u16 = [&](std::size_t o) {
        return static_cast<unsigned>(static_cast<unsigned char>(d[k + o])) |
               static_cast<unsigned>(static_cast<unsigned char>(d[k + o + 1])) << 8;
    };
    const unsigned method = u16(8);
    const bool known = method <= 20 || (method >= 93 && method <= 99);
    return u16(4) <= 100 && known && u16(26) >= 1 && u16(26) < 4096;
}

std::size_t next_zip(std::string_view d, std::size_t from) noexcept {
    const auto* b = reinterpret_cast<const unsigned char*>(d.data());
    for (std::size_t i = from + 2; i + 1 < d.size();) {
        const void* h = std::memchr(b + i, 0x03, d.size() - i);
        if (h == nullptr)
            return std::string_view::npos;
        const auto k = static_cast<std::size_t>(static_cast<const unsigned char*>(h) - b);
        if (k >= 2 && at(d, k - 2, zip_local) && plausible_zip(d, k - 2))
            return k - 2;
        i = k + 1;
    }
    return std::string_view::npos;
}

struct reader_free {
    void operator()(struct archive* a) const noexcept { archive_read_free(a); }
};
using reader = std::unique_ptr<struct archive, reader_free>;

reader open_reader(std::string_view data) {
    reader a(archive_read_new());
    if (!a)
        throw std::bad_alloc();
    auto* r = a.get();
    archive_read_support_format_zip_streamable(r);
    archive_read_support_format_tar(r);
    archive_read_support_format_7zip(r);
    archive_read_support_format_rar(r);
    archive_read_support_format_rar5(r);
    archive_read_support_format_cpio(r);
    archive_read_support_format_ar(r);
    archive_read_support_format_iso9660(r);
    archive_read_support_format_xar(r);
    archive_read_support_format_cab(r);
    archive_read_support_format_raw(r); // an lz4 or compress file that holds no archive
    // Only the layers the variant pipeline does not open itself (archive.hpp): xz and lzma
    // are decode::sniffed's (liblzma), anywhere in a buffer. Never
    // archive_read_support_filter_all: it adds filters that run external programs.
    archive_read_support_filter_lz4(r);
    archive_read_support_filter_compress(r);
    if (archive_read_open_memory(r, data.data(), data.size()) != ARCHIVE_OK)
        return nullptr;
    return a;
}

std::string_view format_name(int code) noexcept {
    switch (code & ARCHIVE_FORMAT_BASE_MASK) {
    case ARCHIVE_FORMAT_ZIP:
        return "zip";
    case ARCHIVE_FORMAT_TAR:
        return "tar";
    case ARCHIVE_FORMAT_7ZIP:
        return "7zip";
    case ARCHIVE_FORMAT_RAR:
    case ARCHIVE_FORMAT_RAR_V5:
        return "rar";
    case ARCHIVE_FORMAT_CPIO:
        return "cpio";
    case ARCHIVE_FORMAT_AR:
        return "ar";
    case ARCHIVE_FORMAT_ISO9660:
        return "iso9660";
    case ARCHIVE_FORMAT_XAR:
        return "xar";
    case ARCHIVE_FORMAT_CAB:
        return "cab";
    default:
        return {};
    }
}

std::string_view filter_name(int code) noexcept {
    switch (code) {
    case ARCHIVE_FILTER_LZ4:
        return "lz4";
    case ARCHIVE_FILTER_COMPRESS:
        return "compress";
    default:
        return {};
    }
}

// "xz>tar": the filters outermost first (libarchive numbers them from the format side),
// then the format; just the filters for a raw stream.
std::string layers(struct archive* a, bool raw) {
    std::string out;
    for (int i = archive_filter_count(a) - 1; i >= 0; --i) {
        const auto name = filter_name(archive_filter_code(a, i));
        if (name.empty())
            continue;
        if (!out.empty())
            out += '>';
        out += name;
    }
    if (!raw) {
        if (!out.empty())
            out += '>';
        out += format_name(archive_format(a));
    }
    return out;
}

struct walk {
    std::size_t room;
    const visitor& each;
    std::string bytes;
    std::string names;
};

// One member's data into w.bytes, within w.room.
read_status read_member(struct archive* a, walk& w) {
    w.bytes.clear();
    char buf[64 * 1024];
    for (;;) {
        const la_ssize_t n = archive_read_data(a, buf, sizeof buf);
        if (n == 0)
            return read_status::ok;
        if (n < 0)
            return archive_read_has_encrypted_entries(a) > 0 ? read_status::encrypted
                                                             : read_status::malformed;
        if (static_cast<std::size_t>(n) > w.room - w.bytes.size())
            return read_status::over_limit;
        w.bytes.append(buf, static_cast<std::size_t>(n));
    }
}

// The archive at offset 0 of `data`.
read_status read_one(std::string_view data, walk& w) {
    auto a = open_reader(data);
    if (!a)
        return binary_signature(data) ? read_status::malformed : read_status::not_archive;
    struct archive_entry* e = nullptr;
    bool first = true;
    bool raw = false;
    std::string format;
    for (;;) {
        const int r = archive_read_next_header(a.get(), &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            if (first && !binary_signature(data))
                return read_status::not_archive;
            return read_status::malformed;
        }
        if (first) {
            raw = (archive_format(a.get()) & ARCHIVE_FORMAT_BASE_MASK) == ARCHIVE_FORMAT_RAW;
            format = layers(a.get(), raw);
            if (format.empty()) // raw bytes with no layer: not an archive at all
                return binary_signature(data) ? read_status::malformed : read_status::not_archive;
            first = false;
        }
        if (archive_entry_is_encrypted(e))
            return read_status::encrypted;
        const char* path = archive_entry_pathname(e);
        const std::string_view name = path ? path : "?";
        w.names.append(name);
        if (const char* to = archive_entry_symlink(e); to != nullptr)
            w.names.append(" -> ").append(to);
        else if (const char* hard = archive_entry_hardlink(e); hard != nullptr)
            w.names.append(" -> ").append(hard);
        w.names += '\n';
        if (w.names.size() > w.room)
            return read_status::over_limit;
        if (archive_entry_filetype(e) != AE_IFREG && !raw)
            continue;
        if (const auto st = read_member(a.get(), w); st != read_status::ok)
            return st;
        w.room -= w.bytes.size();
        if (!w.bytes.empty() && !w.each(format, name, w.bytes))
            return read_status::stopped;
    }
    if (first)
        return binary_signature(data) ? read_status::malformed : read_status::not_archive;
    w.room -= w.names.size();
    if (!raw && !w.each(format, {}, w.names))
        return read_status::stopped;
    w.names.clear();
    return read_status::ok;
}

} // namespace

bool may_hold_archive(std::string_view data) noexcept {
    return binary_signature(data) || text_signature(data) ||
           next_zip(data, 0) != std::string_view::npos;
}

read_status read_archives(std::string_view data, std::size_t max_bytes, std::size_t max_archives,
                          const visitor& each) {
    walk w{max_bytes, each, {}, {}};
    bool found = false;
    std::size_t from = 0;
    if (binary_signature(data) || text_signature(data)) {
        const auto st = read_one(data, w);
        if (st != read_status::ok && st != read_status::not_archive)
            return st;
        found = st == read_status::ok;
        if (found && !at(data, 0, zip_local))
            return st; // its members are the caller's to open, archives inside included
        if (found)
            from = data.find(zip_end);
    }
    for (std::size_t n = found ? 1 : 0; n < max_archives && from != std::string_view::npos; ++n) {
        const std::size_t start = next_zip(data, from);
        if (start == std::string_view::npos)
            break;
        const auto st = read_one(data.substr(start), w);
        if (st == read_status::not_archive)
            return read_status::malformed; // a zip signature libarchive cannot read
        if (st != read_status::ok)
            return st;
        found = true;
        from = data.find(zip_end, start);
    }
    return found ? read_status::ok : read_status::not_archive;
}

std::string_view describe(read_status st) noexcept {
    switch (st) {
    case read_status::ok:
        return "ok";
    case read_status::not_archive:
        return "not an archive";
    case read_status::malformed:
        return "the archive is corrupt, cut short or has a member that cannot be read";
    case read_status::encrypted:
        return "the archive has an encrypted member, which cannot be inspected";
    case read_status::over_limit:
        return "the archive's members exceed the decode budget";
    case read_status::stopped:
        return "stopped";
    }
    return "unknown";
}

} // namespace sluice::dlp::archive
