// The text transforms of decode.hpp (base32, ascii85, UTF-16/32, bare quoted-printable,
// byte lists, one separator between characters, uuencode, ROT13, reversal) through the
// variant pipeline over the real built-in rules: the red-team inputs that forwarded a
// checksum-valid GitHub token are found with the documented variant, and look-alikes in
// ordinary text are not decoded into findings. The encoded inputs were produced by
// Python's standard library (base64, binascii, codecs) from the rule's first example.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/decode.hpp"
#include "sluice/dlp/variants.hpp"

#include <bzlib.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::dlp;

namespace {

constexpr std::string_view token = "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";

struct planted {
    std::string_view variant;
    std::string text;
};

const std::vector<planted>& red_team_inputs() {
    static const std::vector<planted> v = {
        {"base32", "{\"k\":\"M5UHAX2PNBRFM4TQN5UVMZ2SKY2USZSMIJRWEZTON5DU2YSKNVKFAUZSM5VE45LU\"}"},
        {"base32", "data: m5uhax2pnbrfm4tqn5uvmz2sky2uszsmijrwezton5du2ysknvkfauzsm5ve45lu\n"},
        {"base32hex",
         "{\"k\":\"CTK70NQFD1H5CSJGDTKLCPQIAOQKIPIC89HM4PJEDT3KQOIADLA50KPICTL4STBK\"}"},
        {"ascii85", "<~B4u6k:M=3<Ec>r2<bG<22+_CR6=XJ:DJr$>@S1K::fB,^C//nn~>"},
        {"qp", "key==67=68=70=5F=4F=68=62=56=72=70=6F=69=56=67=52=56=35=49=66=4C=42=63=62=66="
               "6E=6F=47=4D=62=4A=6D=54=50=53=32=67=6A=4E=75=74"},
        {"qp", "key: ghp_OhbVrpoiVgRV5IfL=\r\nBcbfnoGMbJmTPS2gjNut\r\n"},
        {"bytes", "0x67,0x68,0x70,0x5f,0x4f,0x68,0x62,0x56,0x72,0x70,0x6f,0x69,0x56,0x67,0x52,"
                  "0x56,0x35,0x49,0x66,0x4c,0x42,0x63,0x62,0x66,0x6e,0x6f,0x47,0x4d,0x62,0x4a,"
                  "0x6d,0x54,0x50,0x53,0x32,0x67,0x6a,0x4e,0x75,0x74"},
        {"bytes", "x = [103, 104, 112, 95, 79, 104, 98, 86, 114, 112, 111, 105, 86, 103, 82, 86, "
                  "53, 73, 102, 76, 66, 99, 98, 102, 110, 111, 71, 77, 98, 74, 109, 84, 80, 83, "
                  "50, 103, 106, 78, 117, 116]"},
        {"bytes", "103 104 112 95 79 104 98 86 114 112 111 105 86 103 82 86 53 73 102 76 66 99 "
                  "98 102 110 111 71 77 98 74 109 84 80 83 50 103 106 78 117 116"},
        {"bytes", "\\x67 \\x68 \\x70 \\x5f \\x4f \\x68 \\x62 \\x56 \\x72 \\x70 \\x6f \\x69 \\x56 "
                  "\\x67 \\x52 \\x56 \\x35 \\x49 \\x66 \\x4c \\x42 \\x63 \\x62 \\x66 \\x6e \\x6f "
                  "\\x47 \\x4d \\x62 \\x4a \\x6d \\x54 \\x50 \\x53 \\x32 \\x67 \\x6a \\x4e \\x75 "
                  "\\x74"},
        {"bits", "b = \"01100111 01101000 01110000 01011111 01001111 01101000 01100010 010"
                 "10110 01110010 01110000 01101111 01101001 01010110 01100111 01010010 010"
                 "10110 00110101 01001001 01100110 01001100 01000010 01100011 01100010 011"
                 "00110 01101110 01101111 01000111 01001101 01100010 01001010 01101101 010"
                 "10100 01010000 01010011 00110010 01100111 01101010 01001110 01110101 011"
                 "10100\""},
        {"bits", "data: 011001110110100001110000010111110100111101101000011000100101011001"
                 "110010011100000110111101101001010101100110011101010010010101100011010101"
                 "001001011001100100110001000010011000110110001001100110011011100110111101"
                 "000111010011010110001001001010011011010101010001010000010100110011001001"
                 "10011101101010010011100111010101110100\n"},
        {"bits", "[1100111,1101000,1110000,1011111,1001111,1101000,1100010,1010110,1110010"
                 ",1110000,1101111,1101001,1010110,1100111,1010010,1010110,0110101,1001001"
                 ",1100110,1001100,1000010,1100011,1100010,1100110,1101110,1101111,1000111"
                 ",1001101,1100010,1001010,1101101,1010100,1010000,1010011,0110010,1100111"
                 ",1101010,1001110,1110101,1110100]"},
        {"spaced", "my key: g h p _ O h b V r p o i V g R V 5 I f L B c b f n o G M b J m T P S 2 "
                   "g j N u t"},
        {"spaced", "my key: g-h-p-_-O-h-b-V-r-p-o-i-V-g-R-V-5-I-f-L-B-c-b-f-n-o-G-M-b-J-m-T-P-"
                   "S-2-g-j-N-u-t\n"},
        {"concat", "const token = \"ghp_OhbVrpoiVgRV\" + \"5IfLBcbfnoGMbJmTPS2gjNut\";"},
        {"concat", "t = ('ghp_OhbVrpoi' +\n     'VgRV5IfLBcbf' + 'noGMbJmTPS2gjNut')\n"},
        {"grouped", "key: ghp_-OhbV-rpoi-VgRV-5IfL-Bcbf-noGM-bJmT-PS2g-jNut\n"},
        {"grouped", "k=ghp_Oh.bVrpoi.VgRV5I.fLBcbf.noGMbJ.mTPS2g.jNut;"},
        {"uu", "begin 644 t.txt\nH9VAP7T]H8E9R<&]I5F=25C5)9DQ\"8V)F;F]'36)*;5104S)G:DYU=   "
               "\n`\nend\n"},
        {"rot13", "token: tuc_BuoIecbvItEI5VsYOposabTZoWzGCF2twAhg"},
        {"reverse", "sknaht tuNjg2SPTmJbMGonfbcBLfI5VRgVioprVbhO_phg si nekot buhtig ym"},
    };
    return v;
}

// `s` (ASCII) as UTF-16 or UTF-32 code units in the given byte order, with a BOM if asked.
std::string widen(std::string_view s, int width, bool big_endian, bool bom) {
    std::string out;
    const auto unit = [&](unsigned v) {
        for (int k = 0; k < width; ++k) {
            const int shift = 8 * (big_endian ? width - 1 - k : k);
            out.push_back(static_cast<char>((v >> shift) & 0xff));
        }
    };
    if (bom)
        unit(0xfeff);
    for (const char c : s)
        unit(static_cast<unsigned char>(c));
    return out;
}

class transforms_test : public ::testing::Test {
protected:
    void SetUp() override {
        auto rules = config::builtin_ruleset();
        ASSERT_TRUE(rules.has_value());
        scanner_.emplace(*rules);
    }
    std::vector<variant_finding> scan(std::string_view text) {
        variant_scanner vs(*scanner_);
        std::vector<variant_finding> out;
        EXPECT_EQ(vs.scan(text, "body", out), variant_status::ok);
        return out;
    }
    std::optional<detectors::scanner> scanner_;
};

} // namespace

