#pragma once
#include <cstdint>
#include <cstdlib>
#include "course/check.h"
namespace course {
inline bool is_aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }
// EMU_OPTIN: the opt-in shared memory (227 KB: H100; 163 KB: A100). EMU_CLUSTERS=0: no clusters.
template <class Kernel> std::size_t opt_in_shared_bytes(Kernel) {
    const char* v = std::getenv("EMU_OPTIN");
    return (v ? std::atoi(v) : 227) * 1024 - 1024;
}
template <class Kernel> bool clusters_available(Kernel) {
    const char* v = std::getenv("EMU_CLUSTERS");
    return !v || std::atoi(v) != 0;
}
template <class... Params, class... Args>
void launch_in_clusters(void (*kernel)(Params...), unsigned grid, unsigned block, unsigned cluster,
                        std::size_t shared_bytes, Args... args) {
    emu::Launch<Params...>{kernel, grid, block, cluster, shared_bytes}(args...);
}
}  // namespace course
