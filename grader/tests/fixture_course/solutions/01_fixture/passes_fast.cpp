// 01_fixture/passes, fast reference: the same result by another route (a shift), and 10% faster
// figures (the checker scales its fixed timed figures by fixture_speedup() where a file defines
// it), so that the fast row shows figures of its own: the stretch.
#include "passes.h"

int twice(int x) { return x << 1; }
double fixture_speedup() { return 1.1; }
