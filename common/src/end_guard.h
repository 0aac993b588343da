// Inputs that end where unmapped memory begins, so that a load past the end of one faults instead
// of reading a redzone (course/buffer.h, Placement::end_guarded). Internal to the harness: the
// buffers use it (buffer.cu), and a CUDA error that such a load caused is named by it.
//
// The CUDA virtual memory management API reserves an address range and maps physical memory onto
// the part of it the buffer needs; the payload ends at the end of the mapping (rounded up to 16
// bytes, for float4 loads from its start), and the next 2 MiB of the range stay unmapped. Not on
// the CPU emulator (dev/emu), which has no such API, nor under exact allocations (memcheck sees
// every access there), nor where the GPU lacks the API: the buffer is fenced by redzones instead.
//
// Which input was read past its end is found after the fault, in child processes: the CUDA error
// of the first illegal address of the process runs the failing test again once with no input so
// placed, then once per input name with that input alone so placed (COURSE_GUARD_PROBE=<name>);
// the child whose run faults names the input. A probe child gives every buffer an 8 MiB redzone,
// so that a store (or a load) far past an output, which faults beyond its usual 64 KB redzone,
// lands in one: the guarded input alone can fault there, and the child reports the store that its
// redzone caught. That costs a few process starts, on a crash only.
#pragma once

#include <cstddef>
#include <string>

#include "course/buffer.h"

namespace course::end_guard {

// The reserved range (the mapping, then unmapped space), the bytes mapped from its start, the
// physical memory, and the payload: 16-byte aligned, payload + round_up(bytes, 16) ends the
// mapping.
using Mapping = detail::GuardedMapping;

// Whether an input named `name` is placed against unmapped memory in this process (a GPU with the
// API, not exact allocations, and not a probe child that guards another name).
bool wanted(const std::string& name);

// A mapping whose last `round_up(bytes, 16)` bytes are the payload, preceded by at least
// `before` mapped bytes; false where the API is unavailable (the caller fences the buffer).
bool map(std::size_t bytes, std::size_t before, Mapping& out);
void unmap(const Mapping& mapping);

// The live inputs so placed, by name, for the message of a fault (registered by the buffers).
void track(const void* payload, const std::string& name);
void untrack(const void* payload);

// A store outside an output that its redzone caught earlier in this process ("wrote past the end
// of `C`"): the first is kept, so that a later fault, most likely the same store going past the
// redzone on a larger shape, is named as that store rather than probed as a load.
void note_store_outside(const std::string& what);

// The bytes of each redzone beside a buffer: DeviceAllocation::kRedzoneBytes, wider in a probe
// child.
std::size_t redzone_bytes();

// What an illegal address means when inputs end against unmapped memory: the store outside an
// output caught earlier in this process if there was one, else which input a load read past the
// end of, found by probe children; "" when there is nothing to say (no such input, a large case,
// a fault already described). In a probe child it ends the process instead.
std::string describe_fault();

}  // namespace course::end_guard
