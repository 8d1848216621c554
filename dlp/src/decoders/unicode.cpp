// Unicode folding with the libraries' tables: utf8proc for NFKD, default-ignorable removal
// and mark stripping; ICU's spoof checker for TR39 confusable skeletons. The skeleton is
// taken per non-ASCII code point only: applied to a whole string it would also rewrite
// ASCII (TR39 maps '1' and 'I' to 'l', '0' to 'O'), destroying the tokens we look for.
#include "sluice/dlp/decode.hpp"

#include <unicode/uspoof.h>
#include <utf8proc.h>

#include <memory>
#include <unordered_map>

namespace sluice::dlp::decode {

namespace {

struct spoof_closer {
    void operator()(USpoofChecker* p) const noexcept { uspoof_close(p); }
};

// The ASCII skeleton of `cp`, or empty if it has none (or ICU is unavailable).
const std::string& ascii_skeleton(utf8proc_int32_t cp) {
    thread_local std::unique_ptr<USpoofChecker, spoof_closer> checker = [] {
        UErrorCode st = U_ZERO_ERROR;
        USpoofChecker* sc = uspoof_open(&st);
        if (U_FAILURE(st)) {
            return std::unique_ptr<USpoofChecker, spoof_closer>();
        }
        return std::unique_ptr<USpoofChecker, spoof_closer>(sc);
    }();
    thread_local std::unordered_map<utf8proc_int32_t, std::string> cache;
    auto it = cache.find(cp);
    if (it != cache.end())
        return it->second;
    std::string skel;
    if (checker && cache.size() < 65536) {
        utf8proc_uint8_t src[4];
        const auto n = utf8proc_encode_char(cp, src);
        char dst[64];
        UErrorCode st = U_ZERO_ERROR;
        const int32_t len =
            uspoof_getSkeletonUTF8(checker.get(), 0, reinterpret_cast<const char*>(src),
                                   static_cast<int32_t>(n), dst, sizeof dst, &st);
        if (U_SUCCESS(st) && len > 0 && len < static_cast<int32_t>(sizeof dst)) {
            bool ascii = true;
            for (int32_t i = 0; i < len; ++i)
                ascii = ascii && static_cast<unsigned char>(dst[i]) < 0x80;
            if (ascii)
                skel.assign(dst, static_cast<std::size_t>(len));
            // TR39 folds I, l and 1 into one skeleton, "l". A capital letter that looks
            // like them (Cyrillic U+0406 and U+04C0, Greek U+0399) stands for 'I' in a
            // token, as upper-case keys (AWS, GitHub) spell it.
            if (skel == "l" && utf8proc_category(cp) == UTF8PROC_CATEGORY_LU)
                skel = "I";
        }
    } else if (checker) {
        static const std::string none;
        return none; // cache full (hostile input with many distinct code points)
    }
    return cache.emplace(cp, std::move(skel)).first->second;
}

} // namespace

bool fold_unicode(std::string_view in, std::string& out) {
    out.clear();
    out.reserve(in.size());
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(in.data());
    const auto n = static_cast<utf8proc_ssize_t>(in.size());
    constexpr auto options = static_cast<utf8proc_option_t>(UTF8PROC_COMPAT | UTF8PROC_DECOMPOSE |
                                                            UTF8PROC_STRIPMARK | UTF8PROC_IGNORE);
    utf8proc_ssize_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            out += static_cast<char>(p[i++]);
            continue;
        }
        utf8proc_int32_t cp = 0;
        const auto len = utf8proc_iterate(p + i, n - i, &cp);
        if (len <= 0) {
            ++i; // invalid byte: dropped (a binary blob is not text to fold)
            continue;
        }
        i += len;
        utf8proc_int32_t dec[32];
        int boundclass = UTF8PROC_BOUNDCLASS_START;
        const auto m = utf8proc_decompose_char(cp, dec, 32, options, &boundclass);
        if (m < 0 || m > 32)
            continue;
        for (utf8proc_ssize_t k = 0; k < m; ++k) {
            const auto c = dec[k];
            if (c < 0x80) {
                out += static_cast<char>(c);
                continue;
            }
            const std::string& skel = ascii_skeleton(c);
            if (!skel.empty()) {
                out += skel;
            } else {
                utf8proc_uint8_t buf[4];
                const auto w = utf8proc_encode_char(c, buf);
                out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(w));
            }
        }
    }
    return out != in;
}

} // namespace sluice::dlp::decode
