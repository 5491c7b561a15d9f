// The registry contract: lookup by name and number, errors that list the valid
// variants, defaults, and that every family has its CPU reference.
#include "kernels/registry.h"

#include <gtest/gtest.h>

#include <string>

#include "kernels/base/errors.h"

namespace lantern::kernels {
namespace {

void noop_launch(const ResidualArgs&, const LaunchCtx&) {}
Cost noop_cost(const ResidualArgs&) { return {}; }

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error thrown>";
}

TEST(Registry, EveryFamilyHasItsCpuReferenceAsVariantZero) {
  const Registry& r = Registry::global();
  for (int i = 0; i < kNumFamilies; ++i) {
    const Family f = static_cast<Family>(i);
    const KernelEntry& e = r.find(f, "0");
    EXPECT_EQ(e.family, f) << family_name(f);
    EXPECT_EQ(e.variant, 0) << family_name(f);
    EXPECT_STREQ(e.name, "cpu_ref") << family_name(f);
    EXPECT_EQ(e.backend, Backend::cpu) << family_name(f);
    EXPECT_TRUE(e.tested) << family_name(f);
    EXPECT_TRUE(e.preferred) << family_name(f);
    EXPECT_GT(std::string(e.description).size(), 10u) << family_name(f);
    EXPECT_NE(e.launch, nullptr);
    EXPECT_NE(e.cost, nullptr);
  }
}

TEST(Registry, FindByNameAndByNumberGiveTheSameEntry) {
  const Registry& r = Registry::global();
  for (int i = 0; i < kNumFamilies; ++i) {
    const Family f = static_cast<Family>(i);
    EXPECT_EQ(&r.find(f, "cpu_ref"), &r.find(f, "0")) << family_name(f);
  }
}

TEST(Registry, UnknownVariantErrorListsTheValidOnes) {
  const Registry& r = Registry::global();
  const std::string by_name = error_of([&] { r.find(Family::rmsnorm, "no_such_kernel"); });
  EXPECT_NE(by_name.find("no_such_kernel"), std::string::npos) << by_name;
  EXPECT_NE(by_name.find("rmsnorm"), std::string::npos) << by_name;
  EXPECT_NE(by_name.find("0=cpu_ref(cpu)"), std::string::npos) << by_name;

  const std::string by_number = error_of([&] { r.find(Family::gemm, "999"); });
  EXPECT_NE(by_number.find("999"), std::string::npos) << by_number;
  EXPECT_NE(by_number.find("0=cpu_ref(cpu)"), std::string::npos) << by_number;

  // A variant registered kUntested says so in the listing; a tested one does not.
  Registry own;
  own.add(make_entry<ResidualArgs, noop_launch, noop_cost>(1, "fresh", Backend::cuda, "not yet run", kUntested));
  own.add(make_entry<ResidualArgs, noop_launch, noop_cost>(2, "proven", Backend::cuda, "ran on the H200"));
  const std::string listing = error_of([&] { own.find(Family::residual, "no_such_kernel"); });
  EXPECT_NE(listing.find("1=fresh(cuda, not yet run on a GPU), 2=proven(cuda)"), std::string::npos) << listing;

  // "0x" is neither a name nor a whole number.
  EXPECT_THROW(r.find(Family::gemm, "0x"), Error);
  EXPECT_THROW(r.find(Family::gemm, ""), Error);
}

TEST(Registry, FamilyNamesRoundTripAndUnknownNamesListFamilies) {
  for (int i = 0; i < kNumFamilies; ++i) {
    const Family f = static_cast<Family>(i);
    EXPECT_EQ(family_from_name(family_name(f)), f);
  }
  const std::string msg = error_of([] { family_from_name("rms_norm"); });
  EXPECT_NE(msg.find("rms_norm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("attention_decode"), std::string::npos) << msg;
}

// KernelSet::untested lists the chosen variants not yet run on a GPU (the
// CLI warns about each, describe() marks them): none among the defaults.
TEST(Registry, UntestedListsTheChosenVariantsNotYetRunOnAGpu) {
  KernelSet set = KernelSet::defaults(Backend::cpu);
  EXPECT_TRUE(set.untested().empty());
  const KernelEntry fresh =
      make_entry<ResidualArgs, noop_launch, noop_cost>(1, "fresh", Backend::cpu, "not yet run", kUntested);
  set.chosen[static_cast<int>(Family::residual)] = &fresh;
  ASSERT_EQ(set.untested().size(), 1u);
  EXPECT_EQ(set.untested()[0], &fresh);
  for (Backend b : {Backend::cpu, Backend::cuda})
    for (const KernelEntry* e : KernelSet::defaults(b).chosen) EXPECT_TRUE(e->tested) << e->name << " is a default";
}

TEST(Registry, CpuDefaultsPickVariantZero) {
  const KernelSet set = KernelSet::defaults(Backend::cpu);
  for (int i = 0; i < kNumFamilies; ++i) {
    const Family f = static_cast<Family>(i);
    ASSERT_NE(set.chosen[i], nullptr) << family_name(f);
    EXPECT_EQ(set.entry(f).variant, 0) << family_name(f);
    EXPECT_EQ(set.entry(f).backend, Backend::cpu) << family_name(f);
  }
}

TEST(Registry, SelectRejectsAVariantOfAnotherBackend) {
  KernelSet set = KernelSet::defaults(Backend::cpu);
  set.select(Family::gemm, "cpu_ref", Backend::cpu);
  EXPECT_EQ(set.entry(Family::gemm).variant, 0);
  const std::string msg = error_of([&] { set.select(Family::gemm, "0", Backend::cuda); });
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
}

TEST(Registry, DuplicatesAreRejected) {
  Registry r;
  register_cpu_kernels(r);
  const KernelEntry copy = r.find(Family::swiglu, "0");
  EXPECT_THROW(r.add(copy), Error);
  KernelEntry same_name = copy;
  same_name.variant = 7;  // new number, old name
  EXPECT_THROW(r.add(same_name), Error);
  KernelEntry fresh = copy;
  fresh.variant = 7;
  fresh.name = "another";
  r.add(fresh);
  EXPECT_EQ(r.variants(Family::swiglu).size(), 2u);
}

// A prepare hook sits beside its entry: found for that entry only, refused
// for an entry not registered. gemm.6 (planned cuBLASLt) has one.
int g_prepared = 0;
void count_prepare(const GemmArgs&, const LaunchCtx&) { ++g_prepared; }

TEST(Registry, PrepareHooksBelongToTheirEntry) {
  Registry r;
  register_cpu_kernels(r);
  const KernelEntry& gemm = r.find(Family::gemm, "cpu_ref");
  EXPECT_EQ(r.prepare(gemm), nullptr);
  EXPECT_THROW(r.add_prepare(Family::gemm, 9, make_prepare<GemmArgs, count_prepare>()), Error);
  r.add_prepare(Family::gemm, 0, make_prepare<GemmArgs, count_prepare>());
  const PrepareHook hook = r.prepare(gemm);
  ASSERT_NE(hook, nullptr);
  GemmArgs args{};
  hook(&args, LaunchCtx{});
  EXPECT_EQ(g_prepared, 1);
  EXPECT_EQ(r.prepare(r.find(Family::rmsnorm, "cpu_ref")), nullptr);
  const KernelEntry& lt = Registry::global().find(Family::gemm, "lt_planned");
  EXPECT_EQ(lt.variant, 6);
  EXPECT_NE(Registry::global().prepare(lt), nullptr);
  EXPECT_NE(lt.workspace_bytes, nullptr);
}

TEST(Registry, LaunchWithArgumentsOfAnotherFamilyThrows) {
  const KernelEntry& gemm = Registry::global().find(Family::gemm, "cpu_ref");
  ResidualArgs wrong{};
  EXPECT_THROW(launch(gemm, wrong, LaunchCtx{}), Error);
}

}  // namespace
}  // namespace lantern::kernels
