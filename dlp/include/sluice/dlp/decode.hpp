// Single-step decoders used by the variant pipeline (variants.hpp): text encodings
// (base64, hex, percent, JSON/JS escapes, HTML entities, quoted-printable), HTTP
// Content-Encoding (gzip, deflate, br, zstd through zlib, libbrotli, libzstd) and Unicode
// folding (utf8proc NFKD + ICU TR39 skeletons). Each decoder appends to `out` (which it
// clears first), never throws (allocation failure aside, which callers catch), and is
// thread safe (the ICU spoof checker and the skeleton cache are thread_local).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dlp::decode {

/// Base64, standard (`+/`) and URL-safe (`-_`) alphabets (mixed is accepted), padding
/// optional, CR/LF line breaks skipped (MIME/PEM wrapping at any column), also when
/// written as JSON/JavaScript string escapes (`\r`, `\n`). Stops at the
/// first '=' or at any other byte outside the alphabets. False if no byte was decoded.
bool base64(std::string_view in, std::string& out);

/// Hex pairs, plain ("6768") or delimited by ':', '-', ' ' or written as "\x67" / "0x67";
/// delimiters are skipped between pairs. False on an odd digit count, any other byte, or
/// nothing decoded.
bool hex(std::string_view in, std::string& out);

/// Percent-decoding (%HH, and %uXXXX as a code point in UTF-8, the form of JavaScript's
/// escape(); invalid sequences are kept as they are); with `plus_is_space`
/// '+' becomes ' ' (application/x-www-form-urlencoded). True if anything was decoded.
bool percent(std::string_view in, std::string& out, bool plus_is_space = false);

/// JSON and JavaScript string escapes: \uXXXX (surrogate pairs joined, lone surrogates
/// dropped), \u{X...}, \UXXXXXXXX (C, Python), \xNN, \x{X...} (Perl), \0-\7 octal,
/// \n \r \t \b \f \v \" \' \\ \/; an unknown
/// escape yields the escaped character. Output is UTF-8. True if anything was decoded.
bool js_escape(std::string_view in, std::string& out);

/// HTML character references: &#NNN; &#xHH; and the common named ones (amp lt gt quot apos
/// nbsp and a few punctuation names). Unknown names are kept. True if anything was decoded.
bool html_entities(std::string_view in, std::string& out);

/// Quoted-printable (RFC 2045): =HH, soft line breaks "=\r\n" / "=\n". True if anything
/// was decoded.
bool quoted_printable(std::string_view in, std::string& out);

enum class inflate_status {
    ok,         ///< complete, output within limit
    over_limit, ///< output would exceed `limit` bytes (work stopped there)
    error,      ///< malformed or truncated stream
    unknown,    ///< unknown coding name
};

/// Bytes of a coded body that a decoder does not turn into output, each a copy of input
/// bytes, in input order: the gzip header fields FEXTRA, FNAME and FCOMMENT of every member
/// (RFC 1952 section 2.3.1), the payload of every zstd skippable frame (RFC 8878 section
/// 3.1.2), and whatever follows the end of the last gzip member, zlib/DEFLATE stream or
/// brotli stream (RFC 7932 section 9.1 ends a stream at ISLAST; the bytes after it are
/// not part of it). zstd bytes after the last frame that are not a frame are an `error`.
/// The caller scans them: no byte of a body is skipped because a decoder skipped it.
using leftovers = std::vector<std::string>;

/// One Content-Encoding step: "gzip"/"x-gzip" (multi-member), "deflate" (zlib wrapper,
/// else raw DEFLATE), "br", "zstd", "identity" (copy). `coding` is matched
/// case-insensitively without surrounding blanks. Output is produced in bounded chunks:
/// memory and time are O(limit) whatever the compression ratio. When `left` is not null
/// it receives the leftovers (see `leftovers`); they do not count against `limit`. When
/// `cut` is not null it is set to whether the stream was cut short: every byte of `in`
/// decoded without an error and the stream had not ended (the status is then `error`,
/// and more bytes would have gone on with it); a corrupt stream is not cut short.
inflate_status content(std::string_view coding, std::string_view in, std::size_t limit,
                       std::string& out, leftovers* left = nullptr, bool* cut = nullptr);

