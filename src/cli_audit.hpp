// `sluice audit verify [--partial] FILE...` (CONTRACT.md "Command line"). Returns 0 when
// the chain verifies, 1 naming the first bad record as FILE:LINE: seq N: WHAT: detail
// (WHAT is changed, removed, reordered or truncated), 2 on usage or unreadable input.
#pragma once

namespace sluice::cli {

int cmd_audit(int argc, char** argv);

} // namespace sluice::cli
