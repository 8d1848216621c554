// The BIP-39 English word list (2048 words, sorted, index = 11-bit value), generated at
// build time from detectors/data/bip39-english.txt by embed_wordlist.cmake, which checks
// the file's SHA-256 against the published list. Internal to sluice_detectors.
#pragma once

#include <array>
#include <span>
#include <string_view>

namespace sluice::detectors::detail {

/// The 2048 words in list order (which is byte-wise sorted: binary search is valid).
std::span<const std::string_view, 2048> bip39_english_words() noexcept;

} // namespace sluice::detectors::detail
