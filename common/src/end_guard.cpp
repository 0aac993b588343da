#include "end_guard.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "course/buffer.h"
#include "course/check.h"
#include "course/large.h"
#include "course/random.h"

extern char** environ;

namespace course::end_guard {

namespace {

// A probe child exits with this status at its first illegal address: the input it guards faulted.
constexpr int kProbeFaulted = 86;
constexpr const char* kProbeVariable = "COURSE_GUARD_PROBE";
// Where a probe child writes the first store outside an output that a redzone caught.
constexpr const char* kProbeReportVariable = "COURSE_GUARD_PROBE_REPORT";
// A probe child's redzones: wide enough that a store (or a load of an input it does not guard)
// that went past a 64 KB redzone into unmapped memory lands in one, so that only the guarded
// input's end can fault there, and the store shows in the redzone's check.
constexpr std::size_t kProbeRedzoneBytes = std::size_t{8} << 20;
// The payload starts on a 16-byte boundary (float4 and cp.async loads from its start), so up to
// 15 bytes past its end stay mapped: they hold the redzone pattern (buffer.cu) and are checked.
constexpr std::size_t kPayloadAlignment = 16;
// Unmapped space after the mapping: a load up to this far past the end faults.
constexpr std::size_t kUnmappedAfter = std::size_t{2} << 20;

template <class F>
F entry_point(const char* name) {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion(name, &function, 10020, cudaEnableDefault, &found);
#else
    const cudaError_t status = cudaGetDriverEntryPoint(name, &function, cudaEnableDefault, &found);
#endif
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return reinterpret_cast<F>(function);
}

// The driver's virtual memory management, reached through the runtime (the checkers link no
// driver library: they must start, and skip, on a machine without one).
struct Driver {
    PFN_cuMemGetAllocationGranularity_v10020 granularity =
        entry_point<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity");
    PFN_cuMemAddressReserve_v10020 reserve =
        entry_point<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve");
    PFN_cuMemAddressFree_v10020 free = entry_point<PFN_cuMemAddressFree_v10020>("cuMemAddressFree");
    PFN_cuMemCreate_v10020 create = entry_point<PFN_cuMemCreate_v10020>("cuMemCreate");
    PFN_cuMemRelease_v10020 release = entry_point<PFN_cuMemRelease_v10020>("cuMemRelease");
    PFN_cuMemMap_v10020 map = entry_point<PFN_cuMemMap_v10020>("cuMemMap");
    PFN_cuMemUnmap_v10020 unmap = entry_point<PFN_cuMemUnmap_v10020>("cuMemUnmap");
    PFN_cuMemSetAccess_v10020 access = entry_point<PFN_cuMemSetAccess_v10020>("cuMemSetAccess");
    bool available = granularity && reserve && free && create && release && map && unmap && access;
};

// Physical memory on `device`, the GPU the runtime has current (a checker of several GPUs sets
// each in turn).
CUmemAllocationProp properties(int device) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    return prop;
}

// Read and write access for `device` and for every GPU that can reach its memory as a peer (a
// cudaMalloc'd buffer is reachable from a peer once peer access is enabled; memory mapped through
// this API only from the GPUs named here).
std::vector<CUmemAccessDesc> access_for(int device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 1;
    std::vector<CUmemAccessDesc> access;
    for (int other = 0; other < count; ++other) {
        int peer = other == device;
        if (!peer && cudaDeviceCanAccessPeer(&peer, other, device) != cudaSuccess) peer = 0;
        if (!peer) continue;
        CUmemAccessDesc desc{};
        desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        desc.location.id = other;
        desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        access.push_back(desc);
    }
    cudaGetLastError();
    return access;
}

Driver& driver() {
    static Driver instance;
    return instance;
}

std::size_t round_up(std::size_t value, std::size_t multiple) {
    return (value + multiple - 1) / multiple * multiple;
}

struct Tracked {
    std::string name;
};
std::map<const void*, Tracked>& live() {
    static std::map<const void*, Tracked> inputs;
    return inputs;
}

const char* probe_name() { return std::getenv(kProbeVariable); }

// The first store outside an output in this process (note_store_outside), and its test.
struct StoreOutside {
    std::string test, what;
};
std::optional<StoreOutside>& store_outside() {
    static std::optional<StoreOutside> first;
    return first;
}

std::string test_name(const testing::TestInfo& test) {
    return std::string(test.test_suite_name()) + "." + test.name();
}

// What a probe child's run showed: whether it faulted, and the first store outside an output
// that a redzone caught ("" when none).
struct ProbeRun {
    bool faulted = false;
    std::string store_outside;
};

// Runs this checker's test `filter` again in a child, guarding the inputs named `name` only
// ("": none), with wide redzones around every other buffer. Its output goes nowhere; `limit`
// bounds its time.
ProbeRun probe_run(const std::string& filter, const std::string& name,
                   std::chrono::duration<double> limit) {
    char report[] = "/tmp/course-probe-XXXXXX";
    const int report_file = mkstemp(report);
    if (report_file >= 0) close(report_file);
    std::vector<std::string> environment;
    for (char** entry = environ; *entry; ++entry) {
        const std::string text = *entry;
        if (text.rfind(std::string(kProbeVariable), 0) != 0 &&
            text.rfind("GRADER_SEED=", 0) != 0)
            environment.push_back(text);
    }
    environment.push_back(std::string(kProbeVariable) + "=" + name);
    if (report_file >= 0) environment.push_back(std::string(kProbeReportVariable) + "=" + report);
    environment.push_back("GRADER_SEED=" + std::to_string(run_seed()));
    std::vector<std::string> arguments = {"checker", "--gtest_filter=" + filter,
                                          "--gtest_color=no"};
    std::vector<char*> argv, envp;
    for (auto& a : arguments) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : environment) envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    for (int descriptor : {0, 1, 2})
        posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", O_RDWR, 0);
    pid_t child = 0;
    const int started =
        posix_spawn(&child, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ProbeRun run;
    if (started == 0) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        int status = 0;
        bool killed = false;
        while (waitpid(child, &status, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() > deadline) {
                kill(child, SIGKILL);
                waitpid(child, &status, 0);
                killed = true;
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        run.faulted = !killed && WIFEXITED(status) && WEXITSTATUS(status) == kProbeFaulted;
    }
    if (report_file >= 0) {
        std::getline(std::ifstream(report), run.store_outside);
        unlink(report);
    }
    return run;
}

std::string quoted_list(const std::vector<std::string>& names) {
    std::string text;
    for (std::size_t i = 0; i < names.size(); ++i)
        text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + ("`" + names[i] + "`");
    return text;
}

// Which of the live inputs a fault of `test` needs fenced (describe_fault's text).
std::string probe_inputs(const testing::TestInfo& test) {
    std::vector<std::string> names;
    for (const auto& [payload, input] : live())
        if (std::find(names.begin(), names.end(), input.name) == names.end())
            names.push_back(input.name);
    const std::string filter = test_name(test);
    const std::string inputs = quoted_list(names);
    const std::string placed =
        " In the correctness cases every input ends where unmapped memory begins, so a load past "
        "its end (one element, one float4, a row, a tile) faults instead of reading a "
        "neighbour's bytes.";
    // Each child runs the test up to the fault; allow it a few times what that took here.
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const double elapsed_s = static_cast<double>(now_ms - test.result()->start_timestamp()) / 1e3;
    const std::chrono::duration<double> limit(10.0 + 3.0 * elapsed_s);
    const ProbeRun unguarded = probe_run(filter, "", limit);
    if (unguarded.faulted)
        return "\n  the inputs of this case (" + inputs +
               ") end where unmapped memory begins, but the same run faults without that too: an "
               "address far outside every buffer (an index that overflowed or went negative, a "
               "pointer of the wrong buffer). grader sanitize names the line.";
    std::vector<std::string> faulting;
    for (const std::string& name : names)
        if (probe_run(filter, name, limit).faulted) faulting.push_back(name);
    // The run without guarded inputs, its redzones wide, caught a store that went past an
    // output's redzone (and faulted here): name it beside the loads, or alone.
    const std::string& store = unguarded.store_outside;
    if (faulting.empty() && !store.empty())
        return "\n  a store " + store +
               ", past the redzone beside it into memory no buffer holds (a run with wider "
               "redzones caught it). Is there a guard on every store (`if (i < n)`, the rows and "
               "columns of the last tiles)?";
    if (faulting.empty())
        return "\n  probably a load past the end of one of the inputs " + inputs + "." + placed +
               " grader sanitize names the line.";
    return "\n  a load read past the end of the input" +
           std::string(faulting.size() > 1 ? "s " : " ") + quoted_list(faulting) + "." + placed +
           (store.empty() ? std::string(" Is every load guarded like the stores")
                          : " A store also " + store +
                                " (a run with wider redzones caught it). Is every load and store "
                                "guarded") +
           " (`if (i < n)`, the columns of the last column tile, the rows of the last row tile)?";
}

}  // namespace

void note_store_outside(const std::string& what) {
    const auto* test = testing::UnitTest::GetInstance()->current_test_info();
    if (!test || store_outside()) return;
    store_outside() = StoreOutside{test_name(*test), what};
    if (const char* report = std::getenv(kProbeReportVariable); report && probe_name())
        std::ofstream(report) << what;
}

std::size_t redzone_bytes() {
    return probe_name() ? kProbeRedzoneBytes : DeviceAllocation::kRedzoneBytes;
}

std::string describe_fault() {
    if (probe_name()) std::_Exit(kProbeFaulted);  // a probe child: its parent wants to know this
    // Probed once per process: the first illegal address is the learner's, every later one is
    // the same sticky error, and gets the same text (the first may surface where its message is
    // dropped: a buffer's redzone check as it goes). Not in a large case, which holds the
    // machine's large-case lock (a child would wait for it) and says what its fault means itself
    // (course/large.h).
    static std::optional<std::string> described;
    if (described) return *described;
    const auto* test = testing::UnitTest::GetInstance()->current_test_info();
    if (!test || large_case_running()) return "";
    if (store_outside()) {
        described = "\n  earlier in this run (" + store_outside()->test + ") a store " +
                    store_outside()->what +
                    ", caught by the redzone beside it; on a larger shape the same store goes "
                    "past the redzone, into unmapped memory. Is there a guard on every store "
                    "(`if (i < n)`, the rows and columns of the last tiles)?";
        return *described;
    }
    if (live().empty()) return "";
    described = probe_inputs(*test);
    return *described;
}

bool wanted(const std::string& name) {
    if (exact_allocations()) return false;
    const char* probe = probe_name();
    return !probe || name == probe;
}

bool map(std::size_t bytes, std::size_t before, Mapping& out) {
    Driver& d = driver();
    int device = 0;
    // cudaFree(nullptr) makes the runtime's context current first: the driver's calls below need
    // one, and a checker's first buffer may come before any other runtime call that makes it.
    if (!d.available || cudaGetDevice(&device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    const CUmemAllocationProp prop = properties(device);
    std::size_t page = 0;
    if (d.granularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || page == 0)
        return false;
    const std::size_t payload = round_up(bytes, kPayloadAlignment);
    const std::size_t mapped = round_up(before + payload, page);
    const std::size_t reserved = mapped + round_up(kUnmappedAfter, page);
    CUdeviceptr base = 0;
    if (d.reserve(&base, reserved, page, 0, 0) != CUDA_SUCCESS) return false;
    CUmemGenericAllocationHandle handle = 0;
    if (d.create(&handle, mapped, &prop, 0) != CUDA_SUCCESS) {
        d.free(base, reserved);
        return false;
    }
    if (d.map(base, mapped, 0, handle, 0) != CUDA_SUCCESS) {
        d.release(handle);
        d.free(base, reserved);
        return false;
    }
    const std::vector<CUmemAccessDesc> access = access_for(device);
    if (d.access(base, mapped, access.data(), access.size()) != CUDA_SUCCESS) {
        d.unmap(base, mapped);
        d.release(handle);
        d.free(base, reserved);
        return false;
    }
    out = {reinterpret_cast<void*>(base), reserved, mapped, handle,
           reinterpret_cast<void*>(base + mapped - payload)};
    return true;
}

void unmap(const Mapping& mapping) {
    Driver& d = driver();
    const auto base = reinterpret_cast<CUdeviceptr>(mapping.reservation);
    // The GPU may still read it (a kernel of the code under test): wait, as cudaFree does.
    cudaDeviceSynchronize();
    d.unmap(base, mapping.mapped);
    d.release(mapping.handle);
    d.free(base, mapping.reserved);
}

void track(const void* payload, const std::string& name) { live()[payload] = {name}; }
void untrack(const void* payload) { live().erase(payload); }

}  // namespace course::end_guard
