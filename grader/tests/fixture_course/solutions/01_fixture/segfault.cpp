// 01_fixture/segfault, solution: what every stub of the fixture should have been.
#include "segfault.h"

int twice(int x) { return 2 * x; }
