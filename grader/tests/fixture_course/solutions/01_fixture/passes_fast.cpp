// 01_fixture/passes, fast reference: the same result by another route (a shift).
#include "passes.h"

int twice(int x) { return x << 1; }
