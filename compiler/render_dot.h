// Runs Graphviz's `dot` on a graph (ppcompile --emit png, --emit svg --engine dot).
//
// The graph is written to a temporary file and `dot -T<format>` runs on it as a subprocess
// (posix_spawnp, no shell); its output is returned. Throws UserError when `dot` is not installed
// (naming the package), when it fails (with its message) or when the graph is too big to lay out.
#pragma once

#include <cstddef>
#include <string>

namespace ppc {

// Graphs with more nodes than this take dot minutes to hours: refuse them with a clear message.
inline constexpr size_t kMaxDotNodes = 3000;

// format: "svg" or "png". `nodes` is the graph's node count (checked against kMaxDotNodes).
// `dot_binary` is looked up in PATH unless it contains a '/'.
std::string render_dot(const std::string& graph, const std::string& format, size_t nodes,
                       const std::string& dot_binary = "dot");

}  // namespace ppc
