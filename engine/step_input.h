#pragma once
// The model's view of a scheduler plan (StepInput) and the observers' view of
// it (StepInfo). Pure functions of the plan: the caller adds the KV cache's
// block-table updates (KvCache::take_table_updates).
#include <cstdint>

#include "engine/model.h"
#include "engine/observer.h"
#include "engine/scheduler.h"

namespace lantern {

// Rows ordered fresh chunks | paged chunks, the logit rows with their
// sampling parameters.
StepInput step_input(const StepPlan& plan);

// The input of a continuation (Scheduler::plan_continuation): row i's token
// is the one `prev` computes for the same sequence, gathered on the device
// (StepInput::token_src), or a forced token from the host; its generation
// index is one past the sequence's count (prev's token is not appended yet).
StepInput continuation_input(const StepPlan& plan, const StepPlan& prev);

// Step `step`'s phase and batch for the observers. `continuation`: every
// paged row is a decode (its token is still on the device).
StepInfo describe_step(const StepPlan& plan, const StepInput& in, int64_t step, bool continuation);

}  // namespace lantern
