// The fuzz build links the loaders without the kernel and device libraries;
// the few functions the loaders name from them are defined here.
//  - kernels/registry.cpp: backend_name (weights.cpp's progress line), same body.
//  - engine/device.cpp: Device::select_gpu (weights.cpp's GPU path, which the
//    fuzz targets never take: they load on the CPU backend).
#include "engine/device.h"
#include "kernels/base/errors.h"
#include "kernels/registry.h"

namespace lantern::kernels {
const char* backend_name(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }
}  // namespace lantern::kernels

namespace lantern {
void Device::select_gpu(int index) { LANTERN_FAIL("fuzz build: no GPU %d (the fuzz targets load on the CPU)", index); }
}  // namespace lantern
