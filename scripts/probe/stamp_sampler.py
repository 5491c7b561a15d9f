#!/usr/bin/env python3
"""Copies a sampler kernel source with %globaltimer / clock64() stamps between its phases
(thread 0 of every block writes g_gt[block][phase], g_clk[block][phase]): the phase probe of
docs/performance.md ("sample.5 cluster_lean", session 10). Anchors are lines of the kernel;
the script fails if one is missing, so a changed kernel shows up here first.
  stamp_sampler.py gather|lean SOURCE OUT"""
import sys

PRE = """#include <cstdint>
__device__ unsigned long long g_clk[64][16];
__device__ unsigned long long g_gt[64][16];
__device__ __forceinline__ void PH(int i) {
  if (threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    g_gt[blockIdx.x + blockIdx.y * 16][i] = t;
    g_clk[blockIdx.x + blockIdx.y * 16][i] = clock64();
  }
}
"""
# (anchor, stamp placed after it) per kernel; phase 0 at kernel entry.
ANCHORS = {
    "gather": [
        ("Row c{slice, rank * slice_len, 0, ZBins{0.0f, 0.0f}};", "PH(0);"),
        ("best = block_max_u64(best, s.scratch);", "PH(1);"),
        ("const int32_t argmax = int32_t(~uint32_t(s.bcast));", "PH(2);"),
        ("s.mloc[threadIdx.x] = (uint64_t(s.mhi[threadIdx.x]) << 32) + s.mlo[threadIdx.x];", "PH(3);"),
        ("histogram<kC>(s, c, cl, cnt);", "PH(4);"),
        ("const int n = int(s.run_start[kC]);", "PH(5);"),
        ("push_run<kC>(s, c, cl, pl);", "PH(6);"),
        ("cl.sync();  // every run has landed", "PH(7);"),
        ("merge_and_scan<kC>(s, c.bins, n);", "PH(8);"),
        ("cl.sync();  // every block has rank 0's verdict; no remote access follows on success", "PH(9);"),
    ],
    "lean": [
        ("c.n = max(0, min(vocab - c.begin, slice_len));", "PH(0);"),
        ("if (threadIdx.x == 0) s.pub_max = best;", "PH(1);"),
        ("const int32_t argmax = int32_t(~uint32_t(s.bcast));", "PH(2);"),
        ("add_fixed_mass(&h.y, &h.z, c.bins.fixed_weight(l));  // 1.3 atomics per logit on average\n  }", "PH(3);"),
        ("cl.sync();  // every owned total is published; no peer reads s.hist after this", "PH(4);"),
        ("lean_histogram<kC>(s, c, cl, rank);", "PH(5);"),
        ("bool slow = !pl.ok || n > Lean<kC>::kCap;", "PH(6);"),
        ("lean_push<kC>(s, c, cl, pl);", "PH(7);"),
        ("cl.sync();  // every block's tokens have landed", "PH(8);"),
        ("lean_tag<kC>(s, c.bins, n);", "PH(9);"),
        ("cl.sync();  // every block has rank 0's verdict; no remote access follows on success", "PH(10);"),
    ],
}

def main():
    kind, src, out = sys.argv[1:4]
    text = open(src).read()
    for anchor, stamp in ANCHORS[kind]:
        if text.count(anchor) != 1:
            sys.exit(f"stamp_sampler.py: anchor not found once in {src}: {anchor!r}")
        i = text.index(anchor) + len(anchor)
        text = text[:i] + "\n" + stamp + text[i:]
    open(out, "w").write(PRE + text)

if __name__ == "__main__":
    main()
