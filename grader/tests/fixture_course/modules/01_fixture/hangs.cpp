// 01_fixture/hangs: the TODO filled (COURSE_TODO deleted) with a loop that never ends.
#include <chrono>
#include <thread>

#include "hangs.h"

int twice(int) {
    for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}
