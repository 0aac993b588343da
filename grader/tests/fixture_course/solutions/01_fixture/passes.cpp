// 01_fixture/passes, solution: what every stub of the fixture should have been.
#include "passes.h"

int twice(int x) { return 2 * x; }
