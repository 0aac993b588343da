// 01_fixture/mismatch: the TODO filled wrongly (COURSE_TODO deleted); the checker reports a fail.
#include "mismatch.h"

int twice(int x) { return x + 2; }
