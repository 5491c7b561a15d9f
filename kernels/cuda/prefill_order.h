#pragma once
// The balanced block order of the wgmma prefill attention (attention_prefill
// 4 and 5, LANTERN_PREFILL_BALANCE=1; sm90a/attention_prefill_wgmma.cu) --
// host and device code, so a CPU test (tests/kernels/prefill_order_test.cpp)
// checks the map the kernel uses.
//
// Items are the grid's (query tile, q head) pairs ranked heaviest first: rank
// r is query tile `r / heads` counted from the last (it attends to that many
// fewer key tiles than the last) of head `r % heads`. For one sequence whose
// grid is one wave of two blocks per SM (sms < blocks <= 2 sms), linear block
// L < sms takes rank L and block L >= sms rank blocks - 1 - (L - sms): blocks L
// and L + sms, which the block scheduler places on one SM when the SMs are
// idle, carry a heavy and a light item (the H200 probe: an SM's key tiles max
// 16 -> 9 at 512 tokens, mean 8.7). The plain order (balance off) is rank
// = from-last tile x, head y.
#include "kernels/base/host_device.h"

namespace lantern::kernels::prefill_order {

// The rank of linear block `lin` of `blocks` under the balanced order for `sms` SMs.
LANTERN_HD int balanced_rank(int lin, int blocks, int sms) {
  return lin < sms ? lin : blocks - 1 - (lin - sms);
}

// Whether the balanced order applies: more blocks than SMs, at most two per SM.
LANTERN_HD bool balanced_fits(long blocks, int sms) {
  return blocks > sms && blocks <= 2L * sms;
}

}  // namespace lantern::kernels::prefill_order
