// 01_fixture/hangs, solution: what every stub of the fixture should have been.
#include "hangs.h"

int twice(int x) { return 2 * x; }