/// A compressed stream recognised by its magic, for bytes that came without a
/// Content-Encoding: zstd (28 b5 2f fd), gzip (1f 8b 08), zlib (CMF/FLG check), bzip2
/// ("BZh1".."BZh9" and a block or end magic), xz (its stream header, The .xz File Format
/// 1.1.0 section 2.1.1; liblzma), lzma (an LZMA_Alone header that passes the checks of
/// src/decoders/magic.hpp and whose first bytes decode; liblzma), else raw DEFLATE tried on
/// binary-looking bytes. `name` is set to "zstd", "gzip", "deflate", "bzip2", "xz", "lzma"
/// or "raw-deflate"; `unknown` when none matches. One .xz or .lzma stream is decoded; bytes
/// after it are leftovers (another stream there is one embedded_offsets() finds). On `error`
/// (truncated or corrupt stream) `out` holds what was decoded before the fault, which is
/// still worth scanning. Bounded by `limit` like content(); `left` and `cut` as for
/// content() (`cut` is false when no stream was recognised).
inflate_status sniffed(std::string_view in, std::size_t limit, std::string& out,
                       std::string_view& name, leftovers* left = nullptr, bool* cut = nullptr);

/// Offsets in `data` where a gzip member (1f 8b 08) or a zstd frame (28 b5 2f fd) starts
/// a stream, in order, at most `max` of them: compressed bytes hidden after other bytes.
std::vector<std::size_t> magic_offsets(std::string_view data, std::size_t max);

/// True if the first bytes of `data` read like the start of any stream sniffed() opens,
/// judged from at most 12 bytes and without decoding: a gzip member, a zstd frame, a zlib
/// header, bzip2's "BZh1".."BZh9" and block or end magic, an .xz stream header (all 12
/// bytes), or an .lzma header's properties and dictionary size (bytes 0-4, bounded as
/// embedded_offsets() bounds them). A cheap test of where a stream may start (such as
/// which alignment of a base64 run to decode): sniffed() decides.
bool starts_compressed(std::string_view data) noexcept;

/// Every offset in `data` where a compressed stream that sniffed() opens may start: a gzip
/// member, a zstd frame, a bzip2 stream ("BZh1".."BZh9" and a block or end magic), a zlib
/// stream (RFC 1950 header check, and its first bytes inflate without an error), an .xz
/// stream (magic FD 37 7A 58 5A 00, Stream Flags and their CRC32: The .xz File Format 1.1.0
/// section 2.1.1) or an .lzma stream (LZMA_Alone, which has no magic: properties,
/// dictionary size, uncompressed size and first range-coder byte as xz-utils'
/// lzma_alone_decoder and the LZMA SDK's lzma-file-format.txt give them, bounded as
/// src/decoders/magic.hpp says, and its first bytes decode without an error through
/// liblzma). Text never starts an .lzma stream (byte 13 of one is zero).
/// All of them, in order: the caller bounds the work (each offset is a candidate).
std::vector<std::size_t> embedded_offsets(std::string_view data);

/// Bytes after an offset that embedded_offsets() reads to decide on it: the zlib and .lzma
/// probes decode up to this many (the longest fixed header, an .xz stream header, is 12). With
/// fewer there, a start may be reported that more bytes would rule out, or a bzip2 or zlib
/// start missed; a caller that has only part of a body holds the last ones back.
inline constexpr std::size_t embedded_probe = 256;

/// The first offset below `end` that embedded_offsets(data) reports (its probe reads the
/// bytes after `end` too), or npos: for a body seen in pieces, which searches up to the
/// last embedded_probe bytes of what it has and starts a decoder at the first hit. When
/// `coding` is not null it is set to the stream_decoder coding for it: "gzip", "zstd",
/// "bzip2", "zlib", "xz" or "lzma".
std::size_t first_embedded(std::string_view data, std::size_t end,
                           std::string_view* coding = nullptr);