TEST_F(transforms_test, red_team_encodings_are_found_with_their_variant) {
    for (const auto& p : red_team_inputs()) {
        const auto found = scan(p.text);
        ASSERT_FALSE(found.empty()) << p.variant << ": " << p.text;
        EXPECT_EQ(found.front().f.rule_id, "github-pat-classic") << p.text;
        EXPECT_EQ(found.front().variant, p.variant) << p.text;
    }
}

TEST_F(transforms_test, utf16_and_utf32_in_either_order_with_or_without_bom) {
    const std::string text = "{\"key\": \"" + std::string(token) + "\"}";
    for (const int width : {2, 4})
        for (const bool be : {false, true})
            for (const bool bom : {false, true}) {
                const auto found = scan(widen(text, width, be, bom));
                ASSERT_FALSE(found.empty()) << width << be << bom;
                EXPECT_EQ(found.front().f.rule_id, "github-pat-classic");
                EXPECT_EQ(found.front().variant,
                          std::string(width == 2 ? "utf16" : "utf32") + (be ? "be" : "le"));
            }
}

TEST_F(transforms_test, wide_text_inside_other_bytes_at_any_offset) {
    // A UTF-16/32 run after an ASCII prefix of any length (odd lengths put its characters
    // at odd offsets; 5000 puts it past the 4 KiB the whole-buffer sniff looks at), and
    // after a stray byte inside a UTF-16 body (the whole-buffer conversion reads it
    // misaligned from there on).
    const std::string text = "{\"key\": \"" + std::string(token) + "\"}";
    for (const int width : {2, 4})
        for (const bool be : {false, true})
            for (const std::size_t prefix : {1u, 2u, 3u, 7u, 5000u}) {
                const std::string body = std::string(prefix, 'a') + widen(text, width, be, false);
                const auto found = scan(body);
                ASSERT_FALSE(found.empty()) << width << be << prefix;
                EXPECT_EQ(found.front().f.rule_id, "github-pat-classic");
                // Either byte order's name: text at an odd offset reads the same as the
                // other order shifted by one byte.
                EXPECT_TRUE(found.front().variant.starts_with(width == 2 ? "utf16" : "utf32"))
                    << width << be << prefix << ": " << found.front().variant;
            }
    const std::string lead = widen(std::string(600, 'x') + " note ", 2, false, true);
    const auto found = scan(lead + "!" + widen(text, 2, false, false));
    ASSERT_FALSE(found.empty());
    EXPECT_EQ(found.front().variant, "utf16le");
}

