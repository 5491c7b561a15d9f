// weights.cpp names the backend in its progress line; the fuzz build links
// no kernel library, so the one function it uses from kernels/registry.cpp
// is defined here with the same body.
#include "kernels/registry.h"

namespace lantern::kernels {
const char* backend_name(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }
}  // namespace lantern::kernels
