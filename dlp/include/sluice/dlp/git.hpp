// git smart HTTP (issue 21): what a `git push` carries, opened so the detectors see it.
// A push is a POST to .../git-receive-pack whose body is a pkt-line command list (ref
// updates, capabilities, push options) followed by a packfile of zlib-compressed objects
// and deltas (gitprotocol-pack.txt "Reference Update Request and Packfile Transfer",
// gitprotocol-common.txt "pkt-line Format", gitformat-pack.txt). The pkt-lines are read
// here; the pack is indexed, its deltas resolved and its objects read by libgit2
// (git_indexer, git_odb_backend_one_pack, git_tree), never by a hand-written reader.
//
// Thin packs: a client sends deltas against objects it assumes the server has, which no
// one can resolve from the request alone. sluice adds the `no-thin` capability to the
// receive-pack advertisement it relays (advertise_no_thin), so git sends every delta base
// in the pack (send-pack.c honours "no-thin"); a pack whose deltas still lack a base is
// refused (read_status::incomplete), never forwarded half read.
//
// Thread safety: the functions are reentrant (libgit2 is initialised once, thread safe
// since 0.21); each call uses its own temporary directory. Nothing here throws except
// std::bad_alloc.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::dlp::git {

enum class read_status {
    ok,
    not_git,    ///< no pkt-line stream / no "PACK" signature where one was expected
    malformed,  ///< a pkt-line or the pack is corrupt or cut short: deny 400
    incomplete, ///< a delta whose base is not in the pack (a thin pack): deny 400
    over_limit, ///< the objects would inflate to more than `max_bytes`: deny 413
    io_error,   ///< the temporary directory could not be written: deny 500
    stopped,    ///< `each` returned false
};

/// Called with each thing a push carries, in this order: "git:commands" (the pkt-line
/// payloads before the pack: ref updates with their capabilities, push options, a push
/// certificate), then every object of the pack: "git:commit:<12 hex of its id>" (the raw
/// commit: tree, parents, author, committer, message), "git:tag:<12 hex>", "git:tree:<path>"
/// (the entry names of one tree, one per line; "/" for a root tree) and
/// "git:blob:<path>" (the file's bytes; the path from the trees of the pack, "?" plus
/// the id when no tree of the pack names it). Paths are the agent's own text: the caller
/// must scan them before putting one in a record (their tree's names are scanned first).
/// Return false to stop (read_* then return `stopped`).
using visitor = std::function<bool(std::string_view location, std::string_view bytes)>;

/// A receive-pack request body: the command list up to its flush-pkt, push options when
/// the `push-options` capability was asked for, then the pack (none for a push that only
/// deletes refs). `max_bytes`: the most the pack's objects may inflate to in all.
/// `not_git` when the body does not start with a pkt-line.
read_status read_receive_pack(std::string_view body, std::size_t max_bytes, const visitor& each);

/// A bare packfile ("PACK", version 2 or 3): a `.pack` file, or a pack found in a body.
read_status read_pack(std::string_view pack, std::size_t max_bytes, const visitor& each);

/// True when `data` starts with a pack signature ("PACK" and version 2 or 3).
bool is_pack(std::string_view data) noexcept;

/// The receive-pack advertisement (the body of GET .../info/refs?service=git-receive-pack,
/// gitprotocol-http.txt "Smart Clients") with ` no-thin` appended to the capability list of
/// its first ref line and that pkt-line's length fixed. nullopt when the body is not such an
/// advertisement or already says no-thin: relay it unchanged.
std::optional<std::string> advertise_no_thin(std::string_view advertisement);

/// What read_status means for a person (a git message, a log line); no input bytes.
std::string_view describe(read_status st) noexcept;

} // namespace sluice::dlp::git