TEST_F(transforms_test, wide_runs_in_binary_bytes_are_cheap_and_quiet) {
    // NUL-rich bytes with short ASCII-looking runs and no secret: nothing is found, and a
    // UTF-16 run of a harmless word decodes without a finding.
    std::string bin;
    for (int i = 0; i < 20000; ++i)
        bin += static_cast<char>((i * 7919) % 251 == 0 ? 0 : (i % 3 == 0 ? 0 : 'A' + i % 26));
    EXPECT_TRUE(scan(bin).empty());
    EXPECT_TRUE(
        scan(std::string(3, '\x01') + widen("just an ordinary sentence", 2, false, false)).empty());
}

TEST_F(transforms_test, the_transforms_nest_with_the_other_decoders) {
    // base64 of the token, sent as UTF-16LE; the token spaced out, then percent-encoded.
    const auto wide = widen("{\"k\": \"Z2hwX09oYlZycG9pVmdSVjVJZkxCY2Jmbm9HTWJKbVRQUzJnak51dA==\"}",
                            2, false, false);
    auto found = scan(wide);
    ASSERT_FALSE(found.empty());
    EXPECT_EQ(found.front().variant, "utf16le>base64");
    std::string spaced;
    for (const char c : token) {
        spaced += c;
        spaced += "%20";
    }
    found = scan("q=" + spaced);
    ASSERT_FALSE(found.empty());
    EXPECT_EQ(found.front().variant, "pct>spaced");
}

TEST_F(transforms_test, ordinary_text_is_left_alone) {
    for (const std::string text : {
             "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22",
             "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -",
             "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f g h i j k l m",
             "begin 644 notes.txt\nthis is not uuencoded at all, just a line of prose\nend\n",
             "<~ not ascii85 at all, just text in brackets ~>",
             "price=100&qty=20&total=2000&tax=10&ship=5",
             "MyVeryLongIdentifierName2024WithDigits99",
             "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGH",
         }) {
        EXPECT_TRUE(scan(text).empty()) << text;
    }
}