/// One Content-Encoding decoder fed a body piece by piece (a streamed body, RFC 9112
/// chunks, windows): the same codings and the same output bound as content(), with one
/// zlib/brotli/zstd state for the whole stream, so a stream split anywhere decodes to the
/// same bytes as whole. "deflate" picks the zlib wrapper when the first two bytes pass its
/// header check (RFC 1950 section 2.2), else raw DEFLATE (RFC 1951). Internal codings for
/// streams recognised by their magic: "zlib" (wrapper only), "raw-deflate", "bzip2"
/// (libbz2; bzip2 is no HTTP coding), "xz" and "lzma" (one .xz or .lzma stream, liblzma:
/// 80 MiB of decoder memory at most, more is over_limit; an .lzma dictionary declared over
/// 64 MiB is over_limit past 64 MiB of output). After the stream ends (ended()), further
/// bytes are not decoded (gzip: unless they start another member; bzip2: unless they start
/// "BZh1".."BZh9", another stream).
/// Not thread safe; movable, not copyable. Never throws except std::bad_alloc.
class stream_decoder {
public:
    /// An unknown coding gives a decoder whose valid() is false.
    explicit stream_decoder(std::string_view coding);
    ~stream_decoder();
    stream_decoder(stream_decoder&&) noexcept;
    stream_decoder& operator=(stream_decoder&&) noexcept;

