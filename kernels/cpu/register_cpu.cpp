// Registers every CPU reference variant (variant 0 of each family).
#include "kernels/registry.h"

namespace lantern::kernels {

void register_cpu_kernels(Registry& r) {
  (void)r;  // families add their register_*_cpu(r) calls here
}

}  // namespace lantern::kernels
