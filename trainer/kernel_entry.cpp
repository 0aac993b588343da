// trainer/kernel_entry: the one exported function of an exercise's kernel library.
//
// Each exercise that the trainer's exercise tables can call (kernel_ops.toml) is built into a
// shared library of its own, its file and this one (trainer/CMakeLists.txt), compiled with hidden
// symbols: the exercise's kernels and functions bind inside the library, so that five SGEMM rungs,
// the learner's file and the solution of one exercise, or a learner's layernorm and the reference's
// module 06 LayerNorm never meet at link time. The trainer loads the libraries it needs at run
// time (ops_learner.cu) and asks this function for the exercise's contract functions by key
// (exercise_functions.h).
//
// Every contract function is declared weak here: in a library whose exercise defines it, the
// reference binds to that definition; elsewhere a hidden weak reference that nothing defines is
// resolved to null by the linker, and the key answers null.
//
// Build: part of every <module>.<exercise>.<variant>_kernel target (trainer/CMakeLists.txt).
#include <cuda_bf16.h>  // before the hidden section: the toolkit's declarations keep their visibility

#include <cstddef>  // and the standard library's (module 10's headers, exercise_functions.h)
#include <cstring>
#include <type_traits>

#pragma GCC visibility push(hidden)
#include "exercise_functions.h"

#define TRAINER_WEAK_DECLARATION(key, function, type) __attribute__((weak)) type function;
TRAINER_EXERCISE_FUNCTIONS(TRAINER_WEAK_DECLARATION)
#undef TRAINER_WEAK_DECLARATION
#pragma GCC visibility pop

// The address of the contract function named `key` (exercise_functions.h), or null where this
// library's exercise does not define it.
extern "C" __attribute__((visibility("default"))) void* trainer_exercise_function(const char* key) {
#define TRAINER_ENTRY(name, function, type)      \
    if (std::strcmp(key, name) == 0) {           \
        type* address = &function;               \
        return reinterpret_cast<void*>(address); \
    }
    TRAINER_EXERCISE_FUNCTIONS(TRAINER_ENTRY)
#undef TRAINER_ENTRY
    return nullptr;
}
