#pragma once
// Theoretical occupancy of a kernel launch: how many blocks of it one SM can
// hold at once given the SM's registers, shared memory, warp slots and block
// slots, and whether the grid even fills one wave. Plain arithmetic on the
// launch configuration CUPTI records and the device limits recorded at
// attach (harness/device_limits.h), so it runs without CUDA: the CLI, the
// viewer and the tests compute it from a run directory. The rules are those
// of the CUDA Occupancy Calculator (docs/run-format.md § Occupancy):
//   threads: floor(max warps per SM / warps per block)
//   regs:    regs per warp = roundup(regs per thread × warp size, reg_alloc_unit);
//            warps per SM = sub_partitions × floor(regs_per_sm / sub_partitions /
//            regs per warp); blocks = floor(warps per SM / warps per block)
//   smem:    per block = roundup(static + dynamic + reserved, smem_alloc_unit);
//            blocks = floor(smem_per_sm / per block)
//   blocks:  max_blocks_per_sm
// Example (sm_90, 65536 regs/SM): a 256-thread block at 64 regs/thread needs
// 2048 regs per warp, 8 warps per sub-partition fit, 32 per SM: 4 blocks,
// 32 of 64 warps = 50 % occupancy, limited by "regs".
#include <algorithm>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace lantern::runfmt {

// How a kernel was launched (CUpti_ActivityKernel*); all zero when unknown
// (host-timed rows of the CPU backend, runs before format 1.1).
struct LaunchConfig {
  int32_t grid_x = 0, grid_y = 0, grid_z = 0;     // blocks
  int32_t block_x = 0, block_y = 0, block_z = 0;  // threads per block
  int32_t static_smem = 0;   // bytes per block declared in the kernel (__shared__)
  int32_t dynamic_smem = 0;  // bytes per block requested at launch
  uint32_t smem_config = 0;  // bytes of shared memory the driver configured on the SM
                             // for this launch (the carveout, sharedMemoryExecuted)
  uint16_t regs_per_thread = 0;
  uint16_t reserved = 0;

  bool known() const { return grid_x > 0 && block_x > 0; }
  int64_t grid_blocks() const {
    return int64_t{grid_x} * std::max(grid_y, 1) * std::max(grid_z, 1);
  }
  int64_t block_threads() const {
    return int64_t{block_x} * std::max(block_y, 1) * std::max(block_z, 1);
  }
  auto operator<=>(const LaunchConfig&) const = default;
};
static_assert(sizeof(LaunchConfig) == 40);

// One SM's resources (cudaDeviceProp fields noted), plus the allocation
// units the runtime does not report, which depend on the architecture.
struct SmLimits {
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;                     // multiProcessorCount
  int warp_size = 32;                   // warpSize
  int max_threads_per_sm = 0;           // maxThreadsPerMultiProcessor
  int max_threads_per_block = 0;        // maxThreadsPerBlock
  int max_blocks_per_sm = 0;            // maxBlocksPerMultiProcessor
  int regs_per_sm = 0;                  // regsPerMultiprocessor
  int regs_per_block = 0;               // regsPerBlock
  int64_t smem_per_sm = 0;              // sharedMemPerMultiprocessor (bytes)
  int64_t smem_reserved_per_block = 0;  // reservedSharedMemPerBlock (bytes, 1 KiB on sm_80+)
  int reg_alloc_unit = 256;             // registers are given to a warp in units of this
  int sub_partitions = 4;               // an SM's registers are split over its 4 schedulers
  int smem_alloc_unit = 128;            // bytes; shared memory is given to a block in units of this

  bool valid() const {
    return sm_count > 0 && warp_size > 0 && max_threads_per_sm >= warp_size &&
           max_blocks_per_sm > 0 && regs_per_sm > 0 && smem_per_sm > 0 && reg_alloc_unit > 0 &&
           sub_partitions > 0 && smem_alloc_unit > 0;
  }
  bool operator==(const SmLimits&) const = default;
};

// Sets the allocation units of `compute_major` (CUDA 13 supports sm_75 and
// newer: 256-register units and 4 sub-partitions throughout; shared memory in
// 128-byte units from sm_80, 256 before).
void set_allocation_units(SmLimits& limits);

// The H100 / H200 SM (sm_90): 65536 regs, 228 KiB shared memory with 1 KiB
// reserved per block, 2048 threads, 32 blocks; `sm_count` SMs (H200: 132).
SmLimits sm90_limits(int sm_count = 132);

// Blocks per SM each resource allows on its own (kNoLimit: unconstrained,
// 0: the block cannot run at all, e.g. more registers than a block may have).
struct BlockLimits {
  static constexpr int kNoLimit = 1 << 30;
  int regs = kNoLimit, smem = kNoLimit, threads = kNoLimit, blocks = kNoLimit;
  bool operator==(const BlockLimits&) const = default;
};
BlockLimits block_limits(const LaunchConfig& launch, const SmLimits& sm);

struct Occupancy {
  int blocks_per_sm = 0;  // resident blocks per SM the resources allow (min of BlockLimits)
  // Resident warps per SM / the SM's maximum, in [0, 1]. When the grid is
  // smaller than one wave it is averaged over all SMs (a 1-block grid on 132
  // SMs occupies 1/132 of one SM's share).
  double occupancy = 0;
  double waves = 0;  // grid blocks / (blocks_per_sm × SMs)
  // What bounds it: "regs", "smem", "threads", "blocks" (ties joined by '+',
  // in that order), or "grid" when the grid is smaller than one wave.
  std::string limit;
  bool operator==(const Occupancy&) const = default;
};

// The theoretical occupancy of `launch` on `sm`; nullopt when either is
// unknown (launch.known(), sm.valid()).
std::optional<Occupancy> occupancy(const LaunchConfig& launch, const SmLimits& sm);

// manifest.json gpu.sm_limits (docs/run-format.md).
nlohmann::json to_json(const SmLimits& sm);
// The inverse; nullopt when `j` is not an object with every key.
std::optional<SmLimits> sm_limits_from_json(const nlohmann::json& j);

// "64", "64x8", "16x8x2": a grid or block shape with trailing 1s dropped.
std::string dims_text(int32_t x, int32_t y, int32_t z);

}  // namespace lantern::runfmt
