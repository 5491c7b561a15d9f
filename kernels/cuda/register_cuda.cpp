// Registers every CUDA variant (variants 1.. of each family).
#include "kernels/registry.h"

namespace lantern::kernels {

void register_cuda_kernels(Registry& r) {
  (void)r;  // families add their register_*_cuda(r) calls here
}

}  // namespace lantern::kernels
