// Archives in request bodies (issue 21): zip, tar, 7z, RAR, cpio, ar, ISO 9660, xar and
// cabinet files (npm publish tarballs, artifact uploads, a zip in a multipart part), listed
// and their members read by libarchive (archive_read_support_format_*; libarchive's
// formats page, https://github.com/libarchive/libarchive/wiki/LibarchiveFormats), never
// by a hand-written reader. lz4 and compress (.Z) layers are opened here too; gzip, zlib,
// bzip2, zstd, xz and lzma are opened by the variant pipeline itself (decode.hpp), so a
// .tar.gz or .tar.xz reaches this reader as the tar inside the stream, at the next depth.
//
// zip is read as a stream of local file headers (the "streamable" reader: every entry
// physically present, in order, whatever the central directory lists), so an entry left
// out of the central directory is still read. An entry's data that cannot be read (an
// encrypted entry, a compression method libarchive lacks, a cut-off archive) makes the
// whole archive unreadable: the caller refuses it (bad_encoding), nothing is forwarded
// half read.
//
// Thread safety: reentrant; each call has its own libarchive handle. Nothing here throws
// except std::bad_alloc.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace sluice::dlp::archive {

enum class read_status {
    ok,
    not_archive, ///< no archive at offset 0 and no zip after other bytes
    malformed,   ///< recognised, but corrupt, cut short, or with a member it cannot read
    encrypted,   ///< a member is encrypted: its bytes cannot be inspected
    over_limit,  ///< the members would come to more than `max_bytes` in all
    stopped,     ///< `each` returned false
};

/// One archive's contents, in order: each member with a name (`member`, the path as
/// stored, `bytes` its data; directories and links have none and are not called), then
/// once with an empty `member` and `bytes` the member names, one per line ("name ->
/// target" for links), which are the sender's own text. `format` names the layers,
/// outermost first, joined by '>' ("zip", "tar", "lz4>tar", "7zip", "lz4" for an lz4 file
/// that holds no archive). Return false to stop.
using visitor =
    std::function<bool(std::string_view format, std::string_view member, std::string_view bytes)>;

/// Reads the archive that starts at offset 0 of `data`, if any, and each zip archive that
/// starts after other bytes (its local file header signature "PK\3\4", APPNOTE.TXT 4.3.7),
/// the next one looked for only after the previous one's end-of-central-directory record,
/// at most `max_archives` in all. `max_bytes`: the most all members together may come to.
/// The first failure ends the walk and is returned; `not_archive` when none was found.
read_status read_archives(std::string_view data, std::size_t max_bytes, std::size_t max_archives,
                          const visitor& each);

/// True when `data` may hold an archive for read_archives: a known signature at offset 0
/// (zip, 7z, RAR, lz4, compress, cabinet, xar, ar, cpio, tar's "ustar" at 257, ISO
/// 9660's "CD001" at 32769) or a zip local file header anywhere. One memchr pass.
bool may_hold_archive(std::string_view data) noexcept;

/// What read_status means for a person (a log line); no input bytes.
std::string_view describe(read_status st) noexcept;

} // namespace sluice::dlp::archive
