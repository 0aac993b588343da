// 01_fixture/mismatch, solution: what every stub of the fixture should have been.
#include "mismatch.h"

int twice(int x) { return 2 * x; }
