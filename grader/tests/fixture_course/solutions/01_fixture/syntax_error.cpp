// 01_fixture/syntax_error, solution: what every stub of the fixture should have been.
#include "syntax_error.h"

int twice(int x) { return 2 * x; }
