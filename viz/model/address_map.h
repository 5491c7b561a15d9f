#pragma once
// The memory map's layout: the allocations live at a time, ordered by
// address, each to scale, with the (often huge) holes between them collapsed
// to a fixed gap, so weights, arena and KV pool share one horizontal axis.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/runfmt/records.h"

namespace lantern::view {

struct MapSegment {
  int allocation = -1;     // index into MemoryMap::allocations
  uint64_t address = 0, bytes = 0;
  double x0 = 0, x1 = 0;   // position on the map axis (bytes, holes collapsed)
  uint64_t hole_before = 0;  // bytes of address space skipped before it
};

struct MapLayout {
  std::vector<MapSegment> segments;  // by address
  double width = 0;                  // axis length (bytes + collapsed gaps)
  double gap = 0;                    // width given to each collapsed hole
};

// Allocations live at `t_us` (alloc_us <= t < free_us); `gap_fraction` of the
// mapped bytes is given to each hole between non-adjacent allocations.
MapLayout layout_address_map(const std::vector<runfmt::Allocation>& allocations, double t_us,
                             double gap_fraction = 0.02);

// Category of an allocation's owner, for colours and totals: weights, arena,
// kv_pool (KV blocks), block_tables, workspace, cublas_workspace, other.
std::string map_category(const runfmt::Allocation& a);

struct CategoryTotal {
  std::string category;
  uint64_t bytes = 0;
  int count = 0;
};
// Live bytes per category at `t_us`, largest first.
std::vector<CategoryTotal> category_totals(const std::vector<runfmt::Allocation>& allocations,
                                           double t_us);

// The KV pool's blocks: [address, bytes) of block `b` inside the "KV blocks"
// allocation (blocks are equal slices of it). Returns -1 when the run has no
// such allocation.
int kv_pool_allocation(const std::vector<runfmt::Allocation>& allocations);

}  // namespace lantern::view
