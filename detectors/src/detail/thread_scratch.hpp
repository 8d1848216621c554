// One Hyperscan scratch per thread for every database this module scans with: the
// ruleset's and every literal_set's. Hyperscan lets one scratch serve several databases
// once hs_alloc_scratch has been called with each (Hyperscan developer reference,
// "Scratch Space"); that call validates the whole database, about 40 us for a few
// hundred literals, so it is made only for a database this thread's scratch has not yet
// been fitted to. Internal to sluice_detectors.
#pragma once

#include <hs/hs.h>

#include <cstdint>

namespace sluice::detectors::detail {

/// A process-wide serial, never reused, that names one compiled database.
std::uint64_t next_database_serial() noexcept;

/// This thread's scratch, fitted to `db` (named by `serial`); null when Hyperscan cannot
/// allocate it. Valid until the thread exits; not to be used by two scans at once.
hs_scratch_t* thread_scratch(const hs_database_t* db, std::uint64_t serial) noexcept;

} // namespace sluice::detectors::detail