TEST(transforms_decoders, edge_cases) {
    std::string out;
    EXPECT_TRUE(decode::base32("MZXW6===", out));
    EXPECT_EQ(out, "foo");
    EXPECT_FALSE(decode::base32("MZ=XW6", out)); // padding inside
    EXPECT_FALSE(decode::base32("MZXW1", out));  // '1' is not in the alphabet
    EXPECT_TRUE(decode::base32("CPNMU", out, true));
    EXPECT_EQ(out, "foo");
    EXPECT_TRUE(decode::ascii85("<~9jqo^~>", out)); // "Man " (PLRM example)
    EXPECT_EQ(out, "Man ");
    EXPECT_TRUE(decode::ascii85("z", out));
    EXPECT_EQ(out, std::string(4, '\0'));
    EXPECT_FALSE(decode::ascii85("s8W-\"", out));  // over 2^32 - 1
    EXPECT_FALSE(decode::byte_list("1,2,3", out)); // too short
    EXPECT_FALSE(decode::byte_list("1,2,3,4,5,6,7,256", out));
    EXPECT_TRUE(decode::unspace("a.b.c.d.e.f.g.h", out));
    EXPECT_EQ(out, "abcdefgh");
    EXPECT_FALSE(decode::unspace("a.b.c.d.e.f.g.hh", out));
    decode::rot13("Hello, World", out);
    EXPECT_EQ(out, "Uryyb, Jbeyq");
    EXPECT_EQ(decode::sniff_wide(std::string(40, 'a')), nullptr);
}

TEST_F(transforms_test, a_token_without_its_prefix_is_found_when_its_checksum_verifies) {
    const std::string body(token.substr(4));
    const auto found = scan("{\"github_token\": \"" + body + "\"}");
    const auto it = std::find_if(found.begin(), found.end(), [](const variant_finding& f) {
        return f.f.rule_id == "github-pat-classic";
    });
    ASSERT_NE(it, found.end());
    EXPECT_EQ(it->variant, "unprefixed");
    std::string bad = body;
    bad.back() = bad.back() == 'A' ? 'B' : 'A';
    EXPECT_TRUE(scan("{\"k\": \"" + bad + "\"}").empty());
    EXPECT_TRUE(detectors::validate("github_strict", body));
    EXPECT_TRUE(detectors::validate("github_strict", "GHP_" + body));
    EXPECT_FALSE(detectors::validate("github_strict", bad));
}

TEST_F(transforms_test, bzip2_and_raw_deflate_bodies_without_content_encoding) {
    const std::string text = std::string(5000, ' ') + "key=" + std::string(token) + "\n";
    // bzip2 through libbz2, raw DEFLATE (no zlib header, RFC 1951) through zlib.
    std::string bz(text.size() + 1024, '\0');
    unsigned bz_len = static_cast<unsigned>(bz.size());
    ASSERT_EQ(BZ2_bzBuffToBuffCompress(bz.data(), &bz_len, const_cast<char*>(text.data()),
                                       static_cast<unsigned>(text.size()), 9, 0, 0),
              BZ_OK);
    bz.resize(bz_len);
    z_stream zs{};
    ASSERT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string raw(text.size() + 1024, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    zs.avail_in = static_cast<uInt>(text.size());
    zs.next_out = reinterpret_cast<Bytef*>(raw.data());
    zs.avail_out = static_cast<uInt>(raw.size());
    ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    raw.resize(zs.total_out);
    deflateEnd(&zs);
    for (const auto& [body, variant] :
         {std::pair{bz, "bzip2"}, std::pair{bz + bz, "bzip2"}, std::pair{raw, "raw-deflate"}}) {
        variant_scanner vs(*scanner_);
        std::vector<variant_finding> out;
        ASSERT_EQ(vs.scan_body(body, "application/octet-stream", "", out), variant_status::ok);
        ASSERT_FALSE(out.empty()) << variant;
        EXPECT_EQ(out.front().f.rule_id, "github-pat-classic");
        EXPECT_EQ(out.front().variant, variant);
    }
    // Binary that is not DEFLATE: tried, nothing decoded, nothing found.
    std::string binary;
    for (int i = 0; i < 4096; ++i)
        binary.push_back(static_cast<char>((i * 2654435761u) >> 13));
    variant_scanner vs(*scanner_);
    std::vector<variant_finding> out;
    EXPECT_EQ(vs.scan_body(binary, "application/octet-stream", "", out), variant_status::ok);
    EXPECT_TRUE(out.empty());
}
