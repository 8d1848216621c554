#include "detail/thread_scratch.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>

namespace sluice::detectors::detail {

std::uint64_t next_database_serial() noexcept {
    static std::atomic<std::uint64_t> serials{0};
    return ++serials;
}

namespace {

struct scratch_holder {
    hs_scratch_t* s = nullptr;
    // The serials of the databases s was last fitted to. Configurations are replaced by
    // reloads, so old serials go stale; when the list is full it starts over, and the
    // databases still in use are fitted again (a scratch never shrinks).
    std::array<std::uint64_t, 8> fits{};
    std::size_t n = 0;
    ~scratch_holder() { hs_free_scratch(s); }
};

} // namespace

hs_scratch_t* thread_scratch(const hs_database_t* db, std::uint64_t serial) noexcept {
    thread_local scratch_holder h;
    const auto end = h.fits.begin() + static_cast<std::ptrdiff_t>(h.n);
    if (h.s && std::find(h.fits.begin(), end, serial) != end)
        return h.s;
    if (hs_alloc_scratch(db, &h.s) != HS_SUCCESS)
        return nullptr;
    if (h.n == h.fits.size())
        h.n = 0;
    h.fits[h.n++] = serial;
    return h.s;
}

} // namespace sluice::detectors::detail
