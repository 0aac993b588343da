#pragma once
#include "emu.h"
namespace cooperative_groups {
struct cluster_group {
    unsigned num_blocks() const { return emu::current_cluster->blocks.size(); }
    unsigned block_rank() const { return emu::current->home->rank; }
    void sync() const { barrier_arrive(); barrier_wait(); }
    void barrier_arrive() const { emu::cluster_arrive(); }
    void barrier_wait() const { emu::cluster_wait(); }
    template <class T> T* map_shared_rank(T* p, unsigned rank) const { return emu::map_shared_rank(p, rank); }
};
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups
