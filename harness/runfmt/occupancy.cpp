#include "harness/runfmt/occupancy.h"

#include <algorithm>

#include "kernels/base/errors.h"

namespace lantern::runfmt {

namespace {

int64_t round_up(int64_t x, int64_t unit) {
  return (x + unit - 1) / unit * unit;
}

int clamp_limit(int64_t blocks) {
  return static_cast<int>(std::min<int64_t>(blocks, BlockLimits::kNoLimit));
}

int regs_limit(const LaunchConfig& launch, const SmLimits& sm, int64_t warps_per_block) {
  if (launch.regs_per_thread == 0) return BlockLimits::kNoLimit;
  const int64_t regs_per_warp =
      round_up(int64_t{launch.regs_per_thread} * sm.warp_size, sm.reg_alloc_unit);
  // The hardware checks a block's registers as if its warps filled every
  // sub-partition evenly.
  const int64_t block_regs = regs_per_warp * round_up(warps_per_block, sm.sub_partitions);
  if (sm.regs_per_block > 0 && block_regs > sm.regs_per_block) return 0;
  const int64_t warps_per_partition = sm.regs_per_sm / sm.sub_partitions / regs_per_warp;
  return clamp_limit(warps_per_partition * sm.sub_partitions / warps_per_block);
}

int smem_limit(const LaunchConfig& launch, const SmLimits& sm) {
  const int64_t per_block =
      round_up(int64_t{launch.static_smem} + launch.dynamic_smem + sm.smem_reserved_per_block,
               sm.smem_alloc_unit);
  if (per_block == 0) return BlockLimits::kNoLimit;
  return clamp_limit(sm.smem_per_sm / per_block);
}

std::string limit_names(const BlockLimits& b, int blocks_per_sm) {
  std::string out;
  auto add = [&](int limit, const char* name) {
    if (limit != blocks_per_sm) return;
    if (!out.empty()) out += '+';
    out += name;
  };
  add(b.regs, "regs");
  add(b.smem, "smem");
  add(b.threads, "threads");
  add(b.blocks, "blocks");
  return out;
}

}  // namespace

void set_allocation_units(SmLimits& limits) {
  limits.reg_alloc_unit = 256;
  limits.sub_partitions = 4;
  limits.smem_alloc_unit = limits.compute_major >= 8 ? 128 : 256;
}

SmLimits sm90_limits(int sm_count) {
  SmLimits sm;
  sm.compute_major = 9;
  sm.compute_minor = 0;
  sm.sm_count = sm_count;
  sm.warp_size = 32;
  sm.max_threads_per_sm = 2048;
  sm.max_threads_per_block = 1024;
  sm.max_blocks_per_sm = 32;
  sm.regs_per_sm = 65536;
  sm.regs_per_block = 65536;
  sm.smem_per_sm = 228 * 1024;
  sm.smem_reserved_per_block = 1024;
  set_allocation_units(sm);
  return sm;
}

BlockLimits block_limits(const LaunchConfig& launch, const SmLimits& sm) {
  BlockLimits b;
  const int64_t threads = launch.block_threads();
  const int64_t warps_per_block = (threads + sm.warp_size - 1) / sm.warp_size;
  if (warps_per_block <= 0) return b;
  if (sm.max_threads_per_block > 0 && threads > sm.max_threads_per_block) {
    b.threads = 0;
  } else {
    b.threads = clamp_limit(sm.max_threads_per_sm / sm.warp_size / warps_per_block);
  }
  b.regs = regs_limit(launch, sm, warps_per_block);
  b.smem = smem_limit(launch, sm);
  b.blocks = sm.max_blocks_per_sm;
  return b;
}

std::optional<Occupancy> occupancy(const LaunchConfig& launch, const SmLimits& sm) {
  if (!launch.known() || !sm.valid()) return std::nullopt;
  const BlockLimits b = block_limits(launch, sm);
  Occupancy o;
  o.blocks_per_sm = std::min({b.regs, b.smem, b.threads, b.blocks});
  o.limit = limit_names(b, o.blocks_per_sm);
  const double warps_per_block =
      static_cast<double>((launch.block_threads() + sm.warp_size - 1) / sm.warp_size);
  const double max_warps = static_cast<double>(sm.max_threads_per_sm / sm.warp_size);
  if (o.blocks_per_sm == 0) return o;  // cannot run: occupancy 0, waves 0
  const double one_wave = static_cast<double>(o.blocks_per_sm) * sm.sm_count;
  const double grid = static_cast<double>(launch.grid_blocks());
  o.waves = grid / one_wave;
  double resident_blocks = o.blocks_per_sm;
  if (grid < one_wave) {
    resident_blocks = grid / sm.sm_count;
    o.limit = "grid";
  }
  o.occupancy = resident_blocks * warps_per_block / max_warps;
  return o;
}

nlohmann::json to_json(const SmLimits& sm) {
  return {{"compute_capability", strformat("%d.%d", sm.compute_major, sm.compute_minor)},
          {"sm_count", sm.sm_count},
          {"warp_size", sm.warp_size},
          {"max_threads_per_sm", sm.max_threads_per_sm},
          {"max_threads_per_block", sm.max_threads_per_block},
          {"max_blocks_per_sm", sm.max_blocks_per_sm},
          {"regs_per_sm", sm.regs_per_sm},
          {"regs_per_block", sm.regs_per_block},
          {"smem_per_sm", sm.smem_per_sm},
          {"smem_reserved_per_block", sm.smem_reserved_per_block},
          {"reg_alloc_unit", sm.reg_alloc_unit},
          {"sub_partitions", sm.sub_partitions},
          {"smem_alloc_unit", sm.smem_alloc_unit}};
}

std::optional<SmLimits> sm_limits_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  SmLimits sm;
  bool ok = true;
  auto get = [&](const char* key, auto& dst) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) {
      ok = false;
      return;
    }
    dst = it->get<std::remove_reference_t<decltype(dst)>>();
  };
  get("sm_count", sm.sm_count);
  get("warp_size", sm.warp_size);
  get("max_threads_per_sm", sm.max_threads_per_sm);
  get("max_threads_per_block", sm.max_threads_per_block);
  get("max_blocks_per_sm", sm.max_blocks_per_sm);
  get("regs_per_sm", sm.regs_per_sm);
  get("regs_per_block", sm.regs_per_block);
  get("smem_per_sm", sm.smem_per_sm);
  get("smem_reserved_per_block", sm.smem_reserved_per_block);
  get("reg_alloc_unit", sm.reg_alloc_unit);
  get("sub_partitions", sm.sub_partitions);
  get("smem_alloc_unit", sm.smem_alloc_unit);
  auto cc = j.find("compute_capability");
  if (!ok || cc == j.end() || !cc->is_string() ||
      std::sscanf(cc->get_ref<const std::string&>().c_str(), "%d.%d", &sm.compute_major,
                  &sm.compute_minor) != 2)
    return std::nullopt;
  return sm;
}

std::string dims_text(int32_t x, int32_t y, int32_t z) {
  if (z > 1) return strformat("%dx%dx%d", x, y, z);
  if (y > 1) return strformat("%dx%d", x, y);
  return std::to_string(x);
}

}  // namespace lantern::runfmt
