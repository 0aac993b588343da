// 01_fixture/cuda_error, solution: what every stub of the fixture should have been.
#include "cuda_error.h"

int twice(int x) { return 2 * x; }
