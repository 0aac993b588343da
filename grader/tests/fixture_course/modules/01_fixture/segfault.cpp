// 01_fixture/segfault: the TODO filled (COURSE_TODO deleted) with a fatal bug: SIGSEGV.
#include <csignal>

#include "segfault.h"

int twice(int x) {
    std::raise(SIGSEGV);
    return 2 * x;
}
