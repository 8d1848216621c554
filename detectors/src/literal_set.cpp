#include "sluice/detectors/literal_set.hpp"

#include "detail/thread_scratch.hpp"

#include <limits>

namespace sluice::detectors {

std::expected<std::shared_ptr<const literal_set>, std::string>
literal_set::compile(const std::vector<std::string>& literals, options opts) {
    std::shared_ptr<literal_set> set(new literal_set());
    set->serial_ = detail::next_database_serial();
    set->size_ = literals.size();
    if (literals.empty())
        return set;
    std::vector<const char*> exprs;
    std::vector<std::size_t> lens;
    std::vector<unsigned> ids;
    exprs.reserve(literals.size());
    lens.reserve(literals.size());
    ids.reserve(literals.size());
    for (std::size_t i = 0; i < literals.size(); ++i) {
        if (literals[i].empty())
            return std::unexpected("literal #" + std::to_string(i + 1) + " is empty");
        exprs.push_back(literals[i].data());
        lens.push_back(literals[i].size());
        ids.push_back(static_cast<unsigned>(i));
    }
    const unsigned flag =
        (opts.caseless ? HS_FLAG_CASELESS : 0u) | (opts.first_only ? HS_FLAG_SINGLEMATCH : 0u);
    const std::vector<unsigned> flags(literals.size(), flag);
    hs_database_t* db = nullptr;
    hs_compile_error_t* err = nullptr;
    if (hs_compile_lit_multi(exprs.data(), flags.data(), ids.data(), lens.data(),
                             static_cast<unsigned>(exprs.size()), HS_MODE_BLOCK, nullptr, &db,
                             &err) != HS_SUCCESS) {
        // Hyperscan's message may quote the expression: it is not passed on.
        hs_free_compile_error(err);
        return std::unexpected("cannot compile " + std::to_string(literals.size()) +
                               " literals (hyperscan error)");
    }
    set->db_ = db;
    return set;
}

literal_set::~literal_set() {
    hs_free_database(static_cast<hs_database_t*>(db_));
}

namespace {

struct call {
    literal_set::match_fn fn;
    void* ctx;
};

int on_hit(unsigned id, unsigned long long, unsigned long long to, unsigned, void* p) {
    const auto& c = *static_cast<call*>(p);
    return c.fn(c.ctx, id, static_cast<std::size_t>(to)) != 0 ? 1 : 0;
}

} // namespace

bool literal_set::scan(std::string_view text, match_fn on_match, void* ctx) const {
    if (!db_ || text.empty())
        return true;
    if (text.size() > std::numeric_limits<unsigned>::max())
        return false;
    auto* db = static_cast<hs_database_t*>(db_);
    hs_scratch_t* s = detail::thread_scratch(db, serial_);
    if (!s)
        return false;
    call c{on_match, ctx};
    const hs_error_t rc =
        hs_scan(db, text.data(), static_cast<unsigned>(text.size()), 0, s, on_hit, &c);
    return rc == HS_SUCCESS || rc == HS_SCAN_TERMINATED;
}

} // namespace sluice::detectors