    bool valid() const noexcept;
    /// Decodes the next bytes of the stream, appending to `out` (not cleared). `limit`
    /// bounds out.size() (over_limit stops there). `error`: malformed input, the decoder
    /// is then unusable. `ok`: every byte of `in` was consumed.
    inflate_status feed(std::string_view in, std::size_t limit, std::string& out);
    /// End of input: `ok` when the last stream is complete, else `error` (truncated).
    inflate_status finish() const noexcept;
    /// True once the (last) stream ended; bytes fed after that are leftovers.
    bool ended() const noexcept;
    /// Input bytes consumed as stream data (not counting leftovers).
    std::size_t consumed() const noexcept;
    /// Leftovers collected so far (gzip header fields, bytes after the end) when built
    /// with keep_leftovers(true); each capped at 1 MiB.
    leftovers& left() noexcept;
    void keep_leftovers(bool on) noexcept;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

/// True if `data` starts like a gzip member (1f 8b 08), a zstd frame (28 b5 2f fd, RFC 8878
/// section 3.1.1) or a zlib stream (CMF/FLG check).
bool looks_compressed(std::string_view data) noexcept;

/// Unicode folding for look-alike evasion: invalid UTF-8 bytes are dropped, default
/// ignorable code points (zero-width space/joiners, bidi controls, soft hyphen, BOM) are
/// removed, NFKD is applied (full-width and other compatibility forms become ASCII),
/// combining marks are dropped, and each remaining non-ASCII code point whose TR39
/// confusable skeleton (ICU uspoof) is ASCII is replaced by that skeleton (Cyrillic 'а',
/// Greek 'ο' -> 'a', 'o'). ASCII input is copied unchanged. True if the output differs
/// from the input.
bool fold_unicode(std::string_view in, std::string& out);

// ----------------------------------------------------------------------------------------
// Text transforms (dlp/src/decoders/transforms.cpp): encodings a red-team pass sent a
// token through. The variant pipeline finds them with more_views() (whole buffers) and,
// for base32, rot13 and reversal, on the base64-alphabet runs its candidate pass visits.

/// Base32, RFC 4648 section 6 (A-Z 2-7), or section 7 (base32hex, 0-9 A-V) when
/// `hex_alphabet`; either case; '=' padding allowed at the end only; CR/LF skipped.
/// Trailing bits that do not fill a byte are dropped (a run cut short yields its prefix).
/// False on any other byte or when nothing was decoded.
bool base32(std::string_view in, std::string& out, bool hex_alphabet = false);

/// Ascii85 as Adobe writes it (PostScript Language Reference, 3rd ed., section 3.13.3,
/// ASCII85Decode): the text between "<~" and "~>" (both optional), groups of five
/// characters '!'..'u' to four bytes, 'z' for four zero bytes, whitespace skipped, a last
/// group of 2-4 characters completing fewer bytes. False on any other byte, a group over
/// 2^32 - 1, a last group of one character, or nothing decoded.
bool ascii85(std::string_view in, std::string& out);

/// The ICU converter name ("UTF-16LE", "UTF-16BE", "UTF-32LE", "UTF-32BE") `in` looks
/// like: its byte-order mark (Unicode 15 section 23.8), else NUL bytes at the positions
/// ASCII text leaves zero in that encoding in 3/4 or more of the code units of its first
/// 4 KiB (and in 1/4 or fewer of the others). nullptr when none fits or `in` is under 32
/// bytes.
const char* sniff_wide(std::string_view in) noexcept;

/// `in` converted from `encoding` (an ICU converter name, see sniff_wide) to UTF-8 with
/// ICU's ucnv_convert (a BOM is dropped, invalid units become U+FFFD). False when ICU
/// fails or the output is empty.
bool wide_text(std::string_view in, const char* encoding, std::string& out);

/// A list of byte values as code and shells write them: decimal 0-255 ("103,104"),
/// "0x67" or "\x67" hex, separated by ',', ';' or whitespace (", " too); a leading '[',
/// '{' or '(' is not part of it. False when a value is over 255 or there are fewer than
/// 8 values.
bool byte_list(std::string_view in, std::string& out);

/// Bytes written as binary digits, most significant bit first: groups of 8 (or 7, for
/// 7-bit ASCII) '0'/'1' separated by whitespace, ',' or ';' ("01100111 01101000"), or one
/// unbroken run cut into octets ("0110011101101000"). False when a group has another
/// length, a run is not a whole number of octets, or there are fewer than 8 bytes.
bool bit_string(std::string_view in, std::string& out);

/// Text with one separator byte between every two characters ("g h p _ K y"): the
/// characters, when every second byte (from `in[1]`) is the same byte, which is not a
/// letter or digit, and the characters are not all that byte. False otherwise, or when
/// fewer than 8 characters.
bool unspace(std::string_view in, std::string& out);

/// The body of a uuencoded file (POSIX.1-2017 uuencode, historical algorithm): the lines
/// after "begin MODE NAME" up to "end" or a line of length 0 ('`' or ' '), each a length
/// character (32 + n) and groups of 4 characters (32 + 6 bits, '`' for 0) to 3 bytes.
/// `in` may start at the "begin" line or after it. False when nothing was decoded.
bool uudecode(std::string_view in, std::string& out);

/// ROT13: ASCII letters rotated by 13, other bytes copied.
void rot13(std::string_view in, std::string& out);

/// A whole-buffer view found by more_views().
struct text_view {
    std::string_view step; ///< "utf16le", "utf16be", "utf32le", "utf32be", "qp",
                           ///< "bytes", "bits", "spaced", "uu", "ascii85", "concat",
                           ///< "grouped"
    std::size_t begin = 0; ///< the encoded range of the input it came from
    std::size_t end = 0;
    std::string bytes; ///< decoded
};

/// Views of `data` in encodings that do not form the base64/hex runs or escape regions
/// the candidate pass of the variant pipeline looks for, each found by a cheap test:
/// - UTF-16/UTF-32 text (sniff_wide; a NUL byte in the first 4 KiB first);
/// - quoted-printable (RFC 2045 section 6.7) outside a MIME part: the whitespace-delimited
///   token around a soft line break ("=" CRLF or LF; continued across further ones) or two
///   adjacent "=HH" octets;
/// - byte lists, binary digits and single-separator text: sampled every 64, 64 and 32
///   bytes, regions grown from a sample that fits and decoded with byte_list() /
///   bit_string() / unspace();
/// - uuencode after a "begin NNN " line; ascii85 between "<~" and "~>";
/// - string literals joined by '+' ("ghp_Ohb" + 'V...' in code), contents as written;
/// - groups of 2 to 8 characters between one punctuation byte ("ghp_-OhbV-rpoi-..."),
///   sampled every 16 bytes, joined when they hold letters and digits.
/// The triggers ('=' before a hex digit or line break, "\nb", "<~") are found 16 bytes at a
/// time (SSE2), the buffer is taken in 16 KiB blocks so each finder reads it from cache.
/// Appends at most 64 views holding at most `limit` decoded bytes together (what is over
/// is not decoded; the caller's budget is charged for what is appended).
void more_views(std::string_view data, std::size_t limit, std::vector<text_view>& out);

} // namespace sluice::dlp::decode
