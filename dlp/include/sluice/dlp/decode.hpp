// Single-step decoders used by the variant pipeline (variants.hpp): text encodings
// (base64, hex, percent, JSON/JS escapes, HTML entities, quoted-printable), HTTP
// Content-Encoding (gzip, deflate, br, zstd through zlib, libbrotli, libzstd) and Unicode
// folding (utf8proc NFKD + ICU TR39 skeletons). Each decoder appends to `out` (which it
// clears first), never throws (allocation failure aside, which callers catch), and is
// thread safe (the ICU spoof checker and the skeleton cache are thread_local).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

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

/// Percent-decoding (%HH; invalid sequences are kept as they are); with `plus_is_space`
/// '+' becomes ' ' (application/x-www-form-urlencoded). True if anything was decoded.
bool percent(std::string_view in, std::string& out, bool plus_is_space = false);

/// JSON and JavaScript string escapes: \uXXXX (surrogate pairs joined, lone surrogates
/// dropped), \u{X...}, \xNN, \0-\7 octal, \n \r \t \b \f \v \" \' \\ \/; an unknown
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

/// One Content-Encoding step: "gzip"/"x-gzip" (multi-member), "deflate" (zlib wrapper,
/// else raw DEFLATE), "br", "zstd", "identity" (copy). `coding` is matched
/// case-insensitively without surrounding blanks. Output is produced in bounded chunks:
/// memory and time are O(limit) whatever the compression ratio.
inflate_status content(std::string_view coding, std::string_view in, std::size_t limit,
                       std::string& out);

/// A compressed stream recognised by its magic, for bytes that came without a
/// Content-Encoding: zstd (28 b5 2f fd), gzip (1f 8b 08) or zlib (CMF/FLG check). `name`
/// is set to "zstd", "gzip" or "deflate"; `unknown` when no magic matches. On `error`
/// (truncated or corrupt stream) `out` holds what was decoded before the fault, which is
/// still worth scanning. Bounded by `limit` like content().
inflate_status sniffed(std::string_view in, std::size_t limit, std::string& out,
                       std::string_view& name);

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

} // namespace sluice::dlp::decode
