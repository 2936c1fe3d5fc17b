#pragma once
// The layers at which the shim is asked whether an allocation fails (Note [Where a step fault fires] in
// injector/engine/fault_plan.h). The numbers are ABI: the job passes them to the shim's exported
// oomh_register_requests and oomh_request (injector/preload/hooks.cpp), and the inject event names them.

#include <cstdint>

#include "oomharness/name_table.h"

namespace oomh {

enum class Layer : uint8_t { driver = 0, allocator = 1, probe = 2 };

inline constexpr NameTable<Layer, 3> kLayers{{
    {Layer::driver, "driver", "the driver's allocation entry points (every process under the shim)"},
    {Layer::allocator, "allocator", "each request of the virtual device's caching-allocator model, with its size"},
    {Layer::probe, "probe", "on a GPU, the points of a step the probe sees begin (no size)"},
}};

}  // namespace oomh
