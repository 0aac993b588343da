// 01_fixture/no_gpu, solution: what every stub of the fixture should have been.
#include "no_gpu.h"

int twice(int x) { return 2 * x; }
