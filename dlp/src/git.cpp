// git smart HTTP bodies (git.hpp): pkt-lines read here, packs read by libgit2.
#include "sluice/dlp/git.hpp"

#include <git2.h>
#include <git2/sys/odb_backend.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include <unistd.h>

namespace sluice::dlp::git {

namespace {

constexpr std::size_t max_label_path = 256; // longer paths are cut in the location

// One pkt-line (gitprotocol-common.txt "pkt-line Format"): four hex digits of length,
// themselves included; "0000" flush, "0001" delim, "0002" response-end (protocol v2).
struct pkt {
    enum class kind { data, flush, delim, end, bad } k = kind::bad;
    std::string_view payload;
};

pkt next_pkt(std::string_view& in) {
    pkt p;
    if (in.size() < 4)
        return p;
    unsigned len = 0;
    const char* first = in.data();
    auto [ptr, ec] = std::from_chars(first, first + 4, len, 16);
    if (ec != std::errc{} || ptr != first + 4)
        return p;
    if (len < 4) {
        p.k = len == 0 ? pkt::kind::flush : len == 1 ? pkt::kind::delim : pkt::kind::end;
        in.remove_prefix(4);
        return p;
    }
    if (len > in.size())
        return p;
    p.k = pkt::kind::data;
    p.payload = in.substr(4, len - 4);
    in.remove_prefix(len);
    return p;
}

bool has_capability(std::string_view caps, std::string_view name) {
    while (!caps.empty()) {
        const std::size_t sp = caps.find_first_of(" \n");
        const std::string_view word = caps.substr(0, sp);
        if (word == name ||
            (word.size() > name.size() && word.starts_with(name) && word[name.size()] == '='))
            return true;
        if (sp == std::string_view::npos)
            break;
        caps.remove_prefix(sp + 1);
    }
    return false;
}

void ensure_init() {
    static std::once_flag once;
    std::call_once(once, [] { git_libgit2_init(); });
}

std::string hex12(const git_oid* id) {
    char buf[GIT_OID_HEXSZ + 1];
    git_oid_tostr(buf, sizeof buf, id);
    return std::string(buf, 12);
}

// RAII for the libgit2 handles and the temporary directory of one read.
struct pack_files {
    std::string dir;
    git_indexer* idx = nullptr;
    git_odb* odb = nullptr;
    git_repository* repo = nullptr;
    ~pack_files() {
        if (repo)
            git_repository_free(repo);
        if (odb)
            git_odb_free(odb);
        if (idx)
            git_indexer_free(idx);
        if (!dir.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(dir, ec);
        }
    }
};

bool make_dir(pack_files& f) {
    std::error_code ec;
    auto base = std::filesystem::temp_directory_path(ec);
    if (ec)
        base = "/tmp";
    std::string tmpl = (base / "sluice-pack-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
        return false;
    f.dir = tmpl;
    return true;
}

// Indexes `pack` into f.dir (resolving every delta) and opens it as an object database.
read_status index_pack(std::string_view pack, pack_files& f) {
    if (!make_dir(f))
        return read_status::io_error;
    git_indexer_options opts = GIT_INDEXER_OPTIONS_INIT;
    if (git_indexer_new(&f.idx, f.dir.c_str(), 0600, nullptr, &opts) < 0)
        return read_status::io_error;
    git_indexer_progress stats{};
    if (git_indexer_append(f.idx, pack.data(), pack.size(), &stats) < 0)
        return read_status::malformed;
    if (git_indexer_commit(f.idx, &stats) < 0) {
        // Every object arrived but some deltas found no base: a thin pack.
        const bool thin = stats.total_objects > 0 &&
                          stats.received_objects == stats.total_objects &&
                          stats.indexed_deltas < stats.total_deltas;
        return thin ? read_status::incomplete : read_status::malformed;
    }
    const std::string idx_path = f.dir + "/pack-" + git_indexer_name(f.idx) + ".idx";
    git_odb_backend* backend = nullptr;
    if (git_odb_new(&f.odb) < 0 || git_odb_backend_one_pack(&backend, idx_path.c_str()) < 0)
        return read_status::io_error;
    if (git_odb_add_backend(f.odb, backend, 1) < 0) {
        backend->free(backend);
        return read_status::io_error;
    }
    if (git_repository_wrap_odb(&f.repo, f.odb) < 0)
        return read_status::io_error;
    return read_status::ok;
}

struct object_ref {
    git_oid id;
    git_object_t type;
};

int collect(const git_oid* id, void* payload) {
    static_cast<std::vector<git_oid>*>(payload)->push_back(*id);
    return 0;
}

struct oid_less {
    bool operator()(const git_oid& a, const git_oid& b) const { return git_oid_cmp(&a, &b) < 0; }
};

// The pack's objects by type, with the paths under which its trees name each tree and blob.
struct pack_index {
    std::vector<object_ref> objects;
    std::map<git_oid, std::string, oid_less> paths;
    std::size_t total_size = 0;
};

// Walks the trees of the pack from each commit's root, naming trees and blobs by path
// (the first path found wins). Trees the pack does not hold were the server's already.
void name_paths(git_repository* repo, const git_oid& tree_id, const std::string& prefix,
                pack_index& ix, std::set<git_oid, oid_less>& seen, std::size_t depth) {
    if (depth > 64 || !seen.insert(tree_id).second)
        return;
    git_tree* tree = nullptr;
    if (git_tree_lookup(&tree, repo, &tree_id) < 0)
        return;
    ix.paths.emplace(tree_id, prefix.empty() ? "/" : prefix);
    const std::size_t n = git_tree_entrycount(tree);
    for (std::size_t i = 0; i < n; ++i) {
        const git_tree_entry* e = git_tree_entry_byindex(tree, i);
        std::string path =
            prefix.empty() ? git_tree_entry_name(e) : prefix + "/" + git_tree_entry_name(e);
        const git_oid* id = git_tree_entry_id(e);
        if (git_tree_entry_type(e) == GIT_OBJECT_TREE)
            name_paths(repo, *id, path, ix, seen, depth + 1);
        else
            ix.paths.emplace(*id, std::move(path));
    }
    git_tree_free(tree);
}

read_status list_objects(pack_files& f, std::size_t max_bytes, pack_index& ix) {
    std::vector<git_oid> ids;
    if (git_odb_foreach(f.odb, collect, &ids) < 0)
        return read_status::malformed;
    std::set<git_oid, oid_less> seen;
    for (const auto& id : ids) {
        std::size_t len = 0;
        git_object_t type = GIT_OBJECT_INVALID;
        if (git_odb_read_header(&len, &type, f.odb, &id) < 0)
            return read_status::malformed;
        ix.total_size += len;
        if (ix.total_size > max_bytes)
            return read_status::over_limit;
        ix.objects.push_back({id, type});
    }
    for (const auto& o : ix.objects) {
        if (o.type != GIT_OBJECT_COMMIT)
            continue;
        git_commit* commit = nullptr;
        if (git_commit_lookup(&commit, f.repo, &o.id) < 0)
            return read_status::malformed;
        name_paths(f.repo, *git_commit_tree_id(commit), "", ix, seen, 0);
        git_commit_free(commit);
    }
    return read_status::ok;
}

std::string location_of(const object_ref& o, const pack_index& ix) {
    auto it = ix.paths.find(o.id);
    std::string path = it != ix.paths.end() ? it->second : "?" + hex12(&o.id);
    if (path.size() > max_label_path)
        path = path.substr(0, max_label_path) + "...";
    switch (o.type) {
    case GIT_OBJECT_COMMIT:
        return "git:commit:" + hex12(&o.id);
    case GIT_OBJECT_TAG:
        return "git:tag:" + hex12(&o.id);
    case GIT_OBJECT_TREE:
        return "git:tree:" + path;
    default:
        return "git:blob:" + path;
    }
}

// A tree's entry names, one per line: a file name is text the push sends too.
std::string tree_names(git_repository* repo, const git_oid& id) {
    std::string out;
    git_tree* tree = nullptr;
    if (git_tree_lookup(&tree, repo, &id) < 0)
        return out;
    const std::size_t n = git_tree_entrycount(tree);
    for (std::size_t i = 0; i < n; ++i) {
        out += git_tree_entry_name(git_tree_entry_byindex(tree, i));
        out += '\n';
    }
    git_tree_free(tree);
    return out;
}

read_status visit_objects(pack_files& f, const pack_index& ix, const visitor& each) {
    for (const auto& o : ix.objects) {
        const std::string where = location_of(o, ix);
        if (o.type == GIT_OBJECT_TREE) {
            if (!each(where, tree_names(f.repo, o.id)))
                return read_status::stopped;
            continue;
        }
        git_odb_object* obj = nullptr;
        if (git_odb_read(&obj, f.odb, &o.id) < 0)
            return read_status::malformed;
        const std::string_view bytes(static_cast<const char*>(git_odb_object_data(obj)),
                                     git_odb_object_size(obj));
        const bool go_on = each(where, bytes);
        git_odb_object_free(obj);
        if (!go_on)
            return read_status::stopped;
    }
    return read_status::ok;
}

} // namespace

bool is_pack(std::string_view data) noexcept {
    return data.size() >= 12 && data.substr(0, 4) == "PACK" && data[4] == 0 && data[5] == 0 &&
           data[6] == 0 && (data[7] == 2 || data[7] == 3);
}

read_status read_pack(std::string_view pack, std::size_t max_bytes, const visitor& each) {
    if (!is_pack(pack))
        return read_status::not_git;
    ensure_init();
    pack_files f;
    auto st = index_pack(pack, f);
    if (st != read_status::ok)
        return st;
    pack_index ix;
    st = list_objects(f, max_bytes, ix);
    if (st != read_status::ok)
        return st;
    return visit_objects(f, ix, each);
}

read_status read_receive_pack(std::string_view body, std::size_t max_bytes, const visitor& each) {
    std::string_view in = body;
    std::string commands;
    bool options = false;
    bool first = true;
    int sections = 0; // the command list, then push options when asked for
    while (sections < (options ? 2 : 1)) {
        const pkt p = next_pkt(in);
        if (p.k == pkt::kind::bad)
            return first ? read_status::not_git : read_status::malformed;
        if (p.k != pkt::kind::data) {
            if (p.k != pkt::kind::flush)
                return read_status::malformed;
            ++sections;
            continue;
        }
        // Capabilities follow a NUL on the first command (after any shallow lines).
        if (const auto nul = p.payload.find('\0'); nul != std::string_view::npos)
            options = options || has_capability(p.payload.substr(nul + 1), "push-options");
        first = false;
        commands.append(p.payload);
        if (commands.empty() || commands.back() != '\n')
            commands += '\n';
    }
    if (!commands.empty() && !each("git:commands", commands))
        return read_status::stopped;
    if (in.empty())
        return read_status::ok; // deletions only, or git's "0000" probe
    return is_pack(in) ? read_pack(in, max_bytes, each) : read_status::malformed;
}

std::optional<std::string> advertise_no_thin(std::string_view advertisement) {
    std::string_view in = advertisement;
    pkt p = next_pkt(in);
    if (p.k != pkt::kind::data || !p.payload.starts_with("# service=git-receive-pack"))
        return std::nullopt;
    if (next_pkt(in).k != pkt::kind::flush)
        return std::nullopt;
    std::string_view before_ref = in;
    p = next_pkt(in);
    if (p.k == pkt::kind::data && p.payload.starts_with("version ")) {
        before_ref = in;
        p = next_pkt(in);
    }
    const auto nul = p.k == pkt::kind::data ? p.payload.find('\0') : std::string_view::npos;
    if (nul == std::string_view::npos || has_capability(p.payload.substr(nul + 1), "no-thin"))
        return std::nullopt;
    std::string_view line = p.payload;
    const bool lf = line.ends_with('\n');
    if (lf)
        line.remove_suffix(1);
    const std::string payload = std::string(line) + " no-thin" + (lf ? "\n" : "");
    if (payload.size() + 4 > 0xffff)
        return std::nullopt;
    char len[5];
    std::snprintf(len, sizeof len, "%04zx", payload.size() + 4);
    std::string out(advertisement.substr(0, advertisement.size() - before_ref.size()));
    out.append(len, 4);
    out += payload;
    out.append(in);
    return out;
}

std::string_view describe(read_status st) noexcept {
    switch (st) {
    case read_status::ok:
        return "ok";
    case read_status::not_git:
        return "not a git pkt-line stream or pack";
    case read_status::malformed:
        return "the push could not be read (a corrupt or truncated pkt-line or pack)";
    case read_status::incomplete:
        return "the pack has deltas whose base it does not carry (a thin pack; push with "
               "--no-thin)";
    case read_status::over_limit:
        return "the pack inflates past the decode budget";
    case read_status::io_error:
        return "the pack could not be indexed (temporary directory)";
    case read_status::stopped:
        return "stopped";
    }
    return "unknown";
}

} // namespace sluice::dlp::git
